#pragma once
// The selector a calibration file configures layer by layer. Its rule is data, not a type:
// keep-all, the k highest scores, the scores above a threshold, or a tier (keep ceil(n / m)) made
// of a base set plus the token's own best others. One op type thus runs every layer of a
// calibrated model whatever rule calibration chose for it (calibration/calibrated_schedule.hpp
// builds one per layer; on its own it is an ordinary selector).

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/selectors/threshold.hpp>
#include <actsparse/selectors/tiered.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace actsparse {

enum class neuron_rule : std::uint8_t {
  keep_all,   // every candidate
  top_k,      // the k highest scores (top_k)
  threshold,  // the scores above t (threshold)
  tier        // ceil(n / m): the base set, then the best others (tiered)
};

[[nodiscard]] constexpr std::string_view name(neuron_rule r) noexcept {
  switch (r) {
    case neuron_rule::keep_all:
      return "keep_all";
    case neuron_rule::top_k:
      return "top_k";
    case neuron_rule::threshold:
      return "threshold";
    case neuron_rule::tier:
      return "tier";
  }
  return "?";
}

// Each rule behaves exactly as the selector it names (same indices, ties, masses and errors).
// `base` is borrowed: sorted, unique indices < n that must outlive the selector (a schedule
// owns them). The tier rule keeps it first; with a base, top_k keeps it plus the best others up
// to k (the tier rule with k in place of ceil(n / m)), and threshold keeps it plus every other
// score above t. Without a base the rules are exactly top_k and threshold.
struct calibrated_selector {
  neuron_rule rule = neuron_rule::keep_all;
  std::size_t k = 0;                      // top_k: how many (at most n)
  float t = 0.0F;                         // threshold: keep the scores > t
  std::size_t m = 1;                      // tier: keep ceil(n / m), m >= 1
  std::span<const std::uint32_t> base{};  // tier: the base set

  void select(std::span<const float> scores, selection& out) const {
    switch (rule) {
      case neuron_rule::keep_all:
        top_k::by_count(scores.size()).select(scores, out);
        return;
      case neuron_rule::top_k:
        if (base.empty()) {
          top_k::by_count(k).select(scores, out);
        } else {
          detail::require(k <= scores.size(), "calibrated_selector::select", "k", k,
                          "at most n (the number of scores)");
          detail::select_tier("calibrated_selector::select", scores, k, base, out);
        }
        return;
      case neuron_rule::threshold:
        threshold{t}.select(scores, out);
        if (!base.empty()) add_base(scores, out);
        return;
      case neuron_rule::tier: {
        detail::require(m >= 1, "calibrated_selector::select", "m", m, "m >= 1 (keep 1/m of the candidates)");
        const std::size_t n = scores.size();
        detail::select_tier("calibrated_selector::select", scores, n / m + (n % m != 0 ? 1 : 0), base, out);
        return;
      }
    }
    detail::fail("calibrated_selector::select", "rule", static_cast<int>(rule),
                 "one of neuron_rule's values (keep_all, top_k, threshold, tier)");
  }

  [[nodiscard]] selection select(std::span<const float> scores) const {
    selection out;
    select(scores, out);
    return out;
  }

 private:
  // out ∪ base, sorted; the covered mass recounted.
  void add_base(std::span<const float> scores, selection& out) const {
    const std::size_t n = scores.size();
    if (const auto bad = std::lower_bound(base.begin(), base.end(), n); bad != base.end()) {
      detail::fail("calibrated_selector::select", "base[" + std::to_string(bad - base.begin()) + "]", *bad,
                   "an index < n = " + std::to_string(n));
    }
    auto& merged = out.scratch_flags;  // reused as bytes: 1 = kept
    merged.assign(n, 0);
    for (const std::uint32_t i : out.indices) merged[i] = 1;
    for (const std::uint32_t i : base) merged[i] = 1;
    out.indices.clear();
    for (std::size_t i = 0; i < n; ++i) {
      if (merged[i] != 0) out.indices.push_back(static_cast<std::uint32_t>(i));
    }
    if (std::isfinite(out.total_mass) && out.total_mass != 0.0) {
      out.covered_mass = out.indices.size() == n ? out.total_mass : detail::sum_kept(scores, out.indices);
    }
  }

 public:
  friend bool operator==(const calibrated_selector& a, const calibrated_selector& b) noexcept {
    return a.rule == b.rule && a.k == b.k && a.t == b.t && a.m == b.m && a.base.data() == b.base.data() &&
           a.base.size() == b.base.size();
  }
};

ACTSPARSE_REQUIRE_SELECTOR(calibrated_selector);

}  // namespace actsparse
