// The CPU backend's decode FFN (Highway, dynamic dispatch), dense and neuron-sparse with
// exact gating, at the Llama-2-7B (d_model 4096, d_ff 11008) and Qwen2.5-3B (2048, 11008)
// shapes, at 1 and 2 threads, against the read bandwidth measured in the same process.
//
// A sparse step is the whole decode FFN an engine runs: gate GEMV (dense) → activation →
// scorer → selector → up row gather → down row axpy over W_downᵀ (neuron_sparse_ffn). The
// random set is top_k by count of |act(g)| (random weights: a random set); the clustered set
// is runs of 64 neighbouring neurons (what a predictor that co-locates co-active neurons
// gives); the coalesced rows run the random set with cpu_backend::coalesce_gap = 2 (skipped
// runs of up to 2 rows read too; gbps still counts only the kept rows). The random rows take the
// backend's default crossover (cpu_backend::tuning.crossover: from there every row is read, as
// dense does); the gathered rows, at the activities around it, run the same random set with
// tuning.read_all_from = 1 (always gathered), which is how the crossover was measured (gbps counts
// the kept rows for both). The q8_0_x16 / q4_0_x16 rows have interleaved copies of gate, up and
// W_down (cpu::weight_layouts): their dense reads the copies, their sparse steps read the
// gate's copy and gather from the row-major blocks and down_t below the crossover; their
// gathered rows sit at lower activities, where their crossover lies. Dense is dense_ffn with the same weights,
// interleaved in the same iterations. Several layers are cycled so that no weight byte comes from the L3.
//
// The cpu_token_ffn rows time the token-sparse prefill FFN (BM_cpu_token_ffn has their counters),
// the cpu_ffn_batch rows a decode batch over a neuron union (BM_cpu_ffn_batch).
// The cpu_ffn_step rows cut a sparse step into its parts (the gate GEMV, the serial
// activation / score / top_k, the gathered up and down), and the cpu_activation rows time the
// activation alone; their counters are described at BM_cpu_ffn_step and BM_cpu_activation.
//
// Counters on every cpu_ffn row:
//   gbps           weight bytes that must be read / time (1e9 bytes per GB): the whole gate,
//                  and the kept rows of up and down
//   speedup        dense time / this time (dense measured in the same iterations)
//   ideal          3 / (1 + 2a): the bytes of dense over the bytes of this step
//   pct_of_ideal   speedup / ideal
//   kept           a, the fraction of neurons kept
//   path           on sparse rows: 1 when every row was read (from the crossover on, or
//                  keep-all), 0 when the kept rows were gathered (the op's ffn_reads::every_row)
//   pct_of_read    on dense rows: gbps / read_gbps (the fastest read pattern at the same thread count)
//   resident_ratio on dense rows: bytes one layer holds (down_t, W_down where kept, interleaved
//                  copies) / the model's own bytes of that layer (gate, up, down)
#include "ffn_layers.hpp"
#include "harness.hpp"
#include "read_bandwidth.hpp"
#include "row_read.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/backends/cpu/repack.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>
#include <actsparse/scorers/magnitude.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using namespace actsparse;
using namespace actsparse_bench;

// Runs of 64 neighbouring neurons, a fraction a of them, at random places.
std::vector<std::uint32_t> clustered(std::size_t d_ff, double a, std::uint64_t seed) {
  constexpr std::size_t run = 64;
  const std::size_t runs = d_ff / run;
  std::vector<std::uint32_t> order(runs);
  for (std::size_t i = 0; i < runs; ++i) order[i] = static_cast<std::uint32_t>(i);
  std::mt19937_64 rng(seed);
  std::shuffle(order.begin(), order.end(), rng);
  const auto take = static_cast<std::size_t>(std::lround(a * static_cast<double>(runs)));
  std::vector<std::uint32_t> out;
  for (std::size_t i = 0; i < take; ++i) {
    for (std::size_t j = 0; j < run; ++j) out.push_back(static_cast<std::uint32_t>(order[i] * run + j));
  }
  std::sort(out.begin(), out.end());
  return out;
}

enum class set_kind { dense, random, clustered, coalesced, gathered };

