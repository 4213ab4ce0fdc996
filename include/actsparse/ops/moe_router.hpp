#pragma once
// MoE routing: router logits → per-token expert count → the routing table (core/routing.hpp).
//   moe_gating       how logits become the experts chosen and their weights (Mixtral, Qwen-MoE
//                    / DeepSeek-V2, DeepSeek-V3, MoEfication)
//   moe_routing      the whole policy: gating, the model's native k, a per-layer k
//                    (progressive_top_k), a per-token k (adaptive_top_k) and a prefill token
//                    budget (block_budget: whole blocks of tokens keep the full count)
//   route(...)       applies it to n tokens' logits and fills a routing_table

#include <actsparse/core/error.hpp>
#include <actsparse/core/routing.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/core/views.hpp>
#include <actsparse/schedules/progressive_top_k.hpp>
#include <actsparse/scorers/router_softmax.hpp>
#include <actsparse/selectors/adaptive_top_k.hpp>
#include <actsparse/selectors/block_budget.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace actsparse {

// How a token's router logits l (one per expert) give its k experts and their weights.
// Probabilities p = softmax(l) (in double, as router_softmax) wherever a mass is needed.
enum class moe_gating : std::uint8_t {
  softmax_top_k,  // Mixtral, Qwen-MoE, DeepSeek-V2: the k largest p, weight p_e
                  // (normalize_top_k: divided by their sum)
  top_k_softmax,  // the k largest logits, weights the softmax over those k only (sum 1)
  sigmoid_top_k,  // DeepSeek-V3: s = sigmoid(l), the k largest s, weight s_e (normalize_top_k:
                  // divided by their sum); the adaptive count reads s / Σ s as its mass
  top_k_unit      // MoEfication: the k largest logits, weight 1 (the router only selects)
};

[[nodiscard]] constexpr std::string_view name(moe_gating g) noexcept {
  switch (g) {
    case moe_gating::softmax_top_k:
      return "softmax_top_k";
    case moe_gating::top_k_softmax:
      return "top_k_softmax";
    case moe_gating::sigmoid_top_k:
      return "sigmoid_top_k";
    case moe_gating::top_k_unit:
      return "top_k_unit";
  }
  return "?";
}

// Prefill token budgets (RedKnot): the tokens of the blocks that `blocks` keeps (whole blocks
// of blocks.block_size tokens, between min_full_ratio and max_full_ratio of the tokens) run the
// full count of the layer; every other token runs the reduced count: the adaptive count when
// the policy has one, else reduced_k.
struct prefill_budget {
  block_budget blocks{};
  std::size_t reduced_k = 1;
};

// The routing policy of an MoE model (one value for every layer; `layer` picks the per-layer k).
//   k_t = the layer's k: layer_k.at(layer) when given, else native_k (a schedule above
//         native_k is an error unless allow_above_native);
//   then, per token, the smallest bucket of `adaptive` whose cumulative probability reaches its
//   mass, capped at the layer's k; with a prefill budget, the tokens of the kept blocks take
//   the layer's k and the others the reduced count (adaptive, or reduced_k capped at the
//   layer's k). Every token runs at least one expert.
// Chosen experts: ties broken to the lower expert index (as top_k). Each token's experts are
// listed in increasing expert index: the combine order of moe_ffn_args.
struct moe_routing {
  moe_gating gating = moe_gating::softmax_top_k;
  std::size_t native_k = 2;
  bool normalize_top_k = false;
  float scale = 1.0F;  // every routed weight times this (DeepSeek's routed_scaling_factor)
  std::optional<progressive_top_k> layer_k{};
  std::optional<adaptive_top_k> adaptive{};
  std::optional<prefill_budget> budget{};
  bool allow_above_native = false;

