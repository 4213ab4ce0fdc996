#pragma once
// Exact gating for ReLU-gated FFNs (ReGLU, ReLU-fied models): a neuron with g_j <= 0 has
// h_j = relu(g_j) = 0 and contributes nothing, so skipping it changes no output bit.

#include <actsparse/core/concepts.hpp>
#include <actsparse/scorers/detail/check.hpp>

#include <cmath>
#include <cstddef>
#include <span>

namespace actsparse {

// score_j = max(g_j, 0) for the gate pre-activation g. Neuron j is active iff score_j != 0:
// pair it with a threshold selector at t = 0 (keep score > 0) for an exact sparse FFN.
// A NaN g_j stays NaN (not 0) so that a selector sees it and falls back to dense.
struct relu_exact {
  using input_type = std::span<const float>;

  [[nodiscard]] std::size_t score_count(const input_type& g) const noexcept { return g.size(); }

  void score(const input_type& g, std::span<float> out) const {
    detail::require_score_count("relu_exact::score", out.size(), g.size());
    for (std::size_t j = 0; j < g.size(); ++j) out[j] = (g[j] > 0.0F || std::isnan(g[j])) ? g[j] : 0.0F;
  }

  friend constexpr bool operator==(const relu_exact&, const relu_exact&) noexcept = default;
};

ACTSPARSE_REQUIRE_IMPORTANCE_SCORER(relu_exact);

}  // namespace actsparse
