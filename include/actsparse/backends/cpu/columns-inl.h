// Per-target kernel (Highway) of the down projection over a q8_0 / q4_0 W_down held in the
// column-block layout (layouts.hpp: column_blocks_view), with f32 h:
//   y_i = Σ_b d(i, b) · t_i(b),  t_i(b) = Σ_{kept j in column b} h_j · q(i, j)
// per row i: t from 0 by one fused multiply-add per kept neuron, in neuron order (t held in
// registers for a tile of rows), then y from 0 by y = d·t + y column after column. The weights are used exactly (the
// int8 or nibble − 8 converts to f32 exactly, the f16 scale likewise), so the only roundings are the f32 operations; a
// row's bits depend only on the row, h, the kept set and the target (not on the row range or the threads). Included by
// kernels-inl.h after block-inl.h (its q4 loaders); no #pragma once: the toggle guard lets foreach_target.h re-include
// this file.

#if defined(ACTSPARSE_CPU_COLUMNS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ACTSPARSE_CPU_COLUMNS_INL_H_
#undef ACTSPARSE_CPU_COLUMNS_INL_H_
#else
#define ACTSPARSE_CPU_COLUMNS_INL_H_
#endif

#include <actsparse/backends/cpu/layouts.hpp>
#include <actsparse/backends/cpu/tuning.hpp>
#include <actsparse/core/dtype.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace actsparse::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Rows per register tile: their t stays in registers while every kept neuron of a column adds
// to it (64 rows: 4 vectors of 16 lanes, 8 of 8).
inline constexpr std::size_t column_tile_rows = 64;

// y[i] += d(i, b)·t_i for the T rows [i, i + T) of a tile, t_i = the fma chain over the column's
// `count` neurons (quants q[m] at the tile's first row, coefficients c[m]) from 0.
template <class B, std::size_t T>
HWY_INLINE void column_tile(const std::uint8_t* const* HWY_RESTRICT q, const float* HWY_RESTRICT c, std::size_t count,
                            std::size_t i, const hwy::float16_t* HWY_RESTRICT d, float* HWY_RESTRICT y) {
  const block_tag df;
  constexpr std::size_t L = hn::MaxLanes(block_tag());
  static_assert(T % values_per_block == 0 && (values_per_block % L == 0 || L == 1));
  constexpr std::size_t V = T / L;
  hn::Vec<block_tag> acc[V];
  for (std::size_t v = 0; v < V; ++v) acc[v] = hn::Zero(df);
  for (std::size_t m = 0; m < count; ++m) {
    const auto h = hn::Set(df, c[m]);
    if constexpr (std::is_same_v<B, block_q8_0>) {
      const hn::Rebind<std::int8_t, block_tag> d8;
      const hn::RebindToSigned<block_tag> di;
      const auto* qm = reinterpret_cast<const std::int8_t*>(q[m]);
      for (std::size_t v = 0; v < V; ++v) {
        acc[v] = hn::MulAdd(h, hn::ConvertTo(df, hn::PromoteTo(di, hn::LoadU(d8, qm + v * L))), acc[v]);
      }
    } else {  // per 32 rows, 16 bytes: rows r in the low nibbles, 16 + r in the high ones
      for (std::size_t g = 0; g < T / values_per_block; ++g) {
        for (std::size_t r = 0; r < half_block; r += L) {
          hn::Vec<block_tag> lo;
          hn::Vec<block_tag> hi;
          q4_values(df, q[m] + g * half_block, r, lo, hi);
          const std::size_t at = (g * values_per_block + r) / L;
          acc[at] = hn::MulAdd(h, lo, acc[at]);
          acc[at + half_block / L] = hn::MulAdd(h, hi, acc[at + half_block / L]);
        }
      }
    }
  }
  const hn::Rebind<hwy::float16_t, block_tag> dh;
  for (std::size_t v = 0; v < V; ++v) {
    float* const out = y + i + v * L;
    hn::StoreU(hn::MulAdd(hn::PromoteTo(df, hn::LoadU(dh, d + i + v * L)), acc[v], hn::LoadU(df, out)), df, out);
  }
}

