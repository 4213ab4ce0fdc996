#pragma once
// The CPU SIMD backend (Google Highway). Kernels live in *-inl.h files compiled once per
// Highway target; exactly one translation unit of the program defines them by including
// actsparse/backends/cpu/implementation.hpp with ACTSPARSE_CPU_IMPLEMENTATION defined.
//
// Operations: dense and row-gather GEMV (gemv_args), the input-sparse linear over a
// transposed weight (transposed_linear_args, a row axpy), and the gated FFN for decode, dense
// or neuron-sparse (gated_ffn_args), the token-sparse prefill FFN (token_ffn_args), for f32, f16, bf16, q8_0 and
// q4_0 weights (quant-inl.h: by default the GEMV of the block types runs on x quantized to 8-bit blocks, integer dot
// products as ggml's; see cpu_backend::int8_activations). What it does not handle answers "not handled", so an engine
// or the ops layer falls back to another backend.

#include <actsparse/backends/cpu/executor.hpp>
#include <actsparse/core/activation.hpp>
#include <actsparse/core/check_args.hpp>
#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/views.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace actsparse {
namespace cpu {

// y[k] = W[row_k, :] · x for k in [begin, end), row_k = rows ? rows[k] : k; every dtype.
// Defined by implementation.hpp (dynamic dispatch to the best compiled target, or static).
void dispatch_gemv_rows(const weight_view& w, const std::uint32_t* rows, std::size_t begin, std::size_t end,
                        const float* x, float* y);

// y[c] = Σ_k coef[row_k] · Wt[row_k, c] for c in [col_begin, col_end), row_k = rows ? rows[k] : k
// for k < count; every dtype (block types: columns on 32-value blocks). Defined by implementation.hpp.
void dispatch_axpy_rows(const weight_view& wt, const std::uint32_t* rows, std::size_t count, const float* coef,
                        std::size_t col_begin, std::size_t col_end, float* y);

// Whether the target chosen at run time has a fused multiply-add (then the row axpy equals
// the reference bit for bit). Defined by implementation.hpp.
bool dispatch_fused_multiply_add();

// x[0, n) quantized to 8-bit blocks of 32 values (the q8_0 rule with an f32 scale): d[b] =
// max |x_i| / 127 over block b, q[i] = round(x_i / d[i / 32]) in [-127, 127], so |x_i −
// d·q_i| <= d·(1/2 + 2^-16); q = 0 where d is 0 (or not finite: a NaN or Inf in x makes its
// block's d so, and the products non-finite). n must be a multiple of 32 (else an error).
// Writes q[0, n) and d[0, n / 32). Defined by implementation.hpp.
void dispatch_quantize_q8_0_x(const float* x, std::size_t n, std::int8_t* q, float* d);

// y[k] = W[row_k, :]·x for k in [begin, end), row_k = rows ? rows[k] : k, with x given
// quantized (xq, xd of dispatch_quantize_q8_0_x): per block the exact int32 Σ q_w·q_x, times
// d_w·d_x in f32. W of q8_0 / q4_0 only (else an error). Defined by implementation.hpp.
void dispatch_gemv_rows_q8x(const weight_view& w, const std::uint32_t* rows, std::size_t begin, std::size_t end,
                            const std::int8_t* xq, const float* xd, float* y);

// y[k] = W[k, :]·x for k in [begin, end) (begin a multiple of 16), from W's interleaved
// copy (weight_view::interleaved, q8_0 / q4_0; else an error) on quantized x, with xs[b] =
// Σ_{i in block b} xq[i] (block_sums). Per row: acc = acc + float(D_b)·(d_w·d_x) over the
// blocks in order, D_b the exact int32 dot product, so a row's bits do not depend on the row
// range. Defined by implementation.hpp.
void dispatch_gemv_rows_interleaved(const weight_view& w, std::size_t begin, std::size_t end, const std::int8_t* xq,
                                    const float* xd, const std::int32_t* xs, float* y);

// v[i] = act(v[i]) for i < n, vectorized (activation-inl.h): within a few ulp of the scalar
// functions of core/activation.hpp, and a value's bits depend only on the value and the
// target. The gated FFNs of this backend compute act(g) with it, and neuron_sparse_ffn calls
// it (cpu_backend::activate) for the act(g) it passes in, so keep-all equals dense bit for bit.
// Defined by implementation.hpp.
void dispatch_activate(activation a, float* v, std::size_t n);

// Bytes of x quantized (n values): d (f32, one per 32 values), then q (int8, one per value),
// then the block sums of q that the interleaved GEMV takes (int32, one per 32 values).
[[nodiscard]] constexpr std::size_t quantized_x_bytes(std::size_t n) noexcept {
  return (n + 31) / 32 * (sizeof(float) + sizeof(std::int32_t)) + n;
}

// xs[b] = Σ_{i < 32} xq[32b + i] for the blocks b < n / 32: the interleaved GEMV's weights
// enter its VNNI dot products unsigned (q4_0's nibbles q + 8, q8_0's q + 128), and −8·xs[b]
// or −128·xs[b] takes the offset back.
inline void block_sums(const std::int8_t* xq, std::size_t n, std::int32_t* xs) noexcept {
  for (std::size_t b = 0; b < n / 32; ++b) {
    std::int32_t sum = 0;
    for (std::size_t i = 0; i < 32; ++i) sum += xq[32 * b + i];
    xs[b] = sum;
  }
}

// Whether the dense integer GEMV of w reads its interleaved copy.
[[nodiscard]] inline bool has_interleaved(const weight_view& w) noexcept {
  return w.interleaved != nullptr && (w.type == dtype::q4_0 || w.type == dtype::q8_0);
}

// Rows per task: the fixed work partition (results do not depend on how tasks are run).
inline constexpr std::size_t gemv_rows_per_task = 64;

// y[k] = W[row_k, :]·x for k < count, on the executor's threads (fixed 64-row tasks).
template <class Executor>
void gemv_all_rows(const weight_view& w, const std::uint32_t* rows, std::size_t count, const float* x, float* y,
                   const Executor& ex) {
  const std::size_t tasks = (count + gemv_rows_per_task - 1) / gemv_rows_per_task;
  ex.parallel_for(tasks, [&](std::size_t t) {
    const std::size_t begin = t * gemv_rows_per_task;
    const std::size_t end = begin + gemv_rows_per_task < count ? begin + gemv_rows_per_task : count;
    dispatch_gemv_rows(w, rows, begin, end, x, y);
  });
}

// The same from W's interleaved copy (dispatch_gemv_rows_interleaved; every row), the same
// fixed tasks (64 rows: whole groups of 16).
template <class Executor>
void gemv_all_rows_interleaved(const weight_view& w, const std::int8_t* xq, const float* xd, const std::int32_t* xs,
                               float* y, const Executor& ex) {
  const std::size_t tasks = (w.rows + gemv_rows_per_task - 1) / gemv_rows_per_task;
  ex.parallel_for(tasks, [&](std::size_t t) {
    const std::size_t begin = t * gemv_rows_per_task;
    const std::size_t end = begin + gemv_rows_per_task < w.rows ? begin + gemv_rows_per_task : w.rows;
    dispatch_gemv_rows_interleaved(w, begin, end, xq, xd, xs, y);
  });
}

// The same on quantized x (dispatch_gemv_rows_q8x), the same fixed tasks.
template <class Executor>
void gemv_all_rows_q8x(const weight_view& w, const std::uint32_t* rows, std::size_t count, const std::int8_t* xq,
                       const float* xd, float* y, const Executor& ex) {
  const std::size_t tasks = (count + gemv_rows_per_task - 1) / gemv_rows_per_task;
  ex.parallel_for(tasks, [&](std::size_t t) {
    const std::size_t begin = t * gemv_rows_per_task;
    const std::size_t end = begin + gemv_rows_per_task < count ? begin + gemv_rows_per_task : count;
    dispatch_gemv_rows_q8x(w, rows, begin, end, xq, xd, y);
  });
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

// The row axpy's fixed cut of Wt's rows into chunks: chunk c of P covers the rows [c·n/P,
// (c+1)·n/P) of the n rows, with P = n / 1024 clamped to [1, 8] (a function of the shape
// only). Every output is, per chunk, the fma chain over the chunk's listed rows in order
// (from 0), and the chunk sums are added in chunk order: y = ((s_0 + s_1) + s_2) + ... So
// the result is the same for any thread count and executor, and rows listed with
// coefficient 0 (coalescing, the FFN's crossover) change nothing but the sign of a zero.
// With one chunk (n < 2048) it is the reference's chain. The chunks are what threads share
// on a thread pool: each computes whole rows (contiguous reads), where cutting the columns
// gave each thread half of every row. Measured on the AMD EPYC host (bench_cpu_gemv /
// bench_cpu_ffn 7b rows, medians of 3, two rounds of both builds in turn), two threads:
// cpu_input_sparse_linear a_pct 100 f16 1.93 / 2.14 -> 1.63 / 1.56 ms, q8_0 1.27 / 1.37 ->
// 1.04 / 1.30, q4_0 1.15 / 1.04 -> 0.76 / 0.78, f32 3.17 / 3.13 -> 2.77 / 2.78; the dense
// FFN q4_0 2.50 / 2.53 -> 2.04 / 2.03 ms, q8_0 3.04 / 3.02 -> 2.78 / 2.61, bf16 5.45 / 5.56
// -> 4.81 / 4.68; one thread unchanged once the chunk sums were 64-byte aligned
// (docs/PERFORMANCE.md has every round).
inline constexpr std::size_t axpy_max_chunks = 8;
inline constexpr std::size_t axpy_rows_per_chunk = 1024;
[[nodiscard]] constexpr std::size_t axpy_chunk_count(std::size_t rows) noexcept {
  const std::size_t p = rows / axpy_rows_per_chunk;
  return p < 1 ? 1 : (p > axpy_max_chunks ? axpy_max_chunks : p);
}
// Floats of workspace the row axpy over wt needs for the chunk sums s_1 .. s_{P-1}, with 16
// floats to spare for aligning them to 64 bytes (vector loads and stores that split cache
// lines made the one-thread row axpy 10-20% slower).
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
                       std::size_t c, std::size_t col_begin, std::size_t col_end, float* dst) {
  const std::size_t begin = ch.first[c];
  const std::size_t n = ch.first[c + 1] - begin;
  if (rows != nullptr) {
    dispatch_axpy_rows(wt, rows + begin, n, coef, col_begin, col_end, dst);
    return;
  }
  weight_view from = wt;  // rows begin .. : row k of the call is row begin + k
  from.data = static_cast<const std::byte*>(wt.data) + begin * wt.row_stride;
  from.rows = wt.rows - begin;
  dispatch_axpy_rows(from, nullptr, n, coef + begin, col_begin, col_end, dst);
}

// y[i] = s_0[i], then += s_1[i], s_2[i], ... for i in [col_begin, col_end) (whole blocks),
// a chunk at a time: each later chunk's sums go to `sum` (col_end - col_begin floats; unused
// with one chunk) and are added at once. The column form of the chunked order, for a task
// that owns these columns.
inline void axpy_chunks_in_columns(const weight_view& wt, const std::uint32_t* rows, const float* coef,
                                   const row_chunks& ch, std::size_t col_begin, std::size_t col_end, float* y,
                                   float* sum) {
  weight_view columns = wt;  // columns col_begin .. col_end of every row
  columns.data = static_cast<const std::byte*>(wt.data) + row_bytes(wt.type, col_begin);
  columns.cols = col_end - col_begin;
  const std::size_t n = col_end - col_begin;
  float* const out = y + col_begin;
  axpy_chunk(columns, rows, coef, ch, 0, 0, n, out);
  for (std::size_t c = 1; c < ch.count; ++c) {
    axpy_chunk(columns, rows, coef, ch, c, 0, n, sum);
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
                      float* partials, const Executor& ex) {
  const std::size_t out = wt.cols;
  const std::size_t tasks = axpy_task_count(out, ex.concurrency());
  const row_chunks ch = cut_rows(wt.rows, rows, count);
  if (ch.count > 1) partials = aligned_partials(partials);
  const auto sum_of = [&](std::size_t c) { return c == 0 ? y : partials + (c - 1) * out; };
  if (ch.count > 1 && !ex.splits_work()) {
    ex.parallel_for(ch.count, [&](std::size_t c) { axpy_chunk(wt, rows, coef, ch, c, 0, out, sum_of(c)); });
    ex.parallel_for(tasks, [&](std::size_t t) {
      const column_range r = axpy_task_columns(out, tasks, t);
      add_chunk_sums(ch, partials, out, r.begin, r.end, y);
    });
    return;
  }
  ex.parallel_for(tasks, [&](std::size_t t) {  // the task's share of the sums: its own columns
    const column_range r = axpy_task_columns(out, tasks, t);
    axpy_chunks_in_columns(wt, rows, coef, ch, r.begin, r.end, y, ch.count > 1 ? partials + r.begin : nullptr);
  });
}

// The kept fraction of the d_ff neurons from which the neuron-sparse gated FFN reads every
// row (cpu_backend::read_all_from), per dtype of W_up and thread count (1, or 2 and more):
// where gathering the kept rows stops beating a dense read. Measured on the AMD EPYC host in
// two runs of bench_cpu_ffn's gathered_a* rows (always gathered) against dense in the same
// iterations, 7B and 3B shapes, medians of 3 (docs/PERFORMANCE.md): at 0.9 kept the gather
// was 0.98-1.07x dense for f32, about 1.0x for f16 / bf16 at one thread and q8_0, 0.88-1.08x
// for f16 / bf16 at two threads, 0.86-1.01x for q4_0; at 0.8 0.87-1.04x for q4_0; at 0.7
// 0.93-1.20x. Reading every row costs what dense does plus the scoring and selection.
// interleaved: q8_0 / q4_0 up and W_down with interleaved copies (weight_view::interleaved),
// so that reading every row runs the interleaved GEMVs, faster than the row-major dense.
// Measured the same way (bench_cpu_ffn <dtype>_x16 gathered_a* rows, 7b / 3b): q4_0 0.80-0.86x
// dense at 0.6, 0.91 at 0.5, 1.01-1.06 at 0.4, 1.15 at 0.3 at one thread; at two 0.76-0.82 at
// 0.5, 0.92-1.00 at 0.4, 1.07-1.13 at 0.3. q8_0 0.93-0.96 at 0.8, 1.00-1.04 at 0.7, 1.08-1.11
// at 0.6 at one thread; at two 0.87-0.90 at 0.8, 0.99-1.00 at 0.7, 1.00-1.08 at 0.6.
[[nodiscard]] constexpr double measured_read_all_from(dtype up, std::size_t threads,
                                                      bool interleaved = false) noexcept {
  const bool one = threads <= 1;
  if (interleaved && up == dtype::q4_0) return one ? 0.4 : 0.35;
  if (interleaved && up == dtype::q8_0) return 0.7;
  switch (up) {
    case dtype::f32:
      return 0.95;
    case dtype::f16:
    case dtype::bf16:
      return one ? 0.9 : 0.85;
    case dtype::q8_0:
      return 0.9;
    case dtype::q4_0:
      return 0.8;
  }
  return 1.0;
}
// The smallest of them over thread counts (what the workspace is sized for).
[[nodiscard]] constexpr double lowest_read_all_from(dtype up, bool interleaved = false) noexcept {
  const double one = measured_read_all_from(up, 1, interleaved);
  const double more = measured_read_all_from(up, 2, interleaved);
  return one < more ? one : more;
}

// Every weight dtype: f32, f16, bf16, and the ggml blocks q8_0 / q4_0 (quant-inl.h).
[[nodiscard]] constexpr bool handles_gemv(dtype t) noexcept {
  return t == dtype::f32 || t == dtype::f16 || t == dtype::bf16 || t == dtype::q8_0 || t == dtype::q4_0;
}

}  // namespace cpu

struct cpu_backend {
  static constexpr std::string_view name = "cpu";
  static constexpr memory_space memory = memory_space::host;
  using executor_type = cpu::executor;  // the calling thread, a thread_pool, or the engine's (ith, nth)

