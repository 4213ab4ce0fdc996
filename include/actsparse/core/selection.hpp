#pragma once
// What every selector returns: the kept indices (sorted, unique), the score mass they
// cover, and whether the selector gave up and kept everything (a dense fallback).

#include <actsparse/core/index_set.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace actsparse {

// Why a selection keeps everything although the policy asked for less.
enum class fallback_reason : std::uint8_t {
  none,        // the selection is what the policy chose
  all_zero,    // every score is 0: nothing to rank by
  negative,    // a score is negative (a mass needs non-negative scores)
  non_finite,  // a score is NaN or infinite
  dense_layer  // the schedule makes this layer dense
};

[[nodiscard]] constexpr std::string_view name(fallback_reason r) noexcept {
  switch (r) {
    case fallback_reason::none:
      return "none";
    case fallback_reason::all_zero:
      return "all_zero";
    case fallback_reason::negative:
      return "negative";
    case fallback_reason::non_finite:
      return "non_finite";
    case fallback_reason::dense_layer:
      return "dense_layer";
  }
  return "?";
}

// Reused across calls: after the first call at a given size nothing is allocated.
struct selection {
  std::vector<std::uint32_t> indices;  // sorted, unique
  std::size_t universe = 0;            // how many candidates there were (n)
  double covered_mass = 0.0;           // sum of the kept scores (0 when scores are not a mass)
  double total_mass = 0.0;             // sum of all scores
  bool dense_fallback = false;         // kept everything because the input was degenerate
  fallback_reason reason = fallback_reason::none;

  // Scratch memory owned by the selection so that selectors never allocate in steady state.
  std::vector<float> scratch_scores;
  std::vector<std::uint8_t> scratch_flags;

  [[nodiscard]] std::size_t size() const noexcept { return indices.size(); }
  [[nodiscard]] bool keeps_all() const noexcept { return indices.size() == universe; }
  [[nodiscard]] double kept_fraction() const noexcept {
    return universe == 0 ? 0.0 : static_cast<double>(indices.size()) / static_cast<double>(universe);
  }
  [[nodiscard]] std::span<const std::uint32_t> view() const noexcept { return indices; }

  // Resets the result fields for n candidates (keeps the memory).
  void reset(std::size_t n) noexcept {
    indices.clear();
    universe = n;
    covered_mass = 0.0;
    total_mass = 0.0;
    dense_fallback = false;
    reason = fallback_reason::none;
  }

  // Keeps 0..n-1 and records why.
  void keep_all(std::size_t n, fallback_reason why) {
    indices.resize(n);
    for (std::size_t i = 0; i < n; ++i) indices[i] = static_cast<std::uint32_t>(i);
    universe = n;
    dense_fallback = why != fallback_reason::none;
    reason = why;
  }
};

}  // namespace actsparse
