// The MoE layer (moe_ffn on the CPU backend) at real MoE shapes, random weights streamed from
// DRAM, router logits drawn skewed (a few popular experts, as trained routers have):
//   mixtral   Mixtral-8x7B        8 experts, top-2, d_model 4096, d_ff 14336
//   qwen3     Qwen3-30B-A3B     128 experts, top-8, d_model 2048, d_ff 768
//   dsv2lite  DeepSeek-V2-Lite   64 routed + 2 shared (one FFN of d_ff 2816), top-6, 2048 / 1408
// in q4_0 and bf16, at 1 and 2 threads.
//
// moe_decode/<dtype>/<shape>/t<n>: one token per call, the whole op (route + experts +
// combine), fixed native k and the adaptive count (adaptive_top_k, mass 0.5: buckets (1, 2)
// for top-2, (3, 4, 5, 6) otherwise) on the same tokens in the same iterations. Counters:
//   gbps, pct_of_read          expert bytes read by the fixed-k call / its time, and over the
//                                read bandwidth measured in this process
//   adaptive_gbps, adaptive_pct_of_read   the same for the adaptive call
//   experts, adaptive_experts    routed experts per token
//   us_per_expert                fixed time / native k
//   saved_us_per_expert          (fixed − adaptive time) / (experts not run): time follows the
//                                experts when it is close to us_per_expert
//   routing_pct                  route() alone (softmax, counts, table) over the fixed step
// moe_prefill/<dtype>/<shape>/tokens:<n>/t<t>: n tokens in one call (the grouped path: each
// expert's rows read once for all its tokens) against the per-token loop (each pair a dense
// decode FFN, then the combine), timed on the first 32 tokens and scaled to n (each token is
// independent, so its time is linear in n). Counters:
//   gflops            2·3·d_model·d_ff FLOPs per (token, expert) pair (+ shared) / grouped time
//   loop_gflops       the same over the per-token loop's time
//   speedup           per-token loop time / grouped time
//   pct_of_ceiling    gflops / the GEMV kernel's rate on cache-resident weights (moe_ceiling)
//   routing_pct       route() over the grouped call
// moe_ceiling/<dtype>/t<n>: the compute ceiling of the kernels the grouped path runs: the dense
// GEMV over a [768 x 2048] matrix that stays in the L2/L3, called again and again (gflops), and
// fma_gflops: independent vector FMAs in registers (the core's f32 FMA peak with the widest
// vectors the CPU has).
#include "harness.hpp"
#include "read_bandwidth.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/core/routing.hpp>
#include <actsparse/ops/moe_ffn.hpp>
#include <actsparse/ops/moe_router.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace actsparse;
using namespace actsparse_bench;

struct moe_shape {
  const char* label;
  std::size_t experts, k, d_model, d_ff, shared_d_ff;
};
constexpr moe_shape mixtral{"mixtral", 8, 2, 4096, 14336, 0};
constexpr moe_shape qwen3{"qwen3", 128, 8, 2048, 768, 0};
constexpr moe_shape dsv2lite{"dsv2lite", 64, 6, 2048, 1408, 2816};

template <class T>
std::vector<T> quantized(std::size_t rows, std::size_t cols, float scale, std::uint64_t seed) {
  const std::vector<float> v = random_floats(rows * cols, scale, seed);
  const std::size_t bv = block_values(dtype_traits<T>::type);
  std::vector<T> out(rows * cols / bv);
  for (std::size_t r = 0; r < rows; ++r) quantize_row(v.data() + r * cols, out.data() + r * cols / bv, cols);
  return out;
}

// One MoE layer's weights: every projection stacked; the experts are copies of one random expert
// (distinct memory, same values: only time is measured), the shared expert its own.
template <class T>
struct moe_layer {
  std::vector<T> gate, up, down_t;     // [experts x d_ff x d_model]
  std::vector<T> sgate, sup, sdown_t;  // shared: [shared_d_ff x d_model]
};

