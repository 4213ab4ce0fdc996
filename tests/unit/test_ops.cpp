// The composed operators: policies and the reference backend together.
#include "test_reference_support.hpp"

#include <actsparse/backends/reference.hpp>
#include <actsparse/ops/input_sparse_linear.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>
#include <actsparse/ops/token_sparse_ffn.hpp>
#include <actsparse/scorers/magnitude.hpp>
#include <actsparse/scorers/silu_magnitude.hpp>
#include <actsparse/scorers/weight_aware.hpp>
#include <actsparse/scorers/weight_aware_gate.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>
#include <actsparse/selectors/threshold.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <vector>

using namespace actsparse;
using namespace reference_test;

namespace {

struct ffn_fixture {
  test_weights gate, up, down;
  ffn_layer w;
  ffn_fixture(dtype t, activation act, std::size_t d_model, std::size_t d_ff, std::mt19937& rng)
      : gate(make_weights(t, d_ff, d_model, rng)),
        up(make_weights(t, d_ff, d_model, rng)),
        down(make_weights(t, d_model, d_ff, rng)),
        w{act, gate.view, up.view, down.view} {}
};

}  // namespace

TEST_CASE("ops: neuron_sparse_ffn keep-all equals the dense FFN bit for bit, every dtype and activation") {
  std::mt19937 rng(11);
  for (const dtype t : all_dtypes) {
    for (const activation act : all_activations) {
      const ffn_fixture f(t, act, 64, 96, rng);
      const auto x = random_vector(64, rng);
      std::vector<float> dense(64), y(64);
      ffn_scratch s;
      inline_executor ex;
      const reference_backend ref;
      REQUIRE(dense_ffn(ref, f.w, x, dense, s, ex));
      selection kept;
      // Three ways to keep every neuron: mass 1, top_k of n, and a threshold below every score.
      const neuron_sparse_ffn op1{magnitude{}, cumulative_mass{1.0, 0, 0}, score_source::gate_activation, ref};
      REQUIRE(op1(f.w, x, y, kept, s, ex));
      CHECK(kept.keeps_all());
      CHECK(same_bits(y, dense));
      const neuron_sparse_ffn op2{weight_aware_gate::from_weights(f.w.up, f.w.down), top_k::by_count(96),
                                  score_source::gate_preactivation, ref};
      REQUIRE(op2(f.w, x, y, kept, s, ex));
      CHECK(same_bits(y, dense));
      const neuron_sparse_ffn op3{magnitude{}, threshold{-1.0F}, score_source::hidden, ref};
      REQUIRE(op3(f.w, x, y, kept, s, ex));
      CHECK(kept.keeps_all());
      CHECK(same_bits(y, dense));
    }
  }
}

TEST_CASE("ops: neuron_sparse_ffn computes the FFN over exactly the selected neurons") {
  std::mt19937 rng(12);
  const ffn_fixture f(dtype::q8_0, activation::silu, 64, 128, rng);
  const auto x = random_vector(64, rng);
  const reference_backend ref;
  inline_executor ex;
  ffn_scratch s;
  selection kept;
  std::vector<float> y(64), expected(64);
  const neuron_sparse_ffn op{silu_magnitude{}, top_k::by_ratio(0.25), score_source::gate_preactivation, ref};
  REQUIRE(op(f.w, x, y, kept, s, ex));
  CHECK(kept.size() == 32);
  // The kept neurons are the 32 largest |silu(g)|.
  std::vector<float> g(128);
  REQUIRE(ref.run_with_scratch(gemv_args{f.w.gate, x, g, subset::everything()}));
  float smallest_kept = INFINITY;
  float largest_dropped = 0.0F;
  for (std::uint32_t j = 0; j < 128; ++j) {
    const float score = std::fabs(silu(g[j]));
    if (std::binary_search(kept.indices.begin(), kept.indices.end(), j)) {
      smallest_kept = std::min(smallest_kept, score);
    } else {
      largest_dropped = std::max(largest_dropped, score);
    }
  }
  CHECK(smallest_kept >= largest_dropped);
  // The output is the reference FFN over that set.
  REQUIRE(ref.run_with_scratch(gated_ffn_args{f.w, x, expected, subset::only(kept.indices)}));
  CHECK(same_bits(y, expected));
  // And it is close to, but not equal to, the dense output.
  std::vector<float> dense(64);
  REQUIRE(dense_ffn(ref, f.w, x, dense, s, ex));
  CHECK_FALSE(same_bits(y, dense));
}

TEST_CASE("ops: neuron_sparse_ffn reports a scorer of the wrong size") {
  std::mt19937 rng(13);
  const ffn_fixture f(dtype::f32, activation::silu, 32, 48, rng);
  const auto x = random_vector(32, rng);
  std::vector<float> y(32);
  ffn_scratch s;
  selection kept;
  inline_executor ex;
  // Column norms of a 32-column matrix: 32 scores, but the FFN has 48 neurons.
  const neuron_sparse_ffn op{weight_aware::from_weights(f.w.gate), top_k::by_ratio(0.5), score_source::hidden,
                             reference_backend{}};
  CHECK_THROWS_AS(op(f.w, x, y, kept, s, ex), error);
}