// The coalesced rows: the random set, with skipped runs of at most this many rows read too.
constexpr std::size_t coalesce_gap = 2;

template <class T, set_kind Kind>
void BM_cpu_ffn(benchmark::State& state, shape s, double a, std::size_t threads, bool interleaved) {
  const layers<T>& w = weights<T>(s, interleaved);
  const std::vector<float> x = actsparse_bench::random_floats(s.d_model, 1.0F, 7);
  std::vector<float> y(s.d_model);
  std::vector<float> y_dense(s.d_model);
  cpu::thread_pool pool(threads);
  cpu::executor ex(pool);
  cpu_backend cpu;
  cpu.layouts = &w.layouts;
  const auto k = static_cast<std::size_t>(std::lround(a * static_cast<double>(s.d_ff)));
  const neuron_sparse_ffn random_op{magnitude{}, top_k::by_count(k), score_source::gate_activation, cpu};
  cpu_backend coalescing = cpu;
  coalescing.coalesce_gap = coalesce_gap;
  const neuron_sparse_ffn coalesced_op{magnitude{}, top_k::by_count(k), score_source::gate_activation, coalescing};
  cpu_backend gathering = cpu;
  gathering.tuning.read_all_from = 1.0;
  const neuron_sparse_ffn gathered_op{magnitude{}, top_k::by_count(k), score_source::gate_activation, gathering};
  const neuron_sparse_ffn clustered_op{magnitude{}, fixed_set{clustered(s.d_ff, a, 11)}, score_source::gate_activation,
                                       cpu};
  ffn_scratch scratch;
  ffn_scratch dense_scratch;
  selection kept;
  bool ok = true;
  // The dense FFN on one layer: the baseline of every iteration, and the warm-up.
  const auto dense_on = [&](const ffn_layer& l) { ok = dense_ffn(cpu, l, x, y_dense, dense_scratch, ex) && ok; };
  actsparse_bench::warm_up(w.l.size(), [&](std::size_t i) { dense_on(view_of(w.l[i], s)); });
  std::size_t next = 0;
  double dense_s = 0.0;
  double sparse_s = 0.0;
  for (auto _ : state) {
    const ffn_layer d = view_of(w.l[next], s);
    const ffn_layer sp = view_of(w.l[(next + 1) % w.l.size()], s);
    next = (next + 2) % w.l.size();
    const auto run_dense = [&] { dense_on(d); };
    const auto run_sparse = [&] {
      if constexpr (Kind == set_kind::dense) {
        ok = dense_ffn(cpu, sp, x, y, scratch, ex) && ok;
      } else if constexpr (Kind == set_kind::random) {
        ok = random_op(sp, x, y, kept, scratch, ex) && ok;
      } else if constexpr (Kind == set_kind::clustered) {
        ok = clustered_op(sp, x, y, kept, scratch, ex) && ok;
      } else if constexpr (Kind == set_kind::coalesced) {
        ok = coalesced_op(sp, x, y, kept, scratch, ex) && ok;
      } else {
        ok = gathered_op(sp, x, y, kept, scratch, ex) && ok;
      }
    };
    const double t = actsparse_bench::time_pair(state.iterations(), run_dense, run_sparse, dense_s, sparse_s);
    benchmark::DoNotOptimize(y.data());
    benchmark::DoNotOptimize(y_dense.data());
    state.SetIterationTime(t);
  }
  if (!ok) {
    state.SkipWithError("the CPU backend did not handle this configuration");
    return;
  }
  const double kept_fraction =
      Kind == set_kind::dense ? 1.0 : static_cast<double>(kept.indices.size()) / static_cast<double>(s.d_ff);
  const double n = static_cast<double>(state.iterations());
  const double m = static_cast<double>(matrix_bytes<T>(s));
  const double read = m * (1.0 + 2.0 * kept_fraction);
  const double gbps = read * n / sparse_s / 1e9;
  const double speedup = dense_s / sparse_s;
  const double ideal = actsparse_bench::ideal_ffn_speedup(kept_fraction);
  state.counters["gbps"] = gbps;
  state.counters["speedup"] = speedup;
  state.counters["ideal"] = ideal;
  state.counters["pct_of_ideal"] = speedup / ideal;
  state.counters["kept"] = kept_fraction;
  if (Kind != set_kind::dense) {  // 1: every row read (the crossover, or keep-all), 0: kept rows gathered
    state.counters["path"] = scratch.reads.every_row ? 1 : 0;  // what the op reports for its last call
  }
  if (Kind == set_kind::dense) {
    state.counters["pct_of_read"] = actsparse_bench::pct_of_read(gbps, static_cast<unsigned>(threads));
    // Bytes one layer holds (gate, up, down_t, W_down where kept, interleaved copies) / the
    // model's own bytes of that layer (gate, up and down: 3 matrices).
    const layer<T>& first = w.l.front();
    const double held =
        static_cast<double>((first.gate.size() + first.up.size() + first.down_t.size() + first.down.size()) *
                            sizeof(T)) +
        static_cast<double>(w.layouts.bytes()) / static_cast<double>(w.l.size());
    state.counters["resident_ratio"] = held / (3.0 * m);
  }
}