template <class T>
struct moe_set {
  moe_shape s;
  std::vector<moe_layer<T>> layers;  // enough copies that the routed experts come from DRAM
};

template <class T>
std::vector<T> stacked(const std::vector<T>& one, std::size_t copies) {
  std::vector<T> out(one.size() * copies);
  for (std::size_t e = 0; e < copies; ++e)
    std::copy(one.begin(), one.end(), out.begin() + static_cast<std::ptrdiff_t>(e * one.size()));
  return out;
}

template <class T>
std::size_t expert_bytes(const moe_shape& s) {
  return 3 * s.d_ff * row_bytes(dtype_traits<T>::type, s.d_model);
}

template <class T>
const moe_set<T>& weights(const moe_shape& s) {
  const std::string key = std::string("moe/") + std::string(name(dtype_traits<T>::type)) + "/" + s.label;
  return large_dataset::get<moe_set<T>>(key, [&] {
    const float sx = 1.0F / std::sqrt(static_cast<float>(s.d_model));
    const float sh = 1.0F / std::sqrt(static_cast<float>(s.d_ff));
    moe_layer<T> first;
    first.gate = stacked(quantized<T>(s.d_ff, s.d_model, sx, 1), s.experts);
    first.up = stacked(quantized<T>(s.d_ff, s.d_model, sx, 2), s.experts);
    first.down_t = stacked(quantized<T>(s.d_ff, s.d_model, sh, 3), s.experts);
    if (s.shared_d_ff > 0) {
      first.sgate = quantized<T>(s.shared_d_ff, s.d_model, sx, 4);
      first.sup = quantized<T>(s.shared_d_ff, s.d_model, sx, 5);
      first.sdown_t = quantized<T>(s.shared_d_ff, s.d_model, sh, 6);
    }
    // Copies of the layer until a pass streams past the last-level cache twice (2 to 4; one
    // for a layer of 1 GiB or more, whose routed experts alone are far larger than the cache).
    const std::size_t one = expert_bytes<T>(s) * s.experts;
    const std::size_t copies =
        one >= gib ? 1 : std::min<std::size_t>(4, std::max<std::size_t>(2, (2 * streaming_bytes() + one - 1) / one));
    moe_set<T> out{s, {}};
    out.layers.assign(copies, first);
    return out;
  });
}

template <class T>
moe_experts experts_of(const moe_layer<T>& l, const moe_shape& s) {
  const dtype t = dtype_traits<T>::type;
  const std::size_t rb = row_bytes(t, s.d_model);
  const auto stack = [&](const std::vector<T>& v) {
    return stacked_view{weight_view(v.data(), t, s.d_ff, s.d_model, rb), s.experts, s.d_ff * rb};
  };
  moe_experts x;
  x.gate = stack(l.gate);
  x.up = stack(l.up);
  x.down_t = stack(l.down_t);
  return x;
}

template <class T>
ffn_layer shared_of(const moe_layer<T>& l, const moe_shape& s) {
  if (s.shared_d_ff == 0) return {};
  const dtype t = dtype_traits<T>::type;
  const std::size_t rb = row_bytes(t, s.d_model);
  return {activation::silu,
          weight_view(l.sgate.data(), t, s.shared_d_ff, s.d_model, rb),
          weight_view(l.sup.data(), t, s.shared_d_ff, s.d_model, rb),
          {},
          weight_view(l.sdown_t.data(), t, s.shared_d_ff, s.d_model, rb)};
}

// Skewed router logits: expert e has a popularity −0.6·ln(1 + rank(e)) (a fixed random ranking),
// plus N(0, 1.5) per token.
std::vector<float> router_logits(std::size_t tokens, std::size_t experts, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::size_t> rank(experts);
  for (std::size_t e = 0; e < experts; ++e) rank[e] = e;
  std::shuffle(rank.begin(), rank.end(), rng);
  std::normal_distribution<float> noise(0.0F, 1.5F);
  std::vector<float> l(tokens * experts);
  for (std::size_t t = 0; t < tokens; ++t) {
    for (std::size_t e = 0; e < experts; ++e) {
      l[t * experts + e] = -0.6F * std::log1p(static_cast<float>(rank[e])) + noise(rng);
    }
  }
  return l;
}

