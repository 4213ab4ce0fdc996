// The CUDA backend at the Llama-2-7B FFN shapes (d_model 4096, d_ff 11008) on one GPU: dense
// GEMV, the dense gated FFN and the neuron-sparse one for a kept fraction a, every weight
// dtype, timed with CUDA events (manual time), against the device-to-device copy bandwidth
// measured in the same run and the nominal bandwidth the driver reports.
//
// A sparse step is what an engine that keeps everything on the GPU runs: the gate GEMV with
// the activation and the threshold compaction on the device (device_select_args, a threshold
// rule over the gate it computes), then gated_ffn_args with gate_act and the kept neurons (a
// fixed random set of round(a·d_ff), in managed memory advised read-mostly) over W_downᵀ: up
// rows gathered, down rows added (split over the kept rows). Dense is gated_ffn_args over
// every neuron with W_down. Several layers are cycled so that the L2 never holds a step's
// weights.
//
// Counters: gbps (weight bytes a step must read / time; 1e9 bytes per GB), pct_of_copy (of the
// copy bandwidth: 2 × bytes / time of cuMemcpyDtoD), pct_of_nominal (memory clock × bus width),
// and on sparse rows speedup (dense time / this time), ideal (3 / (1 + 2a)), pct_of_ideal.
// Without a GPU every row is skipped with "no CUDA device: <reason>" and the program exits 0.
#include "harness.hpp"

