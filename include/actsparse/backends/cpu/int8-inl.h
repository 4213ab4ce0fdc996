// Per-target integer kernels (Highway, and intrinsics where Highway 1.0.3 has no int8 dot
// product) for q8_0 / q4_0 weights on x quantized to 8-bit blocks (ggml's vec_dot_q8_0_q8_0 /
// q4_0_q8_0 idea): x quantized once per call (quantize_q8_0_x), then per block an exact int32
// dot product of the weight integers with x's, scaled by d_w·d_x in f32 (int8_gemv_range), and
// the same from copies with rows interleaved 16 at a time (interleaved_gemv_range). The
// ISA-specific bodies sit in their own files, chosen here per target:
//   x86/int8_avx512-inl.h   AVX3_DL and better (AVX-512 VNNI)
//   x86/int8_avx2-inl.h     AVX2 (and AVX3 without VNNI)
//   int8_generic-inl.h      every other target (portable scalar code)
// Included by kernels-inl.h inside its toggle guard, so foreach_target.h compiles it per target.
// No #pragma once: the toggle guard below lets foreach_target.h re-include this file.

#if defined(ACTSPARSE_CPU_INT8_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ACTSPARSE_CPU_INT8_INL_H_
#undef ACTSPARSE_CPU_INT8_INL_H_
#else
#define ACTSPARSE_CPU_INT8_INL_H_
#endif

#include <actsparse/backends/cpu/f16_table.hpp>
#include <actsparse/backends/cpu/layouts.hpp>
#include <actsparse/backends/cpu/tuning.hpp>
#include <actsparse/core/dtype.hpp>
#include <actsparse/core/views.hpp>

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include <hwy/highway.h>
#if HWY_ARCH_X86
#include <immintrin.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace actsparse::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// ---- The integer path: x quantized to 8-bit blocks --------------------------------------
//
// Quantized x (the layout the backend keeps in its workspace): for block b of 32 values,
// d[b] = max_i |x_i| / 127 in f32 and q[32b + i] = round(x_i / d[b]) (ties to even) in int8,
// so x_i ≈ d[b]·q[32b + i] with |x_i − d[b]·q[32b + i]| <= d[b]·(1/2 + 2^-16) (a correctly
// rounded division; the slack covers it and the emulated rounding of the scalar targets).
// The scale is kept in f32 (ggml's block_q8_0 rounds it to f16): one rounding less.

// Quantizes x[0, n) (n a multiple of 32): q[0, n) and d[0, n / 32). |x| is maximized on the
// bit patterns, so a NaN (or an infinity) in a block makes its d NaN (infinite) and every row's
// product non-finite, as on the f32 path; such a block, or one of zeros (d = 0), gets q = 0.
// A block whose d is subnormal is quantized with q clamped to [−127, 127] (coarser there).
// ggml_rounding: ggml's own rule for the activations of its q8_0 / q4_0 dot products on x86
// (quantize_row_q8_0): q = round(x·(127 / max|x|)) (ties to even) and d = max|x| / 127 rounded
// to f16 (kept as that f16's f32 value), so q and d have the bits ggml gives x; a block whose
// f16 d is 0 (max|x| below 2^-25·127) or not finite gets q = 0.
HWY_NOINLINE inline void quantize_q8_0_x(const float* HWY_RESTRICT x, std::size_t n, std::int8_t* HWY_RESTRICT q,
                                         float* HWY_RESTRICT d, bool ggml_rounding) {
  const block_tag df;
  const hn::RebindToSigned<block_tag> di;
  const hn::Rebind<std::int8_t, block_tag> d8;
  const std::size_t lanes = hn::Lanes(df);
  const auto magnitude = hn::Set(di, 0x7fffffff);
  const auto low = hn::Set(di, -127);
  const auto high = hn::Set(di, 127);
  for (std::size_t b = 0; b < n / values_per_block; ++b) {
    const float* HWY_RESTRICT xb = x + b * values_per_block;
    std::int8_t* HWY_RESTRICT qb = q + b * values_per_block;
    auto m = hn::Zero(di);
    for (std::size_t o = 0; o < values_per_block; o += lanes) {
      m = hn::Max(m, hn::And(hn::BitCast(di, hn::LoadU(df, xb + o)), magnitude));
    }
    const auto amax = std::bit_cast<float>(hn::GetLane(hn::MaxOfLanes(di, m)));
    const float scale = amax / 127.0F;
    const float kept = ggml_rounding ? to_f32(to_f16(scale)) : scale;  // the d stored (ggml: its f16)
    d[b] = kept;
    if (kept > 0.0F && kept <= std::numeric_limits<float>::max()) {
      const auto vs = hn::Set(df, scale);
      const auto id = hn::Set(df, ggml_rounding ? 127.0F / amax : 0.0F);  // ggml: x·(127 / max|x|), not x / d
      for (std::size_t o = 0; o < values_per_block; o += lanes) {
        const auto v = hn::LoadU(df, xb + o);
        const auto qi = hn::Min(hn::Max(hn::NearestInt(ggml_rounding ? hn::Mul(v, id) : hn::Div(v, vs)), low), high);
        hn::StoreU(hn::DemoteTo(d8, qi), d8, qb + o);
      }
    } else {
      for (std::size_t i = 0; i < values_per_block; ++i) qb[i] = 0;
    }
  }
}

