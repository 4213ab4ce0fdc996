#pragma once
// The element decoders and activations of the generated CUDA kernels, written once as
// macros. The generator pastes them into the kernel source as text (stringified), and a
// host test expands the same tokens as C++ and compares them with core's dequantize() and
// activations: the math a GPU runs is the math that was checked on the CPU.
//
// Each snippet calls only these primitives, which each side defines for itself:
//   actsparse_load_u16(const unsigned char*) -> unsigned short   (2-byte aligned load)
//   actsparse_load_f32(const unsigned char*) -> float            (4-byte aligned load)
//   actsparse_half_to_float(unsigned short) -> float             (IEEE binary16 bits)
//   actsparse_bits_to_float(unsigned int) -> float               (bit cast)
//   actsparse_float_to_bits(float) -> unsigned int               (bit cast)
// and expf / tanhf / fmaf. ACTSPARSE_CUDA_FN is the function qualifier: `__device__
// __forceinline__` in the generated source, `inline` on the host; it must not be defined
// where these macros are stringified (generator.hpp), only where they are expanded.
//
// decode_<dtype>(row, e, w): the values of storage element e of a row (1 value for
// f32 / f16 / bf16, one 32-value block for q8_0 / q4_0) into w[0 .. block_values).
// Layouts as core/dtype.hpp: q8_0 = f16 d + 32 int8 (value = q * d); q4_0 = f16 d +
// 16 bytes, value = (nibble - 8) * d, low nibbles are values 0..15, high nibbles 16..31.

#define ACTSPARSE_CUDA_STRINGIFY_TOKENS(...) #__VA_ARGS__
#define ACTSPARSE_CUDA_STRINGIFY(...) ACTSPARSE_CUDA_STRINGIFY_TOKENS(__VA_ARGS__)

#define ACTSPARSE_CUDA_DECODE_F32                                                                   \
  ACTSPARSE_CUDA_FN void actsparse_decode_f32(const unsigned char* row, unsigned int e, float* w) { \
    w[0] = actsparse_load_f32(row + 4u * e);                                                        \
  }

#define ACTSPARSE_CUDA_DECODE_F16                                                                   \
  ACTSPARSE_CUDA_FN void actsparse_decode_f16(const unsigned char* row, unsigned int e, float* w) { \
    w[0] = actsparse_half_to_float(actsparse_load_u16(row + 2u * e));                               \
  }

#define ACTSPARSE_CUDA_DECODE_BF16                                                                   \
  ACTSPARSE_CUDA_FN void actsparse_decode_bf16(const unsigned char* row, unsigned int e, float* w) { \
    w[0] = actsparse_bits_to_float(((unsigned int)actsparse_load_u16(row + 2u * e)) << 16);          \
  }

#define ACTSPARSE_CUDA_DECODE_Q8_0                                                                   \
  ACTSPARSE_CUDA_FN void actsparse_decode_q8_0(const unsigned char* row, unsigned int e, float* w) { \
    const unsigned char* block = row + 34u * e;                                                      \
    const float d = actsparse_half_to_float(actsparse_load_u16(block));                              \
    for (int i = 0; i < 32; ++i) w[i] = (float)(signed char)block[2 + i] * d;                        \
  }

#define ACTSPARSE_CUDA_DECODE_Q4_0                                                                   \
  ACTSPARSE_CUDA_FN void actsparse_decode_q4_0(const unsigned char* row, unsigned int e, float* w) { \
    const unsigned char* block = row + 18u * e;                                                      \
    const float d = actsparse_half_to_float(actsparse_load_u16(block));                              \
    for (int i = 0; i < 16; ++i) {                                                                   \
      const unsigned int q = block[2 + i];                                                           \
      w[i] = (float)((int)(q & 15u) - 8) * d;                                                        \
      w[i + 16] = (float)((int)(q >> 4) - 8) * d;                                                    \
    }                                                                                                \
  }

// An unsigned key with the order of the floats, as selectors/detail/partition.hpp's
// order_key (-0 and +0 get the same key).
#define ACTSPARSE_CUDA_ORDER_KEY                                \
  ACTSPARSE_CUDA_FN unsigned int actsparse_order_key(float x) { \
    const unsigned int u = actsparse_float_to_bits(x);          \
    const unsigned int sign = (unsigned int)((int)u >> 31);     \
    return 0x80000000u + (((u & 0x7FFFFFFFu) ^ sign) - sign);   \
  }

// As core/activation.hpp (gelu: the tanh form, with the same explicit fma).
#define ACTSPARSE_CUDA_ACTIVATIONS                                                  \
  ACTSPARSE_CUDA_FN float actsparse_silu(float g) { return g / (1.0f + expf(-g)); } \
  ACTSPARSE_CUDA_FN float actsparse_gelu(float g) {                                 \
    const float inner = fmaf(0.044715f * g * g, g, g);                              \
    return 0.5f * g * (1.0f + tanhf(0.7978845608028654f * inner));                  \
  }                                                                                 \
  ACTSPARSE_CUDA_FN float actsparse_relu(float g) { return g > 0.0f ? g : 0.0f; }
