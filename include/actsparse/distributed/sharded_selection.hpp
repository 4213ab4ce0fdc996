#pragma once
// Selection over a sharded universe (tensor parallelism: d_ff split across ranks). Each rank
// holds the scores of a contiguous slice of the candidates; a selector that needs a global
// view (top_k over all of d_ff, cumulative_mass over the total) runs in rounds: every round,
// each rank writes a fixed-size summary of its slice (shard_summary, 384 bytes whatever d_ff),
// the engine all-gathers the summaries with its own collective (MPI_Allgather, NCCL
// allGather, gloo, ...), and every rank reads all of them in rank order and moves on. At the
// end each rank holds the local part of the global selection.
//
// Exact: the union of the ranks' kept indices (shifted by each rank's begin) is the set the
// unsharded selector keeps on the whole universe, for any number of ranks: top_k's set is
// decided by exact integer counts (same ranking, same ties: lower global index first);
// cumulative_mass's masses are summed exactly in 128-bit fixed point (detail::fixed_mass), so
// no summation order enters and every shard count gives the same set. The unsharded
// cumulative_mass sums in double lanes instead; the two sets can differ only where the
// kept set's sum is within the double rounding (about 1e-15 relative) of mass · total.
//
// Rounds: one scan (checks, the range of the scores), then radix rounds of 16 buckets over the
// scores' order keys (counts and masses), then, once the boundary bucket holds at most 32
// scores over all ranks, one round that exchanges those candidates and decides. Typically
// 4-5 rounds for 11008 scores (docs/DISTRIBUTED.md has the measured counts).
//
// Local by nature (no collective): threshold (a per-score rule: each rank's selection is the
// local part of the global one), and per-shard tiers (tiered / calibrated_selector with a
// per-shard base set keep ceil(n_local / m) on each shard: a different, per-shard rule).

#include <actsparse/core/error.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/distributed/detail/fixed_mass.hpp>
#include <actsparse/distributed/shard_summary.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>
#include <actsparse/selectors/detail/partition.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace actsparse {

// Where one rank's slice sits: the candidates [begin, begin + size) of a universe of `total`,
// rank `rank` of `ranks`. The ranks' slices tile [0, total) in rank order (rank r's slice
// before rank r + 1's), so global index order is (rank, local index) order.
struct neuron_shard {
  std::size_t begin = 0;
  std::size_t size = 0;
  std::size_t total = 0;
  std::size_t rank = 0;
  std::size_t ranks = 1;

  // Rank r of `ranks` in balanced contiguous slices whose boundaries are multiples of `align`
  // (32 for q8_0 / q4_0 rows split by columns): slice r = [a(r), a(r + 1)) with
  // a(r) = align · floor(r · ceil(total / align) / ranks), clamped to total.
  [[nodiscard]] static neuron_shard even(std::size_t total, std::size_t rank, std::size_t ranks,
                                         std::size_t align = 1) {
    constexpr std::string_view where = "neuron_shard::even";
    detail::require(ranks >= 1, where, "ranks", ranks, "at least 1");
    detail::require(rank < ranks, where, "rank", rank, "< ranks = " + std::to_string(ranks));
    detail::require(align >= 1, where, "align", align, "at least 1");
    const std::size_t units = (total + align - 1) / align;
    const auto at = [&](std::size_t r) { return std::min(total, align * (r * units / ranks)); };
    return {at(rank), at(rank + 1) - at(rank), total, rank, ranks};
  }

  friend bool operator==(const neuron_shard&, const neuron_shard&) = default;
};

