// AVX-512 VNNI integer kernels of int8-inl.h (AVX3_DL and better).
// Included by int8-inl.h for the targets it names, once per such target (no guard of its own,
// no #pragma once). Defines ACTSPARSE_INT8_ATTR, int8_kernel (the integer block products, see
// int8-inl.h) and interleaved_gemv_groups (the interleaved GEMV's body) for these targets.

HWY_BEFORE_NAMESPACE();
namespace actsparse::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// AVX-512 VNNI: AVX3_DL and the better x86 targets of later Highway versions (Highway checks
// AVX512_VNNI for AVX3_DL, but its 1.0.3 target string names only the VEX form, so these
// functions add it). Two blocks per 512-bit vector; vpdpbusd takes
// u8 × s8, so the weights are made unsigned: q8_0's q + 128 (q xor 0x80), q4_0's nibble n =
// q + 8 as stored, and the offset is taken back with −k·Σ q_x per lane (k = 128 or 8) as the
// accumulator's start: each lane is then exactly Σ_{4 values} q_w·q_x.
#if HWY_COMPILER_MSVC
#define ACTSPARSE_INT8_ATTR
#else
#define ACTSPARSE_INT8_ATTR __attribute__((target(HWY_TARGET_STR ",avx512vnni")))
#endif

// Index vectors of the two-block loads. q4_0, from the 36 bytes of two blocks: byte i is
// value i % 32 of block i / 32, the low nibble of stored byte i % 16 below 16, the high one
// above (vpermb, then a shift by 0 or 4 per 16-bit word, then & 0x0f). q8_0, from the first
// 64 bytes of the two blocks (a) and the second block's 32 values (b): byte i < 32 is a's
// 2 + i, byte i >= 32 is b's i − 32 (vpermt2b). The f16 scales: words 0 and 9 (q4_0) or 17
// (q8_0) of the load, each to 8 words (vpermw, then vcvtph2ps: exact, no table look-up).
alignas(64) inline constexpr std::array<std::uint8_t, 64> q4_pair_bytes = [] {
  std::array<std::uint8_t, 64> a{};
  for (std::size_t i = 0; i < 64; ++i) a[i] = static_cast<std::uint8_t>(i / 32 * sizeof(block_q4_0) + 2 + i % 16);
  return a;
}();
alignas(64) inline constexpr std::array<std::uint16_t, 32> q4_pair_shifts = [] {
  std::array<std::uint16_t, 32> a{};
  for (std::size_t w = 0; w < 32; ++w) a[w] = (2 * w) % 32 >= 16 ? 4 : 0;
  return a;
}();
alignas(64) inline constexpr std::array<std::uint8_t, 64> q8_pair_bytes = [] {
  std::array<std::uint8_t, 64> a{};
  for (std::size_t i = 0; i < 64; ++i) a[i] = static_cast<std::uint8_t>(i < 32 ? 2 + i : 64 + i - 32);
  return a;
}();
template <class B>
alignas(64) inline constexpr std::array<std::uint16_t, 32> pair_scale_words = [] {
  std::array<std::uint16_t, 32> a{};
  for (std::size_t w = 8; w < 16; ++w) a[w] = static_cast<std::uint16_t>(sizeof(B) / 2);
  return a;
}();

struct int8_kernel {
  static constexpr const char* name = "avx512_vnni";  // vpdpbusd
  using acc_type = __m512;
  static constexpr std::size_t unit = 2;
  struct x_unit {
    __m512i q;     // q_x of the two blocks (the second's 0 when Single)
    __m512i corr;  // −k·(sum of the lane's 4 values of q_x)
    __m512 dx;     // d_x of the first block (lanes 0-7), of the second (8-15; 0 when Single)
  };

  ACTSPARSE_INT8_ATTR static HWY_INLINE __m512 zero() { return _mm512_setzero_ps(); }

