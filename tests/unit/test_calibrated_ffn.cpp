// A calibration file end to end: its strict JSON form (round trip, every kind of bad field), and
// neuron_sparse_ffn driven by a calibrated_schedule on the reference and CPU backends (keep-all
// equals dense bit for bit, the second stage, the gate predictor, per-token tiers, threads).

#include "test_reference_support.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/backends/cpu/repack.hpp>
#include <actsparse/backends/reference.hpp>
#include <actsparse/calibration/calibrated_schedule.hpp>
#include <actsparse/calibration/calibration_file.hpp>
#include <actsparse/calibration/low_rank_gate.hpp>
#include <actsparse/calibration/neuron_order.hpp>
#include <actsparse/ops/input_sparse_linear.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>
#include <actsparse/scorers/magnitude.hpp>
#include <actsparse/scorers/weight_aware_gate.hpp>
#include <actsparse/selectors/calibrated_selector.hpp>
#include <actsparse/selectors/threshold.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

using namespace actsparse;
using namespace reference_test;

namespace {

constexpr std::size_t d_model = 64;
constexpr std::size_t d_ff = 96;
constexpr std::size_t n_layers = 2;

struct model {
  std::vector<test_weights> gate, up, down;
  std::vector<cpu::owned_weights> down_t;
  std::vector<ffn_layer> layers;
  std::vector<low_rank_gate> predictors;
  explicit model(std::mt19937& rng) {
    for (std::size_t l = 0; l < n_layers; ++l) {
      gate.push_back(make_weights(dtype::f32, d_ff, d_model, rng));
      up.push_back(make_weights(dtype::f32, d_ff, d_model, rng));
      down.push_back(make_weights(dtype::f32, d_model, d_ff, rng));
    }
    for (std::size_t l = 0; l < n_layers; ++l) {
      down_t.push_back(cpu::transpose(down[l].view));
      layers.push_back({activation::silu, gate[l].view, up[l].view, down[l].view, down_t[l].view});
      predictors.push_back(low_rank_gate::fit(gate[l].view, 12));
    }
  }
};

layer_budget setting(neuron_rule rule, double keep, double refine = 1.0) {
  layer_budget s;
  s.rule = rule;
  s.keep = keep;
  s.refine = refine;
  s.bytes_fraction = 0.5;
  return s;
}

calibration_data make_data(const model& m, std::mt19937& rng) {
  calibration_data d;
  d.model = model_fingerprint::of(m.layers);
  d.sample_sequences = 3;
  d.sample_tokens = 300;
  std::uniform_real_distribution<float> pos(0.1F, 2.0F);
  for (std::size_t l = 0; l < n_layers; ++l) {
    layer_calibration c;
    for (std::size_t j = 0; j < d_ff; ++j) c.score_weights.push_back(pos(rng));
    const weight_aware down_norms = weight_aware::from_weights(m.layers[l].down);
    c.down_norms.assign(down_norms.column_norms().begin(), down_norms.column_norms().end());
    c.tiers = {{1, {}}, {2, {3, 7, 50}}, {4, {7}}};
    tier_predictor_parameters p;
    p.hidden = 4;
    p.tiers = 3;
    p.mean.assign(token_feature_count, 0.0F);
    p.scale.assign(token_feature_count, 1.0F);
    for (std::size_t i = 0; i < 4 * token_feature_count; ++i) p.w1.push_back(pos(rng) - 1.0F);
    p.b1.assign(4, 0.1F);
    for (std::size_t i = 0; i < 3 * 4; ++i) p.w2.push_back(pos(rng) - 1.0F);
    p.b2 = {0.0F, 0.5F, 0.2F};
    p.out_mean = {-10.0F, -6.0F, -4.0F};
    p.out_scale = {1.0F, 2.0F, 2.0F};
    c.tier_predictor = p;
    c.gate_predictors.push_back({m.predictors[l].rank(),
                                 {m.predictors[l].a().begin(), m.predictors[l].a().end()},
                                 {m.predictors[l].u().begin(), m.predictors[l].u().end()}});
    d.layers.push_back(std::move(c));
  }
  const auto add = [&](std::string name, layer_budget s) {
    budget_entry b;
    b.name = std::move(name);
    b.method = "test";
    b.target_bytes = 0.5;
    b.bytes_fraction = 0.5;
    b.kl = 0.01;
    b.layers.assign(n_layers, s);
    d.budgets.push_back(std::move(b));
  };
  add("keep-all", setting(neuron_rule::keep_all, 1.0));
  add("top_k", setting(neuron_rule::top_k, 0.5));
  add("threshold", [] {
    layer_budget s = setting(neuron_rule::threshold, 0.5);
    s.threshold = 0.4F;
    return s;
  }());
  add("refine", setting(neuron_rule::top_k, 0.75, 0.6));
  add("refine-all", setting(neuron_rule::top_k, 0.75, 1.0));
  add("tier", [] {
    layer_budget s = setting(neuron_rule::tier, 1.0);
    s.tier = 2;
    s.predict_tier = true;
    s.tier_budget = 1e-3;
    return s;
  }());
  add("predicted", [] {
    layer_budget s = setting(neuron_rule::top_k, 0.5);
    s.gate_rank = 12;
    return s;
  }());
  add("predicted+refine", [] {
    layer_budget s = setting(neuron_rule::top_k, 0.6, 0.7);
    s.gate_rank = 12;
    return s;
  }());
  d.budgets.back().layers[1].dense = true;
  budget_entry teal;
  teal.name = "teal";
  teal.method = "input thresholds";
  teal.bytes_fraction = 0.6;
  teal.target_bytes = 0.6;
  for (std::size_t i = 0; i < n_layers * input_projections; ++i) {
    teal.input_thresholds.push_back(i == 0 ? -std::numeric_limits<float>::infinity() : 0.01F * static_cast<float>(i));
  }
  d.budgets.push_back(teal);
  return d;
}

template <class Backend>
using calibrated_op = neuron_sparse_ffn<weight_aware_gate, calibrated_selector, Backend, calibrated_schedule>;

template <class Backend>
calibrated_op<Backend> op_for(const calibration_data& d, const std::string& budget) {
  return {weight_aware_gate{}, calibrated_selector{}, score_source::gate_preactivation, Backend{},
          calibrated_schedule(d, budget)};
}

// Replaces the first occurrence of `from` in `text` (which must be there).
std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const std::size_t at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

}  // namespace

