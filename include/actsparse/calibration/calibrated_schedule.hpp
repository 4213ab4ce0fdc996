#pragma once
// A layer schedule filled by a calibration file: one budget of calibration_data, layer by layer,
// in the form neuron_sparse_ffn consumes. With it one op type runs every layer of a calibrated
// model and the engine writes no per-layer code:
//
//   const calibration_data cal = calibration_data::load(path, model_fingerprint::of(ffn_layers));
//   // (apply cal.layers[l].permutation with permute_ffn when the file has one)
//   const calibrated_schedule schedule(cal, "budgets@0.75");
//   const neuron_sparse_ffn op{weight_aware_gate{}, calibrated_selector{}, score_source::gate_preactivation,
//                              cpu_backend{}, schedule};
//   for (layer ...) op(layer, ffn[layer], x, y, kept, scratch, ex);
//
// Per layer the schedule gives (core/layer_setting.hpp's hooks): whether the layer is dense; the
// calibrated gate-only score (weight_aware_gate with the file's per-neuron weights); the first
// stage's rule (top-k, a threshold, or a tier with its base set, the tier fixed or predicted per
// token by the tier predictor, at most the cap); a second stage over the exact hidden values
// (refine); and the low-rank gate predictor. The op must use weight_aware_gate and
// calibrated_selector (the types these hooks configure); the base scorer and selector it holds
// are not used on a calibrated layer. The schedule shares its per-layer data between copies.
//
// input_thresholds() gives the per-layer table of an input-sparse budget (TEAL) for one
// projection: input_sparse_linear with a threshold selector takes it as its schedule.

#include <actsparse/calibration/calibration_file.hpp>
#include <actsparse/calibration/tier_predictor.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/gate_factors.hpp>
#include <actsparse/core/layer_setting.hpp>
#include <actsparse/schedules/per_layer_table.hpp>
#include <actsparse/scorers/weight_aware_gate.hpp>
#include <actsparse/selectors/calibrated_selector.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace actsparse {

namespace detail {

// One layer of one budget, ready to run (owned by a calibrated_schedule, never copied).
struct calibrated_layer {
  bool dense = false;
  weight_aware_gate score;
  neuron_rule rule = neuron_rule::top_k;
  std::size_t k = 0;
  float t = 0.0F;
  std::size_t tier = 0;  // the fixed tier, or the cap of a predicted one
  std::vector<std::size_t> tier_m;
  std::vector<std::vector<std::uint32_t>> bases;
  std::optional<tier_predictor> predictor;  // set when the tier is predicted per token
  double tier_budget = 0.0;
  bool with_base = false;
  double refine = 1.0;
  std::vector<float> down_norms;
  std::vector<float> factor_a, factor_u;  // the gate predictor, when predict_gate
  gate_factors factors{};
  bool predict_gate = false;

  [[nodiscard]] calibrated_selector with_tier(std::size_t t_index) const {
    calibrated_selector s{rule, k, t, 1, {}};
    if (rule == neuron_rule::tier) s.m = tier_m[t_index];
    if (rule == neuron_rule::tier || with_base) s.base = bases[t_index];
    return s;
  }
};

}  // namespace detail

// What calibrated_schedule::at gives for a layer: a small handle (copyable) on its settings.
struct calibrated_setting {
  bool dense = false;
  const detail::calibrated_layer* layer = nullptr;
};

class calibrated_schedule {
 public:
  using value_type = calibrated_setting;

  calibrated_schedule() = default;

  // The settings of budget `budget` of `data` (validated again here).
  calibrated_schedule(const calibration_data& data, std::string_view budget)
      : calibrated_schedule(data, data.budget(budget), true) {}

  // The settings of a budget that is not (yet) in data's list, e.g. one a search is trying; it
  // must fit data's layers (validated with them).
  calibrated_schedule(const calibration_data& data, const budget_entry& b) : calibrated_schedule(data, b, false) {}

  [[nodiscard]] value_type at(std::size_t layer) const {
    const std::size_t n = layers_ ? layers_->size() : 0;
    if (layer >= n) {
      detail::fail("calibrated_schedule::at", "layer", layer,
                   "a layer below " + std::to_string(n) + " (the file's layers)");
    }
    const detail::calibrated_layer& l = (*layers_)[layer];
    return {l.dense, &l};
  }

  [[nodiscard]] std::size_t layers() const noexcept { return layers_ ? layers_->size() : 0; }

  friend bool operator==(const calibrated_schedule& a, const calibrated_schedule& b) noexcept {
    return a.layers_ == b.layers_;
  }

