// Real active sets on 7B-shaped weights: the sets a calibrated policy keeps on stories260K,
// replayed in the decode FFN at the Llama-2-7B shape (d_model 4096, d_ff 11008), in the model's
// own neuron order and under the two neuron orders calibration fits (hot-first, co-activation).
//
// The recording: 4 calibration sequences x 256 tokens (seed 1000000, the demo's calibration
// seed) run through stories260K with every layer's first stage at the calibrated gate-only
// score's threshold for a keep share a (examples/calibration/pipeline.hpp's statistics; one set a
// token and layer, 5120 sets of 172 neurons). 11008 = 64 x 172: a 7B step's set is 64 recorded
// sets side by side, block c holding the set of recorded (token, layer) 64 k + c, so every
// neuron keeps its recorded frequency and its co-activations with the 171 others of its block,
// and a step's blocks come from 64 different tokens (no copy of one set fills the layer). Under
// an order, each block is permuted by its layer's order (the permutation calibration would
// apply to the 172 neurons), which is what reordering a real model's weights does to its sets.
//
// Rows cpu_ffn_replay/<dtype>/7b/t<threads>/relu/<model|hot>: the same with the sets exact gating
// keeps on the ReLU-fied model (data/stories260K_relu.bin, scripts/relufy.py: the neurons with
// g > 0, whatever their share), in its order and hot-first (by the recorded frequencies).
//
// Rows cpu_ffn_replay/<dtype>/7b/t<threads>/a<keep>/<order>; per step (the same iterations, the
// order of the parts rotated):
//   dense_us / step_us   the dense FFN; the sparse step (neuron_sparse_ffn with the replayed set)
//   kept                 the replayed sets' mean share of neurons
//   runs                 contiguous runs of rows per matrix per step (what a gather issues)
//   speedup, ideal       dense / step; 3 / (1 + 2 kept)
//   pct_of_ideal         speedup / ideal
//   read_pct_of_ideal    the same rows read with nothing computed (row_read.hpp), against a read
//                        of every row: the ceiling of a step with these sets on this machine
//   pct_of_read          pct_of_ideal / read_pct_of_ideal
//
// Rows cpu_ffn_refine/<dtype>/7b/t<threads>/a<a1>_<a2>: the two-stage step a calibration's
// `refine` budgets run (neuron_sparse_ffn with a schedule whose value gives a second stage):
// the gate whole, W_up for the first stage's a1 (top-k of |act(g)|, random weights: a random
// set), the exact h of those, W_downᵀ for the a2 of them with the largest |h|·‖W_down[:, j]‖.
// Counters: speedup over dense (the same iterations), ideal 3 / (1 + a1 + a2), pct_of_ideal.
//
// Rows cpu_ffn_down/...: W_down's two layouts for q8_0 / q4_0 on random, recorded and
// reordered sets (speed, bytes read, error against the exact FFN): see BM_cpu_ffn_down.
// Rows cpu_ffn_spec/...: a K-token verify pass over the union of recorded sets: BM_cpu_ffn_spec.
#include "calibration/pipeline.hpp"
#include "ffn_layers.hpp"
#include "harness.hpp"
#include "read_bandwidth.hpp"
#include "row_read.hpp"

#include "llama2c/checkpoint.hpp"
#include "llama2c/model.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/calibration/neuron_order.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>
#include <actsparse/scorers/magnitude.hpp>
#include <actsparse/scorers/relu_exact.hpp>
#include <actsparse/selectors/threshold.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace {

using namespace actsparse;
using namespace actsparse_bench;

constexpr std::size_t blocks = 64;  // 11008 = 64 x 172

struct recording {
  std::size_t d_ff = 0;
  std::vector<std::vector<std::uint32_t>> sets;  // per (token, layer), sequence after sequence
  std::vector<std::size_t> layer_of;
  std::vector<std::vector<std::uint32_t>> inv_hot, inv_coactivation;  // per layer: position of neuron j
};