  // Row-axpy option (input-sparse linear, the down projection of the sparse FFN): a skipped
  // run of at most this many rows between two kept rows is read too, with coefficient 0,
  // so the kernel walks longer contiguous spans. 0 (default) reads only the kept rows. The
  // result is the same but for the sign of an exact zero (acc + 0·w), and a skipped row
  // read this way must hold finite values (0·Inf is NaN).
  std::size_t coalesce_gap = 0;

  // v[i] = act(v[i]), vectorized (cpu::dispatch_activate): what this backend's gated FFNs
  // compute for act(g). neuron_sparse_ffn calls it for the act(g) it scores and passes in.
  void activate(activation act, std::span<float> v) const { cpu::dispatch_activate(act, v.data(), v.size()); }

  // GEMV option for q8_0 / q4_0 weights (gemv_args, the up and gate rows of the gated FFN,
  // and its down projection from an interleaved W_down): true (default) quantizes x once per
  // call to 8-bit blocks (per 32 values d_x = max|x|/127 in f32, q_x = round(x/d_x) in int8;
  // cpu::dispatch_quantize_q8_0_x) and runs integer dot products, as ggml does: per block the
  // exact int32 Σ q_w·q_x, times d_w·d_x. Much less work per weight byte than dequantizing;
  // the result carries x's quantization error, |x_i − d_x·q_x,i| <= d_x/2 per value, i.e. per
  // row about Σ_b |d_w|·Σ_i |q_w,i|·d_x/2 (tests/unit/test_cpu_quant.cpp states the whole
  // bound). false keeps the f32 path: blocks dequantized exactly and multiplied by f32 x
  // (within f32 rounding of the reference). The row axpy (transposed_linear_args, the FFN's
  // down_t) is f32 either way. With the option the call needs a workspace (workspace_size)
  // for the quantized x; with executor::split every calling thread quantizes x into its own,
  // so each needs its own workspace. A weight with an interleaved copy (weight_view::
  // interleaved, cpu::interleave_rows) has its dense GEMVs on this path read the copy
  // (cpu::dispatch_gemv_rows_interleaved): the same products, summed per block in one chain
  // per row, faster where the row-major kernel is bound by its arithmetic. Row gathers read
  // the row-major blocks.
  bool int8_activations = true;

