// Per-target kernels (Highway) for the ggml block types q8_0 and q4_0 (32 values and one f16
// scale d per block, core/dtype.hpp) with f32 activations: row dot products (dense / row
// gather GEMV) and row axpy over a transposed block matrix (input-sparse linear). Blocks are
// dequantized in registers: int8 or nibble -> f32 (exact), d f16 -> f32 (exact, a table).
// Included by kernels-inl.h inside its toggle guard, so foreach_target.h compiles it per target.
// No #pragma once: the toggle guard below lets foreach_target.h re-include this file.

#if defined(ACTSPARSE_CPU_BLOCK_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ACTSPARSE_CPU_BLOCK_INL_H_
#undef ACTSPARSE_CPU_BLOCK_INL_H_
#else
#define ACTSPARSE_CPU_BLOCK_INL_H_
#endif

#include <actsparse/backends/cpu/f16_table.hpp>
#include <actsparse/backends/cpu/tuning.hpp>
#include <actsparse/core/dtype.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/views.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <utility>

#include <hwy/highway.h>
#if HWY_ARCH_X86
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace actsparse::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Vectors of at most 16 f32 lanes: 1, 4, 8 or 16 on every x86 target, which divide the 32
// values of a block and its 16 low / 16 high nibbles of q4_0.
using block_tag = hn::CappedTag<float, 16>;
inline constexpr std::size_t values_per_block = 32;
inline constexpr std::size_t half_block = values_per_block / 2;

// Tokens per pass of the multi-token row axpys (axpy_tokens_range here and in rows-inl.h):
// their accumulators and one row's weight vectors within the register file.
inline constexpr std::size_t axpy_tokens_at_once = HWY_MAX_BYTES >= 64 ? 4 : 2;

template <class B>
inline constexpr bool is_block_type = std::is_same_v<B, block_q8_0> || std::is_same_v<B, block_q4_0>;

// Starts loading the cache line of p into the caches (a hint; never faults).
HWY_INLINE void prefetch_line(const void* p) { __builtin_prefetch(p, 0, 3); }

// Values [offset, offset + lanes) of a q8_0 block as f32 (the integers qs[i], not scaled).
template <class DF>
HWY_INLINE hn::Vec<DF> q8_values(DF df, const block_q8_0* HWY_RESTRICT b, std::size_t offset) {
  const hn::Rebind<std::int8_t, DF> d8;
  const hn::RebindToSigned<DF> di;
  return hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, b->qs + offset)));
}

// 16 f32 lanes (AVX-512): a q4_0 nibble n indexes its value in a vector of the 16 values a
// block can hold (one permute per 16 values, faster than a subtraction and a conversion).
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
inline constexpr bool q4_by_table = true;
#else
inline constexpr bool q4_by_table = false;
#endif

// The nibbles of a q4_0 block's bytes [offset, offset + lanes): the low ones (values
// [offset, ..)) and the high ones (values [16 + offset, ..)), as signed 32-bit lanes.
template <class DF>
HWY_INLINE void q4_nibbles(DF /*df*/, const std::uint8_t* HWY_RESTRICT qs, std::size_t offset,
                           hn::Vec<hn::RebindToSigned<DF>>& low, hn::Vec<hn::RebindToSigned<DF>>& high) {
  const hn::Rebind<std::uint8_t, DF> d8;
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto bytes = hn::PromoteTo(du, hn::LoadU(d8, qs + offset));
  low = hn::BitCast(di, hn::And(bytes, hn::Set(du, 0x0FU)));
  high = hn::BitCast(di, hn::ShiftRight<4>(bytes));
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
}  // namespace actsparse::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
#include <actsparse/backends/cpu/x86/block_avx512-inl.h>
HWY_BEFORE_NAMESPACE();
namespace actsparse::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
#endif

