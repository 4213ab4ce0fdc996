#pragma once
// The calibration pipeline's options and what it reports (pipeline.hpp runs it): the byte targets,
// the methods to run, and per method and target the budget it wrote and what it measured.

#include <actsparse/calibration/calibration_file.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace calibration_run {

struct target {
  double bytes = 1.0;
  std::string label;  // as the budget names show it
};

// b in {0.9, 5/6, 0.75, 2/3}: the uniform rows read (1 + 2a)/3 at a = 0.75 and 0.5 exactly.
inline std::vector<target> default_targets() {
  return {{0.9, "0.9"}, {5.0 / 6.0, "0.833"}, {0.75, "0.75"}, {2.0 / 3.0, "0.667"}};
}

struct options {
  std::vector<target> targets = default_targets();
  bool budgets = true, refine = true, tiers = true, predictor = true, low_rank = true, combined = true, teal = true;
  std::vector<std::size_t> ranks{8, 16, 32};
  double step = 0.1;             // the greedy searches' rung (a share of the layer)
  double base_share = 0.9;       // a base set: the neurons kept by at least this share of the tokens
  double cap_share = 0.9;        // a tier cap: the highest tier this share of the tokens can take
  std::string reorder = "none";  // the permutation written to the file: none, hot, coactivation
  std::size_t predictor_hidden = 32;
};

struct low_rank_report {
  std::size_t rank = 0;
  std::string target;
  double predictor_bytes = 0.0;  // the factors' bytes as a fraction of the FFN's
  double keep_predicted = 0.0;   // the rows the predictor keeps at this byte target
  double keep_exact = 0.0;       // the rows exact gating keeps at this byte target
  double precision = 0.0;        // |P ∩ E| / |P| against exact gating's set E at equal bytes
  double recall = 0.0;           // |P ∩ E| / |E|
};

struct predictor_report {
  std::string target;
  double budget = 0.0;      // the per-token loss budget (KL) the budget uses
  double accuracy = 0.0;    // held-out tokens: predicted tier == the highest tier within the budget
  double too_sparse = 0.0;  // predicted tier above it (costs quality)
  double too_dense = 0.0;   // below it (costs bytes)
  std::size_t tokens = 0;   // held-out positions x layers
};

struct method_budget {
  std::string method, target, budget;  // the budget's name in the file
  double target_bytes = 1.0;
  double bytes = 1.0;  // measured on the calibration sample
  double kl = 0.0;
};

// Contiguous runs of the rows a step reads, per FFN call, under a neuron order (one W_up run and one
// W_downᵀ run each: what coalesce() would issue with no gap filled).
struct span_report {
  std::string target;                           // the budgets+refine budget's
  std::string order;                            // identity, hot, coactivation
  double first_spans = 0.0, final_spans = 0.0;  // runs of the first stage's rows (up), of the final ones (down)
  double first_rows = 0.0, final_rows = 0.0;    // rows, for scale
};

struct report {
  std::size_t tokens = 0;                               // calibration tokens (every position of every sequence)
  double statistics_seconds = 0.0;                      // both statistics passes
  std::vector<std::pair<std::string, double>> seconds;  // per stage
  std::vector<low_rank_report> low_rank;
  std::vector<predictor_report> predictor;
  std::size_t predictor_parameters = 0;                                   // all layers
  std::vector<std::vector<std::uint32_t>> hot_order, coactivation_order;  // per layer
  std::vector<span_report> spans;
  std::vector<method_budget> budgets;
};

// The runs of consecutive positions the neurons `set` occupy under order (inv[j]: j's position).
inline std::size_t runs_under(std::span<const std::uint32_t> set, std::span<const std::uint32_t> inv,
                              std::vector<std::uint32_t>& scratch) {
  scratch.clear();
  for (const std::uint32_t j : set) scratch.push_back(inv.empty() ? j : inv[j]);
  std::sort(scratch.begin(), scratch.end());
  std::size_t runs = 0;
  for (std::size_t i = 0; i < scratch.size(); ++i) runs += (i == 0 || scratch[i] != scratch[i - 1] + 1) ? 1 : 0;
  return runs;
}

struct result {
  actsparse::calibration_data data;
  report rep;
};

using progress_fn = std::function<void(const std::string& stage, double fraction)>;

}  // namespace calibration_run