constexpr double activities[] = {1.0, 0.9, 0.8, 0.7, 0.6, 0.4, 0.2, 0.1, 0.05};
constexpr double clustered_activities[] = {0.4, 0.1};
constexpr double crossover_activities[] = {0.9, 0.8, 0.7};  // the gathered rows
// With interleaved copies dense reads faster than the gathers: the crossover lies lower.
constexpr double interleaved_crossover_activities[] = {0.8, 0.7, 0.6, 0.5, 0.4, 0.3};

template <class T>
void register_dtype(const shape& s, std::size_t threads, bool interleaved = false) {
  const std::string base = "cpu_ffn/" + label_of<T>(interleaved) + "/" + s.label + "/t" + std::to_string(threads) + "/";
  const auto common = [](benchmark::internal::Benchmark* b) {
    b->UseManualTime()->MinTime(0.3)->Unit(benchmark::kMillisecond);
  };
  common(benchmark::RegisterBenchmark((base + "dense").c_str(), BM_cpu_ffn<T, set_kind::dense>, s, 1.0, threads,
                                      interleaved));
  char label[32];
  for (const double a : activities) {
    std::snprintf(label, sizeof label, "random_a%.2f", a);
    common(benchmark::RegisterBenchmark((base + label).c_str(), BM_cpu_ffn<T, set_kind::random>, s, a, threads,
                                        interleaved));
  }
  for (const double a : interleaved ? std::span<const double>(interleaved_crossover_activities)
                                    : std::span<const double>(crossover_activities)) {
    std::snprintf(label, sizeof label, "gathered_a%.2f", a);
    common(benchmark::RegisterBenchmark((base + label).c_str(), BM_cpu_ffn<T, set_kind::gathered>, s, a, threads,
                                        interleaved));
  }
  for (const double a : clustered_activities) {
    std::snprintf(label, sizeof label, "clustered_a%.2f", a);
    common(benchmark::RegisterBenchmark((base + label).c_str(), BM_cpu_ffn<T, set_kind::clustered>, s, a, threads,
                                        interleaved));
    std::snprintf(label, sizeof label, "coalesced_a%.2f", a);
    common(benchmark::RegisterBenchmark((base + label).c_str(), BM_cpu_ffn<T, set_kind::coalesced>, s, a, threads,
                                        interleaved));
  }
}

