// Decode attention over a KV cache held in each row format (cpu_backend, attention_args): one
// query of 32 heads × 128 against 4K, 16K and 32K positions, multi-head (32 KV heads) and
// grouped-query (8 KV heads), the cache uniform in one format, 1 and 2 threads.
// Counters:
//   gbps, pct_of_read   cache bytes read (K and V rows, scales included) / time, and over the
//                         read bandwidth measured in this process
//   speedup_vs_f32        the same call on an f32 cache of the same values, timed alternately in
//                         the same benchmark / this call's time
//   bytes_vs_f32          the cache's bytes over the f32 cache's: time should follow it
//   mb                    the cache's size (MB)
//   ns_per_position       time / positions; at ctx:64 the cache stays in the L2 / L3, so this
//                         is the kernels' compute rate per position: the ceiling a long
//                         context cannot beat whatever the bandwidth
#include "harness.hpp"
#include "read_bandwidth.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/managers/row_codec.hpp>
#include <actsparse/ops/run.hpp>

#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace {

using namespace actsparse;
using namespace actsparse_bench;

constexpr std::size_t heads = 32;
constexpr std::size_t head_dim = 128;

// positions K and V rows of d values in one format, in one allocation (as a store's slab).
struct kv_cache {
  std::unique_ptr<std::byte[]> slab;
  std::vector<row_ref> k, v;
  std::size_t bytes = 0;

  kv_cache(std::size_t positions, std::size_t d, row_format f) {
    const std::size_t rb = row_bytes(f, d);
    bytes = 2 * positions * rb;
    slab = std::make_unique<std::byte[]>(bytes);
    std::vector<float> x(d);
    std::uint64_t state = 0x9E3779B97F4A7C15ULL;
    for (std::size_t p = 0; p < positions; ++p) {
      for (int kv = 0; kv < 2; ++kv) {
        for (float& e : x) {  // a cheap generator: values in [-2, 2), the same for every format
          state = state * 6364136223846793005ULL + 1442695040888963407ULL;
          e = static_cast<float>(state >> 40) / static_cast<float>(1ULL << 24) * 4.0F - 2.0F;
        }
        std::byte* row = slab.get() + (2 * p + kv) * rb;
        encode_row(f, x, row);
        (kv == 0 ? k : v).push_back(row_ref{f, row});
      }
    }
  }
};

void BM_attention(benchmark::State& state, std::size_t positions, std::size_t kv_heads, row_format f) {
  const auto threads = static_cast<std::size_t>(state.range(0));
  const std::size_t d = kv_heads * head_dim;
  const kv_cache cache(positions, d, f);
  const kv_cache base(f == row_format::f32 ? 0 : positions, d, row_format::f32);
  const kv_cache& f32 = f == row_format::f32 ? cache : base;
  const std::vector<float> q = random_floats(heads * head_dim, 1.0F, 7);
  std::vector<float> out(heads * head_dim);
  cpu::thread_pool pool(threads);
  cpu::executor ex(pool);
  const cpu_backend backend;
  std::vector<std::byte> ws;
  const float scale = 1.0F / std::sqrt(static_cast<float>(head_dim));
  const auto call = [&](const kv_cache& c) {
    const attention_args a{q, c.k, c.v, heads, kv_heads, head_dim, scale, out, {}};
    if (!run(backend, a, ws, ex)) state.SkipWithError("attention failed");
  };
  call(cache);  // untimed first passes
  call(f32);
  double cand = 0.0;
  double baseline = 0.0;
  for (auto _ : state) {
    const double t = f == row_format::f32
                         ? seconds([&] { call(cache); })
                         : time_pair(
                               state.iterations(), [&] { call(f32); }, [&] { call(cache); }, baseline, cand);
    if (f == row_format::f32) cand += t;
    state.SetIterationTime(t);
  }
  const double n = static_cast<double>(state.iterations());
  const double gbps = static_cast<double>(cache.bytes) * n / cand / 1e9;
  state.counters["gbps"] = gbps;
  state.counters["pct_of_read"] = pct_of_read(gbps, static_cast<unsigned>(threads));
  state.counters["speedup_vs_f32"] = f == row_format::f32 ? 1.0 : baseline / cand;
  state.counters["bytes_vs_f32"] = static_cast<double>(cache.bytes) / static_cast<double>(f32.bytes);
  state.counters["mb"] = static_cast<double>(cache.bytes) / 1e6;
  state.counters["ns_per_position"] = cand / n / static_cast<double>(positions) * 1e9;
}

void register_all() {
  for (const std::size_t kv : {std::size_t{8}, heads}) {
    for (const std::size_t ctx : {std::size_t{64}, std::size_t{4096}, std::size_t{16384}, std::size_t{32768}}) {
      for (const row_format f : {row_format::f32, row_format::f16, row_format::int8_g32, row_format::int4_g32}) {
        for (const int t : {1, 2}) {
          std::string label = "attention/";  // appends: GCC 12 warns falsely (-Wrestrict) on + chains
          label.append(kv == heads ? "mha" : "gqa8").append("/ctx:").append(std::to_string(ctx));
          label.append("/").append(name(f)).append("/t").append(std::to_string(t));
          benchmark::RegisterBenchmark(label.c_str(),
                                       [ctx, kv, f](benchmark::State& st) { BM_attention(st, ctx, kv, f); })
              ->Arg(t)
              ->UseManualTime()
              ->MinTime(0.3)
              ->Unit(benchmark::kMillisecond);
        }
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  register_read_bandwidth_benchmarks();
  register_all();
  measure_read_bandwidth_at_start();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
