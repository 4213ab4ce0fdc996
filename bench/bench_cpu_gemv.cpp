// The CPU backend's GEMV (Highway, dynamic dispatch) at the 7B FFN shape 11008 × 4096 (f32,
// f16, bf16, and the ggml blocks q8_0 / q4_0: by default on x quantized to 8-bit blocks,
// cpu_backend::int8_activations),
// dense and row-gather (output-sparse), and its input-sparse linear over a transposed
// 11008 × 4096 weight (row axpy; a = the kept fraction of input channels), against the read bandwidth measured in the
// same process, at 1 and 2 threads (a blocking thread_pool), and each kernel's compute
// ceiling (the `cache` rows, BM_cpu_ceiling). The q8_0_x16 / q4_0_x16 rows run the dense GEMV
// from interleaved copies (cpu::weight_layouts) against the row-major one. Counters:
//   gbps           weight bytes that must be read / time (1e9 bytes per GB)
//   pct_of_read  gbps / the read bandwidth measured at the same thread count (a ratio)
//   speedup        dense time / this time, dense interleaved in the same iterations
//   ideal          1 / a when a fraction a of the rows is read
//   pct_of_ideal   speedup / ideal
#include "eigen_peer.hpp"
#include "harness.hpp"
#include "read_bandwidth.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/backends/cpu/repack.hpp>
#include <actsparse/core/quantize.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace actsparse;
using actsparse_bench::large_dataset;

constexpr std::size_t rows = 11008;
constexpr std::size_t cols = 4096;

template <class T>
struct matrices {
  std::vector<std::vector<T>> m;  // enough 11008 × 4096 matrices to stream past the L3
};

template <class T>
matrices<T> make_matrices() {
  const std::size_t one = row_bytes(dtype_traits<T>::type, cols) * rows;
  const std::size_t count = std::max<std::size_t>(2, (actsparse_bench::streaming_bytes() + one - 1) / one);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0F, 1.0F);
  std::vector<float> row(cols);
  const std::size_t per_row = cols / dtype_traits<T>::block_values;  // storage elements (values or blocks)
  std::vector<T> first(rows * per_row);
  for (std::size_t r = 0; r < rows; ++r) {
    for (float& v : row) v = u(rng);
    quantize_row(row.data(), first.data() + r * per_row, cols);
  }
  matrices<T> out;
  out.m.assign(count, first);  // copies: distinct memory, same values
  return out;
}

template <class T>
const matrices<T>& weights() {
  return large_dataset::get<matrices<T>>("cpu_gemv/" + std::string(name(dtype_traits<T>::type)), make_matrices<T>);
}

template <class T>
weight_view view_of(const std::vector<T>& m) {
  return matrix_view<const T>::packed(m.data(), rows, cols);
}

// The q8_0 / q4_0 matrices with their interleaved copies (cpu::weight_layouts, found by the
// row-major views). One dataset, so that the large-data slot holds them together.
template <class T>
struct interleaved_set {
  matrices<T> rowmajor;
  std::vector<T> cached;  // the first 2048 rows of the first matrix, for the ceiling (L3-resident)
  cpu::weight_layouts layouts;
};
constexpr std::size_t interleaved_cache_rows = 2048;

template <class T>
const interleaved_set<T>& interleaved_weights() {
  return large_dataset::get<interleaved_set<T>>("cpu_gemv/" + std::string(name(dtype_traits<T>::type)) + "_x16", [] {
    interleaved_set<T> out{make_matrices<T>(), {}, {}};
    for (const auto& m : out.rowmajor.m) (void)out.layouts.add_interleaved(view_of(m));
    const std::size_t per_row = cols / dtype_traits<T>::block_values;
    out.cached.assign(out.rowmajor.m[0].begin(),
                      out.rowmajor.m[0].begin() + static_cast<std::ptrdiff_t>(interleaved_cache_rows * per_row));
    (void)out.layouts.add_interleaved(matrix_view<const T>::packed(out.cached.data(), interleaved_cache_rows, cols));
    return out;
  });
}

// The dense call of both benchmarks on an executor: y = W·x (GEMV) or y = Σ_j x_j·Wt[j, :]
// (row axpy) over every row of m, which may have fewer rows than the 11008 the buffers hold.
// The workspace (the GEMV's x quantized for q8_0 / q4_0, the row axpy's chunk sums) is sized
// for the 11008-row matrices, the most any call needs.
template <bool Transposed>
struct dense_call {
  cpu_backend cpu{};    // with the layouts given (interleaved copies), if any
  cpu_backend plain{};  // without them
  std::vector<float> x = std::vector<float>(Transposed ? rows : cols, 0.5F);
  std::vector<float> y = std::vector<float>(Transposed ? cols : rows);
  std::vector<std::byte> workspace;
  cpu::thread_pool pool;
  cpu::executor ex{pool};

