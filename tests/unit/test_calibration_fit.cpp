// The calibration pipeline's fitting pieces: moments, selection statistics, base sets and caps,
// the greedy budget search, the tier predictor, the low-rank gate predictor, neuron orders.

#include "test_reference_support.hpp"

#include <actsparse/calibration/budget_search.hpp>
#include <actsparse/calibration/low_rank_gate.hpp>
#include <actsparse/calibration/neuron_moments.hpp>
#include <actsparse/calibration/neuron_order.hpp>
#include <actsparse/calibration/selection_statistics.hpp>
#include <actsparse/calibration/tier_predictor.hpp>
#include <actsparse/calibration/tier_table.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/selectors/calibrated_selector.hpp>
#include <actsparse/selectors/threshold.hpp>
#include <actsparse/selectors/tiered.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <span>
#include <vector>

using namespace actsparse;
using namespace reference_test;

TEST_CASE("calibrated_selector: each rule equals the selector it names") {
  std::mt19937 rng(3);
  const auto s = random_vector(97, rng);
  CHECK(calibrated_selector{neuron_rule::top_k, 20, 0.0F, 1, {}}.select(s).indices ==
        top_k::by_count(20).select(s).indices);
  CHECK(calibrated_selector{neuron_rule::threshold, 0, 0.3F, 1, {}}.select(s).indices ==
        threshold{0.3F}.select(s).indices);
  CHECK(calibrated_selector{}.select(s).keeps_all());
  const index_set base = index_set::from_sorted({1, 5, 90});
  const tiered t{3, base};
  const calibrated_selector tier3{neuron_rule::tier, 0, 0.0F, 3, base.indices()};
  CHECK(tier3.select(s).indices == t.select(s).indices);
  // top_k and threshold with a base keep it too.
  const calibrated_selector k33{neuron_rule::top_k, 33, 0.0F, 1, base.indices()};
  CHECK(k33.select(s).indices == t.select(s).indices);
  const calibrated_selector t09{neuron_rule::threshold, 0, 0.9F, 1, base.indices()};
  std::vector<std::uint32_t> want = threshold{0.9F}.select(s).indices;
  want.insert(want.end(), base.indices().begin(), base.indices().end());
  std::sort(want.begin(), want.end());
  want.erase(std::unique(want.begin(), want.end()), want.end());
  CHECK(t09.select(s).indices == want);
  const calibrated_selector zero_m{neuron_rule::tier, 0, 0.0F, 0, {}};
  CHECK_THROWS_WITH_AS((void)zero_m.select(s), doctest::Contains("m >= 1"), error);
  const std::vector<std::uint32_t> bad{3, 200};
  const calibrated_selector bad_base{neuron_rule::tier, 0, 0.0F, 2, bad};
  CHECK_THROWS_WITH_AS((void)bad_base.select(s), doctest::Contains("base[1]"), error);
}

TEST_CASE("neuron_moments: RMS of u and E[x xT], merged in order, errors") {
  neuron_moments a(2, 3, 2, true), b(2, 3, 2, true), all(2, 3, 2, true);
  const std::vector<float> u1{1, 2, 3}, u2{3, 0, -1}, x1{1, 2}, x2{-2, 0.5F};
  a.add(1, u1, x1);
  b.add(1, u2, x2);
  all.add(1, u1, x1);
  all.add(1, u2, x2);
  a.merge(b);
  CHECK(a.up_rms(1) == all.up_rms(1));
  CHECK(a.tokens(1) == 2);
  const auto r = a.up_rms(1);
  CHECK(r[0] == doctest::Approx(std::sqrt(5.0)));
  CHECK(r[2] == doctest::Approx(std::sqrt(5.0)));
  const auto m = a.input_second_moment(1);
  CHECK(m[0] == doctest::Approx(2.5));
  CHECK(m[1] == doctest::Approx((2.0 - 1.0) / 2));
  CHECK(m[2] == m[1]);
  CHECK_THROWS_WITH_AS((void)a.up_rms(0), doctest::Contains("at least one token"), error);
  const std::vector<float> nan{1, std::numeric_limits<float>::quiet_NaN(), 0};
  CHECK_THROWS_WITH_AS(a.add(0, nan, x1), doctest::Contains("up[1]"), error);
  CHECK_THROWS_WITH_AS(a.add(0, x1, x1), doctest::Contains("up.size()"), error);
  CHECK_THROWS_WITH_AS(a.add(5, u1, x1), doctest::Contains("layer"), error);
  neuron_moments no_inputs(1, 3, 2, false);
  no_inputs.add(0, u1);
  CHECK_THROWS_WITH_AS((void)no_inputs.input_second_moment(0), doctest::Contains("input_moments"), error);
}

