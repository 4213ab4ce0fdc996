// Per-target kernels (Highway) for decode attention over a KV cache whose rows sit in any
// row_format (core/row_format.hpp): the scores of a chunk of positions, their softmax part,
// and the weighted sum of the V rows. Rows are decoded a vector at a time in registers, never
// copied out as f32. Included by kernels-inl.h after rows-inl.h and block-inl.h.
// No #pragma once: the toggle guard below lets foreach_target.h re-include this file.

#if defined(ACTSPARSE_CPU_ATTENTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ACTSPARSE_CPU_ATTENTION_INL_H_
#undef ACTSPARSE_CPU_ATTENTION_INL_H_
#else
#define ACTSPARSE_CPU_ATTENTION_INL_H_
#endif

#include <actsparse/backends/cpu/f16_table.hpp>
#include <actsparse/core/dtype.hpp>
#include <actsparse/core/row_format.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include <hwy/cache_control.h>
#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace actsparse::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// At most 16 lanes, so a vector never crosses a 32-value group.
using attention_tag = hn::CappedTag<float, 16>;

// Values [i, i + lanes) of an encoded row of format F, i a multiple of lanes: the scalar
// decoder's values (decode_value; int4_g32_min's fma is fused where MulAdd is).
template <row_format F, class DF>
HWY_INLINE hn::Vec<DF> row_vector(DF df, const std::byte* HWY_RESTRICT row, std::size_t i,
                                  const float* HWY_RESTRICT scales) {
  const hn::RebindToSigned<DF> di;
  if constexpr (F == row_format::f32) {
    return hn::LoadU(df, reinterpret_cast<const float*>(row) + i);
  } else if constexpr (F == row_format::f16) {
    return load_as_f32(df, reinterpret_cast<const f16*>(row) + i);
  } else if constexpr (F == row_format::int8) {
    float s = 0.0F;
    std::memcpy(&s, row, sizeof s);
    const hn::Rebind<std::int8_t, DF> d8;
    const auto q = hn::PromoteTo(di, hn::LoadU(d8, reinterpret_cast<const std::int8_t*>(row + 4) + i));
    return hn::Mul(hn::ConvertTo(df, q), hn::Set(df, s));
  } else if constexpr (F == row_format::int8_g32) {
    const block_q8_0* b = reinterpret_cast<const block_q8_0*>(row) + i / row_group;
    return hn::Mul(q8_values(df, b, i % row_group), hn::Set(df, scales[b->d.bits]));
  } else {
    const hn::Rebind<std::uint8_t, DF> du8;
    const hn::RebindToUnsigned<DF> du;
    constexpr bool with_min = F == row_format::int4_g32_min;
    const std::size_t o = i % row_group;
    const std::byte* blk = row + i / row_group * (with_min ? sizeof(block_q4_min) : sizeof(block_q4_0));
    const std::uint8_t* qs = reinterpret_cast<const std::uint8_t*>(blk + (with_min ? 4 : 2));
    const auto bytes = hn::PromoteTo(du, hn::LoadU(du8, qs + o % 16));
    const auto n = o < 16 ? hn::And(bytes, hn::Set(du, 0x0FU)) : hn::ShiftRight<4>(bytes);
    const auto nf = hn::ConvertTo(df, hn::BitCast(di, n));
    f16 d{};
    std::memcpy(&d, blk, sizeof d);
    if constexpr (!with_min) {
      return hn::Mul(hn::Sub(nf, hn::Set(df, 8.0F)), hn::Set(df, scales[d.bits]));
    } else {
      f16 m{};
      std::memcpy(&m, blk + 2, sizeof m);
      return hn::MulAdd(nf, hn::Set(df, scales[d.bits]), hn::Set(df, scales[m.bits]));
    }
  }
}

