#pragma once
// Defines the CPU backend's kernels. Include this in exactly ONE translation unit of the
// program, first (before any other Highway header), after
//   #define ACTSPARSE_CPU_IMPLEMENTATION
// Dynamic dispatch (the default) compiles every Highway target (AVX3_DL included) and
// picks the best one the CPU supports at run time; it links hwy::hwy. Engines that build
// one binary per ISA (as ggml does) also define ACTSPARSE_CPU_STATIC_DISPATCH and compile
// this translation unit with that ISA's flags: only the static target is built.
// The translation unit also installs the backend's selection passes for the selectors
// (core/selection_passes.hpp) at static initialization, where the target has them.
// Without ACTSPARSE_CPU_IMPLEMENTATION this header defines nothing.

#ifdef ACTSPARSE_CPU_IMPLEMENTATION

#ifndef ACTSPARSE_CPU_STATIC_DISPATCH
#ifndef HWY_WANT_AVX3_DL
#define HWY_WANT_AVX3_DL  // AVX-512 VNNI / BF16 targets (Debian's Highway 1.0.3 skips them otherwise)
#endif
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "actsparse/backends/cpu/kernels-inl.h"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#endif

#include <actsparse/backends/cpu/kernels-inl.h>
#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/backends/cpu/dispatch.hpp>
#include <actsparse/backends/cpu/dtypes.hpp>
#include <actsparse/core/error.hpp>

#include <cstdio>
#include <string>
#include <string_view>

#include <hwy/highway.h>