  // Gated FFN crossover: with at least this fraction of the d_ff neurons kept, the
  // neuron-sparse FFN reads every row of W_up (and W_gate when it computes the gate) and of
  // down_t, as dense does, with h = 0 for the dropped neurons, instead of gathering the kept
  // rows. The result is the sparse one but for the sign of an exact zero (acc + 0·w; dropped
  // rows must hold finite values, 0·Inf is NaN). Unset (default): the measured crossover for
  // the dtype of W_up, whether W_up and W_down carry interleaved copies, and the executor's
  // thread count (cpu::measured_read_all_from). Set: a fraction in (0, 1]; 1 reads every row
  // only when every neuron is kept (as dense does anyway).
  std::optional<double> read_all_from;

  [[nodiscard]] status can_implement(const gemv_args& a) const noexcept {
    if (!cpu::handles_gemv(a.w.type)) return status::not_handled("cpu: GEMV of this weight dtype is not built");
    return status::ok();
  }
  // x quantized (int8 path): d (f32 per block), then q (int8 per value), from the front.
  [[nodiscard]] std::size_t workspace_size(const gemv_args& a) const noexcept {
    return int8_path(a.w.type) ? cpu::quantized_x_bytes(a.w.cols) : 0;
  }

  [[nodiscard]] status can_implement(const transposed_linear_args& a) const noexcept {
    if (!cpu::handles_gemv(a.wt.type)) return status::not_handled("cpu: row-axpy of this weight dtype is not built");
    return status::ok();
  }
  // The chunk sums of the row axpy (cpu::axpy_partial_floats: none below 2048 rows of Wt)
  // and, with coalesce_gap, the coefficients (0 for a filled-in row) and the filled row list.
  [[nodiscard]] std::size_t workspace_size(const transposed_linear_args& a) const noexcept {
    return (cpu::axpy_partial_floats(a.wt) + (coalescing(a.inputs) ? 2 * a.wt.rows : 0)) * sizeof(float);
  }