TEST_CASE("calibration file: save, load, the same data and the same selections bit for bit") {
  std::mt19937 rng(31);
  const model m(rng);
  const calibration_data d = make_data(m, rng);
  const std::string text = d.to_json();
  const calibration_data back = calibration_data::parse(text, model_fingerprint::of(m.layers));
  CHECK(back == d);
  CHECK(back.to_json() == text);
  const auto path = std::filesystem::temp_directory_path() / "actsparse_calibration_roundtrip.json";
  d.save(path);
  CHECK(calibration_data::load(path, model_fingerprint::of(m.layers)) == d);
  std::filesystem::remove(path);
  const auto x = random_vector(d_model, rng);
  cpu::executor ex;
  for (const budget_entry& b : d.budgets) {
    if (b.layers.empty()) continue;
    CAPTURE(b.name);
    const auto a = op_for<cpu_backend>(d, b.name);
    const auto c = op_for<cpu_backend>(back, b.name);
    for (std::size_t l = 0; l < n_layers; ++l) {
      std::vector<float> y1(d_model), y2(d_model);
      selection k1, k2;
      ffn_scratch s1, s2;
      REQUIRE(a(l, m.layers[l], x, y1, k1, s1, ex));
      REQUIRE(c(l, m.layers[l], x, y2, k2, s2, ex));
      CHECK(k1.indices == k2.indices);
      CHECK(same_bits(y1, y2));
    }
  }
}

