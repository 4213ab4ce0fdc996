#pragma once
// Fits the low-rank gate predictor g̃ = U (A x) of one layer by an SVD at calibration time.
//   plain:            W_gate = U S Vᵀ, keep the rank largest: A = S_r V_rᵀ, U = U_r (the best rank-r
//                     approximation of the matrix itself).
//   activation-aware: with C = E[x xᵀ] from the calibration sample (neuron_moments), the SVD of
//                     W_gate C^{1/2}, then A = S_r V_rᵀ C^{-1/2}: the rank-r map that minimises
//                     E‖(W_gate - Ŵ) x‖² over inputs like the calibration ones.
// The thin SVD B = U S Vᵀ of B = W_gate (or W_gate C^{1/2}) is taken from the symmetric eigen-
// decomposition of the d_model x d_model Gram matrix BᵀB = V S² Vᵀ (Eigen's SelfAdjointEigenSolver),
// then U_r = B V_r S_r⁻¹: the same factors, in seconds at 7B shapes (11008 x 4096), where Eigen's
// JacobiSVD takes hours; BDCSVD would add a minute to the build of every file that includes this.
// Factors are f32 and owned; view() gives the gate_factors a neuron-sparse op reads. Needs Eigen
// (the actsparse::calibration component).

#include <actsparse/calibration/detail/checks.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/gate_factors.hpp>
#include <actsparse/core/views.hpp>
#include <actsparse/scorers/detail/weight_norms.hpp>

#include <Eigen/Dense>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace actsparse {

class low_rank_gate {
 public:
  low_rank_gate() = default;

  // From factors computed elsewhere (a calibration file): a [rank x d_model], u [d_ff x rank],
  // row-major, finite.
  static low_rank_gate from_factors(std::size_t rank, std::size_t d_ff, std::size_t d_model, std::vector<float> a,
                                    std::vector<float> u) {
    constexpr std::string_view where = "low_rank_gate::from_factors";
    detail::require(rank >= 1 && rank <= std::min(d_ff, d_model), where, "rank", rank,
                    "1 .. min(d_ff, d_model) = " + std::to_string(std::min(d_ff, d_model)));
    detail::require_finite_values(a, rank * d_model, where, "a");
    detail::require_finite_values(u, d_ff * rank, where, "u");
    low_rank_gate g;
    g.rank_ = rank;
    g.d_ff_ = d_ff;
    g.d_model_ = d_model;
    g.a_ = std::move(a);
    g.u_ = std::move(u);
    return g;
  }

  // The plain fit of W_gate [d_ff x d_model] (any dtype; dequantized).
  static low_rank_gate fit(const weight_view& gate, std::size_t rank) { return fit_impl(gate, rank, {}); }

  // The activation-aware fit: second_moment is E[x xᵀ], d_model x d_model row-major (symmetric,
  // positive semi-definite; tiny eigenvalues are clamped at 1e-6 of the largest).
  static low_rank_gate fit(const weight_view& gate, std::size_t rank, std::span<const double> second_moment) {
    detail::require(second_moment.size() == gate.cols * gate.cols, "low_rank_gate::fit", "second_moment.size()",
                    second_moment.size(), "d_model x d_model = " + std::to_string(gate.cols * gate.cols));
    return fit_impl(gate, rank, second_moment);
  }

  [[nodiscard]] std::size_t rank() const noexcept { return rank_; }
  [[nodiscard]] std::size_t d_ff() const noexcept { return d_ff_; }
  [[nodiscard]] std::size_t d_model() const noexcept { return d_model_; }
  [[nodiscard]] std::span<const float> a() const noexcept { return a_; }
  [[nodiscard]] std::span<const float> u() const noexcept { return u_; }
  [[nodiscard]] gate_factors view() const noexcept {
    return {weight_view(a_.data(), dtype::f32, rank_, d_model_, d_model_ * sizeof(float)),
            weight_view(u_.data(), dtype::f32, d_ff_, rank_, rank_ * sizeof(float))};
  }
  friend bool operator==(const low_rank_gate&, const low_rank_gate&) = default;

