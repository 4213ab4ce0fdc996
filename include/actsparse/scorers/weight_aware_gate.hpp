#pragma once
// The decode-time neuron score of a gated FFN that needs only the gate projection.
//
// Neuron j adds h_j·u_j·W_down[:, j] to the output, with h_j = act(g_j) and u_j = W_up[j, :]·x.
// By Cauchy–Schwarz |u_j| ≤ ‖W_up[j, :]‖·‖x‖, so
//   ‖h_j·u_j·W_down[:, j]‖ ≤ |act(g_j)| · ‖W_up[j, :]‖ · ‖W_down[:, j]‖ · ‖x‖,
// and ‖x‖ is common to every j: score_j = |act(g_j)| · ‖W_up[j, :]‖ · ‖W_down[:, j]‖ ranks
// neurons by a bound on their contribution without computing the up projection. A sparse FFN
// driven by it reads the whole gate matrix and the active fraction a of up and down:
// (1 + 2a)/3 of the dense bytes.

#include <actsparse/core/activation.hpp>
#include <actsparse/core/concepts.hpp>
#include <actsparse/core/views.hpp>
#include <actsparse/scorers/detail/check.hpp>
#include <actsparse/scorers/detail/weight_norms.hpp>
#include <actsparse/scorers/weight_aware.hpp>

#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace actsparse {

// The gate pre-activation g = W_gate·x (d_ff values) and the FFN's activation.
struct gate_input {
  std::span<const float> g;
  activation act = activation::silu;
};

class weight_aware_gate {
 public:
  using input_type = gate_input;

  weight_aware_gate() = default;  // no neurons: scores only an empty g

  // W_up [d_ff × d_model] and W_down [d_model × d_ff], each in any dtype. The products of
  // norms are computed once, in double. normalize divides the products by their mean.
  [[nodiscard]] static weight_aware_gate from_weights(const weight_view& w_up, const weight_view& w_down,
                                                      weight_aware_options options = {}) {
    constexpr std::string_view where = "weight_aware_gate::from_weights";
    if (w_down.cols != w_up.rows) {
      throw error(where, "w_down", "a matrix of " + shape(w_down),
                  std::to_string(w_up.rows) + " columns (d_ff = the rows of w_up, " + shape(w_up) + ")");
    }
    if (w_down.rows != w_up.cols) {
      throw error(where, "w_down", "a matrix of " + shape(w_down),
                  std::to_string(w_up.cols) + " rows (d_model = the columns of w_up, " + shape(w_up) + ")");
    }
    std::vector<double> up = detail::row_norms(w_up, where, "w_up");
    detail::require_finite_norms(up, where, "w_up", "row");
    const std::vector<double> down = detail::column_norms(w_down, where, "w_down");
    detail::require_finite_norms(down, where, "w_down", "column");
    for (std::size_t j = 0; j < up.size(); ++j) up[j] *= down[j];
    if (options.normalize) detail::divide_by_mean(up);
    weight_aware_gate s;
    s.norms_ = detail::to_float(up);
    detail::require_finite_norms(s.norms_, where, "w_up", "neuron");
    return s;
  }

  // Products ‖W_up[j, :]‖·‖W_down[:, j]‖ computed elsewhere; finite and non-negative.
  [[nodiscard]] static weight_aware_gate from_norms(std::vector<float> neuron_norms) {
    detail::require_valid_norms(neuron_norms, "weight_aware_gate::from_norms");
    weight_aware_gate s;
    s.norms_ = std::move(neuron_norms);
    return s;
  }

  // ‖W_up[j, :]‖₂ · ‖W_down[:, j]‖₂ (divided by their mean with normalize).
  [[nodiscard]] std::span<const float> neuron_norms() const noexcept { return norms_; }

  // How a neuron-sparse op builds the input from the values it computed (neuron_scorer): it
  // passes the gate pre-activation (score_source::gate_preactivation) and the activation.
  [[nodiscard]] static input_type neuron_input(std::span<const float> g, activation act) noexcept { return {g, act}; }

  [[nodiscard]] std::size_t score_count(const input_type&) const noexcept { return norms_.size(); }

  void score(const input_type& in, std::span<float> out) const {
    constexpr std::string_view where = "weight_aware_gate::score";
    detail::require_input_size(where, "g", in.g.size(), norms_.size(), "d_ff, the rows of w_up");
    detail::require_score_count(where, out.size(), norms_.size());
    for (std::size_t j = 0; j < norms_.size(); ++j) out[j] = std::fabs(apply(in.act, in.g[j])) * norms_[j];
  }

  friend bool operator==(const weight_aware_gate&, const weight_aware_gate&) = default;

 private:
  static std::string shape(const weight_view& w) {
    return std::to_string(w.rows) + " x " + std::to_string(w.cols) + " " + std::string(name(w.type));
  }

  std::vector<float> norms_;
};

ACTSPARSE_REQUIRE_NEURON_SCORER(weight_aware_gate);

}  // namespace actsparse
