#pragma once
// The model demo's policies (how the forward pass runs each FFN or projection through an
// actsparse operator on the CPU backend), their calibration, and the policy table: every
// configuration the demo measures, as a name and a way to build its policy.

#include "harness.hpp"
#include "llama2c/model.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/calibration/threshold_calibration.hpp>
#include <actsparse/ops/input_sparse_linear.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>
#include <actsparse/ops/token_sparse_ffn.hpp>
#include <actsparse/schedules/depth_schedule.hpp>
#include <actsparse/scorers/magnitude.hpp>
#include <actsparse/scorers/silu_magnitude.hpp>
#include <actsparse/scorers/weight_aware.hpp>
#include <actsparse/scorers/weight_aware_gate.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>
#include <actsparse/selectors/threshold.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace model_demo {

using namespace actsparse;
using llama2c::projection;

// Counts of what a policy kept, over every call.
struct kept_counter {
  double kept = 0.0;
  double total = 0.0;
  void add(const selection& s) {
    kept += static_cast<double>(s.size());
    total += static_cast<double>(s.universe);
  }
  [[nodiscard]] double fraction() const { return total > 0.0 ? kept / total : 1.0; }
};

class demo_policy : public llama2c::policy {
 public:
  // Kept fraction of what this policy selects (neurons, input channels or tokens).
  [[nodiscard]] virtual double kept_fraction() const { return 1.0; }
  // Fraction of the FFN weight bytes read per decode token.
  [[nodiscard]] virtual double bytes_fraction() const { return 1.0; }
  // Kept fraction per layer, where the policy counts it per layer (token-sparse, and neuron
  // policies made with per_layer = true: the ReLU model's exact gating), else empty.
  [[nodiscard]] virtual std::vector<double> kept_per_layer() const { return {}; }
  // Mean experts per token over every FFN call (MoE policies only), else none.
  [[nodiscard]] virtual std::optional<double> experts_per_token() const { return std::nullopt; }
  virtual void reset_counts() {}
};

class dense_demo_policy : public demo_policy {
 public:
  void ffn(std::size_t, const ffn_layer& w, std::span<const float> x, std::span<float> y) override {
    check(dense_ffn(backend_, w, x, y, scratch_, ex_), "dense FFN");
  }

 private:
  ffn_scratch scratch_;
};

// Neuron-sparse FFN on the CPU backend (up row gather, down row axpy over W_downᵀ): one
// operator per layer (scorers with weight norms and calibrated thresholds are per layer).
template <class Scorer, class Selector>
class neuron_policy : public demo_policy {
 public:
  using op_type = neuron_sparse_ffn<Scorer, Selector, cpu_backend>;
  explicit neuron_policy(std::vector<op_type> ops, bool per_layer = false)
      : ops_(std::move(ops)), per_layer_(per_layer ? ops_.size() : 0) {}
  void ffn(std::size_t layer, const ffn_layer& w, std::span<const float> x, std::span<float> y) override {
    check(ops_.at(layer)(w, x, y, kept_, scratch_, ex_), "neuron-sparse FFN");
    count_.add(kept_);
    if (!per_layer_.empty()) per_layer_.at(layer).add(kept_);
  }
  [[nodiscard]] std::vector<double> kept_per_layer() const override {
    std::vector<double> out;
    for (const auto& c : per_layer_) out.push_back(c.fraction());
    return out;
  }
  [[nodiscard]] double kept_fraction() const override { return count_.fraction(); }
  [[nodiscard]] double bytes_fraction() const override {
    return ffn_bytes_fraction(ops_.front().source, count_.fraction());
  }
  void reset_counts() override {
    count_ = {};
    for (auto& c : per_layer_) c = {};
  }

 private:
  std::vector<op_type> ops_;
  std::vector<kept_counter> per_layer_;
  selection kept_;
  ffn_scratch scratch_;
  kept_counter count_;
};

// TEAL: every projection input-sparse, by |x| against a per-layer, per-projection threshold,
// on the CPU backend (linear_args over row-major W: the quality of TEAL's rule; its speed needs
// W transposed, transposed_linear_args, which bench_cpu_gemv measures).
class teal_policy : public demo_policy {
 public:
  explicit teal_policy(std::vector<threshold> thresholds) : thresholds_(std::move(thresholds)) {}
  void linear(std::size_t layer, projection p, const weight_view& w, std::span<const float> x,
              std::span<float> y) override {
    const input_sparse_linear<magnitude, threshold, cpu_backend> op{
        magnitude{}, thresholds_.at(layer * 7 + static_cast<std::size_t>(p)), backend_};
    check(op(linear_layer{w}, x, y, kept_, scratch_, ex_), "input-sparse linear");
    const bool in_ffn = p == projection::gate || p == projection::up || p == projection::down;
    const double bytes = static_cast<double>(w.rows) * static_cast<double>(w.cols);
    all_.kept += bytes * kept_.kept_fraction();
    all_.total += bytes;
    if (in_ffn) {
      ffn_.kept += bytes * kept_.kept_fraction();
      ffn_.total += bytes;
    }
  }
  // The kept fraction of input channels, weighted by the weights each one reads.
  [[nodiscard]] double kept_fraction() const override { return all_.fraction(); }
  [[nodiscard]] double bytes_fraction() const override { return ffn_.fraction(); }
  void reset_counts() override { all_ = ffn_ = {}; }

