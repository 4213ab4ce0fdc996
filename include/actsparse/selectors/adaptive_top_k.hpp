#pragma once
// Per-token expert count for MoE: a confident router (mass on few experts) runs fewer
// experts, an unsure one runs more, from a short list of allowed counts (buckets) so that
// the per-expert batches stay a few fixed shapes.

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/selectors/detail/partition.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace actsparse {

// For one token's router probabilities: keeps the top b experts (ties: lower index
// first) for the smallest bucket b whose top-b probabilities sum to at least `mass`
// (sum in double, in index order: covered_mass is that sum); if no bucket reaches it,
// the largest bucket. Buckets larger than n are clamped to n (all experts).
//   buckets: non-empty, strictly increasing, every bucket >= 1.
//   mass: in [0, 1]; 0 always picks the smallest bucket.
//   Probabilities must be finite and >= 0 (an error names the first bad one); they
//   need not sum to 1.
// O(n * buckets.size()); no allocation once `out` has grown to n.
struct adaptive_top_k {
  std::vector<std::size_t> buckets = {3, 4, 5, 6};
  double mass = 0.5;

  void validate() const {
    constexpr std::string_view where = "adaptive_top_k::select";
    detail::require(!buckets.empty(), where, "buckets.size()", buckets.size(), "at least one bucket");
    for (std::size_t j = 0; j < buckets.size(); ++j) {
      if (buckets[j] == 0) detail::fail(where, "buckets[" + std::to_string(j) + "]", buckets[j], "a bucket >= 1");
      if (j > 0 && buckets[j] <= buckets[j - 1]) {
        detail::fail(where, "buckets[" + std::to_string(j) + "]", buckets[j],
                     "strictly increasing buckets (buckets[" + std::to_string(j - 1) +
                         "] = " + std::to_string(buckets[j - 1]) + ")");
      }
    }
    detail::require(mass >= 0.0 && mass <= 1.0, where, "mass", mass, "a probability mass in [0, 1]");
  }

  void select(std::span<const float> probabilities, selection& out) const {
    constexpr std::string_view where = "adaptive_top_k::select";
    validate();
    const std::span<const float> p = probabilities;
    const std::size_t n = p.size();
    detail::require_universe(where, n);
    const detail::score_scan scan = detail::scan_scores(p);
    if (scan.non_finite) detail::fail_score(where, p, detail::first_non_finite(p), "a finite probability");
    if (scan.negative) {
      detail::fail_score(where, p, detail::find_first(p, [](float x) { return x < 0.0F; }), "a probability >= 0");
    }
    out.reset(n);
    out.total_mass = scan.total;
    out.scratch_scores.resize(n);
    for (std::size_t j = 0; j < buckets.size(); ++j) {
      const std::size_t b = std::min(buckets[j], n);
      if (b == n) {  // this and every larger bucket keep all experts
        out.keep_all(n, fallback_reason::none);
        out.covered_mass = scan.total;
        return;
      }
      const detail::cut c = detail::top_count_cut(p, b, out.scratch_scores);
      out.covered_mass = detail::emit_cut(p, c, out.indices, c.count());
      if (out.covered_mass >= mass) return;
    }
  }

  [[nodiscard]] selection select(std::span<const float> probabilities) const {
    selection out;
    select(probabilities, out);
    return out;
  }

  friend bool operator==(const adaptive_top_k&, const adaptive_top_k&) = default;
};

ACTSPARSE_REQUIRE_SELECTOR(adaptive_top_k);

}  // namespace actsparse
