// Sharded selection (distributed/sharded_selection.hpp): the union of the ranks' parts equals
// the unsharded selector's set for every shard count, in lockstep and with threads as ranks.

#include <actsparse/distributed/sharded_selection.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>
#include <actsparse/selectors/threshold.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "rank_harness.hpp"
#include "selector_test_support.hpp"

using namespace actsparse;
using rank_test::select_lockstep;

namespace {

enum class shape { uniform, ties, signed_values, equal, zeros_and_signs, heavy_tail };

std::vector<float> make_scores(shape s, std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(0.0F, 1.0F);
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    switch (s) {
      case shape::uniform:
        v[i] = u(rng);
        break;
      case shape::ties:
        v[i] = static_cast<float>(rng() % 4);
        break;
      case shape::signed_values:
        v[i] = u(rng) * 2.0F - 1.0F;
        break;
      case shape::equal:
        v[i] = 0.25F;
        break;
      case shape::zeros_and_signs:
        v[i] = (rng() % 3 == 0) ? -0.0F : (rng() % 2 == 0 ? 0.0F : 1.0F);
        break;
      case shape::heavy_tail:  // magnitudes over many binades, as |act(g)·u| of a real layer
        v[i] = std::exp(u(rng) * 30.0F - 25.0F);
        break;
    }
  }
  return v;
}

std::string label(shape s, std::size_t n, std::size_t ranks) {
  return "shape " + std::to_string(static_cast<int>(s)) + " n " + std::to_string(n) + " ranks " + std::to_string(ranks);
}

}  // namespace

TEST_CASE("sharded_selection: fixed_mass sums exactly and rounds to the nearest double once") {
  detail::fixed_mass a;
  a.add_shifted(0xFFFFFFU, 70);  // 2^94 - 2^70
  detail::fixed_mass b;
  b.add_shifted(1U, 70);
  a.add(b);
  CHECK(a.value() == std::ldexp(1.0, 94));
  detail::fixed_mass c;  // 2^64 + 1: the sticky bit rounds up past the tie at 2^64 + 2048
  c.add({1, 1});
  CHECK(c.value() == std::ldexp(1.0, 64));
  detail::fixed_mass d{0x801, 0};  // below 2^64: the hardware conversion
  CHECK(d.value() == 2049.0);
  detail::fixed_mass e{0x8000000000000C01ULL, 0};  // 2^63 + 3073: rounds to 2^63 + 4096
  CHECK(e.value() == std::ldexp(1.0, 63) + 4096.0);
  detail::fixed_mass f{1, 1};  // 2^64 + 1 times 3
  detail::fixed_mass g;
  g.add_times(f, 3);
  CHECK(g == detail::fixed_mass{3, 3});
  // Monotone across the 64-bit boundary: (hi, max lo) <= (hi + 1, 0).
  for (std::uint64_t hi : {std::uint64_t{1}, std::uint64_t{1} << 20, std::uint64_t{1} << 55, ~std::uint64_t{0} - 1}) {
    const detail::fixed_mass below{~std::uint64_t{0}, hi};
    const detail::fixed_mass above{0, hi + 1};
    CHECK(below.value() <= above.value());
  }
  // The scale: the largest score counts 2^72 ulps, each added exactly whatever the order.
  const detail::mass_scale sc = detail::mass_scale::of_max(detail::order_key(3.0F));
  detail::fixed_mass x;
  detail::fixed_mass y;
  const std::vector<float> v = {3.0F, 1e-20F, 0.5F, 1.0F / 3.0F, 1e-3F};
  for (const float s : v) sc.add(x, s);
  for (auto it = v.rbegin(); it != v.rend(); ++it) sc.add(y, *it);
  CHECK(x == y);
  double sum = 0.0;
  for (const float s : v) sum += static_cast<double>(s);
  CHECK(sc.to_double(x) == doctest::Approx(sum).epsilon(1e-15));
}

