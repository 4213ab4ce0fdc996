#pragma once
// Guarantees layered over any selector: keep the most recent positions, keep at least
// some, keep between two counts. The detail functions below are also what
// cumulative_mass's own recent_n / min_keep and tiered's fill use: one rule, one place.

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/selectors/detail/partition.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace actsparse {
namespace detail {

// Sets covered_mass after a selection changed: the index-order sum of the kept scores,
// or 0 when that is not finite (infinite scores are not a mass).
inline void update_covered(std::span<const float> s, selection& out) noexcept {
  const double c = sum_kept(s, out.indices);
  out.covered_mass = std::isfinite(c) ? c : 0.0;
}

// Adds the last min(recent_n, n) positions. Returns whether anything was added.
inline bool add_recent(std::size_t n, std::size_t recent_n, std::vector<std::uint32_t>& idx) {
  const std::size_t r = std::min(recent_n, n);
  if (r == 0) return false;
  const auto it = std::lower_bound(idx.begin(), idx.end(), static_cast<std::uint32_t>(n - r));
  if (static_cast<std::size_t>(idx.end() - it) == r) return false;  // all already kept
  idx.erase(it, idx.end());
  for (std::size_t i = n - r; i < n; ++i) idx.push_back(static_cast<std::uint32_t>(i));
  return true;
}

// Whether x is NaN, by its bits (no float compare, no branch).
inline bool is_nan_bits(float x) noexcept { return (std::bit_cast<std::uint32_t>(x) & 0x7FFFFFFFU) > 0x7F800000U; }

// Adds the m highest-scoring positions not yet kept (ties: lower index first). The
// scores it ranks must not be NaN. Branch-free loops: the keep tests are data dependent.
inline void add_top_unkept(std::string_view where, std::span<const float> s, std::size_t m, selection& out) {
  const std::size_t n = s.size();
  if (m == 0) return;
  auto& flags = out.scratch_flags;  // 1: already kept
  flags.assign(n, 0);
  for (const std::uint32_t i : out.indices) flags[i] = 1;
  out.scratch_scores.resize(2 * n);
  float* unkept = out.scratch_scores.data();
  std::size_t u = 0;
  bool has_nan = false;
  for (std::size_t i = 0; i < n; ++i) {
    const bool free = flags[i] == 0;
    unkept[u] = s[i];
    u += static_cast<std::size_t>(free);
    has_nan |= free & is_nan_bits(s[i]);
  }
  if (has_nan) {
    for (std::size_t i = 0; i < n; ++i) {
      if (flags[i] == 0 && is_nan_bits(s[i])) fail_score(where, s, i, "a score that can be ranked (not NaN)");
    }
  }
  if (u == 0) return;
  const cut c = top_count_cut(std::span<const float>(unkept, u), std::min(m, u),
                              std::span<float>(out.scratch_scores.data() + n, n));
  const std::uint32_t tk = order_key(c.value);
  auto& idx = out.indices;
  idx.resize(n);
  std::size_t seen = 0;
  std::size_t cnt = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t k = order_key(s[i]);
    const bool free = flags[i] == 0;
    const bool eq = free & (k == tk);
    const bool take = !free | (k > tk) | (eq & (seen < c.ties));
    seen += static_cast<std::size_t>(eq);
    idx[cnt] = static_cast<std::uint32_t>(i);
    cnt += static_cast<std::size_t>(take);
  }
  idx.resize(cnt);
}

// Keeps only the max_keep highest-scoring kept positions: drops the lowest scores first,
// and among equal scores the higher index first. The kept scores must not be NaN.
inline void keep_top_of_kept(std::string_view where, std::span<const float> s, std::size_t max_keep, selection& out) {
  auto& idx = out.indices;
  const std::size_t k = idx.size();
  if (k <= max_keep) return;
  if (max_keep == 0) return idx.clear();
  out.scratch_scores.resize(2 * k);
  float* kept = out.scratch_scores.data();
  bool has_nan = false;
  for (std::size_t j = 0; j < k; ++j) {
    kept[j] = s[idx[j]];
    has_nan |= is_nan_bits(kept[j]);
  }
  if (has_nan) {
    for (std::size_t j = 0; j < k; ++j) {
      if (is_nan_bits(kept[j])) fail_score(where, s, idx[j], "a score that can be ranked (not NaN)");
    }
  }
  const cut c = top_count_cut(std::span<const float>(kept, k), max_keep, std::span<float>(kept + k, k));
  const std::uint32_t tk = order_key(c.value);
  std::size_t cnt = 0;
  std::size_t seen = 0;
  for (std::size_t j = 0; j < k; ++j) {
    const std::uint32_t key = order_key(kept[j]);
    const bool eq = key == tk;
    const bool take = (key > tk) | (eq & (seen < c.ties));
    seen += static_cast<std::size_t>(eq);
    idx[cnt] = idx[j];
    cnt += static_cast<std::size_t>(take);
  }
  idx.resize(cnt);
}

// A stand-in selector, only to check below that the decorators model the concept.
struct any_selector {
  void select(std::span<const float>, selection&) const {}
};

}  // namespace detail

