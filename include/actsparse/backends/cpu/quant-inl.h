// Per-target kernels (Highway) for the ggml block types q8_0 and q4_0 (32 values and one f16
// scale d per block, core/dtype.hpp) with f32 activations: row dot products (dense / row
// gather GEMV) and row axpy over a transposed block matrix (input-sparse linear). Blocks are
// dequantized in registers: int8 or nibble -> f32 (exact), d f16 -> f32 (exact, a table).
// And the integer GEMV (ggml's vec_dot_q8_0_q8_0 / q4_0_q8_0 idea): x quantized once per call
// to 8-bit blocks (quantize_q8_0_x), then per block an exact int32 dot product of the weight
// integers with x's, scaled by d_w·d_x in f32 (gemv_rows_q8x; AVX-512 VNNI, AVX2, portable),
// and the same from copies with rows interleaved 16 at a time (gemv_rows_interleaved).
// Included by gemv-inl.h inside its toggle guard, so foreach_target.h compiles it per target.
// No #pragma once: the toggle guard below lets foreach_target.h re-include this file.

// Target-independent part, defined once.
#ifndef ACTSPARSE_CPU_QUANT_SHARED_
#define ACTSPARSE_CPU_QUANT_SHARED_

#include <actsparse/core/dtype.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace actsparse::cpu {

// f32 value of every f16 bit pattern (256 KiB), built on first use (thread-safe). The block
// kernels read a block's scale from it as a memory operand: cheaper, measured, than a
// broadcast and a vector f16 conversion per block (F16C's vcvtph2ps occupies a vector port
// that the dequantization needs), and the same bits (the conversion is exact).
inline const float* f16_to_f32_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(std::size_t{1} << 16);
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = to_f32(f16{static_cast<std::uint16_t>(i)});
    return t;
  }();
  return table.data();
}

}  // namespace actsparse::cpu

#endif  // ACTSPARSE_CPU_QUANT_SHARED_

#if defined(ACTSPARSE_CPU_QUANT_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ACTSPARSE_CPU_QUANT_INL_H_
#undef ACTSPARSE_CPU_QUANT_INL_H_
#else
#define ACTSPARSE_CPU_QUANT_INL_H_
#endif

#include <actsparse/backends/cpu/repack.hpp>
#include <actsparse/core/dtype.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/views.hpp>

#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
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
// block can hold (one permute per 16 values, measured faster here than a subtraction and a
// conversion).
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
inline constexpr bool q4_by_table = true;
#else
inline constexpr bool q4_by_table = false;
#endif

// The nibbles of a q4_0 block's bytes [offset, offset + lanes): the low ones (values
// [offset, ..)) and the high ones (values [16 + offset, ..)), as signed 32-bit lanes.
template <class DF>
HWY_INLINE void q4_nibbles(DF /*df*/, const block_q4_0* HWY_RESTRICT b, std::size_t offset,
                           hn::Vec<hn::RebindToSigned<DF>>& low, hn::Vec<hn::RebindToSigned<DF>>& high) {
  const hn::Rebind<std::uint8_t, DF> d8;
  const hn::RebindToUnsigned<DF> du;
  const hn::RebindToSigned<DF> di;
  const auto bytes = hn::PromoteTo(du, hn::LoadU(d8, b->qs + offset));
  low = hn::BitCast(di, hn::And(bytes, hn::Set(du, 0x0FU)));
  high = hn::BitCast(di, hn::ShiftRight<4>(bytes));
}

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
// The 32 entries of a q4_0 block looked up in `table` (16 f32 lanes, entry n for nibble n):
// values [0, 16) from the low nibbles, [16, 32) from the high ones. vpermps reads only the
// low 4 bits of each index, so the zero-extended bytes index the low nibbles as they are:
// no mask (Highway's TableLookupLanes requires indices below 16, hence the intrinsics).
// GCC 12 warns falsely on the intrinsics' undefined inputs (as in the integer kernels below).
HWY_DIAGNOSTICS(push)
#if HWY_COMPILER_GCC_ACTUAL
HWY_DIAGNOSTICS_OFF(disable : 4701, ignored "-Wuninitialized")
HWY_DIAGNOSTICS_OFF(disable : 4703 6001 26494, ignored "-Wmaybe-uninitialized")
#endif
template <class V>
HWY_INLINE void q4_lookup(V table, const block_q4_0* HWY_RESTRICT b, V& lo, V& hi) {
  static_assert(sizeof(table.raw) == 64, "q4_lookup takes vectors of 16 f32 lanes");
  const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->qs)));
  lo = V{_mm512_permutexvar_ps(bytes, table.raw)};
  hi = V{_mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table.raw)};
}
HWY_DIAGNOSTICS(pop)
#endif