 private:
  static low_rank_gate fit_impl(const weight_view& gate, std::size_t rank, std::span<const double> second_moment) {
    constexpr std::string_view where = "low_rank_gate::fit";
    validate(gate, where, "gate");
    const std::size_t d_ff = gate.rows;
    const std::size_t d_model = gate.cols;
    detail::require(rank >= 1 && rank <= std::min(d_ff, d_model), where, "rank", rank,
                    "1 .. min(d_ff, d_model) = " + std::to_string(std::min(d_ff, d_model)));
    using mat = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    mat w(static_cast<Eigen::Index>(d_ff), static_cast<Eigen::Index>(d_model));
    detail::for_each_dequantized_row(gate, [&](std::size_t i, const std::vector<float>& row) {
      for (std::size_t k = 0; k < d_model; ++k) w(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(k)) = row[k];
    });
    if (!w.allFinite()) detail::fail(where, "gate", "a matrix with a NaN or infinite weight", "finite weights");
    mat half = mat::Identity(static_cast<Eigen::Index>(d_model), static_cast<Eigen::Index>(d_model));
    mat inv_half = half;
    if (!second_moment.empty()) {
      const Eigen::Map<const mat> c(second_moment.data(), static_cast<Eigen::Index>(d_model),
                                    static_cast<Eigen::Index>(d_model));
      if (!c.allFinite())
        detail::fail(where, "second_moment", "a matrix with a NaN or infinite entry", "finite values");
      const Eigen::SelfAdjointEigenSolver<mat> eig(0.5 * (c + c.transpose()));
      Eigen::VectorXd lambda = eig.eigenvalues();
      const double top = lambda.maxCoeff();
      if (!(top > 0.0))
        detail::fail(where, "second_moment", "a matrix without a positive eigenvalue", "E[x xᵀ] of real inputs");
      lambda = lambda.cwiseMax(1e-6 * top);
      half = eig.eigenvectors() * lambda.cwiseSqrt().asDiagonal() * eig.eigenvectors().transpose();
      inv_half = eig.eigenvectors() * lambda.cwiseSqrt().cwiseInverse().asDiagonal() * eig.eigenvectors().transpose();
    }
    const mat b = w * half;
    const Eigen::SelfAdjointEigenSolver<mat> gram(b.transpose() * b);  // eigenvalues ascending
    const auto r = static_cast<Eigen::Index>(rank);
    const auto n = static_cast<Eigen::Index>(d_model);
    mat v(n, r);  // the top r right singular vectors, largest first
    Eigen::VectorXd sigma(r);
    for (Eigen::Index i = 0; i < r; ++i) {
      v.col(i) = gram.eigenvectors().col(n - 1 - i);
      sigma(i) = std::sqrt(std::max(0.0, gram.eigenvalues()(n - 1 - i)));
    }
    const double floor = 1e-12 * std::max(sigma(0), 1e-300);
    Eigen::VectorXd inv_sigma(r);
    for (Eigen::Index i = 0; i < r; ++i) inv_sigma(i) = sigma(i) > floor ? 1.0 / sigma(i) : 0.0;  // a null direction: 0
    const mat a = sigma.asDiagonal() * v.transpose() * inv_half;
    const mat u = b * v * inv_sigma.asDiagonal();
    low_rank_gate g;
    g.rank_ = rank;
    g.d_ff_ = d_ff;
    g.d_model_ = d_model;
    g.a_.resize(rank * d_model);
    g.u_.resize(d_ff * rank);
    for (std::size_t i = 0; i < rank; ++i) {
      for (std::size_t k = 0; k < d_model; ++k)
        g.a_[i * d_model + k] = static_cast<float>(a(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(k)));
    }
    for (std::size_t j = 0; j < d_ff; ++j) {
      for (std::size_t i = 0; i < rank; ++i)
        g.u_[j * rank + i] = static_cast<float>(u(static_cast<Eigen::Index>(j), static_cast<Eigen::Index>(i)));
    }
    return g;
  }

  std::size_t rank_ = 0, d_ff_ = 0, d_model_ = 0;
  std::vector<float> a_, u_;
};

}  // namespace actsparse
