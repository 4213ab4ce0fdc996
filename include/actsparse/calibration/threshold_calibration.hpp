#pragma once
// Offline calibration of per-layer thresholds (TEAL/CATS style): collect sample scores per
// layer on calibration data, then pick for each layer the threshold that drops a target
// fraction of them. At inference the `threshold` selector applies it with no ranking.

#include <actsparse/core/error.hpp>
#include <actsparse/schedules/per_layer_table.hpp>
#include <actsparse/selectors/threshold.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace actsparse {

// Samples per layer are kept in a reservoir of at most max_samples_per_layer (Algorithm R
// with a fixed-seed splitmix64 generator: the same samples added in the same order give
// the same reservoir, and the same thresholds, on every platform). Below the cap every
// sample is kept and the thresholds are exact quantiles of what was added.
class threshold_calibration {
 public:
  static constexpr std::size_t default_max_samples_per_layer = std::size_t{1} << 22;
  static constexpr std::uint64_t default_seed = 0x9e3779b97f4a7c15ULL;

  explicit threshold_calibration(std::size_t max_samples_per_layer = default_max_samples_per_layer,
                                 std::uint64_t seed = default_seed)
      : max_samples_(max_samples_per_layer), seed_(seed) {
    detail::require(max_samples_per_layer >= 1, "threshold_calibration", "max_samples_per_layer", max_samples_per_layer,
                    "at least 1 sample per layer");
  }

  // Adds sample scores (e.g. |activation| values) of one layer. All must be finite; on an
  // error nothing is added.
  void add(std::size_t layer, std::span<const float> samples) {
    for (std::size_t i = 0; i < samples.size(); ++i) {
      if (!std::isfinite(samples[i])) {
        detail::fail("threshold_calibration::add", "samples[" + std::to_string(i) + "]", samples[i],
                     "a finite sample (layer " + std::to_string(layer) + ")");
      }
    }
    if (samples.empty()) return;  // a layer counts once it has samples
    if (layer >= layers_.size()) layers_.resize(layer + 1);
    reservoir& r = layers_[layer];
    if (r.seen == 0) r.rng = seed_ ^ (0xd1b54a32d192ed03ULL * (layer + 1));
    for (const float x : samples) {
      if (r.kept.size() < max_samples_) {
        r.kept.push_back(x);
      } else {
        const std::uint64_t j = next(r.rng) % (r.seen + 1);  // modulo bias (seen + 1) / 2^64: negligible
        if (j < max_samples_) r.kept[j] = x;
      }
      ++r.seen;
    }
  }

  // One past the highest layer that was given samples.
  [[nodiscard]] std::size_t layer_count() const noexcept { return layers_.size(); }
  [[nodiscard]] std::uint64_t samples_seen(std::size_t layer) const noexcept {
    return layer < layers_.size() ? layers_[layer].seen : 0;
  }
  [[nodiscard]] std::size_t samples_kept(std::size_t layer) const noexcept {
    return layer < layers_.size() ? layers_[layer].kept.size() : 0;
  }

  // The t for which "keep score > t" drops a fraction `sparsity` of the layer's samples:
  // the value at sorted (ascending) position ceil(sparsity * N) - 1 of its N kept samples,
  // so at least that fraction is <= t; sparsity = 0 gives -inf (keep all). sparsity in [0, 1).
  [[nodiscard]] float threshold_for(std::size_t layer, double sparsity) const {
    constexpr std::string_view where = "threshold_calibration::threshold_for";
    detail::require(sparsity >= 0.0 && sparsity < 1.0, where, "sparsity", sparsity, "a fraction to drop in [0, 1)");
    if (samples_kept(layer) == 0) {
      detail::fail(where, "layer", layer, "a layer that was given samples (add(layer, samples) first)");
    }
    if (sparsity == 0.0) return -std::numeric_limits<float>::infinity();
    std::vector<float> v = layers_[layer].kept;
    const double rank = std::ceil(sparsity * static_cast<double>(v.size()));
    const std::size_t pos = rank <= 1.0 ? 0 : std::min(v.size(), static_cast<std::size_t>(rank)) - 1;
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(pos), v.end());
    return v[pos];
  }

  // One threshold per layer 0 .. layer_count() - 1 (indexed by layer); every layer needs samples.
  // A per_layer_table<float> is a layer schedule: neuron_sparse_ffn and input_sparse_linear take
  // it with a threshold selector as it is.
  [[nodiscard]] per_layer_table<float> thresholds(double sparsity) const {
    std::vector<float> t(layers_.size());
    for (std::size_t l = 0; l < t.size(); ++l) t[l] = threshold_for(l, sparsity);
    return per_layer_table<float>(std::move(t));
  }
  // With a sparsity per layer (sparsity_per_layer.size() layers).
  [[nodiscard]] per_layer_table<float> thresholds(std::span<const double> sparsity_per_layer) const {
    std::vector<float> t(sparsity_per_layer.size());
    for (std::size_t l = 0; l < t.size(); ++l) t[l] = threshold_for(l, sparsity_per_layer[l]);
    return per_layer_table<float>(std::move(t));
  }

  [[nodiscard]] threshold selector_for(std::size_t layer, double sparsity) const {
    return threshold{threshold_for(layer, sparsity)};
  }

  // The thresholds as a file: per_layer_table's text form ("layer value" lines; -inf, a
  // sparsity of 0, reads back as -inf), one format and one parser for every per-layer table.
  static void save(const std::filesystem::path& path, const per_layer_table<float>& thresholds) {
    thresholds.save(path);
  }
  [[nodiscard]] static per_layer_table<float> load(const std::filesystem::path& path) {
    return per_layer_table<float>::load(path);
  }

 private:
  struct reservoir {
    std::vector<float> kept;
    std::uint64_t seen = 0;
    std::uint64_t rng = 0;
  };

  static std::uint64_t next(std::uint64_t& state) noexcept {  // splitmix64
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  std::vector<reservoir> layers_;
  std::size_t max_samples_;
  std::uint64_t seed_;
};

}  // namespace actsparse
