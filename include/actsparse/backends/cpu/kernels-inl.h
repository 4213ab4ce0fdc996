// The root of the CPU backend's per-target code (HWY_TARGET_INCLUDE of implementation.hpp):
// it includes every per-target file and defines the entry points each target exports, which
// dispatch on the weight dtype through target_kernels<T>, one entry per dtype (the per-target
// half of dtypes.hpp's kernel_support). Included once per target by foreach_target.h, or once
// for static dispatch.
//   rows-inl.h        f32 / f16 / bf16 rows: GEMV and row axpy with f32 x
//   block-inl.h       q8_0 / q4_0 blocks: GEMV and row axpy with f32 x
//   int8-inl.h        q8_0 / q4_0 on x quantized to 8-bit blocks, row-major and interleaved
//   columns-inl.h     the down projection over a q8_0 / q4_0 W_down in column blocks
//   activation-inl.h  SiLU / GELU / ReLU over a vector
//   attention-inl.h   decode attention over KV rows of any row_format
//   selection-inl.h   the selectors' passes this target installs
// No #pragma once: the toggle guard below lets foreach_target.h re-include this file.

#if defined(ACTSPARSE_CPU_KERNELS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ACTSPARSE_CPU_KERNELS_INL_H_
#undef ACTSPARSE_CPU_KERNELS_INL_H_
#else
#define ACTSPARSE_CPU_KERNELS_INL_H_
#endif

#include <actsparse/backends/cpu/activation-inl.h>
#include <actsparse/backends/cpu/block-inl.h>
#include <actsparse/backends/cpu/int8-inl.h>
#include <actsparse/backends/cpu/rows-inl.h>
#include <actsparse/backends/cpu/selection-inl.h>
// After rows-inl.h and block-inl.h: it uses their loaders.
#include <actsparse/backends/cpu/attention-inl.h>
#include <actsparse/backends/cpu/columns-inl.h>
#include <actsparse/backends/cpu/dtypes.hpp>
#include <actsparse/backends/cpu/layouts.hpp>
#include <actsparse/backends/cpu/tuning.hpp>
#include <actsparse/core/dtype.hpp>
#include <actsparse/core/views.hpp>

#include <cstddef>
#include <cstdint>

#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace actsparse::cpu::HWY_NAMESPACE {

// This target's kernels per dtype: gemv (f32 x), axpy (f32 coefficients), and where the dtype
// has them the integer GEMV on quantized x and the interleaved GEMV.
template <class T>
struct target_kernels {};
template <class T>
struct row_kernels {
  static constexpr auto gemv = &gemv_range<T>;
  static constexpr auto gemm = &gemm_range<T>;
  static constexpr auto axpy = &axpy_range<T>;
  static constexpr auto axpy_tokens = &axpy_tokens_range<T>;
};
template <class B>
struct block_kernels {
  static constexpr auto gemv = &gemv_block_range<B>;
  static constexpr auto axpy = &axpy_block_range<B>;
  static constexpr auto axpy_tokens = &axpy_block_tokens_range<B>;
  static constexpr auto int8_gemv = &int8_gemv_range<B>;
  static constexpr auto int8_gemm = &int8_gemm_range<B>;
  static constexpr auto interleaved_gemv = &interleaved_gemv_range<B>;
};
template <>
struct target_kernels<float> : row_kernels<float> {};
template <>
struct target_kernels<f16> : row_kernels<f16> {};
template <>
struct target_kernels<bf16> : row_kernels<bf16> {};
template <>
struct target_kernels<block_q8_0> : block_kernels<block_q8_0> {};
template <>
struct target_kernels<block_q4_0> : block_kernels<block_q4_0> {};

// Each entry offers exactly what dtypes.hpp says it does.
template <class... T>
constexpr bool entries_agree(type_list<T...> /*types*/) {
  return ((kernel_support<T>::f32_activations == requires { target_kernels<T>::gemv; }) && ...) &&
         ((kernel_support<T>::int8_activations == requires { target_kernels<T>::int8_gemv; }) && ...) &&
         ((kernel_support<T>::interleaved == requires { target_kernels<T>::interleaved_gemv; }) && ...);
}
static_assert(entries_agree(storage_types{}), "cpu: target_kernels and kernel_support (dtypes.hpp) disagree");