// Values [i, i + 2·lanes) of an encoded row as two vectors, i a multiple of 2·lanes: row_vector's
// values. With 16 lanes a pair is one group of 32, decoded at once: both int4 formats look
// their nibbles up in a table of the group's 16 values (exact: (n − 8)·s, and fma(n, s, m) as
// the scalar decoder has it), q8 reads one scale.
template <row_format F, class DF>
HWY_INLINE void row_pair(DF df, const std::byte* HWY_RESTRICT row, std::size_t i, const float* HWY_RESTRICT scales,
                         hn::Vec<DF>& a, hn::Vec<DF>& b) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if constexpr (F == row_format::int4_g32 || F == row_format::int4_g32_min) {
    if (hn::Lanes(df) == 16) {
      constexpr bool with_min = F == row_format::int4_g32_min;
      const std::byte* blk = row + i / row_group * (with_min ? sizeof(block_q4_min) : sizeof(block_q4_0));
      f16 d{};
      std::memcpy(&d, blk, sizeof d);
      hn::Vec<DF> table;
      if constexpr (with_min) {
        f16 m{};
        std::memcpy(&m, blk + 2, sizeof m);
        table = hn::MulAdd(hn::Iota(df, 0.0F), hn::Set(df, scales[d.bits]), hn::Set(df, scales[m.bits]));
      } else {
        table = hn::Mul(hn::Iota(df, -8.0F), hn::Set(df, scales[d.bits]));
      }
      q4_lookup_bytes(table, reinterpret_cast<const std::uint8_t*>(blk + (with_min ? 4 : 2)), a, b);
      return;
    }
  }
#endif
  const std::size_t lanes = hn::Lanes(df);
  a = row_vector<F>(df, row, i, scales);
  b = row_vector<F>(df, row, i + lanes, scales);
}

// f.template operator()<F>() with F the row's format as a constant.
template <class Fn>
HWY_INLINE void with_format(row_format f, Fn&& fn) {
  switch (f) {
    case row_format::f32:
      fn.template operator()<row_format::f32>();
      return;
    case row_format::f16:
      fn.template operator()<row_format::f16>();
      return;
    case row_format::int8:
      fn.template operator()<row_format::int8>();
      return;
    case row_format::int8_g32:
      fn.template operator()<row_format::int8_g32>();
      return;
    case row_format::int4_g32:
      fn.template operator()<row_format::int4_g32>();
      return;
    case row_format::int4_g32_min:
      fn.template operator()<row_format::int4_g32_min>();
      return;
  }
}

// Starts loading bytes [begin, end) of a later row into the caches (a hint). A row spans pages
// the hardware prefetchers do not cross; a kernel asks for the part of the row
// attention_prefetch_rows ahead that matches the head it works on, so the requests spread
// over the work instead of flooding the line-fill buffers.
HWY_INLINE void prefetch_bytes(const std::byte* r, std::size_t begin, std::size_t end) {
  for (std::size_t b = begin; b < end; b += 64) hwy::Prefetch(r + b);
}

// The bytes of KV head g's values in a row of format F (head dimension hd): [begin, end).
template <row_format F>
HWY_INLINE void head_bytes(std::size_t g, std::size_t hd, std::size_t& begin, std::size_t& end) {
  if constexpr (F == row_format::int8) {
    begin = g == 0 ? 0 : 4 + g * hd;
    end = 4 + (g + 1) * hd;
  } else {
    begin = row_bytes(F, g * hd);
    end = row_bytes(F, (g + 1) * hd);
  }
}

