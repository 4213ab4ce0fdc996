#pragma once
// The plain magnitude score: how large each value of a vector is, with no knowledge of the
// weights that will read it. The cheapest scorer, and the baseline the others improve on.

#include <actsparse/core/concepts.hpp>
#include <actsparse/scorers/detail/check.hpp>

#include <cmath>
#include <cstddef>
#include <span>

namespace actsparse {

// score_j = |x_j|. Non-finite values give non-finite scores (selectors then fall back).
struct magnitude {
  using input_type = std::span<const float>;

  [[nodiscard]] std::size_t score_count(const input_type& x) const noexcept { return x.size(); }

  void score(const input_type& x, std::span<float> out) const {
    detail::require_score_count("magnitude::score", out.size(), x.size());
    for (std::size_t j = 0; j < x.size(); ++j) out[j] = std::fabs(x[j]);
  }

  friend constexpr bool operator==(const magnitude&, const magnitude&) noexcept = default;
};

ACTSPARSE_REQUIRE_IMPORTANCE_SCORER(magnitude);

}  // namespace actsparse
