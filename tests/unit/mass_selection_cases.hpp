#pragma once
// The cumulative_mass cases shared by the CUDA and Metal emulation tests: score rows, and one
// list of (scores, mass, min_keep) checks. Each test passes `got(scores, mass, min_keep)`, the
// index list its emulated kernel keeps; run_mass_cases compares it with the cumulative_mass
// selector's (recent_n 0, mass as a float, as the kernels take it).

#include <actsparse/core/selection.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

namespace actsparse_test {

struct mass_scores {
  std::vector<float> ties, smooth, wide, flat, zeros;
};

// Multiples of 1/64 with many ties (exact sums in the selector's double, CUDA's double and
// Metal's float pairs), continuous scores, sums wider than a float's 24 bits (multiples of
// 2^-20 up to 2^4), ties straddling the boundary (40 scores of 1 and 60 of 0.5: mass 0.5 of
// 70 needs 35 ones), and zeros / -0 that rank last; odd sizes.
inline mass_scores make_mass_scores() {
  std::mt19937 rng(71);
  mass_scores m;
  std::uniform_int_distribution<int> level(0, 64);
  m.ties.resize(301);
  for (auto& s : m.ties) s = static_cast<float>(level(rng)) / 64.0F;
  std::exponential_distribution<float> expo(1.0F);
  m.smooth.resize(401);
  for (auto& s : m.smooth) s = expo(rng);
  std::uniform_int_distribution<int> fine(0, 1 << 24);
  m.wide.resize(333);
  for (auto& s : m.wide) s = std::ldexp(static_cast<float>(fine(rng)), -20);
  m.flat.assign(100, 0.5F);
  for (std::size_t i = 0; i < 100; i += 5) m.flat[i] = m.flat[i + 1] = 1.0F;
  m.zeros.assign(71, 0.0F);
  m.zeros[3] = -0.0F;
  m.zeros[10] = 3.0F;
  m.zeros[50] = 1.0F;
  return m;
}

// The index list a kernel writes for n scores: launch(idx, &count) runs it on a buffer of
// n + 1 sentinels; CHECKs that count <= n and that nothing was written past count.
template <class Launch>
std::vector<unsigned int> kept_list(std::size_t n, Launch&& launch) {
  std::vector<unsigned int> idx(n + 1, 0xFFFFFFFFU);
  unsigned int count = 12345;
  launch(idx.data(), &count);
  REQUIRE(count <= n);
  CHECK(idx[count] == 0xFFFFFFFFU);
  idx.resize(count);
  return idx;
}

// CHECKs that the kept list equals the cumulative_mass selector's.
template <class Index>
void check_same_as_selector(const std::vector<Index>& got, const std::vector<float>& scores, float mass,
                            unsigned min_keep) {
  CAPTURE(mass);
  CAPTURE(min_keep);
  CAPTURE(scores.size());
  actsparse::selection expected;
  actsparse::cumulative_mass{.mass = static_cast<double>(mass), .recent_n = 0, .min_keep = min_keep}.select(scores,
                                                                                                            expected);
  CHECK(got.size() == expected.indices.size());
  CHECK(std::equal(got.begin(), got.end(), expected.indices.begin(), expected.indices.end()));
}

// Every case of one kernel (one block / threadgroup size): masses from 1e-30 to 1.5, min_keep
// from 1 to above n, boundary ties, zeros, a single score, the selector's dense fallbacks
// (all zero, a negative, NaN or inf score), and n = 0 (nothing kept).
template <class Got>
void run_mass_cases(Got&& got) {
  const mass_scores m = make_mass_scores();
  const auto check = [&](const std::vector<float>& scores, float mass, unsigned min_keep) {
    check_same_as_selector(got(scores, mass, min_keep), scores, mass, min_keep);
  };
  for (const float mass : {1e-30F, 0.25F, 0.5F, 0.9F, 0.999F, 1.0F, 1.5F}) check(m.ties, mass, 0);
  for (const float mass : {0.25F, 0.75F, 0.9F, 0.999F}) check(m.smooth, mass, 0);
  for (const float mass : {0.3F, 0.9F}) check(m.wide, mass, 0);
  for (const unsigned min_keep : {1U, 200U, 301U, 1000U}) check(m.ties, 0.5F, min_keep);
  for (const unsigned min_keep : {5U, 299U}) check(m.smooth, 0.25F, min_keep);
  check(m.flat, 0.5F, 0);
  check(m.flat, 0.7F, 0);
  check(m.flat, 0.7F, 77);
  check(std::vector<float>(33, 2.0F), 0.3F, 0);
  check(m.zeros, 0.8F, 0);
  check(m.zeros, 0.8F, 4);
  check({0.25F}, 0.5F, 0);
  check(std::vector<float>(41, 0.0F), 0.5F, 0);
  for (const float bad : {-1.0F, std::nanf(""), -std::nanf(""), INFINITY}) {
    CAPTURE(bad);
    std::vector<float> s = m.ties;
    s[123] = bad;
    check(s, 0.5F, 0);
  }
  CHECK(got(std::vector<float>{}, 0.5F, 3).empty());  // n = 0
}

// The few cases run on a second, non-power-of-two block size (emulated passes are slow).
template <class Got>
void run_mass_cases_few(Got&& got) {
  const mass_scores m = make_mass_scores();
  const auto check = [&](const std::vector<float>& scores, float mass, unsigned min_keep) {
    check_same_as_selector(got(scores, mass, min_keep), scores, mass, min_keep);
  };
  check(m.ties, 0.5F, 0);
  check(m.smooth, 0.9F, 0);
  check(m.flat, 0.7F, 77);
  check(m.zeros, 0.8F, 4);
}

}  // namespace actsparse_test
