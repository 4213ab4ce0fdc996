// The budget selectors (adaptive_top_k, block_budget, tiered) and the decorators, against
// straightforward oracles.

#include <actsparse/core/error.hpp>
#include <actsparse/core/index_set.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/selectors/adaptive_top_k.hpp>
#include <actsparse/selectors/block_budget.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>
#include <actsparse/selectors/decorators.hpp>
#include <actsparse/selectors/threshold.hpp>
#include <actsparse/selectors/tiered.hpp>
#include <actsparse/selectors/top_k.hpp>

#include "selector_test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

using namespace actsparse;
using namespace selector_test;

namespace {

std::vector<float> uniform(std::size_t n, std::mt19937& rng, int levels = 0) {
  std::uniform_real_distribution<float> u(0.0F, 1.0F);
  std::uniform_int_distribution<int> l(0, std::max(levels - 1, 0));
  std::vector<float> v(n);
  for (auto& x : v) x = levels > 0 ? static_cast<float>(l(rng)) : u(rng);
  return v;
}

// A softmax over gaussian logits: one token's router probabilities.
std::vector<float> router(std::size_t n, std::mt19937& rng, float temperature) {
  std::normal_distribution<float> g(0.0F, 1.0F);
  std::vector<float> p(n);
  float sum = 0.0F;
  for (auto& x : p) sum += (x = std::exp(g(rng) / temperature));
  for (auto& x : p) x /= sum;
  return p;
}

std::vector<std::uint32_t> range(std::uint32_t b, std::uint32_t e) {
  std::vector<std::uint32_t> r(e - b);
  std::iota(r.begin(), r.end(), b);
  return r;
}

// Adds, in rank order, positions not in `have` until it holds `want`; returns it sorted.
std::vector<std::uint32_t> fill(std::vector<std::uint32_t> have, const std::vector<std::uint32_t>& rank,
                                std::size_t want) {
  std::vector<std::uint8_t> in(rank.size(), 0);
  for (const auto i : have) in[i] = 1;
  for (const auto i : rank) {
    if (have.size() >= want) break;
    if (in[i] == 0) have.push_back(i), in[i] = 1;
  }
  std::sort(have.begin(), have.end());
  return have;
}

}  // namespace

// ------------------------------------------------------------------- adaptive_top_k

TEST_CASE("adaptive_top_k: the smallest bucket whose top-b mass reaches the target") {
  std::mt19937 rng(42);
  selection out;
  for (const std::size_t n : {1UL, 2UL, 3UL, 5UL, 8UL, 33UL, 64UL, 256UL, 3000UL}) {
    for (const float temperature : {0.1F, 1.0F, 10.0F}) {
      const auto p = router(n, rng, temperature);
      const auto rank = ranking(p);
      for (const double mass : {0.0, 0.3, 0.5, 0.8, 1.0}) {
        const adaptive_top_k sel{.buckets = {3, 4, 5, 6}, .mass = mass};
        sel.select(p, out);
        std::vector<std::uint32_t> want;
        for (const std::size_t b : sel.buckets) {
          want = top_of(rank, std::min(b, n));
          if (index_sum(p, want) >= mass) break;
        }
        CAPTURE(n);
        CAPTURE(temperature);
        CAPTURE(mass);
        CHECK(out.indices == want);
        CHECK(out.covered_mass == index_sum(p, want));
        CHECK_FALSE(out.dense_fallback);
      }
    }
  }
}

TEST_CASE("adaptive_top_k: confident routers get the small bucket, flat ones the large") {
  const std::vector<float> sharp = {0.01F, 0.6F, 0.05F, 0.2F, 0.04F, 0.03F, 0.04F, 0.03F};
  CHECK(adaptive_top_k{}.select(sharp).indices == std::vector<std::uint32_t>{1, 2, 3});  // 0.85 >= 0.5
  const std::vector<float> flat(64, 1.0F / 64.0F);
  CHECK(adaptive_top_k{}.select(flat).indices == range(0, 6));          // 6/64 < 0.5: the largest; ties: low index
  CHECK(adaptive_top_k{.buckets = {2, 100}}.select(flat).keeps_all());  // clamped to n
  CHECK(adaptive_top_k{.buckets = {1}, .mass = 1.0}.select(sharp).indices == std::vector<std::uint32_t>{1});
}

