// The MoE layer: the routing table and its layouts, the gating functions against a double
// oracle, the per-token expert counts, and moe_ffn on the reference and CPU backends
// (keep-all equals a per-token loop over the same experts, bit for bit; any thread count).

#include "cpu_test_support.hpp"
#include "moe_test_support.hpp"
#include "quantized_matrix.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/backends/reference.hpp>
#include <actsparse/core/routing.hpp>
#include <actsparse/ops/moe_ffn.hpp>
#include <actsparse/ops/moe_router.hpp>
#include <actsparse/scorers/magnitude.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

using namespace actsparse;
using moe_test::moe_weights;
using moe_test::random_vector;
using moe_test::same_bits;

namespace {

// Random per-token expert lists: token t runs counts in [min_k, max_k] distinct experts.
struct random_routing {
  std::vector<std::uint32_t> offsets{0};
  std::vector<std::uint32_t> experts;
  std::vector<float> weights;
};
random_routing make_routing(std::size_t tokens, std::size_t n_experts, std::size_t min_k, std::size_t max_k,
                            std::mt19937& rng) {
  random_routing r;
  std::vector<std::uint32_t> all(n_experts);
  std::iota(all.begin(), all.end(), 0U);
  std::uniform_int_distribution<std::size_t> count(min_k, max_k);
  std::uniform_real_distribution<float> w(0.05F, 1.0F);
  for (std::size_t t = 0; t < tokens; ++t) {
    std::shuffle(all.begin(), all.end(), rng);
    std::vector<std::uint32_t> pick(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(count(rng)));
    std::sort(pick.begin(), pick.end());
    for (const std::uint32_t e : pick) {
      r.experts.push_back(e);
      r.weights.push_back(w(rng));
    }
    r.offsets.push_back(static_cast<std::uint32_t>(r.experts.size()));
  }
  return r;
}

void check_table_properties(const routing_table& t) {
  // Every token-major pair appears exactly once on the expert-major side, under its expert,
  // with its token, tokens increasing within an expert.
  std::vector<int> seen(t.pairs(), 0);
  for (std::size_t e = 0; e < t.experts(); ++e) {
    for (std::uint32_t q = t.expert_offsets()[e]; q < t.expert_offsets()[e + 1]; ++q) {
      const std::uint32_t p = t.expert_pairs()[q];
      REQUIRE(p < t.pairs());
      ++seen[p];
      CHECK(t.pair_expert()[p] == e);
      const std::uint32_t tok = t.expert_tokens()[q];
      CHECK(p >= t.token_offsets()[tok]);
      CHECK(p < t.token_offsets()[tok + 1]);
      if (q > t.expert_offsets()[e]) CHECK(tok > t.expert_tokens()[q - 1]);
    }
  }
  for (const int s : seen) CHECK(s == 1);
  CHECK(t.expert_offsets().back() == t.pairs());
}

}  // namespace

TEST_CASE("routing_table: every (token, expert) pair once, grouped by expert, tokens sorted, offsets consistent") {
  std::mt19937 rng(11);
  for (const auto& [tokens, n_experts, min_k, max_k] : std::vector<std::array<std::size_t, 4>>{
           {1, 8, 2, 2}, {37, 8, 1, 4}, {200, 64, 0, 6}, {5, 1, 1, 1}, {0, 4, 1, 1}}) {
    const random_routing r = make_routing(tokens, n_experts, min_k, max_k, rng);
    routing_table t;
    t.assign(n_experts, r.offsets, r.experts, r.weights);
    CHECK(t.tokens() == tokens);
    CHECK(t.pairs() == r.experts.size());
    check_table_properties(t);
    check_routing(t.view(), "test");
    // Padded layout: each expert's run padded to the block with the sentinel, which is never a pair.
    for (const std::size_t block : {1U, 4U, 16U}) {
      const padded_routing pr = pad(t, block);
      CHECK(pr.pairs_post_padded() % block == 0);
      CHECK(pr.block_experts.size() * block == pr.pairs_post_padded());
      CHECK(pr.sentinel == t.pairs());
      std::vector<int> seen(t.pairs(), 0);
      for (std::size_t i = 0; i < pr.sorted_pair_ids.size(); ++i) {
        const std::uint32_t id = pr.sorted_pair_ids[i];
        if (id == pr.sentinel) continue;
        ++seen[id];
        CHECK(t.pair_expert()[id] == pr.block_experts[i / block]);
      }
      for (const int s : seen) CHECK(s == 1);
    }
  }
}

