#include <actsparse/core/error.hpp>
#include <actsparse/schedules/depth_schedule.hpp>
#include <actsparse/schedules/per_layer_table.hpp>
#include <actsparse/schedules/progressive_top_k.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <string_view>
#include <vector>

using namespace actsparse;

TEST_CASE("schedules: depth_schedule presets have the documented values") {
  constexpr auto none = depth_schedule::no_deep_tier;
  CHECK(depth_schedule::speed() == depth_schedule{3, none, 0.3, 0.3, 64, 1});
  CHECK(depth_schedule::balanced() == depth_schedule{20, none, 0.5, 0.5, 128, 1});
  CHECK(depth_schedule::quality() == depth_schedule{32, none, 0.7, 0.7, 128, 1});
  CHECK(depth_schedule::dense() == depth_schedule{80, none, 1.0, 1.0, 128, 1});
  for (std::string_view n : depth_schedule::preset_names) CHECK_NOTHROW(depth_schedule::preset(n).validate());
  CHECK(depth_schedule::preset("balanced") == depth_schedule::balanced());
  CHECK(depth_schedule::preset("speed") == depth_schedule::speed());
  CHECK_THROWS_WITH_AS(
      (void)depth_schedule::preset("fast"),
      doctest::Contains("argument 'name' is \"fast\"; expected one of: speed, balanced, quality, dense"), error);
  const auto b = depth_schedule::balanced();
  CHECK(b.at(0) == layer_policy{true, 1.0, 128, 1});
  CHECK(b.at(19) == layer_policy{true, 1.0, 128, 1});
  CHECK(b.at(20) == layer_policy{false, 0.5, 128, 1});
  CHECK(b.at(1000) == layer_policy{false, 0.5, 128, 1});
  CHECK(depth_schedule::dense().at(79).dense);
}

TEST_CASE("schedules: depth_schedule tiers, validation and scaling") {
  const depth_schedule s{
      .dense_until = 2, .deep_layer_start = 10, .mass = 0.6, .mass_deep = 0.4, .recent_n = 8, .min_keep = 4};
  CHECK(s.at(1) == layer_policy{true, 1.0, 8, 4});
  CHECK(s.at(2) == layer_policy{false, 0.6, 8, 4});
  CHECK(s.at(9).mass == 0.6);
  CHECK(s.at(10) == layer_policy{false, 0.4, 8, 4});
  auto bad = s;
  bad.mass = 0.0;
  CHECK_THROWS_WITH_AS((void)bad.at(3),
                       doctest::Contains("argument 'mass' is 0; expected a share of score mass in (0, 1]"), error);
  bad.mass = 1.5;
  CHECK_THROWS_AS(bad.validate(), error);
  bad.mass = std::numeric_limits<double>::quiet_NaN();
  CHECK_THROWS_AS(bad.validate(), error);
  bad = s;
  bad.mass_deep = -0.1;
  CHECK_THROWS_WITH_AS(bad.validate(), doctest::Contains("argument 'mass_deep'"), error);
  bad = s;
  bad.deep_layer_start = 1;
  CHECK_THROWS_WITH_AS(bad.validate(), doctest::Contains("expected deep_layer_start >= dense_until (2)"), error);

  // Scaling an 80-layer preset to 32 layers: 20 * 32 / 80 = 8, 32 * 32 / 80 = 12.8 -> 13, 3 * 32 / 80 = 1.2 -> 1.
  CHECK(depth_schedule::balanced().scaled_to(32).dense_until == 8);
  CHECK(depth_schedule::quality().scaled_to(32).dense_until == 13);
  CHECK(depth_schedule::speed().scaled_to(32).dense_until == 1);
  CHECK(depth_schedule::dense().scaled_to(32).dense_until == 32);
  CHECK(depth_schedule::balanced().scaled_to(32).deep_layer_start == depth_schedule::no_deep_tier);
  CHECK(depth_schedule::balanced().scaled_to(32).mass == 0.5);
  CHECK(depth_schedule{.dense_until = 1, .mass = 0.5}.scaled_to(40).dense_until == 1);  // 0.5 rounds up
  CHECK(depth_schedule{.dense_until = 1, .mass = 0.5}.scaled_to(39).dense_until == 0);  // 0.4875
  const auto scaled = s.scaled_to(6, 12);                                               // 2 -> 1, 10 -> 5
  CHECK(scaled.dense_until == 1);
  CHECK(scaled.deep_layer_start == 5);
  CHECK(scaled.mass_deep == 0.4);
  CHECK(depth_schedule::balanced().scaled_to(160).dense_until == 40);
  CHECK_THROWS_WITH_AS((void)s.scaled_to(6, 0), doctest::Contains("argument 'reference_layers' is 0"), error);
}

