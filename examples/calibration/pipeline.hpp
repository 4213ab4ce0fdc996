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
// same file. report.hpp has the options and the report, statistics.hpp step 1; this file the rest.

#include "calibration/policy.hpp"
#include "calibration/report.hpp"
#include "calibration/statistics.hpp"
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