#include <actsparse/backends/cuda/backend.hpp>
#include <actsparse/backends/cuda/context.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/core/select_args.hpp>

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace {

namespace cuda = actsparse::cuda;
using actsparse::activation;
using actsparse::cuda_backend;
using actsparse::dtype;
using actsparse::subset;
using actsparse::weight_view;

constexpr std::size_t d_model = 4096;
constexpr std::size_t d_ff = 11008;
constexpr double kept_fractions[] = {1.0, 0.6, 0.4, 0.2, 0.1, 0.05};
constexpr dtype dtypes[] = {dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0, dtype::f32};

struct gpu {
  std::optional<cuda::context> ctx;
  std::string reason;  // "no CUDA device: ..." when there is none
  cuda_backend backend;
  double copy_gbps = 0.0;
};

double measure_copy_gbps(cuda::context& ctx) {
  const std::size_t bytes = std::size_t{1} << 30;
  const cuda::buffer a(ctx, bytes, cuda::memory_kind::device);
  const cuda::buffer b(ctx, bytes, cuda::memory_kind::device);
  ctx.fill_u32(a.data(), 0x3F800000U, bytes / 4);
  const cuda::event_timer t(ctx);
  double best = 0.0;
  for (int i = 0; i < 6; ++i) {
    t.start();
    ctx.copy_on_device(b.data(), a.data(), bytes);
    t.stop();
    if (i > 0) best = std::max(best, 2.0 * static_cast<double>(bytes) / (t.milliseconds() * 1e-3) / 1e9);
  }
  return best;
}

gpu& device() {
  static gpu g = [] {
    gpu d;
    const cuda::probe_result p = cuda::context::probe();
    if (!p.available) {
      d.reason = p.reason;
      return d;
    }
    try {
      d.ctx.emplace(cuda::context::create());
      d.backend = cuda_backend::for_device(*d.ctx);
      d.copy_gbps = measure_copy_gbps(*d.ctx);
    } catch (const std::exception& e) {
      d.ctx.reset();
      d.reason = std::string("no CUDA device: ") + e.what();
    }
    return d;
  }();
  return g;
}

// One layer's weights in device memory.
struct layer {
  weight_view gate, up, down, down_t;
};
struct weight_set {
  dtype type = dtype::f32;
  std::vector<cuda::buffer> memory;
  std::vector<layer> layers;
};

// rows × cols of dtype t: 64 random rows, quantized once, tiled (the values do not matter to
// the speed; the bytes are all distinct addresses).
weight_view make_matrix(cuda::context& ctx, dtype t, std::size_t rows, std::size_t cols, std::mt19937& rng,
                        std::vector<cuda::buffer>& memory) {
  const std::size_t stride = actsparse::row_bytes(t, cols);
  constexpr std::size_t distinct = 64;
  std::vector<std::byte> pattern(distinct * stride);
  std::normal_distribution<float> dist(0.0F, 0.02F);
  std::vector<float> row(cols);
  for (std::size_t r = 0; r < distinct; ++r) {
    for (float& v : row) v = dist(rng);
    actsparse::visit_dtype(t, [&](auto tag) {
      using T = typename decltype(tag)::type;
      actsparse::quantize_row(row.data(), reinterpret_cast<T*>(pattern.data() + r * stride), cols);
    });
  }
  std::vector<std::byte> host(rows * stride);
  for (std::size_t r = 0; r < rows; r += distinct) {
    const std::size_t n = std::min(distinct, rows - r);
    std::memcpy(host.data() + r * stride, pattern.data(), n * stride);
  }
  memory.emplace_back(ctx, host.size(), cuda::memory_kind::device);
  ctx.copy_to_device(memory.back().data(), host.data(), host.size());
  ctx.synchronize();
  return {memory.back().data(), t, rows, cols, stride};
}

// The layers of one dtype; one set alive at a time (the previous one is freed first).
const weight_set& weights(dtype t) {
  static std::unique_ptr<weight_set> current;
  if (current && current->type == t) return *current;
  current.reset();
  gpu& g = device();
  auto s = std::make_unique<weight_set>();
  s->type = t;
  // Enough layers that the bytes of the smallest step (gate + 10% of up and down at a = 0.05)
  // over the cycle are 4× the L2.
  const double smallest_step = 1.1 * static_cast<double>(actsparse::row_bytes(t, d_model) * d_ff);
  const double l2 = static_cast<double>(std::max<std::size_t>(g.ctx->info().l2_bytes, 50u << 20));
  const auto n = static_cast<std::size_t>(std::clamp(std::ceil(4.0 * l2 / smallest_step), 2.0, 16.0));
  std::mt19937 rng(7);
  for (std::size_t i = 0; i < n; ++i) {
    layer l;
    l.gate = make_matrix(*g.ctx, t, d_ff, d_model, rng, s->memory);
    l.up = make_matrix(*g.ctx, t, d_ff, d_model, rng, s->memory);
    l.down = make_matrix(*g.ctx, t, d_model, d_ff, rng, s->memory);
    l.down_t = make_matrix(*g.ctx, t, d_ff, d_model, rng, s->memory);
    s->layers.push_back(l);
  }
  current = std::move(s);
  return *current;
}

double matrix_bytes(dtype t) { return static_cast<double>(actsparse::row_bytes(t, d_model) * d_ff); }

void bandwidth_counters(benchmark::State& state, double bytes_per_step) {
  const gpu& g = device();
  state.counters["gbps"] = benchmark::Counter(bytes_per_step / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["copy_gbps"] = g.copy_gbps;
  state.counters["nominal_gbps"] = g.ctx->info().nominal_gbps();
}

// gbps as a fraction of the copy and nominal bandwidths, from the measured mean time.
void fractions(benchmark::State& state, double bytes_per_step, double seconds_per_step) {
  const gpu& g = device();
  const double gbps = bytes_per_step / seconds_per_step / 1e9;
  state.counters["pct_of_copy"] = 100.0 * gbps / g.copy_gbps;
  state.counters["pct_of_nominal"] = 100.0 * gbps / g.ctx->info().nominal_gbps();
}

// Runs step(layer) once per iteration, timed by events; returns the mean seconds per step.
template <class Step>
double timed(benchmark::State& state, const weight_set& w, Step&& step) {
  gpu& g = device();
  const cuda::event_timer timer(*g.ctx);
  step(w.layers[0]);  // compiles and loads the kernels
  g.ctx->synchronize();
  std::size_t i = 0;
  double total = 0.0;
  for (auto _ : state) {
    timer.start();
    step(w.layers[i++ % w.layers.size()]);
    timer.stop();
    const double s = timer.milliseconds() * 1e-3;
    total += s;
    state.SetIterationTime(s);
  }
  return total / static_cast<double>(std::max<std::size_t>(i, 1));
}

bool skip_without_device(benchmark::State& state) {
  if (device().ctx) return false;
  state.SkipWithError(device().reason.c_str());
  return true;
}

std::map<dtype, double>& dense_seconds() {
  static std::map<dtype, double> m;
  return m;
}

struct vectors {
  cuda::buffer x, y, h, idx, count, workspace;
};
vectors make_vectors(cuda::context& ctx) {
  vectors v{cuda::buffer(ctx, d_ff * 4), cuda::buffer(ctx, d_ff * 4), cuda::buffer(ctx, d_ff * 4),
            cuda::buffer(ctx, d_ff * 4), cuda::buffer(ctx, 4),        {}};
  std::vector<float> x(d_ff);
  std::mt19937 rng(3);
  std::normal_distribution<float> dist(0.0F, 1.0F);
  for (float& f : x) f = dist(rng);
  ctx.copy_to_device(v.x.data(), x.data(), x.size() * 4);
  ctx.synchronize();
  return v;
}

void bm_gemv(benchmark::State& state, dtype t) {
  if (skip_without_device(state)) return;
  gpu& g = device();
  const weight_set& w = weights(t);
  vectors v = make_vectors(*g.ctx);
  const double bytes = matrix_bytes(t);
  const double s = timed(state, w, [&](const layer& l) {
    const actsparse::gemv_args a{l.up, v.x.as<const float>().first(d_model), v.y.as<float>().first(d_ff),
                                 subset::everything()};
    (void)g.backend.run(a, {}, *g.ctx);
  });
  bandwidth_counters(state, bytes);
  fractions(state, bytes, s);
}

void bm_ffn_dense(benchmark::State& state, dtype t) {
  if (skip_without_device(state)) return;
  gpu& g = device();
  const weight_set& w = weights(t);
  vectors v = make_vectors(*g.ctx);
  const auto layer_of = [](const layer& l) { return actsparse::ffn_layer{activation::silu, l.gate, l.up, l.down}; };
  const actsparse::gated_ffn_args probe{layer_of(w.layers[0]), v.x.as<const float>().first(d_model),
                                        v.y.as<float>().first(d_model), subset::everything()};
  v.workspace = cuda::buffer(*g.ctx, g.backend.workspace_size(probe), cuda::memory_kind::device);
  const double bytes = 3.0 * matrix_bytes(t);
  const double s = timed(state, w, [&](const layer& l) {
    actsparse::gated_ffn_args a = probe;
    a.weights = layer_of(l);
    (void)g.backend.run(a, v.workspace.bytes(), *g.ctx);
  });
  dense_seconds()[t] = s;
  bandwidth_counters(state, bytes);
  fractions(state, bytes, s);
}

void bm_ffn_sparse(benchmark::State& state, dtype t, double a) {
  if (skip_without_device(state)) return;
  gpu& g = device();
  const weight_set& w = weights(t);
  vectors v = make_vectors(*g.ctx);
  // The kept neurons: round(a · d_ff) of them, a fixed random set, sorted.
  const auto kept = static_cast<std::size_t>(std::lround(a * static_cast<double>(d_ff)));
  std::vector<std::uint32_t> all(d_ff);
  for (std::size_t j = 0; j < d_ff; ++j) all[j] = static_cast<std::uint32_t>(j);
  std::mt19937 rng(5);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(kept);
  std::sort(all.begin(), all.end());
  cuda::buffer neurons(*g.ctx, std::max<std::size_t>(kept, 1) * 4);
  std::memcpy(neurons.data(), all.data(), kept * 4);
  neurons.advise_read_mostly(*g.ctx);
  const auto idx = std::span<const std::uint32_t>(static_cast<const std::uint32_t*>(neurons.data()), kept);
  // The device threshold over the gate it computes: h = silu(gate x), the kept |h| > 0.05.
  const auto select_of = [&](const layer& l) {
    return actsparse::device_select_args{
        actsparse::device_rule::threshold(0.05F),
        {},
        {l.gate, activation::silu, v.x.as<const float>().first(d_model), v.h.as<float>().first(d_ff)},
        v.idx.as<std::uint32_t>().first(d_ff),
        v.count.as<std::uint32_t>().first(1)};
  };
  cuda::buffer select_ws(*g.ctx, std::max<std::size_t>(g.backend.workspace_size(select_of(w.layers[0])), 4),
                         cuda::memory_kind::device);
  const auto layer_of = [](const layer& l) {
    return actsparse::ffn_layer{activation::silu, l.gate, l.up, {}, l.down_t};
  };
  const actsparse::gated_ffn_args probe{layer_of(w.layers[0]), v.x.as<const float>().first(d_model),
                                        v.y.as<float>().first(d_model), subset::only(idx),
                                        v.h.as<const float>().first(d_ff)};
  v.workspace = cuda::buffer(*g.ctx, g.backend.workspace_size(probe), cuda::memory_kind::device);
  const double bytes = matrix_bytes(t) * (1.0 + 2.0 * static_cast<double>(kept) / d_ff);
  const double s = timed(state, w, [&](const layer& l) {
    const actsparse::device_select_args select = select_of(l);
    (void)g.backend.run(select, select_ws.bytes(), *g.ctx);
    actsparse::gated_ffn_args args = probe;
    args.weights = layer_of(l);
    (void)g.backend.run(args, v.workspace.bytes(), *g.ctx);
  });
  bandwidth_counters(state, bytes);
  fractions(state, bytes, s);
  state.counters["kept"] = a;
  state.counters["ideal"] = actsparse_bench::ideal_ffn_speedup(a);
  if (const auto it = dense_seconds().find(t); it != dense_seconds().end()) {
    state.counters["speedup"] = it->second / s;
    state.counters["pct_of_ideal"] = 100.0 * (it->second / s) / actsparse_bench::ideal_ffn_speedup(a);
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  const gpu& g = device();
  if (!g.ctx) {
    std::printf("%s\n", g.reason.c_str());
  } else {
    const cuda::device_info& i = g.ctx->info();
    std::printf("device %d: %s, compute %d.%d (%s), %d SMs, L2 %zu MiB, %zu GiB; driver %d\n", i.ordinal,
                i.name.c_str(), i.major, i.minor, i.arch.c_str(), i.multiprocessors, i.l2_bytes >> 20,
                i.memory_bytes >> 30, i.driver_version);
    std::printf("memory bandwidth: nominal %.0f GB/s (clock %d kHz x %d bits x 2), device-to-device copy %.0f GB/s\n",
                i.nominal_gbps(), i.memory_clock_khz, i.bus_width_bits, g.copy_gbps);
  }
  for (const dtype t : dtypes) {
    const std::string n(actsparse::name(t));
    benchmark::RegisterBenchmark(("gemv_11008x4096/" + n).c_str(), bm_gemv, t)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->MinTime(0.2);
    benchmark::RegisterBenchmark(("ffn_dense/" + n).c_str(), bm_ffn_dense, t)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond)
        ->MinTime(0.2);
    for (const double a : kept_fractions) {
      char name[64];
      std::snprintf(name, sizeof name, "ffn_sparse/%s/a=%.2f", n.c_str(), a);
      benchmark::RegisterBenchmark(name, bm_ffn_sparse, t, a)
          ->UseManualTime()
          ->Unit(benchmark::kMicrosecond)
          ->MinTime(0.2);
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