TEST_CASE("schedules: progressive_top_k parses, answers per layer and prints back") {
  const auto s = progressive_top_k::parse("0-15:6,16-39:5,40-60:4");
  CHECK(s.num_layers() == 61);
  CHECK(s.at(0) == 6);
  CHECK(s.at(15) == 6);
  CHECK(s.at(16) == 5);
  CHECK(s.at(39) == 5);
  CHECK(s.at(40) == 4);
  CHECK(s.at(60) == 4);
  CHECK(s.ranges().size() == 3);
  CHECK(s.to_string() == "0-15:6,16-39:5,40-60:4");
  CHECK_THROWS_WITH_AS((void)s.at(61),
                       doctest::Contains("argument 'layer' is 61; expected a layer below 61 (the schedule covers 61 "
                                         "layers: 0-60)"),
                       error);

  const auto single = progressive_top_k::parse("0-6:8,7:3,8-9:2");
  CHECK(single.at(7) == 3);
  CHECK(single.to_string() == "0-6:8,7:3,8-9:2");
  CHECK(progressive_top_k::parse("0:2").num_layers() == 1);
  CHECK(progressive_top_k::parse("0-0:2").to_string() == "0:2");

  // Spaces around tokens are allowed; the canonical form has none.
  const auto spaced = progressive_top_k::parse("  0 - 15 : 6 ,  16-39:5 , 40 -60: 4  ");
  CHECK(spaced == s);

  // Round trips.
  for (std::string_view text : {"0:1", "0-3:2,4:1", "0-15:6,16-39:5,40-60:4", "0:5,1:4,2:3,3-100:2"}) {
    CHECK(progressive_top_k::parse(text).to_string() == text);
  }
  std::mt19937 rng(7);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<layer_range_k> ranges;
    std::size_t first = 0;
    const int n = 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < n; ++i) {
      const std::size_t len = 1 + rng() % 20;
      ranges.push_back({first, first + len - 1, 1 + rng() % 8});
      first += len;
    }
    const progressive_top_k p(ranges);
    CHECK(progressive_top_k::parse(p.to_string()) == p);
  }
  CHECK(progressive_top_k().num_layers() == 0);
  CHECK_THROWS_WITH_AS((void)progressive_top_k().at(0), doctest::Contains("covers 0 layers"), error);
}

