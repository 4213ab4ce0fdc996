// The reference backend against hand-computed values and against the independent double
// oracle of test_reference_support.hpp, on every dtype, activation and odd shape; the
// exactness contract (keep-all is bitwise dense) and the empty subsets.

#include "test_reference_support.hpp"

#include <actsparse/backends/cpu/repack.hpp>
#include <actsparse/backends/reference.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace actsparse;
using namespace reference_test;

namespace {

const reference_backend ref{};

std::string label(dtype t) { return std::string(name(t)); }
std::string label(activation a) { return std::string(name(a)); }

std::vector<float> run_gemv(const weight_view& w, std::span<const float> x, subset rows) {
  std::vector<float> y(rows.count(w.rows), std::numeric_limits<float>::quiet_NaN());
  REQUIRE(ref.run_with_scratch(gemv_args{w, x, y, rows}));
  return y;
}

std::vector<float> run_linear(const weight_view& w, std::span<const float> x, subset inputs) {
  std::vector<float> y(w.rows, std::numeric_limits<float>::quiet_NaN());
  REQUIRE(ref.run_with_scratch(linear_args{w, x, y, inputs}));
  return y;
}

struct ffn_weights {
  test_weights gate, up, down;
};

ffn_weights make_ffn(dtype gate_type, dtype up_type, dtype down_type, std::size_t d_model, std::size_t d_ff,
                     std::mt19937& rng, std::size_t pad_elements = 0) {
  return {make_weights(gate_type, d_ff, d_model, rng, pad_elements),
          make_weights(up_type, d_ff, d_model, rng, pad_elements),
          make_weights(down_type, d_model, d_ff, rng, pad_elements)};
}

ffn_weights make_ffn(dtype t, std::size_t d_model, std::size_t d_ff, std::mt19937& rng, std::size_t pad_elements = 0) {
  return make_ffn(t, t, t, d_model, d_ff, rng, pad_elements);
}

std::vector<float> run_ffn(activation act, const ffn_weights& f, std::span<const float> x, subset neurons,
                           std::span<const float> gate_act = {}) {
  std::vector<float> y(x.size(), std::numeric_limits<float>::quiet_NaN());
  REQUIRE(ref.run_with_scratch(
      gated_ffn_args{ffn_layer{act, f.gate.view, f.up.view, f.down.view}, x, y, neurons, gate_act}));
  return y;
}

oracle ffn_oracle(activation act, const ffn_weights& f, std::span<const float> x, const subset& neurons) {
  return reference_test::ffn_oracle(act, f.gate.values, f.up.values, f.down.values, x, neurons);
}

// A token batch: `tokens` rows of d_model values in packed row-major storage.
struct token_batch {
  std::vector<float> input;
  std::vector<float> residual;
  std::size_t tokens = 0;
  std::size_t d_model = 0;

  [[nodiscard]] matrix_view<const float> input_view() const {
    return matrix_view<const float>::packed(input.data(), tokens, d_model);
  }
  [[nodiscard]] matrix_view<float> residual_view() {
    return matrix_view<float>::packed(residual.data(), tokens, d_model);
  }
  [[nodiscard]] std::span<const float> input_row(std::size_t t) const { return {input.data() + t * d_model, d_model}; }
  [[nodiscard]] std::span<const float> residual_row(std::size_t t) const {
    return {residual.data() + t * d_model, d_model};
  }
};

token_batch make_batch(std::size_t tokens, std::size_t d_model, std::mt19937& rng) {
  return {random_vector(tokens * d_model, rng), random_vector(tokens * d_model, rng), tokens, d_model};
}

std::vector<float> run_token_ffn(activation act, const ffn_weights& f, token_batch batch, subset tokens) {
  REQUIRE(ref.run_with_scratch(token_ffn_args{ffn_layer{act, f.gate.view, f.up.view, f.down.view}, batch.input_view(),
                                              batch.residual_view(), tokens}));
  return batch.residual;
}

}  // namespace

