#pragma once
// The CATS score for SwiGLU FFNs: |silu(g_j)| is the size of the gate factor of h_j = silu(g_j)·u_j,
// available after the gate projection alone. SiLU has no exact zeros, so this score is meant
// for a threshold or mass selector (a calibrated cut-off), not for exact gating.

#include <actsparse/core/activation.hpp>
#include <actsparse/core/concepts.hpp>
#include <actsparse/scorers/detail/check.hpp>

#include <cmath>
#include <cstddef>
#include <span>

namespace actsparse {

// score_j = |silu(g_j)| = |g_j / (1 + exp(-g_j))| for the gate pre-activation g.
struct silu_magnitude {
  using input_type = std::span<const float>;

  [[nodiscard]] std::size_t score_count(const input_type& g) const noexcept { return g.size(); }

  void score(const input_type& g, std::span<float> out) const {
    detail::require_score_count("silu_magnitude::score", out.size(), g.size());
    for (std::size_t j = 0; j < g.size(); ++j) out[j] = std::fabs(silu(g[j]));
  }

  friend constexpr bool operator==(const silu_magnitude&, const silu_magnitude&) noexcept = default;
};

ACTSPARSE_REQUIRE_IMPORTANCE_SCORER(silu_magnitude);

}  // namespace actsparse
