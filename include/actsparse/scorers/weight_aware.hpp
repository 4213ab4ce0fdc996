#pragma once
// Weight-aware input scores (the WINA idea): a large x_j that meets a
// small column of the matrix that consumes x matters less than a smaller x_j that meets a
// large one. score_j = |x_j| · ‖W[:, j]‖₂ bounds the size of x_j's term W[:, j]·x_j of W·x
// exactly, so it ranks input channels by what they add to the output.

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/views.hpp>
#include <actsparse/scorers/detail/check.hpp>
#include <actsparse/scorers/detail/weight_norms.hpp>

#include <cmath>
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

namespace actsparse {

struct weight_aware_options {
  // Divide the norms by their mean, so that scores of different layers share a scale and one
  // global threshold means the same thing in every layer. Ranks within a layer are unchanged.
  bool normalize = false;
};

// Scores the input x of y = W·x (x has W.cols values). The column norms are computed once,
// by from_weights(); score() then costs one multiply per value and allocates nothing.
class weight_aware {
 public:
  using input_type = std::span<const float>;

  weight_aware() = default;  // no columns: scores only an empty x

  // W in any dtype (f32, bf16, f16, q8_0, q4_0): rows are dequantized, squares summed in double.
  // Throws if W is malformed (see validate(weight_view)) or holds NaN / infinity.
  [[nodiscard]] static weight_aware from_weights(const weight_view& w, weight_aware_options options = {}) {
    constexpr std::string_view where = "weight_aware::from_weights";
    std::vector<double> norms = detail::column_norms(w, where, "w");
    detail::require_finite_norms(norms, where, "w", "column");
    if (options.normalize) detail::divide_by_mean(norms);
    weight_aware s;
    s.norms_ = detail::to_float(norms);
    detail::require_finite_norms(s.norms_, where, "w", "column");
    return s;
  }

  // Norms computed elsewhere (a calibration file); they must be finite and non-negative.
  [[nodiscard]] static weight_aware from_norms(std::vector<float> column_norms) {
    detail::require_valid_norms(column_norms, "weight_aware::from_norms");
    weight_aware s;
    s.norms_ = std::move(column_norms);
    return s;
  }

  // ‖W[:, j]‖₂ (divided by their mean with normalize).
  [[nodiscard]] std::span<const float> column_norms() const noexcept { return norms_; }

  [[nodiscard]] std::size_t score_count(const input_type&) const noexcept { return norms_.size(); }

  void score(const input_type& x, std::span<float> out) const {
    constexpr std::string_view where = "weight_aware::score";
    detail::require_input_size(where, "x", x.size(), norms_.size(), "the columns of the weight matrix");
    detail::require_score_count(where, out.size(), norms_.size());
    for (std::size_t j = 0; j < x.size(); ++j) out[j] = std::fabs(x[j]) * norms_[j];
  }

  friend bool operator==(const weight_aware&, const weight_aware&) = default;

 private:
  std::vector<float> norms_;
};

ACTSPARSE_REQUIRE_IMPORTANCE_SCORER(weight_aware);

}  // namespace actsparse
