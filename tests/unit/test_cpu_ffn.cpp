// The CPU backend's gated FFN (decode: dense and neuron-sparse) against the double oracle and
// the reference backend, on every compiled Highway target. With q8_0 / q4_0 weights: the f32
// path (int8_activations = false) against the oracle, and the integer path (the default) as
// the composition of the backend's own integer GEMV and row axpy, bit for bit (the GEMV's
// bounds are tested in test_cpu_quant.cpp).
#include "cpu_test_support.hpp"
#include "test_reference_support.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/backends/cpu/repack.hpp>
#include <actsparse/backends/reference.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>
#include <actsparse/schedules/depth_schedule.hpp>
#include <actsparse/scorers/magnitude.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

using namespace actsparse;
using namespace reference_test;
using cpu_test::for_each_target;

namespace {

struct cpu_ffn_weights {
  test_weights gate, up, down;
  cpu::owned_weights down_t;
};

cpu_ffn_weights make_cpu_ffn(dtype t, std::size_t d_model, std::size_t d_ff, std::mt19937& rng) {
  test_weights gate = make_weights(t, d_ff, d_model, rng, 3);  // padded rows: strided views
  test_weights up = make_weights(t, d_ff, d_model, rng, 3);
  test_weights down = make_weights(t, d_model, d_ff, rng, 3);
  cpu::owned_weights down_t = cpu::transpose(down.view);
  return {std::move(gate), std::move(up), std::move(down), std::move(down_t)};
}

// The layer with both W_down and down_t.
ffn_layer layer_of(const cpu_ffn_weights& f) {
  return ffn_layer{activation::silu, f.gate.view, f.up.view, f.down.view, f.down_t.view};
}

gated_ffn_args args_of(const cpu_ffn_weights& f, activation act, std::span<const float> x, std::span<float> y,
                       subset neurons, std::span<const float> gate_act = {}) {
  return {ffn_layer{act, f.gate.view, f.up.view, weight_view{}, f.down_t.view}, x, y, neurons, gate_act};
}

// y = W·x by the backend's own dense GEMV (the kernels the FFN composes).
std::vector<float> backend_gemv(const cpu_backend& cpu, const weight_view& w, std::span<const float> x) {
  std::vector<float> out(w.rows);
  const gemv_args a{w, x, out, subset::everything()};
  std::vector<std::byte> workspace(cpu.workspace_size(a));
  cpu::executor ex;
  REQUIRE(cpu.run(a, workspace, ex));
  return out;
}

std::vector<float> run_cpu(const gated_ffn_args& a, cpu::executor ex = {}, const cpu_backend& cpu = {}) {
  std::vector<float> y(a.y.size(), std::numeric_limits<float>::quiet_NaN());
  gated_ffn_args b = a;
  b.y = y;
  std::vector<float> workspace((cpu.workspace_size(b) + sizeof(float) - 1) / sizeof(float));
  const status s = cpu.run(b, std::as_writable_bytes(std::span<float>(workspace)), ex);
  REQUIRE_MESSAGE(s, std::string(s.reason));
  return y;
}

}  // namespace

TEST_CASE("cpu activation: at least as close to the double oracle as the scalar functions, on every target") {
  // A sweep over [-120, 120] (past exp's range both ways), gaussian values, and edges.
  std::vector<float> values;
  for (int i = -12000; i <= 12000; ++i) values.push_back(static_cast<float>(i) * 0.01F);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0F, 3.0F);
  for (int i = 0; i < 4001; ++i) values.push_back(normal(rng));
  const float big = std::numeric_limits<float>::max();
  const float tiny = std::numeric_limits<float>::denorm_min();
  for (const float v :
       {0.0F, -0.0F, tiny, -tiny, 1e-30F, -1e-30F, 88.7F, -88.7F, 104.5F, -104.5F, 1e30F, -1e30F, big, -big})
    values.push_back(v);
  const float eps = std::numeric_limits<float>::epsilon();
  for (const activation act : {activation::silu, activation::gelu, activation::relu}) {
    for_each_target([&] {
      INFO(name(act));
      std::vector<float> got = values;
      const cpu_backend cpu;
      cpu.activate(act, got);
      std::size_t worse = 0;
      std::size_t first = 0;  // the first value out of bound
      for (std::size_t i = 0; i < values.size(); ++i) {
        const float g = values[i];
        const double want = test_oracle::activate(act, static_cast<double>(g));
        const float scalar = apply(act, g);
        if (act == activation::relu) {
          if (!same_bits(std::span<const float>(&got[i], 1), std::span<const float>(&scalar, 1)) && worse++ == 0)
            first = i;
          continue;
        }
        // A few ulp of the exact value, or no further from it than the scalar code (GELU's
        // argument is rounded in f32 in both, which moves the result by up to |z| ulp).
        const double err = std::fabs(static_cast<double>(got[i]) - want);
        const double ulps = 8.0 * eps * std::fabs(want) + 1e-37;
        const double scalar_err = std::fabs(static_cast<double>(scalar) - want);
        if (!(err <= ulps || err <= 2.0 * scalar_err) && worse++ == 0) first = i;
      }
      INFO("values out of bound: ", worse, "; the first: g = ", values[first], ", got ", got[first], ", scalar ",
           apply(act, values[first]), ", exact ", test_oracle::activate(act, static_cast<double>(values[first])));
      CHECK(worse == 0);
    });
  }
}

TEST_CASE("cpu activation: NaN and infinities as the scalar functions, and a value's bits do not depend on its place") {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::mt19937 rng(8);
  const std::vector<float> base = random_vector(45, rng);
  for (const activation act : {activation::silu, activation::gelu, activation::relu}) {
    for_each_target([&] {
      INFO(name(act));
      const cpu_backend cpu;
      std::vector<float> edges{inf, -inf, nan, -nan};
      cpu.activate(act, edges);
      for (std::size_t i = 0; i < edges.size(); ++i) {
        const float want = apply(act, std::array{inf, -inf, nan, -nan}[i]);
        INFO("edge ", i);
        CHECK(std::isnan(edges[i]) == std::isnan(want));
        if (!std::isnan(want)) CHECK(edges[i] == want);
      }
      // The whole vector, then every value alone and every window of it at every offset.
      std::vector<float> whole = base;
      cpu.activate(act, whole);
      for (std::size_t begin = 0; begin < base.size(); begin += 7) {
        for (const std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{17}, std::size_t{38}}) {
          const std::size_t end = std::min(begin + n, base.size());
          std::vector<float> part(base.begin() + static_cast<std::ptrdiff_t>(begin),
                                  base.begin() + static_cast<std::ptrdiff_t>(end));
          cpu.activate(act, part);
          CHECK(same_bits(part, std::span<const float>(whole).subspan(begin, end - begin)));
        }
      }
      std::vector<float> none;
      cpu.activate(act, none);  // nothing to do
    });
  }
}

