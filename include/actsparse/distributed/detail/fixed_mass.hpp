#pragma once
// Exact sums of non-negative float masses for the sharded selection (sharded_selection.hpp):
// 128-bit fixed point, so a sum's bits do not depend on the order of the additions, and the
// ranks' partial sums add to the whole's bits for any shard count.

#include <actsparse/selectors/detail/partition.hpp>

#include <bit>
#include <cmath>
#include <cstdint>

namespace actsparse::detail {

// An unsigned 128-bit sum of fixed-point masses: exact, so its value does not depend on the
// order of the additions (the ranks' partial sums add to the whole's bits).
struct fixed_mass {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;

  void add(const fixed_mass& o) noexcept {
    const std::uint64_t l = lo + o.lo;
    hi += o.hi + (l < lo ? 1U : 0U);
    lo = l;
  }
  // m · 2^shift for shift in [0, 72), m < 2^24.
  void add_shifted(std::uint64_t m, unsigned shift) noexcept {
    if (shift < 64) {
      add({m << shift, shift == 0 ? 0 : m >> (64 - shift)});
    } else {
      add({0, m << (shift - 64)});
    }
  }
  void add_times(const fixed_mass& v, std::uint64_t times) noexcept {  // += v · times (no overflow by the caller)
    for (std::uint64_t bit = 1, i = 0; i < 64 && bit <= times; ++i, bit <<= 1) {
      if ((times & bit) != 0) add({v.lo << i, i == 0 ? v.hi : (v.hi << i) | (v.lo >> (64 - i))});
    }
  }
  // The nearest double (one rounding: the top 64 bits with a sticky bit below): monotone.
  [[nodiscard]] double value() const noexcept {
    if (hi == 0) return static_cast<double>(lo);
    const int s = std::countl_zero(hi);
    std::uint64_t top = s == 0 ? hi : (hi << s) | (lo >> (64 - s));
    const std::uint64_t rest = s == 0 ? lo : lo << s;
    top |= rest != 0 ? 1U : 0U;
    return std::ldexp(static_cast<double>(top), 64 - s);
  }
  friend bool operator==(const fixed_mass&, const fixed_mass&) = default;
};

// Fixed point for masses of scores >= 0 whose largest has order key max_key: a score m·2^x
// (m < 2^24, x its ulp exponent) is counted in units of 2^(X - 72), X the largest score's ulp
// exponent: exact down to 2^-72 of the largest score (smaller parts are truncated), at most
// 2^96 per score, so 2^32 scores sum without overflow.
struct mass_scale {
  int unit_exponent = 0;  // X - 72

  [[nodiscard]] static int ulp_exponent(float v) noexcept {
    const auto b = std::bit_cast<std::uint32_t>(v);
    const int e = static_cast<int>((b >> 23) & 0xFFU);
    return (e == 0 ? 1 : e) - 150;
  }
  [[nodiscard]] static mass_scale of_max(std::uint32_t max_key) noexcept {
    return {ulp_exponent(from_order_key(max_key)) - 72};
  }
  void add(fixed_mass& sum, float v) const noexcept {  // v >= 0, finite, <= the largest
    const auto b = std::bit_cast<std::uint32_t>(v);
    const std::uint32_t e = (b >> 23) & 0xFFU;
    const std::uint64_t m = (b & 0x7FFFFFU) | (e == 0 ? 0U : 0x800000U);
    const int shift = ulp_exponent(v) - unit_exponent;  // <= 72
    if (shift >= 0) {
      sum.add_shifted(m, static_cast<unsigned>(shift));
    } else if (shift > -64) {
      sum.add_shifted(m >> static_cast<unsigned>(-shift), 0);
    }
  }
  [[nodiscard]] fixed_mass of(float v) const noexcept {
    fixed_mass s;
    add(s, v);
    return s;
  }
  [[nodiscard]] double to_double(const fixed_mass& s) const noexcept { return std::ldexp(s.value(), unit_exponent); }
};

}  // namespace actsparse::detail
