#pragma once
// Weight element types. f16 / bf16 are plain 16-bit storage with software conversions
// (identical results on g++ and clang, no _Float16 needed); block_q8_0 / block_q4_0 are
// byte-identical to ggml's blocks so an engine's tensors can be passed without copies.

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace actsparse {

enum class dtype : std::uint8_t { f32, bf16, f16, q8_0, q4_0 };

[[nodiscard]] constexpr std::string_view name(dtype t) noexcept {
  switch (t) {
    case dtype::f32:
      return "f32";
    case dtype::bf16:
      return "bf16";
    case dtype::f16:
      return "f16";
    case dtype::q8_0:
      return "q8_0";
    case dtype::q4_0:
      return "q4_0";
  }
  return "?";
}

// IEEE 754 binary16, stored as bits.
struct f16 {
  std::uint16_t bits = 0;
  friend constexpr bool operator==(f16, f16) = default;
};

// bfloat16 (the upper half of an IEEE binary32), stored as bits.
struct bf16 {
  std::uint16_t bits = 0;
  friend constexpr bool operator==(bf16, bf16) = default;
};

static_assert(sizeof(f16) == 2 && alignof(f16) == 2);
static_assert(sizeof(bf16) == 2 && alignof(bf16) == 2);

// Round to nearest, ties to even; overflow gives inf; NaN stays a (quiet) NaN.
[[nodiscard]] constexpr f16 to_f16(float value) noexcept {
  const auto x = std::bit_cast<std::uint32_t>(value);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000U);
  const std::uint32_t exponent = (x >> 23) & 0xffU;
  std::uint32_t mantissa = x & 0x7fffffU;
  if (exponent == 0xffU) {
    const std::uint32_t nan_bits = mantissa != 0 ? (0x200U | (mantissa >> 13)) : 0U;
    return f16{static_cast<std::uint16_t>(sign | 0x7c00U | nan_bits)};
  }
  const int e = static_cast<int>(exponent) - 127 + 15;
  if (e >= 31) return f16{static_cast<std::uint16_t>(sign | 0x7c00U)};
  if (e <= 0) {  // subnormal half (or zero)
    if (e < -10) return f16{sign};
    mantissa |= 0x800000U;
    const auto shift = static_cast<std::uint32_t>(14 - e);
    std::uint32_t half = mantissa >> shift;
    const std::uint32_t rest = mantissa & ((1U << shift) - 1U);
    const std::uint32_t halfway = 1U << (shift - 1U);
    if (rest > halfway || (rest == halfway && (half & 1U) != 0)) ++half;
    return f16{static_cast<std::uint16_t>(sign | half)};
  }
  std::uint32_t half = (static_cast<std::uint32_t>(e) << 10) | (mantissa >> 13);
  const std::uint32_t rest = mantissa & 0x1fffU;
  if (rest > 0x1000U || (rest == 0x1000U && (half & 1U) != 0)) ++half;  // a carry rounds up the exponent
  return f16{static_cast<std::uint16_t>(sign | half)};
}

[[nodiscard]] constexpr float to_f32(f16 h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h.bits & 0x8000U) << 16;
  const std::uint32_t exponent = (h.bits >> 10) & 0x1fU;
  const std::uint32_t mantissa = h.bits & 0x3ffU;
  if (exponent == 0) {
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24F;  // exact
    return std::bit_cast<float>(std::bit_cast<std::uint32_t>(magnitude) | sign);
  }
  if (exponent == 31) return std::bit_cast<float>(sign | 0x7f800000U | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112U) << 23) | (mantissa << 13));
}

// Round to nearest, ties to even; NaN stays a quiet NaN.
[[nodiscard]] constexpr bf16 to_bf16(float value) noexcept {
  const auto x = std::bit_cast<std::uint32_t>(value);
  if ((x & 0x7fffffffU) > 0x7f800000U) return bf16{static_cast<std::uint16_t>((x >> 16) | 0x40U)};
  const std::uint32_t rounded = x + 0x7fffU + ((x >> 16) & 1U);
  return bf16{static_cast<std::uint16_t>(rounded >> 16)};
}

[[nodiscard]] constexpr float to_f32(bf16 b) noexcept {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b.bits) << 16);
}

inline constexpr std::size_t qk8_0 = 32;  // values per block_q8_0
inline constexpr std::size_t qk4_0 = 32;  // values per block_q4_0

// ggml block_q8_0: value_i = qs[i] * d.
struct block_q8_0 {
  f16 d;
  std::int8_t qs[qk8_0];
};

// ggml block_q4_0: value_i = ((nibble_i) - 8) * d; low nibbles of qs[0..15] are
// values 0..15, high nibbles are values 16..31.
struct block_q4_0 {
  f16 d;
  std::uint8_t qs[qk4_0 / 2];
};

static_assert(sizeof(block_q8_0) == 34, "block_q8_0 must be byte-identical to ggml's (34 bytes / 32 values)");
static_assert(sizeof(block_q4_0) == 18, "block_q4_0 must be byte-identical to ggml's (18 bytes / 32 values)");
static_assert(offsetof(block_q8_0, qs) == 2 && offsetof(block_q4_0, qs) == 2);

// Compile-time facts about each storage type.
template <class T>
struct dtype_traits;
template <>
struct dtype_traits<float> {
  static constexpr dtype type = dtype::f32;
  static constexpr std::size_t block_values = 1;
};
template <>
struct dtype_traits<bf16> {
  static constexpr dtype type = dtype::bf16;
  static constexpr std::size_t block_values = 1;
};
template <>
struct dtype_traits<f16> {
  static constexpr dtype type = dtype::f16;
  static constexpr std::size_t block_values = 1;
};
template <>
struct dtype_traits<block_q8_0> {
  static constexpr dtype type = dtype::q8_0;
  static constexpr std::size_t block_values = qk8_0;
};
template <>
struct dtype_traits<block_q4_0> {
  static constexpr dtype type = dtype::q4_0;
  static constexpr std::size_t block_values = qk4_0;
};

template <class T>
concept weight_storage = requires {
  dtype_traits<T>::type;
  dtype_traits<T>::block_values;
};

// Values per storage element (1, or 32 for the block types).
[[nodiscard]] constexpr std::size_t block_values(dtype t) noexcept {
  return (t == dtype::q8_0 || t == dtype::q4_0) ? 32 : 1;
}

// Bytes per storage element (a value, or a block).
[[nodiscard]] constexpr std::size_t block_bytes(dtype t) noexcept {
  switch (t) {
    case dtype::f32:
      return 4;
    case dtype::bf16:
    case dtype::f16:
      return 2;
    case dtype::q8_0:
      return sizeof(block_q8_0);
    case dtype::q4_0:
      return sizeof(block_q4_0);
  }
  return 0;
}

// Bytes that hold `values` consecutive values of one row (values must be a multiple of
// block_values(t); callers validate that first).
[[nodiscard]] constexpr std::size_t row_bytes(dtype t, std::size_t values) noexcept {
  return values / block_values(t) * block_bytes(t);
}

// Calls f(type_tag<T>{}) with T the storage type of t.
template <class T>
struct type_tag {
  using type = T;
};

template <class F>
decltype(auto) visit_dtype(dtype t, F&& f) {
  switch (t) {
    case dtype::bf16:
      return f(type_tag<bf16>{});
    case dtype::f16:
      return f(type_tag<f16>{});
    case dtype::q8_0:
      return f(type_tag<block_q8_0>{});
    case dtype::q4_0:
      return f(type_tag<block_q4_0>{});
    case dtype::f32:
      break;
  }
  return f(type_tag<float>{});
}

}  // namespace actsparse