TEST_CASE("cpu gated FFN matches the double oracle on every target, dense and neuron-sparse") {
  std::mt19937 rng(41);
  for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16}) {
    for (const auto [d_model, d_ff] :
         {std::array<std::size_t, 2>{37, 53}, {64, 200}, {130, 300}, {1100, 150}, {40, 2100}}) {
      const cpu_ffn_weights f = make_cpu_ffn(t, d_model, d_ff, rng);
      const std::vector<float> x = random_vector(d_model, rng);
      std::vector<float> y(d_model);
      for (const activation act : {activation::silu, activation::gelu, activation::relu}) {
        for (const double density : {1.0, 0.6, 0.1, 0.0}) {
          const std::vector<std::uint32_t> kept = random_subset(d_ff, density, rng);
          const subset neurons = density == 1.0 ? subset::everything() : subset::only(kept);
          const oracle want = ffn_oracle(act, f.gate.values, f.up.values, f.down.values, x, neurons);
          for_each_target([&] {
            INFO(name(t), " ", name(act), " d_model ", d_model, " d_ff ", d_ff, " density ", density);
            check_within(run_cpu(args_of(f, act, x, y, neurons)), want);
          });
        }
      }
    }
  }
}

TEST_CASE("cpu gated FFN: keep-all equals dense bit for bit, a given gate equals a computed one") {
  std::mt19937 rng(42);
  for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16}) {
    const cpu_ffn_weights f = make_cpu_ffn(t, 70, 333, rng);
    const std::vector<float> x = random_vector(70, rng);
    std::vector<float> y(70);
    const std::vector<std::uint32_t> all = all_indices(333);
    const std::vector<std::uint32_t> kept = random_subset(333, 0.3, rng);
    for_each_target([&] {
      INFO(name(t));
      const auto dense = run_cpu(args_of(f, activation::silu, x, y, subset::everything()));
      CHECK(same_bits(run_cpu(args_of(f, activation::silu, x, y, subset::only(all))), dense));
      // The ops layer computes act(W_gate x) with this backend's GEMV and passes it in.
      const cpu_backend cpu;
      std::vector<float> gate_act(333);
      cpu::executor ex;
      REQUIRE(cpu.run(gemv_args{f.gate.view, x, gate_act, subset::everything()}, {}, ex));
      cpu.activate(activation::silu, gate_act);
      CHECK(same_bits(run_cpu(args_of(f, activation::silu, x, y, subset::everything(), gate_act)), dense));
      CHECK(same_bits(run_cpu(args_of(f, activation::silu, x, y, subset::only(kept), gate_act)),
                      run_cpu(args_of(f, activation::silu, x, y, subset::only(kept)))));
    });
  }
}

TEST_CASE("cpu gated FFN: W_down instead of down_t for dense, same result within the bound") {
  std::mt19937 rng(43);
  const cpu_ffn_weights f = make_cpu_ffn(dtype::bf16, 48, 100, rng);
  const std::vector<float> x = random_vector(48, rng);
  std::vector<float> y(48);
  gated_ffn_args a = args_of(f, activation::gelu, x, y, subset::everything());
  a.weights.down = f.down.view;
  a.weights.down_t = weight_view{};
  check_within(run_cpu(a), ffn_oracle(activation::gelu, f.gate.values, f.up.values, f.down.values, x, a.neurons));
  // Neuron-sparse needs one row per kept neuron: without down_t the backend declines.
  const std::array<std::uint32_t, 2> two{3, 9};
  a.neurons = subset::only(two);
  const cpu_backend cpu;
  CHECK_FALSE(cpu.can_implement(a));
  CHECK(std::string(cpu.can_implement(a).reason).find("pass weights.down_t") != std::string::npos);
  // Called without can_implement, run says the same (it never reads uninitialised h).
  std::vector<std::byte> workspace(cpu.workspace_size(a));
  cpu::executor ex;
  CHECK_FALSE(cpu.run(a, workspace, ex));
}

TEST_CASE("cpu gated FFN: the same bits on 1, 2 and 3 threads, and a split without a barrier is declined") {
  std::mt19937 rng(44);
  const cpu_ffn_weights f = make_cpu_ffn(dtype::f16, 300, 700, rng);
  const std::vector<float> x = random_vector(300, rng);
  std::vector<float> y(300);
  const std::vector<std::uint32_t> kept = random_subset(700, 0.4, rng);
  for (const subset neurons : {subset::everything(), subset::only(kept)}) {
    const auto one = run_cpu(args_of(f, activation::silu, x, y, neurons));
    for (const std::size_t threads : {2U, 3U}) {
      cpu::thread_pool pool(threads);
      CHECK(same_bits(run_cpu(args_of(f, activation::silu, x, y, neurons), cpu::executor(pool)), one));
    }
  }
  const cpu_backend cpu;
  cpu::executor split = cpu::executor::split({0, 2});
  const gated_ffn_args a = args_of(f, activation::silu, x, y, subset::everything());
  std::vector<std::byte> workspace(cpu.workspace_size(a));
  const status s = cpu.run(a, workspace, split);
  CHECK_FALSE(s);
  CHECK(std::string(s.reason).find("barrier") != std::string::npos);
}

TEST_CASE("cpu gated FFN reports bad arguments and a short workspace") {
  std::mt19937 rng(45);
  const cpu_ffn_weights f = make_cpu_ffn(dtype::f32, 16, 24, rng);
  const std::vector<float> x = random_vector(16, rng);
  std::vector<float> y(16);
  std::vector<float> short_y(15);
  const cpu_backend cpu;
  cpu::executor ex;
  const gated_ffn_args good = args_of(f, activation::silu, x, y, subset::everything());
  const std::size_t need = cpu.workspace_size(good);
  std::vector<std::byte> workspace(need + 4);
  CHECK(cpu.run(good, std::span<std::byte>(workspace).first(need), ex));
  const std::string short_message = "cpu::gated_ffn: argument 'workspace.size()' is " + std::to_string(need - 4) +
                                    "; expected at least " + std::to_string(need) + " bytes";
  CHECK_THROWS_WITH_AS(cpu.run(good, std::span<std::byte>(workspace).first(need - 4), ex),
                       doctest::Contains(short_message.c_str()), error);
  // A misaligned workspace is its own error, not a size problem.
  CHECK_THROWS_WITH_AS(cpu.run(good, std::span<std::byte>(workspace).subspan(2, need), ex),
                       doctest::Contains("argument 'workspace.data()' is 0x"), error);
  CHECK_THROWS_WITH_AS(cpu.run(good, std::span<std::byte>(workspace).subspan(2, need), ex),
                       doctest::Contains("expected an address that is a multiple of 4 bytes"), error);
  CHECK_THROWS_WITH_AS(cpu.run(args_of(f, activation::silu, x, short_y, subset::everything()), workspace, ex),
                       doctest::Contains("'y.size()' is 15; expected 16 (d_model = gate.cols)"), error);
  gated_ffn_args none = good;
  none.weights.down_t = weight_view{};
  CHECK_THROWS_WITH_AS(cpu.run(none, workspace, ex),
                       doctest::Contains("'weights.down, weights.down_t' is neither given"), error);
}

