#pragma once
// The CPU backend's entry per dtype (as ggml's type_traits_cpu): which of its kernels take
// weights of that storage type. The per-target kernels of each dtype are listed in
// kernels-inl.h (target_kernels<T>), which checks them against these entries. A dtype with no
// entry here is not handled (can_implement says so).
//   f32_activations  GEMV and row axpy with x in f32 (rows-inl.h / block-inl.h)
//   int8_activations GEMV on x quantized to 8-bit blocks (int8-inl.h)
//   interleaved      the interleaved layout of layouts.hpp and its GEMV

#include <actsparse/core/dtype.hpp>

namespace actsparse::cpu {

template <class T>
struct kernel_support {
  static constexpr bool f32_activations = false;
  static constexpr bool int8_activations = false;
  static constexpr bool interleaved = false;
};
template <>
struct kernel_support<float> {
  static constexpr bool f32_activations = true;
  static constexpr bool int8_activations = false;
  static constexpr bool interleaved = false;
};
template <>
struct kernel_support<f16> : kernel_support<float> {};
template <>
struct kernel_support<bf16> : kernel_support<float> {};
template <>
struct kernel_support<block_q8_0> {
  static constexpr bool f32_activations = true;
  static constexpr bool int8_activations = true;
  static constexpr bool interleaved = true;
};
template <>
struct kernel_support<block_q4_0> : kernel_support<block_q8_0> {};

// The run-time row of the entries.
struct dtype_support {
  bool f32_activations = false;
  bool int8_activations = false;
  bool interleaved = false;
};
[[nodiscard]] inline dtype_support support(dtype t) noexcept {
  if (info(t).block_bytes == 0) return {};
  return visit_dtype(t, [](auto tag) {
    using S = kernel_support<typename decltype(tag)::type>;
    return dtype_support{S::f32_activations, S::int8_activations, S::interleaved};
  });
}

}  // namespace actsparse::cpu