TEST_CASE("reference: hand-computed f32 values") {
  const std::array<float, 6> w{1, 2, 3, 4, 5, 6};  // [[1 2 3] [4 5 6]]
  const weight_view wv = matrix_view<const float>::packed(w.data(), 2, 3);
  const std::array<float, 3> x{1.0F, 0.5F, -1.0F};
  CHECK(run_gemv(wv, x, subset::everything()) == std::vector<float>{-1.0F, 0.5F});
  const std::array<std::uint32_t, 1> second{1};
  CHECK(run_gemv(wv, x, subset::only(second)) == std::vector<float>{0.5F});
  const std::array<std::uint32_t, 2> outer{0, 2};
  CHECK(run_linear(wv, x, subset::only(outer)) == std::vector<float>{-2.0F, -2.0F});
  CHECK(run_linear(wv, x, subset::everything()) == std::vector<float>{-1.0F, 0.5F});

  // ReGLU, d_model = d_ff = 2: g = [2, -3] -> relu [2, 0]; u = [5, 4]; h = [10, 0]; y = down h = [10, 30].
  const std::array<float, 4> gate{1, 0, 0, -1};
  const std::array<float, 4> up{1, 1, 2, 0};
  const std::array<float, 4> down{1, 2, 3, 4};
  const weight_view gv = matrix_view<const float>::packed(gate.data(), 2, 2);
  const weight_view uv = matrix_view<const float>::packed(up.data(), 2, 2);
  const weight_view dv = matrix_view<const float>::packed(down.data(), 2, 2);
  const std::array<float, 2> xf{2.0F, 3.0F};
  std::array<float, 2> y{};
  REQUIRE(ref.run_with_scratch(gated_ffn_args{ffn_layer{activation::relu, gv, uv, dv}, xf, y, subset::everything()}));
  CHECK(y == std::array<float, 2>{10.0F, 30.0F});
  const std::array<std::uint32_t, 1> neuron1{1};
  REQUIRE(ref.run_with_scratch(gated_ffn_args{ffn_layer{activation::relu, gv, uv, dv}, xf, y, subset::only(neuron1)}));
  CHECK(y == std::array<float, 2>{0.0F, 0.0F});

  // Token FFN: token 0 is x above, token 1 is skipped; residual starts at 1.
  const std::array<float, 4> input{2.0F, 3.0F, 7.0F, 7.0F};
  std::array<float, 4> residual{1.0F, 1.0F, 1.0F, 1.0F};
  const std::array<std::uint32_t, 1> token0{0};
  REQUIRE(ref.run_with_scratch(
      token_ffn_args{ffn_layer{activation::relu, gv, uv, dv}, matrix_view<const float>::packed(input.data(), 2, 2),
                     matrix_view<float>::packed(residual.data(), 2, 2), subset::only(token0)}));
  CHECK(residual == std::array<float, 4>{11.0F, 31.0F, 1.0F, 1.0F});
}

TEST_CASE("reference: quantized weights are dequantized exactly as core does") {
  // y = W·1 over one row of 64 values is the fma sum of the row as core dequantizes it.
  std::mt19937 rng(7);
  for (const dtype t : {dtype::q8_0, dtype::q4_0}) {
    INFO(label(t));
    const test_weights w = make_weights(t, 1, 64, rng);
    const std::vector<float> ones(64, 1.0F);
    const std::vector<float> y = run_gemv(w.view, ones, subset::everything());
    float sum = 0.0F;
    for (Eigen::Index k = 0; k < 64; ++k) sum = std::fma(static_cast<float>(w.values(0, k)), 1.0F, sum);
    CHECK(y[0] == sum);
  }
}