TEST_CASE("cpu gated FFN: from read_all_from kept, every row is read: the gathered values, on any thread count") {
  std::mt19937 rng(50);
  for (const auto& [t, d_ff] : {std::pair{dtype::f32, 224U},
                                {dtype::f16, 224U},
                                {dtype::bf16, 224U},
                                {dtype::q8_0, 224U},
                                {dtype::q4_0, 224U},
                                {dtype::bf16, 2048U}}) {
    const cpu_ffn_weights f = make_cpu_ffn(t, 64, d_ff, rng);
    const std::vector<float> x = random_vector(64, rng);
    std::vector<float> y(64);
    for (const double density : {0.95, 0.8, 0.5}) {
      const std::vector<std::uint32_t> kept = random_subset(d_ff, density, rng);
      for_each_target([&] {
        INFO(name(t), " density ", density);
        cpu_backend gather;
        gather.tuning.read_all_from = 1.0;  // only keep-all (dense anyway): every proper subset is gathered
        cpu_backend read_all;
        read_all.tuning.read_all_from = 0.01;
        const gated_ffn_args a = args_of(f, activation::silu, x, y, subset::only(kept));
        CHECK(gather.plan(a, 1).rows == cpu::phase1_rows::kept_rows);
        CHECK(read_all.plan(a, 1).rows == cpu::phase1_rows::every_row_then_drop);
        CHECK(read_all.plan(a, 1).phase1 == d_ff);  // u and g of every row, not of the kept
        CHECK(read_all.workspace_size(a) >= gather.workspace_size(a));
        CHECK(cpu_backend{}.workspace_size(a) >= gather.workspace_size(a));
        const auto want = run_cpu(a, {}, gather);
        const auto got = run_cpu(a, {}, read_all);
        CHECK(got == want);         // equal values (an exact zero may change sign)
        CHECK(run_cpu(a) == want);  // the measured crossover, whichever path it picks
        for (const std::size_t threads : {2U, 3U}) {
          cpu::thread_pool pool(threads);
          CHECK(same_bits(run_cpu(a, cpu::executor(pool), read_all), got));
          CHECK(run_cpu(a, cpu::executor(pool)) == want);
        }
      });
    }
  }
}

TEST_CASE("cpu gated FFN: read_all_from picks the path (a dropped row is read only from it) and is checked") {
  std::mt19937 rng(51);
  cpu_ffn_weights f = make_cpu_ffn(dtype::f32, 48, 120, rng);
  const std::vector<float> x = random_vector(48, rng);
  std::vector<float> y(48);
  std::vector<std::uint32_t> kept = all_indices(120);
  kept.erase(kept.begin() + 7);  // 119 of 120 kept: neuron 7 dropped
  // A NaN in the dropped neuron's row of down_t: only a path that reads the row sees it (0·NaN).
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(f.down_t.bytes.data() + 7 * f.down_t.view.row_stride, &nan, sizeof nan);
  const gated_ffn_args a = args_of(f, activation::relu, x, y, subset::only(kept));
  for (const double from : {0.5, 119.0 / 120.0}) {
    cpu_backend cpu;
    cpu.tuning.read_all_from = from;
    CHECK(std::isnan(run_cpu(a, {}, cpu)[0]));
  }
  cpu_backend cpu;
  cpu.tuning.read_all_from = 1.0;
  for (const float v : run_cpu(a, {}, cpu)) CHECK(std::isfinite(v));
  cpu::executor ex;
  std::vector<std::byte> workspace(cpu.workspace_size(a));
  const std::pair<double, const char*> bad[] = {{0.0, "0;"}, {-0.5, "-0.5;"}, {1.5, "1.5;"}, {nan, "nan;"}};
  for (const auto& [value, text] : bad) {
    cpu.tuning.read_all_from = value;
    const std::string want = std::string("'cpu_backend::tuning.read_all_from' is ") + text;
    CHECK_THROWS_WITH_AS(cpu.run(a, workspace, ex), doctest::Contains(want.c_str()), error);
  }
  cpu.tuning.read_all_from = 1.5;
  CHECK_THROWS_WITH_AS(cpu.run(a, workspace, ex),
                       doctest::Contains("expected a fraction of the d_ff neurons in (0, 1]"), error);
}

TEST_CASE("neuron_sparse_ffn runs on the CPU backend and agrees with the reference backend") {
  std::mt19937 rng(46);
  const cpu_ffn_weights f = make_cpu_ffn(dtype::bf16, 96, 256, rng);
  const ffn_layer w = layer_of(f);
  const std::vector<float> x = random_vector(96, rng);
  const neuron_sparse_ffn op{magnitude{}, top_k::by_count(64), score_source::gate_activation, cpu_backend{}};
  const neuron_sparse_ffn ref_op{magnitude{}, top_k::by_count(64), score_source::gate_activation, reference_backend{}};
  std::vector<float> y(96);
  std::vector<float> want(96);
  selection kept;
  selection ref_kept;
  ffn_scratch s;
  cpu::executor ex;
  inline_executor inline_ex;
  REQUIRE(op(w, x, y, kept, s, ex));
  REQUIRE(ref_op(w, x, want, ref_kept, s, inline_ex));
  REQUIRE(kept.indices.size() == 64);
  // Both select from gate values that agree within rounding; where they pick the same set the
  // outputs agree within the oracle's bound.
  if (kept.indices == ref_kept.indices) {
    check_within(
        y, ffn_oracle(activation::silu, f.gate.values, f.up.values, f.down.values, x, subset::only(kept.indices)));
    check_within(
        want, ffn_oracle(activation::silu, f.gate.values, f.up.values, f.down.values, x, subset::only(kept.indices)));
  }
  std::vector<float> dense(96);
  REQUIRE(dense_ffn(cpu_backend{}, w, x, dense, s, ex));
  check_within(dense, ffn_oracle(activation::silu, f.gate.values, f.up.values, f.down.values, x, subset::everything()));
}

TEST_CASE("neuron_sparse_ffn with a gate the engine computed: the bits of the op's own gate pass, and its errors") {
  std::mt19937 rng(47);
  for (const dtype t : {dtype::f32, dtype::bf16, dtype::q4_0}) {
    INFO(name(t));
    const cpu_ffn_weights f = make_cpu_ffn(t, 96, 256, rng);
    const ffn_layer w = layer_of(f);
    const std::vector<float> x = random_vector(96, rng);
    // The engine's gate: the backend's own GEMV (as a fused gate + up GEMM with the same sums gives).
    std::vector<float> gate(256);
    std::vector<std::byte> workspace;
    cpu::executor ex;
    REQUIRE(run(cpu_backend{}, gemv_args{f.gate.view, x, gate, subset::everything()}, workspace, ex));
    for (const auto& select : {top_k::by_count(64), top_k::by_count(256)}) {
      for (const score_source source :
           {score_source::gate_activation, score_source::gate_preactivation, score_source::hidden}) {
        const neuron_sparse_ffn op{magnitude{}, select, source, cpu_backend{}};
        std::vector<float> y(96);
        std::vector<float> y_given(96);
        selection kept;
        selection kept_given;
        ffn_scratch s;
        REQUIRE(op(w, x, y, kept, s, ex));
        const ffn_reads reads = s.reads;
        REQUIRE(op(w, x, gate, y_given, kept_given, s, ex));
        CHECK(kept_given.indices == kept.indices);
        CHECK(same_bits(y_given, y));
        CHECK(s.reads.gate_rows == reads.gate_rows);
        CHECK(s.reads.up_rows == reads.up_rows);
      }
    }
    // A layer its schedule runs dense: the given gate's path has the bits of the dense one.
    const neuron_sparse_ffn<magnitude, cumulative_mass, cpu_backend, depth_schedule> layered{
        magnitude{}, cumulative_mass{0.5, 4, 1}, score_source::gate_activation, cpu_backend{},
        depth_schedule{2, depth_schedule::no_deep_tier, 0.5, 0.5, 4, 1}};
    for (const std::size_t layer : {0U, 5U}) {
      std::vector<float> y(96);
      std::vector<float> y_given(96);
      selection kept;
      selection kept_given;
      ffn_scratch s;
      REQUIRE(layered(layer, w, x, y, kept, s, ex));
      REQUIRE(layered(layer, w, x, gate, y_given, kept_given, s, ex));
      CHECK((kept_given.reason == fallback_reason::dense_layer) == (layer == 0));
      CHECK(kept_given.indices == kept.indices);
      CHECK(same_bits(y_given, y));
    }
    const neuron_sparse_ffn all{magnitude{}, top_k::by_count(256), score_source::gate_activation, cpu_backend{}};
    std::vector<float> bad = gate;
    bad[7] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> y(96);
    selection kept;
    ffn_scratch s;
    CHECK_THROWS_WITH_AS((void)all(w, x, bad, y, kept, s, ex), doctest::Contains("'gate[7]'"), error);
    CHECK_THROWS_WITH_AS((void)all(w, x, std::span<const float>(gate).first(255), y, kept, s, ex),
                         doctest::Contains("d_ff = 256"), error);
  }
}