  status run(const transposed_linear_args& a, std::span<std::byte> workspace, executor_type& ex) const {
    if (const status s = can_implement(a); !s) return s;
    constexpr std::string_view where = "cpu::transposed_linear";
    check_arguments(a, where);
    const std::size_t bytes = workspace_size(a);
    float* const partials = bytes == 0 ? nullptr : scratch(workspace, bytes, where);
    if (coalescing(a.inputs)) {
      const std::size_t n = a.wt.rows;
      float* const coef = partials + cpu::axpy_partial_floats(a.wt);
      auto* const rows = reinterpret_cast<std::uint32_t*>(coef + n);
      const std::size_t count = cpu::coalesced_rows(a.inputs.indices, coalesce_gap, rows);
      for (std::size_t k = 0; k < count; ++k) coef[rows[k]] = 0.0F;
      for (const std::uint32_t j : a.inputs.indices) coef[j] = a.x[j];
      cpu::axpy_all_columns(a.wt, rows, count, coef, a.y.data(), partials, ex);
      return status::ok();
    }
    const std::uint32_t* rows = a.inputs.all ? nullptr : a.inputs.indices.data();
    cpu::axpy_all_columns(a.wt, rows, a.inputs.count(a.wt.rows), a.x.data(), a.y.data(), partials, ex);
    return status::ok();
  }