TEST_CASE("calibration file: every malformed field is a clear error naming it") {
  std::mt19937 rng(32);
  const model m(rng);
  const calibration_data d = make_data(m, rng);
  const std::string text = d.to_json();
  const model_fingerprint fp = model_fingerprint::of(m.layers);
  const auto fails = [&](const std::string& bad, const std::string& names) {
    INFO(bad.substr(0, 400));
    CAPTURE(names);
    CHECK_THROWS_WITH_AS((void)calibration_data::parse(bad, fp), doctest::Contains(names.c_str()), error);
  };
  fails(text.substr(0, text.size() / 2), "JSON");                      // truncated
  fails("", "JSON");                                                   // empty
  fails(replaced(text, "\"version\": 1", "\"version\": 2"), "newer");  // a newer version
  fails(replaced(text, "\"version\": 1", "\"version\": \"1\""), "version");
  fails(replaced(text, "actsparse-calibration", "something-else"), "format");
  fails(replaced(text, "\"d_ff\": 96", "\"d_ff\": 95"), "layers[0].score_weights");  // inconsistent shapes
  model_fingerprint other = fp;
  other.d_ff = 95;
  CHECK_THROWS_WITH_AS((void)calibration_data::parse(text, other), doctest::Contains("model.d_ff"), error);
  fails(replaced(text, "\"weights\": \"fnv1a64:", "\"weights\": \"fnv1a64:0"), "another model");
  fails(replaced(text, "\"activation\": \"silu\"", "\"activation\": \"tanh\""), "model.activation");
  fails(replaced(text, "\"sample\": {", "\"sample\": {\n  \"extra\": 1,"), "sample.extra");  // unknown key
  fails(replaced(text, "\"kl\": ", "\"KL\": "), "budgets[0].KL");
  fails(replaced(text, "\"m\": 2", "\"m\": 1"), "layers[0].tiers[1].m");  // tiers not increasing
  fails(replaced(text, "3,\n      7,\n      50", "3,\n      7,\n      96"),
        "layers[0].tiers[1].base[2]");  // out of range
  fails(replaced(text, "3,\n      7,\n      50", "3,\n      50,\n      7"),
        "layers[0].tiers[1].base[2]");  // not sorted
  fails(replaced(text, "\"permutation\": []", "\"permutation\": [0]"), "layers[0].permutation");
  fails(replaced(text, "\"rule\": \"top_k\"", "\"rule\": \"top-k\""), "budgets[1].layers[0].rule");
  fails(replaced(text, "\"refine\": 0.6", "\"refine\": 1.5"), "budgets[3].layers[0].refine");
  fails(replaced(text, "\"threshold\": 0.4", "\"threshold\": 1e400"), "JSON");  // out of double range
  fails(replaced(text, "\"threshold\": 0.4", "\"threshold\": 1e300"), "threshold");
  fails(replaced(text, "\"threshold\": 0.4", "\"threshold\": NaN"), "JSON");  // NaN is not JSON
  fails(replaced(text, "\"name\": \"top_k\"", "\"name\": \"keep-all\""), "budgets[1].name");
  fails(replaced(text, "\"tier\": 2", "\"tier\": 3"), "budgets[5].layers[0].tier");
  fails(replaced(text, "\"hidden\": 4", "\"hidden\": 5"), "tier_predictor.w1");
  fails(replaced(text, "\"tier_budget\": 0.001", "\"tier_budget\": -1"), "budgets[5].layers[0].tier_budget");
  fails(replaced(text, "\"with_base\": false", "\"with_base\": true"), "budgets[0].layers[0].with_base");
  fails(replaced(text, "\"rank\": 12", "\"rank\": 11"), "gate_predictors[0].a");
  fails(replaced(text, "\"gate_rank\": 12", "\"gate_rank\": 11"), "budgets[6].layers[0].gate_rank");
  fails(replaced(text, "\"score_weights\": [", "\"score_weights\": [-1,"), "layers[0].score_weights");
  // A permutation that is one loads; one with a repeated entry does not.
  calibration_data p = d;
  p.layers[0].permutation = all_indices(d_ff);
  std::swap(p.layers[0].permutation[0], p.layers[0].permutation[5]);
  CHECK(calibration_data::parse(p.to_json(), fp) == p);
  p.layers[0].permutation[1] = p.layers[0].permutation[0];
  CHECK_THROWS_WITH_AS((void)p.to_json(), doctest::Contains("layers[0].permutation[1]"), error);
  CHECK_THROWS_WITH_AS((void)d.budget("nope"), doctest::Contains("keep-all"), error);
  CHECK_THROWS_WITH_AS(
      (void)calibration_data::load(std::filesystem::temp_directory_path() / "actsparse_no_such_file.json", fp),
      doctest::Contains("readable"), error);
}