// Where a sparse decode step's time goes: the step at activity a (top_k, the random set) cut
// into its parts, each timed on its own, all interleaved with the dense FFN in the same
// iterations (each part on a different layer, cycled, so none reads from the cache):
//   gate_us      the gate GEMV (gemv_args, every row)
//   serial_us    activation, magnitude score and top_k on the calling thread
//   sparse_us    the backend's gated FFN with the activated gate given: the up gather and
//                the down row axpy (or, from the crossover on, every row)
//   step_us      the whole step (neuron_sparse_ffn); dense_us the dense FFN
//   gate_share   gate_us / (dense_us / 3): the gate against a third of dense (1 = as fast per byte)
//   sparse_ideal sparse_us / (dense_us · 2a / 3): the gathered bytes against dense's speed per byte
//   pct_of_ideal dense_us / step_us / (3 / (1 + 2a))
// and what the memory system gives the same rows with nothing computed (row_read.hpp: the
// kernels' order and grouping, a sum of 64-bit words thrown away), on a layer of their own too:
//   read_dense_us      every row of gate, up and down_t
//   read_step_us       every row of gate, and the step's kept rows of up and down_t
//   read_pct_of_ideal  read_dense_us / read_step_us / (3 / (1 + 2a)): the pct_of_ideal of a
//                      step that only read its rows; below 1 by what scattered rows lose
//                      against a dense sweep per byte on this machine
//   pct_of_read        pct_of_ideal / read_pct_of_ideal: the step against that ceiling
template <class T>
void BM_cpu_ffn_step(benchmark::State& state, shape s, double a, std::size_t threads, bool interleaved) {
  const layers<T>& w = weights<T>(s, interleaved);
  const std::vector<float> x = actsparse_bench::random_floats(s.d_model, 1.0F, 7);
  std::vector<float> y(s.d_model);
  cpu::thread_pool pool(threads);
  cpu::executor ex(pool);
  cpu_backend cpu;
  cpu.layouts = &w.layouts;
  const auto k = static_cast<std::size_t>(std::lround(a * static_cast<double>(s.d_ff)));
  const top_k select = top_k::by_count(k);
  const neuron_sparse_ffn op{magnitude{}, select, score_source::gate_activation, cpu};
  ffn_scratch scratch;
  selection kept;
  std::vector<float> g(s.d_ff);
  std::vector<float> act(s.d_ff);
  std::vector<float> scores(s.d_ff);
  std::vector<std::byte> workspace;
  bool ok = true;
  const auto run = [&](const auto& args) {
    workspace.resize(cpu.workspace_size(args));
    ok = cpu.run(args, workspace, ex) && ok;
  };
  actsparse_bench::warm_up(w.l.size(),
                           [&](std::size_t i) { ok = dense_ffn(cpu, view_of(w.l[i], s), x, y, scratch, ex) && ok; });
  constexpr std::size_t parts = 7;                        // dense, gate, serial, sparse, step, read_dense, read_step
  const std::size_t bytes = matrix_bytes<T>(s) / s.d_ff;  // one row
  const auto read_layer = [&](const layer<T>& l, const std::uint32_t* rows, std::size_t count) {
    actsparse_bench::read_matrix_rows(l.gate.data(), bytes, nullptr, s.d_ff, ex);
    actsparse_bench::read_matrix_rows(l.up.data(), bytes, rows, count, ex);
    actsparse_bench::read_matrix_rows(l.down_t.data(), bytes, rows, count, ex);
  };
  double total[parts] = {};
  std::size_t next = 0;
  for (auto _ : state) {
    double t = 0.0;
    for (std::size_t p = 0; p < parts; ++p) {
      const std::size_t part = (p + static_cast<std::size_t>(state.iterations())) % parts;  // rotate the order
      const layer<T>& raw = w.l[next];
      const ffn_layer l = view_of(raw, s);
      next = (next + 1) % w.l.size();
      const double seconds = actsparse_bench::seconds([&] {
        switch (part) {
          case 0:
            ok = dense_ffn(cpu, l, x, y, scratch, ex) && ok;
            break;
          case 1:
            run(gemv_args{l.gate, x, g, subset::everything()});
            break;
          case 2:
            std::copy(g.begin(), g.end(), act.begin());
            cpu.activate(l.act, act);
            magnitude{}.score(std::span<const float>(act), scores);
            select.select(scores, kept);
            break;
          case 3:
            run(gated_ffn_args{l, x, y, subset::only(kept.indices), act});
            break;
          case 4:
            ok = op(l, x, y, kept, scratch, ex) && ok;
            break;
          case 5:
            read_layer(raw, nullptr, s.d_ff);
            break;
          default:  // the kept set of the last selection (part 2 runs before part 6 in the first iteration)
            read_layer(raw, kept.indices.data(), kept.indices.size());
        }
      });
      total[part] += seconds;
      if (part == 4) t = seconds;
    }
    benchmark::DoNotOptimize(y.data());
    state.SetIterationTime(t);
  }
  if (!ok) {
    state.SkipWithError("the CPU backend did not handle this configuration");
    return;
  }
  const double n = static_cast<double>(state.iterations());
  const double kept_fraction = static_cast<double>(kept.indices.size()) / static_cast<double>(s.d_ff);
  const double dense = total[0] / n;
  state.counters["dense_us"] = dense * 1e6;
  state.counters["gate_us"] = total[1] / n * 1e6;
  state.counters["serial_us"] = total[2] / n * 1e6;
  state.counters["sparse_us"] = total[3] / n * 1e6;
  state.counters["step_us"] = total[4] / n * 1e6;
  state.counters["gate_share"] = total[1] / n / (dense / 3.0);
  state.counters["sparse_ideal"] = total[3] / n / (dense * 2.0 * kept_fraction / 3.0);
  const double ideal = actsparse_bench::ideal_ffn_speedup(kept_fraction);
  const double pct_of_ideal = dense / (total[4] / n) / ideal;
  const double read_pct_of_ideal = total[5] / total[6] / ideal;
  state.counters["pct_of_ideal"] = pct_of_ideal;
  state.counters["read_dense_us"] = total[5] / n * 1e6;
  state.counters["read_step_us"] = total[6] / n * 1e6;
  state.counters["read_pct_of_ideal"] = read_pct_of_ideal;
  state.counters["pct_of_read"] = pct_of_ideal / read_pct_of_ideal;
  state.counters["kept"] = kept_fraction;
}