TEST_CASE("adaptive_top_k: rejects bad buckets, masses and probabilities") {
  const std::vector<float> p = {0.5F, 0.25F, 0.25F};
  CHECK_THROWS_WITH_AS((void)(adaptive_top_k{.buckets = {}}.select(p)), doctest::Contains("at least one bucket"),
                       error);
  CHECK_THROWS_WITH_AS((void)(adaptive_top_k{.buckets = {0, 2}}.select(p)), doctest::Contains("'buckets[0]' is 0"),
                       error);
  CHECK_THROWS_WITH_AS((void)(adaptive_top_k{.buckets = {3, 3}}.select(p)), doctest::Contains("strictly increasing"),
                       error);
  CHECK_THROWS_WITH_AS((void)(adaptive_top_k{.buckets = {4, 2}}.select(p)), doctest::Contains("'buckets[1]' is 2"),
                       error);
  CHECK_THROWS_WITH_AS((void)(adaptive_top_k{.mass = 1.5}.select(p)), doctest::Contains("[0, 1]"), error);
  CHECK_THROWS_WITH_AS((void)(adaptive_top_k{.mass = std::nan("")}.select(p)), doctest::Contains("'mass' is nan"),
                       error);
  CHECK_THROWS_WITH_AS((void)(adaptive_top_k{}.select(std::vector<float>{0.5F, -0.1F})),
                       doctest::Contains("'scores[1]' is -0.1"), error);
  CHECK_THROWS_WITH_AS((void)(adaptive_top_k{}.select(std::vector<float>{0.5F, qnan})), doctest::Contains("finite"),
                       error);
  CHECK_THROWS_WITH_AS((void)(adaptive_top_k{}.select(std::vector<float>{})), doctest::Contains("at least one"), error);
}

// --------------------------------------------------------------------- block_budget

namespace {
// Straight from the contract.
std::vector<std::uint32_t> block_oracle(const std::vector<float>& s, const block_budget& p) {
  const std::size_t n = s.size();
  const std::size_t bs = p.block_size;
  const std::size_t blocks = (n + bs - 1) / bs;
  std::vector<float> score(blocks);
  double block_total = 0.0;
  for (std::size_t b = 0; b < blocks; ++b) {
    double sum = 0.0;
    const std::size_t e = std::min(n, (b + 1) * bs);
    for (std::size_t i = b * bs; i < e; ++i) sum += s[i];
    score[b] = static_cast<float>(sum / static_cast<double>(e - b * bs));
    block_total += score[b];
  }
  const auto rank = ranking(score);
  const auto len = [&](std::size_t b) { return std::min(n, (b + 1) * bs) - b * bs; };
  std::size_t taken = 0;
  std::size_t tokens = 0;
  double cum = 0.0;
  if (p.mass >= 1.0) {
    taken = blocks;
    tokens = n;
  } else {
    while (taken < blocks && cum < p.mass * block_total) {
      cum += score[rank[taken]];
      tokens += len(rank[taken++]);
    }
  }
  while (taken < blocks && static_cast<double>(tokens) < p.min_full_ratio * static_cast<double>(n)) {
    tokens += len(rank[taken++]);
  }
  while (taken > 1 && static_cast<double>(tokens) > p.max_full_ratio * static_cast<double>(n)) {
    tokens -= len(rank[--taken]);
  }
  std::vector<std::uint8_t> kept(blocks, 0);
  for (std::size_t j = 0; j < taken; ++j) kept[rank[j]] = 1;
  std::vector<std::uint32_t> out;
  for (std::size_t b = 0; b < blocks; ++b) {
    if (kept[b] == 0) continue;
    for (std::size_t i = b * bs; i < b * bs + len(b); ++i) out.push_back(static_cast<std::uint32_t>(i));
  }
  return out;
}
}  // namespace

