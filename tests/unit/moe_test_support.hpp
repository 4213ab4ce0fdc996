#pragma once
// MoE test weights shared by the MoE tests (test_moe.cpp) and the expert-parallel tests
// (test_expert_parallel.cpp): stacked experts of one dtype and a shared expert.
#include "quantized_matrix.hpp"

#include <actsparse/core/op_args.hpp>

#include <cstring>
#include <random>
#include <span>
#include <vector>

namespace moe_test {

using namespace actsparse;

// n_experts stacked experts of one dtype (gate, up, down_t, down) and a shared expert.
struct moe_weights {
  actsparse_test::quantized_matrix gate, up, down_t, down, sgate, sup, sdown_t;
  std::size_t n = 0, d_model = 0, d_ff = 0;

  moe_weights(dtype t, std::size_t n_, std::size_t d_model_, std::size_t d_ff_, std::mt19937& rng)
      : n(n_), d_model(d_model_), d_ff(d_ff_) {
    gate = actsparse_test::make_quantized_matrix(t, n * d_ff, d_model, rng);
    up = actsparse_test::make_quantized_matrix(t, n * d_ff, d_model, rng);
    down_t = actsparse_test::make_quantized_matrix(t, n * d_ff, d_model, rng);
    down = actsparse_test::make_quantized_matrix(t, n * d_model, d_ff, rng);
    sgate = actsparse_test::make_quantized_matrix(t, 2 * d_ff, d_model, rng);
    sup = actsparse_test::make_quantized_matrix(t, 2 * d_ff, d_model, rng);
    sdown_t = actsparse_test::make_quantized_matrix(t, 2 * d_ff, d_model, rng);
  }
  static stacked_view stack(const actsparse_test::quantized_matrix& m, std::size_t count, std::size_t rows) {
    weight_view first = m.view;
    first.rows = rows;
    return {first, count, rows * m.stride};
  }
  [[nodiscard]] moe_experts experts(bool transposed) const {
    moe_experts x;
    x.gate = stack(gate, n, d_ff);
    x.up = stack(up, n, d_ff);
    if (transposed) {
      x.down_t = stack(down_t, n, d_ff);
    } else {
      x.down = stack(down, n, d_model);
    }
    return x;
  }
  [[nodiscard]] ffn_layer shared() const { return {activation::silu, sgate.view, sup.view, {}, sdown_t.view}; }
};

inline std::vector<float> random_vector(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0F, 1.0F);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

inline bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace moe_test
