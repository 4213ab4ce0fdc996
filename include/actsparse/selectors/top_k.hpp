#pragma once
// Keeps the k highest scores: a fixed budget per call, whatever the scores look like.

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/selectors/detail/partition.hpp>

#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <string>

namespace actsparse {

// Keeps the k highest scores; among equal scores the lower index wins. Set either k (a
// count) or keep_ratio (a fraction r of n, k = ceil(r * n) computed in double), not both.
// k = 0 keeps nothing; k = n keeps everything. Scores must be finite (NaN and infinity
// cannot be ranked: an error names the first one). Average O(n), no allocation once
// `out` has grown to n.
struct top_k {
  std::size_t k = 0;
  std::optional<double> keep_ratio{};

  [[nodiscard]] static top_k by_count(std::size_t k) noexcept { return top_k{k, std::nullopt}; }
  [[nodiscard]] static top_k by_ratio(double r) noexcept { return top_k{0, r}; }

  // The count kept out of n candidates.
  [[nodiscard]] std::size_t count_for(std::size_t n) const {
    constexpr std::string_view where = "top_k::select";
    if (!keep_ratio) {
      if (k > n) detail::fail(where, "k", k, "at most n = " + std::to_string(n) + " (the number of scores)");
      return k;
    }
    detail::require(k == 0, where, "k", k, "0 when keep_ratio is set (set either k or keep_ratio, not both)");
    const double r = *keep_ratio;
    detail::require(r >= 0.0 && r <= 1.0, where, "keep_ratio", r, "a fraction in [0, 1]");
    const double c = std::ceil(r * static_cast<double>(n));
    return c >= static_cast<double>(n) ? n : static_cast<std::size_t>(c);
  }

  void select(std::span<const float> scores, selection& out) const {
    constexpr std::string_view where = "top_k::select";
    const std::size_t n = scores.size();
    detail::require_universe(where, n);
    const std::size_t kk = count_for(n);
    out.reset(n);
    if (kk == 0 || kk == n) {  // nothing or everything: no ranking, only the checks
      const detail::score_scan scan = detail::scan_scores(scores);
      if (scan.non_finite) fail_non_finite(scores);
      out.total_mass = scan.total;
      if (kk == n) {
        out.keep_all(n, fallback_reason::none);
        out.covered_mass = scan.total;
      }
      return;
    }
    out.scratch_scores.resize(n);
    const std::span<float> work(out.scratch_scores);
    const detail::bracket b = detail::plan_count(scores, kk);
    const detail::pass_result scan = detail::scan_pass<false>(scores, b, work.data());
    if (scan.non_finite) fail_non_finite(scores);
    out.total_mass = scan.total;
    const detail::cut c = detail::count_cut(scores, kk, b, scan, work);
    out.covered_mass = detail::emit_cut(scores, c, out.indices, c.count());
  }

  [[nodiscard]] selection select(std::span<const float> scores) const {
    selection out;
    select(scores, out);
    return out;
  }

  friend bool operator==(const top_k&, const top_k&) = default;

 private:
  [[noreturn]] static void fail_non_finite(std::span<const float> scores) {
    detail::fail_score("top_k::select", scores, detail::first_non_finite(scores),
                       "a finite score (NaN and infinity cannot be ranked)");
  }
};

// A per-layer count (per_layer_table<std::size_t>) configures it.
[[nodiscard]] inline top_k configure(const top_k& base, std::size_t k) noexcept {
  top_k s = base;
  s.k = k;
  return s;
}

ACTSPARSE_REQUIRE_SELECTOR(top_k);

}  // namespace actsparse
