#pragma once
// The bodies of the selection kernels, in the neutral dialect of kernel_source.hpp (its
// macros, positions, $KEY placeholders and lane sums): gate_select's gate and compaction,
// top_k, and cumulative_mass with its two accumulators (one per dialect). What they keep and
// how that compares with the host selectors: docs/POLICIES.md, "Device selection".

#include <actsparse/backends/gpu/kernel_source.hpp>

#include <string_view>

namespace actsparse::gpu::source {

// gate_select, kernel 1: h = act(W x), and each block's count of |h| > threshold.
inline constexpr std::string_view gate = R"(  GPU_SHARED unsigned int warp_kept[$WARPS];
$ROWS  if (lane == 0u) {
    unsigned int kept = 0u;
    GPU_UNROLL
    for (int r = 0; r < $R; ++r) {
      const unsigned int k = first + (unsigned int)r;
      if (k < rows) {
        const float v = actsparse_$ACT(acc[r]);
        h[k] = v;
        if (GPU_FABS(v) > threshold) ++kept;
      }
    }
    warp_kept[warp] = kept;
  }
  GPU_BARRIER();
  if (tid == 0u) {
    unsigned int total = 0u;
    for (unsigned int i = 0u; i < $WARPSu; ++i) total += warp_kept[i];
    block_counts[group] = total;
  }
)";
inline constexpr param gate_params[] = {
    {K::bytes, "w"},  {K::u64, "row_stride"}, {K::in_f32, "x"},  {K::u32, "rows"},
    {K::u32, "cols"}, {K::f32, "threshold"},  {K::out_f32, "h"}, {K::out_u32, "block_counts"}};

// gate_select, kernel 2: block b writes its kept rows, in order, at the sum of the counts of the
// blocks before it. Integer counts: exact in any order. The kept rows of a chunk get their
// positions from a ballot per warp and the counts of the warps before it.
inline constexpr std::string_view compact = R"(  GPU_SHARED unsigned int warp_kept[$WARPS];
  GPU_SHARED unsigned int base;
  unsigned int before = 0u;
  for (unsigned int b = tid; b < group; b += $Tu) before += block_counts[b];
  before = actsparse_simd_sum_u32(before);
  if (lane == 0u) warp_kept[warp] = before;
  GPU_BARRIER();
  if (tid == 0u) {
    unsigned int total = 0u;
    for (unsigned int i = 0u; i < $WARPSu; ++i) total += warp_kept[i];
    base = total;
  }
  const unsigned int first = group * rows_per_block;
  const unsigned int end = first >= rows ? first : (rows - first < rows_per_block ? rows : first + rows_per_block);
  for (unsigned int chunk = first; chunk < end; chunk += $Tu) {
    const unsigned int k = chunk + tid;
    const bool keep = k < end && GPU_FABS(h[k]) > threshold;
    const unsigned int ballot = GPU_BALLOT(keep);
    GPU_BARRIER();
    if (lane == 0u) warp_kept[warp] = GPU_POPC(ballot);
    GPU_BARRIER();
    unsigned int at = base;
    for (unsigned int i = 0u; i < warp; ++i) at += warp_kept[i];
    if (keep) idx[at + GPU_POPC(ballot & ((1u << lane) - 1u))] = k;
    GPU_BARRIER();
    if (tid == 0u) {
      for (unsigned int i = 0u; i < $WARPSu; ++i) base += warp_kept[i];
    }
  }
  if (tid == 0u && group == groups - 1u) *count = base;
)";
inline constexpr param compact_params[] = {{K::in_f32, "h"},
                                           {K::u32, "rows"},
                                           {K::u32, "rows_per_block"},
                                           {K::f32, "threshold"},
                                           {K::in_u32, "block_counts"},
                                           {K::out_u32, "idx"},
                                           {K::out_u32, "count"}};