TEST_CASE("sharded_selection: order keys rank as floats do, -0 with +0") {
  const std::vector<float> v = {-std::numeric_limits<float>::max(), -1.0F, -1e-30F, -0.0F, 0.0F, 1e-40F, 1e-30F, 1.0F,
                                std::numeric_limits<float>::max()};
  for (std::size_t i = 0; i + 1 < v.size(); ++i) {
    CHECK(detail::order_key(v[i]) <= detail::order_key(v[i + 1]));
    if (v[i] != v[i + 1]) {
      CHECK(detail::order_key(v[i]) < detail::order_key(v[i + 1]));
    }
    if (v[i] != 0.0F) {
      CHECK(detail::from_order_key(detail::order_key(v[i])) == v[i]);
    }
  }
  CHECK(detail::order_key(-0.0F) == detail::order_key(0.0F));
}

TEST_CASE("sharded_selection: top_k over any shard count keeps the unsharded set") {
  for (const shape s :
       {shape::uniform, shape::ties, shape::signed_values, shape::equal, shape::zeros_and_signs, shape::heavy_tail}) {
    for (const std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{100}, std::size_t{4099}}) {
      const std::vector<float> scores = make_scores(s, n, static_cast<std::uint32_t>(n * 7 + static_cast<int>(s)));
      for (const std::size_t k : {std::size_t{0}, std::size_t{1}, n / 10, n / 2, n - 1, n}) {
        const selection whole = top_k::by_count(k).select(scores);
        for (const std::size_t ranks :
             {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{4}, std::size_t{7}}) {
          INFO(label(s, n, ranks) << " k " << k);
          const auto got = select_lockstep(top_k::by_count(k), scores, ranks);
          CHECK(got.global == whole.indices);
          CHECK(got.rounds <= 12);
          std::size_t sum = 0;
          for (const selection& l : got.local) {
            sum += l.universe;
            CHECK_FALSE(l.dense_fallback);
          }
          CHECK(sum == n);
        }
      }
    }
  }
}

TEST_CASE("sharded_selection: top_k reports the global masses for scores >= 0") {
  const std::vector<float> scores = make_scores(shape::heavy_tail, 3000, 11);
  const selection whole = top_k::by_ratio(0.2).select(scores);
  const auto got = select_lockstep(top_k::by_ratio(0.2), scores, 3);
  REQUIRE(got.global == whole.indices);
  for (const selection& l : got.local) {
    CHECK(l.total_mass == doctest::Approx(whole.total_mass).epsilon(1e-12));
    CHECK(l.covered_mass == doctest::Approx(whole.covered_mass).epsilon(1e-12));
    CHECK(l.total_mass == got.local[0].total_mass);  // the same bits on every rank
  }
}

TEST_CASE("sharded_selection: cumulative_mass over any shard count keeps the unsharded set") {
  for (const shape s : {shape::uniform, shape::ties, shape::equal, shape::heavy_tail}) {
    for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{300}, std::size_t{4099}}) {
      const std::vector<float> scores = make_scores(s, n, static_cast<std::uint32_t>(n * 13 + static_cast<int>(s)));
      for (const double mass : {0.05, 0.5, 0.9, 0.999, 1.0}) {
        for (const std::size_t min_keep : {std::size_t{0}, n / 3}) {
          const cumulative_mass policy{mass, 0, min_keep};
          const selection whole = policy.select(scores);
          std::vector<std::uint32_t> one_rank;
          for (const std::size_t ranks : {std::size_t{1}, std::size_t{2}, std::size_t{4}, std::size_t{7}}) {
            INFO(label(s, n, ranks) << " mass " << mass << " min_keep " << min_keep);
            const auto got = select_lockstep(policy, scores, ranks);
            CHECK(got.global == whole.indices);
            if (ranks == 1) one_rank = got.global;
            CHECK(got.global == one_rank);  // the same set for every shard count, by construction
            CHECK(got.local[0].total_mass == doctest::Approx(whole.total_mass).epsilon(1e-12));
            CHECK(got.local[0].covered_mass == doctest::Approx(whole.covered_mass).epsilon(1e-12));
          }
        }
      }
    }
  }
}