 private:
  std::vector<threshold> thresholds_;
  selection kept_;
  linear_scratch scratch_;
  kept_counter all_, ffn_;
};

// Token-sparse prefill FFN (RedKnot) on the CPU backend; decode stays dense.
class token_policy : public demo_policy {
 public:
  token_policy(depth_schedule schedule, std::size_t layers) : op_{schedule, {}, {}}, per_layer_(layers) {}
  void ffn(std::size_t, const ffn_layer& w, std::span<const float> x, std::span<float> y) override {
    check(dense_ffn(backend_, w, x, y, dense_scratch_, ex_), "dense FFN");
  }
  void ffn_prefill(std::size_t layer, const ffn_layer& w, const llama2c::rows_buffer& attention_out,
                   const llama2c::rows_buffer& input, llama2c::rows_buffer& residual) override {
    check(op_(layer, w, attention_out.view(), input.view(), residual.view(), kept_, scratch_, ex_), "token-sparse FFN");
    per_layer_.at(layer).add(kept_);
    all_.add(kept_);
  }
  [[nodiscard]] double kept_fraction() const override { return all_.fraction(); }
  // Prefill reads every FFN weight once whatever it keeps: the saving is in FLOPs.
  [[nodiscard]] double bytes_fraction() const override { return 1.0; }
  [[nodiscard]] std::vector<double> kept_per_layer() const override {
    std::vector<double> out;
    for (const auto& c : per_layer_) out.push_back(c.fraction());
    return out;
  }
  void reset_counts() override {
    all_ = {};
    for (auto& c : per_layer_) c = {};
  }

 private:
  token_sparse_ffn<cpu_backend> op_;
  std::vector<kept_counter> per_layer_;
  kept_counter all_;
  selection kept_;
  token_scratch scratch_;
  ffn_scratch dense_scratch_;
};

// ---------------------------------------------------------------- calibration ----------

// Records the FFN scores of `Scorer` per layer (keeping every neuron), for calibration.
template <class Scorer>
class score_probe : public llama2c::policy {
 public:
  score_probe(std::vector<Scorer> scorers, score_source source, threshold_calibration& cal)
      : scorers_(std::move(scorers)), source_(source), cal_(&cal) {}
  void ffn(std::size_t layer, const ffn_layer& w, std::span<const float> x, std::span<float> y) override {
    const neuron_sparse_ffn<Scorer, threshold, cpu_backend> op{scorers_.at(layer), threshold{-INFINITY}, source_, {}};
    check(op(w, x, y, kept_, scratch_, ex_), "calibration FFN");
    cal_->add(layer, scratch_.scores);
  }

 private:
  std::vector<Scorer> scorers_;
  score_source source_;
  threshold_calibration* cal_;
  selection kept_;
  ffn_scratch scratch_;
};

// Records |x| of every projection's input per (layer, projection), for TEAL.
class input_probe : public llama2c::policy {
 public:
  explicit input_probe(threshold_calibration& cal) : cal_(&cal) {}
  void linear(std::size_t layer, projection p, const weight_view& w, std::span<const float> x,
              std::span<float> y) override {
    abs_.resize(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) abs_[i] = std::fabs(x[i]);
    cal_->add(layer * 7 + static_cast<std::size_t>(p), abs_);
    policy::linear(layer, p, w, x, y);
  }

 private:
  threshold_calibration* cal_;
  std::vector<float> abs_;
};

// The calibrated thresholds: CATS on silu(gate) magnitudes per layer, TEAL on |x| per
// (layer, projection) (key layer * 7 + projection).
struct calibration {
  threshold_calibration cats;
  threshold_calibration teal;
};

// Fills `cal` from the calibration sequences (prefill, every neuron and channel kept).
inline void calibrate(const model& m, const std::vector<std::vector<int>>& sequences, calibration& cal) {
  score_probe<silu_magnitude> cats_probe(std::vector<silu_magnitude>(m.layers()), score_source::gate_preactivation,
                                         cal.cats);
  input_probe teal_probe(cal.teal);
  for (const auto& s : sequences) {
    auto c1 = m.new_cache();
    auto c2 = m.new_cache();
    std::vector<float> logits(s.size() * m.vocab());
    m.prefill(s, c1, logits, cats_probe);
    m.prefill(s, c2, logits, teal_probe);
  }
}

// ---------------------------------------------------------------- the policy table -----

// The per-layer scorers that read the weights (built once).
struct layer_scorers {
  std::vector<magnitude> mag;
  std::vector<weight_aware> wa;
  std::vector<weight_aware_gate> wag;

