#pragma once
// The fixed-size summary one rank contributes to one round of a sharded selection
// (sharded_selection.hpp), and where each round's counts and masses sit in its payload.

#include <actsparse/distributed/detail/fixed_mass.hpp>

#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace actsparse {

// One rank's contribution to one round: trivially copyable, the same size every round, so an
// engine all-gathers sizeof(shard_summary) bytes per rank (shard_summary::bytes).
struct shard_summary {
  static constexpr std::size_t buckets = 16;             // 4 bits of the order key per round
  static constexpr std::size_t candidate_capacity = 32;  // the decisive round's scores per rank
  static constexpr std::uint32_t tag = 0x41535348;       // "ASSH": a summary of this protocol

  std::uint32_t magic = tag;
  std::uint32_t round = 0;  // the round it belongs to (every rank must be at the same one)
  std::uint64_t rank = 0;
  std::uint64_t begin = 0;
  std::uint64_t size = 0;
  std::uint64_t total = 0;
  // Round 0: bit 0 a non-finite score, bit 1 a negative score; the first such local index and
  // its bits; the smallest and largest order keys.
  std::uint32_t flags = 0;
  std::uint32_t first_bad = 0;
  std::uint32_t bad_bits = 0;
  std::uint32_t min_key = 0;
  std::uint32_t max_key = 0;
  std::uint32_t candidates = 0;  // the candidates round: how many of payload's pairs are used
  // Radix rounds: 16 counts (u32), then 16 masses (u64 lo, hi). Candidates round: pairs of
  // (order key, local index), in local index order.
  std::uint64_t payload[40] = {};

  static constexpr std::size_t bytes = 384;
};
static_assert(std::is_trivially_copyable_v<shard_summary>);
static_assert(sizeof(shard_summary) == shard_summary::bytes);

namespace detail {

inline void put_mass(shard_summary& s, std::size_t b, const fixed_mass& m) noexcept {
  s.payload[8 + 2 * b] = m.lo;
  s.payload[9 + 2 * b] = m.hi;
}
[[nodiscard]] inline fixed_mass get_mass(const shard_summary& s, std::size_t b) noexcept {
  return {s.payload[8 + 2 * b], s.payload[9 + 2 * b]};
}
[[nodiscard]] inline std::uint32_t get_count(const shard_summary& s, std::size_t b) noexcept {
  return static_cast<std::uint32_t>(s.payload[b / 2] >> (32 * (b % 2)));
}
inline void put_count(shard_summary& s, std::size_t b, std::uint32_t c) noexcept {
  const unsigned sh = 32 * static_cast<unsigned>(b % 2);
  s.payload[b / 2] = (s.payload[b / 2] & ~(std::uint64_t{0xFFFFFFFFU} << sh)) | (std::uint64_t{c} << sh);
}

}  // namespace detail

}  // namespace actsparse