TEST_CASE("reference gemv and row gather match the double oracle") {
  std::mt19937 rng(11);
  for (const dtype t : all_dtypes) {
    for (const std::size_t cols : test_lengths(t)) {
      for (const std::size_t rows : {std::size_t{1}, std::size_t{6}, std::size_t{37}}) {
        INFO(label(t), " ", rows, "x", cols);
        const test_weights w = make_weights(t, rows, cols, rng);
        const std::vector<float> x = random_vector(cols, rng);
        check_within(run_gemv(w.view, x, subset::everything()), gemv_oracle(w.values, x, subset::everything()));
        for (const double density : {0.1, 0.5, 0.9}) {
          INFO("density ", density);
          const std::vector<std::uint32_t> rows_kept = random_subset(rows, density, rng);
          const subset s = subset::only(rows_kept);
          check_within(run_gemv(w.view, x, s), gemv_oracle(w.values, x, s));
        }
      }
    }
  }
}

TEST_CASE("reference input-sparse linear matches the double oracle") {
  std::mt19937 rng(12);
  for (const dtype t : all_dtypes) {
    for (const std::size_t cols : test_lengths(t)) {
      for (const std::size_t rows : {std::size_t{1}, std::size_t{6}, std::size_t{37}}) {
        INFO(label(t), " ", rows, "x", cols);
        const test_weights w = make_weights(t, rows, cols, rng);
        const std::vector<float> x = random_vector(cols, rng);
        check_within(run_linear(w.view, x, subset::everything()), linear_oracle(w.values, x, subset::everything()));
        for (const double density : {0.1, 0.5, 0.9}) {
          INFO("density ", density);
          const std::vector<std::uint32_t> inputs = random_subset(cols, density, rng);
          const subset s = subset::only(inputs);
          check_within(run_linear(w.view, x, s), linear_oracle(w.values, x, s));
        }
      }
    }
  }
}

TEST_CASE("reference gated FFN matches the double oracle for every dtype and activation") {
  std::mt19937 rng(13);
  for (const dtype t : all_dtypes) {
    for (const auto& shape : ffn_shapes(t)) {
      const std::size_t d_model = shape[0];
      const std::size_t d_ff = shape[1];
      const ffn_weights f = make_ffn(t, d_model, d_ff, rng);
      for (const activation act : all_activations) {
        INFO(label(t), " ", label(act), " d_model ", d_model, " d_ff ", d_ff);
        const std::vector<float> x = random_vector(d_model, rng);
        check_within(run_ffn(act, f, x, subset::everything()), ffn_oracle(act, f, x, subset::everything()));
        for (const double density : {0.1, 0.5, 0.9}) {
          INFO("density ", density);
          const std::vector<std::uint32_t> neurons = random_subset(d_ff, density, rng);
          const subset s = subset::only(neurons);
          check_within(run_ffn(act, f, x, s), ffn_oracle(act, f, x, s));
        }
      }
    }
  }
}

TEST_CASE("reference gated FFN takes gate, up and down of different dtypes") {
  std::mt19937 rng(14);
  const ffn_weights f = make_ffn(dtype::q4_0, dtype::q8_0, dtype::f16, 64, 96, rng);
  const std::vector<float> x = random_vector(64, rng);
  const std::vector<std::uint32_t> neurons = random_subset(96, 0.4, rng);
  for (const activation act : all_activations) {
    INFO(label(act));
    check_within(run_ffn(act, f, x, subset::everything()), ffn_oracle(act, f, x, subset::everything()));
    check_within(run_ffn(act, f, x, subset::only(neurons)), ffn_oracle(act, f, x, subset::only(neurons)));
  }
}

