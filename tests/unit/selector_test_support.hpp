#pragma once
// Oracles shared by the selector tests: the full-sort ranking and the library's mass sum,
// written out independently of the headers under test.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

namespace selector_test {

inline constexpr float inf = std::numeric_limits<float>::infinity();
inline constexpr float qnan = std::numeric_limits<float>::quiet_NaN();

// Every index by (score descending, index ascending): a stable sort.
inline std::vector<std::uint32_t> ranking(const std::vector<float>& s) {
  std::vector<std::uint32_t> r(s.size());
  std::iota(r.begin(), r.end(), 0U);
  std::stable_sort(r.begin(), r.end(), [&](std::uint32_t a, std::uint32_t b) { return s[a] > s[b]; });
  return r;
}

// The first k of a ranking, sorted by index.
inline std::vector<std::uint32_t> top_of(const std::vector<std::uint32_t>& rank, std::size_t k) {
  std::vector<std::uint32_t> t(rank.begin(), rank.begin() + static_cast<std::ptrdiff_t>(k));
  std::sort(t.begin(), t.end());
  return t;
}

// The documented mass sum (docs/POLICIES.md): eight double lanes by index mod 8, each in
// ascending index order, combined ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)).
inline double index_sum(const std::vector<float>& s, const std::vector<std::uint32_t>& sorted_idx) {
  double lane[8] = {};
  for (const auto i : sorted_idx) lane[i % 8] += static_cast<double>(s[i]);
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

}  // namespace selector_test
