// The reference backend's host protocol (through the backend concept), its workspace sizes,
// and every argument error it reports.

#include "test_reference_support.hpp"

#include <actsparse/backends/reference.hpp>
#include <actsparse/core/concepts.hpp>

#include <doctest/doctest.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

using namespace actsparse;
using namespace reference_test;

static_assert(backend<reference_backend>);
static_assert(backend_for<reference_backend, gemv_args>);
static_assert(backend_for<reference_backend, linear_args>);
static_assert(backend_for<reference_backend, gated_ffn_args>);
static_assert(backend_for<reference_backend, token_ffn_args>);
static_assert(!backend_for<reference_backend, int>);
static_assert(reference_backend::name == "reference");
static_assert(std::same_as<reference_backend::memory_space, host_memory>);

namespace {

// What an op template does with any backend: ask, size the workspace, run.
template <class B, class Args>
requires backend_for<B, Args> status run_generic(const B& b, const Args& args) {
  ACTSPARSE_REQUIRE_BACKEND_FOR(B, Args);
  if (const status s = b.can_implement(args); !s) return s;
  std::vector<std::byte> workspace(b.workspace_size(args));
  typename B::executor_type executor{};
  return b.run(args, workspace, executor);
}

const reference_backend ref{};

// Runs with exactly `bytes` of workspace (aligned, from a float buffer).
template <class Args>
status run_with(const Args& args, std::size_t bytes) {
  std::vector<float> storage(bytes / sizeof(float) + 1);
  inline_executor executor;
  return ref.run(args, std::span<std::byte>(reinterpret_cast<std::byte*>(storage.data()), bytes), executor);
}

// A small f32 FFN, d_model = 7, d_ff = 6, and its buffers.
struct small_ffn {
  std::vector<float> gate = std::vector<float>(6 * 7, 0.5F);
  std::vector<float> up = std::vector<float>(6 * 7, 0.25F);
  std::vector<float> down = std::vector<float>(7 * 6, 0.125F);
  std::vector<float> x = std::vector<float>(7, 1.0F);
  std::vector<float> y = std::vector<float>(7, 0.0F);
  std::vector<float> input = std::vector<float>(3 * 7, 1.0F);
  std::vector<float> residual = std::vector<float>(3 * 7, 0.0F);

  [[nodiscard]] gated_ffn_args args() {
    return {ffn_layer{activation::silu, matrix_view<const float>::packed(gate.data(), 6, 7),
                      matrix_view<const float>::packed(up.data(), 6, 7),
                      matrix_view<const float>::packed(down.data(), 7, 6)},
            x, y, subset::everything()};
  }
  [[nodiscard]] token_ffn_args token_args() {
    const gated_ffn_args g = args();
    return {g.weights, matrix_view<const float>::packed(input.data(), 3, 7),
            matrix_view<float>::packed(residual.data(), 3, 7), subset::everything()};
  }
};

}  // namespace

TEST_CASE("reference backend works through the backend concept for every operation") {
  std::mt19937 rng(30);
  const test_weights w = make_weights(dtype::q4_0, 5, 64, rng);
  const std::vector<float> x = random_vector(64, rng);
  std::vector<float> y(5);
  CHECK(run_generic(ref, gemv_args{w.view, x, y, subset::everything()}));
  check_within(y, gemv_oracle(w.values, x, subset::everything()));
  CHECK(run_generic(ref, linear_args{w.view, x, y, subset::everything()}));
  check_within(y, gemv_oracle(w.values, x, subset::everything()));
  small_ffn f;
  CHECK(run_generic(ref, f.args()));
  CHECK(run_generic(ref, f.token_args()));
  for (const float r : f.residual) CHECK(r == f.y[0]);  // every token's input is x
}