TEST_CASE("ops: input_sparse_linear keep-all is the dense linear, sparse skips the dropped channels") {
  std::mt19937 rng(14);
  for (const dtype t : all_dtypes) {
    const test_weights w = make_weights(t, 40, 64, rng);
    const auto x = random_vector(64, rng);
    const reference_backend ref;
    inline_executor ex;
    linear_scratch s;
    selection kept;
    std::vector<float> dense(40), y(40), expected(40);
    REQUIRE(ref.run_with_scratch(linear_args{w.view, x, dense, subset::everything()}));
    const input_sparse_linear all{magnitude{}, threshold{-1.0F}, ref};
    REQUIRE(all(linear_layer{w.view}, x, y, kept, s, ex));
    CHECK(same_bits(y, dense));
    const input_sparse_linear half{weight_aware::from_weights(w.view), top_k::by_ratio(0.5), ref};
    REQUIRE(half(linear_layer{w.view}, x, y, kept, s, ex));
    CHECK(kept.size() == 32);
    REQUIRE(ref.run_with_scratch(linear_args{w.view, x, expected, subset::only(kept.indices)}));
    CHECK(same_bits(y, expected));
  }
}

TEST_CASE("ops: token_sparse_ffn follows the depth schedule, dense layers and mass 1 equal dense") {
  std::mt19937 rng(15);
  const ffn_fixture f(dtype::f16, activation::silu, 32, 64, rng);
  const std::size_t tokens = 40;
  std::vector<float> attn(tokens * 32), input(tokens * 32), residual0(tokens * 32);
  for (auto* v : {&attn, &input, &residual0}) *v = random_vector(tokens * 32, rng);
  // Make a few tokens dominate the attention output so the mass is concentrated.
  for (std::size_t t : {3U, 17U, 25U}) {
    for (std::size_t i = 0; i < 32; ++i) attn[t * 32 + i] *= 50.0F;
  }
  const auto in_view = matrix_view<const float>::packed(input.data(), tokens, 32);
  const auto attn_view = matrix_view<const float>::packed(attn.data(), tokens, 32);
  const reference_backend ref;
  inline_executor ex;
  token_scratch s;
  selection kept;

  std::vector<float> dense = residual0;
  REQUIRE(ref.run_with_scratch(
      token_ffn_args{f.w, in_view, matrix_view<float>::packed(dense.data(), tokens, 32), subset::everything()}));

  const depth_schedule schedule{2, depth_schedule::no_deep_tier, 0.5, 0.5, 4, 1};
  const token_sparse_ffn<reference_backend> op{schedule};
  // Layer 1 < dense_until: dense, bit for bit.
  std::vector<float> r = residual0;
  REQUIRE(op(1, f.w, attn_view, in_view, matrix_view<float>::packed(r.data(), tokens, 32), kept, s, ex));
  CHECK(kept.reason == fallback_reason::dense_layer);
  CHECK(same_bits(r, dense));
  // Layer 5, mass 0.5: loud tokens (3, 17, 25 carry ~80% of the L2 mass) plus the last 4 are
  // kept, exactly as cumulative_mass over token_l2 decides; the others pass through.
  r = residual0;
  REQUIRE(op(5, f.w, attn_view, in_view, matrix_view<float>::packed(r.data(), tokens, 32), kept, s, ex));
  std::vector<float> norms(tokens);
  token_l2{}.score(attn_view, norms);
  const selection expected = cumulative_mass{0.5, 4, 1}.select(norms);
  CHECK(kept.indices == expected.indices);
  CHECK(kept.size() < 10);
  for (std::uint32_t t : {36U, 37U, 38U, 39U}) CHECK(std::binary_search(kept.indices.begin(), kept.indices.end(), t));
  std::size_t loud = 0;
  for (std::uint32_t t : {3U, 17U, 25U}) loud += std::binary_search(kept.indices.begin(), kept.indices.end(), t);
  CHECK(loud >= 2);
  CHECK(kept.size() == loud + 4);
  for (std::size_t t = 0; t < tokens; ++t) {
    const bool is_kept = std::binary_search(kept.indices.begin(), kept.indices.end(), static_cast<std::uint32_t>(t));
    const std::span<const float> got(r.data() + t * 32, 32);
    const std::span<const float> want(is_kept ? dense.data() + t * 32 : residual0.data() + t * 32, 32);
    CHECK(same_bits(got, want));
  }
  // Mass 1.0 keeps every token: bit for bit dense.
  const token_sparse_ffn<reference_backend> all{depth_schedule{0, depth_schedule::no_deep_tier, 1.0, 1.0, 0, 1}};
  r = residual0;
  REQUIRE(all(5, f.w, attn_view, in_view, matrix_view<float>::packed(r.data(), tokens, 32), kept, s, ex));
  CHECK(kept.keeps_all());
  CHECK(same_bits(r, dense));
}
