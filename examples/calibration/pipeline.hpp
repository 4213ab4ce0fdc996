#pragma once
// The whole calibration of a llama2.c model, from a calibration sample to a calibration file:
//   1. statistics: two streaming passes of the dense model (RMS of every neuron's up projection and
//      E[x xᵀ]; then the calibrated gate-only score's tier frequencies, quantiles and co-activation,
//      TEAL's input magnitudes, the token features, the gate predictors' precision and recall);
//   2. per-token losses of every layer at every tier (one layer sparse at a time);
//   3. the tier predictor of every layer (trained on 80% of the sample's sequences);
//   4. the methods, each one budget per byte target (name "<method>@<target>"):
//        budgets          TEAL's greedy per-layer search of a calibrated threshold
//        budgets+refine   the same over two knobs: the first stage's share and the share of it whose
//                         exact |h|·‖W_down[:, j]‖ is kept for the down projection
//        tiers            the 90% cap of a per-token loss budget, every token at its layer's cap
//        tiers+predictor  the tier of every token predicted from its input, at most the cap
//        low-rank rR      the activation-aware rank-R gate predictor picks the rows; the gate is
//                         read for those only
//        combined         budgets+refine's settings with the layers' base sets always kept
//        teal             TEAL's greedy search of per-layer input sparsity (all seven projections)
//   5. neuron orders (hot-first, co-activation) and, when asked, the permutation in the file.
// Every measurement is deterministic (fixed worker assignment, ordered sums), so a rerun gives the
// same file.

#include "calibration/policy.hpp"
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
  calibration_data data;
  report rep;
};

using progress_fn = std::function<void(const std::string& stage, double fraction)>;

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

