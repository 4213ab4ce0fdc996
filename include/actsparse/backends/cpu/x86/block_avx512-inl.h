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
HWY_DIAGNOSTICS(pop)

}  // namespace actsparse::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