moe_routing fixed_routing(const moe_shape& s) {
  moe_routing r;
  r.native_k = s.k;
  r.normalize_top_k = true;
  return r;
}
moe_routing adaptive_routing(const moe_shape& s) {
  moe_routing r = fixed_routing(s);
  r.adaptive = s.k <= 2 ? adaptive_top_k{{1, 2}, 0.5} : adaptive_top_k{{3, 4, 5, 6}, 0.5};
  return r;
}

template <class T>
void BM_moe_decode(benchmark::State& state, moe_shape s) {
  const auto threads = static_cast<std::size_t>(state.range(0));
  const moe_set<T>& w = weights<T>(s);
  constexpr std::size_t token_count = 256;
  const std::vector<float> logits = router_logits(token_count, s.experts, 7);
  const std::vector<float> x = random_floats(token_count * s.d_model, 1.0F, 8);
  std::vector<float> y(s.d_model);
  cpu::thread_pool pool(threads);
  cpu::executor ex(pool);
  moe_ffn<cpu_backend> fixed{fixed_routing(s)};
  moe_ffn<cpu_backend> adaptive{adaptive_routing(s)};
  moe_scratch sf;
  moe_scratch sa;
  std::size_t next = 0;
  const auto call = [&](const moe_ffn<cpu_backend>& op, moe_scratch& sc, std::size_t token, std::size_t layer) {
    const moe_layer<T>& l = w.layers[layer];
    const status st =
        op(0, experts_of(l, s), matrix_view<const float>::packed(logits.data() + token * s.experts, 1, s.experts),
           matrix_view<const float>::packed(x.data() + token * s.d_model, 1, s.d_model),
           matrix_view<float>::packed(y.data(), 1, s.d_model), sc, ex, shared_of(l, s));
    if (!st) state.SkipWithError(st.reason.data());
  };
  warm_up(w.layers.size(), [&](std::size_t i) { call(fixed, sf, i, i); });
  double fixed_s = 0.0, adaptive_s = 0.0, fixed_bytes = 0.0, adaptive_bytes = 0.0, fixed_experts = 0.0,
         adaptive_experts = 0.0;
  for (auto _ : state) {
    const std::size_t token = next % token_count;
    const std::size_t layer = next % w.layers.size();
    const std::size_t other = (next + 1) % w.layers.size();  // the adaptive call reads another copy
    ++next;
    // The row's time is the fixed-k call's; the adaptive call runs in the same iterations.
    const double t = time_pair(
        state.iterations(), [&] { call(adaptive, sa, token, other); }, [&] { call(fixed, sf, token, layer); },
        adaptive_s, fixed_s);
    state.SetIterationTime(t);
    fixed_bytes += static_cast<double>(sf.reads.weight_bytes);
    adaptive_bytes += static_cast<double>(sa.reads.weight_bytes);
    fixed_experts += static_cast<double>(sf.reads.pairs);
    adaptive_experts += static_cast<double>(sa.reads.pairs);
  }
  // route() alone, on the same tokens.
  routing_table table;
  moe_route_scratch rs;
  const moe_routing fr = fixed_routing(s);
  const std::size_t route_calls = 2000;
  const double route_s = seconds([&] {
    for (std::size_t i = 0; i < route_calls; ++i) {
      route(fr, 0, matrix_view<const float>::packed(logits.data() + (i % token_count) * s.experts, 1, s.experts), table,
            rs);
    }
  });
  const double n = static_cast<double>(state.iterations());
  const auto u = static_cast<unsigned>(threads);
  state.counters["gbps"] = fixed_bytes / fixed_s / 1e9;
  state.counters["pct_of_read"] = pct_of_read(fixed_bytes / fixed_s / 1e9, u);
  state.counters["adaptive_gbps"] = adaptive_bytes / adaptive_s / 1e9;
  state.counters["adaptive_pct_of_read"] = pct_of_read(adaptive_bytes / adaptive_s / 1e9, u);
  state.counters["experts"] = fixed_experts / n;
  state.counters["adaptive_experts"] = adaptive_experts / n;
  state.counters["fixed_us"] = fixed_s / n * 1e6;
  state.counters["adaptive_us"] = adaptive_s / n * 1e6;
  state.counters["us_per_expert"] = fixed_s / n * 1e6 / static_cast<double>(s.k);
  const double fewer = (fixed_experts - adaptive_experts) / n;
  state.counters["saved_us_per_expert"] = fewer > 0.0 ? (fixed_s - adaptive_s) / n * 1e6 / fewer : 0.0;
  state.counters["routing_pct"] = route_s / static_cast<double>(route_calls) / (fixed_s / n);
}

