// The ranking selectors (top_k, cumulative_mass, threshold) against straightforward
// oracles: a stable sort by (score descending, index ascending) and plain index-order sums.

#include <actsparse/backends/cpu/dispatch.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>
#include <actsparse/selectors/threshold.hpp>
#include <actsparse/selectors/top_k.hpp>

#include "selector_test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

using namespace actsparse;
using namespace selector_test;

namespace {

const std::vector<std::size_t> sizes = {1, 2, 3, 7, 33, 100, 1000, 2047, 2048, 2049, 5000, 11008};

enum class dist { uniform, silu, ties, zeros, heavy_tail, constant, wide_range, signed_zeros, gaussian };
const std::vector<dist> non_negative = {dist::uniform,    dist::silu,     dist::ties,       dist::zeros,
                                        dist::heavy_tail, dist::constant, dist::wide_range, dist::signed_zeros};

std::vector<float> draw(dist d, std::size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(0.0F, 1.0F);
  std::normal_distribution<float> g(0.0F, 1.0F);
  std::uniform_int_distribution<int> small(0, 3);
  std::vector<float> v(n);
  for (auto& x : v) {
    switch (d) {
      case dist::uniform:
        x = u(rng);
        break;
      case dist::silu: {
        const float z = g(rng);
        x = std::fabs(z / (1.0F + std::exp(-z)));
        break;
      }
      case dist::ties:
        x = static_cast<float>(small(rng));
        break;
      case dist::zeros:
        x = u(rng) < 0.5F ? 0.0F : u(rng);
        break;
      case dist::heavy_tail:
        x = std::pow(u(rng), 8.0F) * 1000.0F;
        break;
      case dist::constant:
        x = 1.0F;
        break;
      case dist::wide_range:
        x = std::exp(60.0F * u(rng) - 30.0F);
        break;
      case dist::signed_zeros:
        x = small(rng) == 0 ? -0.0F : (small(rng) == 1 ? 0.0F : static_cast<float>(small(rng)));
        break;
      case dist::gaussian:
        x = g(rng);
        break;
    }
  }
  return v;
}

// Indices by (score descending, index ascending).
bool sorted_unique(const selection& sel) {
  return std::adjacent_find(sel.indices.begin(), sel.indices.end(),
                            [](std::uint32_t a, std::uint32_t b) { return a >= b; }) == sel.indices.end();
}

// The smallest top set whose mass sum reaches target, by binary search over its
// size (the sum never decreases as the set grows).
std::size_t mass_count(const std::vector<float>& s, const std::vector<std::uint32_t>& rank, double target) {
  if (!(target > 0.0)) return 0;
  std::size_t lo = 0;
  std::size_t hi = s.size();
  while (hi - lo > 1) {
    const std::size_t mid = lo + (hi - lo) / 2;
    (index_sum(s, top_of(rank, mid)) >= target ? hi : lo) = mid;
  }
  return hi;
}

}  // namespace

// ---------------------------------------------------------------------------- top_k

TEST_CASE("top_k: matches the stable-sort oracle on many sizes and distributions") {
  std::mt19937 rng(1234);
  selection out;  // reused across every call: the steady-state path
  std::vector<dist> all = non_negative;
  all.push_back(dist::gaussian);
  for (const dist d : all) {
    for (const std::size_t n : sizes) {
      const auto s = draw(d, n, rng);
      const auto rank = ranking(s);
      std::vector<std::size_t> ks = {
          0, 1, n / 4, n / 2, n - 1, n, std::uniform_int_distribution<std::size_t>(0, n)(rng)};
      for (const std::size_t k : ks) {
        CAPTURE(static_cast<int>(d));
        CAPTURE(n);
        CAPTURE(k);
        top_k::by_count(k).select(s, out);
        const auto want = top_of(rank, k);
        REQUIRE(out.indices == want);
        CHECK(sorted_unique(out));
        CHECK(out.universe == n);
        CHECK_FALSE(out.dense_fallback);
        CHECK(out.reason == fallback_reason::none);
        CHECK(out.covered_mass == index_sum(s, want));
        CHECK(out.total_mass == index_sum(s, top_of(rank, n)));
      }
    }
  }
}

