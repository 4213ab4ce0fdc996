// The reference backend's gated FFN, dense and neuron-sparse, for every weight dtype, and
// Eigen's dense f32 GEMV (the peer a user would pick), against the read bandwidth measured in
// the same process (read_bandwidth.hpp).
//
// The reference is a scalar oracle: it is expected to be far from the memory roofline. What
// these rows check is that the harness exists and reports honestly:
//   gbps           weight bytes one token must read / time (dense: gate + up + down; sparse:
//                  gate + a·(up + down), the real bytes of each dtype; 1e9 bytes per GB)
//   speedup        dense time / this time, dense run interleaved in the same iterations
//   ideal          dense bytes / these bytes = 3 / (1 + 2a)
//   pct_of_ideal   speedup / ideal (a ratio; 1.0 = the ideal speed-up)
//   pct_of_read  gbps / the measured one-thread read bandwidth (a ratio)
// Every weight set spans more than the last-level cache (several layers, cycled), so each
// call streams its weights from memory.

#include "eigen_peer.hpp"
#include "harness.hpp"
#include "read_bandwidth.hpp"

#include <actsparse/backends/reference/backend.hpp>
#include <actsparse/core/dtype.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/core/views.hpp>

#include <benchmark/benchmark.h>
#include <Eigen/Core>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <vector>

namespace {

using actsparse_bench::large_dataset;
using actsparse_bench::random_floats;
using actsparse_bench::seconds;

// A 7B-class FFN (LLaMA-style proportions, halved): 3 · 2048 · 5632 = 34.6 M weights a layer.
constexpr std::size_t d_model = 2048;
constexpr std::size_t d_ff = 5632;
// The reference takes 0.05–0.2 s a token: a few iterations per repetition keep the whole
// program (3 repetitions) within about a minute on 2 cores.
constexpr int ffn_iterations = 3;

// --- the reference gated FFN ----------------------------------------------------------------

// `count` layers of one dtype. Layer 0 is quantized from random values; the others are copies
// (the values do not change the time, the addresses do).
template <class T>
struct ffn_layers {
  std::vector<std::vector<T>> gate, up, down;

  [[nodiscard]] std::size_t count() const noexcept { return gate.size(); }
  [[nodiscard]] actsparse::ffn_layer layer(std::size_t i) const noexcept {
    using view = actsparse::matrix_view<const T>;
    return {actsparse::activation::silu, view::packed(gate[i].data(), d_ff, d_model),
            view::packed(up[i].data(), d_ff, d_model), view::packed(down[i].data(), d_model, d_ff)};
  }
};

template <class T>
[[nodiscard]] std::vector<T> quantized_matrix(std::size_t values, float scale, std::uint64_t seed) {
  const std::vector<float> v = random_floats(values, scale, seed);
  std::vector<T> out(values / actsparse::dtype_traits<T>::block_values);
  actsparse::quantize_row(v.data(), out.data(), values);  // packed rows: one long row
  return out;
}

[[nodiscard]] std::size_t bytes_of(const actsparse::weight_view& w) noexcept {
  return w.rows * actsparse::row_bytes(w.type, w.cols);
}

[[nodiscard]] std::size_t layer_bytes(const actsparse::ffn_layer& w) noexcept {
  return bytes_of(w.gate) + bytes_of(w.up) + bytes_of(w.down);
}

template <class T>
[[nodiscard]] const ffn_layers<T>& reference_layers() {
  constexpr actsparse::dtype type = actsparse::dtype_traits<T>::type;
  return large_dataset::get<ffn_layers<T>>("reference_ffn/" + std::string(actsparse::name(type)), [] {
    const std::size_t one = 3 * actsparse::row_bytes(type, d_model) * d_ff;
    const std::size_t count = std::max<std::size_t>(2, (actsparse_bench::streaming_bytes() + one - 1) / one);
    ffn_layers<T> l;
    l.gate.push_back(quantized_matrix<T>(d_ff * d_model, 1.0F / std::sqrt(static_cast<float>(d_model)), 1));
    l.up.push_back(quantized_matrix<T>(d_ff * d_model, 1.0F / std::sqrt(static_cast<float>(d_model)), 2));
    l.down.push_back(quantized_matrix<T>(d_model * d_ff, 1.0F / std::sqrt(static_cast<float>(d_ff)), 3));
    for (std::size_t i = 1; i < count; ++i) {
      l.gate.push_back(l.gate.front());
      l.up.push_back(l.up.front());
      l.down.push_back(l.down.front());
    }
    return l;
  });
}

// One token through the reference backend, all scratch allocated up front.
class reference_ffn {
 public:
  explicit reference_ffn(const actsparse::ffn_layer& shape)
      : x_(random_floats(d_model, 1.0F, 4)), y_(d_model), gate_act_(d_ff), all_(d_ff) {
    std::iota(all_.begin(), all_.end(), 0U);
    const std::size_t need =
        std::max({backend_.workspace_size(dense_args(shape)), backend_.workspace_size(gate_args(shape)),
                  backend_.workspace_size(sparse_args(shape, all_))});
    workspace_.resize(need);
  }

