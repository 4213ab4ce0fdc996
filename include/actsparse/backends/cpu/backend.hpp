#pragma once
// The CPU SIMD backend (Google Highway). Kernels live in *-inl.h files compiled once per
// Highway target; exactly one translation unit of the program defines them by including
// actsparse/backends/cpu/implementation.hpp with ACTSPARSE_CPU_IMPLEMENTATION defined.
//
// Built so far: dense and row-gather GEMV and row-axpy for f32, f16, bf16, q8_0 and q4_0
// weights (the block types dequantized in registers, quant-inl.h), on any number of threads
// (cpu/executor.hpp). Everything else (the fused decode FFN) answers "not handled", so an
// engine or the ops layer falls back to another backend.

#include <actsparse/backends/cpu/executor.hpp>
#include <actsparse/core/check_args.hpp>
#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/views.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace actsparse {
namespace cpu {

// y[k] = W[row_k, :] · x for k in [begin, end), row_k = rows ? rows[k] : k; f32, f16, bf16.
// Defined by implementation.hpp (dynamic dispatch to the best compiled target, or static).
void dispatch_gemv_rows(const weight_view& w, const std::uint32_t* rows, std::size_t begin, std::size_t end,
                        const float* x, float* y);

// y[c] = Σ_k coef[row_k] · Wt[row_k, c] for c in [col_begin, col_end), row_k = rows ? rows[k] : k
// for k < count; f32, f16, bf16. Defined by implementation.hpp.
void dispatch_axpy_rows(const weight_view& wt, const std::uint32_t* rows, std::size_t count, const float* coef,
                        std::size_t col_begin, std::size_t col_end, float* y);

// Whether the target chosen at run time has a fused multiply-add (then the row axpy equals
// the reference bit for bit). Defined by implementation.hpp.
bool dispatch_fused_multiply_add();

// Output columns per task of the transposed (input-sparse) linear.
inline constexpr std::size_t axpy_columns_per_task = 512;

// Rows per task: the fixed work partition (results do not depend on how tasks are run).
inline constexpr std::size_t gemv_rows_per_task = 64;

// Every weight dtype: f32, f16, bf16, and the ggml blocks q8_0 / q4_0 (quant-inl.h).
[[nodiscard]] constexpr bool handles_gemv(dtype t) noexcept {
  return t == dtype::f32 || t == dtype::f16 || t == dtype::bf16 || t == dtype::q8_0 || t == dtype::q4_0;
}

}  // namespace cpu

struct cpu_backend {
  static constexpr std::string_view name = "cpu";
  static constexpr memory_space memory = memory_space::host;
  using executor_type = cpu::executor;  // the calling thread, a thread_pool, or the engine's (ith, nth)

  [[nodiscard]] status can_implement(const gemv_args& a) const noexcept {
    if (!cpu::handles_gemv(a.w.type)) return status::not_handled("cpu: GEMV of this weight dtype is not built");
    return status::ok();
  }
  [[nodiscard]] std::size_t workspace_size(const gemv_args&) const noexcept { return 0; }

  [[nodiscard]] status can_implement(const transposed_linear_args& a) const noexcept {
    if (!cpu::handles_gemv(a.wt.type)) return status::not_handled("cpu: row-axpy of this weight dtype is not built");
    return status::ok();
  }
  [[nodiscard]] std::size_t workspace_size(const transposed_linear_args&) const noexcept { return 0; }

  status run(const transposed_linear_args& a, std::span<std::byte>, executor_type& ex) const {
    if (const status s = can_implement(a); !s) return s;
    constexpr std::string_view where = "cpu::transposed_linear";
    check_arguments(a, where);
    const std::uint32_t* rows = a.inputs.all ? nullptr : a.inputs.indices.data();
    const std::size_t count = a.inputs.count(a.wt.rows);
    const std::size_t out = a.wt.cols;
    const std::size_t tasks = (out + cpu::axpy_columns_per_task - 1) / cpu::axpy_columns_per_task;
    ex.parallel_for(tasks, [&](std::size_t t) {
      const std::size_t begin = t * cpu::axpy_columns_per_task;
      const std::size_t end = begin + cpu::axpy_columns_per_task < out ? begin + cpu::axpy_columns_per_task : out;
      cpu::dispatch_axpy_rows(a.wt, rows, count, a.x.data(), begin, end, a.y.data());
    });
    return status::ok();
  }

  status run(const gemv_args& a, std::span<std::byte>, executor_type& ex) const {
    if (const status s = can_implement(a); !s) return s;
    constexpr std::string_view where = "cpu::gemv";
    check_arguments(a, where);
    const std::uint32_t* rows = a.rows.all ? nullptr : a.rows.indices.data();
    const std::size_t out = a.rows.count(a.w.rows);
    const std::size_t tasks = (out + cpu::gemv_rows_per_task - 1) / cpu::gemv_rows_per_task;
    ex.parallel_for(tasks, [&](std::size_t t) {
      const std::size_t begin = t * cpu::gemv_rows_per_task;
      const std::size_t end = begin + cpu::gemv_rows_per_task < out ? begin + cpu::gemv_rows_per_task : out;
      cpu::dispatch_gemv_rows(a.w, rows, begin, end, a.x.data(), a.y.data());
    });
    return status::ok();
  }
};

ACTSPARSE_REQUIRE_BACKEND_FOR(cpu_backend, gemv_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(cpu_backend, transposed_linear_args);

}  // namespace actsparse
