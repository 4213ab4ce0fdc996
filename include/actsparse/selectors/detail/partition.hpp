#pragma once
// Shared machinery of the selectors: argument checks, the index-order pass over the
// scores, O(n) selection of the k-th largest score or of the score at which a cumulative
// mass is reached, and the index-order pass that turns that boundary into sorted indices
// with ties broken by lower index.
//
// Why not std::nth_element: its mispredicted float compares cost more on 11008 scores than
// the whole selector's budget (docs/PERFORMANCE.md). Selection here runs on integer keys
// (cheaper compares than floats) in three steps: a sample of 256 scores
// brackets the boundary; the pass that must read every score anyway (its index-order sum
// is latency bound, so the extra work is nearly free) gathers the scores inside the
// bracket, and vectorised passes count (or sum) those above it; radix levels over the
// narrow key range of the bracket (its bins are even, unlike bins of the exponent) narrow
// it to one key. A bracket the sample got wrong costs one more pass over every key.

#include <actsparse/core/error.hpp>
#include <actsparse/core/mass_lanes.hpp>
#include <actsparse/core/selection_passes.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

// Keeps each hot loop in a function of its own. Inlined into a caller that makes calls
// around it, GCC 12 kept the loop's running sum in memory: 4x slower.
#if defined(__GNUC__) || defined(__clang__)
#define ACTSPARSE_SELECTORS_NOINLINE [[gnu::noinline]]
#else
#define ACTSPARSE_SELECTORS_NOINLINE
#endif

