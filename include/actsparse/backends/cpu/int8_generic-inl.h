// Portable scalar integer kernels of int8-inl.h: every target without AVX2 (SSE4, SSSE3,
// EMU128, SCALAR, NEON, SVE, RVV, ...). A NEON or SVE version goes in a file of its own beside
// this one (arm/int8_neon-inl.h), chosen in int8-inl.h.
// Included by int8-inl.h for the targets it names, once per such target (no guard of its own,
// no #pragma once). Defines ACTSPARSE_INT8_ATTR, int8_kernel (the integer block products, see
// int8-inl.h) and interleaved_gemv_groups (the interleaved GEMV's body) for these targets.

HWY_BEFORE_NAMESPACE();
namespace actsparse::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Every other target (SSE4, SSSE3, EMU128, SCALAR, non-x86): portable scalar code, one block
// at a time: the int32 sum, then acc += float(sum)·(d_w·d_x).
#define ACTSPARSE_INT8_ATTR

struct int8_kernel {
  static constexpr const char* name = "portable";  // scalar int32 sums
  using acc_type = float;
  static constexpr std::size_t unit = 1;
  struct x_unit {
    const std::int8_t* q;
    float dx;
  };

  static HWY_INLINE float zero() { return 0.0F; }

  template <class B, bool Single>
  static HWY_INLINE x_unit prepare(const std::int8_t* xq, const float* xd, std::size_t b) {
    return {xq + b * values_per_block, xd[b]};
  }

  template <class B, bool Single>
  static HWY_INLINE float dot(const B* HWY_RESTRICT blk, const x_unit& u, const float* HWY_RESTRICT scales, float acc) {
    const std::int8_t* HWY_RESTRICT xb = u.q;
    std::int32_t sum = 0;
    if constexpr (std::is_same_v<B, block_q8_0>) {
      for (std::size_t i = 0; i < values_per_block; ++i) sum += std::int32_t{blk->qs[i]} * xb[i];
    } else {
      for (std::size_t i = 0; i < half_block; ++i) {
        sum += ((blk->qs[i] & 0x0f) - 8) * xb[i] + ((blk->qs[i] >> 4) - 8) * xb[half_block + i];
      }
    }
    return acc + static_cast<float>(sum) * (scales[blk->d.bits] * u.dx);
  }

  static HWY_INLINE float reduce(float acc) { return acc; }
};

// Rows 16·g + i of W·x for the groups g in [g_begin, g_end), into y[16·(g − g_begin) + i].
template <class B>
ACTSPARSE_INT8_ATTR HWY_NOINLINE void interleaved_gemv_groups(const std::byte* HWY_RESTRICT base, std::size_t blocks,
                                                              std::size_t g_begin, std::size_t g_end,
                                                              const std::int8_t* HWY_RESTRICT xq,
                                                              const float* HWY_RESTRICT xd,
                                                              const std::int32_t* HWY_RESTRICT xs,
                                                              float* HWY_RESTRICT y, const kernel_tuning& /*t*/) {
  // Every other target: portable scalar code in the same order (no prefetch to tune).
  constexpr bool q4 = std::is_same_v<B, block_q4_0>;
  constexpr std::size_t bytes = interleaved_block<B>;
  const float* scales = f16_to_f32_table();
  for (std::size_t g = g_begin; g < g_end; ++g) {
    const std::byte* p = base + g * blocks * bytes;
    float acc[interleaved_rows] = {};
    for (std::size_t b = 0; b < blocks; ++b, p += bytes) {
      const std::int8_t* xb = xq + b * values_per_block;
      for (std::size_t i = 0; i < interleaved_rows; ++i) {
        std::int32_t sum = q4 ? -8 * xs[b] : 0;
        for (std::size_t c = 0; c < interleaved_chunks<B>; ++c) {
          for (std::size_t k = 0; k < 4; ++k) {
            const auto byte = static_cast<std::uint8_t>(p[32 + 64 * c + 4 * i + k]);
            if constexpr (q4) {
              sum += (byte & 0x0f) * xb[8 * c + k] + (byte >> 4) * xb[8 * c + 4 + k];
            } else {
              sum += static_cast<std::int8_t>(byte) * xb[4 * c + k];
            }
          }
        }
        std::uint16_t d;
        std::memcpy(&d, p + 2 * i, 2);
        acc[i] = acc[i] + static_cast<float>(sum) * (scales[d] * xd[b]);
      }
    }
    for (std::size_t i = 0; i < interleaved_rows; ++i) y[(g - g_begin) * interleaved_rows + i] = acc[i];
  }
}

}  // namespace actsparse::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