TEST_CASE("reference can_implement accepts every dtype and activation, declines unknown ones") {
  std::vector<std::byte> bytes(4096);
  for (const dtype t : all_dtypes) {
    const weight_view w(bytes.data(), t, 2, 64, row_bytes(t, 64));
    CHECK(ref.can_implement(gemv_args{w, {}, {}, subset::everything()}));
    CHECK(ref.can_implement(linear_args{w, {}, {}, subset::everything()}));
    for (const activation act : all_activations) {
      CHECK(ref.can_implement(gated_ffn_args{ffn_layer{act, w, w, w}, {}, {}, subset::everything()}));
      CHECK(ref.can_implement(token_ffn_args{ffn_layer{act, w, w, w}, {}, {}, subset::everything()}));
    }
  }
  // A dtype or activation this build does not know is "not handled", and run() says so
  // without touching the output or throwing.
  const weight_view unknown(bytes.data(), static_cast<dtype>(42), 2, 4, 16);
  std::vector<float> x(4, 1.0F);
  std::vector<float> y(2, 7.0F);
  const status s = ref.can_implement(gemv_args{unknown, x, y, subset::everything()});
  CHECK_FALSE(s);
  CHECK(s.reason == "reference: unknown weight dtype");
  CHECK_FALSE(ref.run_with_scratch(gemv_args{unknown, x, y, subset::everything()}));
  CHECK_FALSE(ref.run_with_scratch(linear_args{unknown, x, y, subset::everything()}));
  CHECK(y == std::vector<float>{7.0F, 7.0F});
  small_ffn f;
  gated_ffn_args g = f.args();
  g.weights.act = static_cast<activation>(9);
  CHECK(ref.can_implement(g).reason == "reference: unknown activation");
  CHECK_FALSE(ref.run_with_scratch(g));
  g = f.args();
  g.weights.down.type = static_cast<dtype>(42);
  CHECK_FALSE(ref.can_implement(g));
  token_ffn_args tk = f.token_args();
  tk.weights.act = static_cast<activation>(9);
  CHECK_FALSE(ref.run_with_scratch(tk));
}

TEST_CASE("reference workspace_size is the f32 scratch run() needs, exactly") {
  std::mt19937 rng(31);
  const test_weights w = make_weights(dtype::q8_0, 5, 64, rng);
  const std::vector<float> x = random_vector(64, rng);
  std::vector<float> y(5);
  const std::array<std::uint32_t, 2> two{1, 3};

  const gemv_args dense{w.view, x, y, subset::everything()};
  CHECK(ref.workspace_size(dense) == 64 * sizeof(float));  // one dequantized row
  CHECK(ref.workspace_size(gemv_args{w.view, x, {}, subset::only({})}) == 0);
  CHECK(ref.workspace_size(linear_args{w.view, x, y, subset::only(two)}) == 64 * sizeof(float));

  const test_weights gate = make_weights(dtype::f16, 96, 64, rng);
  const test_weights down = make_weights(dtype::f16, 64, 96, rng);
  std::vector<float> y64(64);
  gated_ffn_args g{ffn_layer{activation::silu, gate.view, gate.view, down.view}, x, y64, subset::everything()};
  CHECK(ref.workspace_size(g) == (96 + 96) * sizeof(float));  // h[d_ff] + a row of max(d_model, d_ff)
  g.neurons = subset::only(two);
  CHECK(ref.workspace_size(g) == (2 + 96) * sizeof(float));  // h of the kept neurons only

  std::vector<float> batch(3 * 64, 0.5F);
  std::vector<float> residual(3 * 64, 0.0F);
  token_ffn_args tk{ffn_layer{activation::gelu, gate.view, gate.view, down.view},
                    matrix_view<const float>::packed(batch.data(), 3, 64),
                    matrix_view<float>::packed(residual.data(), 3, 64), subset::everything()};
  CHECK(ref.workspace_size(tk) == (96 + 96 + 64) * sizeof(float));  // h, a row, one token's output
  tk.tokens = subset::only({});
  CHECK(ref.workspace_size(tk) == 0);
  CHECK(run_with(tk, 0));  // nothing to do, no workspace needed

  // Exactly workspace_size bytes is enough; one fewer is an error.
  CHECK(run_with(dense, ref.workspace_size(dense)));
  CHECK_THROWS_WITH_AS(run_with(dense, ref.workspace_size(dense) - 1),
                       doctest::Contains("'workspace.size()' is 255; expected at least 256 bytes"), error);
  g.neurons = subset::everything();
  CHECK(run_with(g, ref.workspace_size(g)));
  CHECK_THROWS_WITH_AS(run_with(g, ref.workspace_size(g) - 4),
                       doctest::Contains("reference::gated_ffn: argument 'workspace.size()' is 764"), error);
  tk.tokens = subset::everything();
  CHECK(run_with(tk, ref.workspace_size(tk)));
  CHECK_THROWS_WITH_AS(run_with(tk, 10), doctest::Contains("reference::token_ffn: argument 'workspace.size()'"), error);
  // A misaligned workspace is an error too.
  std::vector<float> storage(100);
  auto* misaligned = reinterpret_cast<std::byte*>(storage.data()) + 1;
  inline_executor ex;
  CHECK_THROWS_WITH_AS(ref.run(dense, std::span<std::byte>(misaligned, 300), ex),
                       doctest::Contains("aligned to alignof(float) = 4 bytes"), error);
}

