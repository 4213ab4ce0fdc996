#pragma once
// The machine's main-memory read bandwidth, measured in the benchmark program itself so that
// every row can say how close it came to it (pct_of_read: gbps / read_gbps). One read
// pattern underestimates the machine (a single stream per thread by about a third on a Zen 5,
// eight interleaved streams without prefetch by 15-20%), so the probe times several patterns
// over a 1 GiB buffer and read_gbps is the fastest:
//
//   streams   1, 4 or 8 contiguous streams side by side per thread (a GEMV reads rows at once)
//   _pf       a software prefetch 1 KiB ahead in every stream
//   _huge     the buffer advised for transparent huge pages (only where the kernel allows it)
//
//   register_read_bandwidth_benchmarks()  rows BM_read_bandwidth/<pattern>/t1 and /t2 (gbps)
//   measure_read_bandwidth_at_start()     times every pattern once, prints them; call in main
//   read_gbps(threads)                    the fastest pattern's figure (measured on first use)
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
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#if defined(__unix__)
#include <unistd.h>
#endif
#if defined(__linux__)
#include <sys/mman.h>
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

inline constexpr std::size_t stream_lanes = 16;            // floats per stream per step: one cache line
inline constexpr std::size_t prefetch_floats = 256;        // the software prefetch distance: 1 KiB
inline constexpr std::size_t read_buffer_bytes = gib;      // the buffer every pattern reads
inline constexpr std::size_t bytes_per_measurement = gib;  // at least this much read per measurement
inline constexpr int calibration_measurements = 3;         // each pattern's figure is the fastest of them
inline constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;

// One way of reading the buffer: `streams` contiguous streams side by side per thread, with or
// without a software prefetch, from 4 KiB or transparent huge pages.
struct read_pattern {
  std::size_t streams = 8;
  bool prefetch = false;
  bool huge_pages = false;
  [[nodiscard]] std::string name() const {
    char n[32];
    std::snprintf(n, sizeof n, "s%zu%s%s", streams, prefetch ? "_pf" : "", huge_pages ? "_huge" : "");
    return n;
  }
};

// Every pattern the probe times, 4 KiB pages first.
[[nodiscard]] inline std::vector<read_pattern> read_patterns() {
  std::vector<read_pattern> patterns;
  for (const bool huge : {false, true}) {
    for (const std::size_t streams : {std::size_t{1}, std::size_t{4}, std::size_t{8}}) {
      for (const bool prefetch : {false, true}) patterns.push_back({streams, prefetch, huge});
    }
  }
  return patterns;
}

namespace detail {

// Σ p[0 .. n) as Streams contiguous streams side by side (n a multiple of Streams·stream_lanes).
// Each stream has stream_lanes accumulators: vertical adds only, so the compiler vectorises it
// without reassociating anything. Prefetch: each stream asks for the line 1 KiB ahead of it.
template <std::size_t Streams, bool Prefetch>
[[nodiscard]] float sum_streams(const float* p, std::size_t n) noexcept {
  const std::size_t per_stream = n / Streams;
  std::array<std::array<float, stream_lanes>, Streams> acc{};
  for (std::size_t i = 0; i < per_stream; i += stream_lanes) {
    for (std::size_t s = 0; s < Streams; ++s) {
      const float* row = p + s * per_stream + i;
      if constexpr (Prefetch) __builtin_prefetch(row + prefetch_floats, 0, 3);
      for (std::size_t k = 0; k < stream_lanes; ++k) acc[s][k] += row[k];
    }
  }
  float total = 0.0F;
  for (const auto& a : acc) {
    for (const float v : a) total += v;
  }
  return total;
}

[[nodiscard]] inline float sum_pattern(const read_pattern& pattern, const float* p, std::size_t n) noexcept {
  switch (pattern.streams) {
    case 1:
      return pattern.prefetch ? sum_streams<1, true>(p, n) : sum_streams<1, false>(p, n);
    case 4:
      return pattern.prefetch ? sum_streams<4, true>(p, n) : sum_streams<4, false>(p, n);
    default:
      return pattern.prefetch ? sum_streams<8, true>(p, n) : sum_streams<8, false>(p, n);
  }
}

// `passes` sums over `share`; every pass is opaque to the optimiser, so none is merged or elided.
inline void read_share(read_pattern pattern, std::span<const float> share, std::size_t passes, float& result) noexcept {
  float total = 0.0F;
  for (std::size_t pass = 0; pass < passes; ++pass) {
    benchmark::ClobberMemory();  // the buffer may have changed: every pass reads it again
    float s = sum_pattern(pattern, share.data(), share.size());
    benchmark::DoNotOptimize(s);
    total += s;
  }
  result = total;
}

// Whether the kernel gives transparent huge pages to a region that asks (madvise or always).
[[nodiscard]] inline bool transparent_huge_pages_allowed() {
#if defined(__linux__)
  std::FILE* f = std::fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
  if (f == nullptr) return false;
  char line[128] = {};
  const bool read = std::fgets(line, sizeof line, f) != nullptr;
  std::fclose(f);
  const std::string_view mode = read ? std::string_view(line) : std::string_view();
  return mode.find("[always]") != std::string_view::npos || mode.find("[madvise]") != std::string_view::npos;
#else
  return false;
#endif
}

}  // namespace detail

