#pragma once
// A per-token tier: keep 1/m of the candidates, made of a fixed base set (columns that
// calibration found important for most tokens) plus the token's own best other columns.

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/index_set.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/selectors/decorators.hpp>
#include <actsparse/selectors/detail/partition.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace actsparse {

namespace detail {

// The tier rule on a borrowed base: every index of `base` (sorted, unique), plus the
// highest-scoring other indices up to `want` in all (ties: lower index first). Shared by
// tiered (which owns its base) and calibrated_selector (whose base a schedule owns).
inline void select_tier(std::string_view where, std::span<const float> scores, std::size_t want,
                        std::span<const std::uint32_t> base, selection& out) {
  const std::size_t n = scores.size();
  require_universe(where, n);
  if (const auto bad = std::lower_bound(base.begin(), base.end(), n); bad != base.end()) {
    fail(where, "base[" + std::to_string(bad - base.begin()) + "]", *bad, "an index < n = " + std::to_string(n));
  }
  const score_scan scan = scan_scores(scores);
  if (scan.non_finite) {
    fail_score(where, scores, first_non_finite(scores), "a finite score (NaN and infinity cannot be ranked)");
  }
  out.reset(n);
  out.total_mass = scan.total;
  out.indices.assign(base.begin(), base.end());
  if (out.indices.size() < want) add_top_unkept(where, scores, want - out.indices.size(), out);
  out.covered_mass = out.indices.size() == n ? scan.total : sum_kept(scores, out.indices);
}

}  // namespace detail

// Keeps ceil(n / m) indices: every index of `base`, plus the highest-scoring non-base
// indices (ties: lower index first) to fill up to ceil(n / m). If base already holds
// ceil(n / m) or more indices, exactly the base is kept (the base is never cut: it is
// what the calibrated tier promises). m >= 1 (m = 1 keeps everything); every base index
// must be < n; scores must be finite (an error names the first bad one).
// Average O(n); no allocation once `out` has grown to n.
struct tiered {
  std::size_t m = 1;
  index_set base{};

  // How many indices are kept out of n.
  [[nodiscard]] std::size_t keep_count(std::size_t n) const {
    detail::require(m >= 1, "tiered::select", "m", m, "m >= 1 (keep 1/m of the candidates)");
    return n / m + (n % m != 0 ? 1 : 0);
  }

  void select(std::span<const float> scores, selection& out) const {
    detail::select_tier("tiered::select", scores, keep_count(scores.size()), base.indices(), out);
  }

  [[nodiscard]] selection select(std::span<const float> scores) const {
    selection out;
    select(scores, out);
    return out;
  }

  friend bool operator==(const tiered&, const tiered&) = default;
};

ACTSPARSE_REQUIRE_SELECTOR(tiered);

}  // namespace actsparse
