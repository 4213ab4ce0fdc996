#pragma once
// Reference conversions between f32 and every weight dtype. The q8_0 / q4_0 rules are
// ggml's reference quantizers (quantize_row_q8_0_ref / quantize_row_q4_0_ref), so a row
// quantized here holds the same bytes as one quantized by ggml.

#include <actsparse/core/dtype.hpp>
#include <actsparse/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

namespace actsparse {

[[nodiscard]] inline block_q8_0 quantize_q8_0(std::span<const float, qk8_0> x) noexcept {
  float amax = 0.0F;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float d = amax / 127.0F;
  const float id = d != 0.0F ? 1.0F / d : 0.0F;
  block_q8_0 b{};
  b.d = to_f16(d);
  for (std::size_t j = 0; j < qk8_0; ++j) b.qs[j] = static_cast<std::int8_t>(std::round(x[j] * id));
  return b;
}

[[nodiscard]] inline block_q4_0 quantize_q4_0(std::span<const float, qk4_0> x) noexcept {
  float amax = 0.0F;
  float max = 0.0F;  // the value of largest magnitude, with its sign
  for (float v : x) {
    if (amax < std::fabs(v)) {
      amax = std::fabs(v);
      max = v;
    }
  }
  const float d = max / -8.0F;
  const float id = d != 0.0F ? 1.0F / d : 0.0F;
  block_q4_0 b{};
  b.d = to_f16(d);
  constexpr std::size_t half = qk4_0 / 2;
  for (std::size_t j = 0; j < half; ++j) {
    const auto lo = std::min<std::int8_t>(15, static_cast<std::int8_t>(x[j] * id + 8.5F));
    const auto hi = std::min<std::int8_t>(15, static_cast<std::int8_t>(x[half + j] * id + 8.5F));
    b.qs[j] = static_cast<std::uint8_t>(static_cast<std::uint8_t>(lo) | (static_cast<std::uint8_t>(hi) << 4));
  }
  return b;
}

inline void dequantize(const block_q8_0& b, std::span<float, qk8_0> out) noexcept {
  const float d = to_f32(b.d);
  for (std::size_t j = 0; j < qk8_0; ++j) out[j] = static_cast<float>(b.qs[j]) * d;
}

inline void dequantize(const block_q4_0& b, std::span<float, qk4_0> out) noexcept {
  const float d = to_f32(b.d);
  constexpr std::size_t half = qk4_0 / 2;
  for (std::size_t j = 0; j < half; ++j) {
    out[j] = static_cast<float>((b.qs[j] & 0x0F) - 8) * d;
    out[half + j] = static_cast<float>((b.qs[j] >> 4) - 8) * d;
  }
}

// Converts n values of one row from storage type T to f32 (n a multiple of the block size).
template <weight_storage T>
void dequantize_row(const T* row, float* out, std::size_t n) noexcept {
  if constexpr (std::is_same_v<T, float>) {
    std::copy_n(row, n, out);
  } else if constexpr (dtype_traits<T>::block_values == 1) {
    for (std::size_t i = 0; i < n; ++i) out[i] = to_f32(row[i]);
  } else {
    constexpr std::size_t bv = dtype_traits<T>::block_values;
    for (std::size_t b = 0; b < n / bv; ++b) dequantize(row[b], std::span<float, bv>(out + b * bv, bv));
  }
}

// Converts n f32 values to storage type T (n a multiple of the block size: checked).
template <weight_storage T>
void quantize_row(const float* x, T* out, std::size_t n) {
  constexpr std::size_t bv = dtype_traits<T>::block_values;
  detail::require(n % bv == 0, "quantize_row", "n", n, "a multiple of the block size (32 for q8_0 / q4_0)");
  if constexpr (std::is_same_v<T, float>) {
    std::copy_n(x, n, out);
  } else if constexpr (std::is_same_v<T, bf16>) {
    for (std::size_t i = 0; i < n; ++i) out[i] = to_bf16(x[i]);
  } else if constexpr (std::is_same_v<T, f16>) {
    for (std::size_t i = 0; i < n; ++i) out[i] = to_f16(x[i]);
  } else if constexpr (std::is_same_v<T, block_q8_0>) {
    for (std::size_t b = 0; b < n / bv; ++b) out[b] = quantize_q8_0(std::span<const float, bv>(x + b * bv, bv));
  } else {
    for (std::size_t b = 0; b < n / bv; ++b) out[b] = quantize_q4_0(std::span<const float, bv>(x + b * bv, bv));
  }
}

}  // namespace actsparse