TEST_CASE("calibrated schedule: keep-all equals dense, top-k and threshold equal the plain op, both backends") {
  std::mt19937 rng(33);
  const model m(rng);
  const calibration_data d = make_data(m, rng);
  const auto x = random_vector(d_model, rng);
  inline_executor rex;
  cpu::executor cex;
  for (std::size_t l = 0; l < n_layers; ++l) {
    std::vector<float> dense(d_model), y(d_model), plain(d_model);
    selection kept, kept_plain;
    ffn_scratch s;
    REQUIRE(dense_ffn(reference_backend{}, m.layers[l], x, dense, s, rex));
    REQUIRE(op_for<reference_backend>(d, "keep-all")(l, m.layers[l], x, y, kept, s, rex));
    CHECK(kept.keeps_all());
    CHECK(same_bits(y, dense));
    REQUIRE(dense_ffn(cpu_backend{}, m.layers[l], x, dense, s, cex));
    REQUIRE(op_for<cpu_backend>(d, "keep-all")(l, m.layers[l], x, y, kept, s, cex));
    CHECK(same_bits(y, dense));
    CHECK(s.reads.down_rows == d_ff);
    const weight_aware_gate score = weight_aware_gate::from_norms(d.layers[l].score_weights);
    const neuron_sparse_ffn<weight_aware_gate, top_k, cpu_backend> top{
        score, top_k::by_count(d_ff / 2), score_source::gate_preactivation, {}};
    REQUIRE(op_for<cpu_backend>(d, "top_k")(l, m.layers[l], x, y, kept, s, cex));
    REQUIRE(top(m.layers[l], x, plain, kept_plain, s, cex));
    CHECK(kept.indices == kept_plain.indices);
    CHECK(same_bits(y, plain));
    CHECK(s.reads.gate_rows == d_ff);
    CHECK(s.reads.up_rows == d_ff / 2);
    const neuron_sparse_ffn<weight_aware_gate, threshold, cpu_backend> thr{
        score, threshold{0.4F}, score_source::gate_preactivation, {}};
    REQUIRE(op_for<cpu_backend>(d, "threshold")(l, m.layers[l], x, y, kept, s, cex));
    REQUIRE(thr(m.layers[l], x, plain, kept_plain, s, cex));
    CHECK(kept.indices == kept_plain.indices);
    CHECK(same_bits(y, plain));
  }
}

