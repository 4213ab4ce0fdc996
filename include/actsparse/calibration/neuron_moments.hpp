#pragma once
// Running moments of a gated FFN over a calibration sample, per layer, in bounded memory
// (independent of the sample size): the mean square of every neuron's up projection u_j and,
// optionally, the second moment E[x xᵀ] of the FFN input. They make the calibrated gate-only
// score (scales) and the activation-aware low-rank gate predictor (low_rank_gate.hpp).
//
// Sums are in double, added in call order; merge() adds another accumulator's sums, so a
// caller that fills one accumulator per sequence and merges them in sequence order gets the
// same bits for any number of worker threads.

#include <actsparse/calibration/detail/checks.hpp>
#include <actsparse/core/error.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace actsparse {

class neuron_moments {
 public:
  neuron_moments() = default;
  // layers x d_ff neurons with d_model inputs; input_moments: also E[x xᵀ] (d_model² doubles a layer).
  neuron_moments(std::size_t layers, std::size_t d_ff, std::size_t d_model, bool input_moments)
      : layers_(layers), d_ff_(d_ff), d_model_(d_model), input_moments_(input_moments) {
    constexpr std::string_view where = "neuron_moments";
    detail::require(layers >= 1, where, "layers", layers, "at least one layer");
    detail::require(d_ff >= 1, where, "d_ff", d_ff, "at least one neuron");
    detail::require(d_model >= 1, where, "d_model", d_model, "at least one input");
    up_squares_.assign(layers * d_ff, 0.0);
    if (input_moments) input_products_.assign(layers * d_model * d_model, 0.0);
    tokens_.assign(layers, 0);
  }

  // One token of `layer`: u = W_up·x (d_ff values) and x (d_model values; may be empty when
  // input moments are off). Values must be finite; on an error nothing is added.
  void add(std::size_t layer, std::span<const float> up, std::span<const float> x = {}) {
    constexpr std::string_view where = "neuron_moments::add";
    check_layer(layer, where);
    detail::require(up.size() == d_ff_, where, "up.size()", up.size(), "d_ff = " + std::to_string(d_ff_));
    detail::require_finite_values(up, d_ff_, where, "up");
    if (input_moments_) {
      detail::require(x.size() == d_model_, where, "x.size()", x.size(), "d_model = " + std::to_string(d_model_));
      detail::require_finite_values(x, d_model_, where, "x");
    }
    double* sq = up_squares_.data() + layer * d_ff_;
    for (std::size_t j = 0; j < d_ff_; ++j) sq[j] += static_cast<double>(up[j]) * static_cast<double>(up[j]);
    if (input_moments_) {
      double* p = input_products_.data() + layer * d_model_ * d_model_;
      for (std::size_t i = 0; i < d_model_; ++i) {
        const double xi = x[i];
        for (std::size_t k = i; k < d_model_; ++k) p[i * d_model_ + k] += xi * static_cast<double>(x[k]);
      }
    }
    ++tokens_[layer];
  }

  // Adds the sums of another accumulator of the same shape.
  void merge(const neuron_moments& o) {
    constexpr std::string_view where = "neuron_moments::merge";
    detail::require(
        o.layers_ == layers_ && o.d_ff_ == d_ff_ && o.d_model_ == d_model_ && o.input_moments_ == input_moments_, where,
        "other", "an accumulator of another shape", "the same layers, d_ff, d_model and options");
    for (std::size_t i = 0; i < up_squares_.size(); ++i) up_squares_[i] += o.up_squares_[i];
    for (std::size_t i = 0; i < input_products_.size(); ++i) input_products_[i] += o.input_products_[i];
    for (std::size_t l = 0; l < layers_; ++l) tokens_[l] += o.tokens_[l];
  }

  [[nodiscard]] std::size_t layers() const noexcept { return layers_; }
  [[nodiscard]] std::size_t d_ff() const noexcept { return d_ff_; }
  [[nodiscard]] std::size_t d_model() const noexcept { return d_model_; }
  [[nodiscard]] bool has_input_moments() const noexcept { return input_moments_; }
  [[nodiscard]] std::uint64_t tokens(std::size_t layer) const {
    check_layer(layer, "neuron_moments::tokens");
    return tokens_[layer];
  }

  // sqrt(E[u_j²]) for every neuron of the layer (needs at least one token).
  [[nodiscard]] std::vector<double> up_rms(std::size_t layer) const {
    const double n = static_cast<double>(require_tokens(layer, "neuron_moments::up_rms"));
    std::vector<double> r(d_ff_);
    for (std::size_t j = 0; j < d_ff_; ++j) r[j] = std::sqrt(up_squares_[layer * d_ff_ + j] / n);
    return r;
  }

  // E[x xᵀ], d_model x d_model row-major and symmetric (needs input moments and a token).
  [[nodiscard]] std::vector<double> input_second_moment(std::size_t layer) const {
    constexpr std::string_view where = "neuron_moments::input_second_moment";
    if (!input_moments_) {
      detail::fail(where, "input_moments", "off", "an accumulator built with input_moments = true");
    }
    const double n = static_cast<double>(require_tokens(layer, where));
    std::vector<double> m(d_model_ * d_model_);
    const double* p = input_products_.data() + layer * d_model_ * d_model_;
    for (std::size_t i = 0; i < d_model_; ++i) {
      for (std::size_t k = i; k < d_model_; ++k) m[i * d_model_ + k] = m[k * d_model_ + i] = p[i * d_model_ + k] / n;
    }
    return m;
  }

 private:
  void check_layer(std::size_t layer, std::string_view where) const { detail::require_layer(layer, layers_, where); }
  std::uint64_t require_tokens(std::size_t layer, std::string_view where) const {
    check_layer(layer, where);
    return detail::require_layer_tokens(layer, layers_, tokens_[layer], where);
  }

  std::size_t layers_ = 0, d_ff_ = 0, d_model_ = 0;
  bool input_moments_ = false;
  std::vector<double> up_squares_;      // [layer][j]
  std::vector<double> input_products_;  // [layer][i][k], upper triangle filled
  std::vector<std::uint64_t> tokens_;
};

}  // namespace actsparse