// Values [offset, offset + lanes) (the low nibbles n of qs[offset ..]) and [16 + offset, 16 +
// offset + lanes) (their high nibbles) of a q4_0 block as f32 nibble − 8, exact, not scaled.
template <class DF>
HWY_INLINE void q4_values(DF df, const block_q4_0* HWY_RESTRICT b, std::size_t offset, hn::Vec<DF>& lo,
                          hn::Vec<DF>& hi) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  (void)offset;  // 16 lanes: always 0
  q4_lookup(hn::Iota(df, -8.0F), b, lo, hi);
#else
  hn::Vec<hn::RebindToSigned<DF>> low;
  hn::Vec<hn::RebindToSigned<DF>> high;
  q4_nibbles(df, b, offset, low, high);
  const auto eight = hn::Set(hn::RebindToSigned<DF>(), 8);
  lo = hn::ConvertTo(df, hn::Sub(low, eight));
  hi = hn::ConvertTo(df, hn::Sub(high, eight));
#endif
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
// vector registers hold their state (AVX-512: measured 10-16% faster than four from DRAM at
// 11008 x 4096), else four.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
inline constexpr std::size_t block_rows_at_once = 8;
#else
inline constexpr std::size_t block_rows_at_once = 4;
#endif

// y[k] = W[row_k, :] · x for k in [begin, end), row_k = rows ? rows[k] : k; W of q8_0 / q4_0
// (w.cols a multiple of 32: validate() checked it).
template <class B>
HWY_NOINLINE void gemv_block_range(const weight_view& w, const std::uint32_t* rows, std::size_t begin, std::size_t end,
                                   const float* HWY_RESTRICT x, float* HWY_RESTRICT y) {
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
    // and one multiply per row and block instead of two. Measured on the AMD EPYC host
    // (cpu_input_sparse_linear/q4_0/7b_down/t1, three rounds of both builds in turn): a_pct
    // 100 1.36 / 1.35 / 1.31 -> 1.26 / 1.26 / 1.22 ms, a_pct 50 0.84 / 0.84 / 0.79 -> 0.79 /
    // 0.75 / 0.75 ms; two threads unchanged (1.05-1.09 -> 1.01-1.09 ms).
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
// linear, bit for bit where MulAdd is fused (per chunk of rows: cpu::axpy_all_columns). block_rows_at_once rows per
// sweep; the rows of a later sweep, about 8 KiB ahead, are prefetched (a row's share of a column range is a few hundred
// bytes: the hardware prefetchers do not see it coming).
template <class B>
HWY_NOINLINE void axpy_block_range(const weight_view& wt, const std::uint32_t* rows, std::size_t count,
                                   const float* HWY_RESTRICT coef, std::size_t col_begin, std::size_t col_end,
                                   float* HWY_RESTRICT y) {
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
  constexpr std::size_t prefetch_bytes = 8192;
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
HWY_NOINLINE inline void quantize_q8_0_x(const float* HWY_RESTRICT x, std::size_t n, std::int8_t* HWY_RESTRICT q,
                                         float* HWY_RESTRICT d) {
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
    d[b] = scale;
    if (scale > 0.0F && scale <= std::numeric_limits<float>::max()) {
      const auto vs = hn::Set(df, scale);
      for (std::size_t o = 0; o < values_per_block; o += lanes) {
        const auto qi = hn::Min(hn::Max(hn::NearestInt(hn::Div(hn::LoadU(df, xb + o), vs)), low), high);
        hn::StoreU(hn::DemoteTo(d8, qi), d8, qb + o);
      }
    } else {
      for (std::size_t i = 0; i < values_per_block; ++i) qb[i] = 0;
    }
  }
}

// int8_kernel, one per target: the integer block products. A unit is `unit` consecutive
// blocks (one vector): prepare() computes what the rows share of a unit of x, dot() adds one
// row's unit to its accumulator: per block the exact int32 sum Σ q_w·q_x (kept as lane
// partial sums, each exact in f32), times d_w·d_x (one f32 product), added with one fused
// multiply-add per lane (or a product and a sum where the target has no FMA). Single: the
// unit is one block, the last of an odd count.
// GCC 12 warns falsely on the intrinsics' undefined inputs (as Highway's x86 headers, these
// kernels turn the warnings off).
HWY_DIAGNOSTICS(push)
#if HWY_COMPILER_GCC_ACTUAL
HWY_DIAGNOSTICS_OFF(disable : 4701, ignored "-Wuninitialized")
HWY_DIAGNOSTICS_OFF(disable : 4703 6001 26494, ignored "-Wmaybe-uninitialized")
#endif

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3_DL
// AVX-512 VNNI: AVX3_DL and the better x86 targets of later Highway versions (Highway checks
// AVX512_VNNI for AVX3_DL, but its 1.0.3 target string names only the VEX form, so these
// functions add it). Two blocks per 512-bit vector; vpdpbusd takes
// u8 × s8, so the weights are made unsigned: q8_0's q + 128 (q xor 0x80), q4_0's nibble n =
// q + 8 as stored, and the offset is taken back with −k·Σ q_x per lane (k = 128 or 8) as the
// accumulator's start: each lane is then exactly Σ_{4 values} q_w·q_x.
#if HWY_COMPILER_MSVC
#define ACTSPARSE_INT8_ATTR
#else
#define ACTSPARSE_INT8_ATTR __attribute__((target(HWY_TARGET_STR ",avx512vnni")))
#endif

// Index vectors of the two-block loads. q4_0, from the 36 bytes of two blocks: byte i is
// value i % 32 of block i / 32, the low nibble of stored byte i % 16 below 16, the high one
// above (vpermb, then a shift by 0 or 4 per 16-bit word, then & 0x0f). q8_0, from the first
// 64 bytes of the two blocks (a) and the second block's 32 values (b): byte i < 32 is a's
// 2 + i, byte i >= 32 is b's i − 32 (vpermt2b). The f16 scales: words 0 and 9 (q4_0) or 17
// (q8_0) of the load, each to 8 words (vpermw, then vcvtph2ps: exact, no table look-up).
alignas(64) inline constexpr std::array<std::uint8_t, 64> q4_pair_bytes = [] {
  std::array<std::uint8_t, 64> a{};
  for (std::size_t i = 0; i < 64; ++i) a[i] = static_cast<std::uint8_t>(i / 32 * sizeof(block_q4_0) + 2 + i % 16);
  return a;
}();
alignas(64) inline constexpr std::array<std::uint16_t, 32> q4_pair_shifts = [] {
  std::array<std::uint16_t, 32> a{};
  for (std::size_t w = 0; w < 32; ++w) a[w] = (2 * w) % 32 >= 16 ? 4 : 0;
  return a;
}();
alignas(64) inline constexpr std::array<std::uint8_t, 64> q8_pair_bytes = [] {
  std::array<std::uint8_t, 64> a{};
  for (std::size_t i = 0; i < 64; ++i) a[i] = static_cast<std::uint8_t>(i < 32 ? 2 + i : 64 + i - 32);
  return a;
}();
template <class B>
alignas(64) inline constexpr std::array<std::uint16_t, 32> pair_scale_words = [] {
  std::array<std::uint16_t, 32> a{};
  for (std::size_t w = 8; w < 16; ++w) a[w] = static_cast<std::uint16_t>(sizeof(B) / 2);
  return a;
}();

struct int8_kernel {
  using acc_type = __m512;
  static constexpr std::size_t unit = 2;
  struct x_unit {
    __m512i q;     // q_x of the two blocks (the second's 0 when Single)
    __m512i corr;  // −k·(sum of the lane's 4 values of q_x)
    __m512 dx;     // d_x of the first block (lanes 0-7), of the second (8-15; 0 when Single)
  };

  ACTSPARSE_INT8_ATTR static HWY_INLINE __m512 zero() { return _mm512_setzero_ps(); }

  template <class B, bool Single>
  ACTSPARSE_INT8_ATTR static HWY_INLINE x_unit prepare(const std::int8_t* xq, const float* xd, std::size_t b) {
    x_unit u;
    const std::int8_t* xb = xq + b * values_per_block;
    if constexpr (Single) {
      u.q = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb)));
    } else {
      u.q = _mm512_loadu_si512(xb);
    }
    const __m512i k = _mm512_set1_epi8(static_cast<char>(std::is_same_v<B, block_q8_0> ? 0x80 : 0x08));
    const __m512i zero_i = _mm512_setzero_si512();
    u.corr = _mm512_sub_epi32(zero_i, _mm512_dpbusd_epi32(zero_i, k, u.q));
    const __m512 d0 = _mm512_set1_ps(xd[b]);
    if constexpr (Single) {
      u.dx = _mm512_maskz_mov_ps(0x00ff, d0);
    } else {
      u.dx = _mm512_mask_mov_ps(d0, 0xff00, _mm512_set1_ps(xd[b + 1]));
    }
    return u;
  }

  template <class B, bool Single>
  ACTSPARSE_INT8_ATTR static HWY_INLINE __m512 dot(const B* HWY_RESTRICT blk, const x_unit& u, const float*,
                                                   __m512 acc) {
    __m512i raw;  // the loaded bytes: the two blocks from their start (q8_0: the first 64)
    __m512i wv;
    if constexpr (std::is_same_v<B, block_q8_0>) {
      __m512i second = _mm512_setzero_si512();
      if constexpr (Single) {
        raw = _mm512_maskz_loadu_epi8((std::uint64_t{1} << sizeof(block_q8_0)) - 1, blk);  // no further
      } else {
        raw = _mm512_loadu_si512(blk);
        second = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[1].qs)));
      }
      wv = _mm512_permutex2var_epi8(raw, _mm512_load_si512(q8_pair_bytes.data()), second);
      wv = _mm512_xor_si512(wv, _mm512_set1_epi8(static_cast<char>(0x80)));  // Single: 128 × x's zeros
    } else {
      // The 36 bytes of the two blocks (18 of one), no further: a masked load does not fault.
      raw = _mm512_maskz_loadu_epi8((std::uint64_t{1} << ((Single ? 1 : 2) * sizeof(block_q4_0))) - 1, blk);
      const __m512i spread = _mm512_permutexvar_epi8(_mm512_load_si512(q4_pair_bytes.data()), raw);
      wv =
          _mm512_and_si512(_mm512_srlv_epi16(spread, _mm512_load_si512(q4_pair_shifts.data())), _mm512_set1_epi8(0x0f));
    }
    const __m512i sums = _mm512_dpbusd_epi32(u.corr, wv, u.q);
    // Single: the second scale's word was not loaded (0), and dx is 0 there.
    const __m512 dw = _mm512_cvtph_ps(
        _mm512_castsi512_si256(_mm512_permutexvar_epi16(_mm512_load_si512(pair_scale_words<B>.data()), raw)));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(dw, u.dx), acc);
  }

  ACTSPARSE_INT8_ATTR static HWY_INLINE float reduce(__m512 acc) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(acc),
                                   _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0x0f, _mm512_castps_pd(acc), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
};

