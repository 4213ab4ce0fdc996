// threshold_calibration: per-layer thresholds for a target sparsity, and their text form.

#include <actsparse/calibration/threshold_calibration.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/selectors/threshold.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace actsparse;

namespace {

std::vector<float> samples(std::size_t n, std::mt19937& rng, int kind) {
  std::normal_distribution<float> g(0.0F, 1.0F);
  std::exponential_distribution<float> e(3.0F);
  std::vector<float> v(n);
  for (auto& x : v) x = kind == 0 ? std::fabs(g(rng)) : (kind == 1 ? e(rng) : g(rng));
  return v;
}

double fraction_at_most(const std::vector<float>& v, float t) {
  return static_cast<double>(std::count_if(v.begin(), v.end(), [t](float x) { return x <= t; })) /
         static_cast<double>(v.size());
}

std::vector<float> load_text(const std::string& text) {
  const per_layer_table<float> t = per_layer_table<float>::parse(text);
  return {t.values().begin(), t.values().end()};
}

}  // namespace

TEST_CASE("threshold_calibration: drops the target fraction of each layer within 1/N") {
  std::mt19937 rng(2024);
  threshold_calibration cal;
  std::vector<std::vector<float>> all(3);
  for (int batch = 0; batch < 4; ++batch) {  // several add() calls per layer
    for (std::size_t layer = 0; layer < 3; ++layer) {
      const auto v = samples(2500 + 17 * layer, rng, static_cast<int>(layer));
      cal.add(layer, v);
      all[layer].insert(all[layer].end(), v.begin(), v.end());
    }
  }
  CHECK(cal.layer_count() == 3);
  for (std::size_t layer = 0; layer < 3; ++layer) {
    const auto& v = all[layer];
    CHECK(cal.samples_seen(layer) == v.size());
    CHECK(cal.samples_kept(layer) == v.size());
    const double n = static_cast<double>(v.size());
    for (const double s : {0.01, 0.1, 0.25, 0.5, 0.9, 0.999}) {
      const float t = cal.threshold_for(layer, s);
      CAPTURE(layer);
      CAPTURE(s);
      CHECK(fraction_at_most(v, t) >= s);
      CHECK(fraction_at_most(v, t) < s + 1.0 / n);
      // The selector built from it keeps the rest.
      const auto kept = cal.selector_for(layer, s).select(v).kept_fraction();
      CHECK(std::fabs(kept - (1.0 - s)) <= 1.0 / n);
    }
    CHECK(cal.threshold_for(layer, 0.0) == -std::numeric_limits<float>::infinity());
    CHECK(cal.selector_for(layer, 0.0).select(v).keeps_all());
  }
  const auto t = cal.thresholds(0.5);
  REQUIRE(t.size() == 3);
  for (std::size_t layer = 0; layer < 3; ++layer) CHECK(t.at(layer) == cal.threshold_for(layer, 0.5));
  const std::vector<double> per_layer = {0.1, 0.5, 0.9};
  const auto tl = cal.thresholds(per_layer);
  for (std::size_t layer = 0; layer < 3; ++layer) CHECK(tl.at(layer) == cal.threshold_for(layer, per_layer[layer]));
}

TEST_CASE("threshold_calibration: exact small cases") {
  threshold_calibration cal;
  cal.add(0, std::vector<float>{5, 1, 4, 2, 3});  // sorted 1 2 3 4 5
  CHECK(cal.threshold_for(0, 0.2) == 1.0F);       // ceil(1) - 1 = 0
  CHECK(cal.threshold_for(0, 0.21) == 2.0F);      // ceil(1.05) - 1 = 1
  CHECK(cal.threshold_for(0, 0.6) == 3.0F);
  CHECK(cal.threshold_for(0, 0.99) == 5.0F);  // everything dropped
  cal.add(0, std::vector<float>{});           // nothing to add is fine
  CHECK(cal.samples_seen(0) == 5);
  cal.add(9, std::vector<float>{});  // and does not create a layer
  CHECK(cal.layer_count() == 1);
}

TEST_CASE("threshold_calibration: a bounded reservoir is deterministic and close") {
  std::mt19937 rng(1);
  const auto v = samples(200000, rng, 0);
  threshold_calibration a(4096);
  threshold_calibration b(4096);
  for (std::size_t i = 0; i < v.size(); i += 1000) {
    const std::span<const float> part(v.data() + i, 1000);
    a.add(2, part);
    b.add(2, part);
  }
  CHECK(a.samples_kept(2) == 4096);
  CHECK(a.samples_seen(2) == 200000);
  CHECK(a.threshold_for(2, 0.5) == b.threshold_for(2, 0.5));
  for (const double s : {0.25, 0.5, 0.75}) {
    CHECK(std::fabs(fraction_at_most(v, a.threshold_for(2, s)) - s) < 0.03);
  }
}

