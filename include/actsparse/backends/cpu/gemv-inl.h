// Per-target GEMV kernels (Highway). Included once per target by foreach_target.h from
// actsparse/backends/cpu/implementation.hpp, or once for static dispatch.
// No #pragma once: the toggle guard below lets foreach_target.h re-include this file.

#if defined(ACTSPARSE_CPU_GEMV_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ACTSPARSE_CPU_GEMV_INL_H_
#undef ACTSPARSE_CPU_GEMV_INL_H_
#else
#define ACTSPARSE_CPU_GEMV_INL_H_
#endif

#include <actsparse/core/dtype.hpp>
#include <actsparse/core/views.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace actsparse::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Loads one vector of f32 from weights stored as T (f32, f16 or bf16).
template <class T, class DF>
HWY_INLINE hn::Vec<DF> load_as_f32(DF df, const T* HWY_RESTRICT p) {
  if constexpr (std::is_same_v<T, float>) {
    return hn::LoadU(df, p);
  } else if constexpr (std::is_same_v<T, f16>) {
    const hn::Rebind<hwy::float16_t, DF> dh;
    return hn::PromoteTo(df, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
  } else {  // bf16: the upper half of an f32, widened by a shift
    const hn::Rebind<std::uint16_t, DF> d16;
    const hn::Rebind<std::uint32_t, DF> d32;
    const auto bits = hn::PromoteTo(d32, hn::LoadU(d16, reinterpret_cast<const std::uint16_t*>(p)));
    return hn::BitCast(df, hn::ShiftLeft<16>(bits));
  }
}

template <class T>
HWY_INLINE float scalar_f32(const T& v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return to_f32(v);
  }
}

// R dot products w_r · x (r < R) in f32, sharing the loads of x across the R rows (R rows
// are R streams read at once, which the prefetchers need to reach the read bandwidth).
// Every row is summed the same way whatever R is and whichever rows share the call: two
// vector accumulators over pairs of whole vectors, one more whole vector into the first,
// then a scalar tail (no masked loads: Highway 1.0.3 emulates them with full loads on some
// targets, which would read past the row). So a row's result depends only on the row,
// x, n and the target: a row gather of every row equals the dense GEMV bit for bit.
template <std::size_t R, class T>
HWY_INLINE void dot_rows(const T* const* HWY_RESTRICT w, const float* HWY_RESTRICT x, std::size_t n,
                         float* HWY_RESTRICT out) {
  const hn::ScalableTag<float> df;
  using V = hn::Vec<decltype(df)>;
  const std::size_t lanes = hn::Lanes(df);
  V a0[R];
  V a1[R];
  for (std::size_t r = 0; r < R; ++r) a0[r] = a1[r] = hn::Zero(df);
  std::size_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    const V x0 = hn::LoadU(df, x + i);
    const V x1 = hn::LoadU(df, x + i + lanes);
    for (std::size_t r = 0; r < R; ++r) {
      a0[r] = hn::MulAdd(load_as_f32(df, w[r] + i), x0, a0[r]);
      a1[r] = hn::MulAdd(load_as_f32(df, w[r] + i + lanes), x1, a1[r]);
    }
  }
  if (i + lanes <= n) {
    const V x0 = hn::LoadU(df, x + i);
    for (std::size_t r = 0; r < R; ++r) a0[r] = hn::MulAdd(load_as_f32(df, w[r] + i), x0, a0[r]);
    i += lanes;
  }
  for (std::size_t r = 0; r < R; ++r) {
    float total = hn::GetLane(hn::SumOfLanes(df, hn::Add(a0[r], a1[r])));
    for (std::size_t k = i; k < n; ++k)
      total = std::fma(scalar_f32(w[r][k]), x[k], total);  // fixed: no contraction choice
    out[r] = total;
  }
}

// Rows computed together: four streams per thread.
inline constexpr std::size_t rows_at_once = 4;

// y[k] = W[row_k, :] · x for k in [begin, end), row_k = rows ? rows[k] : k.
template <class T>
HWY_NOINLINE void gemv_range(const weight_view& w, const std::uint32_t* rows, std::size_t begin, std::size_t end,
                             const float* HWY_RESTRICT x, float* HWY_RESTRICT y) {
  const auto* base = static_cast<const std::byte*>(w.data);
  const auto row = [&](std::size_t k) {
    const std::size_t r = rows != nullptr ? rows[k] : k;
    return reinterpret_cast<const T*>(base + r * w.row_stride);
  };
  std::size_t k = begin;
  for (; k + rows_at_once <= end; k += rows_at_once) {
    const T* group[rows_at_once] = {row(k), row(k + 1), row(k + 2), row(k + 3)};
    dot_rows<rows_at_once>(group, x, w.cols, y + k);
  }
  for (; k < end; ++k) {
    const T* one[1] = {row(k)};
    dot_rows<1>(one, x, w.cols, y + k);
  }
}

// The entry point each target exports: dispatches on the weight dtype (f32, f16, bf16).
inline void gemv_rows(const weight_view& w, const std::uint32_t* rows, std::size_t begin, std::size_t end,
                      const float* x, float* y) {
  switch (w.type) {
    case dtype::f32:
      return gemv_range<float>(w, rows, begin, end, x, y);
    case dtype::f16:
      return gemv_range<f16>(w, rows, begin, end, x, y);
    case dtype::bf16:
      return gemv_range<bf16>(w, rows, begin, end, x, y);
    case dtype::q8_0:
    case dtype::q4_0:
      break;  // not handled yet: the backend's can_implement says so
  }
}

}  // namespace actsparse::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // toggle guard