// The activation of a decode step's d_ff gate values (serial: the ops layer runs it on the
// calling thread between the gate GEMV and the selector): cpu_backend::activate (vectorized)
// against the scalar functions of core/activation.hpp (what it replaced), in the same
// iterations. Counters: speedup (scalar time / vector time), us and scalar_us (per call),
// gbps (the 4 bytes per value read / time; from the L1, for scale against the FFN rows).
void BM_cpu_activation(benchmark::State& state, activation act, std::size_t n) {
  const std::vector<float> g = actsparse_bench::random_floats(n, 3.0F, 5);
  std::vector<float> v(n);
  const cpu_backend cpu;
  double scalar_s = 0.0;
  double vector_s = 0.0;
  for (auto _ : state) {
    const auto scalar = [&] {
      for (std::size_t i = 0; i < n; ++i) v[i] = apply(act, g[i]);
      benchmark::ClobberMemory();
    };
    const auto vectorized = [&] {
      std::copy(g.begin(), g.end(), v.begin());
      cpu.activate(act, v);
      benchmark::ClobberMemory();
    };
    state.SetIterationTime(actsparse_bench::time_pair(state.iterations(), scalar, vectorized, scalar_s, vector_s));
    benchmark::DoNotOptimize(v.data());
  }
  const double calls = static_cast<double>(state.iterations());
  state.counters["speedup"] = scalar_s / vector_s;
  state.counters["us"] = vector_s / calls * 1e6;
  state.counters["scalar_us"] = scalar_s / calls * 1e6;
  state.counters["gbps"] = static_cast<double>(n * sizeof(float)) * calls / vector_s / 1e9;
}

template <class T>
void register_step(const shape& s, std::size_t threads, bool interleaved = false) {
  for (const double a : {0.05, 0.2, 0.4, 0.6}) {
    char label[96];
    std::snprintf(label, sizeof label, "cpu_ffn_step/%s/%s/t%zu/a%.2f", label_of<T>(interleaved).c_str(), s.label,
                  threads, a);
    benchmark::RegisterBenchmark(label, BM_cpu_ffn_step<T>, s, a, threads, interleaved)
        ->UseManualTime()
        ->MinTime(0.3)
        ->Unit(benchmark::kMillisecond);
  }
}

