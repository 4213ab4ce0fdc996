#pragma once
// How a layer schedule's value configures an op's selector for one layer. An op holds a base
// selector and a schedule; for layer l it runs layer_selector(base, schedule.at(l)):
//   - the value is the selector type itself (a table of selectors): it is used as it is;
//   - same_selector (uniform_schedule's value): the base selector, unchanged;
//   - anything else: configure(base, value) -> Selector, found by argument-dependent lookup.
//     A selector header defines configure for the values it accepts (threshold: a threshold t;
//     top_k: a count k; cumulative_mass: a mass), a schedule header for its own value types
//     (depth_schedule: layer_policy -> cumulative_mass).
// A value with a member `dense` that is true asks for the whole layer (no scoring, no
// selection): layer_is_dense(value).
//
// Optional hooks a value may offer (found by argument-dependent lookup; a calibrated schedule,
// calibration/calibrated_schedule.hpp, offers all of them), each with a neutral default:
//   configure(base, value, layer_input)      a selector chosen per token from the layer's input
//                                            (a per-token tier); preferred over configure(base, value)
//   configure_scorer(base_scorer, value)     the layer's own scorer (per-neuron calibrated weights);
//                                            returns the scorer or a reference to one
//   refine_stage(value) -> refine_rule       a second selection over the exact hidden values of the
//                                            first stage's neurons: only its share is read from W_down
//   gate_predictor(value) -> const gate_factors*   a low-rank predictor of the gate: the gate is
//                                            then read only for the neurons the prediction keeps

#include <actsparse/core/gate_factors.hpp>

#include <concepts>
#include <cstddef>
#include <span>
#include <vector>

namespace actsparse {

// The value of a schedule that keeps the base selector on every layer.
struct same_selector {
  friend constexpr bool operator==(same_selector, same_selector) noexcept = default;
};

// Whether a schedule value configures a selector of type Selector.
template <class Value, class Selector>
concept configures = std::same_as<Value, Selector> || std::same_as<Value, same_selector> ||
    requires(const Selector& base, const Value& v) {
  { configure(base, v) } -> std::same_as<Selector>;
};

// What a per-token hook sees: the layer's input x and a scratch buffer it may grow.
struct layer_input {
  std::span<const float> x;
  std::vector<float>* scratch = nullptr;
};

// The second stage of a neuron-sparse FFN (refine_stage): of the first stage's neurons S1, keep
// the ceil(keep · |S1|) with the largest |h_j| · weights[j] (h_j = act(g_j)·u_j, exact), ties to
// the lower index; only those are read from W_down. keep = 1 (the default) is no second stage.
struct refine_rule {
  double keep = 1.0;
  std::span<const float> weights{};  // d_ff per-neuron weights (e.g. ‖W_down[:, j]‖)

  // Whether a first stage of n neurons is cut (keep-all runs the one-stage path, bit for bit).
  [[nodiscard]] std::size_t kept_of(std::size_t n) const noexcept {
    const double c = keep * static_cast<double>(n);
    const auto k = static_cast<std::size_t>(c);
    const std::size_t up = static_cast<double>(k) < c ? k + 1 : k;
    return up < n ? up : n;
  }
  [[nodiscard]] bool cuts(std::size_t n) const noexcept { return kept_of(n) < n; }
};

template <class Selector, class Value>
requires configures<Value, Selector>
[[nodiscard]] Selector layer_selector(const Selector& base, const Value& v) {
  if constexpr (std::same_as<Value, Selector>) {
    return v;
  } else if constexpr (std::same_as<Value, same_selector>) {
    return base;
  } else {
    return configure(base, v);
  }
}

template <class Selector, class Value>
requires configures<Value, Selector>
[[nodiscard]] Selector layer_selector(const Selector& base, const Value& v, const layer_input& in) {
  if constexpr (requires {
                  { configure(base, v, in) } -> std::same_as<Selector>;
                }) {
    return configure(base, v, in);
  } else {
    return layer_selector(base, v);
  }
}

template <class Scorer, class Value>
[[nodiscard]] decltype(auto) layer_scorer(const Scorer& base, const Value& v) {
  if constexpr (requires { configure_scorer(base, v); }) {
    return configure_scorer(base, v);
  } else {
    return (base);
  }
}

template <class Value>
[[nodiscard]] refine_rule layer_refine(const Value& v) {
  if constexpr (requires {
                  { refine_stage(v) } -> std::same_as<refine_rule>;
                }) {
    return refine_stage(v);
  } else {
    return {};
  }
}

template <class Value>
[[nodiscard]] const gate_factors* layer_gate_predictor(const Value& v) {
  if constexpr (requires {
                  { gate_predictor(v) } -> std::convertible_to<const gate_factors*>;
                }) {
    return gate_predictor(v);
  } else {
    return nullptr;
  }
}

template <class Value>
[[nodiscard]] constexpr bool layer_is_dense(const Value& v) noexcept {
  if constexpr (requires { static_cast<bool>(v.dense); }) {
    return static_cast<bool>(v.dense);
  } else {
    return false;
  }
}

}  // namespace actsparse

#define ACTSPARSE_REQUIRE_CONFIGURES(Value, Selector)                                                    \
  static_assert(::actsparse::configures<Value, Selector>,                                                \
                "actsparse: this schedule's value_type does not configure the selector. It must be the " \
                "selector itself, actsparse::same_selector, or a type for which "                        \
                "configure(const Selector&, const value_type&) -> Selector is declared.")