TEST_CASE("reference token FFN matches the double oracle and leaves skipped tokens alone") {
  std::mt19937 rng(15);
  constexpr std::size_t tokens = 9;
  for (const dtype t : all_dtypes) {
    const std::size_t d_model = ffn_shapes(t)[1][0];
    const std::size_t d_ff = ffn_shapes(t)[1][1];
    const ffn_weights f = make_ffn(t, d_model, d_ff, rng);
    for (const activation act : all_activations) {
      for (const double density : {0.3, 0.7, 1.0}) {
        INFO(label(t), " ", label(act), " density ", density);
        const token_batch batch = make_batch(tokens, d_model, rng);
        const std::vector<std::uint32_t> kept = random_subset(tokens, density, rng);
        const std::vector<float> out = run_token_ffn(act, f, batch, subset::only(kept));
        std::size_t k = 0;
        for (std::size_t tok = 0; tok < tokens; ++tok) {
          const std::span<const float> got(out.data() + tok * d_model, d_model);
          if (k < kept.size() && kept[k] == tok) {
            ++k;
            oracle e = ffn_oracle(act, f, batch.input_row(tok), subset::everything());
            const Eigen::VectorXd before = to_double(batch.residual_row(tok));
            e.value += before;
            e.bound += u32 * (e.value.cwiseAbs() + e.bound);  // the f32 rounding of residual + y
            check_within(got, e);
          } else {
            CHECK(same_bits(got, batch.residual_row(tok)));
          }
        }
      }
    }
  }
}

TEST_CASE("reference FFNs give the same bits with W_down or its transpose down_t") {
  std::mt19937 rng(19);
  for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16}) {  // transposed exactly (no requantization)
    const ffn_weights f = make_ffn(t, 37, 53, rng, 3);
    const cpu::owned_weights down_t = cpu::transpose(f.down.view);
    const std::vector<float> x = random_vector(37, rng);
    for (const activation act : all_activations) {
      for (const double density : {1.0, 0.4, 0.0}) {
        INFO(label(t), " ", label(act), " density ", density);
        const std::vector<std::uint32_t> kept = random_subset(53, density, rng);
        const subset neurons = density == 1.0 ? subset::everything() : subset::only(kept);
        const std::vector<float> want = run_ffn(act, f, x, neurons);
        std::vector<float> y(37, -1.0F);
        REQUIRE(ref.run_with_scratch(
            gated_ffn_args{ffn_layer{act, f.gate.view, f.up.view, weight_view{}, down_t.view}, x, y, neurons}));
        CHECK(same_bits(y, want));
        std::fill(y.begin(), y.end(), -1.0F);  // both given: either may be read, same bits
        REQUIRE(ref.run_with_scratch(
            gated_ffn_args{ffn_layer{act, f.gate.view, f.up.view, f.down.view, down_t.view}, x, y, neurons}));
        CHECK(same_bits(y, want));
        const token_batch batch = make_batch(4, 37, rng);
        const std::vector<float> tokens_want =
            run_token_ffn(act, f, batch, neurons.all ? subset::everything() : subset::only({}));
        token_batch other = batch;
        REQUIRE(ref.run_with_scratch(token_ffn_args{ffn_layer{act, f.gate.view, f.up.view, weight_view{}, down_t.view},
                                                    other.input_view(), other.residual_view(),
                                                    neurons.all ? subset::everything() : subset::only({})}));
        CHECK(same_bits(other.residual, tokens_want));
      }
    }
  }
}