// The GEMV ceilings BM_moe_ceiling measured, by "<dtype>/t<threads>" (0 until it has run).
std::vector<std::pair<std::string, double>>& ceilings() {
  static std::vector<std::pair<std::string, double>> c;
  return c;
}
double ceiling_gflops(const std::string& key) {
  for (const auto& [k, v] : ceilings()) {
    if (k == key) return v;
  }
  return 0.0;
}

template <class T>
void BM_moe_prefill(benchmark::State& state, moe_shape s) {
  const auto tokens = static_cast<std::size_t>(state.range(0));
  const auto threads = static_cast<std::size_t>(state.range(1));
  constexpr std::size_t loop_tokens = 32;
  const moe_set<T>& w = weights<T>(s);
  const moe_layer<T>& l = w.layers[0];
  const moe_experts xp = experts_of(l, s);
  const ffn_layer shared = shared_of(l, s);
  const std::vector<float> logits = router_logits(tokens, s.experts, 17);
  const std::vector<float> x = random_floats(tokens * s.d_model, 1.0F, 18);
  std::vector<float> y(tokens * s.d_model);
  cpu::thread_pool pool(threads);
  cpu::executor ex(pool);
  const cpu_backend backend;
  moe_ffn<cpu_backend> op{fixed_routing(s)};
  moe_scratch sc;
  const auto lg = matrix_view<const float>::packed(logits.data(), tokens, s.experts);
  const auto in = matrix_view<const float>::packed(x.data(), tokens, s.d_model);
  const auto grouped = [&] {
    if (!op(0, xp, lg, in, matrix_view<float>::packed(y.data(), tokens, s.d_model), sc, ex, shared)) {
      state.SkipWithError("moe_ffn failed");
    }
  };
  // The per-token loop over the first loop_tokens tokens (the table of the grouped call).
  std::vector<float> f;
  std::vector<float> coef;
  std::vector<std::byte> ws;
  const auto per_token = [&] {
    const routing_table& t = sc.table;
    for (std::size_t tok = 0; tok < loop_tokens; ++tok) {
      const std::span<const float> xt(x.data() + tok * s.d_model, s.d_model);
      const std::size_t b = t.token_offsets()[tok];
      const std::size_t e = t.token_offsets()[tok + 1];
      const std::size_t rows = e - b + (shared.gate.absent() ? 0 : 1);
      f.resize(rows * s.d_model);
      coef.resize(rows);
      for (std::size_t p = b; p < e; ++p) {
        (void)run(backend,
                  gated_ffn_args{xp.expert(t.pair_expert()[p]), xt,
                                 std::span<float>(f.data() + (p - b) * s.d_model, s.d_model), subset::everything()},
                  ws, ex);
        coef[p - b] = t.pair_weight()[p];
      }
      if (!shared.gate.absent()) {
        (void)run(backend,
                  gated_ffn_args{shared, xt, std::span<float>(f.data() + (rows - 1) * s.d_model, s.d_model),
                                 subset::everything()},
                  ws, ex);
        coef[rows - 1] = 1.0F;
      }
      const weight_view outs(f.data(), dtype::f32, rows, s.d_model, s.d_model * sizeof(float));
      (void)run(backend,
                transposed_linear_args{outs, coef, std::span<float>(y.data() + tok * s.d_model, s.d_model),
                                       subset::everything()},
                ws, ex);
    }
  };
  grouped();  // untimed first pass
  double grouped_s = 0.0, loop_s = 0.0;
  for (auto _ : state) {
    const double t = time_pair(state.iterations(), per_token, grouped, loop_s, grouped_s);
    state.SetIterationTime(t);
  }
  routing_table table;
  moe_route_scratch rs;
  const double route_s = seconds([&] { route(op.routing, 0, lg, table, rs); });
  const double n = static_cast<double>(state.iterations());
  const double pair_flops = 2.0 * 3.0 * static_cast<double>(s.d_model * s.d_ff);
  const double shared_flops = 2.0 * 3.0 * static_cast<double>(s.d_model * s.shared_d_ff);
  const double flops = pair_flops * static_cast<double>(sc.table.pairs()) + shared_flops * static_cast<double>(tokens);
  const double loop_scale = static_cast<double>(tokens) / static_cast<double>(loop_tokens);
  const double gflops = flops * n / grouped_s / 1e9;
  state.counters["gflops"] = gflops;
  state.counters["loop_gflops"] = flops * n / (loop_s * loop_scale) / 1e9;
  state.counters["speedup"] = loop_s * loop_scale / grouped_s;
  state.counters["routing_pct"] = route_s / (grouped_s / n);
  state.counters["experts_active"] = static_cast<double>(sc.reads.experts_run);
  state.counters["grouped_ms"] = grouped_s / n * 1e3;
  state.counters["loop_ms"] = loop_s * loop_scale / n * 1e3;
  // The ceiling rows run first in the same process (registered before these).
  const double ceiling = ceiling_gflops(std::string(name(dtype_traits<T>::type)) + "/t" + std::to_string(threads));
  state.counters["pct_of_ceiling"] = ceiling > 0.0 ? gflops / ceiling : 0.0;
}