TEST_CASE("routing_table: one expert taking every token, experts with no token, ggml ids") {
  const std::vector<std::uint32_t> offsets{0, 1, 2, 3};
  const std::vector<std::uint32_t> experts{2, 2, 2};
  const std::vector<float> weights{1.0F, 0.5F, 0.25F};
  routing_table t;
  t.assign(4, offsets, experts, weights);
  CHECK(t.active_experts() == 1);
  CHECK(t.tokens_of(2) == 3);
  CHECK(t.tokens_of(0) == 0);
  CHECK(std::vector<std::uint32_t>(t.expert_offsets().begin(), t.expert_offsets().end()) ==
        std::vector<std::uint32_t>{0, 0, 0, 3, 3});
  const std::vector<std::int32_t> ids = ggml_ids(t, 2);
  CHECK(ids == std::vector<std::int32_t>{2, -1, 2, -1, 2, -1});
  const padded_routing pr = pad(t, 4);
  CHECK(pr.sorted_pair_ids == std::vector<std::uint32_t>{0, 1, 2, 3});
  CHECK(pr.block_experts == std::vector<std::uint32_t>{2});
  CHECK_THROWS_WITH_AS(ggml_ids(t, 0), doctest::Contains("n_used"), error);
}

TEST_CASE("routing_table: bad pair lists are clear errors") {
  routing_table t;
  const std::vector<float> w2{1.0F, 1.0F};
  CHECK_THROWS_WITH_AS(t.assign(4, std::vector<std::uint32_t>{0, 2}, std::vector<std::uint32_t>{1, 1}, w2),
                       doctest::Contains("strictly increasing"), error);
  CHECK_THROWS_WITH_AS(t.assign(4, std::vector<std::uint32_t>{0, 2}, std::vector<std::uint32_t>{1, 4}, w2),
                       doctest::Contains("an expert < 4"), error);
  CHECK_THROWS_WITH_AS(t.assign(4, std::vector<std::uint32_t>{0, 3}, std::vector<std::uint32_t>{1, 2}, w2),
                       doctest::Contains("offsets"), error);
  CHECK_THROWS_WITH_AS(t.assign(4, std::vector<std::uint32_t>{0, 2, 1}, std::vector<std::uint32_t>{1, 2}, w2),
                       doctest::Contains("offsets"), error);
  const std::vector<float> nan{1.0F, std::nanf("")};
  CHECK_THROWS_WITH_AS(t.assign(4, std::vector<std::uint32_t>{0, 2}, std::vector<std::uint32_t>{1, 2}, nan),
                       doctest::Contains("a finite weight"), error);
  CHECK_THROWS_WITH_AS(t.assign(0, std::vector<std::uint32_t>{0}, {}, {}), doctest::Contains("at least one expert"),
                       error);
  // A hand-made view whose expert-major side is wrong.
  t.assign(3, std::vector<std::uint32_t>{0, 1, 2}, std::vector<std::uint32_t>{0, 1}, w2);
  routing_view v = t.view();
  const std::vector<std::uint32_t> wrong_tokens{1, 0};
  v.expert_tokens = wrong_tokens;
  CHECK_THROWS_WITH_AS(check_routing(v, "test"), doctest::Contains("expert_tokens"), error);
}

namespace {

// The double oracle of one token's gating: chosen experts (sorted) and weights.
struct oracle_choice {
  std::vector<std::uint32_t> experts;
  std::vector<double> weights;
};
oracle_choice oracle(moe_gating g, bool normalize, double scale, const std::vector<float>& l, std::size_t k) {
  const std::size_t n = l.size();
  double mx = -HUGE_VAL;
  for (const float v : l) mx = std::max(mx, static_cast<double>(v));
  std::vector<double> p(n);
  double z = 0.0;
  for (std::size_t e = 0; e < n; ++e) z += std::exp(static_cast<double>(l[e]) - mx);
  for (std::size_t e = 0; e < n; ++e) p[e] = std::exp(static_cast<double>(l[e]) - mx) / z;
  std::vector<double> key(n);
  for (std::size_t e = 0; e < n; ++e) {
    key[e] = g == moe_gating::softmax_top_k   ? p[e]
             : g == moe_gating::sigmoid_top_k ? 1.0 / (1.0 + std::exp(-static_cast<double>(l[e])))
                                              : static_cast<double>(l[e]);
  }
  std::vector<std::uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0U);
  std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) { return key[a] > key[b]; });
  order.resize(k);
  std::sort(order.begin(), order.end());
  oracle_choice c;
  c.experts = order;
  double sum = 0.0;
  for (const std::uint32_t e : order) {
    double w = 1.0;
    if (g == moe_gating::softmax_top_k) w = p[e];
    if (g == moe_gating::top_k_softmax) w = std::exp(static_cast<double>(l[e]) - mx);
    if (g == moe_gating::sigmoid_top_k) w = key[e];
    c.weights.push_back(w);
    sum += w;
  }
  const bool norm = g == moe_gating::top_k_softmax || (normalize && g != moe_gating::top_k_unit);
  for (double& w : c.weights) w = (norm ? w / sum : w) * scale;
  return c;
}

}  // namespace

