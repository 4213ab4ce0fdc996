#pragma once
// Test support for the reference backend: random weights of every dtype (with their
// dequantized values in double), random subsets, and the independent double-precision
// oracle (Eigen) with the error bound each f32 result must meet.
//
// Bounds (u = 2^-24, the f32 unit roundoff; γ(n) = n·u / (1 − n·u); γd(n) the same for
// f64 with 2^-53, covering the oracle's own rounding). Weights are dequantized by the same
// core function in the backend and here, so the bounds are the same for every dtype.
//   dot / GEMV / linear, n terms:  |ŷ_i − y_i| ≤ (γ(n) + γd(n)) · Σ_j |W_ij x_j|
//   gated FFN: the dot bound for g and u; δa = L·δg + 8u·(|a| + |g|) for the activation
//     (L = 1.2 bounds |act'| for silu, gelu, relu; 8u·(|a| + |g|) bounds the f32 evaluation
//     of the activation, cancellation in gelu's 1 + tanh included); products propagated
//     exactly to first and second order; the down projection adds its dot bound.
//   token FFN: the gated FFN bound plus one f32 rounding of residual + y.

#include "activation_oracle.hpp"

#include <actsparse/core/activation.hpp>
#include <actsparse/core/dtype.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/core/views.hpp>

#include <doctest/doctest.h>
#include <Eigen/Core>

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

namespace reference_test {

using namespace actsparse;

inline constexpr std::array<dtype, 5> all_dtypes{dtype::f32, dtype::bf16, dtype::f16, dtype::q8_0, dtype::q4_0};
inline constexpr std::array<activation, 3> all_activations{activation::silu, activation::gelu, activation::relu};

// Row lengths to test: odd ones for the scalar types, multiples of 32 for the block types.
inline std::vector<std::size_t> test_lengths(dtype t) {
  if (block_values(t) == 1) return {1, 7, 33, 64};
  return {32, 64, 96};
}

// (d_model, d_ff) pairs to test.
inline std::vector<std::array<std::size_t, 2>> ffn_shapes(dtype t) {
  if (block_values(t) == 1) return {{1, 1}, {7, 13}, {33, 20}, {64, 96}};
  return {{32, 32}, {64, 96}, {96, 64}};
}

// A weight matrix in storage type t from uniform(-1, 1) values, and its dequantized values.
// pad_elements > 0 makes a strided view whose padding holds 0xff bytes (NaN in every float
// type and in a block's scale), so a kernel that reads the padding produces NaN.
struct test_weights {
  std::vector<std::byte> storage;
  weight_view view;
  Eigen::MatrixXd values;  // rows × cols, the dequantized weights

