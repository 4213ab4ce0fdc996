#pragma once
// Conversions between f32 and every weight dtype, through each dtype's traits entry
// (core/dtype.hpp). The q8_0 / q4_0 rules are ggml's reference quantizers
// (quantize_row_q8_0_ref / quantize_row_q4_0_ref), so a row quantized here holds the same
// bytes as one quantized by ggml. Non-finite input is an error (it has no scale); a block of
// tiny values (scale below f16's range) quantizes without overflow.

#include <actsparse/core/dtype.hpp>
#include <actsparse/core/error.hpp>

#include <cstddef>
#include <span>

namespace actsparse {

[[nodiscard]] inline block_q8_0 quantize_q8_0(std::span<const float, qk8_0> x) {
  return dtype_traits<block_q8_0>::from_f32(x.data());
}
[[nodiscard]] inline block_q4_0 quantize_q4_0(std::span<const float, qk4_0> x) {
  return dtype_traits<block_q4_0>::from_f32(x.data());
}
inline void dequantize(const block_q8_0& b, std::span<float, qk8_0> out) noexcept {
  dtype_traits<block_q8_0>::to_f32(b, out.data());
}
inline void dequantize(const block_q4_0& b, std::span<float, qk4_0> out) noexcept {
  dtype_traits<block_q4_0>::to_f32(b, out.data());
}

// Converts n values of one row from storage type T to f32 (n a multiple of the block size).
template <weight_storage T>
void dequantize_row(const T* row, float* out, std::size_t n) noexcept {
  constexpr std::size_t bv = dtype_traits<T>::block_values;
  for (std::size_t b = 0; b < n / bv; ++b) dtype_traits<T>::to_f32(row[b], out + b * bv);
}

// Converts n f32 values to storage type T (n a multiple of the block size: checked; the block
// types also check that every value is finite).
template <weight_storage T>
void quantize_row(const float* x, T* out, std::size_t n) {
  constexpr std::size_t bv = dtype_traits<T>::block_values;
  detail::require(n % bv == 0, "quantize_row", "n", n, "a multiple of the block size (32 for q8_0 / q4_0)");
  for (std::size_t b = 0; b < n / bv; ++b) out[b] = dtype_traits<T>::from_f32(x + b * bv);
}

}  // namespace actsparse