TEST_CASE("selection_statistics: tier frequencies, thresholds and co-activation counts") {
  selection_statistics_options o;
  o.tiers = {1, 2, 4};
  o.coactivation_tier = 2;
  selection_statistics s(1, 8, o);
  // Neuron 7 is always the best, neuron 0 always the worst; the others rotate.
  for (int t = 0; t < 16; ++t) {
    std::vector<float> v(8);
    for (std::size_t j = 0; j < 8; ++j) v[j] = static_cast<float>((j + static_cast<std::size_t>(t)) % 6 + 1);
    v[7] = 100.0F;
    v[0] = 0.0F;
    s.add(0, v);
  }
  CHECK(s.tokens(0) == 16);
  const auto f1 = s.frequency(0, 0);
  CHECK(std::all_of(f1.begin(), f1.end(), [](double f) { return f == 1.0; }));
  const auto f2 = s.frequency(0, 1);  // keep 4 of 8
  CHECK(f2[7] == 1.0);
  CHECK(f2[0] == 0.0);
  CHECK(std::accumulate(f2.begin(), f2.end(), 0.0) == doctest::Approx(4.0));
  CHECK(s.coactivation(0, 7, 0) == 0);
  CHECK(s.coactivation(0, 0, 7) == 0);
  std::uint64_t with7 = 0;
  for (std::uint32_t j = 1; j < 7; ++j) with7 += s.coactivation(0, j, 7);
  CHECK(with7 == 16 * 3);  // every token: 7 with its 3 others
  // The threshold for keep 1/2 keeps half of the sampled scores.
  const float t = s.threshold_for_keep(0, 0.5);
  CHECK(t >= 1.0F);
  CHECK(s.threshold_for_keep(0, 1.0) == -std::numeric_limits<float>::infinity());
  const std::vector<float> inf{1, 2, 3, 4, 5, 6, 7, std::numeric_limits<float>::infinity()};
  CHECK_THROWS_WITH_AS(s.add(0, inf), doctest::Contains("scores[7]"), error);
  const selection_statistics_options decreasing{{2, 1}, 16, 0};
  CHECK_THROWS_WITH_AS(selection_statistics(1, 8, decreasing), doctest::Contains("increasing"), error);
  selection_statistics plain(1, 8);
  CHECK_THROWS_WITH_AS((void)plain.coactivation(0, 1, 2), doctest::Contains("co-activation"), error);
}

TEST_CASE("base sets, tier caps and tier labels") {
  const std::vector<double> freq{0.95, 0.2, 0.9, 1.0, 0.89};
  CHECK(base_set(freq, 0.9).indices().size() == 3);
  CHECK(base_set(freq, 1.0).indices().size() == 1);
  CHECK_THROWS_WITH_AS((void)base_set(freq, 0.0), doctest::Contains("share"), error);
  const std::vector<double> bad{0.5, 1.5};
  CHECK_THROWS_WITH_AS((void)base_set(bad, 0.5), doctest::Contains("frequency[1]"), error);
  // 10 tokens x 3 tiers: tier 1 costs 0.01 for 9 tokens and 1 for one; tier 2 costs 1 for 5.
  std::vector<double> kl;
  for (int t = 0; t < 10; ++t) {
    kl.push_back(0.0);
    kl.push_back(t == 0 ? 1.0 : 0.01);
    kl.push_back(t < 5 ? 1.0 : 0.02);
  }
  CHECK(tier_cap(kl, 3, 0.05, 0.9) == 1);  // 9 of 10 within budget at tier 1, 5 of 10 at tier 2
  CHECK(tier_cap(kl, 3, 0.05, 0.5) == 2);
  CHECK(tier_cap(kl, 3, 0.001, 0.9) == 0);
  const auto labels = tier_labels(kl, 3, 0.05, 2);
  CHECK(labels[0] == 0);
  CHECK(labels[1] == 1);
  CHECK(labels[5] == 2);
  CHECK(tier_labels(kl, 3, 0.05, 1)[5] == 1);
  std::vector<double> nan = kl;
  nan[4] = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_WITH_AS((void)tier_cap(nan, 3, 0.05), doctest::Contains("kl[4]"), error);
  CHECK_THROWS_WITH_AS((void)tier_cap(kl, 4, 0.05), doctest::Contains("multiple"), error);
}