TEST_CASE("top_k: keep_ratio keeps ceil(r * n)") {
  std::mt19937 rng(7);
  const auto s = draw(dist::silu, 11008, rng);
  const auto rank = ranking(s);
  for (const double r : {0.0, 0.1, 0.25, 0.5, 0.7, 0.999, 1.0}) {
    const auto sel = top_k::by_ratio(r).select(s);
    const auto k = static_cast<std::size_t>(std::ceil(r * 11008.0));
    CHECK(sel.indices == top_of(rank, k));
  }
  CHECK(top_k::by_ratio(0.25).select(std::vector<float>(10, 1.0F)).size() == 3);  // ceil(2.5)
  CHECK(top_k{.keep_ratio = 0.5}.count_for(7) == 4);
}

TEST_CASE("top_k: ties go to the lower index, -0 and +0 tie") {
  const std::vector<float> s = {1.0F, 2.0F, 2.0F, 1.0F, 2.0F, 0.0F, -0.0F, 0.0F};
  CHECK(top_k::by_count(2).select(s).indices == std::vector<std::uint32_t>{1, 2});
  CHECK(top_k::by_count(4).select(s).indices == std::vector<std::uint32_t>{0, 1, 2, 4});
  CHECK(top_k::by_count(7).select(s).indices == std::vector<std::uint32_t>{0, 1, 2, 3, 4, 5, 6});
  const std::vector<float> z = {-0.0F, 0.0F, -0.0F, 0.0F};
  CHECK(top_k::by_count(2).select(z).indices == std::vector<std::uint32_t>{0, 1});
  // Heavy ties at the boundary in a large input (the radix path).
  std::vector<float> big(5000, 3.0F);
  for (std::size_t i = 0; i < big.size(); i += 3) big[i] = 5.0F;
  const auto sel = top_k::by_count(2000).select(big);
  const auto want = top_of(ranking(big), 2000);
  CHECK(sel.indices == want);
}

TEST_CASE("top_k: rejects bad arguments with a message that names them") {
  const std::vector<float> s(10, 1.0F);
  CHECK_THROWS_WITH_AS((void)(top_k::by_count(20).select(s)), doctest::Contains("argument 'k' is 20"), error);
  CHECK_THROWS_WITH_AS((void)(top_k::by_count(20).select(s)), doctest::Contains("at most n = 10"), error);
  CHECK_THROWS_WITH_AS((void)(top_k::by_ratio(1.5).select(s)), doctest::Contains("'keep_ratio' is 1.5"), error);
  CHECK_THROWS_WITH_AS((void)(top_k::by_ratio(-0.1).select(s)), doctest::Contains("[0, 1]"), error);
  CHECK_THROWS_WITH_AS((void)(top_k::by_ratio(std::nan("")).select(s)), doctest::Contains("'keep_ratio' is nan"),
                       error);
  CHECK_THROWS_WITH_AS((void)(top_k{.k = 3, .keep_ratio = 0.5}.select(s)), doctest::Contains("not both"), error);
  CHECK_THROWS_WITH_AS((void)(top_k::by_count(0).select(std::vector<float>{})),
                       doctest::Contains("'scores.size()' is 0"), error);
  std::vector<float> bad(3000, 1.0F);
  bad[1717] = qnan;
  bad[2000] = inf;
  CHECK_THROWS_WITH_AS((void)(top_k::by_count(5).select(bad)), doctest::Contains("'scores[1717]' is nan"), error);
  bad[1717] = 0.5F;
  CHECK_THROWS_WITH_AS((void)(top_k::by_count(5).select(bad)), doctest::Contains("'scores[2000]' is inf"), error);
  CHECK_THROWS_WITH_AS((void)(top_k::by_count(3000).select(bad)), doctest::Contains("finite"),
                       error);  // even for k = n
  if constexpr (sizeof(std::size_t) > 4) {
    // Only the size is read before the check fails: the span is never dereferenced.
    const std::span<const float> huge(s.data(), std::size_t{1} << 32);
    CHECK_THROWS_WITH_AS((void)(top_k::by_count(1).select(huge)), doctest::Contains("at most 2^32 - 1"), error);
  }
}