TEST_CASE("neuron_sparse_ffn reports the CPU backend's path: every row past the crossover, interleaved copies") {
  std::mt19937 rng(48);
  const cpu_ffn_weights f = make_cpu_ffn(dtype::q4_0, 96, 256, rng);
  const ffn_layer w = layer_of(f);
  const std::vector<float> x = random_vector(96, rng);
  cpu::weight_layouts copies;
  (void)copies.add_interleaved(f.gate.view);
  (void)copies.add_interleaved(f.up.view);
  cpu::executor ex;
  for (const double from : {0.2, 1.0}) {
    for (const cpu::weight_layouts* layouts : std::array<const cpu::weight_layouts*, 2>{nullptr, &copies}) {
      cpu_backend cpu;
      cpu.tuning.read_all_from = from;
      cpu.layouts = layouts;
      const neuron_sparse_ffn op{magnitude{}, top_k::by_count(64), score_source::gate_activation, cpu};
      std::vector<float> y(96);
      selection kept;
      ffn_scratch s;
      REQUIRE(op(w, x, y, kept, s, ex));
      INFO("read_all_from ", from, ", interleaved copies ", layouts != nullptr);
      const bool past_crossover = 64.0 >= from * 256.0;
      CHECK(s.reads.every_row == past_crossover);
      CHECK(s.reads.interleaved == (past_crossover && layouts != nullptr));
      CHECK(s.reads.up_rows == 64);  // the rows the policy needs, whatever the backend read
    }
  }
}

TEST_CASE("cpu row axpy with coalesce_gap: the same values, short gaps read with coefficient 0") {
  std::vector<std::uint32_t> filled(20);
  const std::array<std::uint32_t, 5> kept{1, 3, 4, 9, 11};
  CHECK(cpu::coalesced_rows(kept, 0, filled.data()) == 5);
  REQUIRE(cpu::coalesced_rows(kept, 1, filled.data()) == 7);  // 2 and 10 filled in; 5..8 too far
  CHECK(std::vector<std::uint32_t>(filled.begin(), filled.begin() + 7) ==
        std::vector<std::uint32_t>{1, 2, 3, 4, 9, 10, 11});
  CHECK(cpu::coalesced_rows(kept, 4, filled.data()) == 11);  // 1 .. 11

  std::mt19937 rng(47);
  const cpu_ffn_weights f = make_cpu_ffn(dtype::bf16, 96, 400, rng);
  const std::vector<float> x = random_vector(96, rng);
  std::vector<float> y(96);
  for (const double density : {0.5, 0.1}) {
    const std::vector<std::uint32_t> neurons = random_subset(400, density, rng);
    const gated_ffn_args a = args_of(f, activation::silu, x, y, subset::only(neurons));
    const auto plain = run_cpu(a);
    for (const std::size_t gap : {1U, 3U, 1000U}) {
      INFO("density ", density, " gap ", gap);
      cpu_backend cpu;
      cpu.coalesce_gap = gap;
      CHECK(cpu.plan(a, 1).down == cpu::down_path::axpy_coalesced);
      CHECK(cpu.workspace_size(a) >= cpu_backend{}.workspace_size(a) + 400 * sizeof(std::uint32_t));
      std::vector<float> got(96, -1.0F);
      gated_ffn_args b = a;
      b.y = got;
      std::vector<std::byte> workspace(cpu.workspace_size(b));
      cpu::executor ex;
      REQUIRE(cpu.run(b, workspace, ex));
      CHECK(got == plain);  // equal values (an exact zero may change sign)

      // The input-sparse linear: x_j for a kept channel, 0 for a filled-in one.
      const std::vector<float> in = random_vector(400, rng);
      std::vector<float> want(96);
      std::vector<float> linear(96, -1.0F);
      const transposed_linear_args t{f.down_t.view, in, want, subset::only(neurons)};
      REQUIRE(cpu_backend{}.run(t, {}, ex));
      transposed_linear_args tc = t;
      tc.y = linear;
      CHECK(cpu.workspace_size(tc) >= 2 * 400 * sizeof(float));
      std::vector<std::byte> tw(cpu.workspace_size(tc));
      REQUIRE(cpu.run(tc, tw, ex));
      CHECK(linear == want);
      CHECK_THROWS_WITH_AS(cpu.run(tc, std::span<std::byte>(tw).first(8), ex),
                           doctest::Contains("'workspace.size()' is 8; expected at least"), error);
    }
  }
}

TEST_CASE("cpu gated FFN with q8_0 / q4_0 weights, f32 path (int8_activations = false), matches the double oracle") {
  std::mt19937 rng(48);
  for (const dtype t : {dtype::q8_0, dtype::q4_0}) {
    for (const auto [d_model, d_ff] : {std::array<std::size_t, 2>{64, 96}, {128, 320}}) {
      const cpu_ffn_weights f = make_cpu_ffn(t, d_model, d_ff, rng);
      // down_t is W_down requantized along d_model: the oracle uses the values it holds.
      Eigen::MatrixXd down(static_cast<Eigen::Index>(d_model), static_cast<Eigen::Index>(d_ff));
      std::vector<float> row(d_model);
      for (std::size_t j = 0; j < d_ff; ++j) {
        reference::dequantize_row(f.down_t.view, j, row);
        for (std::size_t i = 0; i < d_model; ++i) {
          down(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) = row[i];
        }
      }
      const std::vector<float> x = random_vector(d_model, rng);
      std::vector<float> y(d_model);
      for (const activation act : {activation::silu, activation::relu}) {
        for (const double density : {1.0, 0.3}) {
          const std::vector<std::uint32_t> kept = random_subset(d_ff, density, rng);
          const subset neurons = density == 1.0 ? subset::everything() : subset::only(kept);
          const oracle want = ffn_oracle(act, f.gate.values, f.up.values, down, x, neurons);
          for_each_target([&] {
            INFO(name(t), " ", name(act), " d_model ", d_model, " density ", density);
            cpu_backend f32_path;
            f32_path.int8_activations = false;
            const auto got = run_cpu(args_of(f, act, x, y, neurons), {}, f32_path);
            check_within(got, want);
            if (density == 1.0) {
              const std::vector<std::uint32_t> every_index = all_indices(d_ff);
              CHECK(same_bits(run_cpu(args_of(f, act, x, y, subset::only(every_index)), {}, f32_path), got));
            }
          });
        }
      }
    }
  }
}