  dense_call(const weight_view& full, std::size_t threads, const cpu::weight_layouts* layouts = nullptr)
      : workspace(Transposed ? cpu.workspace_size(transposed_linear_args{full, x, y, subset::everything()})
                             : cpu.workspace_size(gemv_args{full, x, y, subset::everything()})),
        pool(threads) {
    cpu.layouts = layouts;
  }

  // Any call of the backend (the sparse ones too) with this workspace and executor.
  template <class Args>
  void run(const Args& a) {
    (void)cpu.run(a, workspace, ex);
  }

  void operator()(const weight_view& m) { call(cpu, m); }
  void without_copies(const weight_view& m) { call(plain, m); }

 private:
  void call(const cpu_backend& b, const weight_view& m) {
    const std::size_t n = m.rows;
    if constexpr (Transposed) {
      (void)b.run(transposed_linear_args{m, std::span<const float>(x.data(), n), y, subset::everything()}, workspace,
                  ex);
    } else {
      (void)b.run(gemv_args{m, x, std::span<float>(y.data(), n), subset::everything()}, workspace, ex);
    }
  }
};

// a = range(0) / 100 of the rows, random; a = 100 runs the dense path itself. Transposed:
// the matrix is Wt [11008 inputs × 4096 outputs] of an input-sparse linear (TEAL, the down
// projection's shape) and the kept rows are the kept input channels; otherwise it is W of a
// GEMV and the kept rows are the outputs computed.
template <class T, bool Transposed>
void BM_cpu_gemv(benchmark::State& state) {
  const matrices<T>& w = weights<T>();
  const double a = static_cast<double>(state.range(0)) / 100.0;
  std::mt19937 rng(9);
  std::bernoulli_distribution keep(a);
  std::vector<std::uint32_t> kept;
  for (std::uint32_t r = 0; r < rows; ++r) {
    if (keep(rng)) kept.push_back(r);
  }
  // The dense call on one matrix: the baseline of every iteration, and the warm-up.
  dense_call<Transposed> dense_on(view_of(w.m[0]), static_cast<std::size_t>(state.range(1)));
  const std::vector<float>& x = dense_on.x;
  std::vector<float> y(dense_on.y.size());
  actsparse_bench::warm_up(w.m.size(), [&](std::size_t i) { dense_on(view_of(w.m[i])); });
  std::size_t next = 0;
  double dense_s = 0.0;
  double sparse_s = 0.0;
  for (auto _ : state) {
    const weight_view d = view_of(w.m[next]);
    const weight_view s = view_of(w.m[(next + 1) % w.m.size()]);
    next = (next + 2) % w.m.size();
    const auto run_dense = [&] { dense_on(d); };
    const auto run_sparse = [&] {
      const subset which = a >= 1.0 ? subset::everything() : subset::only(kept);
      if constexpr (Transposed) {
        dense_on.run(transposed_linear_args{s, x, y, which});
      } else {
        dense_on.run(gemv_args{s, x, std::span<float>(y.data(), which.count(rows)), which});
      }
    };
    const double t = actsparse_bench::time_pair(state.iterations(), run_dense, run_sparse, dense_s, sparse_s);
    benchmark::DoNotOptimize(y.data());
    state.SetIterationTime(t);
  }
  const double n = static_cast<double>(state.iterations());
  const double row_b = static_cast<double>(row_bytes(dtype_traits<T>::type, cols));
  const double read = row_b * static_cast<double>(a >= 1.0 ? rows : kept.size());
  const double gbps = read * n / sparse_s / 1e9;
  const double speedup = dense_s / sparse_s;
  const double ideal = static_cast<double>(rows) / static_cast<double>(a >= 1.0 ? rows : kept.size());
  state.counters["gbps"] = gbps;
  state.counters["pct_of_read"] = actsparse_bench::pct_of_read(gbps, static_cast<unsigned>(state.range(1)));
  state.counters["speedup"] = speedup;
  state.counters["ideal"] = ideal;
  state.counters["pct_of_ideal"] = speedup / ideal;
}

