#pragma once
// Token budget chosen in fixed blocks: the kept tokens form a few contiguous ranges, so
// the gathered rows are a few large copies instead of thousands of scattered ones.

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/selectors/detail/partition.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

namespace actsparse {

// Tokens are grouped into blocks [i*bs, (i+1)*bs) (the last one may be partial).
//   Block score = the mean of its token scores (in double, stored as float): a mean, not
//   a sum, so a partial last block is not penalised for being short.
//   Blocks are ranked by block score, ties lower block index first. Blocks are taken in
//   that order until their cumulative score (double, rank order) reaches
//   mass * (sum of all block scores); mass >= 1 takes every block, mass = 0 none.
//   Then the kept token count is clamped, whole blocks at a time, in rank order: blocks
//   are added while kept < min_full_ratio * n, then the lowest-ranked kept block is
//   removed while kept > max_full_ratio * n and more than one block is kept (so the
//   count ends in [ceil(min*n), floor(max*n)] unless one block alone exceeds the cap).
//   Output: the sorted token indices of the kept blocks.
//   Scores are a mass: like cumulative_mass, any NaN/inf (non_finite), negative
//   (negative) or all-zero (all_zero) scores keep every token with dense_fallback set.
//   Validation: block_size >= 1; mass finite and >= 0; 0 <= min <= max <= 1.
// O(n + B log B) for B = ceil(n / block_size) blocks; no allocation once `out` has grown.
struct block_budget {
  std::size_t block_size = 128;
  double mass = 1.0;
  double min_full_ratio = 0.10;
  double max_full_ratio = 0.50;

  void select(std::span<const float> scores, selection& out) const {
    constexpr std::string_view where = "block_budget::select";
    detail::require(block_size >= 1, where, "block_size", block_size, "a block size >= 1");
    detail::require(std::isfinite(mass) && mass >= 0.0, where, "mass", mass, "a finite mass >= 0");
    detail::require(min_full_ratio >= 0.0 && min_full_ratio <= 1.0, where, "min_full_ratio", min_full_ratio,
                    "a fraction in [0, 1]");
    detail::require(max_full_ratio >= min_full_ratio && max_full_ratio <= 1.0, where, "max_full_ratio", max_full_ratio,
                    "a fraction in [min_full_ratio, 1]");
    const std::size_t n = scores.size();
    detail::require_universe(where, n);
    const detail::score_scan scan = detail::scan_scores(scores);
    out.reset(n);
    if (scan.non_finite) return out.keep_all(n, fallback_reason::non_finite);
    if (scan.negative) return out.keep_all(n, fallback_reason::negative);
    if (scan.total == 0.0) return out.keep_all(n, fallback_reason::all_zero);
    out.total_mass = scan.total;

    const std::size_t blocks = n / block_size + static_cast<std::size_t>(n % block_size != 0);
    const auto block_len = [&](std::size_t b) { return std::min(block_size, n - b * block_size); };
    auto& score = out.scratch_scores;  // block scores
    auto& rank = out.indices;          // block ids, best first (reused for the tokens below)
    score.resize(blocks);
    rank.resize(blocks);
    double block_total = 0.0;
    for (std::size_t b = 0; b < blocks; ++b) {
      double sum = 0.0;
      for (std::size_t i = b * block_size, e = i + block_len(b); i < e; ++i) sum += static_cast<double>(scores[i]);
      score[b] = static_cast<float>(sum / static_cast<double>(block_len(b)));
      block_total += static_cast<double>(score[b]);
      rank[b] = static_cast<std::uint32_t>(b);
    }
    std::sort(rank.begin(), rank.end(),
              [&](std::uint32_t a, std::uint32_t b) { return score[a] != score[b] ? score[a] > score[b] : a < b; });

    std::size_t taken = 0;  // the first `taken` ranked blocks are kept
    std::size_t tokens = 0;
    if (mass >= 1.0) {
      taken = blocks;
      tokens = n;
    } else {
      const double target = mass * block_total;
      for (double cum = 0.0; taken < blocks && cum < target; ++taken) {
        cum += static_cast<double>(score[rank[taken]]);
        tokens += block_len(rank[taken]);
      }
    }
    const double nd = static_cast<double>(n);
    while (taken < blocks && static_cast<double>(tokens) < min_full_ratio * nd) tokens += block_len(rank[taken++]);
    while (taken > 1 && static_cast<double>(tokens) > max_full_ratio * nd) tokens -= block_len(rank[--taken]);

    auto& keep = out.scratch_flags;
    keep.assign(blocks, 0);
    for (std::size_t j = 0; j < taken; ++j) keep[rank[j]] = 1;
    rank.clear();
    for (std::size_t b = 0; b < blocks; ++b) {
      if (keep[b] == 0) continue;
      for (std::size_t i = b * block_size, e = i + block_len(b); i < e; ++i)
        rank.push_back(static_cast<std::uint32_t>(i));
    }
    out.covered_mass = taken == blocks ? scan.total : detail::sum_kept(scores, out.indices);
  }

  [[nodiscard]] selection select(std::span<const float> scores) const {
    selection out;
    select(scores, out);
    return out;
  }

  friend bool operator==(const block_budget&, const block_budget&) = default;
};

ACTSPARSE_REQUIRE_SELECTOR(block_budget);

}  // namespace actsparse
