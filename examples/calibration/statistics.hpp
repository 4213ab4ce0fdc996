#pragma once
// The calibration pipeline's statistics passes (pipeline.hpp, step 1): the dense model streamed over
// the calibration sample through a probe that sees every FFN's x, g and u, giving the file's
// per-layer data, the calibrated score's selection statistics, TEAL's input magnitudes, the token
// features and the gate predictors' overlap with exact gating; and the helpers the methods share.

#include "calibration/policy.hpp"
#include "calibration/report.hpp"
#include "llama2c/model.hpp"
#include "model_demo/harness.hpp"
#include "model_demo/policies.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/calibration/budget_search.hpp>
#include <actsparse/calibration/calibrated_schedule.hpp>
#include <actsparse/calibration/calibration_file.hpp>
#include <actsparse/calibration/low_rank_gate.hpp>
#include <actsparse/calibration/neuron_moments.hpp>
#include <actsparse/calibration/neuron_order.hpp>
#include <actsparse/calibration/selection_statistics.hpp>
#include <actsparse/calibration/threshold_calibration.hpp>
#include <actsparse/calibration/tier_predictor.hpp>
#include <actsparse/calibration/tier_table.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>
#include <actsparse/scorers/weight_aware.hpp>
#include <actsparse/scorers/weight_aware_gate.hpp>
#include <actsparse/selectors/threshold.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace calibration_run {

namespace detail {

// Watches every FFN of a dense forward pass: x, g = W_gate x, u = W_up x (and the inputs of the
// attention projections), then runs the dense FFN.
class probe : public llama2c::policy {
 public:
  std::function<void(std::size_t, std::span<const float>, std::span<const float>, std::span<const float>)> on_ffn;
  std::function<void(std::size_t, llama2c::projection, std::span<const float>)> on_linear;

  void linear(std::size_t layer, llama2c::projection p, const weight_view& w, std::span<const float> x,
              std::span<float> y) override {
    if (on_linear) on_linear(layer, p, x);
    policy::linear(layer, p, w, x, y);
  }
  void ffn(std::size_t layer, const ffn_layer& w, std::span<const float> x, std::span<float> y) override {
    g_.resize(w.d_ff());
    u_.resize(w.d_ff());
    check(run(backend_, gemv_args{w.gate, x, g_, subset::everything()}, workspace_, ex_), "probe gate");
    check(run(backend_, gemv_args{w.up, x, u_, subset::everything()}, workspace_, ex_), "probe up");
    if (on_ffn) on_ffn(layer, x, g_, u_);
    check(dense_ffn(backend_, w, x, y, scratch_, ex_), "probe FFN");
  }

 private:
  std::vector<float> g_, u_;
  std::vector<std::byte> workspace_;
  ffn_scratch scratch_;
};

// Streams every sequence of the sample through the probe, in order, on this thread.
inline void stream(const model& m, const sample& s, probe& p) {
  for (const auto& q : s.sequences) {
    auto cache = m.new_cache();
    std::vector<float> logits(q.size() * m.vocab());
    m.prefill(q, cache, logits, p);
  }
}

inline layer_budget dense_layer() {
  layer_budget s;
  s.rule = neuron_rule::keep_all;
  return s;
}

// The index of the smallest tier M whose keep share 1/M is at most `keep` (the base set a first
// stage of that share keeps), at least 1.
inline std::size_t base_tier_for(std::span<const tier_entry> tiers, double keep) {
  for (std::size_t t = 1; t < tiers.size(); ++t) {
    if (1.0 / static_cast<double>(tiers[t].m) <= keep + 1e-12) return t;
  }
  return tiers.size() - 1;
}

inline std::size_t keep_count(double keep, std::size_t n) {
  const double c = std::ceil(keep * static_cast<double>(n) - 1e-9);
  return c >= static_cast<double>(n) ? n : static_cast<std::size_t>(std::max(0.0, c));
}

inline std::vector<std::uint32_t> top_indices(std::span<const float> scores, std::size_t k) {
  return top_k::by_count(k).select(scores).indices;
}

inline std::size_t common(const std::vector<std::uint32_t>& a, const std::vector<std::uint32_t>& b) {
  std::size_t n = 0;
  for (std::size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    if (a[i] == b[j]) {
      ++n;
      ++i;
      ++j;
    } else if (a[i] < b[j]) {
      ++i;
    } else {
      ++j;
    }
  }
  return n;
}

}  // namespace detail