TEST_CASE("schedules: progressive_top_k rejects malformed text at the offending offset") {
  struct bad_case {
    std::string_view text;
    std::string_view message;
  };
  const bad_case cases[] = {
      {"", "at offset 0 (the end of the text); expected at least one range"},
      {"   ", "at offset 3 (the end of the text); expected at least one range"},
      {"0-15:6,x-20:5", "at offset 7 near \"x-20:5\"; expected a layer number"},
      {"0-15:six", "at offset 5 near \"six\"; expected k"},
      {"0-15:-6", "at offset 5"},
      {"0-15 6", "at offset 5 near \"6\"; expected ':' after a range"},
      {"0-15", "at offset 4 (the end of the text); expected ':' after a range"},
      {"0-15:6,16", "at offset 9 (the end of the text); expected '-' or ':' after a layer number"},
      {"0 15:6", "at offset 2 near \"15:6\"; expected '-' or ':'"},
      {"0-15:6,16-10:5", "at offset 10 near \"10:5\"; expected a last layer >= the first (16-10 is reversed)"},
      {"3-15:6", "at offset 0 near \"3-15:6\"; expected the first range to start at layer 0 (gap before layer 3"},
      {"0-15:6,17-20:5",
       "at offset 7 near \"17-20:5\"; expected a range starting at layer 16 (gap: layer 16 has no k)"},
      {"0-5-5:3", "at offset 3 near \"-5:3\"; expected ':' after a range"},
      {"0-15:6,15-20:5", "at offset 7 near \"15-20:5\"; expected a range starting at layer 16 (overlap"},
      {"0-15:6,10-20:5", "at offset 7"},
      {"0-15:6,19-20:5", "(gap: layers 16-18 have no k)"},
      {"1:6", "(gap before layer 1: layer 0 has no k)"},
      {"0-15:0", "at offset 5 near \"0\"; expected k >= 1"},
      {"0-99999999999999999999:3", "at offset 2 near \"999999999999...\"; expected the last layer of the range <="},
      {"0-15:99999999999999999999", "at offset 5"},
      {"0-15:6x", "at offset 6 near \"x\"; expected ',' and another range, or the end of the text"},
      {"0-15:6 16-20:5", "at offset 7 near \"16-20:5\"; expected ','"},
      {"0-15:6,", "at offset 6 near \",\"; expected another range after ',' (trailing comma)"},
      {"0-15:6 , ", "at offset 7 near \", \"; expected another range after ','"},
      {"0-15:6,,16-20:5", "at offset 7 near \",16-20:5\"; expected a layer number"},
      {"0\t-15:6", "at offset 1"},
      {"+0-15:6", "at offset 0"},
  };
  for (const bad_case& c : cases) {
    CAPTURE(c.text);
    CHECK_THROWS_WITH_AS((void)progressive_top_k::parse(c.text), doctest::Contains(std::string(c.message).c_str()),
                         error);
  }
  // The message also quotes the whole text.
  CHECK_THROWS_WITH_AS((void)progressive_top_k::parse("0-15:6,"),
                       doctest::Contains("progressive_top_k::parse: argument 'text' is \"0-15:6,\", at offset 6"),
                       error);
  // Ranges given directly are checked too.
  CHECK_THROWS_WITH_AS(progressive_top_k({{0, 3, 2}, {5, 6, 1}}), doctest::Contains("ranges[1]"), error);
  CHECK_THROWS_WITH_AS(progressive_top_k({{0, 3, 0}}), doctest::Contains("k >= 1"), error);
  CHECK_THROWS_AS(progressive_top_k({{1, 3, 2}}), error);
  CHECK_THROWS_AS(progressive_top_k({{0, 3, 2}, {3, 5, 2}}), error);
}

TEST_CASE("schedules: per_layer_table answers per layer and checks the layer") {
  const per_layer_table<double> t({0.5, 0.25, 0.125});
  CHECK(t.size() == 3);
  CHECK(t.at(1) == 0.25);
  CHECK_THROWS_WITH_AS((void)t.at(3), doctest::Contains("argument 'layer' is 3; expected a layer below 3"), error);
  CHECK(per_layer_table<int>({1, 2}).at(0) == 1);  // any T works without the text form
}