// Values [offset, offset + lanes) (the low nibbles n of qs[offset ..]) and [16 + offset, 16 +
// offset + lanes) (their high nibbles) of the 16 bytes of a q4_0 block's quants as f32
// nibble − 8, exact, not scaled.
template <class DF>
HWY_INLINE void q4_values(DF df, const std::uint8_t* HWY_RESTRICT qs, std::size_t offset, hn::Vec<DF>& lo,
                          hn::Vec<DF>& hi) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  (void)offset;  // 16 lanes: always 0
  q4_lookup_bytes(hn::Iota(df, -8.0F), qs, lo, hi);
#else
  hn::Vec<hn::RebindToSigned<DF>> low;
  hn::Vec<hn::RebindToSigned<DF>> high;
  q4_nibbles(df, qs, offset, low, high);
  const auto eight = hn::Set(hn::RebindToSigned<DF>(), 8);
  lo = hn::ConvertTo(df, hn::Sub(low, eight));
  hi = hn::ConvertTo(df, hn::Sub(high, eight));
#endif
}
template <class DF>
HWY_INLINE void q4_values(DF df, const block_q4_0* HWY_RESTRICT b, std::size_t offset, hn::Vec<DF>& lo,
                          hn::Vec<DF>& hi) {
  q4_values(df, b->qs, offset, lo, hi);
}

// acc[r] += d_r · Σ_i q_r[i] · xb[i] over the 32 values of block b of each row r < R. The
// block's products are summed lane-wise in a fixed order per target, then scaled once.
template <std::size_t R, class B, class V>
HWY_INLINE void dot_block(const B* const* HWY_RESTRICT w, std::size_t b, const float* HWY_RESTRICT xb,
                          const float* HWY_RESTRICT scales, V* acc) {
  const block_tag df;
  const std::size_t lanes = hn::Lanes(df);
  V sum[R];
  if constexpr (std::is_same_v<B, block_q8_0>) {
    const V x0 = hn::LoadU(df, xb);
    for (std::size_t r = 0; r < R; ++r) sum[r] = hn::Mul(q8_values(df, w[r] + b, 0), x0);
    for (std::size_t o = lanes; o < values_per_block; o += lanes) {
      const V xv = hn::LoadU(df, xb + o);
      for (std::size_t r = 0; r < R; ++r) sum[r] = hn::MulAdd(q8_values(df, w[r] + b, o), xv, sum[r]);
    }
  } else {
    const V xlo0 = hn::LoadU(df, xb);
    const V xhi0 = hn::LoadU(df, xb + half_block);
    for (std::size_t r = 0; r < R; ++r) {
      V lo;
      V hi;
      q4_values(df, w[r] + b, 0, lo, hi);
      sum[r] = hn::MulAdd(hi, xhi0, hn::Mul(lo, xlo0));
    }
    for (std::size_t o = lanes; o < half_block; o += lanes) {
      const V xlo = hn::LoadU(df, xb + o);
      const V xhi = hn::LoadU(df, xb + half_block + o);
      for (std::size_t r = 0; r < R; ++r) {
        V lo;
        V hi;
        q4_values(df, w[r] + b, o, lo, hi);
        sum[r] = hn::MulAdd(hi, xhi, hn::MulAdd(lo, xlo, sum[r]));
      }
    }
  }
  for (std::size_t r = 0; r < R; ++r) acc[r] = hn::MulAdd(sum[r], hn::Set(df, scales[w[r][b].d.bits]), acc[r]);
}