// P rows × H heads at once (the same format): out[h · hstride + r] = scale · (q_h · row_r[col,
// col + hd)) for r < P. Each sum is one accumulator over j in order, its lanes added in a fixed
// tree, so a row's scores do not depend on its neighbours or on P.
template <std::size_t P, std::size_t H, row_format F>
HWY_INLINE void scores_of_rows(const std::byte* const* rows, std::size_t col, std::size_t hd,
                               const float* HWY_RESTRICT q, float scale, const float* HWY_RESTRICT scales,
                               float* HWY_RESTRICT out, std::size_t hstride) {
  const attention_tag df;
  using V = hn::Vec<decltype(df)>;
  const std::size_t lanes = hn::Lanes(df);
  V acc[P][H];
  for (std::size_t r = 0; r < P; ++r) {
    for (std::size_t h = 0; h < H; ++h) acc[r][h] = hn::Zero(df);
  }
  std::size_t j = 0;
  for (; j + 2 * lanes <= hd; j += 2 * lanes) {
    V v[P];
    V u[P];
    for (std::size_t r = 0; r < P; ++r) row_pair<F>(df, rows[r], col + j, scales, v[r], u[r]);
    for (std::size_t h = 0; h < H; ++h) {
      const V qv = hn::LoadU(df, q + h * hd + j);
      for (std::size_t r = 0; r < P; ++r) acc[r][h] = hn::MulAdd(qv, v[r], acc[r][h]);
      const V qu = hn::LoadU(df, q + h * hd + j + lanes);
      for (std::size_t r = 0; r < P; ++r) acc[r][h] = hn::MulAdd(qu, u[r], acc[r][h]);
    }
  }
  for (; j < hd; j += lanes) {
    V v[P];
    for (std::size_t r = 0; r < P; ++r) v[r] = row_vector<F>(df, rows[r], col + j, scales);
    for (std::size_t h = 0; h < H; ++h) {
      const V qv = hn::LoadU(df, q + h * hd + j);
      for (std::size_t r = 0; r < P; ++r) acc[r][h] = hn::MulAdd(qv, v[r], acc[r][h]);
    }
  }
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if (lanes == 16) {  // the sums four at a time, transposed; the same bits as one at a time
    constexpr std::size_t n = P * H;
    const V* const flat = &acc[0][0];
    float sums[n];
    std::size_t k = 0;
    for (; k + 4 <= n; k += 4) sum_lanes16x4(flat[k], flat[k + 1], flat[k + 2], flat[k + 3], sums + k);
    for (; k < n; ++k) sums[k] = sum_lanes16(flat[k]);
    for (std::size_t r = 0; r < P; ++r) {
      for (std::size_t h = 0; h < H; ++h) out[h * hstride + r] = sums[r * H + h] * scale;
    }
    return;
  }
#endif
  for (std::size_t r = 0; r < P; ++r) {
    for (std::size_t h = 0; h < H; ++h) out[h * hstride + r] = hn::GetLane(hn::SumOfLanes(df, acc[r][h])) * scale;
  }
}

// Rows per block of the blocked kernels: P × H accumulators within the register file.
inline constexpr std::size_t attention_block_rows = 4;

// Whether rows [p, p + attention_block_rows) are all present and of one format.
[[nodiscard]] HWY_INLINE bool uniform_block(const row_ref* rows, std::size_t p, std::size_t count) {
  if (p + attention_block_rows > count) return false;
  for (std::size_t r = 0; r < attention_block_rows; ++r) {
    if (rows[p + r].data == nullptr || rows[p + r].format != rows[p].format) return false;
  }
  return true;
}

// Head g's bytes of the present rows [p, p + attention_block_rows) (within count), for the
// block after the one a kernel works on (rows of format F, as that block's).
template <row_format F>
HWY_INLINE void prefetch_block(const row_ref* rows, std::size_t p, std::size_t count, std::size_t g, std::size_t hd) {
  std::size_t b = 0;
  std::size_t e = 0;
  head_bytes<F>(g, hd, b, e);
  for (std::size_t i = p; i < p + attention_block_rows && i < count; ++i) {
    if (rows[i].data != nullptr) prefetch_bytes(rows[i].data, b, e);
  }
}

// Distance of the row prefetch, in rows.
inline constexpr std::size_t attention_prefetch_rows = 2;

