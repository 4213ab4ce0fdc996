// AVX2 integer kernels of int8-inl.h (AVX2, and AVX3 without VNNI).
// Included by int8-inl.h for the targets it names, once per such target (no guard of its own,
// no #pragma once). Defines ACTSPARSE_INT8_ATTR, int8_kernel (the integer block products, see
// int8-inl.h) and interleaved_gemv_groups (the interleaved GEMV's body) for these targets.

HWY_BEFORE_NAMESPACE();
namespace actsparse::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// AVX2 (also run by AVX3 without VNNI): one block per 256-bit vector. q8_0: vpmaddubsw takes
// u8 × s8, so |q_w| times sign(q_w)·q_x (the sign trick: pairs of products <= 2·128·127, no
// saturation); q4_0: the nibbles n = q + 8 times q_x, and −8·Σ q_x per lane added back. Then
// vpmaddwd by 1 sums the pairs: each lane exactly Σ_{4 values} q_w·q_x.
#define ACTSPARSE_INT8_ATTR

struct int8_kernel {
  static constexpr const char* name = "avx2";  // vpmaddubsw + vpmaddwd
  using acc_type = __m256;
  static constexpr std::size_t unit = 1;
  struct x_unit {
    __m256i q;     // q_x
    __m256i corr;  // q4_0: −8·(sum of the lane's 4 values of q_x)
    __m256 dx;
  };

  static HWY_INLINE __m256 zero() { return _mm256_setzero_ps(); }

  template <class B, bool Single>
  static HWY_INLINE x_unit prepare(const std::int8_t* xq, const float* xd, std::size_t b) {
    x_unit u;
    u.q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xq + b * values_per_block));
    u.dx = _mm256_set1_ps(xd[b]);
    if constexpr (std::is_same_v<B, block_q4_0>) {
      const __m256i sum = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(8), u.q), _mm256_set1_epi16(1));
      u.corr = _mm256_sub_epi32(_mm256_setzero_si256(), sum);
    } else {
      u.corr = _mm256_setzero_si256();
    }
    return u;
  }

  template <class B, bool Single>
  static HWY_INLINE __m256 dot(const B* HWY_RESTRICT blk, const x_unit& u, const float* HWY_RESTRICT scales,
                               __m256 acc) {
    const __m256i xv = u.q;
    __m256i pairs;
    if constexpr (std::is_same_v<B, block_q8_0>) {
      const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs));
      pairs = _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(xv, wv));
    } else {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs));
      const __m256i nibbles = _mm256_and_si256(
          _mm256_inserti128_si256(_mm256_castsi128_si256(v), _mm_srli_epi16(v, 4), 1), _mm256_set1_epi8(0x0f));
      pairs = _mm256_maddubs_epi16(nibbles, xv);
    }
    __m256i sums = _mm256_madd_epi16(pairs, _mm256_set1_epi16(1));
    if constexpr (std::is_same_v<B, block_q4_0>) sums = _mm256_add_epi32(sums, u.corr);
    const __m256 s = _mm256_mul_ps(_mm256_set1_ps(scales[blk->d.bits]), u.dx);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), s, acc);
  }

  static HWY_INLINE float reduce(__m256 acc) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
};

// Rows 16·g + i of W·x for the groups g in [g_begin, g_end), into y[16·(g − g_begin) + i].
template <class B>
ACTSPARSE_INT8_ATTR HWY_NOINLINE void interleaved_gemv_groups(const std::byte* HWY_RESTRICT base, std::size_t blocks,
                                                              std::size_t g_begin, std::size_t g_end,
                                                              const std::int8_t* HWY_RESTRICT xq,
                                                              const float* HWY_RESTRICT xd,
                                                              const std::int32_t* HWY_RESTRICT xs,
                                                              float* HWY_RESTRICT y, const kernel_tuning& t) {
  // Eight rows (half a chunk) per 256-bit vector. q4_0: vpmaddubsw pairs of nibble × q_x
  // (<= 15·127 each, so the sum of 8 pair sums, <= 30480, stays in int16), then vpmaddwd by 1;
  // −8·xs[b] added. q8_0: the sign trick (|q_w| × sign(q_w)·q_x, pairs <= 2·128·127) and
  // vpmaddwd per chunk. Each lane exactly D_b of its row.
  constexpr bool q4 = std::is_same_v<B, block_q4_0>;
  constexpr std::size_t bytes = interleaved_block<B>;
  const __m256i low = _mm256_set1_epi8(0x0f);
  const __m256i ones = _mm256_set1_epi16(1);
  for (std::size_t g = g_begin; g < g_end; ++g) {
    const std::byte* p = base + g * blocks * bytes;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (std::size_t b = 0; b < blocks; ++b, p += bytes) {
      for (std::size_t o = 0; o < bytes; o += 64) prefetch_line(p + t.interleaved_prefetch_bytes + o);
      const std::int8_t* xb = xq + b * values_per_block;
      const __m256 dx = _mm256_set1_ps(xd[b]);
      for (std::size_t h = 0; h < 2; ++h) {
        __m256i sums;
        if constexpr (q4) {
          __m256i pairs = _mm256_setzero_si256();
          for (std::size_t c = 0; c < 4; ++c) {
            const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 + 64 * c + 32 * h));
            std::int32_t x0;
            std::int32_t x1;
            std::memcpy(&x0, xb + 8 * c, 4);
            std::memcpy(&x1, xb + 8 * c + 4, 4);
            pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(_mm256_and_si256(raw, low), _mm256_set1_epi32(x0)));
            pairs = _mm256_add_epi16(
                pairs, _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(raw, 4), low), _mm256_set1_epi32(x1)));
          }
          sums = _mm256_add_epi32(_mm256_madd_epi16(pairs, ones), _mm256_set1_epi32(-8 * xs[b]));
        } else {
          sums = _mm256_setzero_si256();
          for (std::size_t c = 0; c < 8; ++c) {
            const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 + 64 * c + 32 * h));
            std::int32_t x0;
            std::memcpy(&x0, xb + 4 * c, 4);
            const __m256i pairs =
                _mm256_maddubs_epi16(_mm256_sign_epi8(wv, wv), _mm256_sign_epi8(_mm256_set1_epi32(x0), wv));
            sums = _mm256_add_epi32(sums, _mm256_madd_epi16(pairs, ones));
          }
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16 * h)));
        acc[h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(dw, dx), acc[h]);
      }
    }
    _mm256_storeu_ps(y + (g - g_begin) * interleaved_rows, acc[0]);
    _mm256_storeu_ps(y + (g - g_begin) * interleaved_rows + 8, acc[1]);
  }
}

}  // namespace actsparse::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
