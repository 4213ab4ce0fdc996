#pragma once
// The element decoders, activations and order key of the generated GPU kernels, written once
// as macros. The generators paste them into CUDA and Metal source as text (stringified), and
// a host test expands the same tokens as C++ and compares them with core's dequantize(), the
// activations and the selectors' order key: the math a GPU runs is the math checked on the CPU.
//
// The snippets are written in the neutral dialect of backends/gpu/kernel_source.hpp: GPU_FN (the
// device-function qualifier), GPU_GLOBAL / GPU_THREAD (the address spaces of a kernel buffer
// and of a thread's own array), GPU_CONSTANT, GPU_FMA, GPU_EXP, GPU_TANH, and the primitives
//   actsparse_load_u16(GPU_GLOBAL const unsigned char*) -> unsigned short  (2-byte aligned)
//   actsparse_load_f32(GPU_GLOBAL const unsigned char*) -> float           (4-byte aligned)
//   actsparse_half_to_float(unsigned short) -> float                       (IEEE binary16 bits)
//   actsparse_bits_to_float(unsigned int), actsparse_float_to_bits(float)  (bit casts)
// which each dialect's prelude (and the host test) defines for itself. None of these names may
// be a macro where this header is included: the snippets are stringified unexpanded.
//
// decode_<dtype>(row, e, w): the values of storage element e of a row (1 value for f32 / f16 /
// bf16, one block for q8_0 / q4_0) into w[0 .. block_values). The sizes come from core's dtype
// table, as constants the generator writes before the decoder (device_decoder::constants):
// actsparse_<dtype>_bytes = block_bytes(t), and for the block types actsparse_<dtype>_values =
// block_values(t). Block layouts as core/dtype.hpp: an f16 scale d, then the quants; q8_0:
// value = q * d; q4_0: value = (nibble - 8) * d, low nibbles are values 0 .. 15, high 16 .. 31.

#include <actsparse/core/activation.hpp>
#include <actsparse/core/dtype.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

#if defined(GPU_FN) || defined(GPU_GLOBAL) || defined(GPU_THREAD) || defined(GPU_FMA) || defined(GPU_EXP) || \
    defined(GPU_TANH)
#error "the GPU dialect macros (GPU_FN, ...) must not be defined where backends/gpu/device_math.hpp is included"
#endif

#define ACTSPARSE_GPU_STRINGIFY_TOKENS(...) #__VA_ARGS__
#define ACTSPARSE_GPU_STRINGIFY(...) ACTSPARSE_GPU_STRINGIFY_TOKENS(__VA_ARGS__)

#define ACTSPARSE_GPU_DECODE_F32                                                                               \
  GPU_FN void actsparse_decode_f32(GPU_GLOBAL const unsigned char* row, unsigned int e, GPU_THREAD float* w) { \
    w[0] = actsparse_load_f32(row + actsparse_f32_bytes * e);                                                  \
  }

#define ACTSPARSE_GPU_DECODE_F16                                                                               \
  GPU_FN void actsparse_decode_f16(GPU_GLOBAL const unsigned char* row, unsigned int e, GPU_THREAD float* w) { \
    w[0] = actsparse_half_to_float(actsparse_load_u16(row + actsparse_f16_bytes * e));                         \
  }

#define ACTSPARSE_GPU_DECODE_BF16                                                                               \
  GPU_FN void actsparse_decode_bf16(GPU_GLOBAL const unsigned char* row, unsigned int e, GPU_THREAD float* w) { \
    w[0] = actsparse_bits_to_float(((unsigned int)actsparse_load_u16(row + actsparse_bf16_bytes * e)) << 16);   \
  }

#define ACTSPARSE_GPU_DECODE_Q8_0                                                                               \
  GPU_FN void actsparse_decode_q8_0(GPU_GLOBAL const unsigned char* row, unsigned int e, GPU_THREAD float* w) { \
    GPU_GLOBAL const unsigned char* block = row + actsparse_q8_0_bytes * e;                                     \
    const float d = actsparse_half_to_float(actsparse_load_u16(block));                                         \
    for (unsigned int i = 0u; i < actsparse_q8_0_values; ++i) w[i] = (float)(signed char)block[2u + i] * d;     \
  }