// out[r] = w_r · x for R block rows of `blocks` blocks each, sharing the loads of x (R
// streams at once). Blocks alternate between two accumulators per row. A row's result
// depends only on the row, x, blocks and the target, not on R or the other rows: a row
// gather of every row equals the dense GEMV bit for bit. `next` (R rows, or null) are the
// rows of the next call, prefetched along (rows of a few KiB are too short for the hardware
// prefetchers to ramp up on).
template <std::size_t R, class B>
HWY_INLINE void dot_block_rows(const B* const* HWY_RESTRICT w, const B* const* next, const float* HWY_RESTRICT x,
                               std::size_t blocks, const float* HWY_RESTRICT scales, float* HWY_RESTRICT out) {
  const block_tag df;
  using V = hn::Vec<block_tag>;
  V a0[R];
  V a1[R];
  for (std::size_t r = 0; r < R; ++r) a0[r] = a1[r] = hn::Zero(df);
  std::size_t b = 0;
  for (; b + 2 <= blocks; b += 2) {
    if (next != nullptr) {  // two blocks: 68 bytes of q8_0 (two lines), 36 of q4_0 (one)
      for (std::size_t r = 0; r < R; ++r) {
        prefetch_line(next[r] + b);
        if constexpr (2 * sizeof(B) > 64) prefetch_line(next[r] + b + 1);
      }
    }
    dot_block<R>(w, b, x + b * values_per_block, scales, a0);
    dot_block<R>(w, b + 1, x + (b + 1) * values_per_block, scales, a1);
  }
  if (b < blocks) dot_block<R>(w, b, x + b * values_per_block, scales, a0);
  for (std::size_t r = 0; r < R; ++r) out[r] = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0[r], a1[r])));
}

// Block rows computed together (GEMV) or per sweep (axpy): eight streams per thread where 32
// vector registers hold their state (AVX-512), else four.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
inline constexpr std::size_t block_rows_at_once = 8;
#else
inline constexpr std::size_t block_rows_at_once = 4;
#endif

// y[k] = W[row_k, :] · x for k in [begin, end), row_k = rows ? rows[k] : k; W of q8_0 / q4_0
// (w.cols a multiple of 32: validate() checked it).
template <class B>
HWY_NOINLINE void gemv_block_range(const weight_view& w, const std::uint32_t* rows, std::size_t begin, std::size_t end,
                                   const float* HWY_RESTRICT x, float* HWY_RESTRICT y, const kernel_tuning& /*t*/) {
  static_assert(is_block_type<B>);
  const auto* base = static_cast<const std::byte*>(w.data);
  const std::size_t blocks = w.cols / values_per_block;
  const float* scales = f16_to_f32_table();
  const auto row = [&](std::size_t k) {
    const std::size_t r = rows != nullptr ? rows[k] : k;
    return reinterpret_cast<const B*>(base + r * w.row_stride);
  };
  constexpr std::size_t R = block_rows_at_once;
  std::size_t k = begin;
  for (; k + R <= end; k += R) {
    const B* group[R];
    for (std::size_t r = 0; r < R; ++r) group[r] = row(k + r);
    const B* next[R] = {};
    const bool more = k + 2 * R <= end;
    if (more) {
      for (std::size_t r = 0; r < R; ++r) next[r] = row(k + R + r);
    }
    dot_block_rows<R>(group, more ? next : nullptr, x, blocks, scales, y + k);
  }
  for (; k < end; ++k) {
    const B* one[1] = {row(k)};
    dot_block_rows<1>(one, static_cast<const B* const*>(nullptr), x, blocks, scales, y + k);
  }
}

