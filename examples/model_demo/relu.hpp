#pragma once
// The model demo's ReLU rows: the ReLU-fied bundled model (data/stories260K_relu.bin, made by
// scripts/relufy.py: SiLU replaced by ReLU in every FFN gate, then distilled from the original
// on text the original samples; data/stories260K_relu.json says how) under exact gating and the
// usual policies. Every row's KL and top-1 are against the original (SwiGLU) dense model, so a
// row shows the whole cost of ReLU-fication plus the policy, and kl_vs_relu_dense the policy's
// own cost against the ReLU model's dense FFN. Exact gating keeps the neurons with g > 0, the
// only ones with h != 0: its output equals dense, and its kept fraction per layer is the share
// of neurons active (1 - the share of exact zeros). The calibrated rows ("relu calibrated
// budgets[+refine] @ b") are budgets of a calibration the demo fits on the ReLU model itself, at
// the bytes of the top-k rows (b = 0.5 and 0.4: (1 + 2a)/3 at a = 25% and 10%).

#include "calibrated.hpp"
#include "calibration/pipeline.hpp"
#include "harness.hpp"
#include "policies.hpp"

#include <actsparse/scorers/relu_exact.hpp>
#include <actsparse/selectors/threshold.hpp>

#include <memory>
#include <string>
#include <vector>

namespace model_demo {

// The ReLU model's rows (names start with "relu "): dense, exact gating, top-k of two scorers at
// two keeps and cumulative mass. `scorers` (the ReLU model's) must outlive the table.
inline std::vector<policy_config> relu_table(std::size_t layers, const layer_scorers& scorers) {
  std::vector<policy_config> table;
  table.push_back({"relu dense", "relu", "dense", [] { return std::make_unique<dense_demo_policy>(); }});
  table.push_back({"relu exact gating", "relu", "relu_exact", [layers] {
                     std::vector<neuron_sparse_ffn<relu_exact, threshold, cpu_backend>> ops;
                     for (std::size_t l = 0; l < layers; ++l) {
                       ops.push_back({relu_exact{}, threshold{0.0F}, score_source::gate_preactivation, {}});
                     }
                     return std::make_unique<neuron_policy<relu_exact, threshold>>(std::move(ops), true);
                   }});
  const auto per_layer = [layers](const auto& per_layer_scorers, auto selector) {
    using Scorer = typename std::decay_t<decltype(per_layer_scorers)>::value_type;
    using Selector = decltype(selector);
    std::vector<neuron_sparse_ffn<Scorer, Selector, cpu_backend>> ops;
    for (std::size_t l = 0; l < layers; ++l) ops.push_back({per_layer_scorers[l], selector, score_source::hidden, {}});
    return std::make_unique<neuron_policy<Scorer, Selector>>(std::move(ops));
  };
  for (const double keep : {0.25, 0.1}) {
    const std::string k = std::to_string(static_cast<int>(std::lround(keep * 100)));
    table.push_back({"relu magnitude top_k " + k + "%", "relu", "magnitude",
                     [=, &scorers] { return per_layer(scorers.mag, top_k::by_ratio(keep)); }});
    table.push_back({"relu weight_aware top_k " + k + "%", "relu", "weight_aware",
                     [=, &scorers] { return per_layer(scorers.wa, top_k::by_ratio(keep)); }});
  }
  for (const double mass : {0.99, 0.95}) {
    char name[64];
    std::snprintf(name, sizeof name, "relu magnitude cumulative_mass %.2f", mass);
    table.push_back({name, "relu", "magnitude", [=, &scorers] {
                       return per_layer(scorers.mag, cumulative_mass{mass, 0, 1});
                     }});
  }
  return table;
}

// The ReLU model's calibration: per-layer budgets and budgets+refine at the top-k rows' bytes.
inline calibration_run::options relu_calibration_options() {
  calibration_run::options o;
  o.targets = {{0.5, "0.5"}, {0.4, "0.4"}};
  o.tiers = o.predictor = o.low_rank = o.combined = o.teal = false;
  return o;
}

inline constexpr const char* relu_prefix = "relu ";

}  // namespace model_demo