#elif HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
// AVX2 (also run by AVX3 without VNNI): one block per 256-bit vector. q8_0: vpmaddubsw takes
// u8 × s8, so |q_w| times sign(q_w)·q_x (the sign trick: pairs of products <= 2·128·127, no
// saturation); q4_0: the nibbles n = q + 8 times q_x, and −8·Σ q_x per lane added back. Then
// vpmaddwd by 1 sums the pairs: each lane exactly Σ_{4 values} q_w·q_x.
#define ACTSPARSE_INT8_ATTR

struct int8_kernel {
  using acc_type = __m256;
  static constexpr std::size_t unit = 1;
  struct x_unit {
    __m256i q;     // q_x
    __m256i corr;  // q4_0: −8·(sum of the lane's 4 values of q_x)
    __m256 dx;
  };

  static HWY_INLINE __m256 zero() { return _mm256_setzero_ps(); }

  template <class B, bool Single>
  static HWY_INLINE x_unit prepare(const std::int8_t* xq, const float* xd, std::size_t b) {
    x_unit u;
    u.q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * values_per_block));
    u.dx = _mm256_set1_ps(xd[b]);
    if constexpr (std::is_same_v<B, block_q4_0>) {
      const __m256i sum = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(8), u.q), _mm256_set1_epi16(1));
      u.corr = _mm256_sub_epi32(_mm256_setzero_si256(), sum);
    } else {
      u.corr = _mm256_setzero_si256();
    }
    return u;
  }

  template <class B, bool Single>
  static HWY_INLINE __m256 dot(const B* HWY_RESTRICT blk, const x_unit& u, const float* HWY_RESTRICT scales,
                               __m256 acc) {
    const __m256i xv = u.q;
    __m256i pairs;
    if constexpr (std::is_same_v<B, block_q8_0>) {
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs));
      pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
    } else {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs));
      const __m256i nibbles = _mm256_and_si256(
          _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1), _mm256_set1_epi8(0x0f));
      pairs = _mm256_maddubs_epi16(nibbles, xv);
    }
    __m256i sums = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
    if constexpr (std::is_same_v<B, block_q4_0>) sums = _mm256_add_epi32(sums, u.corr);
    const __m256 s = _mm256_mul_ps(_mm256_set1_ps(scales[blk->d.bits]), u.dx);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), s, acc);
  }

  static HWY_INLINE float reduce(__m256 acc) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
};

