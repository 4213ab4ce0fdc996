#pragma once
// The CPU backend's fixed work partition. Every kernel cuts its work into tasks fixed by the
// shapes, never by the thread count, and each output is computed by one task in one fixed
// order: the result is bitwise the same however the tasks are spread over threads (a thread
// pool, the calling thread, or the engine's own (ith, nth) split).

#include <actsparse/backends/cpu/dispatch.hpp>
#include <actsparse/backends/cpu/tuning.hpp>
#include <actsparse/core/dtype.hpp>
#include <actsparse/core/views.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

namespace actsparse::cpu {

// Rows per task of every row kernel (a multiple of the interleaved layout's 16 rows).
inline constexpr std::size_t rows_per_task = 64;
[[nodiscard]] constexpr std::size_t row_task_count(std::size_t rows) noexcept {
  return (rows + rows_per_task - 1) / rows_per_task;
}

// f(begin, end) for each fixed task of `rows_per_task` rows of [0, rows), on the executor.
template <class Executor, class F>
void for_each_row_task(std::size_t rows, const Executor& ex, F&& f) {
  ex.parallel_for(row_task_count(rows), [&](std::size_t task) {
    const std::size_t begin = task * rows_per_task;
    f(begin, std::min(begin + rows_per_task, rows));
  });
}

// The kept rows with every skipped run of at most `gap` rows between two of them filled in
// (the spans of coalesce(kept, gap), listed row by row). Writes at most kept.back() + 1 -
// kept.front() rows into out; returns how many.
[[nodiscard]] inline std::size_t coalesced_rows(std::span<const std::uint32_t> kept, std::size_t gap,
                                                std::uint32_t* out) noexcept {
  std::size_t n = 0;
  for (std::size_t i = 0; i < kept.size(); ++i) {
    if (i > 0 && kept[i] - kept[i - 1] - 1 <= gap) {
      for (std::uint32_t j = kept[i - 1] + 1; j < kept[i]; ++j) out[n++] = j;
    }
    out[n++] = kept[i];
  }
  return n;
}

// Output columns of the row axpy are cut into one task per thread, on multiples of this
// (long contiguous runs per row for the prefetchers; a multiple of every block size). Each
// output is the same fma chain whichever task computes it, so the cut never changes a bit.
inline constexpr std::size_t axpy_column_quantum = 64;

// [begin, end) of output columns for task t of `tasks` over `out` columns.
struct column_range {
  std::size_t begin = 0;
  std::size_t end = 0;
};
[[nodiscard]] constexpr std::size_t axpy_task_count(std::size_t out, std::size_t threads) noexcept {
  const std::size_t quanta = (out + axpy_column_quantum - 1) / axpy_column_quantum;
  return quanta < threads ? quanta : threads;
}
[[nodiscard]] constexpr column_range axpy_task_columns(std::size_t out, std::size_t tasks, std::size_t t) noexcept {
  const std::size_t quanta = (out + axpy_column_quantum - 1) / axpy_column_quantum;
  const std::size_t b = quanta * t / tasks * axpy_column_quantum;
  const std::size_t e = quanta * (t + 1) / tasks * axpy_column_quantum;
  return {b < out ? b : out, e < out ? e : out};
}

// The row axpy's fixed cut of Wt's rows into chunks: chunk c of P covers the rows [c·n/P,
// (c+1)·n/P) of the n rows, with P = n / 1024 clamped to [1, 8] (a function of the shape
// only). Every output is, per chunk, the fma chain over the chunk's listed rows in order
// (from 0), and the chunk sums are added in chunk order: y = ((s_0 + s_1) + s_2) + ... So
// the result is the same for any thread count and executor, and rows listed with
// coefficient 0 (coalescing, the FFN's crossover) change nothing but the sign of a zero.
// With one chunk (n < 2048) it is the reference's chain. The chunks are what threads share
// on a thread pool: each computes whole rows (contiguous reads), faster than cutting the
// columns, which gives each thread half of every row.
inline constexpr std::size_t axpy_max_chunks = 8;
inline constexpr std::size_t axpy_rows_per_chunk = 1024;
[[nodiscard]] constexpr std::size_t axpy_chunk_count(std::size_t rows) noexcept {
  const std::size_t p = rows / axpy_rows_per_chunk;
  return p < 1 ? 1 : (p > axpy_max_chunks ? axpy_max_chunks : p);
}
// Floats of workspace the row axpy over wt needs for the chunk sums s_1 .. s_{P-1}, with 16
// floats to spare for aligning them to 64 bytes (vector loads and stores that split cache
// lines slow the row axpy down).
inline constexpr std::size_t partials_alignment = 64;
[[nodiscard]] constexpr std::size_t axpy_partial_floats(const weight_view& wt) noexcept {
  const std::size_t p = axpy_chunk_count(wt.rows);
  return p == 1 ? 0 : (p - 1) * wt.cols + partials_alignment / sizeof(float);
}
// The chunk sums' start in a region of axpy_partial_floats floats (4-byte aligned).
[[nodiscard]] inline float* aligned_partials(float* region) noexcept {
  const auto at = reinterpret_cast<std::uintptr_t>(region);
  const std::uintptr_t up = (partials_alignment - at % partials_alignment) % partials_alignment;
  return region + up / sizeof(float);
}

// Where each chunk starts in a row list (rows sorted; null: the rows 0 .. count-1).
struct row_chunks {
  std::size_t count = 1;
  std::size_t first[axpy_max_chunks + 1] = {};
};
[[nodiscard]] inline row_chunks cut_rows(std::size_t total, const std::uint32_t* rows, std::size_t count) noexcept {
  row_chunks ch;
  ch.count = axpy_chunk_count(total);
  for (std::size_t c = 0; c < ch.count; ++c) {
    const std::size_t r = total * c / ch.count;
    ch.first[c] = rows == nullptr ? (r < count ? r : count)
                                  : static_cast<std::size_t>(std::lower_bound(rows, rows + count, r) - rows);
  }
  ch.first[ch.count] = count;
  return ch;
}

// dst[i] = s_c[i] for i in [col_begin, col_end): chunk c's chain.
inline void axpy_chunk(const weight_view& wt, const std::uint32_t* rows, const float* coef, const row_chunks& ch,
                       std::size_t c, std::size_t col_begin, std::size_t col_end, float* dst, const kernel_tuning& t) {
  const std::size_t begin = ch.first[c];
  const std::size_t n = ch.first[c + 1] - begin;
  if (rows != nullptr) {
    detail::axpy_rows(wt, rows + begin, n, coef, col_begin, col_end, dst, t);
    return;
  }
  weight_view from = wt;  // rows begin .. : row k of the call is row begin + k
  from.data = static_cast<const std::byte*>(wt.data) + begin * wt.row_stride;
  from.rows = wt.rows - begin;
  detail::axpy_rows(from, nullptr, n, coef + begin, col_begin, col_end, dst, t);
}

// y[i] = s_0[i], then += s_1[i], s_2[i], ... for i in [col_begin, col_end) (whole blocks),
// a chunk at a time: each later chunk's sums go to `sum` (col_end - col_begin floats; unused
// with one chunk) and are added at once. The column form of the chunked order, for a task
// that owns these columns.
inline void axpy_chunks_in_columns(const weight_view& wt, const std::uint32_t* rows, const float* coef,
                                   const row_chunks& ch, std::size_t col_begin, std::size_t col_end, float* y,
                                   float* sum, const kernel_tuning& t) {
  weight_view columns = wt;  // columns col_begin .. col_end of every row
  columns.data = static_cast<const std::byte*>(wt.data) + row_bytes(wt.type, col_begin);
  columns.cols = col_end - col_begin;
  const std::size_t n = col_end - col_begin;
  float* const out = y + col_begin;
  axpy_chunk(columns, rows, coef, ch, 0, 0, n, out, t);
  for (std::size_t c = 1; c < ch.count; ++c) {
    axpy_chunk(columns, rows, coef, ch, c, 0, n, sum, t);
    for (std::size_t i = 0; i < n; ++i) out[i] += sum[i];
  }
}

// y[i] += s_1[i], then s_2[i], ... for i in [begin, end) (partials: s_1, s_2, ... of `out` floats each).
inline void add_chunk_sums(const row_chunks& ch, const float* partials, std::size_t out, std::size_t begin,
                           std::size_t end, float* y) noexcept {
  for (std::size_t c = 1; c < ch.count; ++c) {
    const float* s = partials + (c - 1) * out;
    for (std::size_t i = begin; i < end; ++i) y[i] += s[i];
  }
}

// y[c] = Σ_k coef[row_k]·Wt[row_k, c] over every output column, on the executor's threads, in
// the chunked order above; partials: axpy_partial_floats(wt) floats. On a thread pool (or the
// calling thread) tasks take whole chunks, then columns for the sums; with executor::split
// each thread takes its columns of every chunk (the same bits, no barrier needed).
template <class Executor>
void axpy_all_columns(const weight_view& wt, const std::uint32_t* rows, std::size_t count, const float* coef, float* y,
                      float* partials, const Executor& ex, const kernel_tuning& t) {
  const std::size_t out = wt.cols;
  const std::size_t tasks = axpy_task_count(out, ex.concurrency());
  const row_chunks ch = cut_rows(wt.rows, rows, count);
  if (ch.count > 1) partials = aligned_partials(partials);
  const auto sum_of = [&](std::size_t c) { return c == 0 ? y : partials + (c - 1) * out; };
  if (ch.count > 1 && !ex.splits_work()) {
    ex.parallel_for(ch.count, [&](std::size_t c) { axpy_chunk(wt, rows, coef, ch, c, 0, out, sum_of(c), t); });
    ex.parallel_for(tasks, [&](std::size_t task) {
      const column_range r = axpy_task_columns(out, tasks, task);
      add_chunk_sums(ch, partials, out, r.begin, r.end, y);
    });
    return;
  }
  ex.parallel_for(tasks, [&](std::size_t task) {  // the task's share of the sums: its own columns
    const column_range r = axpy_task_columns(out, tasks, task);
    axpy_chunks_in_columns(wt, rows, coef, ch, r.begin, r.end, y, ch.count > 1 ? partials + r.begin : nullptr, t);
  });
}

}  // namespace actsparse::cpu
