// Per-target kernels (Highway) for rows of f32, f16 and bf16 weights: row dot products (dense
// / output-sparse GEMV) and the row axpy over a transposed matrix (input-sparse). Included by
// kernels-inl.h inside its toggle guard, so foreach_target.h compiles it per target.
// No #pragma once: the toggle guard below lets foreach_target.h re-include this file.

#if defined(ACTSPARSE_CPU_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ACTSPARSE_CPU_ROWS_INL_H_
#undef ACTSPARSE_CPU_ROWS_INL_H_
#else
#define ACTSPARSE_CPU_ROWS_INL_H_
#endif

#include <actsparse/backends/cpu/tuning.hpp>
#include <actsparse/core/dtype.hpp>
#include <actsparse/core/views.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include <hwy/cache_control.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace actsparse::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Loads one vector of f32 from weights stored as T (f32, f16 or bf16).
template <class T, class DF>
HWY_INLINE hn::Vec<DF> load_as_f32(DF df, const T* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(df, p);
  } else if constexpr (std::is_same_v<T, f16>) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  } else {  // bf16: the upper half of an f32, widened by a shift
    const hn::Rebind<std::uint16_t, DF> d16;
    const hn::Rebind<std::uint32_t, DF> d32;
    const auto bits = hn::PromoteTo(d32, hn::LoadU(d16, reinterpret_cast<const std::uint16_t*>(p)));
    return hn::BitCast(df, hn::ShiftLeft<16>(bits));
  }
}

template <class T>
HWY_INLINE float scalar_f32(const T& v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return to_f32(v);
  }
}

// R dot products w_r · x (r < R) in f32, sharing the loads of x across the R rows (R rows
// are R streams read at once, which the prefetchers need to reach the read bandwidth).
// Every row is summed the same way whatever R is and whichever rows share the call: two
// vector accumulators over pairs of whole vectors, one more whole vector into the first,
// then a scalar tail (no masked loads: Highway 1.0.3 emulates them with full loads on some
// targets, which would read past the row). So a row's result depends only on the row,
// x, n and the target: a row gather of every row equals the dense GEMV bit for bit.
// A step reads step_bytes of each row in turn (a0/a1 see the same sequence of vectors as
// pair by pair, so the step never changes a bit), prefetching prefetch_bytes ahead in each
// row, and past a row's end into the row of `next` that comes after it.
template <std::size_t R, class T>
HWY_INLINE void dot_rows(const T* const* HWY_RESTRICT w, const T* const* HWY_RESTRICT next, const float* HWY_RESTRICT x,
                         std::size_t n, float* HWY_RESTRICT out, std::size_t prefetch_bytes, std::size_t step_bytes) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const std::size_t lanes = hn::Lanes(df);
  V a0[R];
  V a1[R];
  for (std::size_t r = 0; r < R; ++r) a0[r] = a1[r] = hn::Zero(df);
  const std::size_t ahead = prefetch_bytes / sizeof(T);
  // One pair of whole vectors of row r at i: the first into a0[r], the second into a1[r].
  const auto pair = [&](std::size_t r, std::size_t i) HWY_ATTR {
    a0[r] = hn::MulAdd(load_as_f32(df, w[r] + i), hn::LoadU(df, x + i), a0[r]);
    a1[r] = hn::MulAdd(load_as_f32(df, w[r] + i + lanes), hn::LoadU(df, x + i + lanes), a1[r]);
  };
  const std::size_t pair_bytes = 2 * lanes * sizeof(T);
  const std::size_t pairs = step_bytes > pair_bytes ? step_bytes / pair_bytes : 1;
  const std::size_t step_values = 2 * lanes * pairs;
  const auto step = [&](std::size_t i, const T* const* pf, std::size_t pf_offset) HWY_ATTR {
    for (std::size_t r = 0; r < R; ++r) {
      const char* p = reinterpret_cast<const char*>(pf[r] + pf_offset);
      for (std::size_t b = 0; b < step_values * sizeof(T); b += 64) hwy::Prefetch(p + b);
      for (std::size_t q = 0; q < pairs; ++q) pair(r, i + 2 * lanes * q);
    }
  };
  std::size_t i = 0;
  for (; i + step_values <= n && i + ahead < n; i += step_values) step(i, w, i + ahead);
  if (next != nullptr) {
    for (; i + step_values <= n; i += step_values) step(i, next, i + ahead - n);
  }
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    for (std::size_t r = 0; r < R; ++r) pair(r, i);
  }
  if (i + lanes <= n) {
    const V x0 = hn::LoadU(df, x + i);
    for (std::size_t r = 0; r < R; ++r) a0[r] = hn::MulAdd(load_as_f32(df, w[r] + i), x0, a0[r]);
    i += lanes;
  }
  for (std::size_t r = 0; r < R; ++r) {
    float total = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0[r], a1[r])));
    for (std::size_t k = i; k < n; ++k)
      total = std::fma(scalar_f32(w[r][k]), x[k], total);  // fixed: no contraction choice
    out[r] = total;
  }
}