// Permutes a layer's per-neuron data into the order `order` (order[i] = original neuron of i).
inline void permute_layer(layer_calibration& c, std::span<const std::uint32_t> order) {
  const std::vector<std::uint32_t> inv = inverse_permutation(order);
  c.score_weights = permute_values<float>(c.score_weights, order);
  c.down_norms = permute_values<float>(c.down_norms, order);
  for (tier_entry& t : c.tiers) {
    for (std::uint32_t& j : t.base) j = inv[j];
    std::sort(t.base.begin(), t.base.end());
  }
  for (gate_predictor_data& g : c.gate_predictors) {
    std::vector<float> u(g.u.size());
    for (std::size_t i = 0; i < order.size(); ++i) {
      std::copy_n(g.u.begin() + static_cast<std::ptrdiff_t>(order[i] * g.rank), g.rank,
                  u.begin() + static_cast<std::ptrdiff_t>(i * g.rank));
    }
    g.u = std::move(u);
  }
  c.permutation.assign(order.begin(), order.end());
}

// What the statistics passes give: the file's per-layer data (score weights, down norms, tiers
// with base sets, gate predictors), the selection statistics of the calibrated score, TEAL's input
// magnitudes, the token features, and the gate predictors' overlap with exact gating.
struct statistics {
  calibration_data data;
  selection_statistics stats;
  threshold_calibration teal;
  std::vector<std::vector<float>> features;  // per layer: tokens x token_feature_count
  std::vector<low_rank_report> low_rank;
  double seconds = 0.0;
  std::size_t tokens = 0;
};