TEST_CASE("schedules: per_layer_table text form round-trips and loads in any order") {
  const auto t = per_layer_table<float>::parse(
      "# thresholds\n"
      "\n"
      "2 0.125   # deep\n"
      "0\t0.5\r\n"
      "  1 1e-3\n");
  REQUIRE(t.size() == 3);
  CHECK(t.at(0) == 0.5F);
  CHECK(t.at(1) == 1e-3F);
  CHECK(t.at(2) == 0.125F);
  CHECK(per_layer_table<float>::parse(t.to_string()) == t);
  CHECK(per_layer_table<float>::parse("").empty());

  std::mt19937 rng(3);
  std::uniform_real_distribution<double> dist(-1e3, 1e3);
  std::vector<double> dv(40);
  for (double& v : dv) v = dist(rng);
  const per_layer_table<double> d(dv);
  CHECK(per_layer_table<double>::parse(d.to_string()) == d);  // exact: shortest round-trip digits
  const per_layer_table<std::size_t> k({6, 6, 5, 4});
  CHECK(k.to_string() == "# layer value\n0 6\n1 6\n2 5\n3 4\n");
  CHECK(per_layer_table<std::size_t>::parse(k.to_string()) == k);

  const auto path = std::filesystem::temp_directory_path() / "actsparse_test_per_layer_table.txt";
  d.save(path);
  CHECK(per_layer_table<double>::load(path) == d);
  std::filesystem::remove(path);
  CHECK_THROWS_WITH_AS((void)per_layer_table<double>::load(path), doctest::Contains("expected a readable file"), error);
  CHECK_THROWS_WITH_AS(d.save(std::filesystem::path("/nonexistent-dir/x/table.txt")),
                       doctest::Contains("expected a writable file"), error);
}

TEST_CASE("schedules: per_layer_table text errors name the line") {
  CHECK_THROWS_WITH_AS(
      (void)per_layer_table<float>::parse("0 0.5\n1 abc\n"),
      doctest::Contains("argument 'text' is line 2: \"1 abc\"; expected a decimal number or +-inf (not NaN)"), error);
  CHECK_THROWS_WITH_AS((void)per_layer_table<float>::parse("0 0.5\nx 0.1\n"),
                       doctest::Contains("line 2: \"x 0.1\"; expected a layer number"), error);
  CHECK_THROWS_WITH_AS((void)per_layer_table<float>::parse("# c\n0 0.5\n1 0.1 2\n"),
                       doctest::Contains("line 3: \"1 0.1 2\"; expected two tokens"), error);
  CHECK_THROWS_WITH_AS((void)per_layer_table<float>::parse("0\n"), doctest::Contains("line 1: \"0\"; expected two"),
                       error);
  CHECK_THROWS_WITH_AS((void)per_layer_table<float>::parse("0 0.5\n1 nan\n"), doctest::Contains("line 2"), error);
  CHECK_THROWS_WITH_AS((void)per_layer_table<float>::parse("0 1e99\n"), doctest::Contains("line 1"), error);
  CHECK_THROWS_WITH_AS((void)per_layer_table<float>::parse("0 +1\n"), doctest::Contains("line 1"), error);
  CHECK_THROWS_WITH_AS((void)per_layer_table<float>::parse("0 0.5x\n"), doctest::Contains("line 1"), error);
  CHECK_THROWS_WITH_AS((void)per_layer_table<std::size_t>::parse("0 -3\n"),
                       doctest::Contains("line 1: \"0 -3\"; expected a non-negative integer"), error);
  CHECK_THROWS_WITH_AS((void)per_layer_table<std::size_t>::parse("0 2.5\n"), doctest::Contains("line 1"), error);
  CHECK_THROWS_WITH_AS((void)per_layer_table<float>::parse("0 0.5\n1 0.1\n\n0 0.2\n"),
                       doctest::Contains("line 4: layer 0 again (first given on line 1)"), error);
  CHECK_THROWS_WITH_AS(
      (void)per_layer_table<float>::parse("0 0.5\n1 0.1\n3 0.2\n"),
      doctest::Contains("a table without layer 2 (layers go up to 3, given on line 3); expected one line for every"),
      error);
  CHECK_THROWS_WITH_AS((void)per_layer_table<float>::parse("5 0.5\n"), doctest::Contains("without layer 0"), error);
  CHECK_THROWS_WITH_AS((void)per_layer_table<float>::parse("99999999999999999999999 0.5\n"),
                       doctest::Contains("line 1"), error);
}