TEST_CASE("reference keep-all is bitwise dense for every op, dtype and activation") {
  std::mt19937 rng(16);
  for (const dtype t : all_dtypes) {
    for (const auto& shape : ffn_shapes(t)) {
      const std::size_t d_model = shape[0];
      const std::size_t d_ff = shape[1];
      INFO(label(t), " d_model ", d_model, " d_ff ", d_ff);
      const std::vector<std::uint32_t> all_model = all_indices(d_model);
      const std::vector<std::uint32_t> all_ff = all_indices(d_ff);
      // GEMV / linear on the up matrix [d_ff × d_model].
      const ffn_weights f = make_ffn(t, d_model, d_ff, rng);
      const std::vector<float> x = random_vector(d_model, rng);
      const std::vector<float> dense = run_gemv(f.up.view, x, subset::everything());
      CHECK(same_bits(run_gemv(f.up.view, x, subset::only(all_ff)), dense));
      CHECK(same_bits(run_linear(f.up.view, x, subset::everything()), dense));
      CHECK(same_bits(run_linear(f.up.view, x, subset::only(all_model)), dense));
      for (const activation act : all_activations) {
        INFO(label(act));
        const std::vector<float> y = run_ffn(act, f, x, subset::everything());
        CHECK(same_bits(run_ffn(act, f, x, subset::only(all_ff)), y));
        // Token FFN: every token kept, by everything() and by the full list, equals
        // residual + the dense gated FFN of each token, bitwise.
        const token_batch batch = make_batch(5, d_model, rng);
        const std::vector<std::uint32_t> all_tokens = all_indices(5);
        const std::vector<float> all_kept = run_token_ffn(act, f, batch, subset::everything());
        CHECK(same_bits(run_token_ffn(act, f, batch, subset::only(all_tokens)), all_kept));
        for (std::size_t tok = 0; tok < 5; ++tok) {
          const std::vector<float> yt = run_ffn(act, f, batch.input_row(tok), subset::everything());
          std::vector<float> expected(batch.residual_row(tok).begin(), batch.residual_row(tok).end());
          for (std::size_t i = 0; i < d_model; ++i) expected[i] = expected[i] + yt[i];
          CHECK(same_bits({all_kept.data() + tok * d_model, d_model}, expected));
        }
      }
    }
  }
}

TEST_CASE("reference gated FFN uses a given activated gate, bitwise as if it computed it") {
  std::mt19937 rng(17);
  for (const dtype t : all_dtypes) {
    const std::size_t d_model = ffn_shapes(t)[1][0];
    const std::size_t d_ff = ffn_shapes(t)[1][1];
    const ffn_weights f = make_ffn(t, d_model, d_ff, rng);
    const std::vector<float> x = random_vector(d_model, rng);
    const std::vector<std::uint32_t> neurons = random_subset(d_ff, 0.5, rng);
    for (const activation act : all_activations) {
      INFO(label(t), " ", label(act));
      std::vector<float> gate_act = run_gemv(f.gate.view, x, subset::everything());
      for (float& g : gate_act) g = apply(act, g);
      CHECK(same_bits(run_ffn(act, f, x, subset::everything(), gate_act), run_ffn(act, f, x, subset::everything())));
      CHECK(same_bits(run_ffn(act, f, x, subset::only(neurons), gate_act), run_ffn(act, f, x, subset::only(neurons))));
      // The given values are really what is used (not recomputed): zero gates give y = 0.
      const std::vector<float> zeros(d_ff, 0.0F);
      for (const float v : run_ffn(act, f, x, subset::everything(), zeros)) CHECK(v == 0.0F);
    }
  }
}

TEST_CASE("reference empty subsets: y = 0, residual untouched") {
  std::mt19937 rng(18);
  for (const dtype t : all_dtypes) {
    INFO(label(t));
    const std::size_t d_model = ffn_shapes(t)[1][0];
    const std::size_t d_ff = ffn_shapes(t)[1][1];
    const ffn_weights f = make_ffn(t, d_model, d_ff, rng);
    const std::vector<float> x = random_vector(d_model, rng);
    const subset none = subset::only({});
    CHECK(run_gemv(f.up.view, x, none).empty());
    for (const float v : run_linear(f.up.view, x, none)) CHECK(v == 0.0F);
    for (const activation act : all_activations) {
      for (const float v : run_ffn(act, f, x, none)) CHECK(v == 0.0F);
      const token_batch batch = make_batch(4, d_model, rng);
      CHECK(same_bits(run_token_ffn(act, f, batch, none), batch.residual));
    }
  }
}