TEST_CASE("route: every gating function against a double oracle") {
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0F, 2.0F);
  const std::size_t tokens = 40;
  for (const std::size_t n_experts : {8U, 64U}) {
    std::vector<float> logits(tokens * n_experts);
    for (float& v : logits) v = d(rng);
    const matrix_view<const float> lv = matrix_view<const float>::packed(logits.data(), tokens, n_experts);
    for (const moe_gating g :
         {moe_gating::softmax_top_k, moe_gating::top_k_softmax, moe_gating::sigmoid_top_k, moe_gating::top_k_unit}) {
      for (const bool normalize : {false, true}) {
        INFO(name(g), " normalize ", normalize, " experts ", n_experts);
        moe_routing policy;
        policy.gating = g;
        policy.native_k = 6;
        policy.normalize_top_k = normalize;
        policy.scale = 2.5F;
        routing_table t;
        moe_route_scratch s;
        route(policy, 0, lv, t, s);
        REQUIRE(t.pairs() == tokens * 6);
        for (std::size_t tok = 0; tok < tokens; ++tok) {
          const std::vector<float> l(logits.begin() + static_cast<std::ptrdiff_t>(tok * n_experts),
                                     logits.begin() + static_cast<std::ptrdiff_t>((tok + 1) * n_experts));
          const oracle_choice c = oracle(g, normalize, 2.5, l, 6);
          for (std::size_t i = 0; i < 6; ++i) {
            const std::size_t p = t.token_offsets()[tok] + i;
            CHECK(t.pair_expert()[p] == c.experts[i]);
            CHECK(static_cast<double>(t.pair_weight()[p]) == doctest::Approx(c.weights[i]).epsilon(1e-6));
          }
        }
      }
    }
  }
}

