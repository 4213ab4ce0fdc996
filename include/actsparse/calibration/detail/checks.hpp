#pragma once
// Argument checks shared by the calibration headers: per-layer accumulators and the fitted
// parameter vectors (predictors, files) all reject the same bad inputs with the same words.

#include <actsparse/core/error.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace actsparse::detail {

// n values, every one finite (and >= 0 when non_negative); the error names the first bad one.
inline void require_finite_values(std::span<const float> v, std::size_t n, std::string_view where,
                                  std::string_view what, bool non_negative = false) {
  require(v.size() == n, where, std::string(what) + ".size()", v.size(), std::to_string(n) + " values");
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(v[i]) || (non_negative && v[i] < 0.0F)) {
      fail(where, std::string(what) + "[" + std::to_string(i) + "]", v[i],
           non_negative ? "a finite value >= 0" : "a finite value");
    }
  }
}

inline void require_layer(std::size_t layer, std::size_t layers, std::string_view where) {
  require(layer < layers, where, "layer", layer, "a layer below " + std::to_string(layers));
}

// A layer below `layers` that was given at least one token; returns its token count.
inline std::uint64_t require_layer_tokens(std::size_t layer, std::size_t layers, std::uint64_t tokens,
                                          std::string_view where) {
  require_layer(layer, layers, where);
  if (tokens == 0) fail(where, "layer", layer, "a layer that was given at least one token");
  return tokens;
}

}  // namespace actsparse::detail