// The recorded sets at keep share `keep` (built once per share).
const recording& recorded(double keep) {
  static std::map<double, std::unique_ptr<recording>> cache;
  auto& slot = cache[keep];
  if (slot) return *slot;
  const llama2c::checkpoint ckpt = llama2c::checkpoint::load(std::string(ACTSPARSE_DATA_DIR) + "/stories260K.bin");
  const llama2c::model m(ckpt);
  auto seqs = model_demo::sample_sequences(m, 4, 256, 1'000'000, 2);
  const calibration_run::sample s = calibration_run::sample::of(m, std::move(seqs), 1);  // one worker: sequence order
  calibration_run::options o;
  o.low_rank = false;
  calibration_run::statistics st = calibration_run::statistics_pass(m, s, o);
  budget_entry b;
  b.name = "replay";
  for (std::size_t l = 0; l < m.layers(); ++l) {
    layer_budget x;
    x.rule = neuron_rule::threshold;
    x.keep = keep;
    x.threshold = st.stats.threshold_for_keep(l, keep);
    b.layers.push_back(x);
  }
  auto r = std::make_unique<recording>();
  r->d_ff = m.ffn(0).d_ff();
  for (std::size_t l = 0; l < m.layers(); ++l) {
    r->inv_hot.push_back(inverse_permutation(hot_first_order(st.stats.frequency(l, 1))));
    r->inv_coactivation.push_back(inverse_permutation(coactivation_order(st.stats, l)));
  }
  const calibrated_schedule schedule(st.data, b);
  recording* out = r.get();
  (void)calibration_run::measure(m, s, [&] {
    auto p = std::make_unique<calibration_run::calibrated_policy>(schedule);
    p->set_recorder([out](std::size_t l, std::span<const std::uint32_t>, std::span<const std::uint32_t> kept) {
      out->sets.emplace_back(kept.begin(), kept.end());
      out->layer_of.push_back(l);
    });
    return p;
  });
  slot = std::move(r);
  return *slot;
}

// Records the neurons exact gating keeps (g > 0) at every (token, layer) of the ReLU model.
class relu_recorder : public model_demo::demo_policy {
 public:
  explicit relu_recorder(recording* out) : out_(out) {}
  void ffn(std::size_t layer, const ffn_layer& w, std::span<const float> x, std::span<float> y) override {
    check(op_(w, x, y, kept_, scratch_, ex_), "exact gating");
    out_->sets.emplace_back(kept_.indices.begin(), kept_.indices.end());
    out_->layer_of.push_back(layer);
  }

 private:
  recording* out_;
  neuron_sparse_ffn<relu_exact, threshold, cpu_backend> op_{
      relu_exact{}, threshold{0.0F}, score_source::gate_preactivation, {}};
  selection kept_;
  ffn_scratch scratch_;
};

// The sets exact gating keeps on the ReLU-fied model over the same calibration sequences (sampled
// from it), or null when its checkpoint is missing; its hot-first order from the recorded
// frequencies (no co-activation order: it would need the calibration's statistics of this model).
const recording* recorded_relu() {
  static std::unique_ptr<recording> slot;
  static bool tried = false;
  if (tried) return slot.get();
  tried = true;
  const std::string path = std::string(ACTSPARSE_DATA_DIR) + "/stories260K_relu.bin";
  if (!std::ifstream(path).good()) return nullptr;
  const llama2c::checkpoint ckpt = llama2c::checkpoint::load(path);
  const llama2c::model m(ckpt, dtype::f32, activation::relu);
  auto seqs = model_demo::sample_sequences(m, 4, 256, 1'000'000, 2);
  const calibration_run::sample s = calibration_run::sample::of(m, std::move(seqs), 1);  // one worker: sequence order
  auto r = std::make_unique<recording>();
  r->d_ff = m.ffn(0).d_ff();
  recording* out = r.get();
  (void)calibration_run::measure(m, s, [out] { return std::make_unique<relu_recorder>(out); });
  for (std::size_t l = 0; l < m.layers(); ++l) {
    std::vector<double> frequency(r->d_ff, 0.0);
    for (std::size_t i = 0; i < r->sets.size(); ++i) {
      if (r->layer_of[i] != l) continue;
      for (const std::uint32_t j : r->sets[i]) frequency[j] += 1.0;
    }
    r->inv_hot.push_back(inverse_permutation(hot_first_order(frequency)));
  }
  slot = std::move(r);
  return slot.get();
}