TEST_CASE("route: per-layer k, adaptive counts, prefill budgets, and clear errors") {
  std::mt19937 rng(9);
  std::normal_distribution<float> d(0.0F, 3.0F);
  const std::size_t tokens = 300;
  const std::size_t n_experts = 16;
  std::vector<float> logits(tokens * n_experts);
  for (float& v : logits) v = d(rng);
  const auto lv = matrix_view<const float>::packed(logits.data(), tokens, n_experts);
  routing_table t;
  moe_route_scratch s;
  const auto counts = [&] {
    std::vector<std::size_t> c;
    for (std::size_t i = 0; i < t.tokens(); ++i) c.push_back(t.token_offsets()[i + 1] - t.token_offsets()[i]);
    return c;
  };

  moe_routing policy;
  policy.native_k = 6;
  policy.layer_k = progressive_top_k::parse("0-1:6,2-3:5,4:4");
  route(policy, 3, lv, t, s);
  for (const std::size_t c : counts()) CHECK(c == 5);
  route(policy, 4, lv, t, s);
  for (const std::size_t c : counts()) CHECK(c == 4);

  // Adaptive: the smallest bucket reaching the mass, capped at the layer's k.
  policy.adaptive = adaptive_top_k{{3, 4, 5, 6}, 0.5};
  route(policy, 0, lv, t, s);
  std::vector<float> p(n_experts);
  std::size_t fewer = 0;
  for (std::size_t tok = 0; tok < tokens; ++tok) {
    router_softmax{}.score(std::span<const float>(logits.data() + tok * n_experts, n_experts), p);
    const std::size_t want = std::min<std::size_t>(policy.adaptive->select(p).size(), 6);
    CHECK(counts()[tok] == want);
    fewer += want < 6 ? 1 : 0;
  }
  CHECK(fewer > 0);
  route(policy, 4, lv, t, s);  // capped at the layer's 4
  for (const std::size_t c : counts()) CHECK(c <= 4);

  // Prefill budget: the kept 128-token blocks run the full count, the rest the reduced one.
  policy.adaptive.reset();
  policy.layer_k.reset();
  policy.budget = prefill_budget{block_budget{128, 0.0, 0.10, 0.50}, 2};
  route(policy, 0, lv, t, s);
  const std::vector<std::size_t> c = counts();
  std::size_t full = 0;
  for (std::size_t b = 0; b < 3; ++b) {  // blocks [0,128), [128,256), [256,300): whole blocks alike
    const std::size_t first = c[b * 128];
    for (std::size_t i = b * 128; i < std::min<std::size_t>((b + 1) * 128, tokens); ++i) CHECK(c[i] == first);
    CHECK((first == 6 || first == 2));
    if (first == 6) full += std::min<std::size_t>((b + 1) * 128, tokens) - b * 128;
  }
  CHECK(full >= 30);   // at least min_full_ratio of the tokens
  CHECK(full <= 150);  // at most max_full_ratio
  // Token scores given by the caller: the block with the largest mean score is the full one.
  std::vector<float> scores(tokens, 0.1F);
  for (std::size_t i = 256; i < tokens; ++i) scores[i] = 5.0F;
  route(policy, 0, lv, t, s, scores);
  CHECK(counts()[0] == 2);
  CHECK(counts()[299] == 6);

  // Errors.
  moe_routing bad;
  bad.native_k = 17;
  CHECK_THROWS_WITH_AS(route(bad, 0, lv, t, s), doctest::Contains("native_k"), error);
  bad.native_k = 0;
  CHECK_THROWS_WITH_AS(route(bad, 0, lv, t, s), doctest::Contains("native_k"), error);
  bad.native_k = 4;
  bad.layer_k = progressive_top_k::parse("0-9:6");
  CHECK_THROWS_WITH_AS(route(bad, 0, lv, t, s), doctest::Contains("allow_above_native"), error);
  bad.allow_above_native = true;
  route(bad, 0, lv, t, s);
  CHECK(t.pairs() == tokens * 6);
  CHECK_THROWS_WITH_AS(route(bad, 10, lv, t, s), doctest::Contains("layer"), error);
  std::vector<float> nan_logits = logits;
  nan_logits[3 * n_experts + 5] = std::nanf("");
  CHECK_THROWS_WITH_AS(
      route(moe_routing{}, 0, matrix_view<const float>::packed(nan_logits.data(), tokens, n_experts), t, s),
      doctest::Contains("logits[3][5]"), error);
  nan_logits[3 * n_experts + 5] = HUGE_VALF;
  CHECK_THROWS_WITH_AS(
      route(moe_routing{}, 0, matrix_view<const float>::packed(nan_logits.data(), tokens, n_experts), t, s),
      doctest::Contains("finite router logits"), error);
  const std::vector<float> short_scores(5, 1.0F);
  CHECK_THROWS_WITH_AS(route(policy, 0, lv, t, s, short_scores), doctest::Contains("token_scores"), error);
}

namespace {

// The per-token loop on one backend: each pair's dense gated FFN, then the backend's row axpy
// over the pair outputs (shared last, coefficient 1).
template <class Backend>
std::vector<float> per_token_loop(const Backend& backend, const moe_experts& x, const routing_table& t,
                                  const std::vector<float>& input, const ffn_layer& shared) {
  const std::size_t d = x.d_model();
  std::vector<float> out(t.tokens() * d);
  std::vector<std::byte> ws;
  typename Backend::executor_type ex{};
  for (std::size_t tok = 0; tok < t.tokens(); ++tok) {
    const std::span<const float> xt(input.data() + tok * d, d);
    std::vector<float> rows;
    std::vector<float> coef;
    std::vector<float> f(d);
    for (std::uint32_t p = t.token_offsets()[tok]; p < t.token_offsets()[tok + 1]; ++p) {
      REQUIRE(run(backend, gated_ffn_args{x.expert(t.pair_expert()[p]), xt, f, subset::everything()}, ws, ex));
      rows.insert(rows.end(), f.begin(), f.end());
      coef.push_back(t.pair_weight()[p]);
    }
    if (!shared.gate.absent()) {
      REQUIRE(run(backend, gated_ffn_args{shared, xt, f, subset::everything()}, ws, ex));
      rows.insert(rows.end(), f.begin(), f.end());
      coef.push_back(1.0F);
    }
    const std::span<float> y(out.data() + tok * d, d);
    if (coef.empty()) continue;
    const weight_view w(rows.data(), dtype::f32, coef.size(), d, d * sizeof(float));
    REQUIRE(run(backend, transposed_linear_args{w, coef, y, subset::everything()}, ws, ex));
  }
  return out;
}

}  // namespace

