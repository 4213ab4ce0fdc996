#pragma once
// The row formats of the tiered store (managers/tiered_store.hpp) and their codecs: one row of
// d values (a token position's K or V for every head) as
//   f32           4·d bytes, exact
//   f16           2·d bytes, round to nearest even
//   int8          an f32 scale s = max|x| / 127, then d int8 values q = round(x / s): |x − q·s| <= s/2
//   int8_g32      d/32 ggml q8_0 blocks (an f16 scale per 32 values, rounded up so that
//                 max|x| / s <= 127, then 32 int8): |x − q·s| <= s/2 per group
//   int4_g32      d/32 blocks of the q4_0 layout (an f16 scale, 16 bytes of nibbles n, value
//                 (n − 8)·s): s = max|x| / 7 rounded up, n − 8 in [−7, 7], so |x − (n − 8)·s| <= s/2
//                 per group (ggml's q4_0 rule, s = max / −8, can miss a value of the opposite sign
//                 by a whole s; this one spends one of the 16 levels to keep the bound)
//   int4_g32_min  d/32 blocks of an f16 scale, an f16 minimum m (rounded down) and 16 bytes of
//                 nibbles: value m + n·s, s = (max − m) / 15 rounded up: |x − (m + n·s)| <= s/2
// (each bound up to the f32 rounding of the dequantized value). Rounding is half away from
// zero; the division is done in double, so the codes do not depend on the compiler.
// The group formats need d to be a multiple of 32. Inputs must be finite (else an error).

#include <actsparse/core/dtype.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/row_format.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace actsparse {

// Throws unless rows of d values can be held in format f.
inline void check_row_format(row_format f, std::size_t d, std::string_view where) {
  detail::require(d > 0, where, "row_size", d, "at least 1 value per row");
  if (grouped(f) && d % row_group != 0) {
    detail::fail(where, "row_size", std::to_string(d),
                 std::string("a multiple of 32 for ") + std::string(name(f)) + " (groups of 32 values)");
  }
}

namespace detail {

// round(v) with halves away from zero (std::round), as an int.
[[nodiscard]] inline int round_half_away(double v) noexcept { return static_cast<int>(std::round(v)); }

// round(v) clamped to the symmetric int8 range [-127, 127].
[[nodiscard]] inline std::int8_t code8(double v) noexcept {
  return static_cast<std::int8_t>(std::clamp(round_half_away(v), -127, 127));
}

// The smallest f16 value >= v (v >= 0, finite, at most f16's largest value).
[[nodiscard]] inline f16 f16_at_least(float v) noexcept {
  f16 h = to_f16(v);
  if (to_f32(h) < v) h.bits = static_cast<std::uint16_t>(h.bits + 1);  // positive: the next f16 up
  return h;
}
// The largest f16 value <= v (finite, within f16's range).
[[nodiscard]] inline f16 f16_at_most(float v) noexcept {
  f16 h = to_f16(v);
  if (to_f32(h) > v) {
    if ((h.bits & 0x7fffU) == 0) {
      h.bits = 0x8001U;  // the negative value nearest zero
    } else if ((h.bits & 0x8000U) != 0) {
      h.bits = static_cast<std::uint16_t>(h.bits + 1);  // negative: one step away from zero
    } else {
      h.bits = static_cast<std::uint16_t>(h.bits - 1);  // positive: one step towards zero
    }
  }
  return h;
}

// "[i] = v", built by appends (GCC 12 warns falsely, -Wrestrict, on operator+ chains).
[[nodiscard]] inline std::string indexed_value(std::size_t i, float v) {
  std::string s = "[";
  s.append(std::to_string(i)).append("] = ").append(to_text(v));
  return s;
}

inline void check_finite_row(std::span<const float> x, std::string_view where) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) {
      throw error(where, "row", indexed_value(i, x[i]), "finite values (the first non-finite one is shown)");
    }
  }
}

// f16 holds magnitudes up to 65504: a group whose scale would not fit is an error.
inline void check_scale_range(float amax, float levels, std::string_view where) {
  if (amax / levels > 65504.0F) {
    fail(where, "row", "a group with max |x| = " + to_text(amax),
         "values whose group scale fits an f16 (max |x| <= 65504 * " + to_text(levels) + ")");
  }
}

}  // namespace detail

