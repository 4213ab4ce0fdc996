#pragma once
// The weights of one gated FFN layer, and what a policy reads of them.

#include <actsparse/core/activation.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/views.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace actsparse {

struct ffn_weights {
  activation act = activation::silu;
  weight_view gate;      // [d_ff × d_model]
  weight_view up;        // [d_ff × d_model]
  weight_view down;      // [d_model × d_ff], or absent when down_t is given
  weight_view down_t{};  // optional W_downᵀ [d_ff × d_model] (what the CPU backend's sparse FFN reads)

  [[nodiscard]] std::size_t d_model() const noexcept { return gate.cols; }
  [[nodiscard]] std::size_t d_ff() const noexcept { return gate.rows; }
};

// What a neuron score is computed from. This fixes the bytes a decode step must read.
enum class score_source : std::uint8_t {
  gate_preactivation,  // g = W_gate·x (silu_magnitude, relu_exact, weight_aware_gate)
  gate_activation,     // act(g) (magnitude of the gate activation)
  hidden               // h = act(g) ⊙ (W_up·x): needs every row of W_up
};

[[nodiscard]] constexpr std::string_view name(score_source s) noexcept {
  switch (s) {
    case score_source::gate_preactivation:
      return "gate_preactivation";
    case score_source::gate_activation:
      return "gate_activation";
    case score_source::hidden:
      return "hidden";
  }
  return "?";
}

// Fraction of the FFN's weight bytes one decode step reads when a fraction `kept` of the
// neurons is kept (gate, up and down of equal size): the gate is always read whole; a
// score built from h also reads the whole up projection.
[[nodiscard]] constexpr double ffn_bytes_fraction(score_source s, double kept) noexcept {
  return s == score_source::hidden ? (2.0 + kept) / 3.0 : (1.0 + 2.0 * kept) / 3.0;
}

}  // namespace actsparse