namespace {

// residual + FFN(input[t]) for the kept tokens, on the CPU backend.
std::vector<float> run_cpu_tokens(const cpu_ffn_weights& f, bool with_down_t, const std::vector<float>& input,
                                  const std::vector<float>& residual, std::size_t d_model, subset tokens,
                                  cpu::executor ex = {}) {
  const std::size_t n = input.size() / d_model;
  std::vector<float> out = residual;
  const token_ffn_args a{ffn_layer{activation::silu, f.gate.view, f.up.view, with_down_t ? weight_view{} : f.down.view,
                                   with_down_t ? f.down_t.view : weight_view{}},
                         matrix_view<const float>::packed(input.data(), n, d_model),
                         matrix_view<float>::packed(out.data(), n, d_model), tokens};
  const cpu_backend cpu;
  std::vector<float> workspace((cpu.workspace_size(a) + sizeof(float) - 1) / sizeof(float));
  const status s = cpu.run(a, std::as_writable_bytes(std::span<float>(workspace)), ex);
  REQUIRE_MESSAGE(s, std::string(s.reason));
  return out;
}

}  // namespace

TEST_CASE("cpu token FFN: each kept token equals its dense decode FFN bit for bit, others are untouched") {
  std::mt19937 rng(46);
  for (const auto& [t, d_ff] : {std::pair{dtype::f32, 224U},
                                {dtype::bf16, 224U},
                                {dtype::q8_0, 224U},
                                {dtype::f16, 2048U}}) {  // q8_0: whole blocks; 2048: down_t in two chunks
    const std::size_t d_model = 96;
    const cpu_ffn_weights f = make_cpu_ffn(t, d_model, d_ff, rng);
    const std::size_t n = 11;
    const std::vector<float> input = random_vector(n * d_model, rng);
    const std::vector<float> residual = random_vector(n * d_model, rng);
    const std::vector<std::uint32_t> kept = {0, 3, 4, 10};
    for_each_target([&] {
      for (const bool with_down_t : {true, false}) {
        INFO(name(t), " down_t ", with_down_t);
        const auto sparse = run_cpu_tokens(f, with_down_t, input, residual, d_model, subset::only(kept));
        const auto all = run_cpu_tokens(f, with_down_t, input, residual, d_model, subset::everything());
        for (std::size_t tok = 0; tok < n; ++tok) {
          const std::span<const float> x(input.data() + tok * d_model, d_model);
          std::vector<float> y(d_model);
          gated_ffn_args a = args_of(f, activation::silu, x, y, subset::everything());
          if (!with_down_t) {
            a.weights.down = f.down.view;
            a.weights.down_t = weight_view{};
          }
          const auto ffn = run_cpu(a);
          std::vector<float> want(d_model);
          for (std::size_t c = 0; c < d_model; ++c) want[c] = residual[tok * d_model + c] + ffn[c];
          const bool is_kept = std::find(kept.begin(), kept.end(), tok) != kept.end();
          const std::span<const float> got_sparse(sparse.data() + tok * d_model, d_model);
          const std::span<const float> got_all(all.data() + tok * d_model, d_model);
          CHECK(same_bits(got_all, want));
          CHECK(same_bits(got_sparse, is_kept ? std::span<const float>(want)
                                              : std::span<const float>(residual.data() + tok * d_model, d_model)));
        }
      }
    });
    // Thread counts: the same bits.
    const auto one = run_cpu_tokens(f, true, input, residual, d_model, subset::only(kept));
    for (const std::size_t threads : {2U, 3U}) {
      cpu::thread_pool pool(threads);
      CHECK(same_bits(run_cpu_tokens(f, true, input, residual, d_model, subset::only(kept), cpu::executor(pool)), one));
    }
  }
}

TEST_CASE("cpu token FFN matches the reference backend and backs token_sparse_ffn") {
  std::mt19937 rng(47);
  const std::size_t d_model = 64;
  const std::size_t d_ff = 150;
  const cpu_ffn_weights f = make_cpu_ffn(dtype::f32, d_model, d_ff, rng);
  const std::size_t n = 9;
  const std::vector<float> input = random_vector(n * d_model, rng);
  const std::vector<float> residual = random_vector(n * d_model, rng);
  const std::vector<std::uint32_t> kept = {1, 2, 8};
  const auto got = run_cpu_tokens(f, true, input, residual, d_model, subset::only(kept));
  std::vector<float> want = residual;
  const token_ffn_args ra{ffn_layer{activation::silu, f.gate.view, f.up.view, f.down.view},
                          matrix_view<const float>::packed(input.data(), n, d_model),
                          matrix_view<float>::packed(want.data(), n, d_model), subset::only(kept)};
  REQUIRE(reference_backend{}.run_with_scratch(ra));
  for (std::size_t i = 0; i < want.size(); ++i) {
    CHECK(std::fabs(got[i] - want[i]) <= 1e-4F * (1.0F + std::fabs(want[i])));
  }
  // A split executor is declined (the phases need a barrier); bad shapes are errors.
  cpu::executor split = cpu::executor::split({0, 2});
  std::vector<float> out = residual;
  token_ffn_args a = ra;
  a.weights.down = weight_view{};
  a.weights.down_t = f.down_t.view;
  a.residual = matrix_view<float>::packed(out.data(), n, d_model);
  std::vector<std::byte> workspace(cpu_backend{}.workspace_size(a));
  CHECK_FALSE(cpu_backend{}.run(a, workspace, split));
  a.residual = matrix_view<float>::packed(out.data(), n - 1, d_model);
  cpu::executor ex;
  CHECK_THROWS_AS((void)cpu_backend{}.run(a, workspace, ex), error);
}

TEST_CASE("cpu batched GEMV: each token's row is its GEMV bit for bit, on any thread count, and its errors") {
  std::mt19937 rng(55);
  for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0}) {
    const test_weights w = make_weights(t, 130, 96, rng, 1);
    for (const std::size_t n : {1U, 3U, 8U}) {
      const std::vector<float> x = random_vector(n * 96, rng);
      for_each_target([&] {
        for (const bool int8 : {true, false}) {
          INFO(name(t), " tokens ", n, " int8 ", int8);
          const cpu_backend cpu{.int8_activations = int8};
          std::vector<float> y(n * 130, -1.0F);
          const batched_gemv_args a{w.view, matrix_view<const float>::packed(x.data(), n, 96),
                                    matrix_view<float>::packed(y.data(), n, 130)};
          std::vector<std::byte> workspace(cpu.workspace_size(a));
          cpu::executor ex;
          REQUIRE(cpu.run(a, workspace, ex));
          for (std::size_t k = 0; k < n; ++k) {
            const auto one = backend_gemv(cpu, w.view, std::span<const float>(x.data() + k * 96, 96));
            CHECK(same_bits(std::span<const float>(y.data() + k * 130, 130), one));
          }
          cpu::thread_pool pool(3);
          cpu::executor three(pool);
          std::vector<float> y3(n * 130);
          const batched_gemv_args b{a.w, a.x, matrix_view<float>::packed(y3.data(), n, 130)};
          REQUIRE(cpu.run(b, workspace, three));
          CHECK(same_bits(y3, y));
        }
      });
    }
  }
  const test_weights w = make_weights(dtype::f32, 16, 32, rng);
  std::vector<float> x(2 * 32), y(2 * 15);
  const batched_gemv_args bad{w.view, matrix_view<const float>::packed(x.data(), 2, 32),
                              matrix_view<float>::packed(y.data(), 2, 15)};
  std::vector<std::byte> workspace(cpu_backend{}.workspace_size(bad));
  cpu::executor ex;
  CHECK_THROWS_WITH_AS((void)cpu_backend{}.run(bad, workspace, ex),
                       doctest::Contains("'y.cols' is 15; expected 16 (w.rows)"), error);
}