TEST_CASE("block_budget: whole blocks by mean score, clamped to the token budget") {
  std::mt19937 rng(8);
  selection out;
  for (const std::size_t n : {1UL, 7UL, 128UL, 129UL, 1000UL, 4096UL, 11008UL}) {
    for (const std::size_t bs : {1UL, 16UL, 128UL, 5000UL}) {
      for (const int levels : {0, 3}) {
        const auto s = uniform(n, rng, levels);
        if (std::all_of(s.begin(), s.end(), [](float x) { return x == 0.0F; })) continue;
        for (const double mass : {0.0, 0.3, 0.7, 1.0}) {
          for (const auto& ratios : {std::pair{0.1, 0.5}, std::pair{0.0, 1.0}, std::pair{0.25, 0.25}}) {
            const double lo = ratios.first;  // not a structured binding: clang 14 cannot capture one
            const double hi = ratios.second;
            const block_budget p{.block_size = bs, .mass = mass, .min_full_ratio = lo, .max_full_ratio = hi};
            p.select(s, out);
            CAPTURE(n);
            CAPTURE(bs);
            CAPTURE(mass);
            CAPTURE(lo);
            CAPTURE(hi);
            const auto want = block_oracle(s, p);
            REQUIRE(out.indices == want);
            CHECK(out.covered_mass == index_sum(s, want));
            CHECK_FALSE(out.dense_fallback);
          }
        }
      }
    }
  }
}

TEST_CASE("block_budget: a partial last block competes on its mean") {
  // Blocks of 4: [1 1 1 1] [0 0 0 0] [3] -> the short last block ranks first.
  const std::vector<float> s = {1, 1, 1, 1, 0, 0, 0, 0, 3};
  const block_budget p{.block_size = 4, .mass = 0.5, .min_full_ratio = 0.0, .max_full_ratio = 1.0};
  CHECK(p.select(s).indices == std::vector<std::uint32_t>{8});  // 3 of total block mass 4 reaches 0.5
  const block_budget q{.block_size = 4, .mass = 0.5, .min_full_ratio = 0.5, .max_full_ratio = 1.0};
  CHECK(q.select(s).indices == std::vector<std::uint32_t>{0, 1, 2, 3, 8});  // 1 token < 4.5: add a block
  const block_budget r{.block_size = 4, .mass = 1.0, .min_full_ratio = 0.0, .max_full_ratio = 0.6};
  CHECK(r.select(s).indices == std::vector<std::uint32_t>{0, 1, 2, 3, 8});  // 9 > 5.4: drop the last ranked
  const block_budget one{.block_size = 4, .mass = 1.0, .min_full_ratio = 0.0, .max_full_ratio = 0.0};
  CHECK(one.select(s).indices == std::vector<std::uint32_t>{8});  // at least one block stays
}

TEST_CASE("block_budget: degenerate scores fall back, bad settings are errors") {
  const block_budget p{};
  CHECK(p.select(std::vector<float>(300, 0.0F)).reason == fallback_reason::all_zero);
  CHECK(p.select(std::vector<float>{1.0F, -1.0F}).reason == fallback_reason::negative);
  CHECK(p.select(std::vector<float>{1.0F, qnan}).reason == fallback_reason::non_finite);
  CHECK(p.select(std::vector<float>{1.0F, inf}).keeps_all());
  const std::vector<float> s(10, 1.0F);
  CHECK_THROWS_WITH_AS((void)(block_budget{.block_size = 0}.select(s)), doctest::Contains("'block_size' is 0"), error);
  CHECK_THROWS_WITH_AS((void)(block_budget{.mass = -1.0}.select(s)), doctest::Contains("'mass' is -1"), error);
  CHECK_THROWS_WITH_AS((void)(block_budget{.min_full_ratio = 0.6, .max_full_ratio = 0.5}.select(s)),
                       doctest::Contains("'max_full_ratio' is 0.5"), error);
  CHECK_THROWS_WITH_AS((void)(block_budget{.min_full_ratio = -0.1}.select(s)), doctest::Contains("'min_full_ratio'"),
                       error);
  CHECK_THROWS_WITH_AS((void)(block_budget{.max_full_ratio = 1.5}.select(s)), doctest::Contains("[min_full_ratio, 1]"),
                       error);
  CHECK_THROWS_WITH_AS((void)(block_budget{}.select(std::vector<float>{})), doctest::Contains("at least one"), error);
}

