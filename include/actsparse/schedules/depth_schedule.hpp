#pragma once
// How much to keep as a function of depth. Early layers build the representation every later
// layer reads, so they run dense; the middle keeps a score mass; an optional deep tier keeps a
// different mass (deep layers of many models tolerate more sparsity).

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>

#include <array>
#include <cstddef>
#include <limits>
#include <string>
#include <string_view>

namespace actsparse {

// What one layer runs with. mass: the share of score mass to keep (1.0 = everything);
// recent_n: the most recent tokens that are always kept; min_keep: keep at least this many.
struct layer_policy {
  bool dense = true;
  double mass = 1.0;
  std::size_t recent_n = 0;
  std::size_t min_keep = 1;

  friend constexpr bool operator==(const layer_policy&, const layer_policy&) noexcept = default;
};

struct depth_schedule {
  using value_type = layer_policy;

  // A deep_layer_start that no layer reaches: the schedule has no deep tier.
  static constexpr std::size_t no_deep_tier = std::numeric_limits<std::size_t>::max();

  std::size_t dense_until = 0;                  // layers [0, dense_until) are dense
  std::size_t deep_layer_start = no_deep_tier;  // layers >= this keep mass_deep
  double mass = 1.0;                            // layers [dense_until, deep_layer_start)
  double mass_deep = 1.0;
  std::size_t recent_n = 0;
  std::size_t min_keep = 1;

  // Presets, tuned on 80-layer models (use scaled_to for others). They have no deep tier
  // (mass_deep = mass) and keep at least one candidate.
  [[nodiscard]] static constexpr depth_schedule speed() noexcept { return {3, no_deep_tier, 0.3, 0.3, 64, 1}; }
  [[nodiscard]] static constexpr depth_schedule balanced() noexcept { return {20, no_deep_tier, 0.5, 0.5, 128, 1}; }
  [[nodiscard]] static constexpr depth_schedule quality() noexcept { return {32, no_deep_tier, 0.7, 0.7, 128, 1}; }
  [[nodiscard]] static constexpr depth_schedule dense() noexcept { return {80, no_deep_tier, 1.0, 1.0, 128, 1}; }

  static constexpr std::array<std::string_view, 4> preset_names{"speed", "balanced", "quality", "dense"};

  // A preset by name (exact, lowercase).
  [[nodiscard]] static depth_schedule preset(std::string_view name) {
    if (name == "speed") return speed();
    if (name == "balanced") return balanced();
    if (name == "quality") return quality();
    if (name == "dense") return dense();
    detail::fail("depth_schedule::preset", "name", name, "one of: speed, balanced, quality, dense");
  }

  // Throws unless mass and mass_deep are in (0, 1] and deep_layer_start >= dense_until.
  void validate() const {
    constexpr std::string_view where = "depth_schedule::validate";
    detail::require(mass > 0.0 && mass <= 1.0, where, "mass", mass, "a share of score mass in (0, 1]");
    detail::require(mass_deep > 0.0 && mass_deep <= 1.0, where, "mass_deep", mass_deep,
                    "a share of score mass in (0, 1]");
    if (deep_layer_start < dense_until) {
      detail::fail(where, "deep_layer_start", deep_layer_start,
                   "deep_layer_start >= dense_until (" + std::to_string(dense_until) + ")");
    }
  }

  // The policy of one layer (validates first). Dense layers report mass 1.0.
  [[nodiscard]] layer_policy at(std::size_t layer) const {
    validate();
    if (layer < dense_until) return {true, 1.0, recent_n, min_keep};
    return {false, layer < deep_layer_start ? mass : mass_deep, recent_n, min_keep};
  }

  // The same schedule for a model of n_layers: dense_until and deep_layer_start are scaled by
  // n_layers / reference_layers and rounded to the nearest layer (halves round up);
  // no_deep_tier stays no_deep_tier. Masses, recent_n and min_keep are unchanged.
  [[nodiscard]] depth_schedule scaled_to(std::size_t n_layers, std::size_t reference_layers = 80) const {
    constexpr std::string_view where = "depth_schedule::scaled_to";
    detail::require(reference_layers > 0, where, "reference_layers", reference_layers, "at least 1 layer");
    validate();
    depth_schedule s = *this;
    s.dense_until = scale(dense_until, n_layers, reference_layers);
    if (deep_layer_start != no_deep_tier) s.deep_layer_start = scale(deep_layer_start, n_layers, reference_layers);
    return s;
  }

  friend constexpr bool operator==(const depth_schedule&, const depth_schedule&) noexcept = default;

 private:
  static std::size_t scale(std::size_t layer, std::size_t n_layers, std::size_t reference) {
    constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
    const std::size_t half = reference / 2;
    if (n_layers != 0 && layer > (max - half) / n_layers) {
      detail::fail("depth_schedule::scaled_to", "n_layers", n_layers,
                   "a layer count small enough that " + std::to_string(layer) + " * n_layers does not overflow");
    }
    return (layer * n_layers + half) / reference;
  }
};

ACTSPARSE_REQUIRE_LAYER_SCHEDULE(depth_schedule);

// A layer's policy configures a cumulative_mass selector (layer_is_dense reads `dense`).
[[nodiscard]] inline cumulative_mass configure(const cumulative_mass& /*base*/, const layer_policy& p) noexcept {
  return cumulative_mass{p.mass, p.recent_n, p.min_keep};
}

}  // namespace actsparse
