// AVX-512 versions of the selectors' index-order passes (core/selection_passes.hpp), 16 scores
// per step: the keep test as one vector compare into a mask, the kept indices or scores
// written by a compress-store, and the mass as eight double lanes in one register (lane k adds
// the scores whose index is k mod 8, in ascending index order: the order of the portable
// passes, so every result has the same bits). The keep test is data dependent: the portable
// branch-free loops store every index and add 0.0 for each dropped score; here a mask does it.
// Included by selection-inl.h for AVX3 targets and better, once per such target (no guard of
// its own, no #pragma once).

HWY_BEFORE_NAMESPACE();
namespace actsparse::cpu::HWY_NAMESPACE {
namespace avx512_selection {

using ::actsparse::detail::combine_lanes;
using ::actsparse::detail::mass_lanes;

// The order key of each lane's float bits (key_of_bits), or the raw bits for a positive
// bracket (the callers fold the offset into their bounds).
template <bool Positive>
HWY_INLINE __m512i keys(__m512i u) noexcept {
  if constexpr (Positive) {
    return u;
  } else {
    const __m512i sign = _mm512_maskz_srai_epi32(static_cast<__mmask16>(0xFFFF), u, 31);
    const __m512i magnitude = _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF));
    const __m512i flipped = _mm512_sub_epi32(_mm512_xor_si512(magnitude, sign), sign);
    return _mm512_add_epi32(flipped, _mm512_set1_epi32(static_cast<int>(0x80000000U)));
  }
}

// acc (lane k) += the lanes of v (16 scores from an index that is a multiple of 16) selected
// by m: the first 8 go to lanes 0..7, then the next 8, so each lane adds in index order.
// (Here and in keys: the maskz forms. GCC 12 warns, falsely, that the unmasked ones read an
// undefined value.)
HWY_INLINE __m512d add_lanes(__m512d acc, __m512 v, __mmask16 m) noexcept {
  const auto all = static_cast<__mmask8>(0xFF);
  const __m512d low = _mm512_maskz_cvtps_pd(all, _mm512_maskz_extractf32x8_ps(all, v, 0));
  const __m512d high = _mm512_maskz_cvtps_pd(all, _mm512_maskz_extractf32x8_ps(all, v, 1));
  acc = _mm512_mask_add_pd(acc, static_cast<__mmask8>(m), acc, low);
  return _mm512_mask_add_pd(acc, static_cast<__mmask8>(m >> 8), acc, high);
}

HWY_INLINE std::uint32_t or_lanes(__m512i v) noexcept {
  alignas(64) std::uint32_t l[16];
  _mm512_store_si512(l, v);
  std::uint32_t r = 0;
  for (const std::uint32_t x : l) r |= x;
  return r;
}

HWY_INLINE double lane_total(__m512d acc) noexcept {
  alignas(64) double l[mass_lanes];
  _mm512_store_pd(l, acc);
  return combine_lanes(l);
}

HWY_INLINE __mmask16 first(std::size_t count) noexcept { return static_cast<__mmask16>((1U << count) - 1U); }

// step(16 scores, the mask of those that exist) over v in index order; the last step's
// missing scores are loaded as 0.
template <class Step>
HWY_INLINE void for_each_vector(std::span<const float> v, Step&& step) noexcept {
  const std::size_t n = v.size();
  std::size_t i = 0;
  for (; i + 16 <= n; i += 16) step(_mm512_loadu_ps(v.data() + i), static_cast<__mmask16>(0xFFFF));
  if (i < n) {
    const __mmask16 valid = first(n - i);
    step(_mm512_maskz_loadu_ps(valid, v.data() + i), valid);
  }
}

using gather_result = selection_passes::gather_result;
using scan_result = selection_passes::scan_result;
using emit_result = selection_passes::emit_result;