// Rows computed together: the streams one thread reads at once. One core needs many
// streams in flight to reach the memory bandwidth; AVX-512 has the registers
// for 8 rows × 2 accumulators, AVX2 and narrower targets take 4.
inline constexpr std::size_t rows_at_once = HWY_MAX_BYTES >= 64 ? 8 : 4;

// Scattered 16-bit rows (a row gather, a sparse row axpy) are read 4 at once with
// kernel_tuning::scattered_prefetch_bytes: the same bytes in flight over fewer rows. Dense
// calls, other dtypes and 4-row targets keep rows_at_once.
inline constexpr std::size_t scattered_rows_at_once = 4;
template <class T>
inline constexpr bool reads_scattered_rows_in_fours = sizeof(T) == 2 && rows_at_once > scattered_rows_at_once;

// y[k] = W[row_k, :] · x for k in [begin, end) in groups of R rows (then 4, then 1), each
// group prefetching the next one's rows; row(k) gives row_k.
template <std::size_t R, class T, class Row>
HWY_INLINE void gemv_groups(const Row& row, std::size_t begin, std::size_t end, const float* HWY_RESTRICT x,
                            std::size_t n, float* HWY_RESTRICT y, std::size_t prefetch_bytes, std::size_t step_bytes) {
  // The rows of the group after k (prefetched while group k is read), or null at the end.
  const auto next_group = [&](std::size_t k, const T** out) {
    if (k + R > end) return static_cast<const T* const*>(nullptr);
    for (std::size_t r = 0; r < R; ++r) out[r] = row(k + r);
    return static_cast<const T* const*>(out);
  };
  std::size_t k = begin;
  const T* group[R];
  const T* following[R];
  for (; k + R <= end; k += R) {
    for (std::size_t r = 0; r < R; ++r) group[r] = row(k + r);
    dot_rows<R, T>(group, next_group(k + R, following), x, n, y + k, prefetch_bytes, step_bytes);
  }
  if constexpr (R > 4) {
    if (k + 4 <= end) {
      for (std::size_t r = 0; r < 4; ++r) group[r] = row(k + r);
      dot_rows<4>(group, static_cast<const T* const*>(nullptr), x, n, y + k, prefetch_bytes, step_bytes);
      k += 4;
    }
  }
  for (; k < end; ++k) {
    group[0] = row(k);
    dot_rows<1>(group, static_cast<const T* const*>(nullptr), x, n, y + k, prefetch_bytes, step_bytes);
  }
}