TEST_CASE("sharded_selection: cumulative_mass falls back to every score as the unsharded selector does") {
  std::vector<float> scores = make_scores(shape::uniform, 200, 5);
  const auto check_fallback = [&](fallback_reason why) {
    const selection whole = cumulative_mass{0.5}.select(scores);
    REQUIRE(whole.reason == why);
    const auto got = select_lockstep(cumulative_mass{0.5}, scores, 3);
    CHECK(got.global == whole.indices);
    for (const selection& l : got.local) {
      CHECK(l.dense_fallback);
      CHECK(l.reason == why);
      CHECK(l.keeps_all());
    }
  };
  scores[150] = selector_test::qnan;
  check_fallback(fallback_reason::non_finite);
  scores[150] = -1.0F;
  check_fallback(fallback_reason::negative);
  for (float& v : scores) v = 0.0F;
  check_fallback(fallback_reason::all_zero);
}

TEST_CASE("sharded_selection: a non-finite score is an error on every rank naming its global index") {
  std::vector<float> scores = make_scores(shape::uniform, 90, 3);
  scores[70] = -1.0F;  // a negative before it on the same rank is fine for top_k
  scores[77] = selector_test::inf;
  scores[85] = selector_test::qnan;
  for (const std::size_t ranks : {std::size_t{1}, std::size_t{3}}) {
    std::size_t failures = 0;
    try {
      (void)select_lockstep(top_k::by_count(10), scores, ranks);
    } catch (const actsparse::error& e) {
      ++failures;
      CHECK(e.argument() == "scores[77]");
      CHECK(e.value() == "inf");
    }
    CHECK(failures == 1);
  }
}

TEST_CASE("sharded_selection: bad arguments and inconsistent rounds are errors") {
  const std::vector<float> scores = make_scores(shape::uniform, 64, 9);
  sharded_selection st;
  const std::span<const float> all(scores);
  CHECK_THROWS_WITH_AS(st.begin(top_k::by_count(5), all.first(10), neuron_shard{0, 32, 64, 0, 2}),
                       doctest::Contains("local.size()"), actsparse::error);
  CHECK_THROWS_WITH_AS(st.begin(top_k::by_count(65), all.first(32), neuron_shard{0, 32, 64, 0, 2}),
                       doctest::Contains("at most n = 64"), actsparse::error);
  CHECK_THROWS_WITH_AS(st.begin(top_k::by_count(5), all.first(32), neuron_shard{40, 32, 64, 1, 2}),
                       doctest::Contains("a slice of [0, 64)"), actsparse::error);
  CHECK_THROWS_WITH_AS(st.begin(top_k::by_count(5), all.first(32), neuron_shard{0, 32, 64, 2, 2}),
                       doctest::Contains("< shard.ranks"), actsparse::error);
  CHECK_THROWS_WITH_AS(st.begin(cumulative_mass{0.5, 4, 0}, all.first(32), neuron_shard{0, 32, 64, 0, 2}),
                       doctest::Contains("recent_n"), actsparse::error);
  CHECK_THROWS_WITH_AS(st.begin(cumulative_mass{std::nan(""), 0, 0}, all.first(32), neuron_shard{0, 32, 64, 0, 2}),
                       doctest::Contains("mass"), actsparse::error);

  // Two ranks whose slices overlap, summaries out of order, a round skipped, a short buffer.
  sharded_selection a;
  sharded_selection b;
  a.begin(top_k::by_count(5), all.first(32), neuron_shard{0, 32, 64, 0, 2});
  b.begin(top_k::by_count(5), all.subspan(16, 32), neuron_shard{16, 32, 64, 1, 2});
  std::vector<std::byte> gathered(2 * shard_summary::bytes);
  std::memcpy(gathered.data(), a.summary_bytes().data(), shard_summary::bytes);
  std::memcpy(gathered.data() + shard_summary::bytes, b.summary_bytes().data(), shard_summary::bytes);
  CHECK_THROWS_WITH_AS(a.next(gathered), doctest::Contains("tile [0, 64) in rank order"), actsparse::error);
  b.begin(top_k::by_count(5), all.subspan(32, 32), neuron_shard{32, 32, 64, 1, 2});
  std::memcpy(gathered.data(), b.summary_bytes().data(), shard_summary::bytes);
  std::memcpy(gathered.data() + shard_summary::bytes, a.summary_bytes().data(), shard_summary::bytes);
  CHECK_THROWS_WITH_AS(a.next(gathered), doctest::Contains("summaries in rank order"), actsparse::error);
  CHECK_THROWS_WITH_AS(a.next(std::span<const std::byte>(gathered).first(100)),
                       doctest::Contains("ranks x shard_summary::bytes"), actsparse::error);
  CHECK_THROWS_WITH_AS(a.result(*std::make_unique<selection>()), doctest::Contains("before done()"), actsparse::error);
}