TEST_CASE("top_k: no allocation once the selection has grown") {
  std::mt19937 rng(3);
  const auto a = draw(dist::silu, 11008, rng);
  const auto b = draw(dist::uniform, 11008, rng);
  selection out;
  top_k::by_ratio(1.0).select(a, out);  // indices grow to n
  top_k::by_ratio(0.5).select(a, out);  // scratch grows to n
  const auto* idx = out.indices.data();
  const auto* scratch = out.scratch_scores.data();
  top_k::by_ratio(0.25).select(b, out);
  top_k::by_ratio(0.75).select(a, out);
  CHECK(out.indices.data() == idx);
  CHECK(out.scratch_scores.data() == scratch);
}

// ------------------------------------------------------------------ cumulative_mass

TEST_CASE("cumulative_mass: the smallest top set reaching mass * total, as the full-sort oracle") {
  std::mt19937 rng(99);
  selection out;
  for (const dist d : non_negative) {
    for (const std::size_t n : sizes) {
      const auto s = draw(d, n, rng);
      const auto rank = ranking(s);
      const double total = index_sum(s, top_of(rank, n));
      if (total == 0.0) continue;  // the all_zero fallback, tested below
      for (const double mass : {1e-9, 0.05, 0.3, 0.5, 0.9, 0.99, 0.999999}) {
        CAPTURE(static_cast<int>(d));
        CAPTURE(n);
        CAPTURE(mass);
        cumulative_mass{.mass = mass}.select(s, out);
        const double target = mass * total;
        const std::size_t count = mass_count(s, rank, target);
        REQUIRE(out.indices == top_of(rank, count));
        CHECK(sorted_unique(out));
        CHECK_FALSE(out.dense_fallback);
        CHECK(out.total_mass == total);
        CHECK(out.covered_mass == index_sum(s, out.indices));
        CHECK(out.covered_mass >= target);
        if (count > 0) {  // dropping the lowest-ranked kept score falls below the target
          CHECK(index_sum(s, top_of(rank, count - 1)) < target);
        }
      }
    }
  }
}

TEST_CASE("cumulative_mass: finds the exact boundary from any estimate") {
  // The rare path: an estimate off by rounding is corrected in index order.
  std::mt19937 rng(5);
  for (const std::size_t n : {7UL, 100UL, 3000UL}) {
    const auto s = draw(dist::wide_range, n, rng);
    const auto rank = ranking(s);
    const double target = 0.6 * index_sum(s, top_of(rank, n));
    const std::size_t count = mass_count(s, rank, target);
    for (const std::size_t guess : {std::size_t{1}, count - 1 == 0 ? 1 : count - 1, count, std::min(n, count + 1), n}) {
      selection out;
      out.scratch_scores.resize(n);
      const detail::cut c = detail::top_count_cut(s, guess, out.scratch_scores);
      CHECK(detail::mass_prefix(s, target, c, out) == index_sum(s, top_of(rank, count)));
      CHECK(out.indices == top_of(rank, count));
    }
  }
}

TEST_CASE("cumulative_mass: mass the sample cannot see is still found") {
  // Three huge scores hold almost all the mass; the sample (256 of 5000) misses them, so
  // its bracket is wrong and the selector must redo the pass over every key.
  std::vector<float> s(5000, 1.0F);
  s[1001] = 1e6F;
  s[2999] = 2e6F;
  s[4321] = 1e6F;
  CHECK(cumulative_mass{.mass = 0.5}.select(s).indices == std::vector<std::uint32_t>{1001, 2999});
  CHECK(cumulative_mass{.mass = 0.4}.select(s).indices == std::vector<std::uint32_t>{2999});
  // And the opposite: the sample sees only zeros, the mass sits in a few unsampled scores.
  std::vector<float> z(5000, 0.0F);
  z[17] = 1.0F;
  z[4000] = 3.0F;
  CHECK(cumulative_mass{.mass = 0.5}.select(z).indices == std::vector<std::uint32_t>{4000});
  CHECK(cumulative_mass{.mass = 0.8}.select(z).indices == std::vector<std::uint32_t>{17, 4000});
  CHECK(top_k::by_count(2).select(z).indices == std::vector<std::uint32_t>{17, 4000});
}

TEST_CASE("cumulative_mass: a target that underflows to 0 keeps nothing but recent_n and min_keep") {
  const std::vector<float> s = {1e-45F, 0.0F, 1e-45F};  // total 2.8e-45: mass 1e-300 of it is 0
  CHECK(cumulative_mass{.mass = 1e-300}.select(s).indices.empty());
  CHECK(cumulative_mass{.mass = 1e-300, .recent_n = 1}.select(s).indices == std::vector<std::uint32_t>{2});
  CHECK(cumulative_mass{.mass = 1e-300, .min_keep = 1}.select(s).indices == std::vector<std::uint32_t>{0});
}