TEST_CASE("greedy_budget_search: takes the cheapest move per byte, records the path, fits a target") {
  // Two layers with one knob of 5 rungs (keep 1, 0.8, 0.6, 0.4, 0.2); layer 1 costs 10x less KL.
  budget_problem p;
  p.layers = 2;
  p.rungs = {5};
  p.layer_bytes = [](std::size_t, std::span<const std::size_t> pos) { return 1.0 - 0.2 * static_cast<double>(pos[0]); };
  std::size_t calls = 0;
  p.evaluate = [&](std::span<const budget_state> states, std::span<budget_measure> out) {
    for (std::size_t i = 0; i < states.size(); ++i) {
      const auto& q = states[i].positions;
      const double k0 = static_cast<double>(q[0]), k1 = static_cast<double>(q[1]);
      out[i] = {k0 * k0 + 0.1 * k1 * k1, 1.0 - 0.1 * (k0 + k1)};
      ++calls;
    }
  };
  const budget_path path = greedy_budget_search(p, 0.5);
  REQUIRE(path.size() >= 2);
  CHECK(path.steps()[0].state.positions == std::vector<std::size_t>{0, 0});
  CHECK(path.steps()[1].state.positions == std::vector<std::size_t>{0, 1});  // the cheap layer first
  for (std::size_t i = 1; i < path.size(); ++i)
    CHECK(path.steps()[i].predicted_bytes < path.steps()[i - 1].predicted_bytes);
  CHECK(path.steps().back().predicted_bytes <= 0.5);
  const budget_step& at = path.for_bytes(0.85);
  CHECK(at.measured.bytes <= 0.85);
  CHECK_THROWS_WITH_AS((void)path.for_bytes(0.01), doctest::Contains("reached"), error);
  // A second knob that a rule forbids beyond the first is never moved past it.
  p.rungs = {3, 3};
  p.layer_bytes = [](std::size_t, std::span<const std::size_t> pos) {
    return 1.0 - 0.15 * static_cast<double>(pos[0] + pos[1]);
  };
  p.allowed = [](std::size_t, std::span<const std::size_t> pos) { return pos[1] <= pos[0]; };
  p.evaluate = [](std::span<const budget_state> states, std::span<budget_measure> out) {
    for (std::size_t i = 0; i < states.size(); ++i) out[i] = {static_cast<double>(states[i].positions[1]), 1.0};
  };
  const budget_path constrained = greedy_budget_search(p, 0.1);
  for (const budget_step& s : constrained.steps()) {
    for (std::size_t l = 0; l < 2; ++l) CHECK(s.state.positions[l * 2 + 1] <= s.state.positions[l * 2]);
  }
  budget_problem bad = p;
  bad.evaluate = {};
  CHECK_THROWS_WITH_AS((void)greedy_budget_search(bad, 0.5), doctest::Contains("evaluate"), error);
}