// The token-sparse prefill FFN (token_ffn_args): residual[t] += FFN(input[t]) for a fraction
// `kept` of `tokens` tokens (every other one, or one in four), against every token in the same
// iterations. Compute-bound: the weights are read once per call, the work grows with the tokens.
//   time_ratio    this time / the all-tokens time (goal: <= kept + 0.03)
//   speedup       the all-tokens time / this time; ideal 1 / kept; pct_of_ideal their ratio
//   gflops        2·3·d_model·d_ff FLOPs per kept token / time
template <class T>
void BM_cpu_token_ffn(benchmark::State& state, shape s, std::size_t tokens, double kept, std::size_t threads) {
  const layers<T>& w = weights<T>(s, false);
  const ffn_layer layer = view_of(w.l.front(), s);
  const std::vector<float> input = actsparse_bench::random_floats(tokens * s.d_model, 1.0F, 21);
  std::vector<float> residual(tokens * s.d_model, 0.0F);
  const auto step = static_cast<std::size_t>(std::lround(1.0 / kept));
  std::vector<std::uint32_t> kept_tokens;
  for (std::size_t t = 0; t < tokens; t += step) kept_tokens.push_back(static_cast<std::uint32_t>(t));
  cpu::thread_pool pool(threads);
  cpu::executor ex(pool);
  const cpu_backend cpu;
  const auto in = matrix_view<const float>::packed(input.data(), tokens, s.d_model);
  const auto out = matrix_view<float>::packed(residual.data(), tokens, s.d_model);
  const token_ffn_args all{layer, in, out, subset::everything()};
  const token_ffn_args some{layer, in, out, subset::only(kept_tokens)};
  std::vector<std::byte> workspace(std::max(cpu.workspace_size(all), cpu.workspace_size(some)));
  bool ok = true;
  const auto run_all = [&] { ok = cpu.run(all, workspace, ex).handled() && ok; };
  const auto run_some = [&] { ok = cpu.run(some, workspace, ex).handled() && ok; };
  run_all();  // warm-up: the weights and the buffers touched once
  double all_s = 0.0;
  double some_s = 0.0;
  for (auto _ : state) {
    state.SetIterationTime(actsparse_bench::time_pair(state.iterations(), run_all, run_some, all_s, some_s));
    benchmark::DoNotOptimize(residual.data());
  }
  if (!ok) {
    state.SkipWithError("the CPU backend did not handle this configuration");
    return;
  }
  const double fraction = static_cast<double>(kept_tokens.size()) / static_cast<double>(tokens);
  const double n = static_cast<double>(state.iterations());
  state.counters["kept"] = fraction;
  state.counters["time_ratio"] = some_s / all_s;
  state.counters["speedup"] = all_s / some_s;
  state.counters["ideal"] = 1.0 / fraction;
  state.counters["pct_of_ideal"] = all_s / some_s * fraction;
  state.counters["gflops"] = 6.0 * static_cast<double>(s.d_model * s.d_ff * kept_tokens.size()) * n / some_s / 1e9;
}

template <class T>
void register_token_ffn(const shape& s, std::size_t threads) {
  for (const std::size_t tokens : {512U, 2048U}) {
    for (const double kept : {0.5, 0.25}) {
      const std::string label = "cpu_token_ffn/" + label_of<T>(false) + "/" + s.label + "/t" + std::to_string(threads) +
                                "/tokens:" + std::to_string(tokens) +
                                "/kept_pct:" + std::to_string(static_cast<int>(std::lround(kept * 100)));
      benchmark::RegisterBenchmark(label.c_str(), BM_cpu_token_ffn<T>, s, tokens, kept, threads)
          ->UseManualTime()
          ->MinTime(0.3)
          ->Unit(benchmark::kMillisecond);
    }
  }
}

