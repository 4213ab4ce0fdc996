#pragma once
// The gated-FFN activations in double precision, written independently of
// actsparse/core/activation.hpp: the oracle the tests compare against.

#include <actsparse/core/activation.hpp>

#include <cmath>

namespace test_oracle {

inline double activate(actsparse::activation a, double g) {
  switch (a) {
    case actsparse::activation::silu:
      return g / (1.0 + std::exp(-g));
    case actsparse::activation::gelu:
      // 0.5·g·(1 + tanh(u)) written as g / (1 + exp(-2u)), the same function: 1 + tanh(u)
      // cancels for u below about -18 even in double, the logistic form does not.
      return g / (1.0 + std::exp(-2.0 * 0.7978845608028654 * (g + 0.044715 * g * g * g)));
    case actsparse::activation::relu:
      return g > 0.0 ? g : 0.0;
  }
  return g;
}

}  // namespace test_oracle