// y[i] = Σ_b d(i, b)·Σ_{j ∈ S ∩ column b} h_j·q(i, j) for the rows i in [begin, end) (begin and
// end multiples of 32), S = kept[0, count) ascending, or every neuron when kept is null. Column
// after column; within one, tiles of 64 rows, each taking every kept neuron of the column with
// its t in registers. While a column runs, the next one's scales and kept neurons' quants (the
// rows' share: a few hundred bytes to a few KiB each, not contiguous) are prefetched: the
// hardware prefetchers do not see them coming.
template <class B>
HWY_NOINLINE void column_blocks_range(const column_blocks_view& w, const std::uint32_t* kept, std::size_t count,
                                      const float* HWY_RESTRICT h, std::size_t begin, std::size_t end,
                                      float* HWY_RESTRICT y) {
  constexpr bool q8 = std::is_same_v<B, block_q8_0>;
  const block_tag df;
  const std::size_t lanes = hn::Lanes(df);
  const std::size_t n = end - begin;
  const std::size_t total = kept != nullptr ? count : w.cols;
  const auto neuron = [&](std::size_t k) -> std::size_t { return kept != nullptr ? kept[k] : k; };
  const std::size_t q_begin = q8 ? begin : begin / 2;  // the rows' quants: a byte (q8_0) or half one each
  const auto column_end = [&](std::size_t k) {
    const std::size_t b = neuron(k) / values_per_block;
    std::size_t e = k + 1;
    while (e < total && neuron(e) / values_per_block == b) ++e;
    return e;
  };
  for (std::size_t i = 0; i < n; i += lanes) hn::StoreU(hn::Zero(df), df, y + begin + i);
  if (total == 0) return;
  // The next column's scales and kept neurons' quants, one tile's share at a time.
  const std::uint8_t* ahead[values_per_block];
  const std::byte* ahead_scales = nullptr;
  std::size_t ahead_count = 0;
  const auto prefetch_tile = [&](std::size_t i, std::size_t rows) {
    for (std::size_t o = i * sizeof(f16); o < (i + rows) * sizeof(f16); o += 64) prefetch_line(ahead_scales + o);
    const std::size_t from = q8 ? i : i / 2;
    const std::size_t to = q8 ? i + rows : (i + rows) / 2;
    for (std::size_t r = 0; r < ahead_count; ++r) {
      for (std::size_t o = (from + 63) / 64 * 64; o < to; o += 64) prefetch_line(ahead[r] + o);
    }
  };
  const auto look_ahead = [&](std::size_t k, std::size_t e) {
    ahead_scales = reinterpret_cast<const std::byte*>(w.scales(neuron(k) / values_per_block) + begin);
    ahead_count = e - k;
    for (std::size_t r = 0; r < ahead_count; ++r) ahead[r] = w.quants(neuron(k + r)) + q_begin;
  };
  std::size_t k = 0;
  std::size_t k_end = column_end(0);
  look_ahead(0, k_end);
  prefetch_tile(0, std::min<std::size_t>(n, 4 * column_tile_rows));  // the first column's start
  const std::uint8_t* q[values_per_block];
  float c[values_per_block];
  while (k < total) {
    const std::size_t next_end = k_end < total ? column_end(k_end) : total;
    ahead_count = 0;
    if (k_end < total) look_ahead(k_end, next_end);
    const std::size_t m = k_end - k;
    for (std::size_t r = 0; r < m; ++r) {
      q[r] = w.quants(neuron(k + r)) + q_begin;
      c[r] = h[neuron(k + r)];
    }
    const auto* d = reinterpret_cast<const hwy::float16_t*>(w.scales(neuron(k) / values_per_block)) + begin;
    float* const out = y + begin;
    std::size_t i = 0;
    constexpr std::size_t T = column_tile_rows;
    for (; i + T <= n; i += T) {
      if (ahead_count > 0) prefetch_tile(i, T);
      column_tile<B, T>(q, c, m, i, d, out);
      for (std::size_t r = 0; r < m; ++r) q[r] += q8 ? T : T / 2;
    }
    if (i < n) {  // the last 32 rows
      if (ahead_count > 0) prefetch_tile(i, n - i);
      column_tile<B, values_per_block>(q, c, m, i, d, out);
    }
    k = k_end;
    k_end = next_end;
  }
}

}  // namespace actsparse::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // toggle guard