// Rows cpu_ffn_batch/<dtype>/7b/t<threads>/n<tokens>/union<a>: a decode batch of n tokens
// neuron-sparse over a union of share a (random, fixed seed): the gate of the n tokens at once
// (batched_gemv_args), its activation, then the token FFN over the union with that gate given
// (what neuron_sparse_ffn::batch runs, without the selection), against the dense token FFN of
// the same n tokens (the dense n-column GEMM: every row read once for the batch), in the same
// iterations, layers rotated so the weights stream from DRAM. Counters: union, dense_ms and
// sparse_ms (per call of n tokens), speedup (dense / sparse), ideal 3 / (1 + 2 union),
// pct_of_ideal.
template <class T>
void BM_cpu_ffn_batch(benchmark::State& state, shape s, std::size_t tokens, double a, std::size_t threads) {
  const layers<T>& w = weights<T>(s, false);
  const std::vector<float> input = actsparse_bench::random_floats(tokens * s.d_model, 1.0F, 23);
  std::vector<std::uint32_t> united;
  std::mt19937_64 rng(29);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (std::uint32_t j = 0; j < s.d_ff; ++j) {
    if (a >= 1.0 || u(rng) < a) united.push_back(j);
  }
  cpu::thread_pool pool(threads);
  cpu::executor ex(pool);
  batch_runner run(input, tokens, s, ex);
  const subset neurons = united.size() == s.d_ff ? subset::everything() : subset::only(united);
  warm_up(w.l.size(), [&](std::size_t i) { run.dense(view_of(w.l[i], s)); });
  std::size_t next = 0;
  double dense_s = 0.0, sparse_s = 0.0;
  for (auto _ : state) {
    state.SetIterationTime(time_on_layers(
        state.iterations(), w, s, next, [&](const ffn_layer& d) { run.dense(d); },
        [&](const ffn_layer& sp) { run.sparse(sp, neurons); }, dense_s, sparse_s));
  }
  if (!run.ok) {
    state.SkipWithError("the CPU backend did not handle this configuration");
    return;
  }
  const double share = static_cast<double>(united.size()) / static_cast<double>(s.d_ff);
  state.counters["union"] = share;
  state.counters["dense_ms"] = dense_s / static_cast<double>(state.iterations()) * 1e3;
  state.counters["sparse_ms"] = sparse_s / static_cast<double>(state.iterations()) * 1e3;
  state.counters["speedup"] = dense_s / sparse_s;
  state.counters["ideal"] = ideal_ffn_speedup(share);
  state.counters["pct_of_ideal"] = dense_s / sparse_s / ideal_ffn_speedup(share);
}

template <class T>
void register_batch(const shape& s, std::size_t threads) {
  for (const std::size_t tokens : {2U, 4U, 8U, 16U}) {
    for (const double a : {0.1, 0.3, 0.5, 0.7, 1.0}) {
      char label[128];
      std::snprintf(label, sizeof label, "cpu_ffn_batch/%s/%s/t%zu/n%zu/union%.1f", label_of<T>(false).c_str(), s.label,
                    threads, tokens, a);
      benchmark::RegisterBenchmark(label, BM_cpu_ffn_batch<T>, s, tokens, a, threads)
          ->UseManualTime()
          ->MinTime(0.3)
          ->Unit(benchmark::kMillisecond);
    }
  }
}

void register_all() {
  for (const std::size_t threads : {1U, 2U}) {
    register_step<f16>(llama2_7b, threads);
    register_step<block_q8_0>(llama2_7b, threads);
    register_step<block_q4_0>(llama2_7b, threads);
    register_step<block_q4_0>(llama2_7b, threads, true);
  }
  for (const std::size_t threads : {1U, 2U}) {
    register_token_ffn<bf16>(llama2_7b, threads);
    register_token_ffn<block_q4_0>(llama2_7b, threads);
  }
  register_batch<bf16>(llama2_7b, 2);
  register_batch<block_q4_0>(llama2_7b, 2);
  for (const activation act : {activation::silu, activation::gelu, activation::relu}) {
    const std::string row = "cpu_activation/" + std::string(name(act)) + "/11008";
    benchmark::RegisterBenchmark(row.c_str(), BM_cpu_activation, act, std::size_t{11008})
        ->UseManualTime()
        ->MinTime(0.1)
        ->Unit(benchmark::kMicrosecond);
  }
  for (const std::size_t threads : {1U, 2U}) {
    for (const shape& s : {llama2_7b, qwen25_3b}) {
      register_dtype<float>(s, threads);
      register_dtype<f16>(s, threads);
      register_dtype<bf16>(s, threads);
      register_dtype<block_q8_0>(s, threads);
      register_dtype<block_q8_0>(s, threads, true);
      register_dtype<block_q4_0>(s, threads);
      register_dtype<block_q4_0>(s, threads, true);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_all();
  return actsparse_bench::run_benchmarks_with_read_bandwidth(argc, argv);
}
