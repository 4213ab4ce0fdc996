#pragma once
// The gated-FFN activations (SwiGLU, GeGLU, ReGLU) as scalar reference math.

#include <cmath>
#include <cstdint>
#include <string_view>

namespace actsparse {

enum class activation : std::uint8_t {
  silu,  // SwiGLU: h = silu(g) * u
  gelu,  // GeGLU: h = gelu(g) * u, tanh approximation (as llama.cpp and most GeGLU models use)
  relu   // ReGLU: h = relu(g) * u
};

[[nodiscard]] constexpr std::string_view name(activation a) noexcept {
  switch (a) {
    case activation::silu:
      return "silu";
    case activation::gelu:
      return "gelu";
    case activation::relu:
      return "relu";
  }
  return "?";
}

[[nodiscard]] inline float silu(float g) noexcept { return g / (1.0F + std::exp(-g)); }

[[nodiscard]] inline float gelu(float g) noexcept {
  constexpr float sqrt_2_over_pi = 0.7978845608028654F;
  // Explicit fma so that -ffp-contract cannot change the bits between translation units.
  const float inner = std::fma(0.044715F * g * g, g, g);
  return 0.5F * g * (1.0F + std::tanh(sqrt_2_over_pi * inner));
}

[[nodiscard]] inline float relu(float g) noexcept { return g > 0.0F ? g : 0.0F; }

[[nodiscard]] inline float apply(activation a, float g) noexcept {
  switch (a) {
    case activation::silu:
      return silu(g);
    case activation::gelu:
      return gelu(g);
    case activation::relu:
      return relu(g);
  }
  return g;
}

}  // namespace actsparse