  test_weights() = default;
  test_weights(const test_weights&) = delete;
  test_weights& operator=(const test_weights&) = delete;
  test_weights(test_weights&&) = default;
  test_weights& operator=(test_weights&&) = default;
};

inline test_weights make_weights(dtype t, std::size_t rows, std::size_t cols, std::mt19937& rng,
                                 std::size_t pad_elements = 0) {
  test_weights out;
  const std::size_t stride = row_bytes(t, cols) + pad_elements * block_bytes(t);
  out.storage.assign(rows * stride + 1, std::byte{0xff});
  out.view = weight_view(out.storage.data(), t, rows, cols, stride);
  out.values.resize(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<float> source(cols);
  std::vector<float> dequantized(cols);
  visit_dtype(t, [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (std::size_t i = 0; i < rows; ++i) {
      for (float& v : source) v = dist(rng);
      T* row = reinterpret_cast<T*>(out.storage.data() + i * stride);
      quantize_row(source.data(), row, cols);
      dequantize_row(row, dequantized.data(), cols);
      for (std::size_t k = 0; k < cols; ++k) {
        out.values(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(k)) = dequantized[k];
      }
    }
  });
  return out;
}

inline std::vector<float> random_vector(std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> dist(-1.0F, 1.0F);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Each of 0..n-1 kept with probability `density`; sorted by construction.
inline std::vector<std::uint32_t> random_subset(std::size_t n, double density, std::mt19937& rng) {
  std::bernoulli_distribution keep(density);
  std::vector<std::uint32_t> s;
  for (std::size_t i = 0; i < n; ++i) {
    if (keep(rng)) s.push_back(static_cast<std::uint32_t>(i));
  }
  return s;
}

inline std::vector<std::uint32_t> all_indices(std::size_t n) {
  std::vector<std::uint32_t> s(n);
  for (std::size_t i = 0; i < n; ++i) s[i] = static_cast<std::uint32_t>(i);
  return s;
}

inline bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// --- the double-precision oracle ---------------------------------------------------------------

inline constexpr double u32 = 0x1p-24;
inline constexpr double u64 = 0x1p-53;
inline double gamma(std::size_t n, double u) {
  const double nu = static_cast<double>(n) * u;
  return nu / (1.0 - nu);
}
// The bound factor of an n-term f32 dot product checked against a double one.
inline double dot_factor(std::size_t n) { return gamma(n, u32) + gamma(n, u64); }

struct oracle {
  Eigen::VectorXd value;
  Eigen::VectorXd bound;  // |f32 result − value| ≤ bound, element-wise
};

inline Eigen::VectorXd to_double(std::span<const float> x) {
  Eigen::VectorXd v(static_cast<Eigen::Index>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) v(static_cast<Eigen::Index>(i)) = x[i];
  return v;
}

// Selects the listed rows (all of them when `all`).
inline Eigen::MatrixXd rows_of(const Eigen::MatrixXd& w, const subset& rows) {
  if (rows.all) return w;
  Eigen::MatrixXd out(static_cast<Eigen::Index>(rows.indices.size()), w.cols());
  for (std::size_t k = 0; k < rows.indices.size(); ++k) out.row(static_cast<Eigen::Index>(k)) = w.row(rows.indices[k]);
  return out;
}

// 1 for a kept index, 0 for a skipped one.
inline Eigen::VectorXd mask_of(std::size_t n, const subset& s) {
  if (s.all) return Eigen::VectorXd::Ones(static_cast<Eigen::Index>(n));
  Eigen::VectorXd m = Eigen::VectorXd::Zero(static_cast<Eigen::Index>(n));
  for (const std::uint32_t j : s.indices) m(j) = 1.0;
  return m;
}

// y = W[rows, :] x.
inline oracle gemv_oracle(const Eigen::MatrixXd& w, std::span<const float> x, const subset& rows) {
  const Eigen::MatrixXd wr = rows_of(w, rows);
  const Eigen::VectorXd xd = to_double(x);
  return {wr * xd, dot_factor(x.size()) * (wr.cwiseAbs() * xd.cwiseAbs())};
}

// y = Σ_{j ∈ inputs} W[:, j] x_j.
inline oracle linear_oracle(const Eigen::MatrixXd& w, std::span<const float> x, const subset& inputs) {
  const Eigen::VectorXd xm = to_double(x).cwiseProduct(mask_of(x.size(), inputs));
  return {w * xm, dot_factor(inputs.count(x.size())) * (w.cwiseAbs() * xm.cwiseAbs())};
}

using test_oracle::activate;

// y = W_down (act(W_gate x) ⊙ W_up x) over the kept neurons, with the propagated bound.
inline oracle ffn_oracle(activation act, const Eigen::MatrixXd& gate, const Eigen::MatrixXd& up,
                         const Eigen::MatrixXd& down, std::span<const float> x, const subset& neurons) {
  constexpr double lipschitz = 1.2;  // sup |act'| for silu (1.0998), gelu (1.129) and relu (1)
  const std::size_t d_ff = static_cast<std::size_t>(gate.rows());
  const Eigen::VectorXd xd = to_double(x);
  const Eigen::VectorXd g = gate * xd;
  const Eigen::VectorXd u = up * xd;
  const Eigen::VectorXd dg = dot_factor(x.size()) * (gate.cwiseAbs() * xd.cwiseAbs());
  const Eigen::VectorXd du = dot_factor(x.size()) * (up.cwiseAbs() * xd.cwiseAbs());
  const Eigen::VectorXd keep = mask_of(d_ff, neurons);
  Eigen::VectorXd h(g.size());
  Eigen::VectorXd dh(g.size());
  for (Eigen::Index j = 0; j < g.size(); ++j) {
    const double a = activate(act, g(j));
    const double da = lipschitz * dg(j) + 8.0 * u32 * (std::abs(a) + std::abs(g(j)));
    h(j) = keep(j) * a * u(j);
    dh(j) = keep(j) *
            (da * (std::abs(u(j)) + du(j)) + std::abs(a) * du(j) + u32 * (std::abs(a) + da) * (std::abs(u(j)) + du(j)));
  }
  const Eigen::VectorXd y = down * h;
  const Eigen::VectorXd bound =
      down.cwiseAbs() * dh + dot_factor(neurons.count(d_ff)) * (down.cwiseAbs() * (h.cwiseAbs() + dh));
  return {y, bound};
}

// Every |got − value| ≤ bound (NaN fails).
inline void check_within(std::span<const float> got, const oracle& e) {
  REQUIRE(got.size() == static_cast<std::size_t>(e.value.size()));
  std::size_t failures = 0;
  std::size_t first = 0;
  double worst_ratio = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto k = static_cast<Eigen::Index>(i);
    const double err = std::abs(static_cast<double>(got[i]) - e.value(k));
    if (!(err <= e.bound(k))) {
      if (failures++ == 0) first = i;
    } else if (e.bound(k) > 0.0) {
      worst_ratio = std::max(worst_ratio, err / e.bound(k));
    }
  }
  INFO("first failing index " << first << ": got " << (got.empty() ? 0.0F : got[first]) << ", expected "
                              << (got.empty() ? 0.0 : e.value(static_cast<Eigen::Index>(first))) << " +- "
                              << (got.empty() ? 0.0 : e.bound(static_cast<Eigen::Index>(first))));
  CHECK(failures == 0);
  CHECK(worst_ratio <= 1.0);
}

}  // namespace reference_test