  status run(const gemv_args& a, std::span<std::byte> workspace, executor_type& ex) const {
    if (const status s = can_implement(a); !s) return s;
    constexpr std::string_view where = "cpu::gemv";
    check_arguments(a, where);
    const std::size_t count = a.rows.count(a.w.rows);
    // Every row listed (strictly increasing: 0 .. rows-1) runs as dense: the same bits.
    const bool dense = a.rows.all || count == a.w.rows;
    const std::uint32_t* rows = dense ? nullptr : a.rows.indices.data();
    if (int8_path(a.w.type)) {
      check_workspace(workspace, workspace_size(a), where);
      const bool interleaved = dense && cpu::has_interleaved(a.w);
      const quantized_x q = quantize_x(a.x, workspace.data(), interleaved);
      if (interleaved) {
        cpu::gemv_all_rows_interleaved(a.w, q.q, q.d, q.s, a.y.data(), ex);
      } else {
        cpu::gemv_all_rows_q8x(a.w, rows, count, q.q, q.d, a.y.data(), ex);
      }
      return status::ok();
    }
    cpu::gemv_all_rows(a.w, rows, count, a.x.data(), a.y.data(), ex);
    return status::ok();
  }
  // --- y = W_down (act(W_gate x) ⊙ W_up x) over the kept neurons ----------------------------
  // Phase 1, on row tasks: u_k = W_up[j_k, :]·x for the kept neurons (a row gather; all rows
  // when dense), g_k likewise unless gate_act is given, h_j = act(g_j)·u_j. Phase 2: y =
  // Σ_k h_{j_k}·down_t[j_k, :] (a row axpy: one contiguous row per kept neuron, in chunks of
  // rows, cpu::axpy_all_columns), or, dense with only W_down given, y = W_down·h (a GEMV,
  // row tasks). The neuron-sparse path needs down_t; keep-all equals dense bit for bit
  // because both run the same row kernels.
  // With int8_activations and q8_0 / q4_0 gate or up, x is quantized once, before phase 1,
  // and their rows run the integer GEMV (phase 2 stays f32). Interleaved q8_0 / q4_0 weights
  // (weight_view::interleaved): gate and up read their copy wherever every row is read (dense,
  // and from the crossover on); a W_down given with an interleaved copy makes phase 2 of those
  // cases y = W_down·h on h quantized (the interleaved GEMV), even when down_t is given too.
  [[nodiscard]] status can_implement(const gated_ffn_args& a) const noexcept {
    if (!cpu::handles_gemv(a.gate.type) || !cpu::handles_gemv(a.up.type)) {
      return status::not_handled("cpu: gate / up dtype not handled");
    }
    if (!a.down_t.absent() && !cpu::handles_gemv(a.down_t.type)) return status::not_handled("cpu: down_t dtype");
    if (a.down_t.absent() && !a.down.absent() && !cpu::handles_gemv(a.down.type)) {
      return status::not_handled("cpu: down dtype not handled");
    }
    if (a.down_t.absent() && !a.neurons.all) {
      return status::not_handled(
          "cpu: the neuron-sparse FFN reads one row of W_down transposed per kept neuron: pass down_t "
          "(cpu::transpose(down) once at load time)");
    }
    return status::ok();
  }
  // Workspace, from the front: the f32 scratch (u and g of the kept neurons, or of all from
  // the crossover on, h for all d_ff neurons, coalescing the filled row list, and the down
  // projection's chunk sums), then, on the int8 path, x quantized (cpu::quantized_x_bytes),
  // then, with an interleaved W_down, h quantized. Everything after the front is 4-byte aligned.
  [[nodiscard]] std::size_t workspace_size(const gated_ffn_args& a) const noexcept {
    return ffn_scratch_floats(a) * sizeof(float) + (ffn_quantizes_x(a) ? cpu::quantized_x_bytes(a.gate.cols) : 0) +
           (down_interleaved(a) ? cpu::quantized_x_bytes(a.gate.rows) : 0);
  }
  status run(const gated_ffn_args& a, std::span<std::byte> workspace, executor_type& ex) const {
    if (const status s = can_implement(a); !s) return s;
    if (ex.splits_work()) {
      return status::not_handled(
          "cpu: the gated FFN needs a barrier between its two phases; with executor::split run it as a "
          "gemv_args (up rows) and a transposed_linear_args (down_t) with the engine's barrier between");
    }
    constexpr std::string_view where = "cpu::gated_ffn";
    check_arguments(a, where);
    if (read_all_from) {
      detail::require(*read_all_from > 0.0 && *read_all_from <= 1.0, where, "cpu_backend::read_all_from",
                      *read_all_from, "a fraction of the d_ff neurons in (0, 1], or unset for the measured crossover");
    }
    const std::size_t d_ff = a.gate.rows;
    const std::size_t count = a.neurons.count(d_ff);
    // Every neuron listed (sorted, unique: 0 .. d_ff-1) runs as dense: the same bits, no
    // index reads. From read_all_from kept (the crossover) every row is read, dense, and the
    // dropped neurons' h set to 0 before the down projection. Below it the kept rows are
    // gathered.
    const bool all_neurons = a.neurons.all || count == d_ff;
    const std::uint32_t* kept = all_neurons ? nullptr : a.neurons.indices.data();
    const bool read_all = !all_neurons && reads_all_rows(a, ex.concurrency());
    const bool every_row = all_neurons || read_all;  // phase 1 reads every row of up (and gate)
    const std::uint32_t* rows = read_all ? nullptr : kept;
    const std::size_t phase1 = read_all ? d_ff : count;  // rows of up (and gate) computed
    float* const u = scratch(workspace, workspace_size(a), where);
    float* const g = u + phase1;
    const bool gate_given = !a.gate_act.empty();
    float* const h = gate_given ? g : g + phase1;  // h[j] for every neuron j (d_ff)
    const bool sparse_down = !a.down_t.absent();
    const bool coalesce = sparse_down && rows != nullptr && coalescing(a.neurons);
    if (coalesce) {
      for (std::size_t j = 0; j < d_ff; ++j) h[j] = 0.0F;  // the filled-in rows add 0
    }
    std::byte* const quantized = workspace.data() + ffn_scratch_floats(a) * sizeof(float);
    quantized_x q{};
    if (ffn_quantizes_x(a)) q = quantize_x(a.x, quantized, every_row);
    const auto gemv_rows = [&](const weight_view& w, std::size_t begin, std::size_t end, float* out) {
      if (int8_path(w.type) && every_row && cpu::has_interleaved(w)) {
        cpu::dispatch_gemv_rows_interleaved(w, begin, end, q.q, q.d, q.s, out);
      } else if (int8_path(w.type)) {
        cpu::dispatch_gemv_rows_q8x(w, rows, begin, end, q.q, q.d, out);
      } else {
        cpu::dispatch_gemv_rows(w, rows, begin, end, a.x.data(), out);
      }
    };
    const std::size_t tasks = (phase1 + cpu::gemv_rows_per_task - 1) / cpu::gemv_rows_per_task;
    ex.parallel_for(tasks, [&](std::size_t t) {
      const std::size_t begin = t * cpu::gemv_rows_per_task;
      const std::size_t end = begin + cpu::gemv_rows_per_task < phase1 ? begin + cpu::gemv_rows_per_task : phase1;
      gemv_rows(a.up, begin, end, u);
      if (!gate_given) {
        gemv_rows(a.gate, begin, end, g);
        cpu::dispatch_activate(a.act, g + begin, end - begin);
      }
      for (std::size_t k = begin; k < end; ++k) {
        const std::size_t j = rows != nullptr ? rows[k] : k;
        h[j] = (gate_given ? a.gate_act[j] : g[k]) * u[k];
      }
    });
    if (read_all) {  // the dropped neurons (not in the sorted kept list) add 0
      std::size_t i = 0;
      for (std::size_t j = 0; j < d_ff; ++j) {
        if (i < count && kept[i] == j) {
          ++i;
        } else {
          h[j] = 0.0F;
        }
      }
    }
    float* const partials = h + d_ff + filled_floats(a);  // the down projection's chunk sums
    if (every_row && down_interleaved(a)) {               // y = W_down·h from its interleaved copy
      std::byte* const at = quantized + (ffn_quantizes_x(a) ? cpu::quantized_x_bytes(a.x.size()) : 0);
      const quantized_x qh = quantize_x({h, d_ff}, at, true);
      cpu::gemv_all_rows_interleaved(a.down, qh.q, qh.d, qh.s, a.y.data(), ex);
    } else if (coalesce) {
      auto* const filled = reinterpret_cast<std::uint32_t*>(h + d_ff);
      const std::size_t n = cpu::coalesced_rows(a.neurons.indices, coalesce_gap, filled);
      cpu::axpy_all_columns(a.down_t, filled, n, h, a.y.data(), partials, ex);
    } else if (sparse_down) {
      cpu::axpy_all_columns(a.down_t, rows, phase1, h, a.y.data(), partials, ex);
    } else {  // dense, W_down only: y = W_down·h
      cpu::gemv_all_rows(a.down, nullptr, a.down.rows, h, a.y.data(), ex);
    }
    return status::ok();
  }