TEST_CASE("tier_predictor: learns per-tier losses, picks the highest tier within the budget, deterministic") {
  std::mt19937 rng(5);
  std::vector<float> feats;
  std::vector<double> losses;  // 3 tiers
  std::vector<float> scratch;
  for (int i = 0; i < 600; ++i) {
    // Inputs of small or large spread: a small spread is an "easy" token (low losses).
    const bool easy = i % 2 == 0;
    std::normal_distribution<float> g(0.0F, easy ? 0.3F : 3.0F);
    std::vector<float> x(48);
    for (float& v : x) v = g(rng);
    float f[token_feature_count];
    token_features(x, f, scratch);
    feats.insert(feats.end(), f, f + token_feature_count);
    losses.push_back(0.0);
    losses.push_back(easy ? 1e-4 : 1e-2);
    losses.push_back(easy ? 1e-3 : 1e-1);
  }
  tier_predictor_options o;
  o.epochs = 30;
  const tier_predictor p = tier_predictor::train(feats, losses, 3, o);
  CHECK(p == tier_predictor::train(feats, losses, 3, o));
  const auto at = [&](std::size_t i) {
    return std::span<const float>(feats.data() + i * token_feature_count, token_feature_count);
  };
  std::size_t right = 0;
  for (std::size_t i = 0; i < 600; ++i) {
    // Budget 3e-3: easy tokens can take tier 2, hard ones only tier 0.
    right += p.predict(at(i), 2, 3e-3) == (i % 2 == 0 ? 2U : 0U) ? 1 : 0;
  }
  CHECK(static_cast<double>(right) / 600.0 > 0.95);
  CHECK(p.predict(at(0), 1, 3e-3) == 1);  // the cap bounds the tier
  CHECK(p.predict(at(0), 2, 1e-9) == 0);  // a budget nothing meets: tier 0
  double pred[3];
  p.predicted_losses(at(0), pred);
  CHECK(pred[1] == doctest::Approx(std::log(1e-4 + tier_loss_floor)).epsilon(0.1));
  CHECK(p.parameter_count() == 32 * 8 + 32 + 3 * 32 + 3 + 16 + 6);
  auto q = p.parameters();
  q.scale[3] = 0.0F;
  CHECK_THROWS_WITH_AS((void)tier_predictor::from_parameters(q), doctest::Contains("scale[3]"), error);
  q = p.parameters();
  q.w2.pop_back();
  CHECK_THROWS_WITH_AS((void)tier_predictor::from_parameters(q), doctest::Contains("w2.size()"), error);
  std::vector<double> bad = losses;
  bad[7] = -1.0;
  CHECK_THROWS_WITH_AS((void)tier_predictor::train(feats, bad, 3), doctest::Contains("losses[7]"), error);
  CHECK_THROWS_WITH_AS((void)tier_predictor::train(feats, losses, 4), doctest::Contains("losses.size()"), error);
  const std::vector<float> nan_x{1.0F, std::numeric_limits<float>::quiet_NaN()};
  float f[token_feature_count];
  CHECK_THROWS_WITH_AS(token_features(nan_x, f, scratch), doctest::Contains("x[1]"), error);
}

TEST_CASE("low_rank_gate: full rank reproduces W, rank r is the best rank-r map, activation-aware fits inputs") {
  std::mt19937 rng(9);
  const test_weights w = make_weights(dtype::f32, 24, 16, rng);
  const auto x = random_vector(16, rng);
  const auto predict = [&](const low_rank_gate& g) {
    std::vector<double> t(g.rank(), 0.0), y(g.d_ff(), 0.0);
    for (std::size_t i = 0; i < g.rank(); ++i) {
      for (std::size_t k = 0; k < 16; ++k) t[i] += static_cast<double>(g.a()[i * 16 + k]) * x[k];
    }
    for (std::size_t j = 0; j < g.d_ff(); ++j) {
      for (std::size_t i = 0; i < g.rank(); ++i) y[j] += static_cast<double>(g.u()[j * g.rank() + i]) * t[i];
    }
    return y;
  };
  const auto exact = [&] {
    std::vector<double> y(24, 0.0);
    const auto m = w.view.as<float>();
    for (std::size_t j = 0; j < 24; ++j) {
      for (std::size_t k = 0; k < 16; ++k) y[j] += static_cast<double>(m.row(j)[k]) * x[k];
    }
    return y;
  }();
  const auto err = [&](const std::vector<double>& y) {
    double e = 0.0;
    for (std::size_t j = 0; j < y.size(); ++j) e += (y[j] - exact[j]) * (y[j] - exact[j]);
    return std::sqrt(e);
  };
  CHECK(err(predict(low_rank_gate::fit(w.view, 16))) < 1e-4);
  CHECK(err(predict(low_rank_gate::fit(w.view, 8))) > err(predict(low_rank_gate::fit(w.view, 12))));
  // Inputs that live in a 4-dimensional subspace: the activation-aware rank-4 map is exact on them.
  std::vector<double> second(16 * 16, 0.0);
  for (std::size_t i = 0; i < 4; ++i) second[i * 16 + i] = 1.0;
  std::vector<float> xs(16, 0.0F);
  for (std::size_t i = 0; i < 4; ++i) xs[i] = x[i];
  const low_rank_gate aware = low_rank_gate::fit(w.view, 4, second);
  std::vector<double> t(4, 0.0), y(24, 0.0), want(24, 0.0);
  const auto m = w.view.as<float>();
  for (std::size_t i = 0; i < 4; ++i) {
    for (std::size_t k = 0; k < 16; ++k) t[i] += static_cast<double>(aware.a()[i * 16 + k]) * xs[k];
  }
  for (std::size_t j = 0; j < 24; ++j) {
    for (std::size_t i = 0; i < 4; ++i) y[j] += static_cast<double>(aware.u()[j * 4 + i]) * t[i];
    for (std::size_t k = 0; k < 16; ++k) want[j] += static_cast<double>(m.row(j)[k]) * xs[k];
    CHECK(y[j] == doctest::Approx(want[j]).epsilon(1e-3).scale(1.0));
  }
  CHECK(aware.view().bytes() == (4 * 16 + 24 * 4) * sizeof(float));
  CHECK_THROWS_WITH_AS((void)low_rank_gate::fit(w.view, 0), doctest::Contains("rank"), error);
  CHECK_THROWS_WITH_AS((void)low_rank_gate::fit(w.view, 17), doctest::Contains("rank"), error);
  CHECK_THROWS_WITH_AS((void)low_rank_gate::from_factors(2, 24, 16, std::vector<float>(31), std::vector<float>(48)),
                       doctest::Contains("a.size()"), error);
}