// The rounds of one sharded selection on one rank. Use:
//   sharded_selection st;
//   st.begin(top_k::by_count(k), local_scores, shard);
//   while (!st.done()) {
//     engine_all_gather(st.summary_bytes(), all);  // ranks × shard_summary::bytes, rank order
//     st.next(all);
//   }
//   st.result(kept);  // local indices of this rank's part of the global set
// or select_sharded(policy, local_scores, shard, all_gather, st, kept) with a callable
// all_gather(std::span<const std::byte> mine, std::span<std::byte> all). local_scores must stay
// valid and unchanged until done(). Every rank must run the same policy. No allocation once the
// buffers have grown (the candidates round sorts at most 32 · ranks pairs).
class sharded_selection {
 public:
  // top_k over the whole universe (k, or keep_ratio of `total`). Scores must be finite: a
  // non-finite score anywhere is an error on every rank, naming its global index.
  void begin(const top_k& policy, std::span<const float> local, const neuron_shard& shard) {
    start(local, shard, "sharded_selection(top_k)");
    k_ = policy.count_for(shard.total);
    mass_mode_ = false;
  }
  // cumulative_mass over the whole universe: the smallest top set whose exact sum reaches
  // mass · total, then the best others up to min_keep; the dense fallbacks of cumulative_mass
  // (non_finite, negative, all_zero: every rank keeps its whole slice). recent_n must be 0
  // (recent positions are a rule of the token axis, not of a d_ff shard).
  void begin(const cumulative_mass& policy, std::span<const float> local, const neuron_shard& shard) {
    constexpr std::string_view where = "sharded_selection(cumulative_mass)";
    detail::require(std::isfinite(policy.mass) && policy.mass > 0.0, where, "mass", policy.mass,
                    "a finite mass > 0 (a share of the total score; mass >= 1 keeps everything)");
    detail::require(policy.recent_n == 0, where, "recent_n", policy.recent_n,
                    "0 on a shard (recent positions are a token-axis rule)");
    start(local, shard, where);
    mass_ = policy.mass;
    min_keep_ = std::min(policy.min_keep, shard.total);
    mass_mode_ = true;
  }

  [[nodiscard]] bool done() const noexcept { return done_; }
  [[nodiscard]] std::size_t rounds() const noexcept { return round_; }  // exchanges so far
  [[nodiscard]] const shard_summary& summary() const noexcept { return mine_; }
  [[nodiscard]] std::span<const std::byte> summary_bytes() const noexcept {
    return std::as_bytes(std::span<const shard_summary, 1>(&mine_, 1));
  }
  // A buffer of ranks × shard_summary::bytes for the all-gather (owned, reused).
  [[nodiscard]] std::span<std::byte> gather_buffer() {
    gathered_.resize(ranks_ * shard_summary::bytes);
    return gathered_;
  }
  // The kept count over all ranks (once done).
  [[nodiscard]] std::size_t global_kept() const noexcept { return global_kept_; }

  // Reads every rank's summary of this round (rank order) and prepares the next round.
  void next(std::span<const std::byte> all) {
    detail::require(!done_, where_, "next()", "called after done()", "no call once done() is true");
    detail::require(all.size() == ranks_ * shard_summary::bytes, where_, "all.size()", all.size(),
                    std::to_string(ranks_ * shard_summary::bytes) + " (ranks x shard_summary::bytes, rank order)");
    all_.resize(ranks_);
    std::memcpy(static_cast<void*>(all_.data()), all.data(), all.size());  // (all may be gather_buffer())
    for (std::size_t r = 0; r < ranks_; ++r) check_summary(all_[r], r);
    ++round_;
    if (phase_ == phase::scan) {
      after_scan();
    } else if (phase_ == phase::radix) {
      after_radix();
    } else {
      after_candidates();
    }
    if (!done_) write_summary();
  }

  // This rank's part: local indices (sorted), universe = the local slice's size; covered_mass
  // and total_mass are the global masses (0 for scores that are not a mass), dense_fallback /
  // reason as the unsharded selector gives them.
  void result(selection& out) const {
    detail::require(done_, where_, "result()", "called before done()", "the rounds finished (done() true)");
    out.reset(local_.size());
    out.total_mass = total_mass_;
    out.covered_mass = covered_mass_;
    out.dense_fallback = reason_ != fallback_reason::none;
    out.reason = reason_;
    if (keep_all_) {
      out.indices.resize(local_.size());
      for (std::size_t i = 0; i < local_.size(); ++i) out.indices[i] = static_cast<std::uint32_t>(i);
      return;
    }
    if (keep_none_) return;
    std::size_t quota = quota_;
    for (std::size_t i = 0; i < local_.size(); ++i) {
      const std::int64_t key = detail::order_key(local_[i]);
      if (key > cut_ || (key == cut_ && quota > 0)) {
        if (key == cut_) --quota;
        out.indices.push_back(static_cast<std::uint32_t>(i));
      }
    }
  }

 private:
  enum class phase : std::uint8_t { scan, radix, candidates };

