// The host protocol as a newcomer meets it: actsparse::run / run_checked / runner, the errors
// for views and workspaces that cannot be read, quantizers on bad input, the composed FFN under
// an engine's own (ith, nth) split with its barrier, per-layer schedules and the scorer
// customisation point.
#include "cpu_test_support.hpp"
#include "test_reference_support.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/backends/cpu/repack.hpp>
#include <actsparse/backends/reference.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/ops/input_sparse_linear.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>
#include <actsparse/ops/run.hpp>
#include <actsparse/schedules/per_layer_table.hpp>
#include <actsparse/scorers/magnitude.hpp>
#include <actsparse/scorers/token_l2.hpp>
#include <actsparse/selectors/threshold.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <doctest/doctest.h>

#include <array>
#include <barrier>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

using namespace actsparse;
using namespace reference_test;

TEST_CASE("run: the protocol in one call, run_checked walks the index lists and run does not") {
  std::mt19937 rng(1);
  const test_weights w = make_weights(dtype::f16, 40, 64, rng);
  const std::vector<float> x = random_vector(64, rng);
  std::vector<float> want(40);
  std::vector<float> y(40);
  REQUIRE(reference_backend{}.run_with_scratch(gemv_args{w.view, x, want, subset::everything()}));
  // One-shot: the backend's own workspace and default executor.
  REQUIRE(run(reference_backend{}, gemv_args{w.view, x, y, subset::everything()}));
  CHECK(same_bits(y, want));
  // A runner keeps its workspace between calls.
  runner<cpu_backend> cpu;
  REQUIRE(cpu(gemv_args{w.view, x, y, subset::everything()}));
  check_within(y, gemv_oracle(w.values, x, subset::everything()));
  // Unsorted rows: run_checked names the bad index; run (for selector output) only checks the
  // last index's bound, so this list passes its O(1) checks.
  const std::array<std::uint32_t, 3> unsorted{5, 2, 9};
  std::vector<float> y3(3);
  std::vector<std::byte> workspace;
  cpu::executor ex;
  const gemv_args bad{w.view, x, y3, subset::only(unsorted)};
  CHECK_THROWS_WITH_AS(run_checked(cpu_backend{}, bad, workspace, ex),
                       doctest::Contains("'rows.indices[1]' is 2; expected an index > rows.indices[0] = 5"), error);
  CHECK_THROWS_WITH_AS(cpu.checked(bad), doctest::Contains("'rows.indices[1]' is 2"), error);
  CHECK(run(cpu_backend{}, bad, workspace, ex));
  // The last index out of range is caught by every call (it bounds every other index of a sorted list).
  const std::array<std::uint32_t, 3> past{1, 2, 40};
  CHECK_THROWS_WITH_AS(run(cpu_backend{}, gemv_args{w.view, x, y3, subset::only(past)}, workspace, ex),
                       doctest::Contains("'rows.indices[2]' is 40; expected an index < 40"), error);
}

TEST_CASE("views refuse strides and addresses their elements cannot be read at, on both backends") {
  // f32 rows 258 bytes apart: every second row starts 2 bytes off a float.
  std::vector<std::byte> bytes(4 * 258 + 8);
  const weight_view strided(bytes.data(), dtype::f32, 4, 64, 258);
  std::vector<float> x(64, 1.0F);
  std::vector<float> y(4);
  const gemv_args a{strided, x, y, subset::everything()};
  const char* const stride_message = "argument 'w' is a row stride of 258 bytes; expected a multiple of 4 bytes";
  CHECK_THROWS_WITH_AS(run(reference_backend{}, a), doctest::Contains(stride_message), error);
  CHECK_THROWS_WITH_AS(run(cpu_backend{}, a), doctest::Contains(stride_message), error);
  // token_l2 over f32 rows 34 bytes apart.
  std::vector<float> scores(3);
  const matrix_view<const float> rows{reinterpret_cast<const float*>(bytes.data()), 3, 8, 34};
  CHECK_THROWS_WITH_AS(token_l2{}.score(rows, scores), doctest::Contains("a row stride of 34 bytes"), error);
  // Data off the element's alignment: f32 at an odd address, q8_0 blocks (f16 scale first) too.
  const weight_view shifted(bytes.data() + 1, dtype::f32, 1, 64, 256);
  CHECK_THROWS_WITH_AS(run(cpu_backend{}, gemv_args{shifted, x, std::span<float>(y).first(1), subset::everything()}),
                       doctest::Contains("data at an address that is not a multiple of 4"), error);
  std::vector<std::byte> blocks(2 * sizeof(block_q8_0) + 2);
  const weight_view q8(blocks.data() + 1, dtype::q8_0, 1, 64, 2 * sizeof(block_q8_0));
  std::vector<float> y1(1);
  for (const bool int8 : {true, false}) {
    cpu_backend cpu;
    cpu.int8_activations = int8;
    CHECK_THROWS_WITH_AS(run(cpu, gemv_args{q8, x, y1, subset::everything()}), doctest::Contains("not a multiple of 2"),
                         error);
  }
  CHECK_THROWS_WITH_AS(run(reference_backend{}, gemv_args{q8, x, y1, subset::everything()}),
                       doctest::Contains("not a multiple of 2"), error);
}

