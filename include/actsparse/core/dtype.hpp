#pragma once
// Weight element types, one traits entry per dtype (dtype_traits<T>, the way ggml's type
// table has one row per type): its name, values per storage element, bytes, alignment, and
// how a block converts from and to f32. Every dtype-generic piece of the library (views, the
// reference backend, quantize_row, visit_dtype) reads these entries, so a new dtype is one
// enum value, one storage struct with its entry, and its place in storage_types below;
// then its kernels in each backend that takes it.
// f16 / bf16 are plain 16-bit storage with software conversions (identical results on g++ and
// clang, no _Float16 needed); block_q8_0 / block_q4_0 are byte-identical to ggml's blocks so
// an engine's tensors can be passed without copies.

#include <actsparse/core/error.hpp>

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

namespace actsparse {

enum class dtype : std::uint8_t { f32, bf16, f16, q8_0, q4_0 };

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

namespace detail {

// A block quantizer's input must be finite: a NaN or an infinity has no scale.
inline void require_finite_block(const float* x, std::size_t n, std::string_view where) {
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      fail(where, "x[" + std::to_string(i) + "]", x[i],
           "a finite value (a NaN or an infinity has no quantization scale)");
    }
  }
}

// x·(1/d) as ggml's reference quantizers compute it, or x / d where 1/d overflows (a block
// whose largest value is below about 4e-37: d is then subnormal; the quotient stays in range).
[[nodiscard]] inline float scaled(float x, float d, float inverse) noexcept {
  return std::isfinite(inverse) ? x * inverse : x / d;
}

}  // namespace detail

// ---- The traits entries: one per storage type ------------------------------------------
//   type, name, block_values (values per storage element), bytes, alignment, quantized,
//   to_f32(block, out[block_values]) and from_f32(in[block_values]) -> block.
// from_f32 of the block types throws actsparse::error for a non-finite value.
template <class T>
struct dtype_traits;

template <>
struct dtype_traits<float> {
  static constexpr dtype type = dtype::f32;
  static constexpr std::string_view name = "f32";
  static constexpr std::size_t block_values = 1;
  static constexpr bool quantized = false;
  static void to_f32(const float& v, float* out) noexcept { *out = v; }
  [[nodiscard]] static float from_f32(const float* in) noexcept { return *in; }
};
template <>
struct dtype_traits<bf16> {
  static constexpr dtype type = dtype::bf16;
  static constexpr std::string_view name = "bf16";
  static constexpr std::size_t block_values = 1;
  static constexpr bool quantized = false;
  static void to_f32(const bf16& v, float* out) noexcept { *out = ::actsparse::to_f32(v); }
  [[nodiscard]] static bf16 from_f32(const float* in) noexcept { return to_bf16(*in); }
};
template <>
struct dtype_traits<f16> {
  static constexpr dtype type = dtype::f16;
  static constexpr std::string_view name = "f16";
  static constexpr std::size_t block_values = 1;
  static constexpr bool quantized = false;
  static void to_f32(const f16& v, float* out) noexcept { *out = ::actsparse::to_f32(v); }
  [[nodiscard]] static f16 from_f32(const float* in) noexcept { return to_f16(*in); }
};