// --------------------------------------------------------------------------- tiered

// index_set::from_unsorted throughout: from_sorted trips a GCC 12 -O3 -Wrestrict false
// positive (in its error message's string concatenation) in a Release build.
TEST_CASE("tiered: the base plus the best others, up to ceil(n / m)") {
  std::mt19937 rng(77);
  selection out;
  for (const std::size_t n : {1UL, 2UL, 7UL, 33UL, 1000UL, 11008UL}) {
    const auto s = uniform(n, rng, n % 2 == 0 ? 4 : 0);
    const auto rank = ranking(s);
    for (const std::size_t m : {1UL, 2UL, 3UL, 4UL, 7UL}) {
      for (const std::size_t base_size : {0UL, 1UL, n / 10, n / 2, n}) {
        std::vector<std::uint32_t> b;  // every step-th index
        const std::size_t step = std::max<std::size_t>(1, n / std::max<std::size_t>(1, base_size));
        for (std::size_t i = 0; i < n && b.size() < base_size; i += step) b.push_back(static_cast<std::uint32_t>(i));
        const tiered p{.m = m, .base = index_set::from_unsorted(b)};
        p.select(s, out);
        const std::size_t want_size = (n + m - 1) / m;
        CAPTURE(n);
        CAPTURE(m);
        CAPTURE(base_size);
        const auto want = b.size() >= want_size ? b : fill(b, rank, want_size);
        REQUIRE(out.indices == want);
        CHECK(out.covered_mass == index_sum(s, want));
        CHECK(p.keep_count(n) == want_size);
      }
    }
  }
}

TEST_CASE("tiered: rejects m = 0, a base index past n and unrankable scores") {
  const std::vector<float> s = {1.0F, 2.0F, 3.0F};
  CHECK_THROWS_WITH_AS((void)(tiered{.m = 0}.select(s)), doctest::Contains("'m' is 0"), error);
  CHECK_THROWS_WITH_AS((void)(tiered{.m = 2, .base = index_set::from_unsorted({0, 3, 7})}.select(s)),
                       doctest::Contains("'base[1]' is 3"), error);
  CHECK_THROWS_WITH_AS((void)(tiered{.m = 2}.select(std::vector<float>{1.0F, qnan})),
                       doctest::Contains("'scores[1]' is nan"), error);
  CHECK(tiered{.m = 2, .base = index_set::from_unsorted({2})}.select(s).indices == std::vector<std::uint32_t>{1, 2});
}

// ----------------------------------------------------------------------- decorators

TEST_CASE("keep_recent: adds the last positions to any selector") {
  std::mt19937 rng(5);
  const auto s = uniform(3000, rng);
  const auto rank = ranking(s);
  for (const std::size_t r : {0UL, 1UL, 100UL, 5000UL}) {
    const auto sel = keep_recent{top_k::by_count(300), r}.select(s);
    auto want = top_of(rank, 300);
    for (std::size_t i = 3000 - std::min<std::size_t>(r, 3000); i < 3000; ++i)
      want.push_back(static_cast<std::uint32_t>(i));
    std::sort(want.begin(), want.end());
    want.erase(std::unique(want.begin(), want.end()), want.end());
    CHECK(sel.indices == want);
    CHECK(sel.covered_mass == index_sum(s, want));
  }
  // The inner fallback survives.
  const auto fb = keep_recent{cumulative_mass{.mass = 0.5}, 4}.select(std::vector<float>(10, 0.0F));
  CHECK(fb.dense_fallback);
  CHECK(fb.reason == fallback_reason::all_zero);
  CHECK(fb.keeps_all());
}