// y[k] = W[row_k, :] · x for k in [begin, end), row_k = rows ? rows[k] : k. Every row's sum
// is the same whatever the group size, so the scattered grouping changes no bit.
template <class T>
HWY_NOINLINE void gemv_range(const weight_view& w, const std::uint32_t* rows, std::size_t begin, std::size_t end,
                             const float* HWY_RESTRICT x, float* HWY_RESTRICT y, const kernel_tuning& t) {
  const auto* base = static_cast<const std::byte*>(w.data);
  const auto row = [&](std::size_t k) {
    const std::size_t r = rows != nullptr ? rows[k] : k;
    return reinterpret_cast<const T*>(base + r * w.row_stride);
  };
  const std::size_t step = sizeof(T) >= 4 ? t.row_step_bytes_f32 : t.row_step_bytes_16bit;
  if constexpr (reads_scattered_rows_in_fours<T>) {
    if (rows != nullptr) {
      return gemv_groups<scattered_rows_at_once, T>(row, begin, end, x, w.cols, y, t.scattered_prefetch_bytes, step);
    }
  }
  gemv_groups<rows_at_once, T>(row, begin, end, x, w.cols, y, t.prefetch_bytes, step);
}

// Several tokens at once (prefill, the grouped MoE experts): y_t[k] = W[k, :] · x_t for the
// rows k in [begin, end) and the tokens t < count. R rows × TK tokens share each load: the
// weight vectors are loaded (and widened) once for TK tokens, the x vectors once for R rows.
// Every (row, token) sum is dot_rows's, step for step: a0 over the even vectors of each pair,
// a1 over the odd ones, one more whole vector into a0, SumOfLanes(a0 + a1), then the scalar
// tail with std::fma: so it equals gemv_range of that row and token bit for bit.
template <std::size_t R, std::size_t TK, class T>
HWY_INLINE void dot_rows_tokens(const T* const* HWY_RESTRICT w, const float* const* HWY_RESTRICT x, std::size_t n,
                                float* const* HWY_RESTRICT out, std::size_t k) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const std::size_t lanes = hn::Lanes(df);
  V a0[R][TK];
  V a1[R][TK];
  for (std::size_t r = 0; r < R; ++r) {
    for (std::size_t t = 0; t < TK; ++t) a0[r][t] = a1[r][t] = hn::Zero(df);
  }
  std::size_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    V wa[R];
    V wb[R];
    for (std::size_t r = 0; r < R; ++r) {
      wa[r] = load_as_f32(df, w[r] + i);
      wb[r] = load_as_f32(df, w[r] + i + lanes);
    }
    for (std::size_t t = 0; t < TK; ++t) {
      const V xa = hn::LoadU(df, x[t] + i);
      const V xb = hn::LoadU(df, x[t] + i + lanes);
      for (std::size_t r = 0; r < R; ++r) {
        a0[r][t] = hn::MulAdd(wa[r], xa, a0[r][t]);
        a1[r][t] = hn::MulAdd(wb[r], xb, a1[r][t]);
      }
    }
  }
  if (i + lanes <= n) {
    for (std::size_t r = 0; r < R; ++r) {
      const V wa = load_as_f32(df, w[r] + i);
      for (std::size_t t = 0; t < TK; ++t) a0[r][t] = hn::MulAdd(wa, hn::LoadU(df, x[t] + i), a0[r][t]);
    }
    i += lanes;
  }
  for (std::size_t r = 0; r < R; ++r) {
    for (std::size_t t = 0; t < TK; ++t) {
      float total = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0[r][t], a1[r][t])));
      for (std::size_t c = i; c < n; ++c) total = std::fma(scalar_f32(w[r][c]), x[t][c], total);
      out[t][k + r] = total;
    }
  }
}

// Tokens per pass and rows per pass of the multi-token GEMV: 2 rows × 4 tokens hold 16
// accumulator pairs' halves plus 4 weight and 2 x vectors in AVX-512's 32 registers; 2 × 2 on
// narrower targets (16 registers).
inline constexpr std::size_t gemm_tokens = HWY_MAX_BYTES >= 64 ? 4 : 2;
inline constexpr std::size_t gemm_rows_at_once = 2;