namespace actsparse::detail {

// Indices are u32, so a selector accepts 1 .. 2^32 - 1 candidates.
inline void require_universe(std::string_view where, std::size_t n) {
  require(n > 0, where, "scores.size()", n, "at least one score (there is nothing to select from)");
  require(n <= std::numeric_limits<std::uint32_t>::max(), where, "scores.size()", n,
          "at most 2^32 - 1 scores (indices are u32)");
}

// Names the offending element: "argument 'scores[17]' is nan; expected ...".
[[noreturn]] inline void fail_score(std::string_view where, std::span<const float> s, std::size_t i,
                                    std::string_view expected) {
  fail(where, "scores[" + std::to_string(i) + "]", s[i], expected);
}

template <class Bad>
std::size_t find_first(std::span<const float> s, Bad bad) noexcept {
  return static_cast<std::size_t>(std::find_if(s.begin(), s.end(), bad) - s.begin());
}
inline std::size_t first_non_finite(std::span<const float> s) noexcept {
  return find_first(s, [](float x) { return !std::isfinite(x); });
}
inline std::size_t first_nan(std::span<const float> s) noexcept {
  return find_first(s, [](float x) { return std::isnan(x); });
}

// An unsigned key with the order of the floats: +-magnitude around 2^31, so -0 and +0
// (equal floats, whose ties are decided by index) get the same key. Integer only.
inline std::uint32_t key_of_bits(std::uint32_t u) noexcept {
  const auto sign = static_cast<std::uint32_t>(static_cast<std::int32_t>(u) >> 31);  // all ones if negative
  return 0x80000000U + (((u & 0x7FFFFFFFU) ^ sign) - sign);
}
inline std::uint32_t order_key(float x) noexcept { return key_of_bits(std::bit_cast<std::uint32_t>(x)); }
inline float from_order_key(std::uint32_t k) noexcept {
  return k >= 0x80000000U ? std::bit_cast<float>(k - 0x80000000U)
                          : std::bit_cast<float>((0x80000000U - k) | 0x80000000U);
}
// The key of the smallest positive float: brackets from there up are "positive".
inline constexpr std::uint32_t positive_keys = 0x80000001U;

// The lane sum of detail/lanes.hpp, score by score.
struct lane_sum {
  double lane[mass_lanes] = {};
  void add(std::size_t index, float x) noexcept { lane[index % mass_lanes] += static_cast<double>(x); }
  [[nodiscard]] double value() const noexcept { return combine_lanes(lane); }
};

// The mass of all scores, and what a selector must know about them. A double sum of at
// most 2^32 finite floats cannot overflow, so the sum is finite exactly when every score
// is: no per-score test is needed.
struct score_scan {
  double total = 0.0;
  bool non_finite = false;
  bool negative = false;  // < 0; -0 is not negative (only meaningful when finite)
};

ACTSPARSE_SELECTORS_NOINLINE inline score_scan scan_scores(std::span<const float> s) noexcept {
  if (const selection_passes* p = installed_selection_passes(); p != nullptr && p->scan != nullptr) {
    const auto r = p->scan(s.data(), s.size());
    return {r.total, !std::isfinite(r.total), r.top > 0x80000000U};
  }
  double l[mass_lanes] = {};
  std::uint32_t top = 0;  // the largest bit pattern: above 2^31 exactly when a score is < 0
  const std::size_t n = s.size();
  const std::size_t whole = n - n % mass_lanes;
  for (std::size_t i = 0; i < whole; i += mass_lanes) {
    for (std::size_t k = 0; k < mass_lanes; ++k) {
      l[k] += static_cast<double>(s[i + k]);
      top = std::max(top, std::bit_cast<std::uint32_t>(s[i + k]));
    }
  }
  for (std::size_t i = whole; i < n; ++i) {
    l[i - whole] += static_cast<double>(s[i]);
    top = std::max(top, std::bit_cast<std::uint32_t>(s[i]));
  }
  const double total = combine_lanes(l);
  return {total, !std::isfinite(total), top > 0x80000000U};
}

// The mass of the kept scores (indices sorted ascending), in the order above.
ACTSPARSE_SELECTORS_NOINLINE inline double sum_kept(std::span<const float> s,
                                                    std::span<const std::uint32_t> idx) noexcept {
  lane_sum t;
  for (const std::uint32_t i : idx) t.add(i, s[i]);
  return t.value();
}

// The boundary of the ranking by (score descending, index ascending): keep every score
// > value and the first `ties` scores == value in index order (ties >= 1).
struct cut {
  float value = 0.0F;
  std::size_t above = 0;  // scores > value
  std::size_t ties = 0;   // scores == value that are kept
  std::size_t equal = 0;  // scores == value
  [[nodiscard]] std::size_t count() const noexcept { return above + ties; }
};

// Keys in [lk, hk]; the default is every key.
struct bracket {
  std::uint32_t lk = 0;
  std::uint32_t hk = std::numeric_limits<std::uint32_t>::max();
};

inline constexpr std::size_t sample_size = 256;
inline constexpr std::size_t sample_min_size = 2048;  // below it the bracket is every key

// A stratified sample of keys; the offset in each stratum comes from a fixed hash so that
// a periodic pattern in the scores does not alias with the stride. Deterministic.
inline void sample_keys(std::span<const float> v, std::array<std::uint32_t, sample_size>& keys) noexcept {
  const std::size_t n = v.size();
  for (std::uint64_t j = 0; j < sample_size; ++j) {  // 64-bit: j * n must not overflow
    const std::uint64_t lo = j * n / sample_size;
    const std::uint64_t width = (j + 1) * n / sample_size - lo;
    const std::uint64_t h = ((j + 1) * 0x9E3779B97F4A7C15ULL) >> 32;
    keys[j] = order_key(v[static_cast<std::size_t>(lo + ((h * width) >> 32))]);
  }
}

// Brackets descending sample rank r by +-(3 standard deviations of a sample rank + 2).
// Reorders keys (nth_element).
inline bracket bracket_from_sample(std::array<std::uint32_t, sample_size>& keys, double r) noexcept {
  constexpr double s = sample_size;
  const double f = std::clamp(r / s, 0.0, 1.0);
  const double d = 3.0 * std::sqrt(s * f * (1.0 - f)) + 2.0;
  bracket b;
  auto end = keys.end();
  if (r - d >= 0.0) {
    const auto pos = keys.begin() + static_cast<std::ptrdiff_t>(sample_size - 1 - static_cast<std::size_t>(r - d));
    std::nth_element(keys.begin(), pos, keys.end());
    b.hk = *pos;
    end = pos;
  }
  if (r + d < s - 1.0) {
    const auto pos =
        keys.begin() + static_cast<std::ptrdiff_t>(sample_size - 1 - static_cast<std::size_t>(std::ceil(r + d)));
    std::nth_element(keys.begin(), pos, end);
    b.lk = *pos;
  }
  return b;
}

inline bracket plan_count(std::span<const float> v, std::size_t k) noexcept {
  if (v.size() < sample_min_size) return {};
  std::array<std::uint32_t, sample_size> keys;
  sample_keys(v, keys);
  return bracket_from_sample(keys, static_cast<double>(k) * sample_size / static_cast<double>(v.size()) - 0.5);
}

// For a mass: the sample rank where the sample's descending cumulative sum reaches
// `fraction` of the sample's sum (a weighted quickselect: halve, sum the upper half, keep
// the half holding the boundary). Scores >= 0 (a NaN only makes the bracket useless).
inline bracket plan_mass(std::span<const float> v, double fraction) noexcept {
  if (v.size() < sample_min_size) return {};
  std::array<std::uint32_t, sample_size> keys;
  sample_keys(v, keys);
  const auto value = [&](std::size_t i) { return static_cast<double>(from_order_key(keys[i])); };
  double goal = 0.0;
  for (std::size_t i = 0; i < sample_size; ++i) goal += value(i);
  goal *= fraction;
  std::size_t lo = 0;  // [lo, hi) holds the boundary (ascending); [hi, end) is above it
  std::size_t hi = sample_size;
  double above = 0.0;
  while (hi - lo > 16) {
    const std::size_t mid = lo + (hi - lo) / 2;
    std::nth_element(keys.begin() + static_cast<std::ptrdiff_t>(lo), keys.begin() + static_cast<std::ptrdiff_t>(mid),
                     keys.begin() + static_cast<std::ptrdiff_t>(hi));
    double upper = 0.0;
    for (std::size_t i = mid; i < hi; ++i) upper += value(i);
    if (above + upper >= goal) {
      lo = mid;
    } else {
      above += upper;
      hi = mid;
    }
  }
  std::sort(keys.begin() + static_cast<std::ptrdiff_t>(lo), keys.begin() + static_cast<std::ptrdiff_t>(hi));
  std::size_t at = lo;  // the lowest, if rounding leaves the goal short
  for (std::size_t i = hi; i > lo; --i) {
    above += value(i - 1);
    if (above >= goal) {
      at = i - 1;
      break;
    }
  }
  return bracket_from_sample(keys, static_cast<double>(sample_size - 1 - at));
}

// The scores' key under a bracket: for a bracket of positive keys, u ^ 2^31 orders every
// float like key_of_bits (negative floats land below it) in one operation instead of five.
template <bool Positive>
std::uint32_t bracket_key(float x) noexcept {
  const auto u = std::bit_cast<std::uint32_t>(x);
  return Positive ? u ^ 0x80000000U : key_of_bits(u);
}

// (Total) The mass of all scores (the lane sum above), the scores inside b gathered to dst
// and (Sign) whether a sign bit is set, in one pass.
struct gathered {
  double total = 0.0;
  std::size_t inside = 0;
  bool sign = false;  // some score has its sign bit set (< 0, or -0)
};
template <bool Total, bool Sign, bool Positive>
ACTSPARSE_SELECTORS_NOINLINE gathered sum_and_gather(std::span<const float> v, bracket b, float* dst) noexcept {
  // For a positive bracket, (u ^ 2^31) - lk == u - (lk ^ 2^31): the raw bits serve as keys.
  const std::uint32_t lo = Positive ? b.lk ^ 0x80000000U : b.lk;
  const std::uint32_t width = b.hk - b.lk;
  if (const selection_passes* p = installed_selection_passes(); p != nullptr) {
    if (const auto f = p->sum_and_gather[Total][Sign][Positive]; f != nullptr) {
      const auto r = f(v.data(), v.size(), lo, width, dst);
      return {r.total, r.inside, (r.bits >> 31) != 0};
    }
  }
  double l[mass_lanes] = {};
  std::size_t m = 0;
  std::uint32_t bits = 0;
  const auto step = [&](float x, std::size_t lane) {
    if constexpr (Total) l[lane] += static_cast<double>(x);
    const auto u = std::bit_cast<std::uint32_t>(x);
    if constexpr (Sign) bits |= u;
    dst[m] = x;  // branch-free: written always, kept when inside
    m += static_cast<std::size_t>((Positive ? u : key_of_bits(u)) - lo <= width);
  };
  const std::size_t full = v.size() - v.size() % mass_lanes;
  for (std::size_t i = 0; i < full; i += mass_lanes) {
    for (std::size_t j = 0; j < mass_lanes; ++j) step(v[i + j], j);  // unrolled: the lanes stay in registers
  }
  for (std::size_t i = full; i < v.size(); ++i) step(v[i], i - full);
  const double total = combine_lanes(l);
  return {total, m, (bits >> 31) != 0};  // by value: an out-parameter kept the sum in memory after inlining
}

// How many scores lie above b: independent integer lanes, which compilers vectorise.
template <bool Positive>
ACTSPARSE_SELECTORS_NOINLINE std::size_t count_above(std::span<const float> v, bracket b) noexcept {
  constexpr std::size_t lanes = 8;
  const float* p = v.data();
  const std::size_t full = v.size() / lanes * lanes;
  std::array<std::uint32_t, lanes> above{};  // at most 2^32 / 8 per lane
  for (std::size_t i = 0; i < full; i += lanes) {
    for (std::size_t j = 0; j < lanes; ++j)
      above[j] += static_cast<std::uint32_t>(bracket_key<Positive>(p[i + j]) > b.hk);
  }
  std::size_t r = 0;
  for (std::size_t i = full; i < v.size(); ++i) r += static_cast<std::size_t>(bracket_key<Positive>(p[i]) > b.hk);
  for (const std::uint32_t a : above) r += a;
  return r;
}

// Whether a score is < 0 (-0 is not): integer compares, vectorised.
ACTSPARSE_SELECTORS_NOINLINE inline bool any_negative(std::span<const float> v) noexcept {
  std::uint32_t neg = 0;
  for (const float x : v)
    neg |= static_cast<std::uint32_t>(std::bit_cast<std::uint32_t>(x) - 0x80000001U < 0x7FFFFFFFU);
  return neg != 0;
}

// The sum of the scores above b: an estimate (callers check in index order), so it runs
// in independent lanes that compilers vectorise, in float within blocks of 128 scores
// and in double across blocks.
template <bool Positive>
ACTSPARSE_SELECTORS_NOINLINE double mass_above(std::span<const float> v, bracket b) noexcept {
  constexpr std::size_t lanes = 8;
  constexpr std::size_t block = 128;
  const float* p = v.data();
  const std::size_t full = v.size() / block * block;
  std::array<double, lanes> mass{};
  for (std::size_t i = 0; i < full; i += block) {
    std::array<float, lanes> part{};
    for (std::size_t q = i; q < i + block; q += lanes) {
      for (std::size_t j = 0; j < lanes; ++j) {
        const auto keep = 0U - static_cast<std::uint32_t>(bracket_key<Positive>(p[q + j]) > b.hk);
        part[j] += std::bit_cast<float>(std::bit_cast<std::uint32_t>(p[q + j]) & keep);  // no branch
      }
    }
    for (std::size_t j = 0; j < lanes; ++j) mass[j] += static_cast<double>(part[j]);
  }
  double r = 0.0;
  for (std::size_t i = full; i < v.size(); ++i)
    r += bracket_key<Positive>(p[i]) > b.hk ? static_cast<double>(p[i]) : 0.0;
  for (const double m : mass) r += m;
  return r;
}

// The sum of all of v (scores >= 0), estimated like mass_above: every key is above 0.
inline double sum_estimate(std::span<const float> v) noexcept { return mass_above<true>(v, bracket{0, 0}); }

struct pass_result : score_scan {
  std::size_t above = 0;    // count mode: keys > hk
  double above_mass = 0.0;  // mass mode: their sum (an estimate, not in index order)
  std::size_t inside = 0;   // keys in [lk, hk], gathered to dst
};

// The scan (mass mode: with the negative test), plus: counts (or sums) the scores above
// the bracket and gathers those inside it into dst (v.size() floats).
template <bool Mass, bool Total, bool Positive>
pass_result scan_pass_with(std::span<const float> v, bracket b, float* dst) noexcept {
  const gathered g = sum_and_gather<Total, Mass, Positive>(v, b, dst);
  pass_result r;
  r.total = g.total;
  r.non_finite = !std::isfinite(g.total);
  r.inside = g.inside;
  // A mass does not need the count above the bracket (the emitted count gives it).
  if (!Mass && b.hk != bracket{}.hk) r.above = count_above<Positive>(v, b);
  if constexpr (Mass) {
    r.negative = g.sign && any_negative(v);  // the exact test only when a sign bit is set
    if (b.hk != bracket{}.hk) r.above_mass = mass_above<Positive>(v, b);
  }
  return r;
}
// Total = false: no sum (and no non-finite test), for callers that checked the scores.
template <bool Mass, bool Total = true>
pass_result scan_pass(std::span<const float> v, bracket b, float* dst) noexcept {
  return b.lk >= positive_keys ? scan_pass_with<Mass, Total, true>(v, b, dst)
                               : scan_pass_with<Mass, Total, false>(v, b, dst);
}

// Narrows c (scores with keys in b) to the boundary: count mode, the k-th largest; mass
// mode, where the descending cumulative sum reaches need (an estimate: sums run in bin
// order; callers that need exactness check in index order). Reorders c.
template <bool Mass>
ACTSPARSE_SELECTORS_NOINLINE cut refine(std::span<float> c, bracket b, std::size_t k, double need) {
  std::size_t above = 0;
  double above_mass = 0.0;
  const auto key = [positive = b.lk >= positive_keys](float x) {
    return positive ? bracket_key<true>(x) : bracket_key<false>(x);
  };
  // Radix levels while the set is large; then nth_element (count) or a sort (mass, which
  // needs the prefix sums) of what is left.
  constexpr std::size_t small = Mass ? 64 : 512;
  while (c.size() > small && b.lk != b.hk) {
    const std::uint32_t width = b.hk - b.lk;
    const unsigned shift = width < 256 ? 0U : static_cast<unsigned>(std::bit_width(width)) - 8U;
    std::array<std::uint32_t, 256> count{};
    std::array<double, Mass ? 256 : 1> mass{};
    for (const float x : c) {
      const std::uint32_t bin = (key(x) - b.lk) >> shift;
      ++count[bin];
      if constexpr (Mass) mass[bin] += static_cast<double>(x);
    }
    std::uint32_t lowest = 0;
    while (count[lowest] == 0) ++lowest;
    std::uint32_t bin = width >> shift;
    for (;; --bin) {  // from the top; the lowest bin also stops a mass that rounding left short
      if (count[bin] == 0) continue;
      if ((Mass ? above_mass + mass[bin] >= need : above + count[bin] >= k) || bin == lowest) break;
      above += count[bin];
      if constexpr (Mass) above_mass += mass[bin];
    }
    const std::uint64_t lo = b.lk + (std::uint64_t{bin} << shift);
    b = {static_cast<std::uint32_t>(lo),
         static_cast<std::uint32_t>(std::min<std::uint64_t>(b.hk, lo + ((1ULL << shift) - 1)))};
    std::size_t m = 0;
    for (const float x : c) {
      c[m] = x;
      m += static_cast<std::size_t>(key(x) - b.lk <= b.hk - b.lk);
    }
    c = c.first(m);
  }
  float value = c[0];  // all equal when b.lk == b.hk
  std::size_t gt = 0;
  std::size_t eq = c.size();
  double gt_mass = 0.0;
  if (b.lk != b.hk) {
    if constexpr (Mass) {
      std::sort(c.begin(), c.end(), std::greater<>());
      std::size_t j = 0;
      for (double cum = above_mass + static_cast<double>(c[0]); cum < need && j + 1 < c.size();) {
        cum += static_cast<double>(c[++j]);
      }
      value = c[j];
      gt = static_cast<std::size_t>(std::find(c.begin(), c.end(), value) - c.begin());
      for (std::size_t i = 0; i < gt; ++i) gt_mass += static_cast<double>(c[i]);
    } else {
      const auto at = c.begin() + static_cast<std::ptrdiff_t>(k - above - 1);
      std::nth_element(c.begin(), at, c.end(), std::greater<>());
      value = *at;
      gt = static_cast<std::size_t>(std::count_if(c.begin(), at, [value](float x) { return x > value; }));
    }
    eq = static_cast<std::size_t>(std::count(c.begin(), c.end(), value));
  }
  std::size_t ties = k - above - gt;
  if constexpr (Mass) {
    const double t = (need - above_mass - gt_mass) / static_cast<double>(value);
    ties = eq;  // also when t is NaN or infinite (value == 0)
    if (t < static_cast<double>(eq)) ties = t <= 1.0 ? 1 : static_cast<std::size_t>(std::ceil(t));
  }
  return {value, above + gt, ties, eq};
}

// The top-k cut (1 <= k <= n, no NaN) from a scan_pass over bracket b; work holds what
// the pass gathered. A bracket that missed (rare) is redone over every key.
inline cut count_cut(std::span<const float> v, std::size_t k, bracket b, pass_result p, std::span<float> work) {
  if (!(p.above < k && k <= p.above + p.inside)) p = scan_pass<false, false>(v, b = bracket{}, work.data());
  cut c = refine<false>(work.first(p.inside), b, k - p.above, 0.0);
  c.above += p.above;
  return c;
}
inline cut top_count_cut(std::span<const float> v, std::size_t k, std::span<float> work) {
  const bracket b = plan_count(v, k);
  return count_cut(v, k, b, scan_pass<false, false>(v, b, work.data()), work);
}

// Estimate of the smallest top set whose sum reaches target (0 < target <= p.total;
// scores finite and >= 0), from a scan_pass<true> over bracket b. Its `above` counts only
// the scores inside the bracket: emit_cut's output size gives the count.
inline cut mass_cut(std::span<const float> v, double target, bracket b, pass_result p, std::span<float> work) {
  const double inside_mass = sum_estimate(work.first(p.inside));
  if (!(p.above_mass < target && target <= p.above_mass + inside_mass)) {
    p = scan_pass<true, false>(v, b = bracket{}, work.data());
  }
  return refine<true>(work.first(p.inside), b, 0, target - p.above_mass);
}

// Writes the indices a cut keeps, in index order (branch-free: the keep test is data
// dependent and would mispredict), to dst; returns their count and their mass (the lane
// sum, fused into this pass: adding +0.0 for a dropped score leaves a lane unchanged, so
// this equals sum_kept over the written indices).
struct emitted {
  std::size_t count = 0;
  double mass = 0.0;
};

// The indices whose key is >= tk (Strict: > tk), in index order, to dst (which must hold
// one slot more than are kept), with their count and mass (AVX-512 where the CPU has it:
// the passes a backend installs, core/selection_passes.hpp, the same bits).
template <bool Positive, bool Strict>
ACTSPARSE_SELECTORS_NOINLINE emitted emit_above(std::span<const float> s, std::uint32_t tk,
                                                std::uint32_t* dst) noexcept {
  if (const selection_passes* p = installed_selection_passes(); p != nullptr) {
    if (const auto f = p->emit_above[Positive][Strict]; f != nullptr) {
      const auto r = f(s.data(), s.size(), tk, dst);
      return {r.count, r.mass};
    }
  }
  double l[mass_lanes] = {};
  std::size_t cnt = 0;
  const auto step = [&](std::size_t i, std::size_t lane) {
    const std::uint32_t k = bracket_key<Positive>(s[i]);
    const bool take = Strict ? k > tk : k >= tk;
    dst[cnt] = static_cast<std::uint32_t>(i);
    cnt += static_cast<std::size_t>(take);
    l[lane] += take ? static_cast<double>(s[i]) : 0.0;
  };
  const std::size_t full = s.size() - s.size() % mass_lanes;
  for (std::size_t i = 0; i < full; i += mass_lanes) {
    for (std::size_t j = 0; j < mass_lanes; ++j) step(i + j, j);  // unrolled: the lanes stay in registers
  }
  for (std::size_t i = full; i < s.size(); ++i) step(i, i - full);
  return {cnt, combine_lanes(l)};
}
template <bool Positive>
ACTSPARSE_SELECTORS_NOINLINE emitted emit_cut_with(std::span<const float> s, const cut& c,
                                                   std::uint32_t* dst) noexcept {
  const std::uint32_t tk = bracket_key<Positive>(c.value);
  if (c.ties == c.equal) return emit_above<Positive, false>(s, tk, dst);  // every tie kept: one compare
  double l[mass_lanes] = {};  // some ties dropped: the first c.ties in index order are kept
  std::size_t cnt = 0;
  std::size_t seen = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const std::uint32_t k = bracket_key<Positive>(s[i]);
    const bool eq = k == tk;
    const bool take = (k > tk) | (eq & (seen < c.ties));
    seen += static_cast<std::size_t>(eq);
    dst[cnt] = static_cast<std::uint32_t>(i);
    cnt += static_cast<std::size_t>(take);
    l[i % mass_lanes] += take ? static_cast<double>(s[i]) : 0.0;
  }
  return {cnt, combine_lanes(l)};
}
// `most`: an upper bound on the kept count when the caller knows one (a count cut's
// c.count()): the emission writes at most one slot past the last kept index, so `out`
// grows to most + 1 instead of n (no zero-filling of slots that are never used).
// Returns the mass of the kept scores (== sum_kept(s, out)).
inline double emit_cut(std::span<const float> s, const cut& c, std::vector<std::uint32_t>& out,
                       std::size_t most = std::numeric_limits<std::size_t>::max()) {
  out.resize(std::min(s.size(), most == std::numeric_limits<std::size_t>::max() ? most : most + 1));
  const emitted e = c.value > 0.0F ? emit_cut_with<true>(s, c, out.data()) : emit_cut_with<false>(s, c, out.data());
  out.resize(e.count);
  return e.mass;
}

}  // namespace actsparse::detail