  // --- residual[t] += FFN(input[t]) for the kept tokens t (token-sparse prefill) -------------
  // Weights are read once per call, not once per token: phase 1 walks gate and up in groups
  // of 8 rows (L2-resident while every kept token uses them), phase 2 walks down_t in tiles
  // of 64 output columns (or W_down in groups of 8 rows) the same way. Every value goes
  // through the same row kernels as the decode FFN, so a kept token's update equals the
  // dense gated FFN of that token bit for bit, whatever else is kept and on any thread count.
  [[nodiscard]] status can_implement(const token_ffn_args& a) const noexcept {
    return can_implement(gated_ffn_args{a.act, a.gate, a.up, a.down, {}, {}, subset::everything(), {}, a.down_t});
  }
  // f32 scratch: g and h of every kept token (2 × tokens × d_ff), and y (tokens × d_model);
  // then, on the int8 path, every kept token's input quantized (as gated_ffn_args).
  [[nodiscard]] std::size_t workspace_size(const token_ffn_args& a) const noexcept {
    const std::size_t k = a.tokens.count(a.input.rows);
    return k *
           (token_scratch_floats(a) * sizeof(float) + (token_quantizes_x(a) ? cpu::quantized_x_bytes(a.gate.cols) : 0));
  }
  status run(const token_ffn_args& a, std::span<std::byte> workspace, executor_type& ex) const {
    if (const status s = can_implement(a); !s) return s;
    if (ex.splits_work()) {
      return status::not_handled("cpu: the token FFN needs a barrier between its two phases (see gated_ffn_args)");
    }
    constexpr std::string_view where = "cpu::token_ffn";
    check_arguments(a, where);
    const std::size_t k = a.tokens.count(a.input.rows);
    if (k == 0) return status::ok();
    const std::size_t d_ff = a.gate.rows;
    const std::size_t d_model = a.gate.cols;
    float* const g = scratch(workspace, workspace_size(a), where);  // [k × d_ff]
    float* const h = g + k * d_ff;                                  // [k × d_ff]
    float* const y = h + k * d_ff;                                  // [k × d_model]
    const auto token = [&](std::size_t i) { return a.tokens.all ? i : a.tokens.indices[i]; };
    const auto input = [&](std::size_t i) { return a.input.row(token(i)); };
    std::byte* const quantized = workspace.data() + k * token_scratch_floats(a) * sizeof(float);
    const std::size_t quantized_stride = cpu::quantized_x_bytes(d_model);
    if (token_quantizes_x(a)) {
      for (std::size_t i = 0; i < k; ++i) {
        (void)quantize_x({input(i), d_model}, quantized + i * quantized_stride);
      }
    }
    const auto gemv_rows = [&](const weight_view& w, std::size_t i, std::size_t begin, std::size_t end, float* out) {
      if (int8_path(w.type)) {  // the quantized x of token i, laid out as quantize_x writes it
        const auto* const d = reinterpret_cast<const float*>(quantized + i * quantized_stride);
        const auto* const q = reinterpret_cast<const std::int8_t*>(d + d_model / 32);
        cpu::dispatch_gemv_rows_q8x(w, nullptr, begin, end, q, d, out);
      } else {
        cpu::dispatch_gemv_rows(w, nullptr, begin, end, input(i), out);
      }
    };
    constexpr std::size_t group = 8;
    const std::size_t row_tasks = (d_ff + cpu::gemv_rows_per_task - 1) / cpu::gemv_rows_per_task;
    ex.parallel_for(row_tasks, [&](std::size_t t) {
      const std::size_t begin = t * cpu::gemv_rows_per_task;
      const std::size_t end = std::min(begin + cpu::gemv_rows_per_task, d_ff);
      for (std::size_t r = begin; r < end; r += group) {
        const std::size_t e = std::min(r + group, end);
        for (std::size_t i = 0; i < k; ++i) {
          gemv_rows(a.up, i, r, e, h + i * d_ff);
          gemv_rows(a.gate, i, r, e, g + i * d_ff);
          cpu::dispatch_activate(a.act, g + i * d_ff + r, e - r);
          for (std::size_t j = r; j < e; ++j) h[i * d_ff + j] *= g[i * d_ff + j];
        }
      }
    });
    if (!a.down_t.absent()) {  // y_i = Σ_j h_i[j] · down_t[j, :], tile by tile of columns
      // In the decode FFN's chunked order (cpu::axpy_all_columns), the tile's column form.
      const cpu::row_chunks ch = cpu::cut_rows(d_ff, nullptr, d_ff);
      const std::size_t tiles = (d_model + cpu::axpy_column_quantum - 1) / cpu::axpy_column_quantum;
      ex.parallel_for(tiles, [&](std::size_t t) {
        const std::size_t c0 = t * cpu::axpy_column_quantum;
        const std::size_t c1 = std::min(c0 + cpu::axpy_column_quantum, d_model);
        float sum[cpu::axpy_column_quantum];
        for (std::size_t i = 0; i < k; ++i) {
          cpu::axpy_chunks_in_columns(a.down_t, nullptr, h + i * d_ff, ch, c0, c1, y + i * d_model, sum);
        }
      });
    } else {  // y_i = W_down · h_i, groups of rows of W_down
      const std::size_t tasks = (d_model + cpu::gemv_rows_per_task - 1) / cpu::gemv_rows_per_task;
      ex.parallel_for(tasks, [&](std::size_t t) {
        const std::size_t begin = t * cpu::gemv_rows_per_task;
        const std::size_t end = std::min(begin + cpu::gemv_rows_per_task, d_model);
        for (std::size_t r = begin; r < end; r += group) {
          for (std::size_t i = 0; i < k; ++i) {
            cpu::dispatch_gemv_rows(a.down, nullptr, r, std::min(r + group, end), h + i * d_ff, y + i * d_model);
          }
        }
      });
    }
    for (std::size_t i = 0; i < k; ++i) {
      float* const res = a.residual.row(token(i));
      for (std::size_t c = 0; c < d_model; ++c) res[c] += y[i * d_model + c];
    }
    return status::ok();
  }