  template <class B, bool Single>
  ACTSPARSE_INT8_ATTR static HWY_INLINE x_unit prepare(const std::int8_t* xq, const float* xd, std::size_t b) {
    x_unit u;
    const std::int8_t* xb = xq + b * values_per_block;
    if constexpr (Single) {
      u.q = _mm512_zextsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb)));
    } else {
      u.q = _mm512_loadu_si512(xb);
    }
    const __m512i k = _mm512_set1_epi8(static_cast<char>(std::is_same_v<B, block_q8_0> ? 0x80 : 0x08));
    const __m512i zero_i = _mm512_setzero_si512();
    u.corr = _mm512_sub_epi32(zero_i, _mm512_dpbusd_epi32(zero_i, k, u.q));
    const __m512 d0 = _mm512_set1_ps(xd[b]);
    if constexpr (Single) {
      u.dx = _mm512_maskz_mov_ps(0x00ff, d0);
    } else {
      u.dx = _mm512_mask_mov_ps(d0, 0xff00, _mm512_set1_ps(xd[b + 1]));
    }
    return u;
  }

  template <class B, bool Single>
  ACTSPARSE_INT8_ATTR static HWY_INLINE __m512 dot(const B* HWY_RESTRICT blk, const x_unit& u, const float*,
                                                   __m512 acc) {
    __m512i raw;  // the loaded bytes: the two blocks from their start (q8_0: the first 64)
    __m512i wv;
    if constexpr (std::is_same_v<B, block_q8_0>) {
      __m512i second = _mm512_setzero_si512();
      if constexpr (Single) {
        raw = _mm512_maskz_loadu_epi8((std::uint64_t{1} << sizeof(block_q8_0)) - 1, blk);  // no further
      } else {
        raw = _mm512_loadu_si512(blk);
        second = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk[1].qs)));
      }
      wv = _mm512_permutex2var_epi8(raw, _mm512_load_si512(q8_pair_bytes.data()), second);
      wv = _mm512_xor_si512(wv, _mm512_set1_epi8(static_cast<char>(0x80)));  // Single: 128 × x's zeros
    } else {
      // The 36 bytes of the two blocks (18 of one), no further: a masked load does not fault.
      raw = _mm512_maskz_loadu_epi8((std::uint64_t{1} << ((Single ? 1 : 2) * sizeof(block_q4_0))) - 1, blk);
      const __m512i spread = _mm512_permutexvar_epi8(_mm512_load_si512(q4_pair_bytes.data()), raw);
      wv =
          _mm512_and_si512(_mm512_srlv_epi16(spread, _mm512_load_si512(q4_pair_shifts.data())), _mm512_set1_epi8(0x0f));
    }
    const __m512i sums = _mm512_dpbusd_epi32(u.corr, wv, u.q);
    // Single: the second scale's word was not loaded (0), and dx is 0 there.
    const __m512 dw = _mm512_cvtph_ps(
        _mm512_castsi512_si256(_mm512_permutexvar_epi16(_mm512_load_si512(pair_scale_words<B>.data()), raw)));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(dw, u.dx), acc);
  }

  ACTSPARSE_INT8_ATTR static HWY_INLINE float reduce(__m512 acc) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(acc),
                                   _mm256_castpd_ps(_mm512_maskz_extractf64x4_pd(0x0f, _mm512_castps_pd(acc), 1)));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
};

// G groups of 16 rows at once (kernel_tuning::interleaved_groups): G streams read together,
// x's broadcasts shared.