// out[h · hstride + p] = scale · (q_h · K_p[g(h)]) for every head h < heads (q_h = q + h·hd,
// g(h) = h / (heads / kv_heads), K_p[g] = row_p[g·hd, (g + 1)·hd)) and p < count; −inf for an
// absent row. Rows are read whole, one after another.
HWY_NOINLINE void attention_scores(const row_ref* rows, std::size_t count, std::size_t hd, std::size_t kv_heads,
                                   const float* q, std::size_t heads, float scale, float* out, std::size_t hstride) {
  const attention_tag df;
  const std::size_t lanes = hn::Lanes(df);
  const float* scales = f16_to_f32_table();
  const std::size_t group = heads / kv_heads;
  constexpr std::size_t B = attention_block_rows;
  for (std::size_t p = 0; p < count; ++p) {
    const row_ref& r = rows[p];
    if (hd % lanes == 0 && uniform_block(rows, p, count)) {  // B rows at once
      const std::byte* block[B];
      for (std::size_t i = 0; i < B; ++i) block[i] = rows[p + i].data;
      with_format(r.format, [&]<row_format F>() {
        for (std::size_t g = 0; g < kv_heads; ++g) {
          prefetch_block<F>(rows, p + B, count, g, hd);
          const std::size_t h0 = g * group;
          float* const o = out + h0 * hstride + p;
          const float* const qg = q + h0 * hd;
          std::size_t h = 0;
          for (; h + 8 <= group; h += 8) {
            scores_of_rows<B / 2, 8, F>(block, g * hd, hd, qg + h * hd, scale, scales, o + h * hstride, hstride);
            scores_of_rows<B / 2, 8, F>(block + B / 2, g * hd, hd, qg + h * hd, scale, scales, o + h * hstride + B / 2,
                                        hstride);
          }
          for (; h + 4 <= group; h += 4) {
            scores_of_rows<B, 4, F>(block, g * hd, hd, qg + h * hd, scale, scales, o + h * hstride, hstride);
          }
          for (; h + 2 <= group; h += 2) {
            scores_of_rows<B, 2, F>(block, g * hd, hd, qg + h * hd, scale, scales, o + h * hstride, hstride);
          }
          for (; h < group; ++h) {
            scores_of_rows<B, 1, F>(block, g * hd, hd, qg + h * hd, scale, scales, o + h * hstride, hstride);
          }
        }
      });
      p += B - 1;
      continue;
    }
    const std::byte* ahead = p + attention_prefetch_rows < count ? rows[p + attention_prefetch_rows].data : nullptr;
    if (r.data == nullptr) {
      for (std::size_t h = 0; h < heads; ++h) out[h * hstride + p] = -std::numeric_limits<float>::infinity();
      continue;
    }
    if (hd % lanes != 0) {  // head_dim not a multiple of the lanes: one value at a time
      for (std::size_t h = 0; h < heads; ++h) {
        float dot = 0.0F;
        for (std::size_t i = 0; i < hd; ++i) {
          dot = std::fma(q[h * hd + i], decode_value(r.format, r.data, h / group * hd + i), dot);
        }
        out[h * hstride + p] = dot * scale;
      }
      continue;
    }
    with_format(r.format, [&]<row_format F>() {
      for (std::size_t g = 0; g < kv_heads; ++g) {
        if (ahead != nullptr) {
          std::size_t b = 0;
          std::size_t e = 0;
          head_bytes<F>(g, hd, b, e);
          prefetch_bytes(ahead, b, e);
        }
        const std::size_t h0 = g * group;
        float* const o = out + h0 * hstride + p;
        const float* const qg = q + h0 * hd;
        std::size_t h = 0;
        for (; h + 8 <= group; h += 8)
          scores_of_rows<1, 8, F>(&r.data, g * hd, hd, qg + h * hd, scale, scales, o + h * hstride, hstride);
        for (; h + 4 <= group; h += 4)
          scores_of_rows<1, 4, F>(&r.data, g * hd, hd, qg + h * hd, scale, scales, o + h * hstride, hstride);
        for (; h + 2 <= group; h += 2)
          scores_of_rows<1, 2, F>(&r.data, g * hd, hd, qg + h * hd, scale, scales, o + h * hstride, hstride);
        for (; h < group; ++h)
          scores_of_rows<1, 1, F>(&r.data, g * hd, hd, qg + h * hd, scale, scales, o + h * hstride, hstride);
      }
    });
  }
}