 private:
  [[nodiscard]] bool coalescing(const subset& s) const noexcept { return coalesce_gap > 0 && !s.all; }

  // Whether the neuron-sparse FFN (a.neurons a proper subset) reads every row on `threads`
  // threads (read_all_from); with threads 0, whether it may on some thread count.
  [[nodiscard]] bool reads_all_rows(const gated_ffn_args& a, std::size_t threads) const noexcept {
    if (a.down_t.absent()) return false;
    const bool interleaved = int8_activations && cpu::has_interleaved(a.up) && down_interleaved(a);
    const double from = read_all_from  ? *read_all_from
                        : threads == 0 ? cpu::lowest_read_all_from(a.up.type, interleaved)
                                       : cpu::measured_read_all_from(a.up.type, threads, interleaved);
    const auto d_ff = static_cast<double>(a.gate.rows);
    return static_cast<double>(a.neurons.count(a.gate.rows)) >= from * d_ff;
  }

  // Whether a GEMV of weights of type t runs on quantized x.
  [[nodiscard]] bool int8_path(dtype t) const noexcept {
    return int8_activations && (t == dtype::q8_0 || t == dtype::q4_0);
  }
  // Whether the FFN's phase 1 does (up, or gate when it is computed here).
  [[nodiscard]] bool ffn_quantizes_x(const gated_ffn_args& a) const noexcept {
    return int8_path(a.up.type) || (a.gate_act.empty() && int8_path(a.gate.type));
  }