// top_k (one block). Counts are integers: exact in any order. Passes bit = 31 .. 0 find the
// k-th largest order key bit by bit (are there k keys above candidate - 1?); pass bit = -1
// counts the keys above it. Then one pass in index order writes the kept indices: every
// thread keeps the running totals in registers, updated identically from the per-warp
// ballots, so no shared running state.
inline constexpr std::string_view top_k_helpers = R"(GPU_FN unsigned int actsparse_count_above(
    GPU_GLOBAL const float* scores, unsigned int n, unsigned int bound, unsigned int tid) {
  unsigned int c = 0u;
  for (unsigned int i = tid; i < n; i += $Tu) c += actsparse_order_key(scores[i]) > bound ? 1u : 0u;
  return actsparse_simd_sum_u32(c);
}
)";
inline constexpr std::string_view top_k = R"(  GPU_SHARED unsigned int warp_gt[$WARPS];
  GPU_SHARED unsigned int warp_eq[$WARPS];
  if (k == 0u || k > n) {
    if (tid == 0u) *count = 0u;
    return;
  }
  unsigned int kth = 0u;
  unsigned int above = 0u;
  for (int bit = 31; bit >= -1; --bit) {
    const unsigned int bound = bit >= 0 ? (kth | (1u << (unsigned int)bit)) - 1u : kth;
    const unsigned int part = actsparse_count_above(scores, n, bound, tid);
    if (lane == 0u) warp_gt[warp] = part;
    GPU_BARRIER();
    unsigned int total = 0u;
    for (unsigned int s = 0u; s < $WARPSu; ++s) total += warp_gt[s];
    GPU_BARRIER();
    if (bit < 0) {
      above = total;
    } else if (total >= k) {
      kth |= 1u << (unsigned int)bit;
    }
  }
  const unsigned int ties = k - above;
  const unsigned int lanes_before = (1u << lane) - 1u;
  unsigned int gt_base = 0u;
  unsigned int eq_base = 0u;
  for (unsigned int chunk = 0u; chunk < n; chunk += $Tu) {
    const unsigned int i = chunk + tid;
    const unsigned int key = i < n ? actsparse_order_key(scores[i]) : 0u;
    const bool gt = i < n && key > kth;
    const bool eq = i < n && key == kth;
    const unsigned int ballot_gt = GPU_BALLOT(gt);
    const unsigned int ballot_eq = GPU_BALLOT(eq);
    GPU_BARRIER();
    if (lane == 0u) {
      warp_gt[warp] = GPU_POPC(ballot_gt);
      warp_eq[warp] = GPU_POPC(ballot_eq);
    }
    GPU_BARRIER();
    unsigned int gt_before = gt_base + GPU_POPC(ballot_gt & lanes_before);
    unsigned int eq_before = eq_base + GPU_POPC(ballot_eq & lanes_before);
    for (unsigned int s = 0u; s < $WARPSu; ++s) {
      if (s < warp) {
        gt_before += warp_gt[s];
        eq_before += warp_eq[s];
      }
      gt_base += warp_gt[s];
      eq_base += warp_eq[s];
    }
    if (gt || (eq && eq_before < ties)) idx[gt_before + (eq_before < ties ? eq_before : ties)] = i;
  }
  if (tid == 0u) *count = k;
)";
inline constexpr param top_k_params[] = {
    {K::in_f32, "scores"}, {K::u32, "n"}, {K::u32, "k"}, {K::out_u32, "idx"}, {K::out_u32, "count"}};