TEST_CASE("keep_at_least: tops up with the best dropped positions") {
  const std::vector<float> s = {0.1F, 0.9F, 0.5F, 0.5F, 0.2F, 0.5F};
  const auto sel = keep_at_least{threshold{0.6F}, 3}.select(s);
  CHECK(sel.indices == std::vector<std::uint32_t>{1, 2, 3});  // ties at 0.5: lower index first
  CHECK(sel.covered_mass == index_sum(s, sel.indices));
  CHECK(keep_at_least{threshold{0.6F}, 100}.select(s).keeps_all());  // clamped to n
  CHECK(keep_at_least{threshold{0.0F}, 2}.select(s).size() == 6);    // already enough
  CHECK_THROWS_WITH_AS((void)(keep_at_least{threshold{0.6F}, 3}.select(std::vector<float>{1.0F, qnan})),
                       doctest::Contains("'scores[1]' is nan"), error);
  std::mt19937 rng(6);
  const auto big = uniform(11008, rng, 7);
  CHECK(keep_at_least{threshold{10.0F}, 5000}.select(big).indices == top_of(ranking(big), 5000));
}

TEST_CASE("clamp_count: keeps between min_keep and max_keep") {
  const std::vector<float> s = {0.9F, 0.5F, 0.5F, 0.1F, 0.5F, 0.8F};
  CHECK(clamp_count{threshold{0.0F}, 1, 3}.select(s).indices == std::vector<std::uint32_t>{0, 1, 5});
  CHECK(clamp_count{threshold{0.0F}, 1, 4}.select(s).indices == std::vector<std::uint32_t>{0, 1, 2, 5});
  CHECK(clamp_count{threshold{0.95F}, 2, 4}.select(s).indices == std::vector<std::uint32_t>{0, 5});
  CHECK(clamp_count{threshold{0.0F}, 0, 0}.select(s).indices.empty());
  const auto c = clamp_count{threshold{0.0F}, 0, 2}.select(s);
  CHECK(c.covered_mass == index_sum(s, c.indices));
  // A dense fallback is not trimmed.
  const auto fb = clamp_count{cumulative_mass{.mass = 0.5}, 0, 1}.select(std::vector<float>{1.0F, -1.0F, 2.0F});
  CHECK(fb.dense_fallback);
  CHECK(fb.keeps_all());
  CHECK_THROWS_WITH_AS((void)(clamp_count{threshold{0.0F}, 3, 2}.select(s)), doctest::Contains("'min_keep' is 3"),
                       error);
  std::mt19937 rng(9);
  const auto big = uniform(11008, rng, 5);
  CHECK(clamp_count{threshold{-1.0F}, 0, 4000}.select(big).indices == top_of(ranking(big), 4000));
}

namespace {
// Selectors that do not look at the scores: the decorators must check what they rank.
struct keep_none {
  void select(std::span<const float> scores, selection& out) const { out.reset(scores.size()); }
};
struct keep_everything {
  void select(std::span<const float> scores, selection& out) const {
    out.reset(scores.size());
    out.keep_all(scores.size(), fallback_reason::none);
  }
};
}  // namespace

TEST_CASE("decorators reject NaN among the scores they rank") {
  const std::vector<float> s = {1.0F, 2.0F, qnan, 0.5F};
  CHECK_THROWS_WITH_AS((void)(keep_at_least{keep_none{}, 2}.select(s)), doctest::Contains("'scores[2]' is nan"), error);
  CHECK_THROWS_WITH_AS((void)(clamp_count{keep_everything{}, 0, 2}.select(s)), doctest::Contains("'scores[2]' is nan"),
                       error);
  CHECK(keep_recent{keep_none{}, 2}.select(s).indices == std::vector<std::uint32_t>{2, 3});  // no ranking: fine
  CHECK(keep_at_least{keep_none{}, 2}.select(std::vector<float>{1.0F, 3.0F, 2.0F}).indices ==
        std::vector<std::uint32_t>{1, 2});
}

TEST_CASE("decorators compose and stay regular selectors") {
  const auto sel = clamp_count{keep_recent{top_k::by_count(2), 2}, 0, 3};
  static_assert(selector<decltype(sel)>);
  const std::vector<float> s = {5.0F, 4.0F, 1.0F, 0.0F, 3.0F};
  CHECK(sel.select(s).indices == std::vector<std::uint32_t>{0, 1, 4});  // {0,1} + {3,4}, then the best 3
  const auto copy = sel;
  CHECK(copy == sel);
}