TEST_CASE("reference gemv and linear report every bad argument") {
  std::vector<float> w(4 * 7, 1.0F);
  const weight_view wv = matrix_view<const float>::packed(w.data(), 4, 7);
  std::vector<float> x(7, 1.0F);
  std::vector<float> y(4);
  const std::vector<float> x6(6, 1.0F);
  std::vector<float> y3(3);
  const std::array<std::uint32_t, 2> two{0, 2};
  const std::array<std::uint32_t, 2> out_of_range{1, 4};
  const std::array<std::uint32_t, 3> duplicate{0, 1, 1};
  const std::array<std::uint32_t, 2> decreasing{2, 1};

  CHECK_THROWS_WITH_AS(ref.run_with_scratch(gemv_args{wv, x6, y, subset::everything()}),
                       doctest::Contains("actsparse::reference::gemv: argument 'x.size()' is 6; expected 7 (w.cols)"),
                       error);
  CHECK_THROWS_WITH_AS(ref.run_with_scratch(gemv_args{wv, x, y3, subset::everything()}),
                       doctest::Contains("'y.size()' is 3; expected 4 (w.rows)"), error);
  CHECK_THROWS_WITH_AS(ref.run_with_scratch(gemv_args{wv, x, y3, subset::only(two)}),
                       doctest::Contains("'y.size()' is 3; expected 2 (rows.indices.size())"), error);
  CHECK_THROWS_WITH_AS(ref.run_with_scratch(gemv_args{wv, x, y3, subset::only(out_of_range)}),
                       doctest::Contains("'rows.indices[1]' is 4; expected an index < 4 (w.rows)"), error);
  CHECK_THROWS_WITH_AS(ref.run_with_scratch(gemv_args{wv, x, y3, subset::only(duplicate)}),
                       doctest::Contains("'rows.indices[2]' is 1; expected an index > rows.indices[1] = 1 "
                                         "(indices strictly increasing"),
                       error);
  std::vector<float> y2(2);
  CHECK_THROWS_WITH_AS(ref.run_with_scratch(gemv_args{wv, x, y2, subset::only(decreasing)}),
                       doctest::Contains("'rows.indices[1]' is 1; expected an index > rows.indices[0] = 2"), error);
  // all = true together with indices is ambiguous (subset{indices} does not compile; this spelling does).
  CHECK_THROWS_WITH_AS(ref.run_with_scratch(gemv_args{wv, x, y3, subset{.all = true, .indices = two}}),
                       doctest::Contains("a subset with all = true and 2 indices"), error);
  // The weights themselves: q8_0 rows not a multiple of 32, null data, a stride shorter than a row.
  std::vector<std::byte> blocks(4096);
  std::vector<float> x40(40, 1.0F);
  CHECK_THROWS_WITH_AS(ref.run_with_scratch(gemv_args{weight_view(blocks.data(), dtype::q8_0, 4, 40, 1000), x40, y,
                                                      subset::everything()}),
                       doctest::Contains("argument 'w' is 40 values per row of q8_0; expected a multiple of 32"),
                       error);
  CHECK_THROWS_WITH_AS(
      ref.run_with_scratch(gemv_args{weight_view(nullptr, dtype::f32, 4, 7, 28), x, y, subset::everything()}),
      doctest::Contains("argument 'w' is a null data pointer"), error);
  CHECK_THROWS_WITH_AS(
      ref.run_with_scratch(gemv_args{weight_view(w.data(), dtype::f32, 4, 7, 20), x, y, subset::everything()}),
      doctest::Contains("at least 28 bytes"), error);

  CHECK_THROWS_WITH_AS(ref.run_with_scratch(linear_args{wv, x6, y, subset::everything()}),
                       doctest::Contains("reference::linear: argument 'x.size()' is 6; expected 7 (w.cols"), error);
  CHECK_THROWS_WITH_AS(ref.run_with_scratch(linear_args{wv, x, y3, subset::only(two)}),
                       doctest::Contains("'y.size()' is 3; expected 4 (w.rows"), error);
  const std::array<std::uint32_t, 2> past_inputs{3, 7};
  CHECK_THROWS_WITH_AS(ref.run_with_scratch(linear_args{wv, x, y, subset::only(past_inputs)}),
                       doctest::Contains("'inputs.indices[1]' is 7; expected an index < 7 (w.cols)"), error);
  CHECK_THROWS_WITH_AS(ref.run_with_scratch(linear_args{wv, x, y, subset::only(duplicate)}),
                       doctest::Contains("'inputs.indices[2]' is 1; expected an index > inputs.indices[1] = 1"), error);
  CHECK_THROWS_WITH_AS(ref.run_with_scratch(linear_args{weight_view(blocks.data(), dtype::q4_0, 4, 40, 1000), x40, y,
                                                        subset::everything()}),
                       doctest::Contains("40 values per row of q4_0"), error);
}