  void start(std::span<const float> local, const neuron_shard& shard, std::string_view where) {
    where_ = where;
    detail::require(shard.ranks >= 1, where_, "shard.ranks", shard.ranks, "at least 1");
    detail::require(shard.rank < shard.ranks, where_, "shard.rank", shard.rank,
                    "< shard.ranks = " + std::to_string(shard.ranks));
    detail::require(shard.total > 0, where_, "shard.total", shard.total, "at least one candidate in the universe");
    detail::require(shard.total <= std::numeric_limits<std::uint32_t>::max(), where_, "shard.total", shard.total,
                    "at most 2^32 - 1 candidates (indices are u32)");
    detail::require(shard.begin <= shard.total && shard.size <= shard.total - shard.begin, where_, "shard",
                    "[" + std::to_string(shard.begin) + ", " + std::to_string(shard.begin + shard.size) + ")",
                    "a slice of [0, " + std::to_string(shard.total) + ")");
    detail::require(local.size() == shard.size, where_, "local.size()", local.size(),
                    std::to_string(shard.size) + " (shard.size: one score per candidate of the slice)");
    local_ = local;
    shard_ = shard;
    ranks_ = shard.ranks;
    round_ = 0;
    phase_ = phase::scan;
    done_ = false;
    keep_all_ = keep_none_ = false;
    reason_ = fallback_reason::none;
    total_mass_ = covered_mass_ = 0.0;
    global_kept_ = 0;
    cut_ = -1;
    quota_ = 0;
    min_keep_ = 0;
    mass_mode_active_ = searching_count_ = masses_ = need_total_ = total_only_ = live_valid_ = false;
    write_summary();
  }

  void check_summary(const shard_summary& s, std::size_t r) const {
    if (s.magic != shard_summary::tag || s.round != round_ || s.rank != r) {
      detail::fail(where_, "all[" + std::to_string(r) + "]",
                   "a summary of rank " + std::to_string(s.rank) + ", round " + std::to_string(s.round),
                   "rank " + std::to_string(r) + "'s summary of round " + std::to_string(round_) +
                       " (every rank at the same round, summaries in rank order)");
    }
    const std::uint64_t expected_begin = r == 0 ? 0 : all_[r - 1].begin + all_[r - 1].size;
    if (s.total != shard_.total || s.begin != expected_begin || (r + 1 == ranks_ && s.begin + s.size != s.total)) {
      detail::fail(
          where_, "shard of rank " + std::to_string(r),
          "[" + std::to_string(s.begin) + ", " + std::to_string(s.begin + s.size) + ") of " + std::to_string(s.total),
          "slices that tile [0, " + std::to_string(shard_.total) + ") in rank order");
    }
  }

  // The keys of this rank's scores inside the current bracket (the fixed top bits).
  [[nodiscard]] bool in_bracket(std::uint32_t key) const noexcept {
    return fixed_ == 0 || (key >> (32 - fixed_)) == (prefix_ >> (32 - fixed_));
  }
  [[nodiscard]] unsigned digit_bits() const noexcept { return std::min(4U, 32U - fixed_); }

  void write_summary() {
    mine_ = shard_summary{};
    mine_.round = static_cast<std::uint32_t>(round_);
    mine_.rank = shard_.rank;
    mine_.begin = shard_.begin;
    mine_.size = shard_.size;
    mine_.total = shard_.total;
    if (phase_ == phase::scan) {
      std::uint32_t lo = 0xFFFFFFFFU;
      std::uint32_t hi = 0;
      for (std::size_t i = 0; i < local_.size(); ++i) {
        const float v = local_[i];
        const std::uint32_t bad = !std::isfinite(v) ? 1U : (v < 0.0F ? 2U : 0U);
        if (bad == 1U && (mine_.flags & 1U) == 0) {
          mine_.first_bad = static_cast<std::uint32_t>(i);
          mine_.bad_bits = std::bit_cast<std::uint32_t>(v);
        }
        mine_.flags |= bad;
        const std::uint32_t k = detail::order_key(v);
        lo = std::min(lo, k);
        hi = std::max(hi, k);
      }
      mine_.min_key = lo;
      mine_.max_key = hi;
    } else if (phase_ == phase::radix) {
      narrow_live();
      const unsigned d = digit_bits();
      std::uint32_t count[shard_summary::buckets] = {};
      detail::fixed_mass mass[shard_summary::buckets];
      for (const std::uint32_t i : live_) {
        const float v = local_[i];
        const std::uint32_t k = detail::order_key(v);
        const std::size_t b = (k >> (32 - fixed_ - d)) & ((1U << d) - 1U);
        ++count[b];
        if (masses_) scale_.add(mass[b], v);
      }
      for (std::size_t b = 0; b < shard_summary::buckets; ++b) {
        detail::put_count(mine_, b, count[b]);
        detail::put_mass(mine_, b, mass[b]);
      }
    } else {
      narrow_live();
      std::uint32_t n = 0;
      for (const std::uint32_t i : live_) {
        const std::uint32_t k = detail::order_key(local_[i]);
        detail::require(n < shard_summary::candidate_capacity, where_, "candidates", "more than 32 on this rank",
                        "consistent summaries (every rank at the same round of the same policy)");
        mine_.payload[n++] = (std::uint64_t{k} << 32) | i;
      }
      mine_.candidates = n;
    }
  }