// The 7B steps' sets under an order (0 the model's, 1 hot-first, 2 co-activation).
std::vector<std::vector<std::uint32_t>> replay_sets(const recording& r, int order) {
  std::vector<std::vector<std::uint32_t>> out;
  for (std::size_t k = 0; (k + 1) * blocks <= r.sets.size(); ++k) {
    std::vector<std::uint32_t> set;
    for (std::size_t c = 0; c < blocks; ++c) {
      const std::size_t i = k * blocks + c;
      const std::size_t l = r.layer_of[i];
      for (const std::uint32_t j : r.sets[i]) {
        const std::uint32_t at = order == 0 ? j : order == 1 ? r.inv_hot[l][j] : r.inv_coactivation[l][j];
        set.push_back(static_cast<std::uint32_t>(c * r.d_ff) + at);
      }
    }
    std::sort(set.begin(), set.end());
    out.push_back(std::move(set));
  }
  return out;
}

// Keeps the next replayed set (the scores are ignored).
struct replayed {
  const std::vector<std::vector<std::uint32_t>>* sets = nullptr;
  std::size_t* next = nullptr;
  void select(std::span<const float> scores, selection& out) const {
    out.reset(scores.size());
    const auto& s = (*sets)[*next % sets->size()];
    out.indices.assign(s.begin(), s.end());
    ++*next;
  }
};

std::size_t runs_of(std::span<const std::uint32_t> set) {
  std::size_t runs = 0;
  for (std::size_t i = 0; i < set.size(); ++i) runs += (i == 0 || set[i] != set[i - 1] + 1) ? 1 : 0;
  return runs;
}

// keep < 0: the ReLU model's exact-gating sets.
template <class T>
void BM_cpu_ffn_replay(benchmark::State& state, double keep, int order, std::size_t threads) {
  const shape s = llama2_7b;
  const layers<T>& w = weights<T>(s, false);
  const recording* rec = keep < 0.0 ? recorded_relu() : &recorded(keep);
  if (rec == nullptr) {
    state.SkipWithError("data/stories260K_relu.bin is missing (scripts/relufy.py makes it)");
    return;
  }
  const std::vector<std::vector<std::uint32_t>> sets = replay_sets(*rec, order);
  const std::vector<float> x = random_floats(s.d_model, 1.0F, 7);
  std::vector<float> y(s.d_model);
  cpu::thread_pool pool(threads);
  cpu::executor ex(pool);
  const cpu_backend cpu;
  std::size_t next = 0;
  const neuron_sparse_ffn op{magnitude{}, replayed{&sets, &next}, score_source::gate_activation, cpu};
  ffn_scratch scratch;
  selection kept;
  bool ok = true;
  warm_up(w.l.size(), [&](std::size_t i) { ok = dense_ffn(cpu, view_of(w.l[i], s), x, y, scratch, ex) && ok; });
  const std::size_t row = matrix_bytes<T>(s) / s.d_ff;
  const auto read_layer = [&](const layer<T>& l, const std::uint32_t* rows, std::size_t count) {
    read_matrix_rows(l.gate.data(), row, nullptr, s.d_ff, ex);
    read_matrix_rows(l.up.data(), row, rows, count, ex);
    read_matrix_rows(l.down_t.data(), row, rows, count, ex);
  };
  constexpr std::size_t parts = 4;  // dense, step, read_dense, read_step
  double total[parts] = {};
  double kept_sum = 0.0, runs_sum = 0.0;
  std::size_t layer_at = 0;
  for (auto _ : state) {
    double t = 0.0;
    for (std::size_t p = 0; p < parts; ++p) {
      const std::size_t part = (p + static_cast<std::size_t>(state.iterations())) % parts;
      const layer<T>& raw = w.l[layer_at];
      const ffn_layer l = view_of(raw, s);
      layer_at = (layer_at + 1) % w.l.size();
      const double sec = seconds([&] {
        switch (part) {
          case 0:
            ok = dense_ffn(cpu, l, x, y, scratch, ex) && ok;
            break;
          case 1:
            ok = op(l, x, y, kept, scratch, ex) && ok;
            break;
          case 2:
            read_layer(raw, nullptr, s.d_ff);
            break;
          default:  // the set the step just read (part 1 runs before part 3 in the first iteration)
            read_layer(raw, kept.indices.data(), kept.indices.size());
        }
      });
      total[part] += sec;
      if (part == 1) {
        t = sec;
        kept_sum += static_cast<double>(kept.indices.size()) / static_cast<double>(s.d_ff);
        runs_sum += static_cast<double>(runs_of(kept.indices));
      }
    }
    benchmark::DoNotOptimize(y.data());
    state.SetIterationTime(t);
  }
  if (!ok) {
    state.SkipWithError("the CPU backend did not handle this configuration");
    return;
  }
  const double n = static_cast<double>(state.iterations());
  const double a = kept_sum / n;
  const double ideal = ideal_ffn_speedup(a);
  const double speedup = total[0] / total[1];
  const double read_pct = total[2] / total[3] / ideal;
  state.counters["dense_us"] = total[0] / n * 1e6;
  state.counters["step_us"] = total[1] / n * 1e6;
  state.counters["kept"] = a;
  state.counters["runs"] = runs_sum / n;
  state.counters["speedup"] = speedup;
  state.counters["ideal"] = ideal;
  state.counters["pct_of_ideal"] = speedup / ideal;
  state.counters["read_pct_of_ideal"] = read_pct;
  state.counters["pct_of_read"] = speedup / ideal / read_pct;
}