// sum_and_gather: (Total) the lane sum of every score, the scores whose key - lo <= width
// (unsigned) compressed to dst in index order, (Sign) the OR of every score's bits.
template <bool Total, bool Sign, bool Positive>
gather_result sum_and_gather(const float* scores, std::size_t n, std::uint32_t lo, std::uint32_t width,
                             float* dst) noexcept {
  const std::span<const float> v(scores, n);
  const __m512i lov = _mm512_set1_epi32(static_cast<int>(lo));
  const __m512i widthv = _mm512_set1_epi32(static_cast<int>(width));
  __m512d acc = _mm512_setzero_pd();
  __m512i bits = _mm512_setzero_si512();
  std::size_t m = 0;
  const auto step = [&](__m512 x, __mmask16 valid) {
    const __m512i u = _mm512_castps_si512(x);
    if constexpr (Total) acc = add_lanes(acc, x, valid);
    if constexpr (Sign) bits = _mm512_or_si512(bits, u);  // invalid lanes were loaded as 0
    const __mmask16 in =
        _mm512_mask_cmp_epu32_mask(valid, _mm512_sub_epi32(keys<Positive>(u), lov), widthv, _MM_CMPINT_LE);
    _mm512_mask_compressstoreu_ps(dst + m, in, x);
    m += static_cast<std::size_t>(__builtin_popcount(in));
  };
  for_each_vector(v, step);
  return {lane_total(acc), m, or_lanes(bits)};
}

// scan_scores: the lane sum of every score and the largest bit pattern.
inline scan_result scan(const float* scores, std::size_t n) noexcept {
  const std::span<const float> v(scores, n);
  __m512d acc = _mm512_setzero_pd();
  __m512i top = _mm512_setzero_si512();
  const auto step = [&](__m512 x, __mmask16 valid) {
    acc = add_lanes(acc, x, valid);
    top = _mm512_maskz_max_epu32(static_cast<__mmask16>(0xFFFF), top, _mm512_castps_si512(x));  // missing: 0
  };
  for_each_vector(v, step);
  alignas(64) std::uint32_t l[16];
  _mm512_store_si512(l, top);
  std::uint32_t r = 0;
  for (const std::uint32_t x : l) r = x > r ? x : r;
  return {lane_total(acc), r};
}

// The indices whose key is >= tk (Strict: > tk) in index order to dst; their count and the
// lane sum of their scores.
template <bool Positive, bool Strict>
emit_result emit_above(const float* scores, std::size_t n, std::uint32_t tk, std::uint32_t* dst) noexcept {
  const std::span<const float> s(scores, n);
  // The keys of bracket_key: a positive bracket's are the raw bits with the top bit flipped.
  const __m512i tkv = _mm512_set1_epi32(static_cast<int>(tk));
  const __m512i flip = _mm512_set1_epi32(Positive ? static_cast<int>(0x80000000U) : 0);
  __m512i index = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i sixteen = _mm512_set1_epi32(16);
  __m512d acc = _mm512_setzero_pd();
  std::size_t count = 0;
  const auto step = [&](__m512 x, __mmask16 valid) {
    const __m512i k = _mm512_xor_si512(keys<Positive>(_mm512_castps_si512(x)), flip);
    const __mmask16 keep = _mm512_mask_cmp_epu32_mask(valid, k, tkv, Strict ? _MM_CMPINT_NLE : _MM_CMPINT_NLT);
    _mm512_mask_compressstoreu_epi32(dst + count, keep, index);
    count += static_cast<std::size_t>(__builtin_popcount(keep));
    acc = add_lanes(acc, x, keep);
    index = _mm512_add_epi32(index, sixteen);
  };
  for_each_vector(s, step);
  return {count, lane_total(acc)};
}

}  // namespace avx512_selection

// The table this target installs.
inline const selection_passes* selection_table() {
  namespace a = avx512_selection;
  static const selection_passes table = [] {
    selection_passes t;
    t.scan = &a::scan;
    t.sum_and_gather[0][0][0] = &a::sum_and_gather<false, false, false>;
    t.sum_and_gather[0][0][1] = &a::sum_and_gather<false, false, true>;
    t.sum_and_gather[0][1][0] = &a::sum_and_gather<false, true, false>;
    t.sum_and_gather[0][1][1] = &a::sum_and_gather<false, true, true>;
    t.sum_and_gather[1][0][0] = &a::sum_and_gather<true, false, false>;
    t.sum_and_gather[1][0][1] = &a::sum_and_gather<true, false, true>;
    t.sum_and_gather[1][1][0] = &a::sum_and_gather<true, true, false>;
    t.sum_and_gather[1][1][1] = &a::sum_and_gather<true, true, true>;
    t.emit_above[0][0] = &a::emit_above<false, false>;
    t.emit_above[0][1] = &a::emit_above<false, true>;
    t.emit_above[1][0] = &a::emit_above<true, false>;
    t.emit_above[1][1] = &a::emit_above<true, true>;
    return t;
  }();
  return &table;
}

}  // namespace actsparse::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