TEST_CASE("moe_ffn_args: reference against a double oracle and cpu keep-all equals its per-token loop bit for bit") {
  std::mt19937 rng(3);
  const std::size_t n_experts = 6;
  const std::size_t d_model = 64;
  const std::size_t d_ff = 96;
  const std::size_t tokens = 9;
  for (const dtype type : {dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0}) {
    const moe_weights w(type, n_experts, d_model, d_ff, rng);
    const std::vector<float> input = random_vector(tokens * d_model, rng);
    // Expert 5 gets no token; expert 0 every token.
    random_routing r = make_routing(tokens, n_experts - 2, 1, 3, rng);
    for (std::uint32_t& e : r.experts) ++e;  // experts 1..4
    random_routing rr;
    for (std::size_t tok = 0; tok < tokens; ++tok) {
      rr.experts.push_back(0);
      rr.weights.push_back(0.75F);
      for (std::uint32_t p = r.offsets[tok]; p < r.offsets[tok + 1]; ++p) {
        rr.experts.push_back(r.experts[p]);
        rr.weights.push_back(r.weights[p]);
      }
      rr.offsets.push_back(static_cast<std::uint32_t>(rr.experts.size()));
    }
    routing_table t;
    t.assign(n_experts, rr.offsets, rr.experts, rr.weights);
    REQUIRE(t.tokens_of(5) == 0);
    REQUIRE(t.tokens_of(0) == tokens);
    for (const bool transposed : {true, false}) {
      for (const bool with_shared : {false, true}) {
        INFO(name(type), transposed ? " down_t" : " down", with_shared ? " shared" : "");
        const moe_experts x = w.experts(transposed);
        const ffn_layer shared = with_shared ? w.shared() : ffn_layer{};
        std::vector<float> ref(tokens * d_model);
        const moe_ffn_args args{x, t.view(), matrix_view<const float>::packed(input.data(), tokens, d_model),
                                matrix_view<float>::packed(ref.data(), tokens, d_model), shared};
        REQUIRE(reference_backend{}.run_with_scratch(args));
        CHECK(same_bits(ref, per_token_loop(reference_backend{}, x, t, input, shared)));
        // Double oracle on the dequantized values.
        double err = 0.0, norm = 0.0;
        for (std::size_t tok = 0; tok < tokens; ++tok) {
          std::vector<double> y(d_model, 0.0);
          const auto add_expert = [&](const std::vector<float>& g, const std::vector<float>& u,
                                      const std::vector<float>& dn, std::size_t e, double weight, bool dn_t) {
            for (std::size_t j = 0; j < d_ff; ++j) {
              double gj = 0.0, uj = 0.0;
              for (std::size_t i = 0; i < d_model; ++i) {
                gj += static_cast<double>(g[(e * d_ff + j) * d_model + i]) * input[tok * d_model + i];
                uj += static_cast<double>(u[(e * d_ff + j) * d_model + i]) * input[tok * d_model + i];
              }
              const double h = gj / (1.0 + std::exp(-gj)) * uj;
              for (std::size_t i = 0; i < d_model; ++i) {
                const double wd = dn_t ? dn[(e * d_ff + j) * d_model + i] : dn[(e * d_model + i) * d_ff + j];
                y[i] += weight * wd * h;
              }
            }
          };
          for (std::uint32_t p = t.token_offsets()[tok]; p < t.token_offsets()[tok + 1]; ++p) {
            add_expert(w.gate.values, w.up.values, transposed ? w.down_t.values : w.down.values, t.pair_expert()[p],
                       t.pair_weight()[p], transposed);
          }
          if (with_shared) {
            // The shared expert: one FFN of 2·d_ff neurons.
            for (std::size_t j = 0; j < 2 * d_ff; ++j) {
              double gj = 0.0, uj = 0.0;
              for (std::size_t i = 0; i < d_model; ++i) {
                gj += static_cast<double>(w.sgate.values[j * d_model + i]) * input[tok * d_model + i];
                uj += static_cast<double>(w.sup.values[j * d_model + i]) * input[tok * d_model + i];
              }
              const double h = gj / (1.0 + std::exp(-gj)) * uj;
              for (std::size_t i = 0; i < d_model; ++i) y[i] += w.sdown_t.values[j * d_model + i] * h;
            }
          }
          for (std::size_t i = 0; i < d_model; ++i) {
            err = std::max(err, std::fabs(y[i] - ref[tok * d_model + i]));
            norm = std::max(norm, std::fabs(y[i]));
          }
        }
        CHECK(err <= 1e-4 * norm);

        // CPU: against the reference (x quantized for q8_0 / q4_0), and bit for bit against its
        // own per-token loop and across executors.
        const cpu_backend cpu;
        std::vector<float> one(tokens * d_model);
        std::vector<std::byte> ws;
        cpu::executor ex;
        REQUIRE(run(
            cpu, moe_ffn_args{x, t.view(), args.input, matrix_view<float>::packed(one.data(), tokens, d_model), shared},
            ws, ex));
        const bool int8 = type == dtype::q8_0 || type == dtype::q4_0;
        for (std::size_t i = 0; i < one.size(); ++i) {
          CHECK(std::fabs(one[i] - ref[i]) <= (int8 ? 0.1 : 1e-3) * norm);
        }
        if (cpu::detail::fused_multiply_add()) CHECK(same_bits(one, per_token_loop(cpu, x, t, input, shared)));
        for (const std::size_t threads : {2U, 3U}) {
          cpu::thread_pool pool(threads);
          cpu::executor pex(pool);
          std::vector<float> many(tokens * d_model);
          REQUIRE(run(
              cpu,
              moe_ffn_args{x, t.view(), args.input, matrix_view<float>::packed(many.data(), tokens, d_model), shared},
              ws, pex));
          CHECK(same_bits(one, many));
        }
      }
    }
  }
}