// ---- W_down's two layouts for q8_0 / q4_0 ------------------------------------------------------
// One 7B-shaped layer for the quality figures: W_down row-major (the model's blocks), its
// requantized transpose (cpu::transpose: every down weight rounded twice) and its block-column
// copy (the same blocks rearranged), with gate and up.
template <class T>
struct down_layouts {
  std::vector<T> gate, up, down;
  cpu::owned_weights down_t;
  cpu::weight_layouts columns;  // W_down's column blocks
};
template <class T>
const down_layouts<T>& quality_layer(const shape& s) {
  static const down_layouts<T> q = [&] {
    down_layouts<T> d;
    d.gate = random_matrix<T>(s.d_ff, s.d_model, 1.0F / std::sqrt(static_cast<float>(s.d_model)), 11);
    d.up = random_matrix<T>(s.d_ff, s.d_model, 1.0F / std::sqrt(static_cast<float>(s.d_model)), 12);
    d.down = random_matrix<T>(s.d_model, s.d_ff, 1.0F / std::sqrt(static_cast<float>(s.d_ff)), 13);
    d.down_t = cpu::transpose(matrix_of(d.down, s.d_model, s.d_ff));
    (void)d.columns.add_column_blocks(matrix_of(d.down, s.d_model, s.d_ff));
    return d;
  }();
  return q;
}

// The FFN over the kept set in double from the model's own blocks (W_down not transposed): what
// an exact kernel on these weights computes.
template <class T>
std::vector<double> exact_ffn(const down_layouts<T>& d, const shape& s, std::span<const float> x,
                              std::span<const std::uint32_t> set) {
  const std::size_t bv = block_values(dtype_traits<T>::type);
  std::vector<float> row(std::max(s.d_model, s.d_ff));
  const auto dot = [&](const std::vector<T>& m, std::size_t r) {
    dequantize_row(m.data() + r * s.d_model / bv, row.data(), s.d_model);
    double acc = 0.0;
    for (std::size_t i = 0; i < s.d_model; ++i) acc += static_cast<double>(row[i]) * x[i];
    return acc;
  };
  std::vector<double> h(s.d_ff, 0.0);
  for (const std::uint32_t j : set) {
    const double g = dot(d.gate, j);
    h[j] = g / (1.0 + std::exp(-g)) * dot(d.up, j);
  }
  std::vector<double> y(s.d_model);
  for (std::size_t i = 0; i < s.d_model; ++i) {
    dequantize_row(d.down.data() + i * s.d_ff / bv, row.data(), s.d_ff);
    double acc = 0.0;
    for (const std::uint32_t j : set) acc += h[j] * row[j];
    y[i] = acc;
  }
  return y;
}

