#pragma once
// MoE expert scores: the router's probabilities. Adaptive top-k selectors keep experts until
// a cumulative probability mass is reached, which needs true probabilities (sum 1), not logits.

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/scorers/detail/check.hpp>

#include <cmath>
#include <cstddef>
#include <span>
#include <string>

namespace actsparse {

// p_e = exp(l_e - max l) / Σ exp(l_i - max l): subtracting the max keeps every exp in (0, 1],
// so logits like 1000 do not overflow; exponentials and their sum are in double, in index order.
// Empty or non-finite logits are an error: no probability distribution exists for them.
struct router_softmax {
  using input_type = std::span<const float>;

  [[nodiscard]] std::size_t score_count(const input_type& logits) const noexcept { return logits.size(); }

  void score(const input_type& logits, std::span<float> out) const {
    constexpr std::string_view where = "router_softmax::score";
    if (logits.empty()) throw error(where, "logits", "an empty span", "at least one router logit");
    detail::require_score_count(where, out.size(), logits.size());
    double max = static_cast<double>(logits[0]);
    for (std::size_t e = 0; e < logits.size(); ++e) {
      if (!std::isfinite(logits[e])) {
        throw error(where, "logits", "[" + std::to_string(e) + "] = " + detail::to_text(logits[e]),
                    "finite logits (the first non-finite one is shown)");
      }
      if (static_cast<double>(logits[e]) > max) max = static_cast<double>(logits[e]);
    }
    double sum = 0.0;
    for (float l : logits) sum += std::exp(static_cast<double>(l) - max);
    // sum >= 1 (the max contributes exp(0)), so the division is safe.
    for (std::size_t e = 0; e < logits.size(); ++e) {
      out[e] = static_cast<float>(std::exp(static_cast<double>(logits[e]) - max) / sum);
    }
  }

  friend constexpr bool operator==(const router_softmax&, const router_softmax&) noexcept = default;
};

ACTSPARSE_REQUIRE_IMPORTANCE_SCORER(router_softmax);

}  // namespace actsparse