#else
// Every other target (SSE4, SSSE3, EMU128, SCALAR, non-x86): portable scalar code, one block
// at a time: the int32 sum, then acc += float(sum)·(d_w·d_x).
#define ACTSPARSE_INT8_ATTR

struct int8_kernel {
  using acc_type = float;
  static constexpr std::size_t unit = 1;
  struct x_unit {
    const std::int8_t* q;
    float dx;
  };

  static HWY_INLINE float zero() { return 0.0F; }

  template <class B, bool Single>
  static HWY_INLINE x_unit prepare(const std::int8_t* xq, const float* xd, std::size_t b) {
    return {xq + b * values_per_block, xd[b]};
  }

  template <class B, bool Single>
  static HWY_INLINE float dot(const B* HWY_RESTRICT blk, const x_unit& u, const float* HWY_RESTRICT scales, float acc) {
    const std::int8_t* HWY_RESTRICT xb = u.q;
    std::int32_t sum = 0;
    if constexpr (std::is_same_v<B, block_q8_0>) {
      for (std::size_t i = 0; i < values_per_block; ++i) sum += std::int32_t{blk->qs[i]} * xb[i];
    } else {
      for (std::size_t i = 0; i < half_block; ++i) {
        sum += ((blk->qs[i] & 0x0f) - 8) * xb[i] + ((blk->qs[i] >> 4) - 8) * xb[half_block + i];
      }
    }
    return acc + static_cast<float>(sum) * (scales[blk->d.bits] * u.dx);
  }