// out[0 .. 32·blocks) += Σ_r coef[r] · W_r over R block rows (in the order r = 0, 1, ...).
// Every output takes w = float(q)·d (one rounded product, as core's dequantize) and then
// acc = fma(w, coef_r, acc), row after row: the reference's chain. `ahead` (R rows, or null)
// are rows read a few calls later, prefetched along.
template <std::size_t R, class B>
HWY_INLINE void axpy_block_rows(const B* const* HWY_RESTRICT w, const B* const* ahead, const float* coef,
                                std::size_t blocks, const float* HWY_RESTRICT scales, float* HWY_RESTRICT out) {
  const block_tag df;
  using V = hn::Vec<block_tag>;
  const std::size_t lanes = hn::Lanes(df);
  V c[R];
  for (std::size_t r = 0; r < R; ++r) c[r] = hn::Set(df, coef[r]);
  constexpr std::size_t prefetch_every = 64 / sizeof(B);  // blocks per line, rounded down: no line skipped
  for (std::size_t b = 0; b < blocks; ++b) {
    if (ahead != nullptr && b % prefetch_every == 0) {
      for (std::size_t r = 0; r < R; ++r) prefetch_line(ahead[r] + b);
    }
    float* HWY_RESTRICT ob = out + b * values_per_block;
    // d per row, or (q4_0 by table) the 16 values (n − 8)·d of its block: exact products (a
    // 4-bit integer times an f16 value fits f32), the same bits as scaling after the lookup,
    // and one multiply per row and block instead of two.
    V d[R];
    for (std::size_t r = 0; r < R; ++r) d[r] = hn::Set(df, scales[w[r][b].d.bits]);
    constexpr bool scaled_table = std::is_same_v<B, block_q4_0> && q4_by_table;
    if constexpr (scaled_table) {
      for (std::size_t r = 0; r < R; ++r) d[r] = hn::Mul(hn::Iota(df, -8.0F), d[r]);
    }
    // Outputs [o, o + lanes) and [16 + o, 16 + o + lanes) together: one load of q4_0 bytes
    // gives both (low and high nibbles).
    for (std::size_t o = 0; o < half_block; o += lanes) {
      V lo = hn::LoadU(df, ob + o);
      V hi = hn::LoadU(df, ob + half_block + o);
      for (std::size_t r = 0; r < R; ++r) {
        if constexpr (scaled_table) {  // the weights themselves, looked up (16 lanes: o = 0)
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
          V wlo;
          V whi;
          q4_lookup(d[r], w[r] + b, wlo, whi);
          lo = hn::MulAdd(wlo, c[r], lo);
          hi = hn::MulAdd(whi, c[r], hi);
#endif
        } else {
          V qlo;
          V qhi;
          if constexpr (std::is_same_v<B, block_q8_0>) {
            qlo = q8_values(df, w[r] + b, o);
            qhi = q8_values(df, w[r] + b, half_block + o);
          } else {
            q4_values(df, w[r] + b, o, qlo, qhi);
          }
          lo = hn::MulAdd(hn::Mul(qlo, d[r]), c[r], lo);
          hi = hn::MulAdd(hn::Mul(qhi, d[r]), c[r], hi);
        }
      }
      hn::StoreU(lo, df, ob + o);
      hn::StoreU(hi, df, ob + half_block + o);
    }
  }
}

[[noreturn]] HWY_NOINLINE inline void fail_block_columns(std::size_t col_begin, std::size_t col_end) {
  std::string range = "[";  // built by appends (GCC 12 warns falsely, -Wrestrict, on operator+ chains)
  range.append(std::to_string(col_begin)).append(", ").append(std::to_string(col_end)).append(")");
  actsparse::detail::fail_described("cpu::axpy_rows", "[col_begin, col_end)", std::move(range),
                                    "a column range of whole 32-value blocks for q8_0 / q4_0 (both ends multiples "
                                    "of 32, col_begin <= col_end)");
}