TEST_CASE("reference gated FFN reports every bad argument") {
  small_ffn f;
  std::vector<float> wrong(8 * 8, 1.0F);
  std::vector<float> short_vec(5, 1.0F);
  gated_ffn_args a = f.args();
  const auto run = [&] { return ref.run_with_scratch(a); };

  a.weights.up = matrix_view<const float>::packed(wrong.data(), 5, 7);
  CHECK_THROWS_WITH_AS(
      run(), doctest::Contains("reference::gated_ffn: argument 'weights.up.rows' is 5; expected 6 (d_ff = gate.rows"),
      error);
  a = f.args();
  a.weights.up = matrix_view<const float>::packed(wrong.data(), 6, 8);
  CHECK_THROWS_WITH_AS(run(), doctest::Contains("'weights.up.cols' is 8; expected 7 (d_model = gate.cols"), error);
  a = f.args();
  a.weights.down = matrix_view<const float>::packed(wrong.data(), 8, 6);
  CHECK_THROWS_WITH_AS(
      run(), doctest::Contains("'weights.down.rows' is 8; expected 7 (d_model = gate.cols; down is [d_model x d_ff])"),
      error);
  a = f.args();
  a.weights.down = matrix_view<const float>::packed(wrong.data(), 7, 5);
  CHECK_THROWS_WITH_AS(run(), doctest::Contains("'weights.down.cols' is 5; expected 6 (d_ff = gate.rows"), error);
  a = f.args();
  a.x = short_vec;
  CHECK_THROWS_WITH_AS(run(), doctest::Contains("'x.size()' is 5; expected 7 (d_model = gate.cols)"), error);
  a = f.args();
  a.y = short_vec;
  CHECK_THROWS_WITH_AS(run(), doctest::Contains("'y.size()' is 5; expected 7 (d_model = gate.cols)"), error);
  a = f.args();
  a.gate_act = short_vec;
  CHECK_THROWS_WITH_AS(run(), doctest::Contains("'gate_act.size()' is 5; expected 6 (d_ff = gate.rows, or 0"), error);
  const std::array<std::uint32_t, 2> past{2, 6};
  const std::array<std::uint32_t, 3> repeated{0, 3, 3};
  a = f.args();
  a.neurons = subset::only(past);
  CHECK_THROWS_WITH_AS(run(), doctest::Contains("'neurons.indices[1]' is 6; expected an index < 6 (d_ff = gate.rows)"),
                       error);
  a.neurons = subset::only(repeated);
  CHECK_THROWS_WITH_AS(
      run(), doctest::Contains("'neurons.indices[2]' is 3; expected an index > neurons.indices[1] = 3"), error);
  a = f.args();
  a.weights.down.data = nullptr;
  CHECK_THROWS_WITH_AS(run(), doctest::Contains("argument 'weights.down' is a null data pointer"), error);
  a = f.args();
  a.weights.down = weight_view{};
  CHECK_THROWS_WITH_AS(
      run(), doctest::Contains("argument 'weights.down, weights.down_t' is neither given; expected W_down"), error);
  a.weights.down_t = matrix_view<const float>::packed(wrong.data(), 7, 6);
  CHECK_THROWS_WITH_AS(
      run(), doctest::Contains("'weights.down_t.rows' is 7; expected 6 (d_ff = gate.rows; down_t is [d_ff x d_model])"),
      error);
  a.weights.down_t = matrix_view<const float>::packed(wrong.data(), 6, 8);
  CHECK_THROWS_WITH_AS(run(), doctest::Contains("'weights.down_t.cols' is 8; expected 7 (d_model = gate.cols"), error);
  std::vector<std::byte> blocks(4096);
  a = f.args();
  a.weights.gate = weight_view(blocks.data(), dtype::q4_0, 6, 7, 1000);
  CHECK_THROWS_WITH_AS(run(), doctest::Contains("argument 'weights.gate' is 7 values per row of q4_0"), error);
  a = f.args();
  a.weights.up.row_stride = 8;
  CHECK_THROWS_WITH_AS(
      run(), doctest::Contains("argument 'weights.up' is a row stride of 8 bytes; expected at least 28 bytes"), error);
  a = f.args();
  CHECK(run());  // and the fixture itself is valid
}