// Random sets of share `keep` (the same count of 7B steps as the recorded ones).
std::vector<std::vector<std::uint32_t>> random_sets(std::size_t d_ff, double keep, std::size_t count) {
  std::mt19937 rng(77);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<std::vector<std::uint32_t>> out(count);
  for (auto& set : out) {
    for (std::uint32_t j = 0; j < d_ff; ++j) {
      if (u(rng) < keep) set.push_back(j);
    }
  }
  return out;
}

// Rows cpu_ffn_down/<dtype>/7b/t<threads>/a<keep>/<sets>/<layout>: the sparse step with W_down
// as its requantized transpose (`transposed`: the row axpy over down_t, one row per kept
// neuron; every down weight rounded twice) or in column blocks (`column_blocks`: lossless; the
// kept neurons' quants and the scales of their 32-neuron columns, no down_t), on random sets
// and on the recorded sets in the model's order and the two calibrated orders. Counters:
// dense_us / step_us, the dense FFN of the same layout and the step (the same iterations);
// speedup, ideal 3 / (1 + 2 kept), pct_of_ideal; down_read: the share of W_down's bytes the
// step read; rel_err: relative L2 distance of y from the exact FFN over the same set on the
// model's own blocks (exact_ffn), mean over 4 sets on one layer (quality_layer).
template <class T>
void BM_cpu_ffn_down(benchmark::State& state, double keep, int sets_of, bool columns, std::size_t threads) {
  const shape s = llama2_7b;
  const layers<T>& w = column_weights<T>(s);
  const std::vector<std::vector<std::uint32_t>> sets =
      sets_of < 0 ? random_sets(s.d_ff, keep, 64) : replay_sets(recorded(keep), sets_of);
  const std::vector<float> x = random_floats(s.d_model, 1.0F, 7);
  std::vector<float> y(s.d_model), y_dense(s.d_model);
  cpu::thread_pool pool(threads);
  cpu::executor ex(pool);
  cpu_backend cpu;
  if (columns) cpu.layouts = &w.columns;
  std::size_t next = 0;
  const neuron_sparse_ffn op{magnitude{}, replayed{&sets, &next}, score_source::gate_activation, cpu};
  ffn_scratch scratch, dense_scratch;
  selection kept;
  bool ok = true;
  // Quality, outside the timing.
  const down_layouts<T>& q = quality_layer<T>(s);
  cpu_backend quality_cpu;
  if (columns) quality_cpu.layouts = &q.columns;
  const ffn_layer ql{activation::silu, matrix_of(q.gate, s.d_ff, s.d_model), matrix_of(q.up, s.d_ff, s.d_model),
                     matrix_of(q.down, s.d_model, s.d_ff), columns ? weight_view{} : q.down_t.view};
  double err = 0.0;
  constexpr std::size_t quality_sets = 4;
  for (std::size_t k = 0; k < quality_sets; ++k) {
    std::size_t at = k * 7;
    const neuron_sparse_ffn qop{magnitude{}, replayed{&sets, &at}, score_source::gate_activation, quality_cpu};
    ok = qop(ql, x, y, kept, scratch, ex) && ok;
    const std::vector<double> exact = exact_ffn(q, s, x, kept.indices);
    double diff = 0.0, norm = 0.0;
    for (std::size_t i = 0; i < s.d_model; ++i) {
      diff += (y[i] - exact[i]) * (y[i] - exact[i]);
      norm += exact[i] * exact[i];
    }
    err += std::sqrt(diff / norm);
  }
  warm_up(w.l.size(), [&](std::size_t i) { ok = dense_ffn(cpu, view_of(w.l[i], s), x, y, dense_scratch, ex) && ok; });
  std::size_t layer_at = 0;
  double dense_s = 0.0, step_s = 0.0, kept_sum = 0.0, read_sum = 0.0;
  for (auto _ : state) {
    const double t = time_on_layers(
        state.iterations(), w, s, layer_at,
        [&](const ffn_layer& d) { ok = dense_ffn(cpu, d, x, y_dense, dense_scratch, ex) && ok; },
        [&](const ffn_layer& sp) { ok = op(sp, x, y, kept, scratch, ex) && ok; }, dense_s, step_s);
    const double a = static_cast<double>(kept.indices.size()) / static_cast<double>(s.d_ff);
    kept_sum += a;
    // Column blocks: the kept neurons' quants and the scales of the columns read (q4_0: 2 of 18
    // bytes per 32 values are scales, q8_0: 2 of 34).
    const double column_share =
        std::min(1.0, static_cast<double>(scratch.reads.down_columns * 32) / static_cast<double>(s.d_ff));
    const double scale_share = 2.0 / static_cast<double>(row_bytes(dtype_traits<T>::type, 32));
    read_sum += columns ? a * (1.0 - scale_share) + column_share * scale_share : a;
    benchmark::DoNotOptimize(y.data());
    state.SetIterationTime(t);
  }
  if (!ok) {
    state.SkipWithError("the CPU backend did not handle this configuration");
    return;
  }
  const double n = static_cast<double>(state.iterations());
  const double a = kept_sum / n;
  state.counters["dense_us"] = dense_s / n * 1e6;
  state.counters["step_us"] = step_s / n * 1e6;
  state.counters["kept"] = a;
  state.counters["down_read"] = read_sum / n;
  state.counters["speedup"] = dense_s / step_s;
  state.counters["ideal"] = ideal_ffn_speedup(a);
  state.counters["pct_of_ideal"] = dense_s / step_s / ideal_ffn_speedup(a);
  state.counters["rel_err"] = err / quality_sets;
}

