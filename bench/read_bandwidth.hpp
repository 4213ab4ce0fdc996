#pragma once
// The machine's main-memory read bandwidth, measured in the benchmark program itself so that
// every row can say how close it came to it (pct_of_stream). A GEMV reads several weight rows
// at once, and one stream per thread underestimates what that gets (by about a third on a
// Zen 5), so the measurement reads `read_streams` interleaved streams per thread.
//
//   register_read_bandwidth_benchmarks()  rows BM_read_bandwidth/t1 and /t2 (counter gbps)
//   measure_read_bandwidth_at_start()     fills the cache below once, prints it; call in main
//   read_gbps(threads)                    the cached figure (measured on first use if need be)
//   run_benchmarks_with_read_bandwidth()  a main() that does all of that
//
// Large data shares one slot (large_dataset): the host is shared, so a program keeps one big
// buffer alive at a time, never the bandwidth buffer and every weight set together.

#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#if defined(__unix__)
#include <unistd.h>
#endif

namespace actsparse_bench {

inline constexpr std::size_t mib = std::size_t{1} << 20;
inline constexpr std::size_t gib = std::size_t{1} << 30;

// Bytes a benchmark must stream through so the last-level cache cannot serve it: at least
// 256 MiB, and twice the L3 where the L3 is larger (some servers have 260 MiB); at most 1 GiB.
[[nodiscard]] inline std::size_t streaming_bytes() noexcept {
  std::size_t l3 = 0;
#if defined(_SC_LEVEL3_CACHE_SIZE)
  const long reported = ::sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (reported > 0) l3 = static_cast<std::size_t>(reported);
#endif
  return std::clamp(2 * l3, 256 * mib, gib);
}

// The one large data set alive in this process: asking for another key frees the current one
// first, so a reference from get() is valid until the next get() with another key (read_gbps
// measuring late is one). Benchmarks run one family after another: each set is built once.
class large_dataset {
 public:
  template <class T, class Make>
  static const T& get(const std::string& key, Make&& make) {
    slot& s = instance();
    const std::lock_guard<std::mutex> lock(s.mutex);
    if (s.key != key || !s.data) {
      s.data.reset();  // free before building: the peak holds one set, not two
      s.key = key;
      s.data = std::make_shared<const T>(make());
    }
    return *static_cast<const T*>(s.data.get());
  }

 private:
  struct slot {
    std::mutex mutex;
    std::string key;
    std::shared_ptr<const void> data;
  };
  static slot& instance() {
    static slot s;
    return s;
  }
};

inline constexpr std::size_t read_streams = 8;             // rows read at once per thread, as a GEMV does
inline constexpr std::size_t stream_lanes = 16;            // floats per stream per step: one cache line
inline constexpr std::size_t bytes_per_measurement = gib;  // at least this much read per measurement
inline constexpr int calibration_measurements = 5;         // read_gbps is the fastest of them

namespace detail {

// Σ p[0 .. n) as `read_streams` streams side by side (n a multiple of read_streams·stream_lanes).
// Each stream has stream_lanes accumulators: vertical adds only, so the compiler vectorises it
// without reassociating anything.
[[nodiscard]] inline float sum_streams(const float* p, std::size_t n) noexcept {
  const std::size_t per_stream = n / read_streams;
  std::array<std::array<float, stream_lanes>, read_streams> acc{};
  for (std::size_t i = 0; i < per_stream; i += stream_lanes) {
    for (std::size_t s = 0; s < read_streams; ++s) {
      const float* row = p + s * per_stream + i;
      for (std::size_t k = 0; k < stream_lanes; ++k) acc[s][k] += row[k];
    }
  }
  float total = 0.0F;
  for (const auto& a : acc) {
    for (const float v : a) total += v;
  }
  return total;
}

// `passes` sums over `share`; every pass is opaque to the optimiser, so none is merged or elided.
inline void read_share(std::span<const float> share, std::size_t passes, float& result) noexcept {
  float total = 0.0F;
  for (std::size_t pass = 0; pass < passes; ++pass) {
    const float* p = share.data();
    benchmark::DoNotOptimize(p);
    float s = sum_streams(p, share.size());
    benchmark::DoNotOptimize(s);
    total += s;
  }
  result = total;
}

}  // namespace detail

// The buffer read by the bandwidth measurement: streaming_bytes() of floats, written once.
[[nodiscard]] inline std::span<const float> bandwidth_buffer() {
  const auto& buffer = large_dataset::get<std::vector<float>>("read_bandwidth", [] {
    constexpr std::size_t granule = 2 * read_streams * stream_lanes;  // splits evenly for 1 and 2 threads
    const std::size_t n = streaming_bytes() / sizeof(float) / granule * granule;
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i % 251) * 0.00390625F;  // small, exact
    return v;
  });
  return buffer;
}