TEST_CASE("reference token FFN reports every bad argument") {
  small_ffn f;
  std::vector<float> other(4 * 8, 0.0F);
  token_ffn_args a = f.token_args();
  const auto run = [&] { return ref.run_with_scratch(a); };

  a.input = matrix_view<const float>::packed(other.data(), 3, 8);
  CHECK_THROWS_WITH_AS(
      run(), doctest::Contains("reference::token_ffn: argument 'input.cols' is 8; expected 7 (d_model = gate.cols)"),
      error);
  a = f.token_args();
  a.residual = matrix_view<float>::packed(other.data(), 3, 8);
  CHECK_THROWS_WITH_AS(run(), doctest::Contains("'residual.cols' is 8; expected 7 (d_model = gate.cols)"), error);
  a = f.token_args();
  a.residual = matrix_view<float>::packed(other.data(), 4, 7);
  CHECK_THROWS_WITH_AS(
      run(), doctest::Contains("'residual.rows' is 4; expected 3 (input.rows, one residual row per token)"), error);
  const std::array<std::uint32_t, 2> past{1, 3};
  const std::array<std::uint32_t, 2> repeated{2, 2};
  a = f.token_args();
  a.tokens = subset::only(past);
  CHECK_THROWS_WITH_AS(run(), doctest::Contains("'tokens.indices[1]' is 3; expected an index < 3 (input.rows)"), error);
  a.tokens = subset::only(repeated);
  CHECK_THROWS_WITH_AS(run(), doctest::Contains("'tokens.indices[1]' is 2; expected an index > tokens.indices[0] = 2"),
                       error);
  a = f.token_args();
  a.input.data = nullptr;
  CHECK_THROWS_WITH_AS(run(), doctest::Contains("argument 'input' is a null data pointer"), error);
  a = f.token_args();
  a.residual.row_stride = 4;
  CHECK_THROWS_WITH_AS(run(), doctest::Contains("argument 'residual' is a row stride of 4 bytes"), error);
  std::vector<float> wide(6 * 8, 1.0F);
  a = f.token_args();
  a.weights.gate = matrix_view<const float>::packed(wide.data(), 6, 8);
  CHECK_THROWS_WITH_AS(run(), doctest::Contains("'weights.up.cols' is 7; expected 8"), error);
  a = f.token_args();
  CHECK(run());
}
