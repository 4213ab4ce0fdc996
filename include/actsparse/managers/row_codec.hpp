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

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace actsparse {

enum class row_format : std::uint8_t { f32, f16, int8, int8_g32, int4_g32, int4_g32_min };

[[nodiscard]] constexpr std::string_view name(row_format f) noexcept {
  switch (f) {
    case row_format::f32:
      return "f32";
    case row_format::f16:
      return "f16";
    case row_format::int8:
      return "int8";
    case row_format::int8_g32:
      return "int8_g32";
    case row_format::int4_g32:
      return "int4_g32";
    case row_format::int4_g32_min:
      return "int4_g32_min";
  }
  return "?";
}

// The int4 block with a minimum: value_i = m + n_i·d, n_i the low nibbles of qs[0..15] for
// i < 16 and their high nibbles for i >= 16 (q4_0's nibble order).
struct block_q4_min {
  f16 d;
  f16 m;
  std::uint8_t qs[16];
};
static_assert(sizeof(block_q4_min) == 20);

inline constexpr std::size_t row_group = 32;

[[nodiscard]] constexpr bool grouped(row_format f) noexcept {
  return f == row_format::int8_g32 || f == row_format::int4_g32 || f == row_format::int4_g32_min;
}
[[nodiscard]] constexpr bool full_precision(row_format f) noexcept {
  return f == row_format::f32 || f == row_format::f16;
}

// Bytes of one row of d values, scales included.
[[nodiscard]] constexpr std::size_t row_bytes(row_format f, std::size_t d) noexcept {
  switch (f) {
    case row_format::f32:
      return 4 * d;
    case row_format::f16:
      return 2 * d;
    case row_format::int8:
      return 4 + d;
    case row_format::int8_g32:
      return d / row_group * sizeof(block_q8_0);
    case row_format::int4_g32:
      return d / row_group * sizeof(block_q4_0);
    case row_format::int4_g32_min:
      return d / row_group * sizeof(block_q4_min);
  }
  return 0;
}

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

inline void check_finite_row(std::span<const float> x, std::string_view where) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) {
      throw error(where, "row", "[" + std::to_string(i) + "] = " + to_text(x[i]),
                  "finite values (the first non-finite one is shown)");
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
          detail::fail(where, "row", "[" + std::to_string(i) + "] = " + detail::to_text(x[i]),
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

// The scale of value i of an encoded row (0 for f32 / f16): the bound |x − x'| <= scale / 2.
[[nodiscard]] inline float row_scale(row_format f, const std::byte* row, std::size_t i) noexcept {
  switch (f) {
    case row_format::f32:
    case row_format::f16:
      return 0.0F;
    case row_format::int8: {
      float s = 0.0F;
      std::memcpy(&s, row, 4);
      return s;
    }
    case row_format::int8_g32:
      return to_f32(reinterpret_cast<const block_q8_0*>(row)[i / row_group].d);
    case row_format::int4_g32:
      return to_f32(reinterpret_cast<const block_q4_0*>(row)[i / row_group].d);
    case row_format::int4_g32_min:
      return to_f32(reinterpret_cast<const block_q4_min*>(row)[i / row_group].d);
  }
  return 0.0F;
}

// Value i of an encoded row.
[[nodiscard]] inline float decode_value(row_format f, const std::byte* row, std::size_t i) noexcept {
  switch (f) {
    case row_format::f32: {
      float v = 0.0F;
      std::memcpy(&v, row + 4 * i, 4);
      return v;
    }
    case row_format::f16: {
      f16 h{};
      std::memcpy(&h, row + 2 * i, 2);
      return to_f32(h);
    }
    case row_format::int8: {
      float s = 0.0F;
      std::memcpy(&s, row, 4);
      return static_cast<float>(reinterpret_cast<const std::int8_t*>(row + 4)[i]) * s;
    }
    case row_format::int8_g32: {
      const block_q8_0& b = reinterpret_cast<const block_q8_0*>(row)[i / row_group];
      return static_cast<float>(b.qs[i % row_group]) * to_f32(b.d);
    }
    case row_format::int4_g32: {
      const block_q4_0& b = reinterpret_cast<const block_q4_0*>(row)[i / row_group];
      const std::size_t j = i % row_group;
      const int n = j < 16 ? (b.qs[j] & 0x0F) : (b.qs[j - 16] >> 4);
      return static_cast<float>(n - 8) * to_f32(b.d);
    }
    case row_format::int4_g32_min: {
      const block_q4_min& b = reinterpret_cast<const block_q4_min*>(row)[i / row_group];
      const std::size_t j = i % row_group;
      const int n = j < 16 ? (b.qs[j] & 0x0F) : (b.qs[j - 16] >> 4);
      return std::fma(static_cast<float>(n), to_f32(b.d), to_f32(b.m));
    }
  }
  return 0.0F;
}

// Decodes a whole row into out (d values).
inline void decode_row(row_format f, const std::byte* row, std::span<float> out) noexcept {
  if (f == row_format::f32) {
    std::memcpy(out.data(), row, 4 * out.size());
    return;
  }
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = decode_value(f, row, i);
}

}  // namespace actsparse