TEST_CASE("moe_ffn: routes and runs and an inner neuron-sparse op keeping every neuron equals the dense experts") {
  std::mt19937 rng(21);
  const std::size_t n_experts = 8, d_model = 64, d_ff = 64, tokens = 5;
  const moe_weights w(dtype::f32, n_experts, d_model, d_ff, rng);
  const moe_experts x = w.experts(true);
  const std::vector<float> input = random_vector(tokens * d_model, rng);
  const std::vector<float> logits = random_vector(tokens * n_experts, rng);
  const auto in = matrix_view<const float>::packed(input.data(), tokens, d_model);
  const auto lg = matrix_view<const float>::packed(logits.data(), tokens, n_experts);
  cpu::executor ex;

  moe_ffn<cpu_backend> dense;
  dense.routing.native_k = 3;
  moe_scratch s;
  std::vector<float> y(tokens * d_model);
  REQUIRE(dense(0, x, lg, in, matrix_view<float>::packed(y.data(), tokens, d_model), s, ex, w.shared()));
  CHECK(s.reads.pairs == tokens * 3);
  CHECK(s.reads.experts_run == s.table.active_experts());
  CHECK(s.reads.weight_bytes == (s.reads.experts_run * 3 * d_ff + 3 * 2 * d_ff) * d_model * sizeof(float));
  if (cpu::detail::fused_multiply_add())
    CHECK(same_bits(y, per_token_loop(cpu_backend{}, x, s.table, input, w.shared())));

  using inner_op = neuron_sparse_ffn<magnitude, top_k, cpu_backend>;
  moe_ffn<cpu_backend, inner_op> sparse{dense.routing, cpu_backend{}, inner_op{magnitude{}, top_k::by_count(d_ff)}};
  std::vector<float> ys(tokens * d_model);
  moe_scratch s2;
  REQUIRE(sparse(0, x, lg, in, matrix_view<float>::packed(ys.data(), tokens, d_model), s2, ex, w.shared()));
  CHECK(same_bits(y, ys));
  CHECK(s2.reads.weight_bytes == (tokens * 3 * 3 * d_ff + tokens * 3 * 2 * d_ff) * d_model * sizeof(float));

  // Half the neurons inside each expert: fewer bytes, a different but close output.
  moe_ffn<cpu_backend, inner_op> half{dense.routing, cpu_backend{}, inner_op{magnitude{}, top_k::by_count(d_ff / 2)}};
  REQUIRE(half(0, x, lg, in, matrix_view<float>::packed(ys.data(), tokens, d_model), s2, ex));
  CHECK(s2.reads.weight_bytes < tokens * 3 * 3 * d_ff * d_model * sizeof(float));

  // Errors: logits of the wrong width, an expert stride that overlaps experts.
  CHECK_THROWS_WITH_AS(dense(0, x, matrix_view<const float>::packed(logits.data(), tokens, 4), in,
                             matrix_view<float>::packed(y.data(), tokens, d_model), s, ex),
                       doctest::Contains("logits.cols"), error);
  moe_experts overlap = x;
  overlap.up.expert_stride = 16;
  CHECK_THROWS_WITH_AS(dense(0, overlap, lg, in, matrix_view<float>::packed(y.data(), tokens, d_model), s, ex),
                       doctest::Contains("expert_stride"), error);
}