// A buffer of floats, aligned to 2 MiB; advised for transparent huge pages when asked (before
// its pages are touched, so the first touch faults in huge pages where the kernel has them).
class read_buffer {
 public:
  read_buffer(std::size_t floats, bool huge_pages) : size_(floats) {
    const std::size_t bytes = (floats * sizeof(float) + huge_page_bytes - 1) / huge_page_bytes * huge_page_bytes;
    data_.reset(static_cast<float*>(std::aligned_alloc(huge_page_bytes, bytes)));
    if (!data_) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (huge_pages) huge_ = ::madvise(data_.get(), bytes, MADV_HUGEPAGE) == 0;
#else
    (void)huge_pages;
#endif
    for (std::size_t i = 0; i < floats; ++i)
      data_.get()[i] = static_cast<float>(i % 251) * 0.00390625F;  // small, exact
  }
  [[nodiscard]] std::span<const float> floats() const noexcept { return {data_.get(), size_}; }
  [[nodiscard]] bool huge_pages() const noexcept { return huge_; }

 private:
  struct free_deleter {
    void operator()(float* p) const noexcept { std::free(p); }
  };
  std::unique_ptr<float, free_deleter> data_;
  std::size_t size_ = 0;
  bool huge_ = false;
};

// The buffer read by the bandwidth measurement: read_buffer_bytes of floats, written once.
[[nodiscard]] inline std::span<const float> bandwidth_buffer(bool huge_pages = false) {
  const auto& buffer =
      large_dataset::get<read_buffer>(huge_pages ? "read_bandwidth_huge" : "read_bandwidth", [huge_pages] {
        constexpr std::size_t granule = 2 * 8 * stream_lanes;  // splits evenly for 1 and 2 threads, 8 streams
        return read_buffer(read_buffer_bytes / sizeof(float) / granule * granule, huge_pages);
      });
  return buffer.floats();
}

// Passes over the buffer that make one measurement read at least bytes_per_measurement.
[[nodiscard]] inline std::size_t passes_per_measurement(std::span<const float> buffer) noexcept {
  const std::size_t bytes = buffer.size_bytes();
  return (bytes_per_measurement + bytes - 1) / bytes;
}

