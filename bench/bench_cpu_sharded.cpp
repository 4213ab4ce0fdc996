// Tensor-parallel decode FFN (distributed/): what the sharded selection costs one rank against
// the rank's own FFN work, and what it exchanges. 7B shape in bf16, d_ff split over P ranks.
// Each iteration: the selection rounds of all P ranks in lockstep on one thread (their local
// work only: the all-gathers are memcpys here; an engine adds its collective's latency per
// round), divided by P, then rank 0's FFN on its slice with its kept set (weights streamed from
// DRAM, layers cycled). Rows cpu_sharded_step/bf16/7b/ranks:P/<policy>; counters:
//   select_us        one rank's local work for the rounds
//   ffn_us           the rank's FFN on its slice (gate GEMV of its rows, its kept up / down rows)
//   unsharded_us     the same selector on the whole d_ff in one process (timed in the same loop)
//   select_share     select_us / (select_us + ffn_us)
//   rounds           all-gathers per step
//   sent_bytes / received_bytes   a rank's selection bytes per step (shard_summary::bytes per round
//                    sent, P of them received)
//   activation_bytes the rank's partial y (d_model floats) that the output all-reduce sums
//   per_shard_overlap / per_shard_mass (top_k rows): each rank keeping the top ratio of its own
//                    slice (no collective): the share of the global set it finds, and its score
//                    mass against the global set's
// Run: bench_cpu_sharded --benchmark_repetitions=3 --benchmark_report_aggregates_only=true

#include "ffn_layers.hpp"
#include "harness.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/distributed/sharded_ffn.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>
#include <actsparse/scorers/magnitude.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using namespace actsparse;
using namespace actsparse_bench;

// The magnitude scores |SiLU(W_gate·x)| of the first layer for one input: real gate values.
const std::vector<float>& layer_scores(const layers<bf16>& w, const std::vector<float>& x) {
  static std::vector<float> scores;
  if (scores.empty()) {
    const ffn_layer l = view_of(w.l[0], llama2_7b);
    scores.resize(llama2_7b.d_ff);
    std::vector<std::byte> workspace;
    cpu::executor ex;
    (void)run(cpu_backend{}, gemv_args{l.gate, x, scores, subset::everything()}, workspace, ex);
    for (float& s : scores) s = std::fabs(s / (1.0F + std::exp(-s)));
  }
  return scores;
}