// The softmax part of one chunk: per head h < heads, m[h] = the largest score s[h · hstride +
// p] (p < count; −inf when every row is absent), w = exp(s − m) (0 for absent rows), l[h] =
// Σ_p w. The sum runs over vectors of positions, then their lanes: a fixed order per target.
HWY_NOINLINE void attention_softmax_part(const float* s, std::size_t count, std::size_t heads, std::size_t hstride,
                                         float* w, float* m, float* l) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const std::size_t lanes = hn::Lanes(df);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (std::size_t h = 0; h < heads; ++h) {
    const float* sh = s + h * hstride;
    float* wh = w + h * hstride;
    float top = neg_inf;
    for (std::size_t p = 0; p < count; ++p) top = sh[p] > top ? sh[p] : top;
    m[h] = top;
    if (top == neg_inf) {
      for (std::size_t p = 0; p < count; ++p) wh[p] = 0.0F;
      l[h] = 0.0F;
      continue;
    }
    const V vt = hn::Set(df, top);
    V sum = hn::Zero(df);
    std::size_t p = 0;
    for (; p + lanes <= count; p += lanes) {
      const V e = hn::Exp(df, hn::Sub(hn::LoadU(df, sh + p), vt));  // exp(−inf) = 0
      hn::StoreU(e, df, wh + p);
      sum = hn::Add(sum, e);
    }
    float total = hn::GetLane(hn::SumOfLanes(df, sum));
    for (; p < count; ++p) {  // the tail through a one-lane vector: the same exp
      const hn::CappedTag<float, 1> d1;
      const float e = hn::GetLane(hn::Exp(d1, hn::Set(d1, sh[p] - top)));
      wh[p] = e;
      total += e;
    }
    l[h] = total;
  }
}

// H heads' weighted V for P rows of one format: acc_h[j ..] += w_h,r · row_r[col + j ..] over the
// head dimension, rows in order; each acc value is loaded and stored once for P multiply-adds.
template <std::size_t P, std::size_t H, row_format F>
HWY_INLINE void values_of_rows(const std::byte* const* rows, std::size_t col, std::size_t hd,
                               const float* HWY_RESTRICT w, std::size_t hstride, const float* HWY_RESTRICT scales,
                               float* HWY_RESTRICT acc) {
  const attention_tag df;
  using V = hn::Vec<decltype(df)>;
  const std::size_t lanes = hn::Lanes(df);
  V wv[H][P];
  for (std::size_t h = 0; h < H; ++h) {
    for (std::size_t r = 0; r < P; ++r) wv[h][r] = hn::Set(df, w[h * hstride + r]);
  }
  std::size_t j = 0;
  for (; j + 2 * lanes <= hd; j += 2 * lanes) {
    V v[P];
    V u[P];
    for (std::size_t r = 0; r < P; ++r) row_pair<F>(df, rows[r], col + j, scales, v[r], u[r]);
    for (std::size_t h = 0; h < H; ++h) {
      float* const a = acc + h * hd + j;
      V x = hn::LoadU(df, a);
      V y = hn::LoadU(df, a + lanes);
      for (std::size_t r = 0; r < P; ++r) x = hn::MulAdd(wv[h][r], v[r], x);
      for (std::size_t r = 0; r < P; ++r) y = hn::MulAdd(wv[h][r], u[r], y);
      hn::StoreU(x, df, a);
      hn::StoreU(y, df, a + lanes);
    }
  }
  for (; j < hd; j += lanes) {
    V v[P];
    for (std::size_t r = 0; r < P; ++r) v[r] = row_vector<F>(df, rows[r], col + j, scales);
    for (std::size_t h = 0; h < H; ++h) {
      float* const a = acc + h * hd + j;
      V x = hn::LoadU(df, a);
      for (std::size_t r = 0; r < P; ++r) x = hn::MulAdd(wv[h][r], v[r], x);
      hn::StoreU(x, df, a);
    }
  }
}