  static layer_scorers of(const model& m) {
    layer_scorers s;
    s.mag.resize(m.layers());
    for (std::size_t l = 0; l < m.layers(); ++l) {
      s.wa.push_back(weight_aware::from_weights(m.ffn(l).down));
      s.wag.push_back(weight_aware_gate::from_weights(m.ffn(l).up, m.ffn(l).down));
    }
    return s;
  }
};

// One configuration the demo measures: its name, family and scorer (the JSON's keys) and a
// way to build one instance of its policy (one per worker).
struct policy_config {
  std::string name, family, scorer;
  std::function<std::unique_ptr<demo_policy>()> make;
};

// Every configuration, in the order of the table: dense; top_k of three scorers at five keep
// ratios; cumulative mass; CATS and TEAL at three sparsities (their thresholds are read from
// `cal` when a policy is made, so `cal` may be filled after this call); token-sparse presets.
// `scorers` and `cal` must outlive the table.
inline std::vector<policy_config> policy_table(std::size_t layers, const layer_scorers& scorers,
                                               const calibration& cal) {
  std::vector<policy_config> table;
  table.push_back({"dense", "dense", "-", [] { return std::make_unique<dense_demo_policy>(); }});
  const auto per_layer = [layers](const auto& per_layer_scorers, auto selector, score_source source) {
    using Scorer = typename std::decay_t<decltype(per_layer_scorers)>::value_type;
    using Selector = decltype(selector);
    std::vector<neuron_sparse_ffn<Scorer, Selector, cpu_backend>> ops;
    for (std::size_t l = 0; l < layers; ++l) ops.push_back({per_layer_scorers[l], selector, source, {}});
    return std::make_unique<neuron_policy<Scorer, Selector>>(std::move(ops));
  };
  for (const double keep : {0.9, 0.75, 0.5, 0.35, 0.25}) {
    const std::string k = std::to_string(static_cast<int>(std::lround(keep * 100)));
    table.push_back({"magnitude top_k " + k + "%", "top_k", "magnitude",
                     [=, &scorers] { return per_layer(scorers.mag, top_k::by_ratio(keep), score_source::hidden); }});
    table.push_back({"weight_aware top_k " + k + "%", "top_k", "weight_aware",
                     [=, &scorers] { return per_layer(scorers.wa, top_k::by_ratio(keep), score_source::hidden); }});
    table.push_back({"gate weight_aware top_k " + k + "%", "top_k", "weight_aware_gate", [=, &scorers] {
                       return per_layer(scorers.wag, top_k::by_ratio(keep), score_source::gate_preactivation);
                     }});
  }
  for (const double mass : {0.99, 0.95, 0.9, 0.8, 0.7}) {
    char name[64];
    std::snprintf(name, sizeof name, "magnitude cumulative_mass %.2f", mass);
    table.push_back({name, "cumulative_mass", "magnitude", [=, &scorers] {
                       return per_layer(scorers.mag, cumulative_mass{mass, 0, 1}, score_source::hidden);
                     }});
  }
  for (const double sparsity : {0.25, 0.4, 0.5}) {
    const std::string pct = std::to_string(static_cast<int>(std::lround(sparsity * 100)));
    table.push_back(
        {"CATS " + pct + "% sparse", "cats", "silu_magnitude", [=, &cal] {
           std::vector<neuron_sparse_ffn<silu_magnitude, threshold, cpu_backend>> ops;
           for (std::size_t l = 0; l < layers; ++l) {
             ops.push_back(
                 {silu_magnitude{}, cal.cats.selector_for(l, sparsity), score_source::gate_preactivation, {}});
           }
           return std::make_unique<neuron_policy<silu_magnitude, threshold>>(std::move(ops));
         }});
  }
  for (const double sparsity : {0.25, 0.4, 0.5}) {
    const std::string pct = std::to_string(static_cast<int>(std::lround(sparsity * 100)));
    table.push_back({"TEAL " + pct + "% sparse", "teal", "magnitude(x)", [=, &cal] {
                       std::vector<threshold> t;
                       for (std::size_t k = 0; k < layers * 7; ++k) t.push_back(cal.teal.selector_for(k, sparsity));
                       return std::make_unique<teal_policy>(std::move(t));
                     }});
  }
  for (const char* preset : {"quality", "balanced", "speed"}) {
    table.push_back({std::string("token-sparse ") + preset, "token_sparse", "token_l2", [=] {
                       return std::make_unique<token_policy>(depth_schedule::preset(preset).scaled_to(layers), layers);
                     }});
  }
  return table;
}

// The configurations whose name contains `text` (and dense); all of them for an empty text.
inline std::vector<policy_config> matching(std::vector<policy_config> table, const std::string& text) {
  if (text.empty()) return table;
  std::vector<policy_config> chosen;
  for (policy_config& c : table) {
    if (c.name == "dense" || c.name.find(text) != std::string::npos) chosen.push_back(std::move(c));
  }
  return chosen;
}

}  // namespace model_demo