 private:
  calibrated_schedule(const calibration_data& data, const budget_entry& b, bool listed) {
    constexpr std::string_view where = "calibrated_schedule";
    if (listed) {
      data.validate_data(where);
    } else {
      data.validate_layers(where);
      data.validate_budget(b, where, "budget");
    }
    if (b.layers.empty()) {
      detail::fail(where, "budget", b.name, "a budget with neuron settings (this one is input-sparse only)");
    }
    auto layers = std::make_shared<std::vector<detail::calibrated_layer>>(data.layers.size());
    const std::size_t d_ff = data.model.d_ff;
    for (std::size_t l = 0; l < data.layers.size(); ++l) {
      const layer_calibration& c = data.layers[l];
      const layer_budget& s = b.layers[l];
      detail::calibrated_layer& out = (*layers)[l];
      out.dense = s.dense;
      out.score = weight_aware_gate::from_norms(c.score_weights);
      out.rule = s.rule;
      const double k =
          std::ceil(s.keep * static_cast<double>(d_ff) - 1e-9);  // a share written as count / d_ff is that count
      out.k = k >= static_cast<double>(d_ff) ? d_ff : static_cast<std::size_t>(k);
      out.t = s.threshold;
      out.tier = s.tier;
      for (const tier_entry& t : c.tiers) {
        out.tier_m.push_back(t.m);
        out.bases.push_back(t.base);
      }
      if (s.predict_tier) out.predictor = tier_predictor::from_parameters(*c.tier_predictor);
      out.tier_budget = s.tier_budget;
      out.with_base = s.with_base;
      out.refine = s.refine;
      out.down_norms = c.down_norms;
      out.predict_gate = s.gate_rank != 0;
      if (out.predict_gate) {
        const gate_predictor_data& g = *c.gate_predictor_of(s.gate_rank);
        out.factor_a = g.a;
        out.factor_u = g.u;
        out.factors = {weight_view(out.factor_a.data(), dtype::f32, g.rank, data.model.d_model,
                                   data.model.d_model * sizeof(float)),
                       weight_view(out.factor_u.data(), dtype::f32, d_ff, g.rank, g.rank * sizeof(float))};
      }
    }
    layers_ = std::move(layers);
  }

  std::shared_ptr<const std::vector<detail::calibrated_layer>> layers_;
};

ACTSPARSE_REQUIRE_LAYER_SCHEDULE(calibrated_schedule);

// --- the hooks neuron_sparse_ffn calls (core/layer_setting.hpp) ------------------------------

[[nodiscard]] inline calibrated_selector configure(const calibrated_selector& /*base*/, const calibrated_setting& v) {
  return v.layer->with_tier(v.layer->tier);
}

[[nodiscard]] inline calibrated_selector configure(const calibrated_selector& /*base*/, const calibrated_setting& v,
                                                   const layer_input& in) {
  const detail::calibrated_layer& l = *v.layer;
  if (!l.predictor) return l.with_tier(l.tier);
  std::vector<float> local;
  std::vector<float>& scratch = in.scratch != nullptr ? *in.scratch : local;
  return l.with_tier(l.predictor->predict_from_input(in.x, l.tier, l.tier_budget, scratch));
}

[[nodiscard]] inline const weight_aware_gate& configure_scorer(const weight_aware_gate& /*base*/,
                                                               const calibrated_setting& v) {
  return v.layer->score;
}

[[nodiscard]] inline refine_rule refine_stage(const calibrated_setting& v) {
  return {v.layer->refine, v.layer->down_norms};
}

[[nodiscard]] inline const gate_factors* gate_predictor(const calibrated_setting& v) {
  return v.layer->predict_gate ? &v.layer->factors : nullptr;
}

ACTSPARSE_REQUIRE_CONFIGURES(calibrated_setting, calibrated_selector);

// The per-layer thresholds of an input-sparse budget for one projection (0 q, 1 k, 2 v, 3 o,
// 4 gate, 5 up, 6 down): the schedule of input_sparse_linear<Scorer, threshold, ...>.
[[nodiscard]] inline per_layer_table<float> input_thresholds(const calibration_data& data, std::string_view budget,
                                                             std::size_t projection) {
  constexpr std::string_view where = "input_thresholds";
  detail::require(projection < input_projections, where, "projection", projection,
                  "0 .. 6 (q, k, v, o, gate, up, down)");
  const budget_entry& b = data.budget(budget);
  if (b.input_thresholds.empty()) {
    detail::fail(where, "budget", b.name, "a budget with input_thresholds (this one has neuron settings only)");
  }
  std::vector<float> t(data.model.layers);
  for (std::size_t l = 0; l < t.size(); ++l) t[l] = b.input_thresholds[l * input_projections + projection];
  return per_layer_table<float>(std::move(t));
}

}  // namespace actsparse
