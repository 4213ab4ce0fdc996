#pragma once
// What a neuron score does on a calibration sample, per layer, in bounded memory (independent of
// the sample size): how often each neuron is among the kept ones at each tier (keep ceil(d_ff / M)
// of the token's highest scores), samples of the scores for their quantiles (calibrated
// thresholds), and how often two neurons are kept together (co-activation, for reordering).
//
// Memory per layer: tiers x d_ff counters, a reservoir of at most max_score_samples scores
// (threshold_calibration: exact quantiles below the cap, a fixed-seed uniform sample above it),
// and with co-activation d_ff (d_ff - 1) / 2 u32 counters (120 MB for a 7B layer's 11008
// neurons; off by default for that reason). Tokens are added in call order: a caller that adds
// its sequences in a fixed order gets the same statistics for any number of threads.

#include <actsparse/calibration/detail/checks.hpp>
#include <actsparse/calibration/threshold_calibration.hpp>
#include <actsparse/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace actsparse {

// Tiers M: keep ceil(d_ff / M) of the neurons (WiSparse's {1, 2, 3, 4, 7}).
inline constexpr std::size_t default_tiers[] = {1, 2, 3, 4, 7};

// How many of n candidates tier M keeps: ceil(n / M).
[[nodiscard]] constexpr std::size_t tier_keep_count(std::size_t n, std::size_t m) noexcept {
  return m == 0 ? n : n / m + (n % m != 0 ? 1 : 0);
}

struct selection_statistics_options {
  std::vector<std::size_t> tiers{std::begin(default_tiers), std::end(default_tiers)};
  std::size_t max_score_samples = std::size_t{1} << 20;  // per layer
  // Co-activation counts of the neurons kept at this tier (an entry of `tiers`); 0: none.
  std::size_t coactivation_tier = 0;
};

class selection_statistics {
 public:
  selection_statistics() = default;
  selection_statistics(std::size_t layers, std::size_t d_ff, selection_statistics_options options = {})
      : layers_(layers), d_ff_(d_ff), options_(std::move(options)), scores_(options_.max_score_samples) {
    constexpr std::string_view where = "selection_statistics";
    detail::require(layers >= 1, where, "layers", layers, "at least one layer");
    detail::require(d_ff >= 2 && d_ff <= std::numeric_limits<std::uint32_t>::max(), where, "d_ff", d_ff,
                    "2 .. 2^32 - 1 neurons");
    detail::require(!options_.tiers.empty(), where, "options.tiers", "empty", "at least one tier");
    for (std::size_t i = 0; i < options_.tiers.size(); ++i) {
      const std::size_t m = options_.tiers[i];
      detail::require(m >= 1 && (i == 0 || m > options_.tiers[i - 1]), where,
                      "options.tiers[" + std::to_string(i) + "]", m, "tiers M >= 1 in increasing order");
    }
    if (options_.coactivation_tier != 0) {
      const auto it = std::find(options_.tiers.begin(), options_.tiers.end(), options_.coactivation_tier);
      detail::require(it != options_.tiers.end(), where, "options.coactivation_tier", options_.coactivation_tier,
                      "0 (none) or one of options.tiers");
      coactivation_.assign(layers * pairs(), 0);
    }
    counts_.assign(layers * options_.tiers.size() * d_ff, 0);
    tokens_.assign(layers, 0);
  }