TEST_CASE("cumulative_mass: mass >= 1 keeps everything without a fallback") {
  const std::vector<float> s = {0.5F, 0.0F, 2.0F, 1.0F};
  for (const double mass : {1.0, 1.5, 1e300}) {
    const auto sel = cumulative_mass{.mass = mass}.select(s);
    CHECK(sel.keeps_all());
    CHECK_FALSE(sel.dense_fallback);
    CHECK(sel.reason == fallback_reason::none);
    CHECK(sel.covered_mass == 3.5);
    CHECK(sel.total_mass == 3.5);
  }
}

TEST_CASE("cumulative_mass: degenerate scores fall back to dense and say why") {
  const auto check = [](std::vector<float> s, fallback_reason why) {
    const auto sel = cumulative_mass{.mass = 0.5}.select(s);
    CHECK(sel.keeps_all());
    CHECK(sel.dense_fallback);
    CHECK(sel.reason == why);
    CHECK(std::isfinite(sel.covered_mass));
    CHECK(std::isfinite(sel.total_mass));
  };
  check(std::vector<float>(5000, 0.0F), fallback_reason::all_zero);
  check({0.0F, -0.0F, 0.0F}, fallback_reason::all_zero);
  check({1.0F, -0.5F, 2.0F}, fallback_reason::negative);
  check({1.0F, qnan, -2.0F}, fallback_reason::non_finite);  // non_finite is checked first
  check({1.0F, inf, 2.0F}, fallback_reason::non_finite);
  std::vector<float> big(11008, 1.0F);
  big[11007] = -1e-30F;
  check(big, fallback_reason::negative);
  big[11007] = -inf;
  check(big, fallback_reason::non_finite);
  // -0 is not negative: a mass over {0, -0, 3} is the 3.
  CHECK(cumulative_mass{.mass = 0.5}.select(std::vector<float>{0.0F, -0.0F, 3.0F}).indices ==
        std::vector<std::uint32_t>{2});
}

TEST_CASE("cumulative_mass: recent_n and min_keep are honoured") {
  std::mt19937 rng(11);
  selection out;
  for (const std::size_t n : {1UL, 7UL, 33UL, 2049UL, 11008UL}) {
    const auto s = draw(dist::silu, n, rng);
    const auto rank = ranking(s);
    const double total = index_sum(s, top_of(rank, n));
    for (const std::size_t recent : {0UL, 1UL, 5UL, 64UL, 20000UL}) {
      for (const std::size_t min_keep : {0UL, 3UL, 100UL, 5000UL, 20000UL}) {
        CAPTURE(n);
        CAPTURE(recent);
        CAPTURE(min_keep);
        cumulative_mass{.mass = 0.3, .recent_n = recent, .min_keep = min_keep}.select(s, out);
        // Oracle: the mass set, then the last positions, then the best others.
        std::vector<std::uint8_t> keep(n, 0);
        for (const auto i : top_of(rank, mass_count(s, rank, 0.3 * total))) keep[i] = 1;
        for (std::size_t i = n - std::min(recent, n); i < n; ++i) keep[i] = 1;
        std::size_t kept = static_cast<std::size_t>(std::count(keep.begin(), keep.end(), 1));
        for (const auto i : rank) {
          if (kept >= std::min(min_keep, n)) break;
          if (keep[i] == 0) keep[i] = 1, ++kept;
        }
        std::vector<std::uint32_t> want;
        for (std::uint32_t i = 0; i < n; ++i) {
          if (keep[i] != 0) want.push_back(i);
        }
        REQUIRE(out.indices == want);
        CHECK(out.covered_mass == index_sum(s, want));
        CHECK(out.size() >= std::min(min_keep, n));
      }
    }
  }
}

