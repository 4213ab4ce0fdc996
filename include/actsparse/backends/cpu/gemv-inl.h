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

#include <cstddef>
#include <cstdint>

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

// dot(w[0, n), x[0, n)) in f32: four independent accumulators over whole vectors, then a
// scalar tail (no masked loads: Highway 1.0.3 emulates them with full loads on some
// targets, which would read past the row). The order depends only on n and the target.
template <class T>
HWY_NOINLINE float dot_row(const T* HWY_RESTRICT w, const float* HWY_RESTRICT x, std::size_t n) {
  const hn::ScalableTag<float> df;
  const std::size_t lanes = hn::Lanes(df);
  auto a0 = hn::Zero(df);
  auto a1 = hn::Zero(df);
  auto a2 = hn::Zero(df);
  auto a3 = hn::Zero(df);
  std::size_t i = 0;
  for (; i + 4 * lanes <= n; i += 4 * lanes) {
    a0 = hn::MulAdd(load_as_f32(df, w + i), hn::LoadU(df, x + i), a0);
    a1 = hn::MulAdd(load_as_f32(df, w + i + lanes), hn::LoadU(df, x + i + lanes), a1);
    a2 = hn::MulAdd(load_as_f32(df, w + i + 2 * lanes), hn::LoadU(df, x + i + 2 * lanes), a2);
    a3 = hn::MulAdd(load_as_f32(df, w + i + 3 * lanes), hn::LoadU(df, x + i + 3 * lanes), a3);
  }
  for (; i + lanes <= n; i += lanes) a0 = hn::MulAdd(load_as_f32(df, w + i), hn::LoadU(df, x + i), a0);
  const auto sum = hn::Add(hn::Add(a0, a1), hn::Add(a2, a3));
  float total = hn::GetLane(hn::SumOfLanes(df, sum));
  for (; i < n; ++i) total += scalar_f32(w[i]) * x[i];
  return total;
}

// y[k] = W[row_k, :] · x for k in [begin, end), row_k = rows ? rows[k] : k.
template <class T>
void gemv_range(const weight_view& w, const std::uint32_t* rows, std::size_t begin, std::size_t end,
                const float* HWY_RESTRICT x, float* HWY_RESTRICT y) {
  const auto* base = static_cast<const std::byte*>(w.data);
  for (std::size_t k = begin; k < end; ++k) {
    const std::size_t r = rows != nullptr ? rows[k] : k;
    y[k] = dot_row(reinterpret_cast<const T*>(base + r * w.row_stride), x, w.cols);
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