  // live_: this rank's scores inside the current bracket (local indices, ascending). The
  // bracket only narrows within a search, so each round filters the last round's list.
  void narrow_live() {
    if (!live_valid_) {
      live_.clear();
      for (std::size_t i = 0; i < local_.size(); ++i) {
        if (in_bracket(detail::order_key(local_[i]))) live_.push_back(static_cast<std::uint32_t>(i));
      }
      live_valid_ = true;
      return;
    }
    std::size_t n = 0;
    for (const std::uint32_t i : live_) {
      if (in_bracket(detail::order_key(local_[i]))) live_[n++] = i;
    }
    live_.resize(n);
  }

  [[noreturn]] void fail_bad(const shard_summary& s) const {
    const float v = std::bit_cast<float>(s.bad_bits);
    detail::fail(where_, "scores[" + std::to_string(s.begin + s.first_bad) + "]", v,
                 "a finite score (NaN and infinity cannot be ranked)");
  }

  void finish_all(fallback_reason why) {
    keep_all_ = true;
    reason_ = why;
    global_kept_ = shard_.total;
    done_ = true;
  }

  void after_scan() {
    std::uint32_t flags = 0;
    std::uint32_t lo = 0xFFFFFFFFU;
    std::uint32_t hi = 0;
    for (const shard_summary& s : all_) {
      flags |= s.flags;
      if (s.size > 0) {
        lo = std::min(lo, s.min_key);
        hi = std::max(hi, s.max_key);
      }
    }
    const std::size_t n = shard_.total;
    if (!mass_mode_) {
      for (const shard_summary& s : all_) {
        if ((s.flags & 1U) != 0) fail_bad(s);  // the lowest rank's first: the lowest global index
      }
      masses_ = (flags & 2U) == 0;
      if (k_ == 0) {  // nothing kept; one more round for the total mass when there is one
        keep_none_ = true;
        if (!masses_) {
          done_ = true;
          return;
        }
        total_only_ = true;
      }
      return search_count(k_, lo, hi);
    }
    if ((flags & 1U) != 0) return finish_all(fallback_reason::non_finite);
    if ((flags & 2U) != 0) return finish_all(fallback_reason::negative);
    masses_ = true;
    if (hi == detail::order_key(0.0F)) return finish_all(fallback_reason::all_zero);
    if (mass_ >= 1.0) {  // everything (not a fallback): the count search for n gives the masses
      searching_count_ = true;
      return search_count(n, lo, hi);
    }
    scale_ = detail::mass_scale::of_max(hi);
    need_total_ = true;
    search_lo_ = lo;
    search_hi_ = hi;
    start_search(lo, hi);
  }

  // The top `count` (a count search; the first radix round also gives the total mass).
  void search_count(std::size_t count, std::uint32_t lo, std::uint32_t hi) {
    scale_ = detail::mass_scale::of_max(hi);
    need_total_ = masses_;
    need_ = count;
    search_lo_ = lo;
    search_hi_ = hi;
    start_search(lo, hi);
  }

