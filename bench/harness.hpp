#pragma once
// Small helpers shared by the benchmark programs.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace actsparse_bench {

// 3 / (1 + 2a): the dense gated FFN's bytes (gate, up, down) over a neuron-sparse step's (the
// whole gate, a of up and of down): the speed-up of a step that reads as fast per byte as dense.
[[nodiscard]] constexpr double ideal_ffn_speedup(double kept_fraction) noexcept {
  return 3.0 / (1.0 + 2.0 * kept_fraction);
}

// n values uniform in [-scale, scale], from a fixed seed.
[[nodiscard]] inline std::vector<float> random_floats(std::size_t n, float scale, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (float& f : v) f = u(rng);
  return v;
}

// Wall-clock seconds that f takes.
template <class F>
[[nodiscard]] double seconds(F&& f) {
  const auto start = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Calls f(i) for i in [0, count): every weight set read once, untimed, before a benchmark's
// timed loop. On this host (a VM) the first kernel pass over freshly built weights has taken
// 300–400 ms for a 180 MB matrix (60x what the memory gives, with no guest page fault), and a
// benchmark with a 0.3 s minimum then reports that one iteration as its time.
template <class F>
void warm_up(std::size_t count, F&& f) {
  for (std::size_t i = 0; i < count; ++i) f(i);
}

// Runs the baseline and the candidate once each, alternating which goes first from one
// iteration to the next (neither always finds the caches the other left), adds their seconds
// to the totals and returns the candidate's (for SetIterationTime).
template <class Baseline, class Candidate>
double time_pair(std::int64_t iteration, Baseline&& baseline, Candidate&& candidate, double& baseline_total,
                 double& candidate_total) {
  double t = 0.0;
  if (iteration % 2 == 0) {
    baseline_total += seconds(baseline);
    candidate_total += (t = seconds(candidate));
  } else {
    candidate_total += (t = seconds(candidate));
    baseline_total += seconds(baseline);
  }
  return t;
}

}  // namespace actsparse_bench