#if HWY_ONCE
namespace actsparse::cpu {

#ifdef ACTSPARSE_CPU_STATIC_DISPATCH
#define ACTSPARSE_CPU_DISPATCH(f) HWY_STATIC_DISPATCH(f)
#else
HWY_EXPORT(gemv_rows);
HWY_EXPORT(gemm_rows);
HWY_EXPORT(axpy_rows);
HWY_EXPORT(axpy_tokens);
HWY_EXPORT(attention_scores);
HWY_EXPORT(attention_softmax_part);
HWY_EXPORT(attention_values);
HWY_EXPORT(fused_multiply_add);
HWY_EXPORT(int8_kernels);
HWY_EXPORT(quantize_q8_0_x);
HWY_EXPORT(gemv_rows_q8x);
HWY_EXPORT(gemm_rows_q8x);
HWY_EXPORT(gemv_rows_interleaved);
HWY_EXPORT(column_blocks_down);
HWY_EXPORT(activate);
HWY_EXPORT(selection_table);
#define ACTSPARSE_CPU_DISPATCH(f) HWY_DYNAMIC_DISPATCH(f)
#endif

namespace detail {

void gemv_rows(const weight_view& w, const std::uint32_t* rows, std::size_t begin, std::size_t end, const float* x,
               float* y, const kernel_tuning& t) {
  if (!support(w.type).f32_activations) {
    ::actsparse::detail::fail("cpu::gemv_rows", "w.type", name(w.type), "a dtype with CPU kernels (cpu/dtypes.hpp)");
  }
  ACTSPARSE_CPU_DISPATCH(gemv_rows)(w, rows, begin, end, x, y, t);
}
void gemm_rows(const weight_view& w, std::size_t begin, std::size_t end, const float* const* x, std::size_t count,
               float* const* y, const std::uint32_t* rows) {
  if (!support(w.type).f32_activations || info(w.type).block_values != 1) {
    ::actsparse::detail::fail("cpu::gemm_rows", "w.type", name(w.type), "f32, f16 or bf16 (rows of single values)");
  }
  ACTSPARSE_CPU_DISPATCH(gemm_rows)(w, rows, begin, end, x, count, y);
}
void axpy_rows(const weight_view& wt, const std::uint32_t* rows, std::size_t count, const float* coef,
               std::size_t col_begin, std::size_t col_end, float* y, const kernel_tuning& t) {
  if (!support(wt.type).f32_activations) {
    ::actsparse::detail::fail("cpu::axpy_rows", "wt.type", name(wt.type), "a dtype with CPU kernels (cpu/dtypes.hpp)");
  }
  ACTSPARSE_CPU_DISPATCH(axpy_rows)(wt, rows, count, coef, col_begin, col_end, y, t);
}
void axpy_tokens(const weight_view& wt, const std::size_t* first, std::size_t chunks, const float* const* coef,
                 std::size_t count, std::size_t col_begin, std::size_t col_end, float* const* y,
                 const std::uint32_t* rows) {
  constexpr std::string_view where = "cpu::axpy_tokens";
  if (!support(wt.type).f32_activations) {
    ::actsparse::detail::fail(where, "wt.type", name(wt.type), "a dtype with CPU kernels (cpu/dtypes.hpp)");
  }
  ::actsparse::detail::require(col_begin <= col_end && col_end <= wt.cols, where, "col_end", col_end,
                               "col_begin <= col_end <= wt.cols");
  ::actsparse::detail::require(chunks >= 1 && first[chunks] <= wt.rows, where, "first[chunks]", first[chunks],
                               "at least one chunk, ending at or before wt.rows");
  ACTSPARSE_CPU_DISPATCH(axpy_tokens)(wt, rows, first, chunks, coef, count, col_begin, col_end, y);
}
void attention_scores(const row_ref* rows, std::size_t count, std::size_t hd, std::size_t kv_heads, const float* q,
                      std::size_t heads, float scale, float* out, std::size_t hstride) {
  ACTSPARSE_CPU_DISPATCH(attention_scores)(rows, count, hd, kv_heads, q, heads, scale, out, hstride);
}
void attention_softmax_part(const float* s, std::size_t count, std::size_t heads, std::size_t hstride, float* w,
                            float* m, float* l) {
  ACTSPARSE_CPU_DISPATCH(attention_softmax_part)(s, count, heads, hstride, w, m, l);
}
void attention_values(const row_ref* rows, std::size_t count, std::size_t hd, std::size_t kv_heads, const float* w,
                      std::size_t hstride, std::size_t heads, float* acc) {
  ACTSPARSE_CPU_DISPATCH(attention_values)(rows, count, hd, kv_heads, w, hstride, heads, acc);
}
bool fused_multiply_add() { return ACTSPARSE_CPU_DISPATCH(fused_multiply_add)(); }
const char* int8_kernels() { return ACTSPARSE_CPU_DISPATCH(int8_kernels)(); }
void quantize_q8_0_x(const float* x, std::size_t n, std::int8_t* q, float* d, bool ggml_rounding) {
  ::actsparse::detail::require(n % 32 == 0, "cpu::quantize_q8_0_x", "n", n, "a multiple of 32 (whole blocks of x)");
  ACTSPARSE_CPU_DISPATCH(quantize_q8_0_x)(x, n, q, d, ggml_rounding);
}
void gemv_rows_q8x(const weight_view& w, const std::uint32_t* rows, std::size_t begin, std::size_t end,
                   const std::int8_t* xq, const float* xd, float* y, const kernel_tuning& t) {
  constexpr std::string_view where = "cpu::gemv_rows_q8x";
  if (!support(w.type).int8_activations) {
    ::actsparse::detail::fail(where, "w.type", name(w.type), "q8_0 or q4_0 (the weight dtypes of the integer GEMV)");
  }
  ::actsparse::detail::require(w.cols % 32 == 0, where, "w.cols", w.cols, "a multiple of 32 (whole blocks)");
  ACTSPARSE_CPU_DISPATCH(gemv_rows_q8x)(w, rows, begin, end, xq, xd, y, t);
}
void gemm_rows_q8x(const weight_view& w, std::size_t begin, std::size_t end, const std::int8_t* const* xq,
                   const float* const* xd, std::size_t count, float* const* y, const std::uint32_t* rows) {
  constexpr std::string_view where = "cpu::gemm_rows_q8x";
  if (!support(w.type).int8_activations) {
    ::actsparse::detail::fail(where, "w.type", name(w.type), "q8_0 or q4_0 (the weight dtypes of the integer GEMV)");
  }
  ::actsparse::detail::require(w.cols % 32 == 0, where, "w.cols", w.cols, "a multiple of 32 (whole blocks)");
  ACTSPARSE_CPU_DISPATCH(gemm_rows_q8x)(w, rows, begin, end, xq, xd, count, y);
}
void gemv_rows_interleaved(const interleaved_view& w, std::size_t begin, std::size_t end, const std::int8_t* xq,
                           const float* xd, const std::int32_t* xs, float* y, const kernel_tuning& t) {
  constexpr std::string_view where = "cpu::gemv_rows_interleaved";
  if (!support(w.type).interleaved || w.data == nullptr) {
    ::actsparse::detail::fail_described(
        where, "w", std::string(name(w.type)) + (w.data == nullptr ? " without interleaved bytes" : " weights"),
        "the interleaved copy of a q8_0 or q4_0 matrix (cpu::interleave_rows)");
  }
  ::actsparse::detail::require(w.cols % 32 == 0, where, "w.cols", w.cols, "a multiple of 32 (whole blocks)");
  ::actsparse::detail::require(begin % 16 == 0, where, "begin", begin,
                               "a multiple of 16 (the first row of a group of 16)");
  ::actsparse::detail::require(begin <= end && end <= w.rows, where, "end", end,
                               "in [begin, w.rows] = [" + std::to_string(begin) + ", " + std::to_string(w.rows) + "]");
  ACTSPARSE_CPU_DISPATCH(gemv_rows_interleaved)(w, begin, end, xq, xd, xs, y, t);
}
void column_blocks_down(const column_blocks_view& w, const std::uint32_t* kept, std::size_t count, const float* h,
                        std::size_t begin, std::size_t end, float* y) {
  constexpr std::string_view where = "cpu::column_blocks_down";
  if ((w.type != dtype::q8_0 && w.type != dtype::q4_0) || w.data == nullptr) {
    ::actsparse::detail::fail_described(
        where, "w", std::string(name(w.type)) + (w.data == nullptr ? " without column-block bytes" : " weights"),
        "the column-block copy of a q8_0 or q4_0 matrix (cpu::column_blocks)");
  }
  if (begin % 32 != 0 || end % 32 != 0) {
    char range[64];  // snprintf: GCC 12 warns falsely on "[" + std::to_string(...) at -O3
    std::snprintf(range, sizeof range, "[%zu, %zu)", begin, end);
    ::actsparse::detail::fail(where, "[begin, end)", range, "multiples of 32 (whole groups of 32 rows)");
  }
  ::actsparse::detail::require(begin <= end && end <= w.rows, where, "end", end,
                               "in [begin, w.rows] = [" + std::to_string(begin) + ", " + std::to_string(w.rows) + "]");
  ACTSPARSE_CPU_DISPATCH(column_blocks_down)(w, kept, count, h, begin, end, y);
}
void activate(activation a, float* v, std::size_t n) { ACTSPARSE_CPU_DISPATCH(activate)(a, v, n); }
const selection_passes* selection_table() { return ACTSPARSE_CPU_DISPATCH(selection_table)(); }

// Installs the selection passes when the program starts (a function-local static would wait
// for the first CPU call; the selectors may run before any).
inline const bool selection_installed = [] {
  install_selection_passes(selection_table());
  return true;
}();

}  // namespace detail

void use_simd_selection(bool on) { install_selection_passes(on ? detail::selection_table() : nullptr); }

#undef ACTSPARSE_CPU_DISPATCH

}  // namespace actsparse::cpu
#endif  // HWY_ONCE

#endif  // ACTSPARSE_CPU_IMPLEMENTATION