TEST_CASE("cpu token FFN over a neuron union with the gate given: each token is its decode FFN over the union") {
  std::mt19937 rng(56);
  for (const dtype t : {dtype::f32, dtype::bf16, dtype::q8_0, dtype::q4_0}) {
    const std::size_t d_model = 96;
    const std::size_t d_ff = 2080;  // down_t in two chunks
    const cpu_ffn_weights f = make_cpu_ffn(t, d_model, d_ff, rng);
    const std::size_t n = 5;
    const std::vector<float> input = random_vector(n * d_model, rng);
    const std::vector<float> residual = random_vector(n * d_model, rng);
    std::vector<float> gates = random_vector(n * d_ff, rng);  // act(g) as an engine passes it
    const std::vector<std::uint32_t> united = random_subset(d_ff, 0.3, rng);
    const ffn_layer layer{activation::silu, f.gate.view, f.up.view, weight_view{}, f.down_t.view};
    for_each_target([&] {
      INFO(name(t));
      const auto tokens = [&](cpu::executor ex) {
        std::vector<float> out = residual;
        const token_ffn_args a{layer,
                               matrix_view<const float>::packed(input.data(), n, d_model),
                               matrix_view<float>::packed(out.data(), n, d_model),
                               subset::everything(),
                               subset::only(united),
                               matrix_view<const float>::packed(gates.data(), n, d_ff)};
        const cpu_backend cpu;
        REQUIRE(cpu.can_implement(a));
        std::vector<std::byte> workspace(cpu.workspace_size(a));
        REQUIRE(cpu.run(a, workspace, ex));
        return out;
      };
      const auto got = tokens({});
      cpu_backend gather;  // the decode FFN over the union, rows gathered (no crossover)
      gather.tuning.read_all_from = 1.0;
      for (std::size_t k = 0; k < n; ++k) {
        std::vector<float> y(d_model);
        const auto one =
            run_cpu(gated_ffn_args{layer, std::span<const float>(input.data() + k * d_model, d_model), y,
                                   subset::only(united), std::span<const float>(gates.data() + k * d_ff, d_ff)},
                    {}, gather);
        std::vector<float> want(d_model);
        for (std::size_t c = 0; c < d_model; ++c) want[c] = residual[k * d_model + c] + one[c];
        CHECK(same_bits(std::span<const float>(got.data() + k * d_model, d_model), want));
      }
      cpu::thread_pool pool(2);
      CHECK(same_bits(tokens(cpu::executor(pool)), got));
      // The reference agrees (the gate given, so only x's rounding in W_up differs).
      std::vector<float> want = residual;
      const token_ffn_args ra{ffn_layer{activation::silu, f.gate.view, f.up.view, f.down.view},
                              matrix_view<const float>::packed(input.data(), n, d_model),
                              matrix_view<float>::packed(want.data(), n, d_model),
                              subset::everything(),
                              subset::only(united),
                              matrix_view<const float>::packed(gates.data(), n, d_ff)};
      REQUIRE(reference_backend{}.run_with_scratch(ra));
      double diff = 0.0, norm = 0.0;
      for (std::size_t i = 0; i < want.size(); ++i) {
        diff += (got[i] - want[i]) * (got[i] - want[i]);
        norm += (want[i] - residual[i]) * (want[i] - residual[i]);
      }
      CHECK(std::sqrt(diff / norm) < 0.05);
    });
  }
  // Errors: a union without down_t is declined; a gate of the wrong shape and an unsorted union are errors.
  const cpu_ffn_weights f = make_cpu_ffn(dtype::f32, 64, 96, rng);
  std::vector<float> input(2 * 64), out(2 * 64), gates(2 * 95);
  const std::vector<std::uint32_t> united = {1, 5};
  token_ffn_args a{ffn_layer{activation::silu, f.gate.view, f.up.view, f.down.view},
                   matrix_view<const float>::packed(input.data(), 2, 64), matrix_view<float>::packed(out.data(), 2, 64),
                   subset::everything(), subset::only(united)};
  CHECK_FALSE(cpu_backend{}.can_implement(a));
  a.weights.down_t = f.down_t.view;
  a.gate_act = matrix_view<const float>::packed(gates.data(), 2, 95);
  std::vector<std::byte> workspace(cpu_backend{}.workspace_size(a));
  cpu::executor ex;
  CHECK_THROWS_WITH_AS((void)cpu_backend{}.run(a, workspace, ex), doctest::Contains("'gate_act.cols' is 95"), error);
  const std::vector<std::uint32_t> unsorted = {5, 1};
  a.gate_act = {};
  a.neurons = subset::only(unsorted);
  CHECK_THROWS_AS((void)reference_backend{}.run_with_scratch(a), error);
}

TEST_CASE("neuron_sparse_ffn::batch: the union of the tokens' own sets, each token the FFN over it") {
  std::mt19937 rng(57);
  for (const dtype t : {dtype::f32, dtype::q4_0}) {
    const std::size_t d_model = 96;
    const std::size_t d_ff = 2080;
    const cpu_ffn_weights f = make_cpu_ffn(t, d_model, d_ff, rng);
    const ffn_layer layer = layer_of(f);
    const std::size_t n = 4;
    const std::vector<float> input = random_vector(n * d_model, rng);
    const std::vector<float> residual = random_vector(n * d_model, rng);
    cpu_backend cpu;
    cpu.tuning.read_all_from = 1.0;  // the one-token calls gather too
    const neuron_sparse_ffn op{magnitude{}, top_k::by_count(d_ff / 10), score_source::gate_activation, cpu};
    std::vector<float> out = residual;
    std::vector<selection> kept;
    selection united;
    ffn_scratch s;
    cpu::executor ex;
    REQUIRE(op.batch(0, layer, matrix_view<const float>::packed(input.data(), n, d_model),
                     matrix_view<float>::packed(out.data(), n, d_model), kept, united, s, ex));
    REQUIRE(kept.size() == n);
    std::vector<std::uint32_t> all;
    for (std::size_t k = 0; k < n; ++k) {
      // Each token's own set is the one-token call's.
      std::vector<float> y(d_model);
      selection alone;
      ffn_scratch one;
      REQUIRE(op(layer, std::span<const float>(input.data() + k * d_model, d_model), y, alone, one, ex));
      CHECK(alone.indices == kept[k].indices);
      all.insert(all.end(), alone.indices.begin(), alone.indices.end());
    }
    std::sort(all.begin(), all.end());
    all.erase(std::unique(all.begin(), all.end()), all.end());
    CHECK(united.indices == all);
    CHECK(united.size() > kept[0].size());  // random inputs: the sets differ
    CHECK(s.reads.up_rows == united.size());
    // One row: the decode step itself (its set, its bits).
    {
      std::vector<float> one_out(residual.begin(), residual.begin() + static_cast<std::ptrdiff_t>(d_model));
      std::vector<selection> one_kept;
      selection one_united;
      ffn_scratch one_s;
      REQUIRE(op.batch(0, layer, matrix_view<const float>::packed(input.data(), 1, d_model),
                       matrix_view<float>::packed(one_out.data(), 1, d_model), one_kept, one_united, one_s, ex));
      std::vector<float> y(d_model);
      selection alone;
      ffn_scratch s1;
      REQUIRE(op(layer, std::span<const float>(input.data(), d_model), y, alone, s1, ex));
      CHECK(one_kept.at(0).indices == alone.indices);
      CHECK(one_united.indices == alone.indices);
      for (std::size_t c = 0; c < d_model; ++c) CHECK(one_out[c] == residual[c] + y[c]);
    }
    // Each token's update: the FFN over the union, with the gate the one-token call computes.
    for (std::size_t k = 0; k < n; ++k) {
      const std::span<const float> x(input.data() + k * d_model, d_model);
      std::vector<float> g = backend_gemv(cpu, f.gate.view, x);
      cpu.activate(activation::silu, g);
      std::vector<float> y(d_model);
      const auto want = run_cpu(gated_ffn_args{layer, x, y, subset::only(united.indices), g}, {}, cpu);
      for (std::size_t c = 0; c < d_model; ++c) {
        CHECK(out[k * d_model + c] == residual[k * d_model + c] + want[c]);
      }
    }
  }
}

