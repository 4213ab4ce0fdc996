// AVX-512 part of block-inl.h (included from it, for AVX3 targets and better, once per such
// target: no guard of its own, no #pragma once).

HWY_BEFORE_NAMESPACE();
namespace actsparse::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The 32 entries of a q4_0 block looked up in `table` (16 f32 lanes, entry n for nibble n):
// values [0, 16) from the low nibbles, [16, 32) from the high ones. vpermps reads only the
// low 4 bits of each index, so the zero-extended bytes index the low nibbles as they are:
// no mask (Highway's TableLookupLanes requires indices below 16, hence the intrinsics).
// GCC 12 warns falsely on the intrinsics' undefined inputs (as in the integer kernels below).
HWY_DIAGNOSTICS(push)
#if HWY_COMPILER_GCC_ACTUAL
HWY_DIAGNOSTICS_OFF(disable : 4701, ignored "-Wuninitialized")
HWY_DIAGNOSTICS_OFF(disable : 4703 6001 26494, ignored "-Wmaybe-uninitialized")
#endif
template <class V>
HWY_INLINE void q4_lookup_bytes(V table, const std::uint8_t* HWY_RESTRICT qs, V& lo, V& hi) {
  static_assert(sizeof(table.raw) == 64, "q4_lookup takes vectors of 16 f32 lanes");
  const __m512i bytes = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  lo = V{_mm512_permutexvar_ps(bytes, table.raw)};
  hi = V{_mm512_permutexvar_ps(_mm512_srli_epi32(bytes, 4), table.raw)};
}
template <class V>
HWY_INLINE void q4_lookup(V table, const block_q4_0* HWY_RESTRICT b, V& lo, V& hi) {
  q4_lookup_bytes(table, b->qs, lo, hi);
}

// The sum of a vector's 16 f32 lanes by halving: x[i] + x[i + 8], then + 4, + 2, + 1 (lane 0).
template <class V>
HWY_INLINE float sum_lanes16(V v) {
  static_assert(sizeof(v.raw) == 64, "sum_lanes16 takes vectors of 16 f32 lanes");
  const __m256 a = _mm256_add_ps(_mm512_castps512_ps256(v.raw), _mm512_extractf32x8_ps(v.raw, 1));
  const __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
  const __m128 c = _mm_add_ps(b, _mm_permute_ps(b, 0x4E));
  return _mm_cvtss_f32(_mm_add_ps(c, _mm_permute_ps(c, 0xB1)));
}
// sum_lanes16 of four vectors at once, the same additions in the same order (so the same bits),
// transposed: 8 shuffles and 6 additions instead of four reductions. out[k] = sum_lanes16(vk).
template <class V>
HWY_INLINE void sum_lanes16x4(V v0, V v1, V v2, V v3, float* HWY_RESTRICT out) {
  static_assert(sizeof(v0.raw) == 64, "sum_lanes16x4 takes vectors of 16 f32 lanes");
  // Quarters [q0 + q2, q1 + q3] of v0, then of v1: x[i] + x[i + 8].
  const __m512 t01 =
      _mm512_add_ps(_mm512_shuffle_f32x4(v0.raw, v1.raw, 0x44), _mm512_shuffle_f32x4(v0.raw, v1.raw, 0xEE));
  const __m512 t23 =
      _mm512_add_ps(_mm512_shuffle_f32x4(v2.raw, v3.raw, 0x44), _mm512_shuffle_f32x4(v2.raw, v3.raw, 0xEE));
  // Quarter k: vector k's (x[i] + x[i + 8]) + (x[i + 4] + x[i + 12]).
  const __m512 u = _mm512_add_ps(_mm512_shuffle_f32x4(t01, t23, 0x88), _mm512_shuffle_f32x4(t01, t23, 0xDD));
  const __m512 c = _mm512_add_ps(u, _mm512_permute_ps(u, 0x4E));
  const __m512 d = _mm512_add_ps(c, _mm512_permute_ps(c, 0xB1));
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, d);
  out[0] = lanes[0];
  out[1] = lanes[4];
  out[2] = lanes[8];
  out[3] = lanes[12];
}
HWY_DIAGNOSTICS(pop)

}  // namespace actsparse::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
