#pragma once
// Keeps the fewest highest scores that together hold a given share of the total score
// (top-p over importance): the budget follows the scores, so a token or layer whose
// importance is concentrated keeps little, and a flat one keeps much.

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/selectors/decorators.hpp>
#include <actsparse/selectors/detail/partition.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

namespace actsparse {
namespace detail {

// Whether the index-order sum of the kept scores without the lowest-ranked one (the last
// kept score equal to the boundary `value`) is below target, given `with`, the sum of all
// of them. Usually decided without a second pass by the error bound of recursive
// summation: with m scores >= 0, |computed - exact| <= g * exact for g = m * 2^-53 / (1 -
// m * 2^-53), so the computed sum without it is at most (with / (1 - g) - value) * (1 + g)
// (g is doubled below to cover the rounding of this bound itself).
inline bool below_without_last(std::span<const float> s, std::span<const std::uint32_t> idx, float value, double with,
                               double target) {
  const double g = static_cast<double>(idx.size() + 2) * 0x1p-52;
  if ((with / (1.0 - g) - static_cast<double>(value)) * (1.0 + g) < target) return true;
  std::size_t last = idx.size();
  do --last;
  while (s[idx[last]] != value);
  lane_sum without;  // the same mass sum, skipping position `last`
  for (std::size_t j = 0; j < idx.size(); ++j) {
    if (j != last) without.add(idx[j], s[idx[j]]);
  }
  return without.value() < target;
}

// Writes the smallest top set (ranking: score descending, index ascending) whose
// index-order sum reaches target > 0, starting from an estimate, and returns that sum.
// Scores finite and >= 0. The index-order sum of a top set never decreases as the set
// grows (each rounded addition of a value >= 0 is monotone), so "the smallest such set"
// is well defined and a binary search over its size finds it.
inline double mass_prefix(std::span<const float> s, double target, const cut& estimate, selection& out) {
  const double sum = emit_cut(s, estimate, out.indices);
  if (sum >= target && below_without_last(s, out.indices, estimate.value, sum, target)) return sum;
  // Rare: the estimate summed in another order and rounding moved the boundary. Binary
  // search the count with index-order sums; invariant S(lo) < target <= S(hi).
  const std::span<float> work(out.scratch_scores);
  std::size_t lo = 0;
  std::size_t hi = s.size();
  if (sum < target) {
    lo = out.indices.size();
  } else {
    hi = out.indices.size() - 1;  // >= 1: the sum without one score still reached target > 0
  }
  while (hi - lo > 1) {
    const std::size_t mid = lo + (hi - lo) / 2;
    if (emit_cut(s, top_count_cut(s, mid, work), out.indices, mid) >= target) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  return emit_cut(s, top_count_cut(s, hi, work), out.indices, hi);
}

}  // namespace detail

// Keeps the smallest set of highest scores whose sum reaches mass * total (ties at the
// boundary: lower index first), then the last recent_n positions, then the highest
// not-yet-kept scores until at least min_keep are kept (both clamped to n).
//   mass: finite and > 0; mass >= 1 keeps everything (reason none: not a fallback).
//   A mass needs non-negative scores. Degenerate scores keep everything with
//   dense_fallback = true: any NaN/inf (reason non_finite, checked first), any negative
//   score (negative), all zero (all_zero). After a non_finite or negative fallback
//   covered_mass and total_mass are 0 (the scores are not a mass).
//   Sums are in double, in index order; "reaches" means covered >= mass * total with
//   that sum, and dropping the lowest-ranked mass-chosen score would fall below.
// Average O(n) (radix select, no sort); no allocation once `out` has grown to n.
struct cumulative_mass {
  double mass = 1.0;
  std::size_t recent_n = 0;
  std::size_t min_keep = 0;

  void select(std::span<const float> scores, selection& out) const {
    constexpr std::string_view where = "cumulative_mass::select";
    detail::require(std::isfinite(mass) && mass > 0.0, where, "mass", mass,
                    "a finite mass > 0 (a share of the total score; mass >= 1 keeps everything)");
    const std::size_t n = scores.size();
    detail::require_universe(where, n);
    out.reset(n);
    if (mass >= 1.0) {  // everything: no selection, only the checks
      const detail::score_scan scan = detail::scan_scores(scores);
      if (!fell_back(scan, out)) {
        out.keep_all(n, fallback_reason::none);
        out.total_mass = out.covered_mass = scan.total;
      }
      return;
    }
    out.scratch_scores.resize(n);
    const std::span<float> work(out.scratch_scores);
    const detail::bracket b = detail::plan_mass(scores, mass);
    const detail::pass_result scan = detail::scan_pass<true>(scores, b, work.data());
    if (fell_back(scan, out)) return;
    out.total_mass = scan.total;
    if (const double target = mass * scan.total; !(target > 0.0)) {
      out.indices.clear();  // mass * total underflowed: the empty set reaches it
    } else {
      out.covered_mass = detail::mass_prefix(scores, target, detail::mass_cut(scores, target, b, scan, work), out);
    }
    bool changed = detail::add_recent(n, recent_n, out.indices);
    if (const std::size_t at_least = std::min(min_keep, n); out.indices.size() < at_least) {
      detail::add_top_unkept(where, scores, at_least - out.indices.size(), out);
      changed = true;
    }
    if (changed) detail::update_covered(scores, out);
  }

  [[nodiscard]] selection select(std::span<const float> scores) const {
    selection out;
    select(scores, out);
    return out;
  }

  friend bool operator==(const cumulative_mass&, const cumulative_mass&) = default;

 private:
  // The dense fallbacks, most severe first.
  static bool fell_back(const detail::score_scan& scan, selection& out) {
    const fallback_reason why = scan.non_finite     ? fallback_reason::non_finite
                                : scan.negative     ? fallback_reason::negative
                                : scan.total == 0.0 ? fallback_reason::all_zero
                                                    : fallback_reason::none;
    if (why != fallback_reason::none) out.keep_all(out.universe, why);
    return why != fallback_reason::none;
  }
};

// A per-layer mass (per_layer_table<double>) configures it; recent_n and min_keep stay the base's.
[[nodiscard]] inline cumulative_mass configure(const cumulative_mass& base, double mass) noexcept {
  cumulative_mass s = base;
  s.mass = mass;
  return s;
}

ACTSPARSE_REQUIRE_SELECTOR(cumulative_mass);

}  // namespace actsparse