// Seconds `threads` threads take to read the buffer `passes` times in `pattern`, thread t
// summing the fixed t-th share. The calling thread reads share 0; the others are std::threads.
[[nodiscard]] inline double time_read(const read_pattern& pattern, std::span<const float> buffer, unsigned threads,
                                      std::size_t passes) {
  threads = std::max(threads, 1U);
  const std::size_t share = buffer.size() / threads;
  std::vector<float> results(threads, 0.0F);
  std::vector<std::thread> workers;
  workers.reserve(threads - 1);
  const auto start = std::chrono::steady_clock::now();
  for (unsigned t = 1; t < threads; ++t) {
    workers.emplace_back(detail::read_share, pattern, buffer.subspan(t * share, share), passes, std::ref(results[t]));
  }
  detail::read_share(pattern, buffer.first(share), passes, results[0]);
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

namespace detail {

inline constexpr unsigned max_cached_threads = 2;

// Each pattern's fastest figure per thread count, and whether the huge-page buffer got them.
struct bandwidth_cache {
  std::mutex mutex;
  bool measured = false;
  bool huge_pages = false;
  std::vector<std::pair<read_pattern, std::array<double, max_cached_threads + 1>>> patterns;
  std::array<double, max_cached_threads + 1> best{};  // [threads]: the fastest pattern
};

inline bandwidth_cache& cache() {
  static bandwidth_cache c;
  return c;
}

// The fastest of `count` measurements of one pattern, in GB/s (1e9 bytes per second): the
// host is shared, and a slow measurement is another process taking the memory system, never
// the memory reading faster than it can, so the maximum (not the median) is the roofline.
[[nodiscard]] inline double fastest_gbps(const read_pattern& pattern, std::span<const float> buffer, unsigned threads,
                                         int count) {
  const std::size_t passes = passes_per_measurement(buffer);
  (void)time_read(pattern, buffer, threads, 1);  // an untimed first pass
  double best = 0.0;
  for (int i = 0; i < count; ++i) {
    best = std::max(best, bytes_read(buffer, threads, passes) / time_read(pattern, buffer, threads, passes) / 1e9);
  }
  return best;
}

// Times every pattern at 1 and 2 threads into the cache (the caller holds its mutex). The
// huge-page patterns are timed only where the kernel allows transparent huge pages.
inline void measure_patterns(bandwidth_cache& c) {
  const bool huge_allowed = transparent_huge_pages_allowed();
  for (const read_pattern& pattern : read_patterns()) {
    if (pattern.huge_pages && !huge_allowed) continue;
    const std::span<const float> buffer = bandwidth_buffer(pattern.huge_pages);
    std::array<double, max_cached_threads + 1> gbps{};
    for (unsigned t = 1; t <= max_cached_threads; ++t) {
      gbps[t] = fastest_gbps(pattern, buffer, t, calibration_measurements);
      c.best[t] = std::max(c.best[t], gbps[t]);
    }
    c.patterns.emplace_back(pattern, gbps);
  }
  c.huge_pages = huge_allowed;
  c.measured = true;
}

}  // namespace detail

// The machine's read bandwidth for 1 or 2 threads (GB/s): the fastest read pattern, measured
// once and kept. Other thread counts are clamped to that range. Call
// measure_read_bandwidth_at_start() before any benchmark: a first call here would measure
// mid-run and swap out the current large_dataset.
[[nodiscard]] inline double read_gbps(unsigned threads) {
  threads = std::clamp(threads, 1U, detail::max_cached_threads);
  detail::bandwidth_cache& c = detail::cache();
  const std::lock_guard<std::mutex> lock(c.mutex);
  if (!c.measured) detail::measure_patterns(c);
  return c.best[threads];
}

// gbps / read_gbps(threads), a ratio (1.0 = the roofline): how much of the measured read bandwidth a row reached.
[[nodiscard]] inline double pct_of_read(double gbps, unsigned threads) { return gbps / read_gbps(threads); }

// Measures every pattern now (before any benchmark runs), prints them to stderr and adds them
// to the report's context: read_bandwidth_t<threads>_gbps (the fastest) and
// read_bandwidth_<pattern>_t<threads>_gbps.
inline void measure_read_bandwidth_at_start() {
  (void)read_gbps(1);
  detail::bandwidth_cache& c = detail::cache();
  const std::lock_guard<std::mutex> lock(c.mutex);
  const auto add = [](const std::string& key, double gbps) {
    char value[48];
    std::snprintf(value, sizeof value, "%.2f", gbps);
    benchmark::AddCustomContext(key, value);
  };
  std::fprintf(stderr, "read bandwidth (GB/s, fastest of %d reads of %.2f GB over a %zu MiB buffer%s):\n",
               calibration_measurements, static_cast<double>(bytes_per_measurement) / 1e9, read_buffer_bytes / mib,
               c.huge_pages ? "" : "; no transparent huge pages here");
  for (const auto& [pattern, gbps] : c.patterns) {
    std::fprintf(stderr, "  %-12s t1 %5.1f  t2 %5.1f\n", pattern.name().c_str(), gbps[1], gbps[2]);
    for (unsigned t = 1; t <= detail::max_cached_threads; ++t) {
      add("read_bandwidth_" + pattern.name() + "_t" + std::to_string(t) + "_gbps", gbps[t]);
    }
  }
  std::fprintf(stderr, "  read_gbps    t1 %5.1f  t2 %5.1f (the fastest pattern)\n", c.best[1], c.best[2]);
  for (unsigned t = 1; t <= detail::max_cached_threads; ++t) {
    add("read_bandwidth_t" + std::to_string(t) + "_gbps", c.best[t]);
  }
}

// BM_read_bandwidth/<pattern>/t<threads>: one iteration is one measurement (≥ 1 GiB read); counter gbps.
inline void read_bandwidth_benchmark(benchmark::State& state, const read_pattern& pattern, unsigned threads) {
  const std::span<const float> buffer = bandwidth_buffer(pattern.huge_pages);
  const std::size_t passes = passes_per_measurement(buffer);
  const double bytes = bytes_read(buffer, threads, passes);
  (void)time_read(pattern, buffer, threads, 1);  // an untimed first pass (see warm_up in harness.hpp)
  double seconds = 0.0;
  for (auto _ : state) {
    const double s = time_read(pattern, buffer, threads, passes);
    state.SetIterationTime(s);
    seconds += s;
  }
  const double total = bytes * static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<std::int64_t>(total));
  state.counters["gbps"] = total / seconds / 1e9;
  state.counters["threads"] = threads;
}

// Registers BM_read_bandwidth/<pattern>/t1 and /t2 for every pattern (once per process).
inline bool register_read_bandwidth_benchmarks() {
  static const bool registered = [] {
    const bool huge_allowed = detail::transparent_huge_pages_allowed();
    for (const read_pattern& pattern : read_patterns()) {
      if (pattern.huge_pages && !huge_allowed) continue;
      for (unsigned threads = 1; threads <= detail::max_cached_threads; ++threads) {
        const std::string name = "BM_read_bandwidth/" + pattern.name() + "/t" + std::to_string(threads);
        benchmark::RegisterBenchmark(
            name.c_str(),
            [pattern, threads](benchmark::State& state) { read_bandwidth_benchmark(state, pattern, threads); })
            ->UseManualTime()
            ->MinTime(0.5)
            ->Unit(benchmark::kMillisecond);
      }
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