TEST_CASE("quantize_q8_0 / q4_0: a clear error for NaN or infinity, and tiny blocks without overflow") {
  std::array<float, 32> block{};
  for (std::size_t i = 0; i < block.size(); ++i) block[i] = static_cast<float>(i) - 16.0F;
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()}) {
    std::array<float, 32> b = block;
    b[7] = bad;
    CHECK_THROWS_WITH_AS((void)quantize_q8_0(b), doctest::Contains("'x[7]' is"), error);
    CHECK_THROWS_WITH_AS((void)quantize_q4_0(b), doctest::Contains("expected a finite value"), error);
  }
  // Largest magnitude about 1e-38: the scale d = amax / 127 is subnormal and 1 / d is infinite.
  for (const float amax : {1e-38F, 3e-39F, std::numeric_limits<float>::denorm_min() * 300}) {
    std::array<float, 32> b{};
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = amax * (static_cast<float>(i) - 15.5F) / 15.5F;
    const block_q8_0 q8 = quantize_q8_0(b);
    const block_q4_0 q4 = quantize_q4_0(b);
    const float d8 = to_f32(q8.d);
    for (std::size_t i = 0; i < b.size(); ++i) {
      CHECK(std::abs(static_cast<int>(q8.qs[i])) <= 127);
      if (d8 != 0.0F) CHECK(std::fabs(d8 * static_cast<float>(q8.qs[i]) - b[i]) <= d8);
    }
    (void)q4;
  }
}

namespace {

struct split_ffn {
  test_weights gate, up, down;
  cpu::owned_weights down_t;
};

// The engine's barrier (ggml_barrier), here std::barrier.
void wait_at(void* b) { static_cast<std::barrier<>*>(b)->arrive_and_wait(); }

}  // namespace