// --- q8_0 / q4_0 with rows interleaved 16 at a time (cpu::interleave_rows, layouts.hpp) ------
// y[16·(g − g_begin) + i] = row 16g + i of W times quantized x, for the groups [g_begin,
// g_end) of the interleaved bytes `base` (blocks per row). xs[b] = Σ_{i in block b} q_x,i:
// the weights enter the VNNI dot products unsigned (q4_0's nibbles n = q + 8 as stored,
// q8_0's q + 128 by an xor), and −k·xs[b] (k = 8 or 128) takes the offset back. Per row, block
// after block: acc = acc + float(D_b)·(d_w·d_x) (fused where the target has FMA), D_b the
// exact int32 Σ q_w·q_x: a row's result depends only on its row, x and the target.
// The reason for the layout: a 64-byte load feeds one VNNI dot product per 4 values of 16
// rows, and the 16 scales convert at once.
inline constexpr std::size_t interleaved_rows = interleave_group_rows;  // layouts.hpp's layout
template <class B>
inline constexpr std::size_t interleaved_block = interleaved_rows * sizeof(B);  // 16 scales, then the chunks
template <class B>
inline constexpr std::size_t interleaved_chunks = std::is_same_v<B, block_q4_0> ? 4 : 8;  // of 64 bytes

}  // namespace actsparse::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

// int8_kernel, one per target: the integer block products. A unit is `unit` consecutive
// blocks (one vector): prepare() computes what the rows share of a unit of x, dot() adds one
// row's unit to its accumulator: per block the exact int32 sum Σ q_w·q_x (kept as lane
// partial sums, each exact in f32), times d_w·d_x (one f32 product), added with one fused
// multiply-add per lane (or a product and a sum where the target has no FMA). Single: the
// unit is one block, the last of an odd count. interleaved_gemv_groups(base, blocks, g_begin,
// g_end, xq, xd, xs, y, tuning): rows 16·g + i of W·x for the groups g in [g_begin, g_end),
// into y[16·(g − g_begin) + i], from the interleaved bytes.
// GCC 12 warns falsely on the intrinsics' undefined inputs (as Highway's x86 headers, these
// kernels turn the warnings off).
HWY_DIAGNOSTICS(push)
#if HWY_COMPILER_GCC_ACTUAL
HWY_DIAGNOSTICS_OFF(disable : 4701, ignored "-Wuninitialized")
HWY_DIAGNOSTICS_OFF(disable : 4703 6001 26494, ignored "-Wmaybe-uninitialized")
#endif
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3_DL
#include <actsparse/backends/cpu/x86/int8_avx512-inl.h>
#elif HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
#include <actsparse/backends/cpu/x86/int8_avx2-inl.h>
#else
#include <actsparse/backends/cpu/int8_generic-inl.h>
#endif

