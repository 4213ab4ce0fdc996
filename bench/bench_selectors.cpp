// Cost of the selectors per call, on the shapes they meet in a model: 11008 FFN neuron
// scores (Llama-7B d_ff) drawn like |SiLU(gate)|, a 4096-token prefill, one token's 64
// router probabilities. Reports items_per_second (scores per second) and `us` (microseconds
// per call). Run: bench_selectors --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
// bench_selectors is the cost without the CPU backend (the portable passes); bench_selectors_cpu
// is the same program with the backend's kernels linked (actsparse_cpu_kernels), which install
// its passes where the CPU has them.

#include <actsparse/core/selection.hpp>
#include <actsparse/selectors/adaptive_top_k.hpp>
#include <actsparse/selectors/block_budget.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>
#include <actsparse/selectors/threshold.hpp>
#include <actsparse/selectors/tiered.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

namespace {

using namespace actsparse;

// |SiLU(g)| for gaussian g: the magnitude scores of a SwiGLU FFN's gate.
std::vector<float> silu_scores(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0F, 1.0F);
  std::vector<float> s(n);
  for (auto& x : s) {
    const float z = g(rng);
    x = std::fabs(z / (1.0F + std::exp(-z)));
  }
  return s;
}

// A softmax over gaussian logits.
std::vector<float> router(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0F, 1.5F);
  std::vector<float> p(n);
  float sum = 0.0F;
  for (auto& x : p) sum += (x = std::exp(g(rng)));
  for (auto& x : p) x /= sum;
  return p;
}

template <class Selector>
void run(benchmark::State& state, const Selector& sel, const std::vector<float>& scores) {
  selection out;
  sel.select(scores, out);  // grow `out` once: the loop measures the steady state
  for (auto _ : state) {
    sel.select(scores, out);
    benchmark::DoNotOptimize(out.indices.data());
    benchmark::ClobberMemory();
  }
  const auto calls = static_cast<double>(state.iterations());
  state.SetItemsProcessed(state.iterations() * static_cast<std::int64_t>(scores.size()));
  state.counters["kept"] = static_cast<double>(out.size());
  // Seconds / (calls * 1e-6) = microseconds per call.
  state.counters["us"] = benchmark::Counter(calls * 1e-6, benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

void cumulative_mass_11008(benchmark::State& state) {
  const auto scores = silu_scores(11008, 1);
  run(state, cumulative_mass{.mass = static_cast<double>(state.range(0)) / 100.0}, scores);
}
BENCHMARK(cumulative_mass_11008)->ArgName("mass%")->Arg(50)->Arg(90);

void top_k_11008(benchmark::State& state) {
  const auto scores = silu_scores(11008, 2);
  run(state, top_k::by_ratio(static_cast<double>(state.range(0)) / 100.0), scores);
}
BENCHMARK(top_k_11008)->ArgName("keep%")->Arg(25)->Arg(50);

void threshold_11008(benchmark::State& state) {
  const auto scores = silu_scores(11008, 3);
  run(state, threshold{0.2F}, scores);
}
BENCHMARK(threshold_11008);

void tiered_11008(benchmark::State& state) {
  const auto scores = silu_scores(11008, 4);
  std::vector<std::uint32_t> base;
  for (std::uint32_t i = 0; i < 11008; i += 16) base.push_back(i);  // 688 base columns
  // (from_unsorted: from_sorted trips a GCC 12 -O3 -Wrestrict false positive in its message code)
  run(state, tiered{.m = static_cast<std::size_t>(state.range(0)), .base = index_set::from_unsorted(base)}, scores);
}
BENCHMARK(tiered_11008)->ArgName("m")->Arg(2)->Arg(4);

void block_budget_tokens(benchmark::State& state) {
  const auto scores = silu_scores(static_cast<std::size_t>(state.range(0)), 5);
  run(state, block_budget{.block_size = 128, .mass = 0.5}, scores);
}
BENCHMARK(block_budget_tokens)->ArgName("tokens")->Arg(512)->Arg(4096);

void adaptive_top_k_experts(benchmark::State& state) {
  const auto probabilities = router(static_cast<std::size_t>(state.range(0)), 6);
  run(state, adaptive_top_k{}, probabilities);
}
BENCHMARK(adaptive_top_k_experts)->ArgName("experts")->Arg(8)->Arg(64)->Arg(256);

}  // namespace

BENCHMARK_MAIN();