TEST_CASE("sharded_selection: threads as ranks with select_sharded give the lockstep result") {
  const std::vector<float> scores = make_scores(shape::heavy_tail, 11008, 21);
  for (const std::size_t ranks : {std::size_t{2}, std::size_t{4}}) {
    const auto expected = select_lockstep(top_k::by_ratio(0.2), scores, ranks);
    const auto expected_mass = select_lockstep(cumulative_mass{0.8}, scores, ranks);
    rank_test::thread_group group(ranks);
    std::vector<selection> got(ranks);
    std::vector<selection> got_mass(ranks);
    const auto errors = group.run([&](std::size_t r) {
      const neuron_shard shard = neuron_shard::even(scores.size(), r, ranks, 32);
      const std::span<const float> local = std::span<const float>(scores).subspan(shard.begin, shard.size);
      auto gather = [&](std::span<const std::byte> mine, std::span<std::byte> all) { group.gather(r, mine, all); };
      sharded_selection st;
      select_sharded(top_k::by_ratio(0.2), local, shard, gather, st, got[r]);
      select_sharded(cumulative_mass{0.8}, local, shard, gather, st, got_mass[r]);
    });
    for (const auto& e : errors) CHECK_FALSE(e);
    std::vector<std::uint32_t> global;
    std::vector<std::uint32_t> global_mass;
    for (std::size_t r = 0; r < ranks; ++r) {
      const neuron_shard shard = neuron_shard::even(scores.size(), r, ranks, 32);
      for (const std::uint32_t i : got[r].indices) global.push_back(static_cast<std::uint32_t>(shard.begin + i));
      for (const std::uint32_t i : got_mass[r].indices) {
        global_mass.push_back(static_cast<std::uint32_t>(shard.begin + i));
      }
    }
    CHECK(global == top_k::by_ratio(0.2).select(scores).indices);
    CHECK(global_mass == cumulative_mass{0.8}.select(scores).indices);
    CHECK(expected.global.size() == global.size());
    CHECK(expected_mass.global == global_mass);
  }
}

TEST_CASE("sharded_selection: threshold is local by nature") {
  const std::vector<float> scores = make_scores(shape::signed_values, 1000, 4);
  const selection whole = threshold{0.3F}.select(scores);
  std::vector<std::uint32_t> global;
  for (std::size_t r = 0; r < 3; ++r) {
    const neuron_shard shard = neuron_shard::even(scores.size(), r, 3);
    const selection part = threshold{0.3F}.select(std::span<const float>(scores).subspan(shard.begin, shard.size));
    for (const std::uint32_t i : part.indices) global.push_back(static_cast<std::uint32_t>(shard.begin + i));
  }
  CHECK(global == whole.indices);
}

TEST_CASE("sharded_selection: even shards tile the universe on block boundaries") {
  for (const std::size_t total : {std::size_t{1}, std::size_t{33}, std::size_t{11008}}) {
    for (const std::size_t ranks : {std::size_t{1}, std::size_t{3}, std::size_t{8}, std::size_t{64}}) {
      std::size_t next = 0;
      for (std::size_t r = 0; r < ranks; ++r) {
        const neuron_shard s = neuron_shard::even(total, r, ranks, 32);
        CHECK(s.begin == next);
        CHECK((s.begin % 32 == 0 || s.begin == total));
        next = s.begin + s.size;
      }
      CHECK(next == total);
    }
  }
  CHECK_THROWS_AS((void)neuron_shard::even(10, 3, 3), actsparse::error);
  CHECK(sizeof(shard_summary) == 384);
}
