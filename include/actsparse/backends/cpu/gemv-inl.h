// Per-target GEMV kernels (Highway): row dot products (dense / output-sparse) and row axpy
// over a transposed matrix (input-sparse). Included once per target by foreach_target.h from
// actsparse/backends/cpu/implementation.hpp, or once for static dispatch.
// No #pragma once: the toggle guard below lets foreach_target.h re-include this file.

#if defined(ACTSPARSE_CPU_GEMV_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ACTSPARSE_CPU_GEMV_INL_H_
#undef ACTSPARSE_CPU_GEMV_INL_H_
#else
#define ACTSPARSE_CPU_GEMV_INL_H_
#endif

#include <actsparse/backends/cpu/quant-inl.h>
#include <actsparse/core/dtype.hpp>
#include <actsparse/core/views.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

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
      return gemv_block_range<block_q8_0>(w, rows, begin, end, x, y);
    case dtype::q4_0:
      return gemv_block_range<block_q4_0>(w, rows, begin, end, x, y);
  }
}

// y[c] = Σ_{j} coef[j] · Wt[row_j, c] for c in [col_begin, col_end), rows j = rows ? rows[k] :
// k for k < count, in that order. Every output element is the chain acc = fma(Wt[j, c],
// coef_j, acc) over j in order from acc = 0, whatever the target or the column split: the
// same chain as the reference's input-sparse linear, so the two agree bit for bit on targets
// with a fused multiply-add (see fused_multiply_add).
template <class T>
HWY_NOINLINE void axpy_range(const weight_view& wt, const std::uint32_t* rows, std::size_t count,
                             const float* HWY_RESTRICT coef, std::size_t col_begin, std::size_t col_end,
                             float* HWY_RESTRICT y) {
  const hn::ScalableTag<float> df;
  const std::size_t lanes = hn::Lanes(df);
  const auto* base = static_cast<const std::byte*>(wt.data);
  float* HWY_RESTRICT out = y + col_begin;
  const std::size_t n = col_end - col_begin;
  for (std::size_t c = 0; c < n; ++c) out[c] = 0.0F;
  const auto row = [&](std::size_t k) {
    const std::size_t j = rows != nullptr ? rows[k] : k;
    return std::pair{reinterpret_cast<const T*>(base + j * wt.row_stride) + col_begin, coef[j]};
  };
  std::size_t k = 0;
  // Four rows per sweep: four streams, and one load and store of the outputs per four
  // multiply-adds; each output still takes the rows one after another, in order.
  for (; k + 4 <= count; k += 4) {
    const auto [w0, c0] = row(k);
    const auto [w1, c1] = row(k + 1);
    const auto [w2, c2] = row(k + 2);
    const auto [w3, c3] = row(k + 3);
    const auto v0 = hn::Set(df, c0);
    const auto v1 = hn::Set(df, c1);
    const auto v2 = hn::Set(df, c2);
    const auto v3 = hn::Set(df, c3);
    std::size_t c = 0;
    for (; c + lanes <= n; c += lanes) {
      auto acc = hn::LoadU(df, out + c);
      acc = hn::MulAdd(load_as_f32(df, w0 + c), v0, acc);
      acc = hn::MulAdd(load_as_f32(df, w1 + c), v1, acc);
      acc = hn::MulAdd(load_as_f32(df, w2 + c), v2, acc);
      acc = hn::MulAdd(load_as_f32(df, w3 + c), v3, acc);
      hn::StoreU(acc, df, out + c);
    }
    for (; c < n; ++c) {
      float acc = out[c];
      acc = std::fma(scalar_f32(w0[c]), c0, acc);
      acc = std::fma(scalar_f32(w1[c]), c1, acc);
      acc = std::fma(scalar_f32(w2[c]), c2, acc);
      out[c] = std::fma(scalar_f32(w3[c]), c3, acc);
    }
  }
  for (; k < count; ++k) {
    const auto [w, cj] = row(k);
    const auto vc = hn::Set(df, cj);
    std::size_t c = 0;
    for (; c + lanes <= n; c += lanes) {
      hn::StoreU(hn::MulAdd(load_as_f32(df, w + c), vc, hn::LoadU(df, out + c)), df, out + c);
    }
    for (; c < n; ++c) out[c] = std::fma(scalar_f32(w[c]), cj, out[c]);
  }
}

// The entry point each target exports for the input-sparse linear (f32, f16, bf16).
inline void axpy_rows(const weight_view& wt, const std::uint32_t* rows, std::size_t count, const float* coef,
                      std::size_t col_begin, std::size_t col_end, float* y) {
  switch (wt.type) {
    case dtype::f32:
      return axpy_range<float>(wt, rows, count, coef, col_begin, col_end, y);
    case dtype::f16:
      return axpy_range<f16>(wt, rows, count, coef, col_begin, col_end, y);
    case dtype::bf16:
      return axpy_range<bf16>(wt, rows, count, coef, col_begin, col_end, y);
    case dtype::q8_0:
      return axpy_block_range<block_q8_0>(wt, rows, count, coef, col_begin, col_end, y);
    case dtype::q4_0:
      return axpy_block_range<block_q4_0>(wt, rows, count, coef, col_begin, col_end, y);
  }
}

// Whether this target's MulAdd is one fused rounding (AVX2, AVX3, NEON, ...). Where it is
// not (SSE4, SSSE3, SCALAR) products are rounded before the add, and the row axpy agrees
// with the reference within the f32 bound instead of bit for bit.
inline bool fused_multiply_add() { return HWY_NATIVE_FMA != 0; }

}  // namespace actsparse::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // toggle guard