  void start_search(std::uint32_t lo, std::uint32_t hi) {
    above_count_ = 0;
    above_q_ = {};
    live_valid_ = false;
    fixed_ = lo == hi ? 32U : static_cast<unsigned>(std::countl_zero(lo ^ hi));
    prefix_ = fixed_ == 0 ? 0U : (hi >> (32 - fixed_)) << (32 - fixed_);
    mass_mode_active_ = mass_mode_ && !searching_count_;
    phase_ = phase::radix;  // (all keys equal: one round of one bucket gives each rank's count)
  }

  void after_radix() {
    const unsigned d = digit_bits();
    std::uint64_t count[shard_summary::buckets] = {};
    detail::fixed_mass mass[shard_summary::buckets];
    for (const shard_summary& s : all_) {
      for (std::size_t b = 0; b < shard_summary::buckets; ++b) {
        count[b] += detail::get_count(s, b);
        mass[b].add(detail::get_mass(s, b));
      }
    }
    if (need_total_) {  // the first radix round covers every score: the total
      need_total_ = false;
      total_q_ = {};
      for (const detail::fixed_mass& m : mass) total_q_.add(m);
      total_mass_ = scale_.to_double(total_q_);
      if (mass_mode_active_) target_ = mass_ * total_q_.value();
      if (total_only_) {
        done_ = true;
        return;
      }
    }
    for (std::size_t b = (std::size_t{1} << d); b-- > 0;) {
      if (count[b] == 0) continue;
      detail::fixed_mass with = above_q_;
      with.add(mass[b]);
      const bool reaches = mass_mode_active_ ? with.value() >= target_ : above_count_ + count[b] >= need_;
      if (!reaches) {
        above_count_ += count[b];
        above_q_ = with;
        continue;
      }
      const std::uint32_t low_key = prefix_ | static_cast<std::uint32_t>(b << (32 - fixed_ - d));
      if (!mass_mode_active_ && above_count_ + count[b] == need_) {  // the whole bucket: keys >= low_key
        cut_ = static_cast<std::int64_t>(low_key) - 1;
        quota_ = 0;
        return finish_set(above_count_ + count[b], with);
      }
      if (fixed_ + d == 32) return decide_ties(low_key, b);
      fixed_ += d;
      prefix_ = low_key;
      if (count[b] <= shard_summary::candidate_capacity) phase_ = phase::candidates;
      return;
    }
    detail::fail(where_, "summaries", "a set of buckets that never reaches the target",
                 "consistent summaries (every rank at the same round of the same policy)");
  }

  // Every score of the bracket has the key `key`: take the first ones in global index order,
  // each rank's count from its own summary.
  void decide_ties(std::uint32_t key, std::size_t b) {
    const detail::fixed_mass one = scale_.of(detail::from_order_key(key));
    std::uint64_t in_bucket = 0;
    for (const shard_summary& s : all_) in_bucket += detail::get_count(s, b);
    std::uint64_t take = 0;
    detail::fixed_mass with = above_q_;
    if (mass_mode_active_) {  // the fewest m with above + m · one reaching the target
      std::uint64_t lo = 0;   // S(lo) < target <= S(hi)
      std::uint64_t hi = in_bucket;
      while (hi - lo > 1) {
        const std::uint64_t mid = lo + (hi - lo) / 2;
        detail::fixed_mass m = above_q_;
        m.add_times(one, mid);
        if (m.value() >= target_) {
          hi = mid;
        } else {
          lo = mid;
        }
      }
      take = hi;
    } else {
      take = need_ - above_count_;
    }
    with.add_times(one, take);
    std::uint64_t before = 0;
    for (std::size_t r = 0; r < shard_.rank; ++r) before += detail::get_count(all_[r], b);
    const std::uint64_t here = detail::get_count(all_[shard_.rank], b);
    quota_ = take > before ? static_cast<std::size_t>(std::min(here, take - before)) : 0;
    cut_ = key;
    finish_set(above_count_ + take, with);
  }