// Passes over the buffer that make one measurement read at least bytes_per_measurement.
[[nodiscard]] inline std::size_t passes_per_measurement(std::span<const float> buffer) noexcept {
  const std::size_t bytes = buffer.size_bytes();
  return (bytes_per_measurement + bytes - 1) / bytes;
}

// Seconds `threads` threads take to read the buffer `passes` times, thread t summing the fixed
// t-th share. The calling thread reads share 0; the others are std::threads, joined (blocking).
[[nodiscard]] inline double time_read(std::span<const float> buffer, unsigned threads, std::size_t passes) {
  threads = std::max(threads, 1U);
  const std::size_t share = buffer.size() / threads;
  std::vector<float> results(threads, 0.0F);
  std::vector<std::thread> workers;
  workers.reserve(threads - 1);
  const auto start = std::chrono::steady_clock::now();
  for (unsigned t = 1; t < threads; ++t) {
    workers.emplace_back(detail::read_share, buffer.subspan(t * share, share), passes, std::ref(results[t]));
  }
  detail::read_share(buffer.first(share), passes, results[0]);
  for (std::thread& w : workers) w.join();
  const auto stop = std::chrono::steady_clock::now();
  float sum = 0.0F;
  for (const float r : results) sum += r;
  benchmark::DoNotOptimize(sum);
  return std::chrono::duration<double>(stop - start).count();
}

// Bytes read by time_read with that many passes (the threads' shares together).
[[nodiscard]] inline double bytes_read(std::span<const float> buffer, unsigned threads, std::size_t passes) noexcept {
  const std::size_t share = buffer.size() / std::max(threads, 1U);
  return static_cast<double>(share * std::max(threads, 1U) * sizeof(float)) * static_cast<double>(passes);
}

// The fastest of `count` measurements, in GB/s (1e9 bytes per second): what the machine can
// do. The host is shared; a slow measurement is another process taking the memory system,
// never the memory reading faster than it can, so the maximum (not the median) is the roofline.
[[nodiscard]] inline double measure_read_gbps(unsigned threads, int count = calibration_measurements) {
  const std::span<const float> buffer = bandwidth_buffer();
  const std::size_t passes = passes_per_measurement(buffer);
  std::vector<double> gbps;
  for (int i = 0; i < count; ++i) {
    gbps.push_back(bytes_read(buffer, threads, passes) / time_read(buffer, threads, passes) / 1e9);
  }
  std::sort(gbps.begin(), gbps.end());
  return gbps.back();
}

namespace detail {

inline constexpr unsigned max_cached_threads = 2;

struct bandwidth_cache {
  std::mutex mutex;
  std::array<double, max_cached_threads + 1> gbps{};  // [threads], 0 = not measured yet
};

inline bandwidth_cache& cache() {
  static bandwidth_cache c;
  return c;
}

}  // namespace detail