  // y = W_down (silu(W_gate x) ⊙ W_up x): every weight byte.
  [[nodiscard]] bool dense(const actsparse::ffn_layer& w) {
    return static_cast<bool>(backend_.run(dense_args(w), workspace_, executor_));
  }

  // The decode step with the neurons chosen: act(W_gate x) for every neuron (the whole gate,
  // which a scorer reads), then up rows and down columns of the kept neurons only.
  [[nodiscard]] bool sparse(const actsparse::ffn_layer& w, std::span<const std::uint32_t> kept) {
    if (!backend_.run(gate_args(w), workspace_, executor_)) return false;
    for (float& g : gate_act_) g = actsparse::apply(w.act, g);
    return static_cast<bool>(backend_.run(sparse_args(w, kept), workspace_, executor_));
  }

  [[nodiscard]] std::span<const float> y() const noexcept { return y_; }

 private:
  [[nodiscard]] actsparse::gated_ffn_args dense_args(const actsparse::ffn_layer& w) {
    return {w, x_, y_, actsparse::subset::everything()};
  }
  [[nodiscard]] actsparse::gemv_args gate_args(const actsparse::ffn_layer& w) {
    return {w.gate, x_, gate_act_, actsparse::subset::everything()};
  }
  [[nodiscard]] actsparse::gated_ffn_args sparse_args(const actsparse::ffn_layer& w,
                                                      std::span<const std::uint32_t> kept) {
    return {w, x_, y_, actsparse::subset::only(kept), gate_act_};
  }