  // The layer's k for n_experts experts (checks the configuration).
  [[nodiscard]] std::size_t layer_count(std::size_t layer, std::size_t n_experts) const {
    constexpr std::string_view where = "moe_routing";
    detail::require(n_experts >= 1, where, "n_experts", n_experts, "at least one expert");
    detail::require(native_k >= 1 && native_k <= n_experts, where, "native_k", native_k,
                    "1 <= k <= n_experts = " + std::to_string(n_experts));
    detail::require(std::isfinite(scale), where, "scale", scale, "a finite weight scale");
    std::size_t k = native_k;
    if (layer_k) {
      k = layer_k->at(layer);
      if (k > native_k && !allow_above_native) {
        detail::fail(where, "layer_k.at(" + std::to_string(layer) + ")", k,
                     "at most native_k = " + std::to_string(native_k) +
                         " (set allow_above_native to run more experts than the model was trained with)");
      }
      detail::require(k <= n_experts, where, "layer_k.at(" + std::to_string(layer) + ")", k,
                      "at most n_experts = " + std::to_string(n_experts));
    }
    if (adaptive) adaptive->validate();
    if (budget) detail::require(budget->reduced_k >= 1, where, "budget.reduced_k", budget->reduced_k, "at least 1");
    return k;
  }
};

// What route() reuses from call to call (nothing is allocated once it has grown).
struct moe_route_scratch {
  std::vector<float> probabilities;   // [tokens x experts]: the mass the adaptive count reads
  std::vector<std::uint32_t> counts;  // per token
  std::vector<float> token_scores;    // the budget's token scores when none are given
  std::vector<std::uint32_t> order;   // one token's ranking
  std::vector<std::uint32_t> offsets;
  std::vector<std::uint32_t> experts;
  std::vector<float> weights;
  std::vector<double> raw;  // one token's weights before normalisation
  selection chosen;
  selection full_tokens;
};

namespace detail {

// The top `k` of `score` (descending, ties to the lower index) into order[0, k), then sorted
// by expert index.
inline void top_experts(std::span<const float> score, std::size_t k, std::vector<std::uint32_t>& order) {
  order.resize(score.size());
  for (std::size_t e = 0; e < score.size(); ++e) order[e] = static_cast<std::uint32_t>(e);
  std::partial_sort(
      order.begin(), order.begin() + static_cast<std::ptrdiff_t>(k), order.end(),
      [&](std::uint32_t a, std::uint32_t b) { return score[a] != score[b] ? score[a] > score[b] : a < b; });
  order.resize(k);
  std::sort(order.begin(), order.end());
}

}  // namespace detail