// y[c] = Σ_j coef[j] · Wt[j, c] for c in [col_begin, col_end), rows j = rows ? rows[k] : k for
// k < count, in that order; Wt of q8_0 / q4_0. col_begin and col_end must be multiples of 32
// (whole blocks; the backend splits the columns so). Every output is the chain acc =
// fma(float(q)·d, coef_j, acc) over j in order from acc = 0: the reference's transposed
// linear, bit for bit where MulAdd is fused (per chunk of rows: cpu::axpy_all_columns).
// block_rows_at_once rows per sweep; the rows of a later sweep, block_axpy_prefetch_bytes
// ahead, are prefetched (a row's share of a column range is a few hundred bytes: the hardware
// prefetchers do not see it coming).
template <class B>
HWY_NOINLINE void axpy_block_range(const weight_view& wt, const std::uint32_t* rows, std::size_t count,
                                   const float* HWY_RESTRICT coef, std::size_t col_begin, std::size_t col_end,
                                   float* HWY_RESTRICT y, const kernel_tuning& t) {
  static_assert(is_block_type<B>);
  if (col_begin % values_per_block != 0 || col_end % values_per_block != 0 || col_begin > col_end) {
    fail_block_columns(col_begin, col_end);
  }
  const auto* base = static_cast<const std::byte*>(wt.data);
  const std::size_t first = col_begin / values_per_block;
  const std::size_t blocks = (col_end - col_begin) / values_per_block;
  const float* scales = f16_to_f32_table();
  float* HWY_RESTRICT out = y + col_begin;
  for (std::size_t c = 0; c < col_end - col_begin; ++c) out[c] = 0.0F;
  const auto row = [&](std::size_t k) {
    const std::size_t j = rows != nullptr ? rows[k] : k;
    return reinterpret_cast<const B*>(base + j * wt.row_stride) + first;
  };
  const auto coef_of = [&](std::size_t k) { return coef[rows != nullptr ? rows[k] : k]; };
  constexpr std::size_t R = block_rows_at_once;
  const std::size_t prefetch_bytes = t.block_axpy_prefetch_bytes;
  const std::size_t sweep_bytes = R * blocks * sizeof(B);
  const std::size_t sweeps_ahead = sweep_bytes == 0 ? 1 : (prefetch_bytes + sweep_bytes - 1) / sweep_bytes;
  std::size_t k = 0;
  for (; k + R <= count; k += R) {
    const B* group[R];
    float coefs[R];
    for (std::size_t r = 0; r < R; ++r) {
      group[r] = row(k + r);
      coefs[r] = coef_of(k + r);
    }
    const std::size_t later = k + sweeps_ahead * R;
    const B* ahead[R] = {};
    const bool prefetch = later + R <= count;
    if (prefetch) {
      for (std::size_t r = 0; r < R; ++r) ahead[r] = row(later + r);
    }
    axpy_block_rows<R>(group, prefetch ? ahead : nullptr, coefs, blocks, scales, out);
  }
  for (; k < count; ++k) {
    const B* one[1] = {row(k)};
    const float cj = coef_of(k);
    axpy_block_rows<1>(one, static_cast<const B* const*>(nullptr), &cj, blocks, scales, out);
  }
}

// Several tokens at once on q8_0 / q4_0 rows (the grouped MoE experts' down projection): y_t[c]
// = s_0[c] + s_1[c] + ... for c in [col_begin, col_end) (whole blocks) and t < count, s_k the
// chain acc = fma(float(q)·d, coef_t[j], acc) from 0 over the rows j of chunk k (first[k] ..
// first[k + 1], or the rows listed at those positions of `rows`) in order: axpy_block_range's operations for each token
// (its weights are exact products, however decoded), so each token's y equals its per-token row axpy bit for bit. A
// step decodes 2 blocks of a row once for TK tokens, whose outputs stay in registers.
template <std::size_t NB, std::size_t TK, class B>
HWY_INLINE void axpy_block_tokens_step(const B* HWY_RESTRICT w0, std::size_t row_stride, const std::uint32_t* rows,
                                       const std::size_t* first, std::size_t chunks,
                                       const float* const* HWY_RESTRICT coef, std::size_t b0,
                                       const float* HWY_RESTRICT scales, float* const* HWY_RESTRICT y) {
  const block_tag df;
  using V = hn::Vec<decltype(df)>;
  constexpr std::size_t lanes = hn::MaxLanes(block_tag{});     // fixed-width targets (see the caller)
  constexpr std::size_t per_block = values_per_block / lanes;  // vectors per block
  constexpr std::size_t max_vectors = NB * per_block;
  for (std::size_t k = 0; k < chunks; ++k) {
    V acc[TK][max_vectors];
    for (std::size_t t = 0; t < TK; ++t) {
      for (std::size_t v = 0; v < NB * per_block; ++v) acc[t][v] = hn::Zero(df);
    }
    for (std::size_t p = first[k]; p < first[k + 1]; ++p) {
      const std::size_t j = rows != nullptr ? rows[p] : p;
      const B* wj = reinterpret_cast<const B*>(reinterpret_cast<const std::byte*>(w0) + j * row_stride) + b0;
      V wv[max_vectors];  // block i's values [v·lanes, (v + 1)·lanes) at i·per_block + v
      for (std::size_t i = 0; i < NB; ++i) {
        const V d = hn::Set(df, scales[wj[i].d.bits]);
        for (std::size_t o = 0; o < half_block; o += lanes) {
          V qlo;
          V qhi;
          if constexpr (std::is_same_v<B, block_q8_0>) {
            qlo = q8_values(df, wj + i, o);
            qhi = q8_values(df, wj + i, half_block + o);
          } else {
            q4_values(df, wj + i, o, qlo, qhi);
          }
          wv[i * per_block + o / lanes] = hn::Mul(qlo, d);
          wv[i * per_block + (half_block + o) / lanes] = hn::Mul(qhi, d);
        }
      }
      for (std::size_t t = 0; t < TK; ++t) {
        const V ct = hn::Set(df, coef[t][j]);
        for (std::size_t v = 0; v < NB * per_block; ++v) acc[t][v] = hn::MulAdd(wv[v], ct, acc[t][v]);
      }
    }
    for (std::size_t t = 0; t < TK; ++t) {
      float* const o = y[t] + b0 * values_per_block;
      for (std::size_t v = 0; v < NB * per_block; ++v) {
        hn::StoreU(k == 0 ? acc[t][v] : hn::Add(hn::LoadU(df, o + v * lanes), acc[t][v]), df, o + v * lanes);
      }
    }
  }
}