TEST_CASE("cpu gated FFN and token FFN under an engine's (ith, nth) split with its barrier: the pool's bits") {
  std::mt19937 rng(2);
  for (const dtype t : {dtype::f32, dtype::q8_0, dtype::q4_0}) {
    const std::size_t d_model = 96;
    const std::size_t d_ff = 2080;  // down_t in two chunks
    split_ffn f{make_weights(t, d_ff, d_model, rng),
                make_weights(t, d_ff, d_model, rng),
                make_weights(t, d_model, d_ff, rng),
                {}};
    f.down_t = cpu::transpose(f.down.view);
    const ffn_layer layer{activation::silu, f.gate.view, f.up.view, f.down.view, f.down_t.view};
    cpu::weight_layouts layouts;
    if (t != dtype::f32) {
      (void)layouts.add_interleaved(f.gate.view);
      (void)layouts.add_interleaved(f.up.view);
      (void)layouts.add_interleaved(f.down.view);
    }
    const std::vector<float> x = random_vector(d_model, rng);
    const std::vector<std::uint32_t> kept = random_subset(d_ff, 0.3, rng);
    const std::vector<std::uint32_t> most = random_subset(d_ff, 0.96, rng);
    for (const std::size_t gap : {0U, 3U}) {
      cpu_backend cpu;
      cpu.layouts = &layouts;
      cpu.coalesce_gap = gap;
      for (const std::span<const std::uint32_t> neurons :
           {std::span<const std::uint32_t>(kept), std::span<const std::uint32_t>(most)}) {
        const gated_ffn_args args{layer, x, {}, subset::only(neurons)};
        for (const std::size_t threads : {2U, 3U}) {
          INFO(name(t), " gap ", gap, " kept ", neurons.size(), " threads ", threads);
          std::vector<float> want(d_model);
          cpu::thread_pool pool(threads);
          cpu::executor pooled(pool);
          gated_ffn_args a = args;
          a.y = want;
          std::vector<std::byte> ws(cpu.workspace_size(a));
          REQUIRE(cpu.run(a, ws, pooled));
          std::vector<float> got(d_model, -1.0F);
          a.y = got;
          std::vector<std::byte> shared(cpu.workspace_size(a));  // one workspace for the nth threads
          std::barrier<> sync(static_cast<std::ptrdiff_t>(threads));
          std::vector<std::thread> engine;
          std::vector<int> ok(threads, 0);
          for (std::size_t i = 0; i < threads; ++i) {
            engine.emplace_back([&, i] {
              cpu::executor mine = cpu::executor::split({i, threads}, cpu::barrier{wait_at, &sync});
              ok[i] = cpu.run(a, shared, mine) ? 1 : 0;
            });
          }
          for (auto& e : engine) e.join();
          for (const int o : ok) CHECK(o == 1);
          CHECK(same_bits(got, want));
        }
      }
    }
    // The token FFN: the same under the split as on the pool.
    const std::size_t n = 7;
    const std::vector<float> input = random_vector(n * d_model, rng);
    const std::vector<float> residual = random_vector(n * d_model, rng);
    const std::array<std::uint32_t, 4> tokens{0, 2, 3, 6};
    const cpu_backend cpu;
    for (const std::size_t threads : {2U, 3U}) {
      std::vector<float> want = residual;
      std::vector<float> got = residual;
      const auto args_for = [&](std::vector<float>& out) {
        return token_ffn_args{layer, matrix_view<const float>::packed(input.data(), n, d_model),
                              matrix_view<float>::packed(out.data(), n, d_model), subset::only(tokens)};
      };
      cpu::thread_pool pool(threads);
      cpu::executor pooled(pool);
      const token_ffn_args pa = args_for(want);
      std::vector<std::byte> ws(cpu.workspace_size(pa));
      REQUIRE(cpu.run(pa, ws, pooled));
      const token_ffn_args sa = args_for(got);
      std::vector<std::byte> shared(cpu.workspace_size(sa));
      std::barrier<> sync(static_cast<std::ptrdiff_t>(threads));
      std::vector<std::thread> engine;
      for (std::size_t i = 0; i < threads; ++i) {
        engine.emplace_back([&, i] {
          cpu::executor mine = cpu::executor::split({i, threads}, cpu::barrier{wait_at, &sync});
          CHECK(cpu.run(sa, shared, mine));
        });
      }
      for (auto& e : engine) e.join();
      CHECK(same_bits(got, want));
    }
  }
}

TEST_CASE("input_sparse_linear on the CPU backend: linear_args (row-major W) and transposed_linear_args (Wt)") {
  std::mt19937 rng(3);
  const test_weights w = make_weights(dtype::f16, 48, 128, rng);
  const cpu::owned_weights wt = cpu::transpose(w.view);
  const std::vector<float> x = random_vector(128, rng);
  const input_sparse_linear op{magnitude{}, top_k::by_ratio(0.25), cpu_backend{}};
  const input_sparse_linear all{magnitude{}, top_k::by_ratio(1.0), cpu_backend{}};
  linear_scratch s;
  cpu::executor ex;
  selection kept;
  std::vector<float> y(48);
  std::vector<float> dense(48);
  // Keep-all over W equals the dense GEMV bit for bit.
  REQUIRE(all(linear_layer{w.view}, x, y, kept, s, ex));
  REQUIRE(run(cpu_backend{}, gemv_args{w.view, x, dense, subset::everything()}));
  CHECK(same_bits(y, dense));
  // A quarter of the inputs: W (x masked) and Wt (a row axpy) agree with the oracle over them.
  REQUIRE(op(linear_layer{w.view}, x, y, kept, s, ex));
  CHECK(kept.size() == 32);
  check_within(y, linear_oracle(w.values, x, subset::only(kept.indices)));
  std::vector<float> yt(48);
  selection kept_t;
  REQUIRE(op(linear_layer{weight_view{}, wt.view}, x, yt, kept_t, s, ex));
  CHECK(kept_t.indices == kept.indices);
  std::vector<float> want(48);
  REQUIRE(run(reference_backend{}, transposed_linear_args{wt.view, x, want, subset::only(kept.indices)}));
  for (std::size_t i = 0; i < 48; ++i) CHECK(yt[i] == doctest::Approx(want[i]).epsilon(1e-5));
  CHECK_THROWS_WITH_AS(op(linear_layer{}, x, y, kept, s, ex), doctest::Contains("neither w nor wt"), error);
}

