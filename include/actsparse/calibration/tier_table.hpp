#pragma once
// WiSparse's tiers with base sets, from calibration: for each layer and tier M (keep ceil(d_ff / M)),
// a base set of the neurons kept in at least a given share of the calibration tokens at that
// tier, which the tier rule keeps before the token's own best others (calibrated_selector); and
// a conservative cap, the highest tier most calibration tokens can take within the layer's
// per-token quality budget. Masks are index tables (sorted u32 neuron ids), never bool arrays.

#include <actsparse/core/error.hpp>
#include <actsparse/core/index_set.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace actsparse {

// The neurons whose frequency (selection_statistics::frequency) is at least share, ascending.
// share in (0, 1]: at 1 only the neurons every token kept.
[[nodiscard]] inline index_set base_set(std::span<const double> frequency, double share) {
  constexpr std::string_view where = "base_set";
  detail::require(share > 0.0 && share <= 1.0, where, "share", share, "a share of the tokens in (0, 1]");
  std::vector<std::uint32_t> ids;
  for (std::size_t j = 0; j < frequency.size(); ++j) {
    const double f = frequency[j];
    if (!(f >= 0.0 && f <= 1.0)) {
      detail::fail(where, "frequency[" + std::to_string(j) + "]", f, "a share in [0, 1]");
    }
    if (f >= share) ids.push_back(static_cast<std::uint32_t>(j));
  }
  return index_set::from_sorted(std::move(ids));
}

// Per-token quality loss of one layer at every tier: kl[token * tiers + t] is the loss of the
// token when only this layer runs at tier t (t = 0 the densest). Checks the shape and values.
inline void check_token_losses(std::span<const double> kl, std::size_t tiers, std::string_view where) {
  detail::require(tiers >= 1, where, "tiers", tiers, "at least one tier");
  detail::require(!kl.empty() && kl.size() % tiers == 0, where, "kl.size()", kl.size(),
                  "a positive multiple of tiers = " + std::to_string(tiers) + " (tokens x tiers)");
  for (std::size_t i = 0; i < kl.size(); ++i) {
    if (!(kl[i] >= 0.0) || std::isinf(kl[i])) {
      detail::fail(where, "kl[" + std::to_string(i) + "]", kl[i], "a finite loss >= 0");
    }
  }
}

// The highest tier index t such that at least `share` of the tokens have a loss <= budget at t
// (and at every tier below it: a cap never skips a tier that fails). Tier 0 is always allowed.
[[nodiscard]] inline std::size_t tier_cap(std::span<const double> kl, std::size_t tiers, double budget,
                                          double share = 0.9) {
  constexpr std::string_view where = "tier_cap";
  check_token_losses(kl, tiers, where);
  detail::require(budget >= 0.0 && std::isfinite(budget), where, "budget", budget, "a finite loss >= 0");
  detail::require(share > 0.0 && share <= 1.0, where, "share", share, "a share of the tokens in (0, 1]");
  const std::size_t tokens = kl.size() / tiers;
  std::size_t cap = 0;
  for (std::size_t t = 1; t < tiers; ++t) {
    std::size_t ok = 0;
    for (std::size_t i = 0; i < tokens; ++i) ok += kl[i * tiers + t] <= budget ? 1 : 0;
    if (static_cast<double>(ok) < share * static_cast<double>(tokens)) break;
    cap = t;
  }
  return cap;
}

// Per token: the highest tier index <= cap whose loss is <= budget (0 when none is), the label a
// per-token tier predictor learns.
[[nodiscard]] inline std::vector<std::uint8_t> tier_labels(std::span<const double> kl, std::size_t tiers, double budget,
                                                           std::size_t cap) {
  constexpr std::string_view where = "tier_labels";
  check_token_losses(kl, tiers, where);
  detail::require(cap < tiers && tiers <= 256, where, "cap", cap, "a tier index below tiers (at most 256 tiers)");
  const std::size_t tokens = kl.size() / tiers;
  std::vector<std::uint8_t> labels(tokens, 0);
  for (std::size_t i = 0; i < tokens; ++i) {
    for (std::size_t t = cap; t > 0; --t) {
      if (kl[i * tiers + t] <= budget) {
        labels[i] = static_cast<std::uint8_t>(t);
        break;
      }
    }
  }
  return labels;
}

}  // namespace actsparse