// ---- The entry points each target exports (implementation.hpp checks the arguments) --------

inline void gemv_rows(const weight_view& w, const std::uint32_t* rows, std::size_t begin, std::size_t end,
                      const float* x, float* y, const kernel_tuning& t) {
  visit_dtype(w.type, [&](auto tag) {
    using K = target_kernels<typename decltype(tag)::type>;
    if constexpr (requires { K::gemv; }) K::gemv(w, rows, begin, end, x, y, t);
  });
}

inline void gemm_rows(const weight_view& w, const std::uint32_t* rows, std::size_t begin, std::size_t end,
                      const float* const* x, std::size_t count, float* const* y) {
  visit_dtype(w.type, [&](auto tag) {
    using K = target_kernels<typename decltype(tag)::type>;
    if constexpr (requires { K::gemm; }) K::gemm(w, rows, begin, end, x, count, y);
  });
}

inline void axpy_rows(const weight_view& wt, const std::uint32_t* rows, std::size_t count, const float* coef,
                      std::size_t col_begin, std::size_t col_end, float* y, const kernel_tuning& t) {
  visit_dtype(wt.type, [&](auto tag) {
    using K = target_kernels<typename decltype(tag)::type>;
    if constexpr (requires { K::axpy; }) K::axpy(wt, rows, count, coef, col_begin, col_end, y, t);
  });
}

inline void axpy_tokens(const weight_view& wt, const std::uint32_t* rows, const std::size_t* first, std::size_t chunks,
                        const float* const* coef, std::size_t count, std::size_t col_begin, std::size_t col_end,
                        float* const* y) {
  visit_dtype(wt.type, [&](auto tag) {
    using K = target_kernels<typename decltype(tag)::type>;
    if constexpr (requires { K::axpy_tokens; }) {
      K::axpy_tokens(wt, rows, first, chunks, coef, count, col_begin, col_end, y);
    }
  });
}

inline void gemv_rows_q8x(const weight_view& w, const std::uint32_t* rows, std::size_t begin, std::size_t end,
                          const std::int8_t* xq, const float* xd, float* y, const kernel_tuning& t) {
  visit_dtype(w.type, [&](auto tag) {
    using K = target_kernels<typename decltype(tag)::type>;
    if constexpr (requires { K::int8_gemv; }) K::int8_gemv(w, rows, begin, end, xq, xd, y, t);
  });
}

inline void gemm_rows_q8x(const weight_view& w, const std::uint32_t* rows, std::size_t begin, std::size_t end,
                          const std::int8_t* const* xq, const float* const* xd, std::size_t count, float* const* y) {
  visit_dtype(w.type, [&](auto tag) {
    using K = target_kernels<typename decltype(tag)::type>;
    if constexpr (requires { K::int8_gemm; }) K::int8_gemm(w, rows, begin, end, xq, xd, count, y);
  });
}

inline void gemv_rows_interleaved(const interleaved_view& w, std::size_t begin, std::size_t end, const std::int8_t* xq,
                                  const float* xd, const std::int32_t* xs, float* y, const kernel_tuning& t) {
  visit_dtype(w.type, [&](auto tag) {
    using K = target_kernels<typename decltype(tag)::type>;
    if constexpr (requires { K::interleaved_gemv; }) K::interleaved_gemv(w, begin, end, xq, xd, xs, y, t);
  });
}

inline void column_blocks_down(const column_blocks_view& w, const std::uint32_t* kept, std::size_t count,
                               const float* h, std::size_t begin, std::size_t end, float* y) {
  if (w.type == dtype::q8_0) {
    column_blocks_range<block_q8_0>(w, kept, count, h, begin, end, y);
  } else {
    column_blocks_range<block_q4_0>(w, kept, count, h, begin, end, y);
  }
}

}  // namespace actsparse::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // toggle guard