// cumulative_mass's sums: an accumulator of float scores >= 0 with a fixed order of additions.
// Two implementations, one per dialect (gpu::dialect::mass): in double where the language has
// it (CUDA), in float pairs where it does not (MSL). Both provide
//   actsparse_mass (type), actsparse_mass_zero(), actsparse_mass_of(float),
//   actsparse_mass_add(a, b), actsparse_mass_shfl_xor(m, offset) (lane ^ offset's m),
//   actsparse_mass_ge(a, b), actsparse_mass_is_zero(m), actsparse_mass_scaled(float f, m) (f·m),
//   ACTSPARSE_MASS_SHARED(a, n) (a block-shared array of n), ACTSPARSE_MASS_STORE(a, i, m),
//   ACTSPARSE_MASS_LOAD(a, i).
inline constexpr std::string_view mass_f64 = R"(typedef double actsparse_mass;
GPU_FN actsparse_mass actsparse_mass_zero() { return 0.0; }
GPU_FN actsparse_mass actsparse_mass_of(float s) { return (double)s; }
GPU_FN actsparse_mass actsparse_mass_add(actsparse_mass a, actsparse_mass b) { return a + b; }
GPU_FN actsparse_mass actsparse_mass_shfl_xor(actsparse_mass m, int offset) { return GPU_SHFL_XOR(m, offset); }
GPU_FN bool actsparse_mass_ge(actsparse_mass a, actsparse_mass b) { return a >= b; }
GPU_FN bool actsparse_mass_is_zero(actsparse_mass m) { return m == 0.0; }
GPU_FN actsparse_mass actsparse_mass_scaled(float f, actsparse_mass m) { return (double)f * m; }
#define ACTSPARSE_MASS_SHARED(a, n) GPU_SHARED double a[n]
#define ACTSPARSE_MASS_STORE(a, i, m) (a[i] = (m))
#define ACTSPARSE_MASS_LOAD(a, i) (a[i])
)";
// Float pairs (hi + lo, hi = the float nearest the pair's value), added with exact two-sums
// (Knuth's TwoSum: s + err == a + b exactly, for either order of a and b, so a butterfly step
// gives the same pair in both lanes). One pair addition has a relative error of a few 2^-48;
// it is exact when all values are multiples of 2^-m and the sums stay below 2^(46-m). Pairs
// compare lexicographically (both have hi = RN(hi + lo)). f·m: f·hi exactly as p + e (an
// fma), plus the rounded f·lo.
inline constexpr std::string_view mass_f32_pair = R"(struct actsparse_pair {
  float hi;
  float lo;
};
typedef actsparse_pair actsparse_mass;
GPU_FN actsparse_pair actsparse_pair_of(float hi, float lo) {
  actsparse_pair r;
  r.hi = hi;
  r.lo = lo;
  return r;
}
GPU_FN actsparse_pair actsparse_two_sum(float a, float b) {
  const float s = a + b;
  const float bb = s - a;
  return actsparse_pair_of(s, (a - (s - bb)) + (b - bb));
}
GPU_FN actsparse_pair actsparse_mass_zero() { return actsparse_pair_of(0.0f, 0.0f); }
GPU_FN actsparse_pair actsparse_mass_of(float s) { return actsparse_pair_of(s, 0.0f); }
GPU_FN actsparse_pair actsparse_mass_add(actsparse_pair a, actsparse_pair b) {
  const actsparse_pair s = actsparse_two_sum(a.hi, b.hi);
  const actsparse_pair t = actsparse_two_sum(a.lo, b.lo);
  const actsparse_pair u = actsparse_two_sum(s.hi, s.lo + t.hi);
  return actsparse_two_sum(u.hi, u.lo + t.lo);
}
GPU_FN actsparse_pair actsparse_mass_shfl_xor(actsparse_pair m, int offset) {
  return actsparse_pair_of(GPU_SHFL_XOR(m.hi, offset), GPU_SHFL_XOR(m.lo, offset));
}
GPU_FN bool actsparse_mass_ge(actsparse_pair a, actsparse_pair b) {
  return a.hi > b.hi || (a.hi == b.hi && a.lo >= b.lo);
}
GPU_FN bool actsparse_mass_is_zero(actsparse_pair m) { return m.hi == 0.0f; }
GPU_FN actsparse_pair actsparse_mass_scaled(float f, actsparse_pair m) {
  const float p = f * m.hi;
  const float e = GPU_FMA(f, m.hi, -p);
  return actsparse_two_sum(p, e + f * m.lo);
}
#define ACTSPARSE_MASS_SHARED(a, n) GPU_SHARED float a##_hi[n]; GPU_SHARED float a##_lo[n]
#define ACTSPARSE_MASS_STORE(a, i, m) (a##_hi[i] = (m).hi, a##_lo[i] = (m).lo)
#define ACTSPARSE_MASS_LOAD(a, i) actsparse_pair_of(a##_hi[i], a##_lo[i])
)";