TEST_CASE("cumulative_mass: ties at the boundary go to the lower index") {
  const std::vector<float> s = {1.0F, 1.0F, 1.0F, 1.0F, 1.0F, 1.0F, 1.0F, 1.0F};
  CHECK(cumulative_mass{.mass = 0.5}.select(s).indices == std::vector<std::uint32_t>{0, 1, 2, 3});
  CHECK(cumulative_mass{.mass = 0.51}.select(s).indices == std::vector<std::uint32_t>{0, 1, 2, 3, 4});
  const std::vector<float> t = {2.0F, 1.0F, 2.0F, 1.0F, 1.0F, 2.0F};                                 // total 9
  CHECK(cumulative_mass{.mass = 0.5}.select(t).indices == std::vector<std::uint32_t>{0, 2, 5});      // 6 >= 4.5
  CHECK(cumulative_mass{.mass = 0.75}.select(t).indices == std::vector<std::uint32_t>{0, 1, 2, 5});  // 7 >= 6.75
  // The same property on a large input with a few distinct values (the radix path).
  std::vector<float> big(11008);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<float>((i * 7919) % 5);
  const auto rank = ranking(big);
  const double target = 0.4 * index_sum(big, top_of(rank, big.size()));
  CHECK(cumulative_mass{.mass = 0.4}.select(big).indices == top_of(rank, mass_count(big, rank, target)));
}

TEST_CASE("cumulative_mass: rejects a bad mass and empty scores") {
  const std::vector<float> s = {1.0F, 2.0F};
  CHECK_THROWS_WITH_AS((void)(cumulative_mass{.mass = 0.0}.select(s)), doctest::Contains("argument 'mass' is 0"),
                       error);
  CHECK_THROWS_WITH_AS((void)(cumulative_mass{.mass = -0.5}.select(s)), doctest::Contains("a finite mass > 0"), error);
  CHECK_THROWS_WITH_AS((void)(cumulative_mass{.mass = std::nan("")}.select(s)), doctest::Contains("'mass' is nan"),
                       error);
  CHECK_THROWS_WITH_AS((void)(cumulative_mass{.mass = HUGE_VAL}.select(s)), doctest::Contains("'mass' is inf"), error);
  CHECK_THROWS_WITH_AS((void)(cumulative_mass{.mass = 0.5}.select(std::vector<float>{})),
                       doctest::Contains("at least one score"), error);
}

TEST_CASE("cumulative_mass: the default keeps everything") {
  CHECK(cumulative_mass{}.select(std::vector<float>{3.0F, 1.0F}).keeps_all());
  CHECK(cumulative_mass{} == cumulative_mass{.mass = 1.0});
}

// ------------------------------------------------------------------------ threshold

TEST_CASE("threshold: keeps scores strictly above t") {
  std::mt19937 rng(21);
  for (const std::size_t n : sizes) {
    const auto s = draw(dist::gaussian, n, rng);
    for (const float t : {-inf, -1.0F, 0.0F, 0.3F, 2.0F, inf}) {
      const auto sel = threshold{t}.select(s);
      std::vector<std::uint32_t> want;
      for (std::uint32_t i = 0; i < n; ++i) {
        if (s[i] > t) want.push_back(i);
      }
      CHECK(sel.indices == want);
      CHECK(sel.covered_mass == index_sum(s, want));
      CHECK_FALSE(sel.dense_fallback);
    }
  }
  const std::vector<float> z = {0.0F, -0.0F, 1e-45F, 2.0F};
  CHECK(threshold{}.select(z).indices == std::vector<std::uint32_t>{2, 3});  // default t = 0: the non-zeros
}

TEST_CASE("threshold: infinities are fine, NaN is an error") {
  const std::vector<float> s = {inf, 1.0F, -inf, 0.5F};
  const auto sel = threshold{0.7F}.select(s);
  CHECK(sel.indices == std::vector<std::uint32_t>{0, 1});
  CHECK(sel.covered_mass == 0.0);  // not a mass
  CHECK(sel.total_mass == 0.0);
  CHECK(threshold{inf}.select(s).indices.empty());
  CHECK_THROWS_WITH_AS((void)(threshold{0.5F}.select(std::vector<float>{1.0F, 2.0F, qnan})),
                       doctest::Contains("'scores[2]' is nan"), error);
  CHECK_THROWS_WITH_AS((void)(threshold{qnan}.select(s)), doctest::Contains("'t' is nan"), error);
  CHECK_THROWS_WITH_AS((void)(threshold{0.5F}.select(std::vector<float>{})), doctest::Contains("'scores.size()' is 0"),
                       error);
}