  void after_candidates() {
    pairs_.clear();
    for (const shard_summary& s : all_) {
      for (std::uint32_t j = 0; j < s.candidates; ++j) {
        const std::uint64_t p = s.payload[j];
        pairs_.push_back({static_cast<std::uint32_t>(p >> 32), static_cast<std::uint32_t>(s.begin + (p & 0xFFFFFFFFU)),
                          static_cast<std::uint32_t>(s.rank)});
      }
    }
    std::sort(pairs_.begin(), pairs_.end(), [](const candidate& a, const candidate& b) {
      return a.key != b.key ? a.key > b.key : a.index < b.index;
    });
    std::size_t take = 0;
    detail::fixed_mass with = above_q_;
    if (mass_mode_active_) {
      while (take < pairs_.size() && with.value() < target_)
        scale_.add(with, detail::from_order_key(pairs_[take++].key));
    } else {
      take = need_ - above_count_;
      for (std::size_t j = 0; j < take; ++j) scale_.add(with, detail::from_order_key(pairs_[j].key));
    }
    if (take == 0 || take > pairs_.size()) {
      detail::fail(where_, "summaries", "candidates that do not reach the target",
                   "consistent summaries (every rank at the same round of the same policy)");
    }
    const std::uint32_t key = pairs_[take - 1].key;
    quota_ = 0;
    for (std::size_t j = 0; j < take; ++j) {
      if (pairs_[j].key == key && pairs_[j].rank == shard_.rank) ++quota_;
    }
    cut_ = key;
    finish_set(above_count_ + take, with);
  }

  // The set is decided: the global count and covered mass. A mass set below min_keep becomes
  // the top min_keep (the mass set is a top set, so adding the best others extends it).
  void finish_set(std::uint64_t count, const detail::fixed_mass& covered) {
    if (mass_mode_active_ && count < min_keep_) {
      searching_count_ = true;
      mass_mode_active_ = false;
      need_ = min_keep_;
      start_search(search_lo_, search_hi_);
      return;
    }
    global_kept_ = static_cast<std::size_t>(count);
    covered_mass_ = masses_ ? scale_.to_double(covered) : 0.0;
    if (!masses_) total_mass_ = 0.0;
    done_ = true;
  }

  struct candidate {
    std::uint32_t key;
    std::uint32_t index;  // global
    std::uint32_t rank;
  };

  std::string_view where_ = "sharded_selection";
  std::span<const float> local_;
  neuron_shard shard_;
  std::size_t ranks_ = 1;
  std::size_t round_ = 0;
  phase phase_ = phase::scan;
  bool done_ = false;
  bool keep_all_ = false;
  bool keep_none_ = false;
  fallback_reason reason_ = fallback_reason::none;
  bool mass_mode_ = false;         // the policy is cumulative_mass
  bool mass_mode_active_ = false;  // the current search reaches a mass (not a count)
  bool searching_count_ = false;   // min_keep's count search after a mass search
  bool masses_ = false;            // scores are a mass (>= 0): masses computed and reported
  bool need_total_ = false;        // the next radix round covers every score: it gives the total
  bool total_only_ = false;        // that round is the last (top_k with k = 0)
  std::size_t k_ = 0;
  double mass_ = 1.0;
  std::size_t min_keep_ = 0;
  double target_ = 0.0;
  std::uint64_t need_ = 0;
  std::uint32_t search_lo_ = 0;
  std::uint32_t search_hi_ = 0;
  unsigned fixed_ = 0;
  std::uint32_t prefix_ = 0;
  std::uint64_t above_count_ = 0;
  detail::fixed_mass above_q_;
  detail::fixed_mass total_q_;
  detail::mass_scale scale_;
  double total_mass_ = 0.0;
  double covered_mass_ = 0.0;
  std::size_t global_kept_ = 0;
  std::int64_t cut_ = -1;
  std::size_t quota_ = 0;
  shard_summary mine_;
  std::vector<shard_summary> all_;
  std::vector<candidate> pairs_;
  std::vector<std::byte> gathered_;
  std::vector<std::uint32_t> live_;
  bool live_valid_ = false;
};

// The whole loop with an engine's all-gather: all_gather(mine, all) must fill `all`
// (ranks × shard_summary::bytes) with every rank's `mine` in rank order.
template <class Policy, class AllGather>
requires std::is_invocable_v<AllGather&, std::span<const std::byte>, std::span<std::byte>>
void select_sharded(const Policy& policy, std::span<const float> local, const neuron_shard& shard,
                    AllGather&& all_gather, sharded_selection& state, selection& out) {
  state.begin(policy, local, shard);
  while (!state.done()) {
    const std::span<std::byte> all = state.gather_buffer();
    all_gather(state.summary_bytes(), all);
    state.next(all);
  }
  state.result(out);
}

}  // namespace actsparse