// acc[h · hd + i] = Σ_p w[h · hstride + p] · V_p[g(h)][i] for every head h < heads and i < hd,
// over the present rows p < count in order (from 0; acc stays in L1: heads · hd floats). Rows
// are read whole, one after another.
HWY_NOINLINE void attention_values(const row_ref* rows, std::size_t count, std::size_t hd, std::size_t kv_heads,
                                   const float* w, std::size_t hstride, std::size_t heads, float* acc) {
  const attention_tag df;
  const std::size_t lanes = hn::Lanes(df);
  const float* scales = f16_to_f32_table();
  const std::size_t group = heads / kv_heads;
  for (std::size_t i = 0; i < heads * hd; ++i) acc[i] = 0.0F;
  constexpr std::size_t B = attention_block_rows;
  for (std::size_t p = 0; p < count; ++p) {
    const row_ref& r = rows[p];
    if (hd % lanes == 0 && uniform_block(rows, p, count)) {  // B rows at once
      const std::byte* block[B];
      for (std::size_t i = 0; i < B; ++i) block[i] = rows[p + i].data;
      with_format(r.format, [&]<row_format F>() {
        for (std::size_t g = 0; g < kv_heads; ++g) {
          prefetch_block<F>(rows, p + B, count, g, hd);
          const std::size_t h0 = g * group;
          const float* const wg = w + h0 * hstride + p;
          float* const ag = acc + h0 * hd;
          std::size_t h = 0;
          for (; h + 4 <= group; h += 4) {
            values_of_rows<B, 4, F>(block, g * hd, hd, wg + h * hstride, hstride, scales, ag + h * hd);
          }
          for (; h + 2 <= group; h += 2) {
            values_of_rows<B, 2, F>(block, g * hd, hd, wg + h * hstride, hstride, scales, ag + h * hd);
          }
          for (; h < group; ++h)
            values_of_rows<B, 1, F>(block, g * hd, hd, wg + h * hstride, hstride, scales, ag + h * hd);
        }
      });
      p += B - 1;
      continue;
    }
    const std::byte* ahead = p + attention_prefetch_rows < count ? rows[p + attention_prefetch_rows].data : nullptr;
    if (r.data == nullptr) continue;
    if (hd % lanes != 0) {  // one value at a time
      for (std::size_t h = 0; h < heads; ++h) {
        const float wh = w[h * hstride + p];
        for (std::size_t i = 0; i < hd; ++i) {
          acc[h * hd + i] = std::fma(wh, decode_value(r.format, r.data, h / group * hd + i), acc[h * hd + i]);
        }
      }
      continue;
    }
    with_format(r.format, [&]<row_format F>() {
      for (std::size_t g = 0; g < kv_heads; ++g) {
        if (ahead != nullptr) {
          std::size_t b = 0;
          std::size_t e = 0;
          head_bytes<F>(g, hd, b, e);
          prefetch_bytes(ahead, b, e);
        }
        const std::size_t h0 = g * group;
        const float* const wg = w + h0 * hstride + p;
        float* const ag = acc + h0 * hd;
        std::size_t h = 0;
        for (; h + 4 <= group; h += 4)
          values_of_rows<1, 4, F>(&r.data, g * hd, hd, wg + h * hstride, hstride, scales, ag + h * hd);
        for (; h + 2 <= group; h += 2)
          values_of_rows<1, 2, F>(&r.data, g * hd, hd, wg + h * hstride, hstride, scales, ag + h * hd);
        for (; h < group; ++h)
          values_of_rows<1, 1, F>(&r.data, g * hd, hd, wg + h * hstride, hstride, scales, ag + h * hd);
      }
    });
  }
}

}  // namespace actsparse::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // ACTSPARSE_CPU_ATTENTION_INL_H_