template <class T>
void register_down(std::size_t threads) {
  const char* set_names[] = {"random", "model", "hot", "coactivation"};
  for (const double keep : {0.5, 0.2}) {
    for (int sets_of = -1; sets_of < 3; ++sets_of) {
      for (const bool columns : {false, true}) {
        char label[160];
        std::snprintf(label, sizeof label, "cpu_ffn_down/%s/7b/t%zu/a%.2f/%s/%s",
                      std::string(name(dtype_traits<T>::type)).c_str(), threads, keep, set_names[sets_of + 1],
                      columns ? "column_blocks" : "transposed");
        benchmark::RegisterBenchmark(label, BM_cpu_ffn_down<T>, keep, sets_of, columns, threads)
            ->UseManualTime()
            ->MinTime(0.3)
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

// ---- Speculative verification: the union of K consecutive tokens' sets ----------------------
// The 7B steps of a K-token verify pass: block c of step k holds the union of the recorded sets
// of K consecutive tokens in one layer (the (token, layer) sets are recorded token after token,
// every layer of a token in turn), so the union grows as the real sets of neighbouring tokens
// do; K = 1 is replay_sets' plain decode.
std::vector<std::vector<std::uint32_t>> union_sets(const recording& r, std::size_t k_tokens) {
  const std::size_t layers = *std::max_element(r.layer_of.begin(), r.layer_of.end()) + 1;
  const std::size_t tokens = r.sets.size() / layers;
  std::vector<std::vector<std::uint32_t>> out;
  for (std::size_t k = 0; (k + 1) * blocks * k_tokens <= tokens; ++k) {
    std::vector<std::uint32_t> set;
    for (std::size_t c = 0; c < blocks; ++c) {
      const std::size_t first = (k * blocks + c) * k_tokens;  // the block's first token
      std::vector<std::uint32_t> merged;
      for (std::size_t m = 0; m < k_tokens; ++m) {
        const auto& one = r.sets[(first + m) * layers + c % layers];
        std::vector<std::uint32_t> next;
        std::set_union(merged.begin(), merged.end(), one.begin(), one.end(), std::back_inserter(next));
        merged.swap(next);
      }
      for (const std::uint32_t j : merged) set.push_back(static_cast<std::uint32_t>(c * r.d_ff) + j);
    }
    out.push_back(std::move(set));
  }
  return out;
}

// Rows cpu_ffn_spec/<dtype>/7b/t<threads>/a<keep>/k<K>: the verify pass of K draft tokens (K =
// 1: one decode token), neuron-sparse over the union of their recorded sets (union_sets, a new
// union each iteration), against the dense token FFN of the K tokens in the same iterations
// (batch_runner). Counters: union (mean share of d_ff), speedup, ideal 3 / (1 + 2 union),
// pct_of_ideal.
template <class T>
void BM_cpu_ffn_spec(benchmark::State& state, double keep, std::size_t k_tokens, std::size_t threads) {
  const shape s = llama2_7b;
  const layers<T>& w = weights<T>(s, false);
  const std::vector<std::vector<std::uint32_t>> sets = union_sets(recorded(keep), k_tokens);
  const std::vector<float> input = random_floats(k_tokens * s.d_model, 1.0F, 31);
  cpu::thread_pool pool(threads);
  cpu::executor ex(pool);
  batch_runner run(input, k_tokens, s, ex);
  warm_up(w.l.size(), [&](std::size_t i) { run.dense(view_of(w.l[i], s)); });
  std::size_t next = 0;
  double dense_s = 0.0, step_s = 0.0, share = 0.0;
  for (auto _ : state) {
    const std::vector<std::uint32_t>& united = sets[next / 2 % sets.size()];
    const subset neurons = united.size() == s.d_ff ? subset::everything() : subset::only(united);
    state.SetIterationTime(time_on_layers(
        state.iterations(), w, s, next, [&](const ffn_layer& d) { run.dense(d); },
        [&](const ffn_layer& sp) { run.sparse(sp, neurons); }, dense_s, step_s));
    share += static_cast<double>(united.size()) / static_cast<double>(s.d_ff);
  }
  if (!run.ok) {
    state.SkipWithError("the CPU backend did not handle this configuration");
    return;
  }
  const double a = share / static_cast<double>(state.iterations());
  state.counters["union"] = a;
  state.counters["speedup"] = dense_s / step_s;
  state.counters["ideal"] = ideal_ffn_speedup(a);
  state.counters["pct_of_ideal"] = dense_s / step_s / ideal_ffn_speedup(a);
}

template <class T>
void register_spec(std::size_t threads) {
  for (const double keep : {0.5, 0.2}) {
    for (const std::size_t k_tokens : {1U, 2U, 4U, 8U}) {
      char label[128];
      std::snprintf(label, sizeof label, "cpu_ffn_spec/%s/7b/t%zu/a%.2f/k%zu",
                    std::string(name(dtype_traits<T>::type)).c_str(), threads, keep, k_tokens);
      benchmark::RegisterBenchmark(label, BM_cpu_ffn_spec<T>, keep, k_tokens, threads)
          ->UseManualTime()
          ->MinTime(0.3)
          ->Unit(benchmark::kMillisecond);
    }
  }
}

// A schedule value with a second stage: the first stage keeps k, the second `keep` of them.
struct refine_value {
  std::size_t k = 0;
  double keep = 1.0;
  std::span<const float> weights;
};
[[maybe_unused]] top_k configure(const top_k& /*base*/, const refine_value& v) { return top_k::by_count(v.k); }
[[maybe_unused]] refine_rule refine_stage(const refine_value& v) { return {v.keep, v.weights}; }
struct refine_schedule {
  using value_type = refine_value;
  refine_value v;
  [[nodiscard]] value_type at(std::size_t /*layer*/) const { return v; }
};

template <class T>
void BM_cpu_ffn_refine(benchmark::State& state, double a1, double a2, std::size_t threads) {
  const shape s = llama2_7b;
  const layers<T>& w = weights<T>(s, false);
  const std::vector<float> x = random_floats(s.d_model, 1.0F, 7);
  const std::vector<float> weights(s.d_ff, 1.0F);  // the timing does not depend on them
  std::vector<float> y(s.d_model), y_dense(s.d_model);
  cpu::thread_pool pool(threads);
  cpu::executor ex(pool);
  const cpu_backend cpu;
  const auto k = static_cast<std::size_t>(std::lround(a1 * static_cast<double>(s.d_ff)));
  const neuron_sparse_ffn<magnitude, top_k, cpu_backend, refine_schedule> op{
      magnitude{}, top_k{}, score_source::gate_activation, cpu, refine_schedule{{k, a2 / a1, weights}}};
  ffn_scratch scratch, dense_scratch;
  selection kept;
  bool ok = true;
  warm_up(w.l.size(), [&](std::size_t i) { ok = dense_ffn(cpu, view_of(w.l[i], s), x, y, dense_scratch, ex) && ok; });
  std::size_t next = 0;
  double dense_s = 0.0, step_s = 0.0, first = 0.0, final_rows = 0.0;
  for (auto _ : state) {
    const double t = time_on_layers(
        state.iterations(), w, s, next,
        [&](const ffn_layer& d) { ok = dense_ffn(cpu, d, x, y_dense, dense_scratch, ex) && ok; },
        [&](const ffn_layer& sp) { ok = op(0, sp, x, y, kept, scratch, ex) && ok; }, dense_s, step_s);
    first += static_cast<double>(scratch.reads.up_rows);
    final_rows += static_cast<double>(scratch.reads.down_rows);
    benchmark::DoNotOptimize(y.data());
    state.SetIterationTime(t);
  }
  if (!ok) {
    state.SkipWithError("the CPU backend did not handle this configuration");
    return;
  }
  const double n = static_cast<double>(state.iterations());
  const double f1 = first / n / static_cast<double>(s.d_ff), f2 = final_rows / n / static_cast<double>(s.d_ff);
  const double ideal = 3.0 / (1.0 + f1 + f2);
  state.counters["a1"] = f1;
  state.counters["a2"] = f2;
  state.counters["speedup"] = dense_s / step_s;
  state.counters["ideal"] = ideal;
  state.counters["pct_of_ideal"] = dense_s / step_s / ideal;
}

template <class T>
void register_refine(std::size_t threads) {
  const double pairs[][2] = {{0.9, 0.8}, {0.8, 0.5}, {0.6, 0.4}};
  for (const auto& p : pairs) {
    char label[128];
    std::snprintf(label, sizeof label, "cpu_ffn_refine/%s/7b/t%zu/a%.2f_%.2f",
                  std::string(name(dtype_traits<T>::type)).c_str(), threads, p[0], p[1]);
    benchmark::RegisterBenchmark(label, BM_cpu_ffn_refine<T>, p[0], p[1], threads)
        ->UseManualTime()
        ->MinTime(0.3)
        ->Unit(benchmark::kMillisecond);
  }
}

template <class T>
void register_relu_replay(std::size_t threads) {
  const char* orders[] = {"model", "hot"};
  for (int order = 0; order < 2; ++order) {
    char label[128];
    std::snprintf(label, sizeof label, "cpu_ffn_replay/%s/7b/t%zu/relu/%s",
                  std::string(name(dtype_traits<T>::type)).c_str(), threads, orders[order]);
    benchmark::RegisterBenchmark(label, BM_cpu_ffn_replay<T>, -1.0, order, threads)
        ->UseManualTime()
        ->MinTime(0.3)
        ->Unit(benchmark::kMillisecond);
  }
}

template <class T>
void register_replay(std::size_t threads) {
  const char* orders[] = {"model", "hot", "coactivation"};
  for (const double keep : {0.8, 0.5, 0.2}) {
    for (int order = 0; order < 3; ++order) {
      char label[128];
      std::snprintf(label, sizeof label, "cpu_ffn_replay/%s/7b/t%zu/a%.2f/%s",
                    std::string(name(dtype_traits<T>::type)).c_str(), threads, keep, orders[order]);
      benchmark::RegisterBenchmark(label, BM_cpu_ffn_replay<T>, keep, order, threads)
          ->UseManualTime()
          ->MinTime(0.3)
          ->Unit(benchmark::kMillisecond);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_replay<float>(2);
  register_replay<block_q4_0>(2);
  register_relu_replay<float>(2);
  register_relu_replay<f16>(2);
  register_relu_replay<bf16>(2);
  register_relu_replay<block_q8_0>(2);
  register_relu_replay<block_q4_0>(2);
  register_refine<float>(2);
  register_refine<block_q4_0>(2);
  register_down<block_q4_0>(2);
  register_down<block_q8_0>(2);
  register_spec<bf16>(2);
  register_spec<block_q4_0>(2);
  return run_benchmarks_with_read_bandwidth(argc, argv);
}