TEST_CASE("neuron_sparse_ffn with a per-layer threshold table: each layer's threshold, as a selector alone decides") {
  std::mt19937 rng(4);
  const test_weights gate = make_weights(dtype::f32, 64, 32, rng);
  const test_weights up = make_weights(dtype::f32, 64, 32, rng);
  const test_weights down = make_weights(dtype::f32, 32, 64, rng);
  const ffn_layer layer{activation::silu, gate.view, up.view, down.view};
  const std::vector<float> x = random_vector(32, rng);
  const per_layer_table<float> thresholds(std::vector<float>{-1.0F, 0.05F, 0.2F});
  const neuron_sparse_ffn op{magnitude{}, threshold{0.0F}, score_source::gate_activation, reference_backend{},
                             thresholds};
  ffn_scratch s;
  inline_executor ex;
  selection kept;
  std::vector<float> y(32);
  std::vector<float> g(64);
  REQUIRE(run(reference_backend{}, gemv_args{gate.view, x, g, subset::everything()}));
  for (float& v : g) v = std::fabs(silu(v));
  for (std::size_t l = 0; l < thresholds.size(); ++l) {
    REQUIRE(op(l, layer, x, y, kept, s, ex));
    CHECK(kept.indices == threshold{thresholds.at(l)}.select(g).indices);
  }
  CHECK_THROWS_AS(op(3, layer, x, y, kept, s, ex), error);  // past the table
}

namespace {

// A scorer of its own input (the customisation point): the score of neuron j is v_j² (from the
// neuron values the op computed), through a pair it builds itself.
struct squared_input {
  std::span<const float> values;
  activation act;
};
struct squared_scorer {
  using input_type = squared_input;
  [[nodiscard]] static input_type neuron_input(std::span<const float> v, activation act) noexcept { return {v, act}; }
  [[nodiscard]] std::size_t score_count(const input_type& in) const noexcept { return in.values.size(); }
  void score(const input_type& in, std::span<float> out) const {
    for (std::size_t j = 0; j < out.size(); ++j) out[j] = in.values[j] * in.values[j];
  }
};
static_assert(neuron_scorer<squared_scorer>);

}  // namespace

TEST_CASE("a scorer with its own input type plugs into neuron_sparse_ffn through neuron_input") {
  std::mt19937 rng(5);
  const test_weights gate = make_weights(dtype::f32, 48, 32, rng);
  const test_weights up = make_weights(dtype::f32, 48, 32, rng);
  const test_weights down = make_weights(dtype::f32, 32, 48, rng);
  const ffn_layer layer{activation::gelu, gate.view, up.view, down.view};
  const std::vector<float> x = random_vector(32, rng);
  const neuron_sparse_ffn op{squared_scorer{}, top_k::by_count(12), score_source::gate_activation, reference_backend{}};
  const neuron_sparse_ffn same{magnitude{}, top_k::by_count(12), score_source::gate_activation, reference_backend{}};
  ffn_scratch s;
  inline_executor ex;
  selection a;
  selection b;
  std::vector<float> y(32);
  std::vector<float> z(32);
  REQUIRE(op(layer, x, y, a, s, ex));
  REQUIRE(same(layer, x, z, b, s, ex));
  CHECK(a.indices == b.indices);  // v² orders as |v|
  CHECK(same_bits(y, z));
}