TEST_CASE(
    "moe_ffn_args: one token over wide rows (the decode path: whole-row column ranges, chunked down) equals the "
    "per-token loop") {
  std::mt19937 rng(41);
  const std::size_t n_experts = 4, d_model = 256, d_ff = 2048;
  for (const dtype type : {dtype::f32, dtype::q4_0}) {
    INFO(name(type));
    const moe_weights w(type, n_experts, d_model, d_ff, rng);
    const moe_experts x = w.experts(true);
    const std::vector<float> input = random_vector(d_model, rng);
    routing_table t;
    t.assign(n_experts, std::vector<std::uint32_t>{0, 2}, std::vector<std::uint32_t>{1, 3},
             std::vector<float>{0.7F, 0.3F});
    const cpu_backend cpu;
    REQUIRE(cpu.plan(moe_ffn_args{x, t.view(), matrix_view<const float>::packed(input.data(), 1, d_model), {}, {}}, 1)
                .column_tile > cpu::axpy_column_quantum);
    const std::vector<float> loop = per_token_loop(cpu, x, t, input, w.shared());
    std::vector<float> ref(d_model);
    REQUIRE(reference_backend{}.run_with_scratch(
        moe_ffn_args{x, t.view(), matrix_view<const float>::packed(input.data(), 1, d_model),
                     matrix_view<float>::packed(ref.data(), 1, d_model), w.shared()}));
    for (const std::size_t threads : {1U, 2U, 3U}) {
      cpu::thread_pool pool(threads);
      cpu::executor ex(pool);
      std::vector<float> y(d_model);
      std::vector<std::byte> ws;
      REQUIRE(run(cpu,
                  moe_ffn_args{x, t.view(), matrix_view<const float>::packed(input.data(), 1, d_model),
                               matrix_view<float>::packed(y.data(), 1, d_model), w.shared()},
                  ws, ex));
      if (cpu::detail::fused_multiply_add()) CHECK(same_bits(y, loop));
      double err = 0.0, norm = 0.0;
      for (std::size_t i = 0; i < d_model; ++i) {
        err = std::max(err, static_cast<double>(std::fabs(y[i] - ref[i])));
        norm = std::max(norm, static_cast<double>(std::fabs(ref[i])));
      }
      CHECK(err <= (type == dtype::f32 ? 1e-4 : 0.1) * norm);
    }
  }
}

TEST_CASE("cpu gemm_rows (several tokens per weight load) equals gemv_rows per token bit for bit, every target") {
  std::mt19937 rng(77);
  for (const dtype type : {dtype::f32, dtype::f16, dtype::bf16}) {
    for (const std::size_t cols : {64U, 67U, 200U}) {
      INFO(name(type), " cols ", cols);
      const std::size_t rows = 7;
      const std::size_t tokens = 7;
      const actsparse_test::quantized_matrix m = actsparse_test::make_quantized_matrix(type, rows, cols, rng);
      const std::vector<float> x = random_vector(tokens * cols, rng);
      cpu_test::for_each_target([&] {
        std::vector<float> y(tokens * rows, -1.0F);
        std::vector<const float*> xs;
        std::vector<float*> ys;
        for (std::size_t t = 0; t < tokens; ++t) {
          xs.push_back(x.data() + t * cols);
          ys.push_back(y.data() + t * rows);
        }
        cpu::detail::gemm_rows(m.view, 1, rows, xs.data(), tokens, ys.data());
        for (std::size_t t = 0; t < tokens; ++t) {
          std::vector<float> want(rows, -1.0F);
          cpu::detail::gemv_rows(m.view, nullptr, 1, rows, x.data() + t * cols, want.data());
          CHECK(same_bits(std::span<const float>(y.data() + t * rows, rows), want));
        }
      });
    }
  }
  const actsparse_test::quantized_matrix q = actsparse_test::make_quantized_matrix(dtype::q4_0, 2, 32, rng);
  const float* x0 = nullptr;
  float* y0 = nullptr;
  CHECK_THROWS_WITH_AS(cpu::detail::gemm_rows(q.view, 0, 2, &x0, 1, &y0), doctest::Contains("f32, f16 or bf16"), error);
}