// Independent FMAs on 8 vectors of 16 floats, in registers: the f32 FMA peak of one thread (the
// compiler vectorises the lanes with the widest FMA the target attribute allows).
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f,fma"))) float fma_loop_avx512(std::size_t iterations, float seed) {
  using v16 = float __attribute__((vector_size(64)));
  v16 acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = v16{} + seed * static_cast<float>(i + 1);
  const v16 a = v16{} + 0.999F;
  const v16 b = v16{} + 0.001F;
  for (std::size_t it = 0; it < iterations; ++it) {
    for (auto& v : acc) v = v * a + b;
  }
  v16 s = acc[0];
  for (int i = 1; i < 8; ++i) s += acc[i];
  return s[0];
}
__attribute__((target("avx2,fma"))) float fma_loop_avx2(std::size_t iterations, float seed) {
  using v8 = float __attribute__((vector_size(32)));
  v8 acc[8];
  for (int i = 0; i < 8; ++i) acc[i] = v8{} + seed * static_cast<float>(i + 1);
  const v8 a = v8{} + 0.999F;
  const v8 b = v8{} + 0.001F;
  for (std::size_t it = 0; it < iterations; ++it) {
    for (auto& v : acc) v = v * a + b;
  }
  v8 s = acc[0];
  for (int i = 1; i < 8; ++i) s += acc[i];
  return s[0];
}
#endif

// FLOPs per second of `threads` threads each running the FMA loop.
double fma_peak_gflops(std::size_t threads) {
#if defined(__x86_64__) && defined(__GNUC__)
  const bool avx512 = __builtin_cpu_supports("avx512f") != 0;
  const bool avx2 = __builtin_cpu_supports("avx2") != 0 && __builtin_cpu_supports("fma") != 0;
  if (!avx512 && !avx2) return 0.0;
  const std::size_t lanes = avx512 ? 16 : 8;
  const std::size_t iterations = 50'000'000;
  std::vector<float> sink(threads);
  const double t = seconds([&] {
    std::vector<std::thread> pool;
    for (std::size_t i = 0; i < threads; ++i) {
      pool.emplace_back([&, i] {
        sink[i] = avx512 ? fma_loop_avx512(iterations, 1.0F + static_cast<float>(i))
                         : fma_loop_avx2(iterations, 1.0F + static_cast<float>(i));
      });
    }
    for (auto& th : pool) th.join();
  });
  benchmark::DoNotOptimize(sink.data());
  return 2.0 * 8.0 * static_cast<double>(lanes * iterations * threads) / t / 1e9;
#else
  (void)threads;
  return 0.0;
#endif
}