template <class B>
HWY_NOINLINE void axpy_block_tokens_range(const weight_view& wt, const std::uint32_t* rows, const std::size_t* first,
                                          std::size_t chunks, const float* const* coef, std::size_t count,
                                          std::size_t col_begin, std::size_t col_end, float* const* y) {
  static_assert(is_block_type<B>);
  if (col_begin % values_per_block != 0 || col_end % values_per_block != 0 || col_begin > col_end) {
    fail_block_columns(col_begin, col_end);
  }
  const float* scales = f16_to_f32_table();
  const B* const w0 = static_cast<const B*>(wt.data);
  const std::size_t b_end = col_end / values_per_block;
#if HWY_HAVE_SCALABLE  // run-time lanes: the per-token chains one value at a time
  for (std::size_t t = 0; t < count; ++t) {
    for (std::size_t c = col_begin; c < col_end; ++c) {
      const std::size_t b = c / values_per_block;
      const std::size_t i = c % values_per_block;
      for (std::size_t k = 0; k < chunks; ++k) {
        float acc = 0.0F;
        for (std::size_t p = first[k]; p < first[k + 1]; ++p) {
          const std::size_t j = rows != nullptr ? rows[p] : p;
          const B& blk = reinterpret_cast<const B*>(reinterpret_cast<const std::byte*>(w0) + j * wt.row_stride)[b];
          float q = 0.0F;
          if constexpr (std::is_same_v<B, block_q8_0>) {
            q = static_cast<float>(blk.qs[i]);
          } else {
            q = static_cast<float>(((blk.qs[i % half_block] >> (i < half_block ? 0 : 4)) & 0x0F) - 8);
          }
          acc = std::fma(q * scales[blk.d.bits], coef[t][j], acc);
        }
        y[t][c] = k == 0 ? acc : y[t][c] + acc;
      }
    }
  }
#else
  constexpr std::size_t NB = 2;
  const auto tokens = [&]<std::size_t TK>(const float* const* ct, float* const* yt) {
    std::size_t b = col_begin / values_per_block;
    for (; b + NB <= b_end; b += NB)
      axpy_block_tokens_step<NB, TK>(w0, wt.row_stride, rows, first, chunks, ct, b, scales, yt);
    for (; b < b_end; ++b) axpy_block_tokens_step<1, TK>(w0, wt.row_stride, rows, first, chunks, ct, b, scales, yt);
  };
  std::size_t t = 0;
  for (; t + axpy_tokens_at_once <= count; t += axpy_tokens_at_once) {
    tokens.template operator()<axpy_tokens_at_once>(coef + t, y + t);
  }
  for (; t < count; ++t) tokens.template operator()<1>(coef + t, y + t);
#endif
}

}  // namespace actsparse::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // toggle guard