TEST_CASE("calibrated schedule: the second stage keeps the largest exact |h| of the first stage's neurons") {
  std::mt19937 rng(34);
  const model m(rng);
  const calibration_data d = make_data(m, rng);
  const auto x = random_vector(d_model, rng);
  inline_executor rex;
  cpu::thread_pool pool(2);
  for (std::size_t l = 0; l < n_layers; ++l) {
    CAPTURE(l);
    std::vector<float> y(d_model), y_ref(d_model), y_one(d_model), y_pool(d_model), y_all(d_model), y_top(d_model);
    selection kept, kept_ref, kept_top;
    ffn_scratch s, s_ref;
    cpu::executor one;
    REQUIRE(op_for<cpu_backend>(d, "refine")(l, m.layers[l], x, y, kept, s, one));
    const std::size_t first = 72;  // ceil(0.75 * 96)
    CHECK(s.candidates.size() == first);
    CHECK(kept.size() == 44);  // ceil(0.6 * 72)
    CHECK(s.reads.up_rows == first);
    CHECK(s.reads.down_rows == 44);
    CHECK(std::includes(s.candidates.begin(), s.candidates.end(), kept.indices.begin(), kept.indices.end()));
    // Every kept neuron's |h|·‖W_down[:, j]‖ is at least every dropped candidate's (h in double).
    const auto& g = m.gate[l].values;
    const auto& u = m.up[l].values;
    const auto h_score = [&](std::uint32_t j) {
      double gj = 0.0, uj = 0.0;
      for (std::size_t k = 0; k < d_model; ++k) {
        gj += g(j, static_cast<Eigen::Index>(k)) * x[k];
        uj += u(j, static_cast<Eigen::Index>(k)) * x[k];
      }
      return std::fabs(gj / (1.0 + std::exp(-gj)) * uj) * d.layers[l].down_norms[j];
    };
    double min_kept = 1e300, max_dropped = 0.0;
    for (const std::uint32_t j : s.candidates) {
      const bool is_kept = std::binary_search(kept.indices.begin(), kept.indices.end(), j);
      (is_kept ? min_kept : max_dropped) = is_kept ? std::min(min_kept, h_score(j)) : std::max(max_dropped, h_score(j));
    }
    CHECK(min_kept >= max_dropped * (1.0 - 1e-5));
    // The reference backend makes the same choice, and the output is that set's FFN.
    REQUIRE(op_for<reference_backend>(d, "refine")(l, m.layers[l], x, y_ref, kept_ref, s_ref, rex));
    CHECK(kept_ref.indices == kept.indices);
    const auto e = ffn_oracle(activation::silu, g, u, m.down[l].values, x, subset::only(kept.indices));
    check_within(y, e);
    check_within(y_ref, e);
    // Threads: the same bits.
    cpu::executor two(pool);
    REQUIRE(op_for<cpu_backend>(d, "refine")(l, m.layers[l], x, y_pool, kept, s, two));
    CHECK(same_bits(y, y_pool));
    // A second stage that keeps every candidate is the one-stage path, bit for bit.
    REQUIRE(op_for<cpu_backend>(d, "refine-all")(l, m.layers[l], x, y_all, kept, s, one));
    CHECK(s.candidates.empty());
    const weight_aware_gate score = weight_aware_gate::from_norms(d.layers[l].score_weights);
    const neuron_sparse_ffn<weight_aware_gate, top_k, cpu_backend> top{
        score, top_k::by_count(first), score_source::gate_preactivation, {}};
    REQUIRE(top(m.layers[l], x, y_top, kept_top, s, one));
    CHECK(same_bits(y_all, y_top));
  }
}

