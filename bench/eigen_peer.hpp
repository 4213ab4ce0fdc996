#pragma once
// Eigen's dense f32 GEMV at the 7B FFN shape: the peer a user would pick instead of
// actsparse. Registered by each program that includes this header (one per program).

#include "harness.hpp"
#include "read_bandwidth.hpp"

#include <benchmark/benchmark.h>
#include <Eigen/Core>

#include <algorithm>
#include <vector>

namespace actsparse_bench::eigen_peer {

inline constexpr Eigen::Index gemv_rows = 11008;
inline constexpr Eigen::Index gemv_cols = 4096;

// Enough 11008 × 4096 row-major f32 matrices to span more than the last-level cache.
[[nodiscard]] inline const std::vector<std::vector<float>>& gemv_matrices() {
  return large_dataset::get<std::vector<std::vector<float>>>("eigen_gemv/f32", [] {
    const auto values = static_cast<std::size_t>(gemv_rows * gemv_cols);
    const std::size_t one = values * sizeof(float);
    const std::size_t count = std::max<std::size_t>(2, (actsparse_bench::streaming_bytes() + one - 1) / one);
    std::vector<std::vector<float>> m(count, random_floats(values, 1.0F / 64.0F, 6));
    return m;
  });
}

// y = W x with Eigen (single-threaded), the next matrix each iteration.
inline void BM_eigen_gemv_f32(benchmark::State& state) {
  using row_major = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  const std::vector<std::vector<float>>& matrices = gemv_matrices();
  const std::vector<float> xs = random_floats(static_cast<std::size_t>(gemv_cols), 1.0F, 7);
  const Eigen::Map<const Eigen::VectorXf> x(xs.data(), gemv_cols);
  Eigen::VectorXf y(gemv_rows);
  warm_up(matrices.size(), [&](std::size_t i) {
    y.noalias() = Eigen::Map<const row_major>(matrices[i].data(), gemv_rows, gemv_cols) * x;
  });
  std::size_t next = 0;
  double total = 0.0;
  for (auto _ : state) {
    const Eigen::Map<const row_major> w(matrices[next].data(), gemv_rows, gemv_cols);
    next = (next + 1) % matrices.size();
    const double s = seconds([&] { y.noalias() = w * x; });
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    state.SetIterationTime(s);
    total += s;
  }
  const double bytes = static_cast<double>(gemv_rows * gemv_cols) * sizeof(float);
  const double gbps = bytes * static_cast<double>(state.iterations()) / total / 1e9;
  state.counters["gbps"] = gbps;
  state.counters["pct_of_read"] = actsparse_bench::pct_of_read(gbps, 1);
}

inline const bool registered = [] {
  benchmark::RegisterBenchmark("eigen_gemv/f32/11008x4096", BM_eigen_gemv_f32)
      ->UseManualTime()
      ->MinTime(0.5)
      ->Unit(benchmark::kMillisecond);
  return true;
}();

}  // namespace actsparse_bench::eigen_peer