  static HWY_INLINE float reduce(float acc) { return acc; }
};
#endif

// Software prefetch distance of the integer GEMV (bytes ahead in each row stream; past a
// row's end, into the row of the next call). Measured on the AMD EPYC (Zen 5) host, 7B shape
// from DRAM, one thread: 1 KB ahead read 10-15% faster than prefetching the next call's rows
// at the same offset (the f32 block kernels' way), and 2 KB or 512 B no faster.
#ifdef ACTSPARSE_CPU_PREFETCH_BYTES
inline constexpr std::size_t int8_prefetch_bytes = ACTSPARSE_CPU_PREFETCH_BYTES;
#else
inline constexpr std::size_t int8_prefetch_bytes = 1024;
#endif
// The interleaved GEMV's (a stream per 16 rows): 2 KB ahead, as in its probe.
inline constexpr std::size_t interleaved_prefetch_bytes = 2048;

// out[r] = Σ_b d_w,rb·d_x,b·Σ_i q_w,rbi·q_x,bi for R block rows of `blocks` blocks each: unit
// after unit, the x side of a unit prepared once (in registers) for the R rows, which are R
// streams read at once, each prefetched int8_prefetch_bytes ahead and, near its end, into the
// matching row of `next` (R rows, or null: the rows of the next call). Every 64-byte line
// holds the start of one of the blocks prefetched, so every line is covered. One accumulator
// per row takes its units in order: a row's result depends only on the row, x, blocks and
// the target (a row gather of every row equals the dense GEMV bit for bit). Measured on the
// host, in L2: this order reads 1.5-2x faster than rows taken a run of 1 KB at a time (the x
// side then comes from memory for every row: the loads limit), and reading the f16 scales
// from the loaded bytes (vpermw, vcvtph2ps) beats two table broadcasts per row and unit.
template <std::size_t R, class B>
ACTSPARSE_INT8_ATTR HWY_INLINE void int8_dot_rows(const B* const* HWY_RESTRICT w, const B* const* next,
                                                  const std::int8_t* HWY_RESTRICT xq, const float* HWY_RESTRICT xd,
                                                  std::size_t blocks, const float* HWY_RESTRICT scales,
                                                  float* HWY_RESTRICT out) {
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
      const std::size_t ahead = k * sizeof(B) + int8_prefetch_bytes;  // byte offset in the row
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
                                                      float* HWY_RESTRICT y) {
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
    int8_dot_rows<R>(group, more ? next : nullptr, xq, xd, blocks, scales, y + k);
  }
  for (; k < end; ++k) {
    const B* one[1] = {reinterpret_cast<const B*>(base + (rows != nullptr ? rows[k] : k) * w.row_stride)};
    int8_dot_rows<1>(one, static_cast<const B* const*>(nullptr), xq, xd, blocks, scales, y + k);
  }
}