TEST_CASE("cpu gated FFN with q8_0 / q4_0 weights, integer path: the integer GEMV then the row axpy, bit for bit") {
  std::mt19937 rng(49);
  for (const dtype t : {dtype::q8_0, dtype::q4_0}) {
    for (const auto [d_model, d_ff] : {std::array<std::size_t, 2>{64, 96}, {1120, 192}, {64, 2080}}) {
      const cpu_ffn_weights f = make_cpu_ffn(t, d_model, d_ff, rng);  // 2080: down_t in two chunks
      const std::vector<float> x = random_vector(d_model, rng);
      std::vector<float> y(d_model);
      for (const double density : {1.0, 0.3}) {
        const std::vector<std::uint32_t> kept = random_subset(d_ff, density, rng);
        const subset neurons = density == 1.0 ? subset::everything() : subset::only(kept);
        const std::size_t count = neurons.count(d_ff);
        for_each_target([&] {
          INFO(name(t), " d_model ", d_model, " density ", density);
          const cpu_backend cpu;
          cpu::executor ex;
          const auto gemv = [&](const weight_view& w) {
            std::vector<float> out(count);
            const gemv_args a{w, x, out, neurons};
            std::vector<std::byte> workspace(cpu.workspace_size(a));
            REQUIRE(cpu.run(a, workspace, ex));
            return out;
          };
          // Phase 1 as the FFN runs it (h_j = act(g_j)·u_j), then phase 2 as a transposed linear.
          std::vector<float> g = gemv(f.gate.view);
          const std::vector<float> u = gemv(f.up.view);
          cpu.activate(activation::silu, g);
          std::vector<float> h(d_ff, 0.0F);
          std::vector<float> gate_act(d_ff, 0.0F);
          for (std::size_t k = 0; k < count; ++k) {
            const std::size_t j = neurons.all ? k : kept[k];
            gate_act[j] = g[k];
            h[j] = gate_act[j] * u[k];
          }
          std::vector<float> want(d_model);
          const transposed_linear_args down{f.down_t.view, h, want, neurons};
          std::vector<std::byte> down_workspace(cpu.workspace_size(down));
          REQUIRE(cpu.run(down, down_workspace, ex));

          const gated_ffn_args a = args_of(f, activation::silu, x, y, neurons);
          cpu_backend f32_path;
          f32_path.int8_activations = false;
          CHECK(cpu.plan(a, 1).quantize_x);
          CHECK_FALSE(f32_path.plan(a, 1).quantize_x);
          CHECK(cpu.workspace_size(a) >= f32_path.workspace_size(a) + cpu::quantized_x_bytes(d_model));
          const auto got = run_cpu(a);
          CHECK(same_bits(got, want));
          CHECK(same_bits(run_cpu(args_of(f, activation::silu, x, y, neurons, gate_act)), got));  // gate given
          for (const std::size_t threads : {2U, 3U}) {
            cpu::thread_pool pool(threads);
            CHECK(same_bits(run_cpu(a, cpu::executor(pool)), got));
          }
          if (density == 1.0) {
            const std::vector<std::uint32_t> every_index = all_indices(d_ff);
            CHECK(same_bits(run_cpu(args_of(f, activation::silu, x, y, subset::only(every_index))), got));
          }
        });
      }
    }
  }
}

TEST_CASE("cpu gated FFN with interleaved q8_0 / q4_0 weights: the interleaved GEMVs composed, bit for bit") {
  std::mt19937 rng(53);
  for (const dtype t : {dtype::q8_0, dtype::q4_0}) {
    for (const auto [d_model, d_ff] : {std::array<std::size_t, 2>{64, 96}, {1120, 224}, {96, 2080}}) {
      const cpu_ffn_weights f = make_cpu_ffn(t, d_model, d_ff, rng);
      cpu::weight_layouts layouts;  // the copies, found by the row-major views the args carry
      (void)layouts.add_interleaved(f.gate.view);
      (void)layouts.add_interleaved(f.up.view);
      (void)layouts.add_interleaved(f.down.view);
      const std::vector<float> x = random_vector(d_model, rng);
      std::vector<float> y(d_model);
      // kept: between the read_all_from 0.2 below and the default crossovers (0.35 and up);
      // most: above every default crossover of the copies (0.7 and down).
      std::vector<std::uint32_t> kept = random_subset(d_ff, 0.27, rng);
      while (kept.size() < d_ff * 22 / 100 || kept.size() >= d_ff * 33 / 100) kept = random_subset(d_ff, 0.27, rng);
      std::vector<std::uint32_t> most = random_subset(d_ff, 0.85, rng);
      while (most.size() < d_ff * 75 / 100) most = random_subset(d_ff, 0.85, rng);
      const auto with = [&](subset neurons) { return gated_ffn_args{layer_of(f), x, y, neurons}; };
      for_each_target([&] {
        INFO(name(t), " d_model ", d_model, " d_ff ", d_ff);
        cpu_backend cpu;
        cpu.layouts = &layouts;
        const auto gemv = [&](const weight_view& w, std::span<const float> in) { return backend_gemv(cpu, w, in); };
        // Every row read: gate and up, h_j = act(g_j)·u_j (0 for a dropped neuron), y = W_down·h,
        // each by the interleaved GEMV.
        const auto composed = [&](const std::vector<std::uint32_t>* only) {
          std::vector<float> g = gemv(f.gate.view, x);
          const std::vector<float> u = gemv(f.up.view, x);
          cpu.activate(activation::silu, g);
          std::vector<float> h(d_ff, 0.0F);
          for (std::size_t j = 0; j < d_ff; ++j) {
            if (only == nullptr || std::binary_search(only->begin(), only->end(), static_cast<std::uint32_t>(j)))
              h[j] = g[j] * u[j];
          }
          return gemv(f.down.view, h);
        };
        const auto dense = run_cpu(with(subset::everything()), {}, cpu);
        CHECK(cpu.plan(with(subset::everything()), 1).down == cpu::down_path::interleaved_gemv);
        CHECK(same_bits(dense, composed(nullptr)));
        const std::vector<std::uint32_t> every_index = all_indices(d_ff);
        CHECK(same_bits(run_cpu(with(subset::only(every_index)), {}, cpu), dense));  // keep-all
        for (const std::size_t threads : {2U, 3U}) {
          cpu::thread_pool pool(threads);
          CHECK(same_bits(run_cpu(with(subset::everything()), cpu::executor(pool), cpu), dense));
        }
        // Below the crossover the kept rows are gathered from the row-major blocks and down_t
        // is read: the result of the same weights without the copies.
        const auto sparse = run_cpu(with(subset::only(kept)), {}, cpu);
        CHECK(same_bits(sparse, run_cpu(args_of(f, activation::silu, x, y, subset::only(kept)))));
        const std::vector<std::uint32_t> none;  // no neuron kept: y = 0, the copies unread
        CHECK(same_bits(run_cpu(with(subset::only(none)), {}, cpu), std::vector<float>(d_model, 0.0F)));
        // From the crossover on every row is read, from the copies.
        cpu_backend all_rows = cpu;
        all_rows.tuning.read_all_from = 0.2;
        CHECK(same_bits(run_cpu(with(subset::only(kept)), {}, all_rows), composed(&kept)));
        // The default crossover with copies of up and W_down (q4_0 0.4 / 0.35 kept, q8_0 0.7:
        // below the row-major ones): 0.75 kept and more reads every row, below 0.33 gathers.
        CHECK(same_bits(run_cpu(with(subset::only(most)), {}, cpu), composed(&most)));
        // Without int8_activations the copies are not read: the f32 path of the plain weights.
        cpu_backend f32_path = cpu;
        f32_path.int8_activations = false;
        CHECK(f32_path.plan(with(subset::everything()), 1).down != cpu::down_path::interleaved_gemv);
        CHECK(same_bits(run_cpu(with(subset::everything()), {}, f32_path),
                        run_cpu(with(subset::everything()), {}, cpu_backend{.int8_activations = false})));
      });
    }
  }
}