TEST_CASE("reference reads strided views (padding poisoned with NaN) as packed ones") {
  std::mt19937 rng(19);
  for (const dtype t : all_dtypes) {
    INFO(label(t));
    const std::size_t d_model = ffn_shapes(t)[2][0];
    const std::size_t d_ff = ffn_shapes(t)[2][1];
    std::mt19937 same_a(rng());
    std::mt19937 same_b = same_a;
    const ffn_weights packed = make_ffn(t, d_model, d_ff, same_a);
    const ffn_weights strided = make_ffn(t, d_model, d_ff, same_b, 3);
    REQUIRE(strided.up.view.row_stride == packed.up.view.row_stride + 3 * block_bytes(t));
    const std::vector<float> x = random_vector(d_model, rng);
    const std::vector<std::uint32_t> rows = random_subset(d_ff, 0.5, rng);
    const std::vector<std::uint32_t> inputs = random_subset(d_model, 0.5, rng);
    CHECK(same_bits(run_gemv(strided.up.view, x, subset::everything()),
                    run_gemv(packed.up.view, x, subset::everything())));
    CHECK(same_bits(run_gemv(strided.up.view, x, subset::only(rows)), run_gemv(packed.up.view, x, subset::only(rows))));
    CHECK(same_bits(run_linear(strided.up.view, x, subset::only(inputs)),
                    run_linear(packed.up.view, x, subset::only(inputs))));
    for (const activation act : all_activations) {
      INFO(label(act));
      const std::vector<float> y = run_ffn(act, strided, x, subset::everything());
      check_within(y, ffn_oracle(act, packed, x, subset::everything()));
      CHECK(same_bits(y, run_ffn(act, packed, x, subset::everything())));
      CHECK(same_bits(run_ffn(act, strided, x, subset::only(rows)), run_ffn(act, packed, x, subset::only(rows))));

      // Token FFN on strided input and residual (a torch view with stride(0) = d_model + 5).
      constexpr std::size_t tokens = 6;
      const std::size_t stride = d_model + 5;
      const float nan = std::numeric_limits<float>::quiet_NaN();
      const token_batch batch = make_batch(tokens, d_model, rng);
      std::vector<float> input(tokens * stride, nan);
      std::vector<float> residual(tokens * stride, nan);
      for (std::size_t tok = 0; tok < tokens; ++tok) {
        std::copy_n(batch.input.data() + tok * d_model, d_model, input.data() + tok * stride);
        std::copy_n(batch.residual.data() + tok * d_model, d_model, residual.data() + tok * stride);
      }
      const std::vector<std::uint32_t> kept{0, 2, 3};
      REQUIRE(ref.run_with_scratch(token_ffn_args{
          ffn_layer{act, strided.gate.view, strided.up.view, strided.down.view},
          from_torch<const float>(input.data(), tokens, static_cast<std::int64_t>(d_model),
                                  static_cast<std::int64_t>(stride)),
          from_torch(residual.data(), tokens, static_cast<std::int64_t>(d_model), static_cast<std::int64_t>(stride)),
          subset::only(kept)}));
      const std::vector<float> expected = run_token_ffn(act, packed, batch, subset::only(kept));
      for (std::size_t tok = 0; tok < tokens; ++tok) {
        CHECK(same_bits({residual.data() + tok * stride, d_model}, {expected.data() + tok * d_model, d_model}));
        for (std::size_t i = d_model; i < stride; ++i) CHECK(std::isnan(residual[tok * stride + i]));
      }
    }
  }
}

TEST_CASE("reference results are deterministic and NaN propagates") {
  std::mt19937 rng(20);
  const ffn_weights f = make_ffn(dtype::q8_0, 64, 96, rng);
  std::vector<float> x = random_vector(64, rng);
  const std::vector<std::uint32_t> neurons = random_subset(96, 0.5, rng);
  const std::vector<float> first = run_ffn(activation::gelu, f, x, subset::only(neurons));
  CHECK(same_bits(run_ffn(activation::gelu, f, x, subset::only(neurons)), first));
  x[5] = std::numeric_limits<float>::quiet_NaN();
  for (const float v : run_ffn(activation::silu, f, x, subset::everything())) CHECK(std::isnan(v));
  for (const float v : run_gemv(f.up.view, x, subset::everything())) CHECK(std::isnan(v));
}