TEST_CASE("selectors: the CPU backend's AVX-512 passes give the portable passes' indices and masses, bit for bit") {
  // The CPU backend's passes (linked into this program) are installed at start where the CPU has them.
  if (installed_selection_passes() == nullptr) {
    MESSAGE("this build or CPU has no AVX-512 selection passes: nothing to compare");
    return;
  }
  const auto same = [](const selection& a, const selection& b) {
    return a.indices == b.indices &&
           std::bit_cast<std::uint64_t>(a.covered_mass) == std::bit_cast<std::uint64_t>(b.covered_mass) &&
           std::bit_cast<std::uint64_t>(a.total_mass) == std::bit_cast<std::uint64_t>(b.total_mass) &&
           a.dense_fallback == b.dense_fallback;
  };
  // Both ways for one selector on one vector: SIMD on (the default), then off.
  const auto both = [&](const auto& selector, const std::vector<float>& s) {
    selection simd;
    selection portable;
    selector.select(s, simd);
    cpu::use_simd_selection(false);
    selector.select(s, portable);
    cpu::use_simd_selection(true);
    return same(simd, portable);
  };
  std::mt19937 rng(99);
  std::vector<dist> all = non_negative;
  all.push_back(dist::gaussian);
  std::size_t compared = 0;
  for (const dist d : all) {
    for (std::size_t n : {std::size_t{1}, std::size_t{15}, std::size_t{16}, std::size_t{17}, std::size_t{31},
                          std::size_t{100}, std::size_t{2049}, std::size_t{11008}}) {
      const std::vector<float> s = draw(d, n, rng);
      INFO("dist ", static_cast<int>(d), " n ", n);
      for (const double r : {0.05, 0.25, 0.5, 0.99}) {
        CHECK(both(top_k::by_ratio(r), s));
        ++compared;
      }
      for (const float t : {-0.5F, 0.0F, 0.3F, 1.0F}) {
        CHECK(both(threshold{t}, s));
        ++compared;
      }
      if (d != dist::gaussian) {  // a mass needs scores >= 0
        for (const double m : {0.1, 0.5, 0.9}) {
          CHECK(both(cumulative_mass{.mass = m}, s));
          ++compared;
        }
      }
    }
  }
  CHECK(compared > 0);
  // Keep-all and keep-none (only the scan of every score), and the scan itself on every
  // tail length, with a negative score and without.
  for (const std::size_t n : {std::size_t{1}, std::size_t{17}, std::size_t{11008}}) {
    const std::vector<float> s = draw(dist::silu, n, rng);
    CHECK(both(top_k::by_ratio(1.0), s));
    CHECK(both(top_k::by_count(0), s));
    CHECK(both(cumulative_mass{.mass = 1.0}, s));
  }
  for (std::size_t n = 1; n < 40; ++n) {
    for (const dist d : {dist::uniform, dist::gaussian, dist::signed_zeros}) {
      const std::vector<float> s = draw(d, n, rng);
      const detail::score_scan x = detail::scan_scores(s);
      cpu::use_simd_selection(false);
      const detail::score_scan y = detail::scan_scores(s);
      cpu::use_simd_selection(true);
      CHECK(std::bit_cast<std::uint64_t>(x.total) == std::bit_cast<std::uint64_t>(y.total));
      CHECK(x.negative == y.negative);
      CHECK(x.non_finite == y.non_finite);
    }
  }
  // The passes themselves, on every tail length and both key forms.
  for (std::size_t n = 0; n < 40; ++n) {
    const std::vector<float> s = draw(dist::gaussian, n, rng);
    for (const float cut : {-1.0F, 0.0F, 0.5F}) {
      const std::uint32_t tk = detail::order_key(cut);
      std::vector<std::uint32_t> a(n + 1);
      std::vector<std::uint32_t> b(n + 1);
      const auto x = installed_selection_passes()->emit_above[0][1](s.data(), s.size(), tk, a.data());
      cpu::use_simd_selection(false);
      const auto y = detail::emit_above<false, true>(s, tk, b.data());
      cpu::use_simd_selection(true);
      REQUIRE(x.count == y.count);
      CHECK(std::equal(a.begin(), a.begin() + static_cast<std::ptrdiff_t>(x.count), b.begin()));
      CHECK(std::bit_cast<std::uint64_t>(x.mass) == std::bit_cast<std::uint64_t>(y.mass));
    }
  }
}