// The entry point each target exports for the integer GEMV (q8_0 / q4_0 weights; the caller,
// implementation.hpp, checks the dtype and w.cols).
ACTSPARSE_INT8_ATTR inline void gemv_rows_q8x(const weight_view& w, const std::uint32_t* rows, std::size_t begin,
                                              std::size_t end, const std::int8_t* xq, const float* xd, float* y) {
  if (w.type == dtype::q8_0) {
    int8_gemv_range<block_q8_0>(w, rows, begin, end, xq, xd, y);
  } else {
    int8_gemv_range<block_q4_0>(w, rows, begin, end, xq, xd, y);
  }
}

// --- q8_0 / q4_0 with rows interleaved 16 at a time (cpu::interleave_rows, repack.hpp) ------
// y[16·(g − g_begin) + i] = row 16g + i of W times quantized x, for the groups [g_begin,
// g_end) of the interleaved bytes `base` (blocks per row). xs[b] = Σ_{i in block b} q_x,i:
// the weights enter the VNNI dot products unsigned (q4_0's nibbles n = q + 8 as stored,
// q8_0's q + 128 by an xor), and −k·xs[b] (k = 8 or 128) takes the offset back. Per row, block
// after block: acc = acc + float(D_b)·(d_w·d_x) (fused where the target has FMA), D_b the
// exact int32 Σ q_w·q_x: a row's result depends only on its row, x and the target.
// The reason for the layout: a 64-byte load feeds one VNNI dot product per 4 values of 16
// rows, and the 16 scales convert at once. Measured on the AMD EPYC host (bench_cpu_gemv
// cpu_gemv/q4_0_x16/cache, 2048 rows × 4096 from L3, one / two threads): 57–69 / 89–104
// GB/s, where the row-major q4_0 GEMV reaches 28–33 / 40–54: memory binds it, not arithmetic.
inline constexpr std::size_t interleaved_rows = interleave_group_rows;  // repack.hpp's layout
template <class B>
inline constexpr std::size_t interleaved_block = interleaved_rows * sizeof(B);  // 16 scales, then the chunks
template <class B>
inline constexpr std::size_t interleaved_chunks = std::is_same_v<B, block_q4_0> ? 4 : 8;  // of 64 bytes

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3_DL
// G groups at once: G streams read together (one stream per thread reads about a third
// slower on this host, as the read-bandwidth benchmark notes), x's broadcasts shared.
#ifdef ACTSPARSE_CPU_INTERLEAVED_GROUPS
inline constexpr std::size_t interleaved_groups_at_once = ACTSPARSE_CPU_INTERLEAVED_GROUPS;
#else
inline constexpr std::size_t interleaved_groups_at_once = 4;
#endif