// What every decorator keeps from the inner selection: its dense_fallback and reason;
// covered_mass is recomputed (index-order sum of the kept scores, 0 if not finite) only
// when the decorator changed the set. A count larger than n is clamped to n.

// Also keeps the last recent_n positions (the newest tokens).
template <class S>
struct keep_recent {
  ACTSPARSE_REQUIRE_SELECTOR(S);
  S inner{};
  std::size_t recent_n = 0;

  void select(std::span<const float> scores, selection& out) const {
    inner.select(scores, out);
    if (detail::add_recent(scores.size(), recent_n, out.indices)) detail::update_covered(scores, out);
  }
  [[nodiscard]] selection select(std::span<const float> scores) const {
    selection out;
    select(scores, out);
    return out;
  }
  friend bool operator==(const keep_recent&, const keep_recent&) = default;
};
template <class S>
keep_recent(S, std::size_t) -> keep_recent<S>;

// Also keeps the highest-scoring positions the inner selector dropped (ties: lower index
// first) until at least min_keep are kept. The scores it ranks must not be NaN.
template <class S>
struct keep_at_least {
  ACTSPARSE_REQUIRE_SELECTOR(S);
  S inner{};
  std::size_t min_keep = 0;

  void select(std::span<const float> scores, selection& out) const {
    inner.select(scores, out);
    const std::size_t at_least = std::min(min_keep, scores.size());
    if (out.indices.size() >= at_least) return;
    detail::add_top_unkept("keep_at_least::select", scores, at_least - out.indices.size(), out);
    detail::update_covered(scores, out);
  }
  [[nodiscard]] selection select(std::span<const float> scores) const {
    selection out;
    select(scores, out);
    return out;
  }
  friend bool operator==(const keep_at_least&, const keep_at_least&) = default;
};
template <class S>
keep_at_least(S, std::size_t) -> keep_at_least<S>;

// Keeps between min_keep and max_keep positions (min_keep <= max_keep): adds like
// keep_at_least, and above max_keep drops the lowest-scoring kept positions, among equal
// scores the higher index first. A dense fallback of the inner selector is left whole:
// the scores were degenerate, and trimming would rank them anyway.
template <class S>
struct clamp_count {
  ACTSPARSE_REQUIRE_SELECTOR(S);
  S inner{};
  std::size_t min_keep = 0;
  std::size_t max_keep = 0;

  void select(std::span<const float> scores, selection& out) const {
    constexpr std::string_view where = "clamp_count::select";
    if (min_keep > max_keep) {
      detail::fail(where, "min_keep", min_keep, "at most max_keep = " + std::to_string(max_keep));
    }
    inner.select(scores, out);
    if (out.dense_fallback) return;
    const std::size_t size_before = out.indices.size();
    const std::size_t at_least = std::min(min_keep, scores.size());
    if (out.indices.size() < at_least) detail::add_top_unkept(where, scores, at_least - out.indices.size(), out);
    detail::keep_top_of_kept(where, scores, max_keep, out);
    if (out.indices.size() != size_before) detail::update_covered(scores, out);
  }
  [[nodiscard]] selection select(std::span<const float> scores) const {
    selection out;
    select(scores, out);
    return out;
  }
  friend bool operator==(const clamp_count&, const clamp_count&) = default;
};
template <class S>
clamp_count(S, std::size_t, std::size_t) -> clamp_count<S>;

ACTSPARSE_REQUIRE_SELECTOR(keep_recent<detail::any_selector>);
ACTSPARSE_REQUIRE_SELECTOR(keep_at_least<detail::any_selector>);
ACTSPARSE_REQUIRE_SELECTOR(clamp_count<detail::any_selector>);

}  // namespace actsparse