TEST_CASE(
    "cpu axpy_tokens (several tokens per weight load) equals the chunked row axpy per token bit for bit, "
    "every target") {
  std::mt19937 rng(79);
  for (const dtype type : {dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0}) {
    const bool blocks = info(type).block_values > 1;
    for (const std::size_t cols : {blocks ? 96U : 67U, 256U}) {
      for (const std::size_t tokens : {1U, 5U, 9U}) {
        INFO(name(type), " cols ", cols, " tokens ", tokens);
        const std::size_t rows = 13;
        const actsparse_test::quantized_matrix m = actsparse_test::make_quantized_matrix(type, rows, cols, rng);
        const std::vector<float> h = random_vector(tokens * rows, rng);
        const std::size_t first[] = {0, 5, 6, rows};  // three chunks, one of a single row
        const std::size_t c0 = blocks ? 32 : 3;       // a column range inside the rows
        const std::size_t c1 = cols;
        cpu_test::for_each_target([&] {
          std::vector<float> y(tokens * cols, -1.0F);
          std::vector<const float*> hs;
          std::vector<float*> ys;
          for (std::size_t t = 0; t < tokens; ++t) {
            hs.push_back(h.data() + t * rows);
            ys.push_back(y.data() + t * cols);
          }
          cpu::detail::axpy_tokens(m.view, first, 3, hs.data(), tokens, c0, c1, ys.data());
          for (std::size_t t = 0; t < tokens; ++t) {
            std::vector<float> want(cols, -1.0F);
            std::vector<float> sum(cols);
            for (std::size_t k = 0; k < 3; ++k) {
              weight_view chunk = m.view;
              chunk.data = static_cast<const std::byte*>(m.view.data) + first[k] * m.view.row_stride;
              chunk.rows = first[k + 1] - first[k];
              cpu::detail::axpy_rows(chunk, nullptr, chunk.rows, hs[t] + first[k], c0, c1,
                                     k == 0 ? want.data() : sum.data());
              if (k > 0) {
                for (std::size_t c = c0; c < c1; ++c) want[c] += sum[c];
              }
            }
            CHECK(same_bits(std::span<const float>(y.data() + t * cols, cols), want));
          }
        });
      }
    }
  }
  const actsparse_test::quantized_matrix q = actsparse_test::make_quantized_matrix(dtype::q4_0, 2, 64, rng);
  const std::size_t first[] = {0, 2};
  const float* h0 = nullptr;
  float* y0 = nullptr;
  CHECK_THROWS_WITH_AS(cpu::detail::axpy_tokens(q.view, first, 1, &h0, 1, 0, 96, &y0), doctest::Contains("col_end"),
                       error);
  CHECK_THROWS_WITH_AS(cpu::detail::axpy_tokens(q.view, first, 1, &h0, 1, 16, 64, &y0),
                       doctest::Contains("whole 32-value blocks"), error);
}

TEST_CASE(
    "cpu gemm_rows_q8x (several tokens per weight unit) equals gemv_rows_q8x per token bit for bit, every target") {
  std::mt19937 rng(78);
  for (const dtype type : {dtype::q8_0, dtype::q4_0}) {
    for (const std::size_t cols : {32U, 96U, 256U}) {  // an odd block count: AVX-512's single block
      for (const std::size_t tokens : {1U, 3U, 9U}) {
        INFO(name(type), " cols ", cols, " tokens ", tokens);
        const std::size_t rows = 7;
        const actsparse_test::quantized_matrix m = actsparse_test::make_quantized_matrix(type, rows, cols, rng);
        const std::vector<float> x = random_vector(tokens * cols, rng);
        cpu_test::for_each_target([&] {
          std::vector<std::int8_t> xq(tokens * cols);
          std::vector<float> xd(tokens * cols / 32);
          std::vector<float> y(tokens * rows, -1.0F);
          std::vector<const std::int8_t*> xqs;
          std::vector<const float*> xds;
          std::vector<float*> ys;
          for (std::size_t t = 0; t < tokens; ++t) {
            cpu::detail::quantize_q8_0_x(x.data() + t * cols, cols, xq.data() + t * cols, xd.data() + t * cols / 32);
            xqs.push_back(xq.data() + t * cols);
            xds.push_back(xd.data() + t * cols / 32);
            ys.push_back(y.data() + t * rows);
          }
          cpu::detail::gemm_rows_q8x(m.view, 1, rows, xqs.data(), xds.data(), tokens, ys.data());
          for (std::size_t t = 0; t < tokens; ++t) {
            std::vector<float> want(rows, -1.0F);
            cpu::detail::gemv_rows_q8x(m.view, nullptr, 1, rows, xqs[t], xds[t], want.data());
            CHECK(same_bits(std::span<const float>(y.data() + t * rows, rows), want));
          }
        });
      }
    }
  }
  const actsparse_test::quantized_matrix f = actsparse_test::make_quantized_matrix(dtype::bf16, 2, 32, rng);
  const std::int8_t* q0 = nullptr;
  const float* d0 = nullptr;
  float* y0 = nullptr;
  CHECK_THROWS_WITH_AS(cpu::detail::gemm_rows_q8x(f.view, 0, 2, &q0, &d0, 1, &y0), doctest::Contains("q8_0 or q4_0"),
                       error);
}