template <class B, std::size_t G>
ACTSPARSE_INT8_ATTR HWY_INLINE void interleaved_dot_groups(const std::byte* HWY_RESTRICT base, std::size_t blocks,
                                                           const std::int8_t* HWY_RESTRICT xq,
                                                           const float* HWY_RESTRICT xd,
                                                           const std::int32_t* HWY_RESTRICT xs, float* HWY_RESTRICT y) {
  constexpr bool q4 = std::is_same_v<B, block_q4_0>;
  constexpr std::size_t bytes = interleaved_block<B>;
  const __m512i low = _mm512_set1_epi8(0x0f);
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  const std::size_t stride = blocks * bytes;  // bytes of one group
  __m512 acc[G];
  for (std::size_t i = 0; i < G; ++i) acc[i] = _mm512_setzero_ps();
  const std::byte* p = base;
  for (std::size_t b = 0; b < blocks; ++b, p += bytes) {
    const std::int8_t* xb = xq + b * values_per_block;
    __m512i xv[8];  // x's values 4c .. 4c + 3, broadcast
    for (std::size_t c = 0; c < 8; ++c) {
      std::int32_t v;
      std::memcpy(&v, xb + 4 * c, 4);
      xv[c] = _mm512_set1_epi32(v);
    }
    const __m512i corr = _mm512_set1_epi32(-(q4 ? 8 : 128) * xs[b]);
    const __m512 dx = _mm512_set1_ps(xd[b]);
    for (std::size_t i = 0; i < G; ++i) {
      const std::byte* q = p + i * stride;
      for (std::size_t o = 0; o < bytes; o += 64) prefetch_line(q + interleaved_prefetch_bytes + o);
      __m512i s0 = corr;
      __m512i s1 = _mm512_setzero_si512();
      for (std::size_t c = 0; c < interleaved_chunks<B>; ++c) {
        const __m512i raw = _mm512_loadu_si512(q + 32 + 64 * c);
        if constexpr (q4) {
          s0 = _mm512_dpbusd_epi32(s0, _mm512_and_si512(raw, low), xv[2 * c]);
          s1 = _mm512_dpbusd_epi32(s1, _mm512_and_si512(_mm512_srli_epi16(raw, 4), low), xv[2 * c + 1]);
        } else if (c % 2 == 0) {
          s0 = _mm512_dpbusd_epi32(s0, _mm512_xor_si512(raw, sign), xv[c]);
        } else {
          s1 = _mm512_dpbusd_epi32(s1, _mm512_xor_si512(raw, sign), xv[c]);
        }
      }
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), _mm512_mul_ps(dw, dx), acc[i]);
    }
  }
  for (std::size_t i = 0; i < G; ++i) _mm512_storeu_ps(y + i * interleaved_rows, acc[i]);
}

#endif

// Rows 16·g + i of W·x for the groups g in [g_begin, g_end), into y[16·(g − g_begin) + i].
template <class B>
ACTSPARSE_INT8_ATTR HWY_NOINLINE void interleaved_gemv_groups(const std::byte* HWY_RESTRICT base, std::size_t blocks,
                                                              std::size_t g_begin, std::size_t g_end,
                                                              const std::int8_t* HWY_RESTRICT xq,
                                                              const float* HWY_RESTRICT xd,
                                                              const std::int32_t* HWY_RESTRICT xs,
                                                              float* HWY_RESTRICT y) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3_DL
  constexpr std::size_t G = interleaved_groups_at_once;
  const std::size_t stride = blocks * interleaved_block<B>;
  std::size_t g = g_begin;
  for (; g + G <= g_end; g += G) {
    interleaved_dot_groups<B, G>(base + g * stride, blocks, xq, xd, xs, y + (g - g_begin) * interleaved_rows);
  }
  for (; g < g_end; ++g) {
    interleaved_dot_groups<B, 1>(base + g * stride, blocks, xq, xd, xs, y + (g - g_begin) * interleaved_rows);
  }
#elif HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
  // Eight rows (half a chunk) per 256-bit vector. q4_0: vpmaddubsw pairs of nibble × q_x
  // (<= 15·127 each, so the sum of 8 pair sums, <= 30480, stays in int16), then vpmaddwd by 1;
  // −8·xs[b] added. q8_0: the sign trick (|q_w| × sign(q_w)·q_x, pairs <= 2·128·127) and
  // vpmaddwd per chunk. Each lane exactly D_b of its row.
  constexpr bool q4 = std::is_same_v<B, block_q4_0>;
  constexpr std::size_t bytes = interleaved_block<B>;
  const __m256i low = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  for (std::size_t g = g_begin; g < g_end; ++g) {
    const std::byte* p = base + g * blocks * bytes;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (std::size_t b = 0; b < blocks; ++b, p += bytes) {
      for (std::size_t o = 0; o < bytes; o += 64) prefetch_line(p + interleaved_prefetch_bytes + o);
      const std::int8_t* xb = xq + b * values_per_block;
      const __m256 dx = _mm256_set1_ps(xd[b]);
      for (std::size_t h = 0; h < 2; ++h) {
        __m256i sums;
        if constexpr (q4) {
          __m256i pairs = _mm256_setzero_si256();
          for (std::size_t c = 0; c < 4; ++c) {
            const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 + 64 * c + 32 * h));
            std::int32_t x0;
            std::int32_t x1;
            std::memcpy(&x0, xb + 8 * c, 4);
            std::memcpy(&x1, xb + 8 * c + 4, 4);
            pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(_mm256_and_si256(raw, low), _mm256_set1_epi32(x0)));
            pairs = _mm256_add_epi16(
                pairs, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low), _mm256_set1_epi32(x1)));
          }
          sums = _mm256_add_epi32(_mm256_madd_epi16(pairs, ones), _mm256_set1_epi32(-8 * xs[b]));
        } else {
          sums = _mm256_setzero_si256();
          for (std::size_t c = 0; c < 8; ++c) {
            const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 + 64 * c + 32 * h));
            std::int32_t x0;
            std::memcpy(&x0, xb + 4 * c, 4);
            const __m256i pairs =
                _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(_mm256_set1_epi32(x0), wv));
            sums = _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, ones));
          }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
        acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(dw, dx), acc[h]);
      }
    }
    _mm256_storeu_ps(y + (g - g_begin) * interleaved_rows, acc[0]);
    _mm256_storeu_ps(y + (g - g_begin) * interleaved_rows + 8, acc[1]);
  }
