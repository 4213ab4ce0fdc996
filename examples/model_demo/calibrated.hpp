#pragma once
// The model demo's calibrated rows: one per method and byte target, each a budget of the
// calibration file the demo fits on its own calibration sample (examples/calibration/pipeline.hpp).
// Named "<prefix>calibrated <method> @ <target>"; the TEAL budgets run as input-sparse policies.

#include "calibration/pipeline.hpp"
#include "calibration/policy.hpp"
#include "policies.hpp"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace model_demo {

inline std::vector<policy_config> calibrated_table(const calibration_run::result& r, const std::string& prefix = {},
                                                   const std::string& family = "calibrated") {
  std::vector<policy_config> table;
  for (const calibration_run::method_budget& b : r.rep.budgets) {
    const budget_entry& e = r.data.budget(b.budget);
    const std::string name = prefix + "calibrated " + b.method + " @ " + b.target;
    const std::string scorer = family == "calibrated" ? b.method : "calibrated " + b.method;
    if (e.layers.empty()) {
      std::vector<threshold> t;
      for (const float v : e.input_thresholds) t.push_back(threshold{v});
      table.push_back({name, family, scorer, [t] { return std::make_unique<teal_policy>(t); }});
    } else {
      const calibrated_schedule schedule(r.data, e);
      table.push_back({name, family, scorer,
                       [schedule] { return std::make_unique<calibration_run::calibrated_policy>(schedule); }});
    }
  }
  return table;
}

// The names calibrated_table can give for options o (every method o runs, at every target).
inline std::vector<std::string> calibrated_names(const calibration_run::options& o, const std::string& prefix = {}) {
  std::vector<std::string> methods;
  if (o.budgets) methods.emplace_back("budgets");
  if (o.refine) methods.emplace_back("budgets+refine");
  if (o.combined) methods.emplace_back("combined");
  if (o.tiers) methods.emplace_back("tiers");
  if (o.predictor) methods.emplace_back("tiers+predictor");
  if (o.teal) methods.emplace_back("teal");
  if (o.low_rank) {
    for (const std::size_t r : o.ranks) methods.push_back("low-rank r" + std::to_string(r));
  }
  std::vector<std::string> out;
  for (const auto& m : methods) {
    for (const auto& t : o.targets) out.push_back(prefix + "calibrated " + m + " @ " + t.label);
  }
  return out;
}

}  // namespace model_demo
