#pragma once
// What a neuron score of a gated FFN is computed from, and what that costs in bytes read.

#include <cstdint>
#include <string_view>

namespace actsparse {

// The neuron values a neuron-sparse FFN computes for its scorer. This fixes the bytes a
// decode step must read.
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

// The ideal decode speed-up of a neuron-sparse FFN over dense when a step is bound by the
// bytes it reads: 1 / ffn_bytes_fraction.
[[nodiscard]] constexpr double ideal_ffn_speedup(score_source s, double kept) noexcept {
  return 1.0 / ffn_bytes_fraction(s, kept);
}

}  // namespace actsparse