  actsparse::reference_backend backend_{};
  actsparse::inline_executor executor_{};
  std::vector<float> x_, y_, gate_act_;
  std::vector<std::uint32_t> all_;
  std::vector<std::byte> workspace_;
};

// round(fraction · d_ff) neurons drawn at random (fixed seed), sorted.
[[nodiscard]] std::vector<std::uint32_t> random_active_set(double fraction) {
  std::vector<std::uint32_t> all(d_ff);
  std::iota(all.begin(), all.end(), 0U);
  std::mt19937_64 rng(5);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(static_cast<std::size_t>(std::lround(fraction * static_cast<double>(d_ff))));
  std::sort(all.begin(), all.end());
  return all;
}

void set_ffn_counters(benchmark::State& state, double bytes, double dense_bytes, double dense_seconds,
                      double these_seconds) {
  const double iterations = static_cast<double>(state.iterations());
  const double gbps = bytes * iterations / these_seconds / 1e9;
  const double speedup = dense_seconds / these_seconds;
  const double ideal = dense_bytes / bytes;
  state.counters["gbps"] = gbps;
  state.counters["speedup"] = speedup;
  state.counters["ideal"] = ideal;
  state.counters["pct_of_ideal"] = speedup / ideal;
  state.counters["pct_of_read"] = actsparse_bench::pct_of_read(gbps, 1);
}

// Dense gated FFN, one token per iteration, the next layer each time.
template <class T>
void BM_reference_ffn_dense(benchmark::State& state) {
  const ffn_layers<T>& layers = reference_layers<T>();
  reference_ffn ffn(layers.layer(0));
  actsparse_bench::warm_up(layers.count(), [&](std::size_t i) { (void)ffn.dense(layers.layer(i)); });
  std::size_t next = 0;
  double total = 0.0;
  for (auto _ : state) {
    const actsparse::ffn_layer w = layers.layer(next);
    next = (next + 1) % layers.count();
    bool ok = true;
    const double s = seconds([&] { ok = ffn.dense(w); });
    if (!ok) {
      state.SkipWithError("reference_backend declined the dense gated FFN");
      return;
    }
    benchmark::DoNotOptimize(ffn.y().data());
    state.SetIterationTime(s);
    total += s;
  }
  const auto bytes = static_cast<double>(layer_bytes(layers.layer(0)));
  set_ffn_counters(state, bytes, bytes, total, total);
}

// Neuron-sparse gated FFN at activity a = range(0) / 100: every iteration runs one dense token
// and one sparse token (on different layers), and the row's time is the sparse one (the CPU
// column counts both).
template <class T>
void BM_reference_ffn_sparse(benchmark::State& state) {
  const ffn_layers<T>& layers = reference_layers<T>();
  const std::vector<std::uint32_t> kept = random_active_set(static_cast<double>(state.range(0)) / 100.0);
  reference_ffn ffn(layers.layer(0));
  actsparse_bench::warm_up(layers.count(), [&](std::size_t i) { (void)ffn.dense(layers.layer(i)); });
  std::size_t next = 0;
  double dense_total = 0.0;
  double sparse_total = 0.0;
  // Which call goes first alternates, across repetitions too, so neither gains from the order.
  static std::size_t order = 0;
  for (auto _ : state) {
    const actsparse::ffn_layer dense_w = layers.layer(next);
    const actsparse::ffn_layer sparse_w = layers.layer((next + 1) % layers.count());
    next = (next + 2) % layers.count();
    const bool dense_first = order++ % 2 == 0;
    bool ok = true;
    double d = 0.0;
    if (dense_first) d = seconds([&] { ok = ffn.dense(dense_w); });
    const double s = seconds([&] { ok = ok && ffn.sparse(sparse_w, kept); });
    if (!dense_first) d = seconds([&] { ok = ok && ffn.dense(dense_w); });
    if (!ok) {
      state.SkipWithError("reference_backend declined the gated FFN");
      return;
    }
    benchmark::DoNotOptimize(ffn.y().data());
    state.SetIterationTime(s);
    dense_total += d;
    sparse_total += s;
  }
  const actsparse::ffn_layer w = layers.layer(0);
  const double fraction = static_cast<double>(kept.size()) / static_cast<double>(d_ff);
  const auto gate = static_cast<double>(bytes_of(w.gate));
  const double bytes = gate + fraction * static_cast<double>(bytes_of(w.up) + bytes_of(w.down));
  set_ffn_counters(state, bytes, static_cast<double>(layer_bytes(w)), dense_total, sparse_total);
}

}  // namespace

[[maybe_unused]] static const bool read_bandwidth_registered = actsparse_bench::register_read_bandwidth_benchmarks();

#define ACTSPARSE_REFERENCE_FFN_BENCHMARKS(T, label) \
  BENCHMARK_TEMPLATE(BM_reference_ffn_dense, T)      \
      ->Name("reference_ffn/" label "/dense")        \
      ->UseManualTime()                              \
      ->Iterations(ffn_iterations)                   \
      ->Unit(benchmark::kMillisecond);               \
  BENCHMARK_TEMPLATE(BM_reference_ffn_sparse, T)     \
      ->Name("reference_ffn/" label "/sparse")       \
      ->ArgName("a_pct")                             \
      ->Arg(100)                                     \
      ->Arg(50)                                      \
      ->Arg(25)                                      \
      ->Arg(10)                                      \
      ->UseManualTime()                              \
      ->Iterations(ffn_iterations)                   \
      ->Unit(benchmark::kMillisecond)

ACTSPARSE_REFERENCE_FFN_BENCHMARKS(float, "f32");
ACTSPARSE_REFERENCE_FFN_BENCHMARKS(actsparse::f16, "f16");
ACTSPARSE_REFERENCE_FFN_BENCHMARKS(actsparse::bf16, "bf16");
ACTSPARSE_REFERENCE_FFN_BENCHMARKS(actsparse::block_q8_0, "q8_0");
ACTSPARSE_REFERENCE_FFN_BENCHMARKS(actsparse::block_q4_0, "q4_0");

namespace {}  // namespace

int main(int argc, char** argv) { return actsparse_bench::run_benchmarks_with_read_bandwidth(argc, argv); }