TEST_CASE("calibrated schedule: the gate predictor chooses the rows, the gate is read for them only") {
  std::mt19937 rng(35);
  const model m(rng);
  const calibration_data d = make_data(m, rng);
  const auto x = random_vector(d_model, rng);
  cpu::executor ex;
  inline_executor rex;
  for (std::size_t l = 0; l < n_layers; ++l) {
    CAPTURE(l);
    std::vector<float> y(d_model), y_ref(d_model);
    selection kept, kept_ref;
    ffn_scratch s, s_ref;
    REQUIRE(op_for<cpu_backend>(d, "predicted")(l, m.layers[l], x, y, kept, s, ex));
    CHECK(kept.size() == d_ff / 2);
    CHECK(s.reads.gate_rows == d_ff / 2);
    CHECK(s.reads.predictor_bytes == m.predictors[l].view().bytes());
    // The kept rows are the top of the calibrated score of the predicted gate.
    std::vector<float> t(12), gt(d_ff), sc(d_ff);
    for (std::size_t i = 0; i < 12; ++i) {
      double a = 0.0;
      for (std::size_t k = 0; k < d_model; ++k) a += static_cast<double>(m.predictors[l].a()[i * d_model + k]) * x[k];
      t[i] = static_cast<float>(a);
    }
    for (std::size_t j = 0; j < d_ff; ++j) {
      double a = 0.0;
      for (std::size_t i = 0; i < 12; ++i) a += static_cast<double>(m.predictors[l].u()[j * 12 + i]) * t[i];
      gt[j] = static_cast<float>(a);
    }
    weight_aware_gate::from_norms(d.layers[l].score_weights).score({gt, activation::silu}, sc);
    const auto want = top_k::by_count(d_ff / 2).select(sc).indices;
    std::size_t common = 0;
    for (const std::uint32_t j : want)
      common += std::binary_search(kept.indices.begin(), kept.indices.end(), j) ? 1 : 0;
    CHECK(common + 2 >= want.size());  // f32 sums in another order may swap a near tie
    // The output is the exact FFN over those rows (the gate computed exactly for them).
    check_within(y, ffn_oracle(activation::silu, m.gate[l].values, m.up[l].values, m.down[l].values, x,
                               subset::only(kept.indices)));
    REQUIRE(op_for<reference_backend>(d, "predicted")(l, m.layers[l], x, y_ref, kept_ref, s_ref, rex));
    check_within(y_ref, ffn_oracle(activation::silu, m.gate[l].values, m.up[l].values, m.down[l].values, x,
                                   subset::only(kept_ref.indices)));
  }
  // With a second stage: exact gate and up for the predicted rows, down for the best of them;
  // layer 1 of this budget is dense.
  std::vector<float> y(d_model), dense(d_model);
  selection kept;
  ffn_scratch s;
  REQUIRE(op_for<cpu_backend>(d, "predicted+refine")(0, m.layers[0], x, y, kept, s, ex));
  CHECK(s.candidates.size() == 58);  // ceil(0.6 * 96)
  CHECK(s.reads.gate_rows == 58);
  CHECK(kept.size() == 41);  // ceil(0.7 * 58)
  check_within(y, ffn_oracle(activation::silu, m.gate[0].values, m.up[0].values, m.down[0].values, x,
                             subset::only(kept.indices)));
  REQUIRE(op_for<cpu_backend>(d, "predicted+refine")(1, m.layers[1], x, y, kept, s, ex));
  REQUIRE(dense_ffn(cpu_backend{}, m.layers[1], x, dense, s, ex));
  CHECK(kept.reason == fallback_reason::dense_layer);
  CHECK(same_bits(y, dense));
}

TEST_CASE("calibrated schedule: per-token tiers keep their base set, never above the cap") {
  std::mt19937 rng(36);
  const model m(rng);
  const calibration_data d = make_data(m, rng);
  cpu::executor ex;
  const auto op = op_for<cpu_backend>(d, "tier");
  std::size_t seen[3] = {0, 0, 0};
  for (int token = 0; token < 40; ++token) {
    std::vector<float> x = random_vector(d_model, rng);
    const float spread = static_cast<float>(token % 5) * 0.7F + 0.1F;
    for (float& v : x) v *= spread;
    std::vector<float> y(d_model);
    selection kept;
    ffn_scratch s;
    REQUIRE(op(0, m.layers[0], x, y, kept, s, ex));
    const std::size_t n = kept.size();
    REQUIRE((n == 96 || n == 48 || n == 24));
    const std::size_t tier = n == 96 ? 0 : n == 48 ? 1 : 2;
    ++seen[tier];
    for (const std::uint32_t b : d.layers[0].tiers[tier].base) {
      CHECK(std::binary_search(kept.indices.begin(), kept.indices.end(), b));
    }
    // The tier is the predictor's, computed from x.
    std::vector<float> scratch;
    CHECK(tier_predictor::from_parameters(*d.layers[0].tier_predictor).predict_from_input(x, 2, 1e-3, scratch) == tier);
  }
  CHECK(seen[0] + seen[1] + seen[2] == 40);
}