// The compute ceiling: the dense call on the first 2048 rows of a matrix (1024 for f32; 4.5
// MiB of q4_0 to 16 MiB of f32 or bf16) read again and again from the L3 cache, where memory
// does not bound it, with the work cut as from DRAM (GEMV: 64-row tasks; row axpy: two chunks
// of whole rows, except f32's one). In the same iterations, the dense call on the 11008-row
// matrices from DRAM (11008 / 2048 = 5 cached calls read about the bytes of one). Counters:
//   gbps              bytes / time of the cached calls
//   pct_of_read     gbps / the DRAM read bandwidth at the same thread count (below 1: the
//                     kernel's arithmetic, not memory, bounds it from DRAM too)
//   dram_gbps         bytes / time of the DRAM calls
//   dram_of_ceiling   dram_gbps / gbps (near 1: compute-bound from DRAM)
template <class T>
constexpr std::size_t cache_rows = sizeof(T) == 4 ? 1024 : 2048;

// The loop of both ceiling benchmarks: `dram` the 11008-row matrices, `cached` the small one.
template <bool Transposed>
void ceiling_loop(benchmark::State& state, const std::vector<weight_view>& dram, const weight_view& cached,
                  const cpu::weight_layouts* layouts = nullptr) {
  const std::size_t calls = rows / cached.rows;  // the bytes of one DRAM call, about
  dense_call<Transposed> dense_on(dram[0], static_cast<std::size_t>(state.range(0)), layouts);
  actsparse_bench::warm_up(dram.size(), [&](std::size_t i) { dense_on(dram[i]); });
  std::size_t next = 0;
  double dram_s = 0.0;
  double cached_s = 0.0;
  for (auto _ : state) {
    const weight_view d = dram[next];
    next = (next + 1) % dram.size();
    const auto run_dram = [&] { dense_on(d); };
    const auto run_cached = [&] {
      for (std::size_t c = 0; c < calls; ++c) dense_on(cached);
    };
    const double t = actsparse_bench::time_pair(state.iterations(), run_dram, run_cached, dram_s, cached_s);
    benchmark::DoNotOptimize(dense_on.y.data());
    state.SetIterationTime(t);
  }
  const double n = static_cast<double>(state.iterations());
  const double row_b = static_cast<double>(row_bytes(cached.type, cols));
  const double gbps = row_b * static_cast<double>(cached.rows * calls) * n / cached_s / 1e9;
  const double dram_gbps = row_b * static_cast<double>(rows) * n / dram_s / 1e9;
  state.counters["gbps"] = gbps;
  state.counters["pct_of_read"] = actsparse_bench::pct_of_read(gbps, static_cast<unsigned>(state.range(0)));
  state.counters["dram_gbps"] = dram_gbps;
  state.counters["dram_of_ceiling"] = dram_gbps / gbps;
}

template <class T, bool Transposed>
void BM_cpu_ceiling(benchmark::State& state) {
  const matrices<T>& w = weights<T>();
  const std::size_t per_row = cols / dtype_traits<T>::block_values;
  const std::vector<T> small(w.m[0].begin(), w.m[0].begin() + static_cast<std::ptrdiff_t>(cache_rows<T> * per_row));
  std::vector<weight_view> dram;
  for (const auto& m : w.m) dram.push_back(view_of(m));
  ceiling_loop<Transposed>(state, dram, matrix_view<const T>::packed(small.data(), cache_rows<T>, cols));
}

// The same for the GEMV from interleaved copies (cpu_gemv/<dtype>_x16/cache).
template <class T>
void BM_cpu_ceiling_interleaved(benchmark::State& state) {
  const interleaved_set<T>& w = interleaved_weights<T>();
  const weight_view cached = matrix_view<const T>::packed(w.cached.data(), interleaved_cache_rows, cols);
  std::vector<weight_view> dram;
  for (const auto& m : w.rowmajor.m) dram.push_back(view_of(m));
  ceiling_loop<false>(state, dram, cached, &w.layouts);
}