TEST_CASE("neuron orders: hot first, co-activation chains, permutation checks") {
  const std::vector<double> freq{0.1, 0.9, 0.5, 0.9};
  CHECK(hot_first_order(freq) == std::vector<std::uint32_t>{1, 3, 2, 0});
  const std::vector<std::uint32_t> p{2, 0, 1};
  CHECK(inverse_permutation(p) == std::vector<std::uint32_t>{1, 2, 0});
  const std::vector<std::uint32_t> twice{0, 0, 1};
  CHECK_THROWS_WITH_AS(check_permutation(twice, 3, "t"), doctest::Contains("order[1]"), error);
  const std::vector<std::uint32_t> out_of_range{0, 3, 1};
  CHECK_THROWS_WITH_AS(check_permutation(out_of_range, 3, "t"), doctest::Contains("order[1]"), error);
  CHECK_THROWS_WITH_AS(check_permutation(p, 4, "t"), doctest::Contains("order.size()"), error);
  // Two groups of neurons that fire together, interleaved in the original order: the chain
  // puts each group together.
  selection_statistics_options o;
  o.tiers = {1, 2};
  o.coactivation_tier = 2;
  selection_statistics s(1, 8, o);
  for (int t = 0; t < 20; ++t) {
    std::vector<float> v(8, 0.0F);
    for (std::size_t j = static_cast<std::size_t>(t % 2); j < 8; j += 2) v[j] = 1.0F + static_cast<float>(j);
    s.add(0, v);
  }
  const auto order = coactivation_order(s, 0);
  check_permutation(order, 8, "test");
  for (std::size_t i = 0; i < 4; ++i) CHECK(order[i] % 2 == order[0] % 2);
  selection_statistics plain(1, 8);
  CHECK_THROWS_WITH_AS((void)coactivation_order(plain, 0), doctest::Contains("co-activation"), error);
}

TEST_CASE("neuron orders: under hot-first order a tier's base set is a contiguous prefix") {
  std::mt19937 rng(17);
  selection_statistics s(1, 64);
  std::normal_distribution<float> noise(0.0F, 1.0F);
  std::vector<float> bias(64);
  for (float& b : bias) b = 2.0F * noise(rng);
  for (int t = 0; t < 300; ++t) {
    std::vector<float> v(64);
    for (std::size_t j = 0; j < 64; ++j) v[j] = std::fabs(bias[j] + noise(rng));
    s.add(0, v);
  }
  const auto freq = s.frequency(0, 1);  // tier 2: keep 32 of 64
  const index_set base = base_set(freq, 0.8);
  REQUIRE(!base.empty());
  const auto inv = inverse_permutation(hot_first_order(freq));
  std::vector<std::uint32_t> positions;
  for (const std::uint32_t j : base.indices()) positions.push_back(inv[j]);
  std::sort(positions.begin(), positions.end());
  for (std::size_t i = 0; i < positions.size(); ++i) CHECK(positions[i] == i);
}