TEST_CASE("calibrated schedule: input thresholds drive input_sparse_linear, bad budgets are errors") {
  std::mt19937 rng(37);
  const model m(rng);
  const calibration_data d = make_data(m, rng);
  const per_layer_table<float> q = input_thresholds(d, "teal", 0);
  CHECK(q.at(0) == -std::numeric_limits<float>::infinity());
  CHECK(q.at(1) == 0.01F * 7.0F);
  const input_sparse_linear<magnitude, threshold, cpu_backend, per_layer_table<float>> op{
      magnitude{}, threshold{}, {}, input_thresholds(d, "teal", 5)};
  const auto x = random_vector(d_model, rng);
  std::vector<float> y(d_ff);
  selection kept;
  linear_scratch s;
  cpu::executor ex;
  REQUIRE(op(1, linear_layer{m.layers[1].up}, x, y, kept, s, ex));
  std::vector<float> ax(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) ax[i] = std::fabs(x[i]);
  CHECK(kept.indices == threshold{0.01F * 12.0F}.select(ax).indices);
  CHECK_THROWS_WITH_AS((void)input_thresholds(d, "top_k", 0), doctest::Contains("input_thresholds"), error);
  CHECK_THROWS_WITH_AS((void)input_thresholds(d, "teal", 7), doctest::Contains("projection"), error);
  CHECK_THROWS_WITH_AS(calibrated_schedule(d, "teal"), doctest::Contains("neuron settings"), error);
  CHECK_THROWS_WITH_AS((void)calibrated_schedule(d, "top_k").at(2), doctest::Contains("layer"), error);
}

TEST_CASE("permute_ffn: the same FFN on permuted weights, keep-all on them equals their dense FFN") {
  std::mt19937 rng(38);
  const model m(rng);
  std::vector<std::uint32_t> order = all_indices(d_ff);
  std::shuffle(order.begin(), order.end(), rng);
  const permuted_ffn p = permute_ffn(m.layers[0], order);
  const auto x = random_vector(d_model, rng);
  std::vector<float> y(d_model), yp(d_model), yk(d_model);
  ffn_scratch s;
  cpu::executor ex;
  REQUIRE(dense_ffn(cpu_backend{}, m.layers[0], x, y, s, ex));
  REQUIRE(dense_ffn(cpu_backend{}, p.layer, x, yp, s, ex));
  for (std::size_t i = 0; i < d_model; ++i) CHECK(yp[i] == doctest::Approx(y[i]).epsilon(1e-4).scale(1.0));
  selection kept;
  const neuron_sparse_ffn op{magnitude{}, top_k::by_count(d_ff), score_source::gate_activation, cpu_backend{}};
  REQUIRE(op(p.layer, x, yk, kept, s, ex));
  CHECK(same_bits(yk, yp));
  // Rows moved whole: W_downᵀ row i of the permuted layer is row order[i] of the original.
  const auto a = p.layer.down_t.as<float>();
  const auto b = m.layers[0].down_t.as<float>();
  for (std::size_t i = 0; i < d_ff; ++i) CHECK(std::equal(a.row(i), a.row(i) + d_model, b.row(order[i])));
  // q4_0: W_down's columns cannot move, so W_downᵀ is needed.
  const test_weights qg = make_weights(dtype::q4_0, d_ff, d_model, rng);
  const test_weights qd = make_weights(dtype::q4_0, d_model, d_ff, rng);
  const ffn_layer q{activation::silu, qg.view, qg.view, qd.view};
  CHECK_THROWS_WITH_AS((void)permute_ffn(q, order), doctest::Contains("down_t"), error);
  const cpu::owned_weights qdt = cpu::transpose(qd.view);
  const ffn_layer qt{activation::silu, qg.view, qg.view, qd.view, qdt.view};
  const permuted_ffn pq = permute_ffn(qt, order);
  CHECK(pq.layer.down.absent());
  CHECK(pq.layer.gate.type == dtype::q4_0);
}