// y[t][k] = W[k, :] · x[t] for k in [begin, end), t < count (f32, f16, bf16 rows).
template <class T>
HWY_NOINLINE void gemm_range(const weight_view& w, const std::uint32_t* rows, std::size_t begin, std::size_t end,
                             const float* const* x, std::size_t count, float* const* y) {
  const auto* base = static_cast<const std::byte*>(w.data);
  const auto row = [&](std::size_t k) {
    return reinterpret_cast<const T*>(base + (rows != nullptr ? rows[k] : k) * w.row_stride);
  };
  const auto rows_for = [&]<std::size_t TK>(const float* const* xt, float* const* yt) {
    const T* group[gemm_rows_at_once];
    std::size_t k = begin;
    for (; k + gemm_rows_at_once <= end; k += gemm_rows_at_once) {
      for (std::size_t r = 0; r < gemm_rows_at_once; ++r) group[r] = row(k + r);
      dot_rows_tokens<gemm_rows_at_once, TK, T>(group, xt, w.cols, yt, k);
    }
    for (; k < end; ++k) {
      group[0] = row(k);
      dot_rows_tokens<1, TK, T>(group, xt, w.cols, yt, k);
    }
  };
  std::size_t t = 0;
  for (; t + gemm_tokens <= count; t += gemm_tokens) rows_for.template operator()<gemm_tokens>(x + t, y + t);
  for (; t < count; ++t) rows_for.template operator()<1>(x + t, y + t);
}

// The row axpy's register tile: bytes of each row per step of a sweep (S output vectors held
// in registers; a compile-time shape, unlike the GEMV's run-time step).
template <class T>
inline constexpr std::size_t axpy_tile_bytes = sizeof(T) >= 4 ? 256 : 512;

// One sweep of R rows over the n outputs: out[c] = fma(w_{R-1}[c], coef_{R-1}, ... fma(w_0[c],
// coef_0, out[c])), rows in order. A step holds S output vectors in registers and reads S
// vectors of each row in turn (a run of axpy_tile_bytes per row, as in dot_rows; each output
// still sees the rows in order, so S never changes a bit). `next` (R rows, or null) is
// prefetched once this sweep's own rows are covered.
template <std::size_t R, class T>
HWY_INLINE void axpy_sweep(const T* const* HWY_RESTRICT w, const float* coef, const T* const* HWY_RESTRICT next,
                           std::size_t n, float* HWY_RESTRICT out, std::size_t prefetch_bytes) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const std::size_t lanes = hn::Lanes(df);
  // S vectors of outputs per step: axpy_tile_bytes of T per row, within the register file
  // (R broadcasts + S accumulators: 32 vector registers on AVX-512, 16 on narrower targets).
  constexpr std::size_t max_lanes = HWY_MAX_BYTES / sizeof(float);
  constexpr std::size_t by_bytes = axpy_tile_bytes<T> / (max_lanes * sizeof(T));
  constexpr std::size_t by_registers = HWY_MAX_BYTES >= 64 ? 16 : 4;
  constexpr std::size_t S = by_bytes < 1 ? 1 : (by_bytes > by_registers ? by_registers : by_bytes);
  V v[R];
  for (std::size_t r = 0; r < R; ++r) v[r] = hn::Set(df, coef[r]);
  const std::size_t ahead = prefetch_bytes / sizeof(T);
  const std::size_t step_values = S * lanes;
  const auto step = [&](std::size_t c, const T* const* pf, std::size_t pf_offset) HWY_ATTR {
    V acc[S];
    for (std::size_t s = 0; s < S; ++s) acc[s] = hn::LoadU(df, out + c + s * lanes);
    for (std::size_t r = 0; r < R; ++r) {
      if (pf != nullptr) {
        const char* p = reinterpret_cast<const char*>(pf[r] + pf_offset);
        for (std::size_t b = 0; b < step_values * sizeof(T); b += 64) hwy::Prefetch(p + b);
      }
      for (std::size_t s = 0; s < S; ++s) acc[s] = hn::MulAdd(load_as_f32(df, w[r] + c + s * lanes), v[r], acc[s]);
    }
    for (std::size_t s = 0; s < S; ++s) hn::StoreU(acc[s], df, out + c + s * lanes);
  };
  const auto one = [&](std::size_t c) HWY_ATTR {
    V acc = hn::LoadU(df, out + c);
    for (std::size_t r = 0; r < R; ++r) acc = hn::MulAdd(load_as_f32(df, w[r] + c), v[r], acc);
    hn::StoreU(acc, df, out + c);
  };
  std::size_t c = 0;
  for (; c + step_values <= n && c + ahead < n; c += step_values) step(c, w, c + ahead);
  if (next != nullptr) {
    for (; c + step_values <= n; c += step_values) step(c, next, c + ahead - n);
  }
  for (; c + lanes <= n; c += lanes) one(c);
  for (; c < n; ++c) {
    float acc = out[c];
    for (std::size_t r = 0; r < R; ++r) acc = std::fma(scalar_f32(w[r][c]), coef[r], acc);
    out[c] = acc;
  }
}