// Encodes x (d finite values) into out (row_bytes(f, d) bytes).
inline void encode_row(row_format f, std::span<const float> x, std::byte* out) {
  constexpr std::string_view where = "encode_row";
  const std::size_t d = x.size();
  check_row_format(f, d, where);
  detail::check_finite_row(x, where);
  switch (f) {
    case row_format::f32:
      std::memcpy(out, x.data(), 4 * d);
      return;
    case row_format::f16:
      for (std::size_t i = 0; i < d; ++i) {
        const f16 h = to_f16(x[i]);
        if (std::isinf(to_f32(h))) {
          detail::fail(where, "row", detail::indexed_value(i, x[i]),
                       "values within f16's range (|x| <= 65504) for the f16 format");
        }
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case row_format::int8: {
      float amax = 0.0F;
      for (const float v : x) amax = std::max(amax, std::fabs(v));
      const float s = amax / 127.0F;
      std::memcpy(out, &s, 4);
      auto* q = reinterpret_cast<std::int8_t*>(out + 4);
      for (std::size_t i = 0; i < d; ++i) {
        q[i] = s == 0.0F ? std::int8_t{0} : detail::code8(static_cast<double>(x[i]) / static_cast<double>(s));
      }
      return;
    }
    case row_format::int8_g32:
    case row_format::int4_g32:
    case row_format::int4_g32_min:
      break;
  }
  for (std::size_t g = 0; g < d / row_group; ++g) {
    const float* xs = x.data() + g * row_group;
    float amax = 0.0F;
    float lo = xs[0];
    float hi = xs[0];
    for (std::size_t i = 0; i < row_group; ++i) {
      amax = std::max(amax, std::fabs(xs[i]));
      lo = std::min(lo, xs[i]);
      hi = std::max(hi, xs[i]);
    }
    if (f == row_format::int8_g32) {
      detail::check_scale_range(amax, 127.0F, where);
      block_q8_0 b{};
      b.d = detail::f16_at_least(amax / 127.0F);
      const double s = to_f32(b.d);
      for (std::size_t i = 0; i < row_group; ++i) {
        b.qs[i] = s == 0.0 ? std::int8_t{0} : detail::code8(xs[i] / s);
      }
      std::memcpy(out + g * sizeof b, &b, sizeof b);
    } else if (f == row_format::int4_g32) {
      detail::check_scale_range(amax, 7.0F, where);
      block_q4_0 b{};
      b.d = detail::f16_at_least(amax / 7.0F);
      const double s = to_f32(b.d);
      for (std::size_t i = 0; i < row_group / 2; ++i) {
        const int lo4 = s == 0.0 ? 0 : std::clamp(detail::round_half_away(xs[i] / s), -7, 7);
        const int hi4 = s == 0.0 ? 0 : std::clamp(detail::round_half_away(xs[i + 16] / s), -7, 7);
        b.qs[i] = static_cast<std::uint8_t>((lo4 + 8) | ((hi4 + 8) << 4));
      }
      std::memcpy(out + g * sizeof b, &b, sizeof b);
    } else {
      detail::check_scale_range(amax, 1.0F, where);  // the minimum itself is an f16
      detail::check_scale_range(hi - lo, 15.0F, where);
      block_q4_min b{};
      b.m = detail::f16_at_most(lo);
      const float m = to_f32(b.m);
      b.d = detail::f16_at_least((hi - m) / 15.0F);
      const double s = to_f32(b.d);
      for (std::size_t i = 0; i < row_group / 2; ++i) {
        const int lo4 = s == 0.0 ? 0 : std::clamp(detail::round_half_away((xs[i] - static_cast<double>(m)) / s), 0, 15);
        const int hi4 =
            s == 0.0 ? 0 : std::clamp(detail::round_half_away((xs[i + 16] - static_cast<double>(m)) / s), 0, 15);
        b.qs[i] = static_cast<std::uint8_t>(lo4 | (hi4 << 4));
      }
      std::memcpy(out + g * sizeof b, &b, sizeof b);
    }
  }
}

}  // namespace actsparse