template <class T>
void BM_moe_ceiling(benchmark::State& state) {
  const auto threads = static_cast<std::size_t>(state.range(0));
  constexpr std::size_t rows = 768;
  constexpr std::size_t cols = 2048;
  const std::vector<T> m = quantized<T>(rows, cols, 0.02F, 31);
  const weight_view w(m.data(), dtype_traits<T>::type, rows, cols, row_bytes(dtype_traits<T>::type, cols));
  const std::vector<float> x = random_floats(cols, 1.0F, 32);
  std::vector<float> y(rows);
  cpu::thread_pool pool(threads);
  cpu::executor ex(pool);
  std::vector<std::byte> ws;
  const cpu_backend backend;
  constexpr std::size_t calls = 64;
  const auto gemv = [&] {
    for (std::size_t c = 0; c < calls; ++c) (void)run(backend, gemv_args{w, x, y, subset::everything()}, ws, ex);
  };
  gemv();
  double total = 0.0;
  for (auto _ : state) {
    const double t = seconds(gemv);
    total += t;
    state.SetIterationTime(t);
  }
  const double gflops =
      2.0 * static_cast<double>(rows * cols * calls) * static_cast<double>(state.iterations()) / total / 1e9;
  state.counters["gflops"] = gflops;
  const double peak = fma_peak_gflops(threads);
  state.counters["fma_gflops"] = peak;
  state.counters["gemv_of_fma"] = peak > 0.0 ? gflops / peak : 0.0;
  const std::string key = std::string(name(dtype_traits<T>::type)) + "/t" + std::to_string(threads);
  ceilings().emplace_back(key, gflops);  // the latest run is found first below
  std::rotate(ceilings().rbegin(), ceilings().rbegin() + 1, ceilings().rend());
}

template <class T>
void register_for(const char* dt) {
  for (const int t : {1, 2}) {
    benchmark::RegisterBenchmark((std::string("moe_ceiling/") + dt + "/t" + std::to_string(t)).c_str(),
                                 BM_moe_ceiling<T>)
        ->Arg(t)
        ->UseManualTime()
        ->MinTime(0.2)
        ->Unit(benchmark::kMillisecond);
  }
  for (const moe_shape& s : {mixtral, qwen3, dsv2lite}) {
    for (const int t : {1, 2}) {
      benchmark::RegisterBenchmark((std::string("moe_decode/") + dt + "/" + s.label + "/t" + std::to_string(t)).c_str(),
                                   [s](benchmark::State& st) { BM_moe_decode<T>(st, s); })
          ->Arg(t)
          ->UseManualTime()
          ->MinTime(0.5)
          ->Unit(benchmark::kMillisecond);
    }
  }
  for (const moe_shape& s : {mixtral, qwen3, dsv2lite}) {
    for (const int tokens : {512, 2048}) {
      for (const int t : {1, 2}) {
        benchmark::RegisterBenchmark((std::string("moe_prefill/") + dt + "/" + s.label +
                                      "/tokens:" + std::to_string(tokens) + "/t" + std::to_string(t))
                                         .c_str(),
                                     [s](benchmark::State& st) { BM_moe_prefill<T>(st, s); })
            ->Args({tokens, t})
            ->UseManualTime()
            ->Iterations(1)
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  register_read_bandwidth_benchmarks();
  register_for<block_q4_0>("q4_0");
  register_for<bf16>("bf16");
  measure_read_bandwidth_at_start();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