// The dense GEMV from the interleaved copies against the row-major one, interleaved in
// the same iterations: gbps and pct_of_read of the copies, rowmajor_gbps, and speedup =
// row-major time / interleaved time.
template <class T>
void BM_cpu_gemv_interleaved(benchmark::State& state) {
  const interleaved_set<T>& w = interleaved_weights<T>();
  const std::size_t count = w.rowmajor.m.size();
  dense_call<false> on(view_of(w.rowmajor.m[0]), static_cast<std::size_t>(state.range(0)), &w.layouts);
  actsparse_bench::warm_up(count, [&](std::size_t i) {
    on.without_copies(view_of(w.rowmajor.m[i]));
    on(view_of(w.rowmajor.m[i]));
  });
  std::size_t next = 0;
  double rowmajor_s = 0.0;
  double interleaved_s = 0.0;
  for (auto _ : state) {
    const weight_view r = view_of(w.rowmajor.m[next]);
    const weight_view c = view_of(w.rowmajor.m[(next + 1) % count]);
    next = (next + 2) % count;
    const double t = actsparse_bench::time_pair(
        state.iterations(), [&] { on.without_copies(r); }, [&] { on(c); }, rowmajor_s, interleaved_s);
    benchmark::DoNotOptimize(on.y.data());
    state.SetIterationTime(t);
  }
  const double bytes =
      static_cast<double>(row_bytes(dtype_traits<T>::type, cols) * rows) * static_cast<double>(state.iterations());
  const double gbps = bytes / interleaved_s / 1e9;
  state.counters["gbps"] = gbps;
  state.counters["pct_of_read"] = actsparse_bench::pct_of_read(gbps, static_cast<unsigned>(state.range(0)));
  state.counters["rowmajor_gbps"] = bytes / rowmajor_s / 1e9;
  state.counters["speedup"] = rowmajor_s / interleaved_s;
}

// Every row: manual time (the timed call only), at least 0.3 s, in milliseconds.
void timed_ms(benchmark::internal::Benchmark* b) { b->UseManualTime()->MinTime(0.3)->Unit(benchmark::kMillisecond); }

#define ACTSPARSE_CPU_GEMV_BENCH(T, label, threads)                  \
  BENCHMARK_TEMPLATE(BM_cpu_gemv, T, false)                          \
      ->Name("cpu_gemv/" label "/7b/t" #threads)                     \
      ->ArgNames({"a_pct", "threads"})                               \
      ->ArgsProduct({{100, 50, 25, 10}, {threads}})                  \
      ->Apply(timed_ms);                                             \
  BENCHMARK_TEMPLATE(BM_cpu_gemv, T, true)                           \
      ->Name("cpu_input_sparse_linear/" label "/7b_down/t" #threads) \
      ->ArgNames({"a_pct", "threads"})                               \
      ->ArgsProduct({{100, 75, 50, 25}, {threads}})                  \
      ->Apply(timed_ms);                                             \
  BENCHMARK_TEMPLATE(BM_cpu_ceiling, T, false)                       \
      ->Name("cpu_gemv/" label "/cache/t" #threads)                  \
      ->ArgNames({"threads"})                                        \
      ->Arg(threads)                                                 \
      ->Apply(timed_ms);                                             \
  BENCHMARK_TEMPLATE(BM_cpu_ceiling, T, true)                        \
      ->Name("cpu_input_sparse_linear/" label "/cache/t" #threads)   \
      ->ArgNames({"threads"})                                        \
      ->Arg(threads)                                                 \
      ->Apply(timed_ms)

ACTSPARSE_CPU_GEMV_BENCH(float, "f32", 1);
ACTSPARSE_CPU_GEMV_BENCH(f16, "f16", 1);
ACTSPARSE_CPU_GEMV_BENCH(bf16, "bf16", 1);
ACTSPARSE_CPU_GEMV_BENCH(float, "f32", 2);
ACTSPARSE_CPU_GEMV_BENCH(f16, "f16", 2);
ACTSPARSE_CPU_GEMV_BENCH(bf16, "bf16", 2);

#define ACTSPARSE_CPU_INTERLEAVED_BENCH(T, label, threads) \
  BENCHMARK_TEMPLATE(BM_cpu_gemv_interleaved, T)           \
      ->Name("cpu_gemv/" label "_x16/7b/t" #threads)       \
      ->Arg(threads)                                       \
      ->Apply(timed_ms);                                   \
  BENCHMARK_TEMPLATE(BM_cpu_ceiling_interleaved, T)        \
      ->Name("cpu_gemv/" label "_x16/cache/t" #threads)    \
      ->Arg(threads)                                       \
      ->Apply(timed_ms)

// The block types: the rows above, and those of the interleaved copies.
#define ACTSPARSE_CPU_QUANT_BENCH(T, label, threads) \
  ACTSPARSE_CPU_GEMV_BENCH(T, label, threads);       \
  ACTSPARSE_CPU_INTERLEAVED_BENCH(T, label, threads)

ACTSPARSE_CPU_QUANT_BENCH(block_q8_0, "q8_0", 1);
ACTSPARSE_CPU_QUANT_BENCH(block_q4_0, "q4_0", 1);
ACTSPARSE_CPU_QUANT_BENCH(block_q8_0, "q8_0", 2);
ACTSPARSE_CPU_QUANT_BENCH(block_q4_0, "q4_0", 2);

}  // namespace

int main(int argc, char** argv) { return actsparse_bench::run_benchmarks_with_read_bandwidth(argc, argv); }