// ggml's quantize_row_q8_0_ref: d = max|x| / 127, q = round(x / d).
template <>
struct dtype_traits<block_q8_0> {
  static constexpr dtype type = dtype::q8_0;
  static constexpr std::string_view name = "q8_0";
  static constexpr std::size_t block_values = qk8_0;
  static constexpr bool quantized = true;
  static void to_f32(const block_q8_0& b, float* out) noexcept {
    const float d = ::actsparse::to_f32(b.d);
    for (std::size_t j = 0; j < qk8_0; ++j) out[j] = static_cast<float>(b.qs[j]) * d;
  }
  [[nodiscard]] static block_q8_0 from_f32(const float* x) {
    detail::require_finite_block(x, qk8_0, "quantize_q8_0");
    float amax = 0.0F;
    for (std::size_t j = 0; j < qk8_0; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0F;
    const float id = d != 0.0F ? 1.0F / d : 0.0F;
    block_q8_0 b{};
    b.d = to_f16(d);
    for (std::size_t j = 0; j < qk8_0; ++j) {
      const float q = std::round(detail::scaled(x[j], d, id));  // |q| <= 127 by construction
      b.qs[j] = static_cast<std::int8_t>(std::fmin(127.0F, std::fmax(-127.0F, q)));
    }
    return b;
  }
};

// ggml's quantize_row_q4_0_ref: d = (the value of largest magnitude) / -8, nibble =
// min(15, trunc(x / d + 8.5)).
template <>
struct dtype_traits<block_q4_0> {
  static constexpr dtype type = dtype::q4_0;
  static constexpr std::string_view name = "q4_0";
  static constexpr std::size_t block_values = qk4_0;
  static constexpr bool quantized = true;
  static void to_f32(const block_q4_0& b, float* out) noexcept {
    const float d = ::actsparse::to_f32(b.d);
    constexpr std::size_t half = qk4_0 / 2;
    for (std::size_t j = 0; j < half; ++j) {
      out[j] = static_cast<float>((b.qs[j] & 0x0F) - 8) * d;
      out[half + j] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
    }
  }
  [[nodiscard]] static block_q4_0 from_f32(const float* x) {
    detail::require_finite_block(x, qk4_0, "quantize_q4_0");
    float amax = 0.0F;
    float max = 0.0F;  // the value of largest magnitude, with its sign
    for (std::size_t j = 0; j < qk4_0; ++j) {
      if (amax < std::fabs(x[j])) {
        amax = std::fabs(x[j]);
        max = x[j];
      }
    }
    const float d = max / -8.0F;
    const float id = d != 0.0F ? 1.0F / d : 0.0F;
    block_q4_0 b{};
    b.d = to_f16(d);
    constexpr std::size_t half = qk4_0 / 2;
    // x / d + 8.5 lies in [0.5, 16.5]; clamped before the conversion (to 15 as ggml does).
    const auto nibble = [&](float v) {
      const float n = std::fmin(15.0F, std::fmax(0.0F, detail::scaled(v, d, id) + 8.5F));
      return static_cast<std::uint8_t>(n);
    };
    for (std::size_t j = 0; j < half; ++j) {
      b.qs[j] = static_cast<std::uint8_t>(nibble(x[j]) | (nibble(x[half + j]) << 4));
    }
    return b;
  }
};

// Every storage type, in the order of the dtype enum. A new dtype is added here too.
template <class... T>
struct type_list {};
using storage_types = type_list<float, bf16, f16, block_q8_0, block_q4_0>;

template <class T>
concept weight_storage = requires {
  dtype_traits<T>::type;
  dtype_traits<T>::block_values;
};

// The run-time row of each dtype's entry.
struct dtype_info {
  std::string_view name;
  std::size_t block_values;  // values per storage element (1, or the block size)
  std::size_t block_bytes;   // bytes per storage element (a value, or a block)
  std::size_t alignment;     // the storage element's alignment: data and row strides are multiples of it
  bool quantized;
};

namespace detail {
template <class... T>
[[nodiscard]] constexpr dtype_info info_of(dtype t, type_list<T...> /*types*/) noexcept {
  dtype_info found{"?", 1, 0, 1, false};
  (void)((dtype_traits<T>::type == t ? (found = dtype_info{dtype_traits<T>::name, dtype_traits<T>::block_values,
                                                           sizeof(T), alignof(T), dtype_traits<T>::quantized},
                                        true)
                                     : false) ||
         ...);
  return found;
}
}  // namespace detail

[[nodiscard]] constexpr dtype_info info(dtype t) noexcept { return detail::info_of(t, storage_types{}); }
[[nodiscard]] constexpr std::string_view name(dtype t) noexcept { return info(t).name; }
// Values per storage element (1, or 32 for the block types).
[[nodiscard]] constexpr std::size_t block_values(dtype t) noexcept { return info(t).block_values; }
// Bytes per storage element (a value, or a block).
[[nodiscard]] constexpr std::size_t block_bytes(dtype t) noexcept { return info(t).block_bytes; }
// Alignment of the storage element: a view's data and row stride must be multiples of it.
[[nodiscard]] constexpr std::size_t alignment(dtype t) noexcept { return info(t).alignment; }

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

namespace detail {
template <class F, class First, class... Rest>
decltype(auto) visit_in(dtype t, F& f, type_list<First, Rest...> /*types*/) {
  if constexpr (sizeof...(Rest) == 0) {
    return f(type_tag<First>{});
  } else {
    if (dtype_traits<First>::type == t) return f(type_tag<First>{});
    return visit_in(t, f, type_list<Rest...>{});
  }
}
}  // namespace detail

// f(type_tag<T>{}) for the storage type T of t (the last type of the list for a value outside
// the enum, which validate() rejects first wherever a view is checked).
template <class F>
decltype(auto) visit_dtype(dtype t, F&& f) {
  return detail::visit_in(t, f, storage_types{});
}

}  // namespace actsparse