template <class B, std::size_t G>
ACTSPARSE_INT8_ATTR HWY_INLINE void interleaved_dot_groups(const std::byte* HWY_RESTRICT base, std::size_t blocks,
                                                           const std::int8_t* HWY_RESTRICT xq,
                                                           const float* HWY_RESTRICT xd,
                                                           const std::int32_t* HWY_RESTRICT xs, float* HWY_RESTRICT y,
                                                           std::size_t prefetch_bytes) {
  constexpr bool q4 = std::is_same_v<B, block_q4_0>;
  constexpr std::size_t bytes = interleaved_block<B>;
  const __m512i low = _mm512_set1_epi8(0x0f);
  const __m512i sign = _mm512_set1_epi8(static_cast<char>(0x80));
  const std::size_t stride = blocks * bytes;  // bytes of one group
  __m512 acc[G];
  for (std::size_t i = 0; i < G; ++i) acc[i] = _mm512_setzero_ps();
  const std::byte* p = base;
  for (std::size_t b = 0; b < blocks; ++b, p += bytes) {
    const std::int8_t* xb = xq + b * values_per_block;
    __m512i xv[8];  // x's values 4c .. 4c + 3, broadcast
    for (std::size_t c = 0; c < 8; ++c) {
      std::int32_t v;
      std::memcpy(&v, xb + 4 * c, 4);
      xv[c] = _mm512_set1_epi32(v);
    }
    const __m512i corr = _mm512_set1_epi32(-(q4 ? 8 : 128) * xs[b]);
    const __m512 dx = _mm512_set1_ps(xd[b]);
    for (std::size_t i = 0; i < G; ++i) {
      const std::byte* q = p + i * stride;
      for (std::size_t o = 0; o < bytes; o += 64) prefetch_line(q + prefetch_bytes + o);
      __m512i s0 = corr;
      __m512i s1 = _mm512_setzero_si512();
      for (std::size_t c = 0; c < interleaved_chunks<B>; ++c) {
        const __m512i raw = _mm512_loadu_si512(q + 32 + 64 * c);
        if constexpr (q4) {
          s0 = _mm512_dpbusd_epi32(s0, _mm512_and_si512(raw, low), xv[2 * c]);
          s1 = _mm512_dpbusd_epi32(s1, _mm512_and_si512(_mm512_srli_epi16(raw, 4), low), xv[2 * c + 1]);
        } else if (c % 2 == 0) {
          s0 = _mm512_dpbusd_epi32(s0, _mm512_xor_si512(raw, sign), xv[c]);
        } else {
          s1 = _mm512_dpbusd_epi32(s1, _mm512_xor_si512(raw, sign), xv[c]);
        }
      }
      const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
      acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), _mm512_mul_ps(dw, dx), acc[i]);
    }
  }
  for (std::size_t i = 0; i < G; ++i) _mm512_storeu_ps(y + i * interleaved_rows, acc[i]);
}

template <class B, std::size_t G>
ACTSPARSE_INT8_ATTR HWY_INLINE void interleaved_groups_by(const std::byte* HWY_RESTRICT base, std::size_t blocks,
                                                          std::size_t g_begin, std::size_t g_end,
                                                          const std::int8_t* HWY_RESTRICT xq,
                                                          const float* HWY_RESTRICT xd,
                                                          const std::int32_t* HWY_RESTRICT xs, float* HWY_RESTRICT y,
                                                          std::size_t prefetch_bytes) {
  const std::size_t stride = blocks * interleaved_block<B>;
  std::size_t g = g_begin;
  for (; g + G <= g_end; g += G) {
    interleaved_dot_groups<B, G>(base + g * stride, blocks, xq, xd, xs, y + (g - g_begin) * interleaved_rows,
                                 prefetch_bytes);
  }
  for (; g < g_end; ++g) {
    interleaved_dot_groups<B, 1>(base + g * stride, blocks, xq, xd, xs, y + (g - g_begin) * interleaved_rows,
                                 prefetch_bytes);
  }
}

// Rows 16·g + i of W·x for the groups g in [g_begin, g_end), into y[16·(g − g_begin) + i].
template <class B>
ACTSPARSE_INT8_ATTR HWY_NOINLINE void interleaved_gemv_groups(const std::byte* HWY_RESTRICT base, std::size_t blocks,
                                                              std::size_t g_begin, std::size_t g_end,
                                                              const std::int8_t* HWY_RESTRICT xq,
                                                              const float* HWY_RESTRICT xd,
                                                              const std::int32_t* HWY_RESTRICT xs,
                                                              float* HWY_RESTRICT y, const kernel_tuning& t) {
  const std::size_t p = t.interleaved_prefetch_bytes;
  switch (t.interleaved_groups) {
    case 1:
      return interleaved_groups_by<B, 1>(base, blocks, g_begin, g_end, xq, xd, xs, y, p);
    case 2:
      return interleaved_groups_by<B, 2>(base, blocks, g_begin, g_end, xq, xd, xs, y, p);
    case 8:
      return interleaved_groups_by<B, 8>(base, blocks, g_begin, g_end, xq, xd, xs, y, p);
    default:
      return interleaved_groups_by<B, 4>(base, blocks, g_begin, g_end, xq, xd, xs, y, p);
  }
}

}  // namespace actsparse::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