// The statistics of the dense model on the sample (two streaming passes on this thread, in
// sequence order: the same numbers for any worker count).
inline statistics statistics_pass(const model& m, const sample& s, const options& o, const progress_fn& progress = {}) {
  using clock = std::chrono::steady_clock;
  const auto say = [&](const std::string& stage, double f) {
    if (progress) progress(stage, f);
  };
  const std::size_t layers = m.layers();
  const std::size_t d_ff = m.ffn(0).d_ff();
  const std::size_t d_model = m.dim();
  const double row = static_cast<double>(row_bytes(m.ffn(0).gate.type, d_model));
  std::vector<ffn_layer> ffn;
  for (std::size_t l = 0; l < layers; ++l) ffn.push_back(m.ffn(l));
  statistics st;
  calibration_data& data = st.data;
  data.model = model_fingerprint::of(ffn);
  data.sample_sequences = s.sequences.size();
  for (const auto& q : s.sequences) st.tokens += q.size();
  data.sample_tokens = st.tokens;
  data.layers.resize(layers);
  const auto t_stats = clock::now();
  say("statistics: RMS of u and E[x xT]", 0.0);
  neuron_moments moments(layers, d_ff, d_model, true);
  {
    detail::probe p;
    p.on_ffn = [&](std::size_t l, std::span<const float> x, std::span<const float>, std::span<const float> u) {
      moments.add(l, u, x);
    };
    detail::stream(m, s, p);
  }
  std::vector<weight_aware_gate> scorers;
  for (std::size_t l = 0; l < layers; ++l) {
    layer_calibration& c = data.layers[l];
    const weight_aware down = weight_aware::from_weights(ffn[l].down);
    c.down_norms.assign(down.column_norms().begin(), down.column_norms().end());
    const std::vector<double> rms = moments.up_rms(l);
    c.score_weights.resize(d_ff);
    for (std::size_t j = 0; j < d_ff; ++j) c.score_weights[j] = static_cast<float>(rms[j] * c.down_norms[j]);
    scorers.push_back(weight_aware_gate::from_norms(c.score_weights));
    if (o.low_rank) {
      const std::vector<double> second = moments.input_second_moment(l);
      for (const std::size_t r : o.ranks) {
        const low_rank_gate g = low_rank_gate::fit(ffn[l].gate, r, second);
        c.gate_predictors.push_back({r, {g.a().begin(), g.a().end()}, {g.u().begin(), g.u().end()}});
      }
    }
  }
  say("statistics: tiers, quantiles, co-activation", 0.05);
  selection_statistics_options so;
  so.coactivation_tier = 2;
  st.stats = selection_statistics(layers, d_ff, so);
  selection_statistics& stats = st.stats;
  threshold_calibration& teal_stats = st.teal;
  st.features.assign(layers, {});
  std::vector<std::vector<float>>& features = st.features;
  struct overlap {
    double common = 0.0, predicted = 0.0, exact = 0.0;
  };
  std::vector<overlap> lr(o.ranks.size() * o.targets.size());
  {
    detail::probe p;
    std::vector<float> scores(d_ff), abs(std::max(d_ff, d_model)), h(d_ff), feat(token_feature_count), scratch,
        gt(d_ff), pscores(d_ff), tmp;
    p.on_linear = [&](std::size_t l, llama2c::projection proj, std::span<const float> x) {
      for (std::size_t i = 0; i < x.size(); ++i) abs[i] = std::fabs(x[i]);
      teal_stats.add(l * input_projections + static_cast<std::size_t>(proj),
                     std::span<const float>(abs.data(), x.size()));
    };
    p.on_ffn = [&](std::size_t l, std::span<const float> x, std::span<const float> g, std::span<const float> u) {
      scorers[l].score({g, ffn[l].act}, scores);
      stats.add(l, scores);
      token_features(x, feat, scratch);
      features[l].insert(features[l].end(), feat.begin(), feat.end());
      for (std::size_t i = 0; i < d_model; ++i) abs[i] = std::fabs(x[i]);
      const std::span<const float> ax(abs.data(), d_model);
      teal_stats.add(l * input_projections + 4, ax);
      teal_stats.add(l * input_projections + 5, ax);
      for (std::size_t j = 0; j < d_ff; ++j) h[j] = std::fabs(apply(ffn[l].act, g[j]) * u[j]);
      teal_stats.add(l * input_projections + 6, h);
      for (std::size_t r = 0; r < o.ranks.size() && o.low_rank; ++r) {
        const gate_predictor_data& gp = data.layers[l].gate_predictors[r];
        tmp.assign(gp.rank, 0.0F);
        for (std::size_t i = 0; i < gp.rank; ++i) {
          float a = 0.0F;
          for (std::size_t k = 0; k < d_model; ++k) a += gp.a[i * d_model + k] * x[k];
          tmp[i] = a;
        }
        for (std::size_t j = 0; j < d_ff; ++j) {
          float a = 0.0F;
          for (std::size_t i = 0; i < gp.rank; ++i) a += gp.u[j * gp.rank + i] * tmp[i];
          gt[j] = a;
        }
        scorers[l].score({gt, ffn[l].act}, pscores);
        const double pred_bytes = static_cast<double>(gp.rank * (d_model + d_ff)) * sizeof(float) / (3.0 * d_ff * row);
        for (std::size_t t = 0; t < o.targets.size(); ++t) {
          const double kp = o.targets[t].bytes - pred_bytes;
          if (kp <= 0.0) continue;
          const auto pset = detail::top_indices(pscores, detail::keep_count(kp, d_ff));
          const auto eset =
              detail::top_indices(scores, detail::keep_count((3.0 * o.targets[t].bytes - 1.0) / 2.0, d_ff));
          overlap& v = lr[r * o.targets.size() + t];
          v.common += static_cast<double>(detail::common(pset, eset));
          v.predicted += static_cast<double>(pset.size());
          v.exact += static_cast<double>(eset.size());
        }
      }
    };
    detail::stream(m, s, p);
  }
  st.seconds = std::chrono::duration<double>(clock::now() - t_stats).count();
  for (std::size_t r = 0; r < o.ranks.size() && o.low_rank; ++r) {
    for (std::size_t t = 0; t < o.targets.size(); ++t) {
      const overlap& v = lr[r * o.targets.size() + t];
      if (v.predicted == 0.0) continue;
      const double pb = static_cast<double>(o.ranks[r] * (d_model + d_ff)) * sizeof(float) / (3.0 * d_ff * row);
      st.low_rank.push_back({o.ranks[r], o.targets[t].label, pb, o.targets[t].bytes - pb,
                             (3.0 * o.targets[t].bytes - 1.0) / 2.0, v.common / v.predicted, v.common / v.exact});
    }
  }
  // Tiers and base sets.
  const std::span<const std::size_t> tiers = stats.tiers();
  for (std::size_t l = 0; l < layers; ++l) {
    data.layers[l].tiers.clear();
    for (std::size_t t = 0; t < tiers.size(); ++t) {
      tier_entry e;
      e.m = tiers[t];
      if (t > 0) {
        const index_set b = base_set(stats.frequency(l, t), o.base_share);
        e.base.assign(b.indices().begin(), b.indices().end());
      }
      data.layers[l].tiers.push_back(std::move(e));
    }
  }
  say("statistics done", 0.1);
  return st;
}

}  // namespace calibration_run