// cumulative_mass (one block): the cumulative_mass selector for one row, recent_n = 0. The sums
// have a fixed order: each thread adds its scores (i = tid, tid + T, ...) in index order, the
// lanes meet in the butterfly, the warps in warp order; every thread gets the same values. The
// mass of a set of scores >= 0 never decreases when a score joins it (each step is a rounded
// addition of terms >= 0), so bisection over the boundary is sound. The kept set is
// {key > ke} ∪ {key == ke, index < je}: a prefix of the ranking by (score descending, index
// ascending) of the selectors.
//
// One loop of counting passes (a single call site, so the shared arrays stay at kernel scope,
// as MSL requires): pass 0 the total; passes 1 .. 31 the boundary key bits 30 .. 0 (the largest
// key whose {key >= ke} is enough); passes 32 and 33 the scores above the boundary and with its
// ties; then the fewest ties at the boundary, in index order, that are enough (bisection over
// the index, only when the boundary score is tied).
inline constexpr std::string_view cumulative_mass = R"(  ACTSPARSE_MASS_SHARED(warp_mass, $WARPS);
  GPU_SHARED unsigned int warp_count[$WARPS];
  // The selector's dense fallbacks: a NaN / inf or a negative score (-0 is not), or all zero.
  unsigned int bad = 0u;
  for (unsigned int i = tid; i < n; i += $Tu) {
    const unsigned int u = actsparse_float_to_bits(scores[i]);
    bad += ((u & 0x7F800000u) == 0x7F800000u || u > 0x80000000u) ? 1u : 0u;
  }
  bad = actsparse_simd_sum_u32(bad);
  if (lane == 0u) warp_count[warp] = bad;
  GPU_BARRIER();
  bad = 0u;
  for (unsigned int s = 0u; s < $WARPSu; ++s) bad += warp_count[s];
  GPU_BARRIER();
  const unsigned int keep = min_keep < n ? min_keep : n;
  actsparse_mass target = actsparse_mass_zero();
  unsigned int ke = 0x80000000u;  // keep {key > ke} or {key == ke, index < je}; every key is >= 1: ke = 0 keeps all
  unsigned int je = n;
  unsigned int lo = 0u;     // the bisection: the ties below index lo are not enough, those below je are
  unsigned int above = 0u;  // the scores with key > ke
  for (unsigned int pass = 0u;; ++pass) {
    unsigned int qk = ke;  // this pass sums {key > qk} or {key == qk, index < qj}
    unsigned int qj = n;
    if (pass == 0u) {
      qk = 0x80000000u;  // every score >= 0
    } else if (pass <= 31u) {
      qk = ke | (1u << (31u - pass));
    } else if (pass == 32u) {
      qj = 0u;
    } else if (pass > 33u) {
      if (je - lo <= 1u) break;
      qj = lo + (je - lo) / 2u;
    }
    actsparse_mass m = actsparse_mass_zero();
    unsigned int c = 0u;
    for (unsigned int i = tid; i < n; i += $Tu) {
      const float s = scores[i];
      const unsigned int key = actsparse_order_key(s);
      if (key > qk || (key == qk && i < qj)) {
        m = actsparse_mass_add(m, actsparse_mass_of(s));
        ++c;
      }
    }
    for (int offset = 16; offset > 0; offset >>= 1) m = actsparse_mass_add(m, actsparse_mass_shfl_xor(m, offset));
    c = actsparse_simd_sum_u32(c);
    if (lane == 0u) {
      ACTSPARSE_MASS_STORE(warp_mass, warp, m);
      warp_count[warp] = c;
    }
    GPU_BARRIER();
    m = actsparse_mass_zero();
    c = 0u;
    for (unsigned int s = 0u; s < $WARPSu; ++s) {
      m = actsparse_mass_add(m, ACTSPARSE_MASS_LOAD(warp_mass, s));
      c += warp_count[s];
    }
    GPU_BARRIER();
    // Whether the set of this pass is enough: it reaches target and holds min(min_keep, n).
    const bool enough = c >= keep && actsparse_mass_ge(m, target);
    if (pass == 0u) {
      if (bad != 0u || actsparse_mass_is_zero(m) || mass >= 1.0f) {
        ke = 0u;  // everything
        je = n;
        break;
      }
      target = actsparse_mass_scaled(mass, m);
      if (keep == 0u && actsparse_mass_ge(actsparse_mass_zero(), target)) {
        ke = 0xFFFFFFFFu;  // nothing: mass * total is not above 0 and min_keep is 0
        je = 0u;
        break;
      }
    } else if (pass <= 31u) {
      if (enough) ke = qk;
    } else if (pass == 32u) {
      above = c;
    } else if (pass == 33u) {
      if (c - above <= 1u) break;  // at most one tie at ke: keep it (je = n)
    } else if (enough) {
      je = qj;
    } else {
      lo = qj;
    }
  }
  const unsigned int lanes_before = (1u << lane) - 1u;
  unsigned int base = 0u;
  for (unsigned int chunk = 0u; chunk < n; chunk += $Tu) {
    const unsigned int i = chunk + tid;
    const unsigned int key = i < n ? actsparse_order_key(scores[i]) : 0u;
    const bool kept = i < n && (key > ke || (key == ke && i < je));
    const unsigned int ballot = GPU_BALLOT(kept);
    GPU_BARRIER();
    if (lane == 0u) warp_count[warp] = GPU_POPC(ballot);
    GPU_BARRIER();
    unsigned int at = base + GPU_POPC(ballot & lanes_before);
    for (unsigned int s = 0u; s < $WARPSu; ++s) {
      if (s < warp) at += warp_count[s];
      base += warp_count[s];
    }
    if (kept) idx[at] = i;
  }
  if (tid == 0u) *count = base;
)";
inline constexpr param cumulative_mass_params[] = {{K::in_f32, "scores"}, {K::u32, "n"},       {K::f32, "mass"},
                                                   {K::u32, "min_keep"},  {K::out_u32, "idx"}, {K::out_u32, "count"}};

}  // namespace actsparse::gpu::source