// y[c] = Σ_{j} coef[j] · Wt[row_j, c] for c in [col_begin, col_end), rows j = rows ? rows[k] :
// k for k < count, in that order. Every output element is the chain acc = fma(Wt[j, c],
// coef_j, acc) over j in order from acc = 0, whatever the target or the column split: the
// same chain as the reference's input-sparse linear, so the two agree bit for bit on targets
// with a fused multiply-add (see fused_multiply_add). The backend calls this once per chunk
// of Wt's rows and adds the chunk sums (cpu::axpy_all_columns); one chunk below 2048 rows.
template <class T>
HWY_NOINLINE void axpy_range(const weight_view& wt, const std::uint32_t* rows, std::size_t count,
                             const float* HWY_RESTRICT coef, std::size_t col_begin, std::size_t col_end,
                             float* HWY_RESTRICT y, const kernel_tuning& t) {
  const auto* base = static_cast<const std::byte*>(wt.data);
  float* HWY_RESTRICT out = y + col_begin;
  const std::size_t n = col_end - col_begin;
  for (std::size_t c = 0; c < n; ++c) out[c] = 0.0F;
  const auto gather = [&](std::size_t k, std::size_t r_count, const T** w, float* c) {
    for (std::size_t r = 0; r < r_count; ++r) {
      const std::size_t j = rows != nullptr ? rows[k + r] : k + r;
      w[r] = reinterpret_cast<const T*>(base + j * wt.row_stride) + col_begin;
      c[r] = coef[j];
    }
  };
  // R rows per sweep: R streams, and one load and store of the outputs per R multiply-adds;
  // each output still takes the rows one after another, in order, so R changes no bit.
  const auto sweeps = [&]<std::size_t R>(std::size_t prefetch_bytes) {
    const T* w[R];
    const T* following[R];
    float c[R];
    float unused[R];
    std::size_t k = 0;
    for (; k + R <= count; k += R) {
      gather(k, R, w, c);
      const bool more = k + 2 * R <= count;
      if (more) gather(k + R, R, following, unused);
      axpy_sweep<R, T>(w, c, more ? following : static_cast<const T* const*>(nullptr), n, out, prefetch_bytes);
    }
    for (; k < count; ++k) {
      gather(k, 1, w, c);
      axpy_sweep<1>(w, c, static_cast<const T* const*>(nullptr), n, out, prefetch_bytes);
    }
  };
  if constexpr (reads_scattered_rows_in_fours<T>) {
    if (rows != nullptr) return sweeps.template operator()<scattered_rows_at_once>(t.scattered_prefetch_bytes);
  }
  sweeps.template operator()<rows_at_once>(t.prefetch_bytes);
}

// Several tokens at once (prefill, the grouped MoE experts' down projection): y_t[c] = s_0[c] +
// s_1[c] + ... for c in [col_begin, col_end) and t < count, s_k[c] the chain acc =
// fma(Wt[j, c], coef_t[j], acc) from 0 over the rows j in [first[k], first[k + 1]) in order
// (chunks of rows, as cpu::axpy_chunks_in_columns: y = s_0, then y += s_1, ...). A step holds
// S output vectors of TK tokens in registers for a whole chunk: each weight vector is loaded
// (and widened) once for TK tokens, and the outputs are not reloaded per row. Every output
// sees axpy_range's chain, so each token's y equals its per-token row axpy bit for bit.
// Tokens per pass: axpy_tokens_at_once (block-inl.h).