template <class Policy>
void BM_sharded_step(benchmark::State& state, Policy policy) {
  const auto ranks = static_cast<std::size_t>(state.range(0));
  const shape& s = llama2_7b;
  const layers<bf16>& w = weights<bf16>(s, false);
  const std::vector<float> x = random_floats(s.d_model, 1.0F, 7);
  const std::vector<float>& scores = layer_scores(w, x);

  std::vector<neuron_shard> shards(ranks);
  std::vector<sharded_selection> states(ranks);
  std::vector<std::byte> all(ranks * shard_summary::bytes);
  std::vector<selection> kept(ranks);
  std::size_t rounds = 0;
  for (std::size_t r = 0; r < ranks; ++r) shards[r] = neuron_shard::even(s.d_ff, r, ranks, 32);
  const auto select_all = [&] {
    for (std::size_t r = 0; r < ranks; ++r) {
      states[r].begin(policy, std::span<const float>(scores).subspan(shards[r].begin, shards[r].size), shards[r]);
    }
    while (!states[0].done()) {
      for (std::size_t r = 0; r < ranks; ++r) {
        std::memcpy(all.data() + r * shard_summary::bytes, states[r].summary_bytes().data(), shard_summary::bytes);
      }
      for (std::size_t r = 0; r < ranks; ++r) states[r].next(all);
    }
    for (std::size_t r = 0; r < ranks; ++r) states[r].result(kept[r]);
    rounds = states[0].rounds();
  };
  select_all();

  const neuron_sparse_ffn op{magnitude{}, fixed_set{kept[0].indices}, score_source::gate_activation, cpu_backend{}};
  cpu::executor ex;
  ffn_scratch scratch;
  selection out;
  std::vector<float> y(s.d_model);
  bool ok = true;
  warm_up(w.l.size(),
          [&](std::size_t i) { ok = op(shard_of(view_of(w.l[i], s), shards[0]), x, y, out, scratch, ex) && ok; });
  selection whole;
  std::size_t next = 0;
  double select_s = 0.0;
  double ffn_s = 0.0;
  double unsharded_s = 0.0;
  for (auto _ : state) {
    const ffn_layer slice = shard_of(view_of(w.l[next++ % w.l.size()], s), shards[0]);
    const double t_select = seconds(select_all) / static_cast<double>(ranks);
    const double t_ffn = seconds([&] { ok = op(slice, x, y, out, scratch, ex) && ok; });
    unsharded_s += seconds([&] { policy.select(scores, whole); });
    select_s += t_select;
    ffn_s += t_ffn;
    benchmark::DoNotOptimize(y.data());
    state.SetIterationTime(t_select + t_ffn);
  }
  if (!ok) state.SkipWithError("the CPU backend declined the FFN");
  std::size_t global = 0;
  for (const selection& k : kept) global += k.size();
  if (global != whole.size()) state.SkipWithError("the sharded selection kept another count than the unsharded one");
  const double n = static_cast<double>(state.iterations());
  state.counters["select_us"] = 1e6 * select_s / n;
  state.counters["ffn_us"] = 1e6 * ffn_s / n;
  state.counters["unsharded_us"] = 1e6 * unsharded_s / n;
  state.counters["select_share"] = select_s / (select_s + ffn_s);
  state.counters["rounds"] = static_cast<double>(rounds);
  state.counters["sent_bytes"] = static_cast<double>(rounds * shard_summary::bytes);
  state.counters["received_bytes"] = static_cast<double>(rounds * ranks * shard_summary::bytes);
  state.counters["activation_bytes"] = static_cast<double>(s.d_model * sizeof(float));
  state.counters["kept"] = static_cast<double>(global) / static_cast<double>(s.d_ff);
  if constexpr (std::is_same_v<Policy, top_k>) {
    // The collective-free alternative: each rank keeps its own top ratio of its slice. How much of
    // the global set, and of its mass, it finds.
    std::vector<std::uint32_t> local;
    for (std::size_t r = 0; r < ranks; ++r) {
      const selection part = policy.select(std::span<const float>(scores).subspan(shards[r].begin, shards[r].size));
      for (const std::uint32_t i : part.indices) local.push_back(static_cast<std::uint32_t>(shards[r].begin + i));
    }
    std::vector<std::uint32_t> both;
    std::set_intersection(local.begin(), local.end(), whole.indices.begin(), whole.indices.end(),
                          std::back_inserter(both));
    double local_mass = 0.0;
    for (const std::uint32_t i : local) local_mass += scores[i];
    state.counters["per_shard_overlap"] = static_cast<double>(both.size()) / static_cast<double>(whole.size());
    state.counters["per_shard_mass"] = local_mass / whole.covered_mass;
  }
}

}  // namespace

namespace {
// Both policies over the same rank counts.
void over_ranks(benchmark::internal::Benchmark* b) {
  b->ArgName("ranks")->Arg(1)->Arg(2)->Arg(4)->Arg(8)->UseManualTime()->MinTime(0.3);
}
}  // namespace

BENCHMARK_CAPTURE(BM_sharded_step, top_k_0 .2, top_k::by_ratio(0.2))
    ->Name("cpu_sharded_step/bf16/7b/top_k_0.2")
    ->Apply(over_ranks);
BENCHMARK_CAPTURE(BM_sharded_step, mass_0 .8, cumulative_mass{0.8})
    ->Name("cpu_sharded_step/bf16/7b/mass_0.8")
    ->Apply(over_ranks);

BENCHMARK_MAIN();
