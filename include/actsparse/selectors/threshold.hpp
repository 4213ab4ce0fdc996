#pragma once
// Keeps every score above a fixed threshold: no ranking, so it is the cheapest selector
// and the one calibration (calibration/threshold_calibration.hpp) produces per layer.

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/selectors/detail/partition.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

namespace actsparse {

// Keeps the indices whose score is strictly greater than t. The default t = 0 keeps the
// non-zero magnitudes: exact gating of ReLU-style activations. t = -inf keeps every
// finite score; the result may be empty. NaN scores are an error (they compare false
// with everything, so "keep" would be a guess); +-inf scores are fine, and then
// covered_mass and total_mass are 0 (infinite scores are not a mass). O(n).
struct threshold {
  float t = 0.0F;

  void select(std::span<const float> scores, selection& out) const {
    constexpr std::string_view where = "threshold::select";
    detail::require(!std::isnan(t), where, "t", t, "a threshold that is not NaN");
    const std::size_t n = scores.size();
    detail::require_universe(where, n);
    const detail::score_scan scan = detail::scan_scores(scores);
    if (scan.non_finite) {
      if (const std::size_t bad = detail::first_nan(scores); bad < n) {
        detail::fail_score(where, scores, bad, "a score that is not NaN");
      }
    }
    out.reset(n);
    out.indices.resize(n);
    const detail::emitted kept =
        t + 0.0F >= 0.0F ? keep_above<true>(scores, out.indices.data()) : keep_above<false>(scores, out.indices.data());
    out.indices.resize(kept.count);
    if (!scan.non_finite) {
      out.total_mass = scan.total;
      out.covered_mass = kept.count == n ? scan.total : kept.mass;
    }
  }

  [[nodiscard]] selection select(std::span<const float> scores) const {
    selection out;
    select(scores, out);
    return out;
  }

  friend bool operator==(const threshold&, const threshold&) = default;

 private:
  // Integer keys: compares of floats measured ~2x slower. -0 is +0 here (they are equal).
  // The kept mass is summed in the same pass (detail::emit_above). With an infinite score
  // the sum is not used.
  template <bool Positive>
  detail::emitted keep_above(std::span<const float> scores, std::uint32_t* dst) const noexcept {
    return detail::emit_above<Positive, true>(scores, detail::bracket_key<Positive>(t + 0.0F), dst);
  }
};

// A per-layer threshold (per_layer_table<float>, what calibration writes) configures it.
[[nodiscard]] inline threshold configure(const threshold& /*base*/, float t) noexcept { return threshold{t}; }

ACTSPARSE_REQUIRE_SELECTOR(threshold);

}  // namespace actsparse