template <std::size_t S, std::size_t TK, class T>
HWY_INLINE void axpy_tokens_step(const T* HWY_RESTRICT w0, std::size_t row_stride, const std::uint32_t* rows,
                                 const std::size_t* first, std::size_t chunks, const float* const* HWY_RESTRICT coef,
                                 std::size_t c, float* const* HWY_RESTRICT y) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const std::size_t lanes = hn::Lanes(df);
  for (std::size_t k = 0; k < chunks; ++k) {
    V acc[TK][S];
    for (std::size_t t = 0; t < TK; ++t) {
      for (std::size_t s = 0; s < S; ++s) acc[t][s] = hn::Zero(df);
    }
    for (std::size_t p = first[k]; p < first[k + 1]; ++p) {
      const std::size_t j = rows != nullptr ? rows[p] : p;
      const T* wj = reinterpret_cast<const T*>(reinterpret_cast<const std::byte*>(w0) + j * row_stride) + c;
      V wv[S];
      for (std::size_t s = 0; s < S; ++s) wv[s] = load_as_f32(df, wj + s * lanes);
      for (std::size_t t = 0; t < TK; ++t) {
        const V ct = hn::Set(df, coef[t][j]);
        for (std::size_t s = 0; s < S; ++s) acc[t][s] = hn::MulAdd(wv[s], ct, acc[t][s]);
      }
    }
    for (std::size_t t = 0; t < TK; ++t) {
      for (std::size_t s = 0; s < S; ++s) {
        float* const o = y[t] + c + s * lanes;
        hn::StoreU(k == 0 ? acc[t][s] : hn::Add(hn::LoadU(df, o), acc[t][s]), df, o);
      }
    }
  }
}

template <class T>
HWY_NOINLINE void axpy_tokens_range(const weight_view& wt, const std::uint32_t* rows, const std::size_t* first,
                                    std::size_t chunks, const float* const* coef, std::size_t count,
                                    std::size_t col_begin, std::size_t col_end, float* const* y) {
  const hn::ScalableTag<float> df;
  const std::size_t lanes = hn::Lanes(df);
  constexpr std::size_t S = 4;  // TK x S accumulators + S weight vectors within the register file
  const T* const w0 = static_cast<const T*>(wt.data);
  const auto tokens = [&]<std::size_t TK>(const float* const* ct, float* const* yt) {
    std::size_t c = col_begin;
    for (; c + S * lanes <= col_end; c += S * lanes)
      axpy_tokens_step<S, TK>(w0, wt.row_stride, rows, first, chunks, ct, c, yt);
    for (; c + lanes <= col_end; c += lanes) axpy_tokens_step<1, TK>(w0, wt.row_stride, rows, first, chunks, ct, c, yt);
    for (; c < col_end; ++c) {
      for (std::size_t t = 0; t < TK; ++t) {
        for (std::size_t k = 0; k < chunks; ++k) {
          float acc = 0.0F;
          for (std::size_t p = first[k]; p < first[k + 1]; ++p) {
            const std::size_t j = rows != nullptr ? rows[p] : p;
            const T* wj = reinterpret_cast<const T*>(reinterpret_cast<const std::byte*>(w0) + j * wt.row_stride);
            acc = std::fma(scalar_f32(wj[c]), ct[t][j], acc);
          }
          yt[t][c] = k == 0 ? acc : yt[t][c] + acc;
        }
      }
    }
  };
  std::size_t t = 0;
  for (; t + axpy_tokens_at_once <= count; t += axpy_tokens_at_once) {
    tokens.template operator()<axpy_tokens_at_once>(coef + t, y + t);
  }
  for (; t < count; ++t) tokens.template operator()<1>(coef + t, y + t);
}

// Whether this target's MulAdd is one fused rounding (AVX2, AVX3, NEON, ...). Where it is
// not (SSE4, SSSE3, SCALAR) products are rounded before the add, and the row axpy agrees
// with the reference within the f32 bound instead of bit for bit.
inline bool fused_multiply_add() { return HWY_NATIVE_FMA != 0; }

}  // namespace actsparse::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // toggle guard