#define ACTSPARSE_GPU_DECODE_Q4_0                                                                               \
  GPU_FN void actsparse_decode_q4_0(GPU_GLOBAL const unsigned char* row, unsigned int e, GPU_THREAD float* w) { \
    GPU_GLOBAL const unsigned char* block = row + actsparse_q4_0_bytes * e;                                     \
    const float d = actsparse_half_to_float(actsparse_load_u16(block));                                         \
    for (unsigned int i = 0u; i < actsparse_q4_0_values / 2u; ++i) {                                            \
      const unsigned int q = block[2u + i];                                                                     \
      w[i] = (float)((int)(q & 15u) - 8) * d;                                                                   \
      w[i + actsparse_q4_0_values / 2u] = (float)((int)(q >> 4) - 8) * d;                                       \
    }                                                                                                           \
  }

// An unsigned key with the order of the floats, as selectors/detail/partition.hpp's
// order_key (-0 and +0 get the same key).
#define ACTSPARSE_GPU_ORDER_KEY                               \
  GPU_FN unsigned int actsparse_order_key(float x) {          \
    const unsigned int u = actsparse_float_to_bits(x);        \
    const unsigned int sign = (unsigned int)((int)u >> 31);   \
    return 0x80000000u + (((u & 0x7FFFFFFFu) ^ sign) - sign); \
  }

// As core/activation.hpp (gelu: the tanh form, with the same explicit fma). One function per
// activation, named actsparse_<name(act)>.
#define ACTSPARSE_GPU_ACTIVATIONS                                           \
  GPU_FN float actsparse_silu(float g) { return g / (1.0f + GPU_EXP(-g)); } \
  GPU_FN float actsparse_gelu(float g) {                                    \
    const float inner = GPU_FMA(0.044715f * g * g, g, g);                   \
    return 0.5f * g * (1.0f + GPU_TANH(0.7978845608028654f * inner));       \
  }                                                                         \
  GPU_FN float actsparse_relu(float g) { return g > 0.0f ? g : 0.0f; }

namespace actsparse::gpu {

// The device decoder of one storage type of core's dtype table: a specialization per type the
// GPU kernels read. A dtype without one is not supported by the generators (supports(dtype)).
template <class T>
struct device_decoder;

template <>
struct device_decoder<float> {
  static constexpr std::string_view source = ACTSPARSE_GPU_STRINGIFY(ACTSPARSE_GPU_DECODE_F32);
};
template <>
struct device_decoder<f16> {
  static constexpr std::string_view source = ACTSPARSE_GPU_STRINGIFY(ACTSPARSE_GPU_DECODE_F16);
};
template <>
struct device_decoder<bf16> {
  static constexpr std::string_view source = ACTSPARSE_GPU_STRINGIFY(ACTSPARSE_GPU_DECODE_BF16);
};
template <>
struct device_decoder<block_q8_0> {
  static constexpr std::string_view source = ACTSPARSE_GPU_STRINGIFY(ACTSPARSE_GPU_DECODE_Q8_0);
};
template <>
struct device_decoder<block_q4_0> {
  static constexpr std::string_view source = ACTSPARSE_GPU_STRINGIFY(ACTSPARSE_GPU_DECODE_Q4_0);
};

inline constexpr std::string_view order_key_source = ACTSPARSE_GPU_STRINGIFY(ACTSPARSE_GPU_ORDER_KEY);
inline constexpr std::string_view activations_source = ACTSPARSE_GPU_STRINGIFY(ACTSPARSE_GPU_ACTIVATIONS);

namespace detail {

template <class T>
concept has_device_decoder = requires {
  device_decoder<T>::source;
};

template <class T>
[[nodiscard]] constexpr std::string_view decoder_text() noexcept {
  if constexpr (has_device_decoder<T>) {
    return device_decoder<T>::source;
  } else {
    return {};
  }
}

template <class... T>
[[nodiscard]] constexpr std::string_view decoder_of(dtype t, type_list<T...> /*types*/) noexcept {
  std::string_view found{};
  (void)((dtype_traits<T>::type == t ? (found = decoder_text<T>(), true) : false) || ...);
  return found;
}

}  // namespace detail

// The decoder's source for dtype t; empty when the GPU kernels do not read t.
[[nodiscard]] constexpr std::string_view decoder_source(dtype t) noexcept {
  return detail::decoder_of(t, storage_types{});
}

// Whether the generated kernels read weights of dtype t: it has a device_decoder (the one
// answer the generators and the CUDA backend give).
[[nodiscard]] constexpr bool supports(dtype t) noexcept { return !decoder_source(t).empty(); }

// Whether the generated kernels apply activation a: every activation core names has its
// actsparse_<name> above.
[[nodiscard]] constexpr bool supports(activation a) noexcept { return name(a) != "?"; }

}  // namespace actsparse::gpu
