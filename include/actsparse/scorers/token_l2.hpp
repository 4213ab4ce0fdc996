#pragma once
// Token scores for a token-sparse FFN in prefill (RedKnot): a token whose attention output is
// small changes the residual stream little, so its FFN is the first to skip.

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/views.hpp>
#include <actsparse/scorers/detail/check.hpp>

#include <cmath>
#include <cstddef>
#include <span>

namespace actsparse {

// score_t = ‖attn_out[t, :]‖₂ for each row t of a [tokens × d] f32 matrix. The squares are
// summed in double in column order, so the result does not depend on the build.
struct token_l2 {
  using input_type = matrix_view<const float>;

  [[nodiscard]] std::size_t score_count(const input_type& attn_out) const noexcept { return attn_out.rows; }

  void score(const input_type& attn_out, std::span<float> out) const {
    constexpr std::string_view where = "token_l2::score";
    validate(attn_out, where, "attn_out");
    detail::require_score_count(where, out.size(), attn_out.rows);
    for (std::size_t t = 0; t < attn_out.rows; ++t) {
      const float* row = attn_out.row(t);
      double sum = 0.0;
      for (std::size_t i = 0; i < attn_out.cols; ++i) sum += static_cast<double>(row[i]) * static_cast<double>(row[i]);
      out[t] = static_cast<float>(std::sqrt(sum));
    }
  }

  friend constexpr bool operator==(const token_l2&, const token_l2&) noexcept = default;
};

ACTSPARSE_REQUIRE_IMPORTANCE_SCORER(token_l2);

}  // namespace actsparse