TEST_CASE("threshold_calibration: rejects bad samples, layers and sparsities") {
  threshold_calibration cal;
  CHECK_THROWS_WITH_AS((void)(cal.add(1, std::vector<float>{1.0F, std::nanf("")})),
                       doctest::Contains("'samples[1]' is nan"), error);
  CHECK_THROWS_WITH_AS((void)(cal.add(1, std::vector<float>{std::numeric_limits<float>::infinity()})),
                       doctest::Contains("layer 1"), error);
  CHECK(cal.layer_count() == 0);  // nothing was added
  cal.add(1, std::vector<float>{1.0F, 2.0F});
  CHECK_THROWS_WITH_AS((void)(cal.threshold_for(0, 0.5)), doctest::Contains("'layer' is 0"), error);
  CHECK_THROWS_WITH_AS((void)(cal.thresholds(0.5)), doctest::Contains("was given samples"), error);  // layer 0 is empty
  CHECK_THROWS_WITH_AS((void)(cal.threshold_for(7, 0.5)), doctest::Contains("'layer' is 7"), error);
  CHECK_THROWS_WITH_AS((void)(cal.threshold_for(1, 1.0)), doctest::Contains("'sparsity' is 1"), error);
  CHECK_THROWS_WITH_AS((void)(cal.threshold_for(1, -0.1)), doctest::Contains("[0, 1)"), error);
  CHECK_THROWS_WITH_AS((void)(cal.threshold_for(1, std::nan(""))), doctest::Contains("'sparsity' is nan"), error);
  CHECK_THROWS_WITH_AS((void)(threshold_calibration(0)), doctest::Contains("max_samples_per_layer"), error);
}

TEST_CASE("threshold_calibration: save and load round-trip exactly") {
  std::mt19937 rng(3);
  threshold_calibration cal;
  for (std::size_t layer = 0; layer < 5; ++layer) cal.add(layer, samples(1000, rng, 2));
  for (const double s : {0.0, 0.3, 0.77}) {
    const per_layer_table<float> t = cal.thresholds(s);
    const auto back = load_text(t.to_string());
    REQUIRE(back.size() == t.size());
    for (std::size_t i = 0; i < t.size(); ++i)
      CHECK(std::bit_cast<std::uint32_t>(back[i]) == std::bit_cast<std::uint32_t>(t.at(i)));
  }
  const auto path = std::filesystem::temp_directory_path() / "actsparse_test_thresholds.txt";
  const per_layer_table<float> t(std::vector<float>{-std::numeric_limits<float>::infinity(), 0.1F, 1e-30F, 3.4e38F});
  threshold_calibration::save(path, t);
  CHECK(threshold_calibration::load(path) == t);
  std::filesystem::remove(path);
  CHECK_THROWS_WITH_AS((void)(threshold_calibration::load(path)), doctest::Contains("a readable file"), error);
  // Comments, blank lines, tabs and CRLF are fine.
  CHECK(load_text("# header\n\n0\t0.5 # first\r\n1 -inf\n  2   7\n") == std::vector<float>{0.5F, -INFINITY, 7.0F});
}

TEST_CASE("threshold_calibration: malformed text names the line (per_layer_table's parser)") {
  CHECK_THROWS_WITH_AS((void)(load_text("0 0.5\n1\n")), doctest::Contains("line 2: \"1\"; expected two tokens"), error);
  CHECK_THROWS_WITH_AS((void)(load_text("0 0.5 9\n")), doctest::Contains("line 1: \"0 0.5 9\""), error);
  CHECK_THROWS_WITH_AS((void)(load_text("0 abc\n")), doctest::Contains("a decimal number or +-inf"), error);
  CHECK_THROWS_WITH_AS((void)(load_text("0 0.5x\n")), doctest::Contains("line 1"), error);
  CHECK_THROWS_WITH_AS((void)(load_text("0 nan\n")), doctest::Contains("not NaN"), error);
  CHECK_THROWS_WITH_AS((void)(load_text("x 0.5\n")), doctest::Contains("a layer number"), error);
  CHECK_THROWS_WITH_AS((void)(load_text("-1 0.5\n")), doctest::Contains("a layer number"), error);
  CHECK_THROWS_WITH_AS((void)(load_text("0 1\n2 1\n")), doctest::Contains("without layer 1"), error);
  CHECK_THROWS_WITH_AS((void)(load_text("0 1\n0 2\n")), doctest::Contains("line 2: layer 0 again"), error);
  CHECK(load_text("# nothing\n\n").empty());
  CHECK_THROWS_WITH_AS((void)(threshold_calibration::load("/nonexistent/thresholds.txt")),
                       doctest::Contains("a readable file"), error);
}