HWY_BEFORE_NAMESPACE();
namespace actsparse::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// out[r] = Σ_b d_w,rb·d_x,b·Σ_i q_w,rbi·q_x,bi for R block rows of `blocks` blocks each: unit
// after unit, the x side of a unit prepared once (in registers) for the R rows, which are R
// streams read at once, each prefetched prefetch_bytes ahead and, near its end, into the
// matching row of `next` (R rows, or null: the rows of the next call). Every 64-byte line
// holds the start of one of the blocks prefetched, so every line is covered. One accumulator
// per row takes its units in order: a row's result depends only on the row, x, blocks and
// the target (a row gather of every row equals the dense GEMV bit for bit). Units of all R rows
// in turn rather than runs of one row: the x side then stays in registers.
template <std::size_t R, class B>
ACTSPARSE_INT8_ATTR HWY_INLINE void int8_dot_rows(const B* const* HWY_RESTRICT w, const B* const* next,
                                                  const std::int8_t* HWY_RESTRICT xq, const float* HWY_RESTRICT xd,
                                                  std::size_t blocks, const float* HWY_RESTRICT scales,
                                                  float* HWY_RESTRICT out, std::size_t prefetch_bytes) {
  using K = int8_kernel;
  constexpr std::size_t U = K::unit;
  constexpr std::size_t prefetch_every = 64 / sizeof(B);  // blocks: q8_0 every one, q4_0 every third
  const std::size_t row_bytes = blocks * sizeof(B);
  typename K::acc_type acc[R];
  for (std::size_t r = 0; r < R; ++r) acc[r] = K::zero();
  std::size_t b = 0;
  for (; b + U <= blocks; b += U) {
    const typename K::x_unit xu = K::template prepare<B, false>(xq, xd, b);
    for (std::size_t k = b; k < b + U; ++k) {
      if (k % prefetch_every != 0) continue;
      const std::size_t ahead = k * sizeof(B) + prefetch_bytes;  // byte offset in the row
      if (ahead < row_bytes) {
        for (std::size_t r = 0; r < R; ++r) prefetch_line(reinterpret_cast<const char*>(w[r]) + ahead);
      } else if (next != nullptr) {
        for (std::size_t r = 0; r < R; ++r) prefetch_line(reinterpret_cast<const char*>(next[r]) + ahead - row_bytes);
      }
    }
    for (std::size_t r = 0; r < R; ++r) acc[r] = K::template dot<B, false>(w[r] + b, xu, scales, acc[r]);
  }
  if constexpr (U > 1) {
    if (b < blocks) {  // one block left
      const typename K::x_unit xu = K::template prepare<B, true>(xq, xd, b);
      for (std::size_t r = 0; r < R; ++r) acc[r] = K::template dot<B, true>(w[r] + b, xu, scales, acc[r]);
    }
  }
  for (std::size_t r = 0; r < R; ++r) out[r] = K::reduce(acc[r]);
}

// y[k] = W[row_k, :]·x for k in [begin, end), row_k = rows ? rows[k] : k, on quantized x (xq,
// xd); W of q8_0 / q4_0 with w.cols a multiple of 32. block_rows_at_once rows at a time, the
// next group's rows passed along for the prefetch near the ends of the rows.
template <class B>
ACTSPARSE_INT8_ATTR HWY_NOINLINE void int8_gemv_range(const weight_view& w, const std::uint32_t* rows,
                                                      std::size_t begin, std::size_t end,
                                                      const std::int8_t* HWY_RESTRICT xq, const float* HWY_RESTRICT xd,
                                                      float* HWY_RESTRICT y, const kernel_tuning& t) {
  static_assert(is_block_type<B>);
  const auto* base = static_cast<const std::byte*>(w.data);
  const std::size_t blocks = w.cols / values_per_block;
  const float* scales = f16_to_f32_table();
  constexpr std::size_t R = block_rows_at_once;
  std::size_t k = begin;
  for (; k + R <= end; k += R) {
    const B* group[R];
    const B* next[R] = {};
    const bool more = k + 2 * R <= end;
    for (std::size_t r = 0; r < R; ++r) {
      group[r] = reinterpret_cast<const B*>(base + (rows != nullptr ? rows[k + r] : k + r) * w.row_stride);
      if (more)
        next[r] = reinterpret_cast<const B*>(base + (rows != nullptr ? rows[k + R + r] : k + R + r) * w.row_stride);
    }
    int8_dot_rows<R>(group, more ? next : nullptr, xq, xd, blocks, scales, y + k, t.int8_prefetch_bytes);
  }
  for (; k < end; ++k) {
    const B* one[1] = {reinterpret_cast<const B*>(base + (rows != nullptr ? rows[k] : k) * w.row_stride)};
    int8_dot_rows<1>(one, static_cast<const B* const*>(nullptr), xq, xd, blocks, scales, y + k, t.int8_prefetch_bytes);
  }
}