// The read bandwidth of this process for 1 or 2 threads (GB/s), measured once and kept. Other
// thread counts are clamped to that range. Call measure_read_bandwidth_at_start() before any
// benchmark: a first call here would measure mid-run and swap out the current large_dataset.
[[nodiscard]] inline double read_gbps(unsigned threads) {
  threads = std::clamp(threads, 1U, detail::max_cached_threads);
  detail::bandwidth_cache& c = detail::cache();
  const std::lock_guard<std::mutex> lock(c.mutex);
  if (c.gbps[threads] == 0.0) c.gbps[threads] = measure_read_gbps(threads);
  return c.gbps[threads];
}

// gbps / read_gbps(threads), a ratio (1.0 = the roofline): how much of the measured read bandwidth a row reached.
[[nodiscard]] inline double pct_of_stream(double gbps, unsigned threads) { return gbps / read_gbps(threads); }

// Measures the cached figures now (before any benchmark runs), prints them to stderr and adds
// them to the report's context (read_bandwidth_t1_gbps, read_bandwidth_t2_gbps).
inline void measure_read_bandwidth_at_start() {
  const std::span<const float> buffer = bandwidth_buffer();
  for (unsigned t = 1; t <= detail::max_cached_threads; ++t) {
    const double gbps = read_gbps(t);
    char line[48];
    std::snprintf(line, sizeof line, "%.2f", gbps);
    benchmark::AddCustomContext("read_bandwidth_t" + std::to_string(t) + "_gbps", line);
  }
  std::fprintf(stderr,
               "read bandwidth (%zu MiB buffer, %zu streams per thread, fastest of %d reads of %.2f GB): "
               "t1 %.1f GB/s, t2 %.1f GB/s\n",
               buffer.size_bytes() / mib, read_streams, calibration_measurements,
               bytes_read(buffer, 1, passes_per_measurement(buffer)) / 1e9, read_gbps(1), read_gbps(2));
}

// BM_read_bandwidth/t<threads>: one iteration is one measurement (≥ 1 GiB read); counter gbps.
inline void read_bandwidth_benchmark(benchmark::State& state, unsigned threads) {
  const std::span<const float> buffer = bandwidth_buffer();
  const std::size_t passes = passes_per_measurement(buffer);
  const double bytes = bytes_read(buffer, threads, passes);
  (void)time_read(buffer, threads, 1);  // an untimed first pass (see warm_up in harness.hpp)
  double seconds = 0.0;
  for (auto _ : state) {
    const double s = time_read(buffer, threads, passes);
    state.SetIterationTime(s);
    seconds += s;
  }
  const double total = bytes * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(total));
  state.counters["gbps"] = total / seconds / 1e9;
  state.counters["threads"] = threads;
}

// Registers BM_read_bandwidth/t1 and /t2 (once per process).
inline bool register_read_bandwidth_benchmarks() {
  static const bool registered = [] {
    for (unsigned threads = 1; threads <= detail::max_cached_threads; ++threads) {
      const std::string name = "BM_read_bandwidth/t" + std::to_string(threads);
      benchmark::RegisterBenchmark(name.c_str(),
                                   [threads](benchmark::State& state) { read_bandwidth_benchmark(state, threads); })
          ->UseManualTime()
          ->MinTime(0.5)
          ->Unit(benchmark::kMillisecond);
    }
    return true;
  }();
  return registered;
}

namespace detail {

// Whether the command line only lists the benchmarks (then nothing is measured).
[[nodiscard]] inline bool lists_only(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--benchmark_list_tests" || arg == "--benchmark_list_tests=true" || arg == "--benchmark_list_tests=1") {
      return true;
    }
  }
  return false;
}

}  // namespace detail

// A whole main(): flags, the bandwidth measured at start, then every registered benchmark.
inline int run_benchmarks_with_read_bandwidth(int argc, char** argv) {
  const bool list_only = detail::lists_only(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (!list_only) measure_read_bandwidth_at_start();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace actsparse_bench