#else
  // Every other target: portable scalar code in the same order.
  constexpr bool q4 = std::is_same_v<B, block_q4_0>;
  constexpr std::size_t bytes = interleaved_block<B>;
  const float* scales = f16_to_f32_table();
  for (std::size_t g = g_begin; g < g_end; ++g) {
    const std::byte* p = base + g * blocks * bytes;
    float acc[interleaved_rows] = {};
    for (std::size_t b = 0; b < blocks; ++b, p += bytes) {
      const std::int8_t* xb = xq + b * values_per_block;
      for (std::size_t i = 0; i < interleaved_rows; ++i) {
        std::int32_t sum = q4 ? -8 * xs[b] : 0;
        for (std::size_t c = 0; c < interleaved_chunks<B>; ++c) {
          for (std::size_t k = 0; k < 4; ++k) {
            const auto byte = static_cast<std::uint8_t>(p[32 + 64 * c + 4 * i + k]);
            if constexpr (q4) {
              sum += (byte & 0x0f) * xb[8 * c + k] + (byte >> 4) * xb[8 * c + 4 + k];
            } else {
              sum += static_cast<std::int8_t>(byte) * xb[4 * c + k];
            }
          }
        }
        std::uint16_t d;
        std::memcpy(&d, p + 2 * i, 2);
        acc[i] = acc[i] + static_cast<float>(sum) * (scales[d] * xd[b]);
      }
    }
    for (std::size_t i = 0; i < interleaved_rows; ++i) y[(g - g_begin) * interleaved_rows + i] = acc[i];
  }
#endif
}

template <class B>
ACTSPARSE_INT8_ATTR HWY_INLINE void interleaved_gemv_range(const weight_view& w, std::size_t begin, std::size_t end,
                                                           const std::int8_t* xq, const float* xd,
                                                           const std::int32_t* xs, float* y) {
  const auto* base = static_cast<const std::byte*>(w.interleaved);
  const std::size_t blocks = w.cols / values_per_block;
  const std::size_t g_begin = begin / interleaved_rows;
  const std::size_t whole = end / interleaved_rows;  // groups written in place
  if (whole > g_begin) interleaved_gemv_groups<B>(base, blocks, g_begin, whole, xq, xd, xs, y + begin);
  if (whole * interleaved_rows < end) {
    alignas(64) float last[interleaved_rows];
    interleaved_gemv_groups<B>(base, blocks, whole, whole + 1, xq, xd, xs, last);
    const std::size_t at = whole * interleaved_rows;
    for (std::size_t k = at; k < end; ++k) y[k] = last[k - at];
  }
}

// The entry point each target exports: y[k] = row k of W·x for k in [begin, end), begin a
// multiple of 16 (the caller, implementation.hpp, checks it and the dtype); W's interleaved
// copy is read, a last partial group through a buffer.
ACTSPARSE_INT8_ATTR inline void gemv_rows_interleaved(const weight_view& w, std::size_t begin, std::size_t end,
                                                      const std::int8_t* xq, const float* xd, const std::int32_t* xs,
                                                      float* y) {
  if (w.type == dtype::q8_0) {
    interleaved_gemv_range<block_q8_0>(w, begin, end, xq, xd, xs, y);
  } else {
    interleaved_gemv_range<block_q4_0>(w, begin, end, xq, xd, xs, y);
  }
}

#undef ACTSPARSE_INT8_ATTR
HWY_DIAGNOSTICS(pop)

}  // namespace actsparse::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // toggle guard