TEST_CASE("cpu gated FFN with W_down in column blocks: lossless, one layout for dense and sparse, no down_t") {
  std::mt19937 rng(54);
  const reference_backend ref;
  for (const dtype t : {dtype::q8_0, dtype::q4_0}) {
    for (const auto [d_model, d_ff] : {std::array<std::size_t, 2>{64, 96}, {1120, 224}, {96, 2080}}) {
      const cpu_ffn_weights f = make_cpu_ffn(t, d_model, d_ff, rng);
      cpu::weight_layouts layouts;
      (void)layouts.add_interleaved(f.gate.view);  // read whole
      const cpu::column_blocks_view columns = layouts.add_column_blocks(f.down.view);
      const ffn_layer layer{activation::silu, f.gate.view, f.up.view, f.down.view, weight_view{}};  // no down_t
      const std::vector<float> x = random_vector(d_model, rng);
      std::vector<float> y(d_model);
      const std::vector<std::uint32_t> kept = random_subset(d_ff, 0.1, rng);
      const std::vector<std::uint32_t> most = random_subset(d_ff, 0.85, rng);  // past every crossover
      std::vector<std::uint32_t> clustered;  // whole 32-neuron columns, as after a reordering
      for (std::uint32_t j = 0; j < d_ff; ++j) {
        if ((j / 32) % 3 == 1) clustered.push_back(j);
      }
      for_each_target([&] {
        INFO(name(t), " d_model ", d_model, " d_ff ", d_ff);
        cpu_backend cpu;
        cpu.layouts = &layouts;
        const auto gemv = [&](const weight_view& w, std::span<const float> in) { return backend_gemv(cpu, w, in); };
        // act(g) from the gate's copy, given (as neuron_sparse_ffn gives it), u row by row, h, and
        // the down projection from the column blocks over the kept neurons only.
        std::vector<float> g = gemv(f.gate.view, x);
        cpu.activate(activation::silu, g);
        const auto with = [&](subset neurons) { return gated_ffn_args{layer, x, y, neurons, g}; };
        const auto composed = [&](const std::vector<std::uint32_t>* only) {
          const std::vector<float> u = gemv(f.up.view, x);
          std::vector<float> h(d_ff);
          for (std::size_t j = 0; j < d_ff; ++j) h[j] = g[j] * u[j];
          std::vector<float> out(d_model, -1.0F);
          cpu::detail::column_blocks_down(columns, only != nullptr ? only->data() : nullptr,
                                          only != nullptr ? only->size() : 0, h.data(), 0, d_model, out.data());
          return out;
        };
        REQUIRE(cpu.can_implement(with(subset::only(kept))));
        const cpu::ffn_plan plan = cpu.plan(with(subset::only(kept)), 1);
        CHECK(plan.down == cpu::down_path::column_blocks);
        CHECK(plan.down_columns_copy == layouts.column_blocks(f.down.view));
        const auto dense = run_cpu(with(subset::everything()), {}, cpu);
        CHECK(same_bits(dense, composed(nullptr)));
        const std::vector<std::uint32_t> every_index = all_indices(d_ff);
        CHECK(same_bits(run_cpu(with(subset::only(every_index)), {}, cpu), dense));  // keep-all
        for (const auto* set : std::array<const std::vector<std::uint32_t>*, 3>{&kept, &most, &clustered}) {
          const auto sparse = run_cpu(with(subset::only(*set)), {}, cpu);
          CHECK(same_bits(sparse, composed(set)));
          for (const std::size_t threads : {2U, 3U}) {
            cpu::thread_pool pool(threads);
            CHECK(same_bits(run_cpu(with(subset::only(*set)), cpu::executor(pool), cpu), sparse));
          }
          // Against the double oracle on the model's own W_down blocks: the only differences are
          // x's 8-bit quantization in gate and up and f32 rounding (no second rounding of W_down).
          std::vector<float> want(d_model);
          REQUIRE(ref.run_with_scratch(gated_ffn_args{layer, x, want, subset::only(*set)}));
          double diff = 0.0, norm = 0.0;
          for (std::size_t i = 0; i < d_model; ++i) {
            diff += (sparse[i] - want[i]) * (sparse[i] - want[i]);
            norm += static_cast<double>(want[i]) * want[i];
          }
          INFO("relative L2 to the oracle ", std::sqrt(diff / norm));
          CHECK(std::sqrt(diff / norm) < 0.05);  // measured 0.028 at worst (q8_0, 10 of 96 neurons)
        }
        const std::vector<std::uint32_t> none;
        CHECK(same_bits(run_cpu(with(subset::only(none)), {}, cpu), std::vector<float>(d_model, 0.0F)));
        // Without the copy a sparse call has no down projection to read.
        CHECK_FALSE(cpu_backend{}.can_implement(gated_ffn_args{layer, x, y, subset::only(kept)}));
      });
      // The op reports the kept neurons and the block columns whose scales it read.
      cpu_backend cpu;
      cpu.layouts = &layouts;
      const neuron_sparse_ffn op{magnitude{}, top_k::by_count(d_ff / 10), score_source::gate_activation, cpu};
      selection chosen;
      ffn_scratch s;
      cpu::executor ex;
      REQUIRE(op(layer, x, y, chosen, s, ex));
      std::vector<std::uint32_t> blocks;
      for (const std::uint32_t j : chosen.indices) blocks.push_back(j / 32);
      blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
      CHECK(s.reads.down_columns == blocks.size());
      CHECK(s.reads.down_rows == chosen.size());
    }
  }
}