  // Whether the gated FFN's dense down projection reads W_down's interleaved copy.
  [[nodiscard]] bool down_interleaved(const gated_ffn_args& a) const noexcept {
    return int8_activations && !a.down.absent() && cpu::has_interleaved(a.down);
  }

  struct quantized_x {
    const std::int8_t* q = nullptr;
    const float* d = nullptr;
    const std::int32_t* s = nullptr;  // the block sums of q (the interleaved GEMV's), when asked for
  };
  // Quantizes x into the workspace at `at` (4-byte aligned, quantized_x_bytes(x.size()) long:
  // the caller checked): d first, then q, then (sums) the interleaved GEMV's block sums.
  static quantized_x quantize_x(std::span<const float> x, std::byte* at, bool sums = false) {
    auto* const d = reinterpret_cast<float*>(at);
    auto* const q = reinterpret_cast<std::int8_t*>(d + x.size() / 32);
    auto* const s = reinterpret_cast<std::int32_t*>(q + x.size());
    cpu::dispatch_quantize_q8_0_x(x.data(), x.size(), q, d);
    if (sums) cpu::block_sums(q, x.size(), s);
    return {q, d, s};
  }

  [[nodiscard]] bool token_quantizes_x(const token_ffn_args& a) const noexcept {
    return int8_path(a.up.type) || int8_path(a.gate.type);
  }
  // Per kept token: g and h (d_ff each) and y (d_model).
  [[nodiscard]] static std::size_t token_scratch_floats(const token_ffn_args& a) noexcept {
    return 2 * a.gate.rows + a.gate.cols;
  }

  [[nodiscard]] std::size_t ffn_scratch_floats(const gated_ffn_args& a) const noexcept {
    const std::size_t d_ff = a.gate.rows;
    const std::size_t count = a.neurons.count(d_ff);
    const std::size_t phase1 = !a.neurons.all && count < d_ff && reads_all_rows(a, 0) ? d_ff : count;
    const std::size_t partials = a.down_t.absent() ? 0 : cpu::axpy_partial_floats(a.down_t);
    return phase1 * (a.gate_act.empty() ? 2 : 1) + d_ff + filled_floats(a) + partials;
  }
  // The filled row list of a coalescing neuron-sparse FFN (d_ff entries), else nothing.
  [[nodiscard]] std::size_t filled_floats(const gated_ffn_args& a) const noexcept {
    return coalescing(a.neurons) && !a.down_t.absent() ? a.gate.rows : 0;
  }

  // Checks that the workspace holds `bytes` and is 4-byte aligned.
  static void check_workspace(std::span<std::byte> workspace, std::size_t bytes, std::string_view where) {
    if (workspace.size() < bytes || reinterpret_cast<std::uintptr_t>(workspace.data()) % alignof(float) != 0) {
      detail::fail(where, "workspace.size()", workspace.size(),
                   "at least " + std::to_string(bytes) + " bytes (workspace_size(args)), aligned to 4 bytes");
    }
  }
  // The first `bytes` of the workspace as f32 scratch; checks size and alignment.
  static float* scratch(std::span<std::byte> workspace, std::size_t bytes, std::string_view where) {
    check_workspace(workspace, bytes, where);
    return reinterpret_cast<float*>(workspace.data());
  }
};

ACTSPARSE_REQUIRE_BACKEND_FOR(cpu_backend, gemv_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(cpu_backend, gated_ffn_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(cpu_backend, transposed_linear_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(cpu_backend, token_ffn_args);

}  // namespace actsparse
