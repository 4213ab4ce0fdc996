#pragma once
// The row formats of a KV cache row (one token position's K or V for every head), as the tiered
// store holds them (managers/tiered_store.hpp, whose codecs are managers/row_codec.hpp) and as
// attention reads them (attention_args): the formats, their byte sizes, a reference to a row in
// place, and the scalar decoder. The formats:
//   f32           4·d bytes
//   f16           2·d bytes
//   int8          an f32 scale s, then d int8 values q: value q·s
//   int8_g32      d/32 ggml q8_0 blocks (an f16 scale per 32 values, then 32 int8): value q·s
//   int4_g32      d/32 blocks of the q4_0 layout (an f16 scale, 16 bytes of nibbles n): (n − 8)·s
//   int4_g32_min  d/32 blocks of an f16 scale s, an f16 minimum m and 16 bytes of nibbles n:
//                 fma(n, s, m)
// Nibble order (both int4 formats): value i < 16 is the low nibble of byte i, value i >= 16 the
// high nibble of byte i − 16 (q4_0's).

#include <actsparse/core/dtype.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
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

// A row in place: its format and bytes (row_bytes(format, d) of them). data == nullptr: the
// row is absent (dropped or never stored); readers skip it.
struct row_ref {
  row_format format = row_format::f32;
  const std::byte* data = nullptr;
};

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