// Several tokens at once (the grouped MoE experts' prefill): out[t][k + r] = W[row r, :]·x_t
// for R rows and TK tokens. Each unit of the R rows is loaded once for TK tokens (the x side of
// each token prepared once for the R rows); every (row, token) accumulator sees int8_dot_rows'
// operations for that row and token, unit after unit, so the result equals int8_gemv_range
// bit for bit.
template <std::size_t R, std::size_t TK, class B>
ACTSPARSE_INT8_ATTR HWY_INLINE void int8_dot_rows_tokens(const B* const* HWY_RESTRICT w,
                                                         const std::int8_t* const* HWY_RESTRICT xq,
                                                         const float* const* HWY_RESTRICT xd, std::size_t blocks,
                                                         const float* HWY_RESTRICT scales,
                                                         float* const* HWY_RESTRICT out, std::size_t k) {
  using K = int8_kernel;
  constexpr std::size_t U = K::unit;
  typename K::acc_type acc[R][TK];
  for (std::size_t r = 0; r < R; ++r) {
    for (std::size_t t = 0; t < TK; ++t) acc[r][t] = K::zero();
  }
  std::size_t b = 0;
  for (; b + U <= blocks; b += U) {
    typename K::x_unit xu[TK];
    for (std::size_t t = 0; t < TK; ++t) xu[t] = K::template prepare<B, false>(xq[t], xd[t], b);
    for (std::size_t r = 0; r < R; ++r) {
      for (std::size_t t = 0; t < TK; ++t) acc[r][t] = K::template dot<B, false>(w[r] + b, xu[t], scales, acc[r][t]);
    }
  }
  if constexpr (U > 1) {
    if (b < blocks) {  // one block left
      for (std::size_t t = 0; t < TK; ++t) {
        const typename K::x_unit xu = K::template prepare<B, true>(xq[t], xd[t], b);
        for (std::size_t r = 0; r < R; ++r) acc[r][t] = K::template dot<B, true>(w[r] + b, xu, scales, acc[r][t]);
      }
    }
  }
  for (std::size_t r = 0; r < R; ++r) {
    for (std::size_t t = 0; t < TK; ++t) out[t][k + r] = K::reduce(acc[r][t]);
  }
}

// Rows and tokens per pass of the multi-token integer GEMV: 2 × 4 accumulators and 4 tokens'
// x units fit AVX-512's 32 registers, 2 × 2 the 16 of narrower targets.
inline constexpr std::size_t int8_gemm_tokens = HWY_MAX_BYTES >= 64 ? 4 : 2;
inline constexpr std::size_t int8_gemm_rows_at_once = 2;

// y[t][k] = W[row_k, :]·x_t for k in [begin, end) and t < count, row_k = rows ? rows[k] : k, on
// quantized x (xq[t], xd[t]); each y[t][k] is int8_gemv_range's bits for that row and token.
template <class B>
ACTSPARSE_INT8_ATTR HWY_NOINLINE void int8_gemm_range(const weight_view& w, const std::uint32_t* rows,
                                                      std::size_t begin, std::size_t end, const std::int8_t* const* xq,
                                                      const float* const* xd, std::size_t count, float* const* y) {
  static_assert(is_block_type<B>);
  const auto* base = static_cast<const std::byte*>(w.data);
  const std::size_t blocks = w.cols / values_per_block;
  const float* scales = f16_to_f32_table();
  const auto row = [&](std::size_t k) {
    return reinterpret_cast<const B*>(base + (rows != nullptr ? rows[k] : k) * w.row_stride);
  };
  const auto rows_for = [&]<std::size_t TK>(std::size_t t) {
    constexpr std::size_t R = int8_gemm_rows_at_once;
    const B* group[R];
    std::size_t k = begin;
    for (; k + R <= end; k += R) {
      for (std::size_t r = 0; r < R; ++r) group[r] = row(k + r);
      int8_dot_rows_tokens<R, TK>(group, xq + t, xd + t, blocks, scales, y + t, k);
    }
    for (; k < end; ++k) {
      group[0] = row(k);
      int8_dot_rows_tokens<1, TK>(group, xq + t, xd + t, blocks, scales, y + t, k);
    }
  };
  std::size_t t = 0;
  for (; t + int8_gemm_tokens <= count; t += int8_gemm_tokens) rows_for.template operator()<int8_gemm_tokens>(t);
  for (; t < count; ++t) rows_for.template operator()<1>(t);
}

template <class B>
ACTSPARSE_INT8_ATTR HWY_NOINLINE void interleaved_gemv_range(const interleaved_view& w, std::size_t begin,
                                                             std::size_t end, const std::int8_t* xq, const float* xd,
                                                             const std::int32_t* xs, float* y, const kernel_tuning& t) {
  const auto* base = static_cast<const std::byte*>(w.data);
  const std::size_t blocks = w.cols / values_per_block;
  const std::size_t g_begin = begin / interleaved_rows;
  const std::size_t whole = end / interleaved_rows;  // groups written in place
  if (whole > g_begin) interleaved_gemv_groups<B>(base, blocks, g_begin, whole, xq, xd, xs, y + begin, t);
  if (whole * interleaved_rows < end) {
    alignas(64) float last[interleaved_rows];
    interleaved_gemv_groups<B>(base, blocks, whole, whole + 1, xq, xd, xs, last, t);
    const std::size_t at = whole * interleaved_rows;
    for (std::size_t k = at; k < end; ++k) y[k] = last[k - at];
  }
}

// The integer kernels this target runs: "avx512_vnni", "avx2" or "portable".
inline const char* int8_kernels() { return int8_kernel::name; }

#undef ACTSPARSE_INT8_ATTR

}  // namespace actsparse::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
HWY_DIAGNOSTICS(pop)

#endif  // toggle guard