inline result run(const model& m, const sample& s, const options& o, const progress_fn& progress = {}) {
  using clock = std::chrono::steady_clock;
  const auto seconds_since = [](clock::time_point t) {
    return std::chrono::duration<double>(clock::now() - t).count();
  };
  const auto say = [&](const std::string& stage, double f) {
    if (progress) progress(stage, f);
  };
  const std::size_t layers = m.layers();
  const std::size_t d_ff = m.ffn(0).d_ff();
  const std::size_t d_model = m.dim();
  const double row = static_cast<double>(row_bytes(m.ffn(0).gate.type, d_model));

  statistics st = statistics_pass(m, s, o, progress);
  result out;
  calibration_data& data = out.data;
  report& rep = out.rep;
  data = std::move(st.data);
  const selection_statistics& stats = st.stats;
  const threshold_calibration& teal_stats = st.teal;
  const std::vector<std::vector<float>>& features = st.features;
  rep.tokens = st.tokens;
  rep.statistics_seconds = st.seconds;
  rep.seconds.emplace_back("statistics", st.seconds);
  rep.low_rank = st.low_rank;
  const std::span<const std::size_t> tiers = stats.tiers();
  const std::size_t n_tiers = tiers.size();
  const auto tier_keep = [&](std::size_t l, std::size_t t) {
    const std::size_t k = std::max(tier_keep_count(d_ff, tiers[t]), data.layers[l].tiers[t].base.size());
    return static_cast<double>(k) / static_cast<double>(d_ff);
  };

  // A budget's measurement on the calibration sample.
  const auto measure_budget = [&](const budget_entry& b, bool per_token = false) {
    if (b.layers.empty()) {  // input thresholds: TEAL
      std::vector<threshold> t;
      for (const float v : b.input_thresholds) t.push_back(threshold{v});
      return measure(
          m, s, [t] { return std::make_unique<model_demo::teal_policy>(t); }, per_token);
    }
    const calibrated_schedule schedule(data, b);
    return measure(
        m, s, [schedule] { return std::make_unique<calibrated_policy>(schedule); }, per_token);
  };
  const auto finish = [&](budget_entry b, const std::string& method, const target& tg, const measurement& mm) {
    b.name = method + "@" + tg.label;
    b.method = method;
    b.target_bytes = tg.bytes;
    b.bytes_fraction = std::clamp(mm.bytes, 0.0, 1.0);
    b.kl = std::max(0.0, mm.q.kl);
    rep.budgets.push_back({method, tg.label, b.name, tg.bytes, b.bytes_fraction, b.kl});
    data.budgets.push_back(std::move(b));
  };
  double min_target = 1.0;
  for (const target& t : o.targets) min_target = std::min(min_target, t.bytes);

  // ------------------------------------------------------------ 2. per-token tier losses ----
  std::vector<std::vector<double>> losses(layers);  // [layer][position * n_tiers + tier]
  if (o.tiers || o.predictor) {
    const auto t0 = clock::now();
    const std::size_t positions = s.positions();
    for (std::size_t l = 0; l < layers; ++l) losses[l].assign(positions * n_tiers, 0.0);
    for (std::size_t l = 0; l < layers; ++l) {
      for (std::size_t t = 1; t < n_tiers; ++t) {
        say("per-token losses: layer " + std::to_string(l) + " tier " + std::to_string(tiers[t]),
            0.1 + 0.15 * static_cast<double>(l * n_tiers + t) / static_cast<double>(layers * n_tiers));
        budget_entry b;
        b.name = "probe";
        b.layers.assign(layers, detail::dense_layer());
        b.layers[l].rule = neuron_rule::tier;
        b.layers[l].tier = t;
        b.layers[l].keep = tier_keep(l, t);
        const measurement mm = measure_budget(b, true);
        for (std::size_t i = 0; i < positions; ++i) losses[l][i * n_tiers + t] = mm.token_kl[i];
      }
    }
    rep.seconds.emplace_back("per-token tier losses", seconds_since(t0));
  }
  // Token features at the scored positions (every token but the last of each sequence).
  std::vector<std::vector<float>> pos_features(layers);
  std::size_t train_positions = 0;  // the first 80% of the sequences train the predictor
  {
    std::size_t token = 0;
    const std::size_t train_sequences = std::max<std::size_t>(1, (s.sequences.size() * 4) / 5);
    for (std::size_t q = 0; q < s.sequences.size(); ++q) {
      for (std::size_t t = 0; t + 1 < s.sequences[q].size(); ++t) {
        for (std::size_t l = 0; l < layers; ++l) {
          const float* f = features[l].data() + (token + t) * token_feature_count;
          pos_features[l].insert(pos_features[l].end(), f, f + token_feature_count);
        }
        if (q < train_sequences) ++train_positions;
      }
      token += s.sequences[q].size();
    }
  }

  // ------------------------------------------------------------ 3. tier predictors ---------
  std::vector<tier_predictor> predictors(layers);
  if (o.predictor) {
    const auto t0 = clock::now();
    say("tier predictors", 0.27);
    tier_predictor_options po;
    po.hidden = o.predictor_hidden;
    for (std::size_t l = 0; l < layers; ++l) {
      predictors[l] =
          tier_predictor::train(std::span<const float>(pos_features[l].data(), train_positions * token_feature_count),
                                std::span<const double>(losses[l].data(), train_positions * n_tiers), n_tiers, po);
      data.layers[l].tier_predictor = predictors[l].parameters();
      rep.predictor_parameters += predictors[l].parameter_count();
    }
    rep.seconds.emplace_back("tier predictor training", seconds_since(t0));
  }

  // ------------------------------------------------------------ 4. methods -----------------
  // TEAL's greedy search over p's knobs, every candidate measured on the sample as the budget
  // `settings` makes of it; it walks until the predicted bytes reach `goal`.
  const auto search = [&](budget_problem& p, const std::function<budget_entry(const budget_state&)>& settings,
                          double goal, const std::string& label, double progress_from, double progress_to) {
    p.evaluate = [&](std::span<const budget_state> states, std::span<budget_measure> res) {
      for (std::size_t i = 0; i < states.size(); ++i) {
        const measurement mm = measure_budget(settings(states[i]));
        res[i] = {mm.q.kl, mm.bytes};
      }
    };
    return greedy_budget_search(p, goal, [&](std::size_t, double bytes) {
      say("greedy search: " + label, progress_from + (progress_to - progress_from) * (1.0 - bytes) / (1.0 - goal));
    });
  };
  const auto threshold_setting = [&](std::size_t l, double keep) {
    if (keep >= 1.0 - 1e-9) return detail::dense_layer();
    layer_budget b;
    b.rule = neuron_rule::threshold;
    b.keep = keep;
    b.threshold = stats.threshold_for_keep(l, keep);
    return b;
  };
  const std::size_t rungs = static_cast<std::size_t>(std::floor(1.0 / o.step + 1e-9));  // keep 1, 1-step, ..., > 0
  const auto keep_at = [&](std::size_t pos) { return 1.0 - o.step * static_cast<double>(pos); };
  const auto run_greedy = [&](const std::string& method, std::size_t knobs, double progress_from, double progress_to) {
    const auto t0 = clock::now();
    budget_problem p;
    p.layers = layers;
    p.rungs.assign(knobs, rungs);
    const auto settings = [&](const budget_state& st) {
      budget_entry b;
      b.name = "search";
      for (std::size_t l = 0; l < layers; ++l) {
        const double a1 = keep_at(st.positions[l * knobs]);
        layer_budget x = threshold_setting(l, a1);
        if (knobs == 2) {
          const double a2 = keep_at(st.positions[l * knobs + 1]);
          x.refine = std::min(1.0, a2 / a1);
          x.keep = a1;
        }
        b.layers.push_back(x);
      }
      return b;
    };
    p.layer_bytes = [&](std::size_t, std::span<const std::size_t> pos) {
      const double a1 = keep_at(pos[0]);
      return knobs == 2 ? (1.0 + a1 + keep_at(pos[1])) / 3.0 : (1.0 + 2.0 * a1) / 3.0;
    };
    if (knobs == 2) p.allowed = [](std::size_t, std::span<const std::size_t> pos) { return pos[1] >= pos[0]; };
    const budget_path path = search(p, settings, min_target - 0.02, method, progress_from, progress_to);
    for (const target& tg : o.targets) {
      const budget_step& st = path.for_bytes(tg.bytes);
      budget_entry b = settings(st.state);
      for (std::size_t l = 0; l < layers; ++l) {
        const double a1 = keep_at(st.state.positions[l * knobs]);
        const double a2 = knobs == 2 ? keep_at(st.state.positions[l * knobs + 1]) : a1;
        b.layers[l].bytes_fraction = (1.0 + a1 + a2) / 3.0;
      }
      finish(b, method, tg, {{st.measured.kl, 0.0, 0.0}, st.measured.bytes, 0.0, {}});
    }
    rep.seconds.emplace_back("greedy search: " + method, seconds_since(t0));
    return path;
  };
  if (o.budgets) run_greedy("budgets", 1, 0.3, 0.45);
  if (o.refine || o.combined) {
    run_greedy("budgets+refine", 2, 0.45, 0.75);
    if (o.combined) {
      const auto t0 = clock::now();
      for (const target& tg : o.targets) {
        budget_entry b = data.budget("budgets+refine@" + tg.label);
        for (layer_budget& x : b.layers) {
          if (x.rule == neuron_rule::keep_all) continue;
          x.with_base = true;
          x.tier = 0;
        }
        for (std::size_t l = 0; l < layers; ++l) {
          if (b.layers[l].with_base) b.layers[l].tier = detail::base_tier_for(data.layers[l].tiers, b.layers[l].keep);
        }
        say("combined @ " + tg.label, 0.76);
        finish(b, "combined", tg, measure_budget(b));
      }
      rep.seconds.emplace_back("combined", seconds_since(t0));
    }
    if (!o.refine) {  // asked for the combination only: drop the search's own budgets from the file
      std::erase_if(data.budgets, [](const budget_entry& b) { return b.method == "budgets+refine"; });
      std::erase_if(rep.budgets, [](const method_budget& b) { return b.method == "budgets+refine"; });
    }
  }
  // Tiers: a per-token loss budget kappa on a log grid; caps by the 90% rule.
  std::vector<double> kappas;
  for (int i = 0; i <= 80; ++i) kappas.push_back(1e-5 * std::pow(10.0, 6.0 * i / 80.0));
  const std::size_t positions = s.positions();
  const auto caps_for = [&](double kappa) {
    std::vector<std::size_t> caps(layers);
    for (std::size_t l = 0; l < layers; ++l) caps[l] = tier_cap(losses[l], n_tiers, kappa, o.cap_share);
    return caps;
  };
  const auto tier_budget_of = [&](const std::vector<std::size_t>& caps, bool predicted, double kappa) {
    budget_entry b;
    b.name = "search";
    for (std::size_t l = 0; l < layers; ++l) {
      if (caps[l] == 0) {
        b.layers.push_back(detail::dense_layer());
        continue;
      }
      layer_budget x;
      x.rule = neuron_rule::tier;
      x.tier = caps[l];
      x.keep = tier_keep(l, caps[l]);
      x.predict_tier = predicted;
      x.tier_budget = predicted ? kappa : 0.0;
      x.bytes_fraction = (1.0 + 2.0 * x.keep) / 3.0;
      b.layers.push_back(x);
    }
    return b;
  };
  // The first kappa (smallest: densest) whose estimate reads at most the target, then up the grid
  // until the measured bytes do too.
  const auto search_kappa = [&](const std::string& method, const target& tg,
                                const std::function<double(double)>& estimate, bool predicted) {
    std::size_t i = 0;
    while (i < kappas.size() && estimate(kappas[i]) > tg.bytes) ++i;
    for (; i < kappas.size(); ++i) {
      const budget_entry b = tier_budget_of(caps_for(kappas[i]), predicted, kappas[i]);
      const measurement mm = measure_budget(b);
      if (mm.bytes <= tg.bytes + 1e-9 || i + 1 == kappas.size()) {
        finish(b, method, tg, mm);
        return kappas[i];
      }
    }
    return 0.0;
  };
  if (o.tiers) {
    const auto t0 = clock::now();
    for (const target& tg : o.targets) {
      say("tiers @ " + tg.label, 0.8);
      (void)search_kappa(
          "tiers", tg,
          [&](double kappa) {
            const auto caps = caps_for(kappa);
            double sum = 0.0;
            for (std::size_t l = 0; l < layers; ++l) sum += (1.0 + 2.0 * tier_keep(l, caps[l])) / 3.0;
            return sum / static_cast<double>(layers);
          },
          false);
    }
    rep.seconds.emplace_back("tiers", seconds_since(t0));
  }
  if (o.predictor) {
    const auto t0 = clock::now();
    for (const target& tg : o.targets) {
      say("tiers+predictor @ " + tg.label, 0.85);
      const auto predicted_tiers = [&](double kappa, std::size_t l, std::size_t cap, std::size_t from, std::size_t to) {
        std::vector<std::size_t> out;
        for (std::size_t i = from; i < to; ++i) {
          out.push_back(predictors[l].predict(
              std::span<const float>(pos_features[l].data() + i * token_feature_count, token_feature_count), cap,
              kappa));
        }
        return out;
      };
      const double kappa = search_kappa(
          "tiers+predictor", tg,
          [&](double k) {
            const auto caps = caps_for(k);
            double sum = 0.0;
            for (std::size_t l = 0; l < layers; ++l) {
              for (const std::size_t t : predicted_tiers(k, l, caps[l], 0, positions)) {
                sum += (1.0 + 2.0 * tier_keep(l, t)) / 3.0;
              }
            }
            return sum / static_cast<double>(layers * positions);
          },
          true);
      // Held-out accuracy at that budget: the label is the highest tier <= cap within kappa.
      predictor_report pr;
      pr.target = tg.label;
      pr.budget = kappa;
      const auto caps = caps_for(kappa);
      for (std::size_t l = 0; l < layers; ++l) {
        const auto labels = tier_labels(losses[l], n_tiers, kappa, caps[l]);
        const auto pred = predicted_tiers(kappa, l, caps[l], train_positions, positions);
        for (std::size_t i = train_positions; i < positions; ++i) {
          const std::size_t p = pred[i - train_positions];
          pr.accuracy += p == labels[i] ? 1.0 : 0.0;
          pr.too_sparse += p > labels[i] ? 1.0 : 0.0;
          pr.too_dense += p < labels[i] ? 1.0 : 0.0;
          ++pr.tokens;
        }
      }
      if (pr.tokens > 0) {
        const double n = static_cast<double>(pr.tokens);
        pr.accuracy /= n;
        pr.too_sparse /= n;
        pr.too_dense /= n;
      }
      rep.predictor.push_back(pr);
    }
    rep.seconds.emplace_back("tiers+predictor", seconds_since(t0));
  }
  if (o.low_rank) {
    const auto t0 = clock::now();
    for (const std::size_t r : o.ranks) {
      const double pb = static_cast<double>(r * (d_model + d_ff)) * sizeof(float) / (3.0 * d_ff * row);
      for (const target& tg : o.targets) {
        if (std::floor((tg.bytes - pb) * static_cast<double>(d_ff)) < 1.0) continue;
        say("low-rank r" + std::to_string(r) + " @ " + tg.label, 0.9);
        budget_entry b;
        b.name = "search";
        for (std::size_t l = 0; l < layers; ++l) {
          layer_budget x;
          x.rule = neuron_rule::top_k;
          // the largest count whose rows (gate, up, down) plus the factors read at most the target
          x.keep = std::floor((tg.bytes - pb) * static_cast<double>(d_ff) + 1e-9) / static_cast<double>(d_ff);
          x.gate_rank = r;
          x.bytes_fraction = tg.bytes;
          b.layers.push_back(x);
        }
        finish(b, "low-rank r" + std::to_string(r), tg, measure_budget(b));
      }
    }
    rep.seconds.emplace_back("low-rank gate predictors", seconds_since(t0));
  }
  if (o.teal) {
    const auto t0 = clock::now();
    budget_problem p;
    p.layers = layers;
    p.rungs = {rungs};
    const auto settings = [&](const budget_state& st) {
      budget_entry b;
      b.name = "search";
      for (std::size_t l = 0; l < layers; ++l) {
        const double sparsity = o.step * static_cast<double>(st.positions[l]);
        for (std::size_t q = 0; q < input_projections; ++q) {
          b.input_thresholds.push_back(teal_stats.threshold_for(l * input_projections + q, std::min(sparsity, 0.99)));
        }
      }
      return b;
    };
    p.layer_bytes = [&](std::size_t, std::span<const std::size_t> pos) { return keep_at(pos[0]); };
    const budget_path path = search(p, settings, min_target - 0.05, "teal", 0.92, 0.99);
    for (const target& tg : o.targets) {
      const budget_step& st = path.for_bytes(tg.bytes);
      finish(settings(st.state), "teal", tg, {{st.measured.kl, 0.0, 0.0}, st.measured.bytes, 0.0, {}});
    }
    rep.seconds.emplace_back("greedy search: teal", seconds_since(t0));
  }

  // ------------------------------------------------------------ 5. neuron orders -----------
  for (std::size_t l = 0; l < layers; ++l) {
    rep.hot_order.push_back(hot_first_order(stats.frequency(l, 1)));
    rep.coactivation_order.push_back(coactivation_order(stats, l));
  }
  if (o.refine) {  // what the orders do to the real sets of budgets+refine
    const auto t0 = clock::now();
    const char* names[] = {"identity", "hot", "coactivation"};
    std::vector<std::vector<std::vector<std::uint32_t>>> inverses(3, std::vector<std::vector<std::uint32_t>>(layers));
    for (std::size_t l = 0; l < layers; ++l) {
      inverses[1][l] = inverse_permutation(rep.hot_order[l]);
      inverses[2][l] = inverse_permutation(rep.coactivation_order[l]);
    }
    for (const target& tg : o.targets) {
      say("spans @ " + tg.label, 0.995);
      struct tally {
        double first[3] = {}, final[3] = {}, first_rows = 0.0, final_rows = 0.0, calls = 0.0;
        std::vector<std::uint32_t> scratch;
      };
      std::vector<std::unique_ptr<tally>> tallies;
      const calibrated_schedule schedule(data, data.budget("budgets+refine@" + tg.label));
      (void)measure(m, s, [&] {
        tallies.push_back(std::make_unique<tally>());
        tally* t = tallies.back().get();
        auto p = std::make_unique<calibrated_policy>(schedule);
        p->set_recorder(
            [t, &inverses](std::size_t l, std::span<const std::uint32_t> first, std::span<const std::uint32_t> final) {
              for (std::size_t k = 0; k < 3; ++k) {
                t->first[k] += static_cast<double>(runs_under(first, inverses[k][l], t->scratch));
                t->final[k] += static_cast<double>(runs_under(final, inverses[k][l], t->scratch));
              }
              t->first_rows += static_cast<double>(first.size());
              t->final_rows += static_cast<double>(final.size());
              t->calls += 1.0;
            });
        return p;
      });
      tally all;
      for (const auto& t : tallies) {
        for (std::size_t k = 0; k < 3; ++k) {
          all.first[k] += t->first[k];
          all.final[k] += t->final[k];
        }
        all.first_rows += t->first_rows;
        all.final_rows += t->final_rows;
        all.calls += t->calls;
      }
      for (std::size_t k = 0; k < 3; ++k) {
        rep.spans.push_back({tg.label, names[k], all.first[k] / all.calls, all.final[k] / all.calls,
                             all.first_rows / all.calls, all.final_rows / all.calls});
      }
    }
    rep.seconds.emplace_back("spans under the neuron orders", seconds_since(t0));
  }
  if (o.reorder == "hot" || o.reorder == "coactivation") {
    for (std::size_t l = 0; l < layers; ++l) {
      permute_layer(data.layers[l], o.reorder == "hot" ? rep.hot_order[l] : rep.coactivation_order[l]);
    }
  } else if (o.reorder != "none") {
    actsparse::detail::fail("calibration_run::run", "options.reorder", o.reorder, "none, hot or coactivation");
  }
  say("done", 1.0);
  return out;
}

}  // namespace calibration_run