  // The scores of one token of `layer` (d_ff finite values, higher = kept first; ties: lower
  // index first, as top_k). On an error nothing is added.
  void add(std::size_t layer, std::span<const float> scores) {
    constexpr std::string_view where = "selection_statistics::add";
    check_layer(layer, where);
    detail::require(scores.size() == d_ff_, where, "scores.size()", scores.size(), "d_ff = " + std::to_string(d_ff_));
    for (std::size_t j = 0; j < d_ff_; ++j) {
      if (!std::isfinite(scores[j]))
        detail::fail(where, "scores[" + std::to_string(j) + "]", scores[j], "a finite score");
    }
    if (!coactivation_.empty() && tokens_[layer] == std::numeric_limits<std::uint32_t>::max()) {
      detail::fail(where, "tokens", tokens_[layer],
                   "fewer than 2^32 - 1 tokens a layer (the co-activation counters are u32)");
    }
    order_.resize(d_ff_);
    std::iota(order_.begin(), order_.end(), std::uint32_t{0});
    std::sort(order_.begin(), order_.end(), [&](std::uint32_t a, std::uint32_t b) {
      return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
    });
    for (std::size_t t = 0; t < options_.tiers.size(); ++t) {
      std::uint64_t* c = counts_.data() + (layer * options_.tiers.size() + t) * d_ff_;
      const std::size_t k = tier_keep_count(d_ff_, options_.tiers[t]);
      for (std::size_t r = 0; r < k; ++r) ++c[order_[r]];
    }
    if (!coactivation_.empty()) {
      const std::size_t k = tier_keep_count(d_ff_, options_.coactivation_tier);
      kept_.assign(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k));
      std::sort(kept_.begin(), kept_.end());
      std::uint32_t* tri = coactivation_.data() + layer * pairs();
      for (std::size_t a = 0; a < k; ++a) {
        const std::size_t row = pair_index(kept_[a], kept_[a] + 1) - (kept_[a] + 1);
        for (std::size_t b = a + 1; b < k; ++b) ++tri[row + kept_[b]];
      }
    }
    scores_.add(layer, scores);
    ++tokens_[layer];
  }

  [[nodiscard]] std::size_t layers() const noexcept { return layers_; }
  [[nodiscard]] std::size_t d_ff() const noexcept { return d_ff_; }
  [[nodiscard]] const selection_statistics_options& options() const noexcept { return options_; }
  [[nodiscard]] std::span<const std::size_t> tiers() const noexcept { return options_.tiers; }
  [[nodiscard]] std::uint64_t tokens(std::size_t layer) const {
    check_layer(layer, "selection_statistics::tokens");
    return tokens_[layer];
  }

  // The share of the layer's tokens in which each neuron was kept at tier tiers()[tier_index].
  [[nodiscard]] std::vector<double> frequency(std::size_t layer, std::size_t tier_index) const {
    constexpr std::string_view where = "selection_statistics::frequency";
    const double n = static_cast<double>(require_tokens(layer, where));
    detail::require(tier_index < options_.tiers.size(), where, "tier_index", tier_index,
                    "an index below " + std::to_string(options_.tiers.size()) + " (one per tier)");
    const std::uint64_t* c = counts_.data() + (layer * options_.tiers.size() + tier_index) * d_ff_;
    std::vector<double> f(d_ff_);
    for (std::size_t j = 0; j < d_ff_; ++j) f[j] = static_cast<double>(c[j]) / n;
    return f;
  }

  // The score t for which "keep score > t" keeps a share `keep` of the layer's sampled scores
  // (keep in (0, 1]; keep = 1 gives -inf).
  [[nodiscard]] float threshold_for_keep(std::size_t layer, double keep) const {
    constexpr std::string_view where = "selection_statistics::threshold_for_keep";
    detail::require(keep > 0.0 && keep <= 1.0, where, "keep", keep, "a fraction in (0, 1]");
    require_tokens(layer, where);
    return scores_.threshold_for(layer, 1.0 - keep);
  }

  // How often neurons i and j (i != j) were kept together at the co-activation tier.
  [[nodiscard]] std::uint32_t coactivation(std::size_t layer, std::uint32_t i, std::uint32_t j) const {
    constexpr std::string_view where = "selection_statistics::coactivation";
    if (coactivation_.empty()) {
      detail::fail(where, "options.coactivation_tier", 0, "statistics built with a co-activation tier");
    }
    check_layer(layer, where);
    detail::require(i < d_ff_ && j < d_ff_ && i != j, where, "(i, j)", std::to_string(i) + ", " + std::to_string(j),
                    "two different neurons below d_ff = " + std::to_string(d_ff_));
    return coactivation_[layer * pairs() + (i < j ? pair_index(i, j) : pair_index(j, i))];
  }
  [[nodiscard]] bool has_coactivation() const noexcept { return !coactivation_.empty(); }

 private:
  [[nodiscard]] std::size_t pairs() const noexcept { return d_ff_ * (d_ff_ - 1) / 2; }
  // Row i of the strict upper triangle starts at i (2 d_ff - i - 1) / 2; entry (i, j), i < j.
  [[nodiscard]] std::size_t pair_index(std::size_t i, std::size_t j) const noexcept {
    return i * (2 * d_ff_ - i - 1) / 2 + (j - i - 1);
  }
  void check_layer(std::size_t layer, std::string_view where) const { detail::require_layer(layer, layers_, where); }
  std::uint64_t require_tokens(std::size_t layer, std::string_view where) const {
    check_layer(layer, where);
    return detail::require_layer_tokens(layer, layers_, tokens_[layer], where);
  }

  std::size_t layers_ = 0, d_ff_ = 0;
  selection_statistics_options options_;
  threshold_calibration scores_{1};
  std::vector<std::uint64_t> counts_;        // [layer][tier][j]
  std::vector<std::uint32_t> coactivation_;  // [layer][pair]
  std::vector<std::uint64_t> tokens_;
  std::vector<std::uint32_t> order_, kept_;  // scratch
};

}  // namespace actsparse
