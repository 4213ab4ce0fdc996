#pragma once
// Defines the CPU backend's kernels. Include this in exactly ONE translation unit of the
// program, first (before any other Highway header), after
//   #define ACTSPARSE_CPU_IMPLEMENTATION
// Dynamic dispatch (the default) compiles every Highway target (AVX3_DL included) and
// picks the best one the CPU supports at run time; it links hwy::hwy. Engines that build
// one binary per ISA (as ggml does) also define ACTSPARSE_CPU_STATIC_DISPATCH and compile
// this translation unit with that ISA's flags: only the static target is built.
// Without ACTSPARSE_CPU_IMPLEMENTATION this header defines nothing.

#ifdef ACTSPARSE_CPU_IMPLEMENTATION

#ifndef ACTSPARSE_CPU_STATIC_DISPATCH
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // AVX-512 VNNI / BF16 targets (Debian's Highway 1.0.3 skips them otherwise)
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "actsparse/backends/cpu/gemv-inl.h"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#endif

#include <actsparse/backends/cpu/gemv-inl.h>
#include <actsparse/backends/cpu/backend.hpp>

#include <hwy/highway.h>

#if HWY_ONCE
namespace actsparse::cpu {

#ifdef ACTSPARSE_CPU_STATIC_DISPATCH
#define ACTSPARSE_CPU_DISPATCH(f) HWY_STATIC_DISPATCH(f)
#else
HWY_EXPORT(gemv_rows);
HWY_EXPORT(axpy_rows);
HWY_EXPORT(fused_multiply_add);
HWY_EXPORT(quantize_q8_0_x);
HWY_EXPORT(gemv_rows_q8x);
HWY_EXPORT(gemv_rows_interleaved);
HWY_EXPORT(activate);
#define ACTSPARSE_CPU_DISPATCH(f) HWY_DYNAMIC_DISPATCH(f)
#endif

void dispatch_gemv_rows(const weight_view& w, const std::uint32_t* rows, std::size_t begin, std::size_t end,
                        const float* x, float* y) {
  ACTSPARSE_CPU_DISPATCH(gemv_rows)(w, rows, begin, end, x, y);
}
void dispatch_axpy_rows(const weight_view& wt, const std::uint32_t* rows, std::size_t count, const float* coef,
                        std::size_t col_begin, std::size_t col_end, float* y) {
  ACTSPARSE_CPU_DISPATCH(axpy_rows)(wt, rows, count, coef, col_begin, col_end, y);
}
bool dispatch_fused_multiply_add() { return ACTSPARSE_CPU_DISPATCH(fused_multiply_add)(); }
void dispatch_quantize_q8_0_x(const float* x, std::size_t n, std::int8_t* q, float* d) {
  detail::require(n % 32 == 0, "cpu::quantize_q8_0_x", "n", n, "a multiple of 32 (whole blocks of x)");
  ACTSPARSE_CPU_DISPATCH(quantize_q8_0_x)(x, n, q, d);
}
void dispatch_gemv_rows_q8x(const weight_view& w, const std::uint32_t* rows, std::size_t begin, std::size_t end,
                            const std::int8_t* xq, const float* xd, float* y) {
  constexpr std::string_view where = "cpu::gemv_rows_q8x";
  if (w.type != dtype::q8_0 && w.type != dtype::q4_0) {
    detail::fail(where, "w.type", name(w.type), "q8_0 or q4_0 (the weight dtypes of the integer GEMV)");
  }
  detail::require(w.cols % 32 == 0, where, "w.cols", w.cols, "a multiple of 32 (whole blocks)");
  ACTSPARSE_CPU_DISPATCH(gemv_rows_q8x)(w, rows, begin, end, xq, xd, y);
}
void dispatch_gemv_rows_interleaved(const weight_view& w, std::size_t begin, std::size_t end, const std::int8_t* xq,
                                    const float* xd, const std::int32_t* xs, float* y) {
  constexpr std::string_view where = "cpu::gemv_rows_interleaved";
  if (!has_interleaved(w)) {
    detail::fail(where, "w",
                 std::string(name(w.type)) + (w.interleaved == nullptr ? " without" : " with") + " an interleaved copy",
                 "q8_0 or q4_0 with weight_view::interleaved set (cpu::interleave_rows)");
  }
  detail::require(w.cols % 32 == 0, where, "w.cols", w.cols, "a multiple of 32 (whole blocks)");
  detail::require(begin % 16 == 0, where, "begin", begin, "a multiple of 16 (the first row of a group of 16)");
  detail::require(begin <= end && end <= w.rows, where, "end", end,
                  "in [begin, w.rows] = [" + std::to_string(begin) + ", " + std::to_string(w.rows) + "]");
  ACTSPARSE_CPU_DISPATCH(gemv_rows_interleaved)(w, begin, end, xq, xd, xs, y);
}
void dispatch_activate(activation a, float* v, std::size_t n) { ACTSPARSE_CPU_DISPATCH(activate)(a, v, n); }
#undef ACTSPARSE_CPU_DISPATCH

}  // namespace actsparse::cpu
#endif  // HWY_ONCE

#endif  // ACTSPARSE_CPU_IMPLEMENTATION