// Routes the tokens of one layer: logits [tokens x n_experts] (finite, else an error naming the
// first bad one), token_scores (optional, one per token: what the prefill budget ranks blocks by;
// empty: 1 − the token's largest probability, so the tokens the router is least sure of keep the
// full count). Fills `table`.
inline void route(const moe_routing& policy, std::size_t layer, matrix_view<const float> logits, routing_table& table,
                  moe_route_scratch& s, std::span<const float> token_scores = {}) {
  constexpr std::string_view where = "route";
  const std::size_t n = logits.rows;
  const std::size_t n_experts = logits.cols;
  detail::require(n_experts >= 1, where, "logits.cols", n_experts, "at least one expert (one logit per expert)");
  validate(logits, where, "logits");
  const std::size_t layer_k = policy.layer_count(layer, n_experts);
  if (!token_scores.empty() || policy.budget) {
    detail::require(token_scores.empty() || token_scores.size() == n, where, "token_scores.size()", token_scores.size(),
                    std::to_string(n) + " (one score per token) or 0");
  }
  const router_softmax softmax;
  s.probabilities.resize(n * n_experts);
  for (std::size_t t = 0; t < n; ++t) {
    const std::span<const float> l(logits.row(t), n_experts);
    const std::span<float> p(s.probabilities.data() + t * n_experts, n_experts);
    for (std::size_t e = 0; e < n_experts; ++e) {
      if (!std::isfinite(l[e])) {
        detail::fail(where, "logits[" + std::to_string(t) + "][" + std::to_string(e) + "]", l[e],
                     "finite router logits (token " + std::to_string(t) + ")");
      }
    }
    if (policy.gating == moe_gating::sigmoid_top_k) {
      double sum = 0.0;
      for (std::size_t e = 0; e < n_experts; ++e) {
        p[e] = static_cast<float>(1.0 / (1.0 + std::exp(-static_cast<double>(l[e]))));
        sum += static_cast<double>(p[e]);
      }
      for (float& v : p) v = static_cast<float>(static_cast<double>(v) / sum);  // sum > 0: every s_e > 0
    } else {
      softmax.score(l, p);
    }
  }
  // Per-token counts.
  s.counts.assign(n, static_cast<std::uint32_t>(layer_k));
  const auto adaptive_count = [&](std::size_t t) -> std::size_t {
    policy.adaptive->select(std::span<const float>(s.probabilities.data() + t * n_experts, n_experts), s.chosen);
    return std::min(s.chosen.size(), layer_k);
  };
  if (policy.budget && n > 0) {
    std::span<const float> scores = token_scores;
    if (scores.empty()) {
      s.token_scores.resize(n);
      for (std::size_t t = 0; t < n; ++t) {
        const float* p = s.probabilities.data() + t * n_experts;
        s.token_scores[t] = 1.0F - *std::max_element(p, p + n_experts);
      }
      scores = s.token_scores;
    }
    policy.budget->blocks.select(scores, s.full_tokens);
    std::size_t next = 0;  // walks the sorted kept tokens
    for (std::size_t t = 0; t < n; ++t) {
      const bool full = next < s.full_tokens.indices.size() && s.full_tokens.indices[next] == t;
      if (full) {
        ++next;
        continue;
      }
      s.counts[t] =
          static_cast<std::uint32_t>(policy.adaptive ? adaptive_count(t) : std::min(policy.budget->reduced_k, layer_k));
    }
  } else if (policy.adaptive) {
    for (std::size_t t = 0; t < n; ++t) s.counts[t] = static_cast<std::uint32_t>(adaptive_count(t));
  }
  // The chosen experts and their weights.
  s.offsets.resize(n + 1);
  s.offsets[0] = 0;
  s.experts.clear();
  s.weights.clear();
  for (std::size_t t = 0; t < n; ++t) {
    const std::size_t k = std::max<std::size_t>(s.counts[t], 1);
    const std::span<const float> l(logits.row(t), n_experts);
    const std::span<const float> p(s.probabilities.data() + t * n_experts, n_experts);
    const bool by_probability =
        policy.gating == moe_gating::softmax_top_k || policy.gating == moe_gating::sigmoid_top_k;
    detail::top_experts(by_probability ? p : l, k, s.order);
    double sum = 0.0;
    double max_logit = -HUGE_VAL;
    for (const std::uint32_t e : s.order) max_logit = std::max(max_logit, static_cast<double>(l[e]));
    s.raw.clear();
    for (const std::uint32_t e : s.order) {
      const double le = static_cast<double>(l[e]);
      double w = 1.0;  // top_k_unit
      if (policy.gating == moe_gating::softmax_top_k) w = static_cast<double>(p[e]);
      if (policy.gating == moe_gating::top_k_softmax) w = std::exp(le - max_logit);
      if (policy.gating == moe_gating::sigmoid_top_k) w = 1.0 / (1.0 + std::exp(-le));
      s.raw.push_back(w);
      sum += w;
    }
    const bool normalize = policy.gating == moe_gating::top_k_softmax ||
                           (policy.normalize_top_k && policy.gating != moe_gating::top_k_unit);
    for (std::size_t i = 0; i < s.order.size(); ++i) {
      // sum is 0 only when every sigmoid underflowed (logits below -745): equal weights then.
      const double w = !normalize ? s.raw[i] : (sum > 0.0 ? s.raw[i] / sum : 1.0 / static_cast<double>(s.order.size()));
      s.experts.push_back(s.order[i]);
      s.weights.push_back(static_cast<float>(w * static_cast<double>(policy.scale)));
    }
    s.offsets[t + 1] = static_cast<std::uint32_t>(s.experts.size());
  }
  table.assign(n_experts, s.offsets, s.experts, s.weights);
}

}  // namespace actsparse
