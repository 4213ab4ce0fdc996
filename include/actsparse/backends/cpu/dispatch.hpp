#pragma once
// The CPU backend's kernel entry points: declared here, defined by implementation.hpp in the
// one translation unit that compiles the kernels (dynamic dispatch to the best compiled
// target, or static). Internal to the backend (cpu_backend calls them); the tests call them to
// check one kernel at a time. Each checks what it can in O(1) and throws actsparse::error.

#include <actsparse/backends/cpu/layouts.hpp>
#include <actsparse/backends/cpu/tuning.hpp>
#include <actsparse/core/activation.hpp>
#include <actsparse/core/row_format.hpp>
#include <actsparse/core/selection_passes.hpp>
#include <actsparse/core/views.hpp>

#include <cstddef>
#include <cstdint>

namespace actsparse::cpu::detail {

// y[k] = W[row_k, :] · x for k in [begin, end), row_k = rows ? rows[k] : k; every dtype.
void gemv_rows(const weight_view& w, const std::uint32_t* rows, std::size_t begin, std::size_t end, const float* x,
               float* y, const kernel_tuning& t = {});

// y[t][k] = W[row_k, :] · x[t] for k in [begin, end) and the tokens t < count, row_k = rows ?
// rows[k] : k: the weights read once for several tokens (f32, f16, bf16; else an error). Each
// value equals gemv_rows's for that row and token bit for bit.
void gemm_rows(const weight_view& w, std::size_t begin, std::size_t end, const float* const* x, std::size_t count,
               float* const* y, const std::uint32_t* rows = nullptr);

// y[c] = Σ_k coef[row_k] · Wt[row_k, c] for c in [col_begin, col_end), row_k = rows ? rows[k] : k
// for k < count; every dtype (block types: columns on 32-value blocks).
void axpy_rows(const weight_view& wt, const std::uint32_t* rows, std::size_t count, const float* coef,
               std::size_t col_begin, std::size_t col_end, float* y, const kernel_tuning& t = {});

// Several tokens' row axpys in chunks of rows: y_t[c] = s_0[c] + s_1[c] + ... for c in
// [col_begin, col_end) and t < count, s_k[c] = Σ_j coef[t][j] · Wt[j, c] over the rows j in
// [first[k], first[k + 1]) (the chain from 0, rows in order; with `rows`, the rows listed at
// those positions), chunks < axpy_max_chunks. Each weight value is loaded once for several
// tokens; each y_t equals axpy_rows over the same chunks (y = s_0, then y += s_1, ...:
// cpu::axpy_chunks_in_columns) bit for bit. Every dtype (block types: columns on 32-value blocks).
void axpy_tokens(const weight_view& wt, const std::size_t* first, std::size_t chunks, const float* const* coef,
                 std::size_t count, std::size_t col_begin, std::size_t col_end, float* const* y,
                 const std::uint32_t* rows = nullptr);

// Decode attention over KV rows of any row_format (attention-inl.h; cpu/attention.hpp composes
// them). Rows hold kv_heads × hd values; head h reads KV head g(h) = h / (heads / kv_heads):
//   attention_scores:  out[h·hstride + p] = scale · (q_h · K_p[g(h)]) for h < heads (q_h = q +
//                      h·hd), p < count; −inf for an absent row
//   attention_softmax_part: per head m[h] = max_p s, w = exp(s − m), l[h] = Σ_p w (absent: 0)
//   attention_values:  acc[h·hd + i] = Σ_p w[h·hstride + p] · V_p[g(h)][i] (positions in order)
void attention_scores(const row_ref* rows, std::size_t count, std::size_t hd, std::size_t kv_heads, const float* q,
                      std::size_t heads, float scale, float* out, std::size_t hstride);
void attention_softmax_part(const float* s, std::size_t count, std::size_t heads, std::size_t hstride, float* w,
                            float* m, float* l);
void attention_values(const row_ref* rows, std::size_t count, std::size_t hd, std::size_t kv_heads, const float* w,
                      std::size_t hstride, std::size_t heads, float* acc);

// Whether the target chosen at run time has a fused multiply-add (then the row axpy equals
// the reference bit for bit).
bool fused_multiply_add();

// The integer kernels (q8_0 / q4_0 on x quantized) of the target chosen at run time:
// "avx512_vnni" (AVX3_DL: vpdpbusd; Highway 1.0.3 has no later x86 target), "avx2" (AVX2 and
// AVX3 without VNNI: vpmaddubsw) or "portable" (every other target).
const char* int8_kernels();

// x[0, n) quantized to 8-bit blocks of 32 values (the q8_0 rule with an f32 scale): d[b] =
// max |x_i| / 127 over block b, q[i] = round(x_i / d[i / 32]) in [-127, 127], so |x_i −
// d·q_i| <= d·(1/2 + 2^-16); q = 0 where d is 0 (or not finite: a NaN or Inf in x makes its
// block's d so, and the products non-finite). n must be a multiple of 32 (else an error).
// Writes q[0, n) and d[0, n / 32). ggml_rounding: ggml's rule instead (int8-inl.h): q =
// round(x·(127 / max|x|)), d rounded to f16, the bits ggml's quantize_row_q8_0 gives x.
void quantize_q8_0_x(const float* x, std::size_t n, std::int8_t* q, float* d, bool ggml_rounding = false);

// y[k] = W[row_k, :]·x for k in [begin, end), row_k = rows ? rows[k] : k, with x given
// quantized (xq, xd of quantize_q8_0_x): per block the exact int32 Σ q_w·q_x, times d_w·d_x in
// f32. W of a dtype with int8 kernels (q8_0 / q4_0; else an error).
void gemv_rows_q8x(const weight_view& w, const std::uint32_t* rows, std::size_t begin, std::size_t end,
                   const std::int8_t* xq, const float* xd, float* y, const kernel_tuning& t = {});

// y[t][k] = W[row_k, :]·x_t for k in [begin, end) and t < count on quantized x (xq[t], xd[t]),
// row_k = rows ? rows[k] : k: each weight unit loaded once for several tokens; each value equals
// gemv_rows_q8x's bit for bit.
void gemm_rows_q8x(const weight_view& w, std::size_t begin, std::size_t end, const std::int8_t* const* xq,
                   const float* const* xd, std::size_t count, float* const* y, const std::uint32_t* rows = nullptr);

// y[k] = W[k, :]·x for k in [begin, end) (begin a multiple of 16), from W's interleaved copy on
// quantized x, with xs[b] = Σ_{i in block b} xq[i] (block_sums). Per row: acc = acc +
// float(D_b)·(d_w·d_x) over the blocks in order, D_b the exact int32 dot product, so a row's
// bits do not depend on the row range.
void gemv_rows_interleaved(const interleaved_view& w, std::size_t begin, std::size_t end, const std::int8_t* xq,
                           const float* xd, const std::int32_t* xs, float* y, const kernel_tuning& t = {});

// y[i] = Σ_b d(i, b)·Σ_{j ∈ S ∩ column b} h_j·q(i, j) for i in [begin, end) (multiples of 32),
// from W_down's column-block copy (layouts.hpp), S = kept[0, count) ascending or every neuron
// (kept null). Per row the same operations whatever the row range (columns-inl.h), and keep-all
// (every index listed) gives the bits of kept = null.
void column_blocks_down(const column_blocks_view& w, const std::uint32_t* kept, std::size_t count, const float* h,
                        std::size_t begin, std::size_t end, float* y);

// v[i] = act(v[i]) for i < n, vectorized (activation-inl.h): within a few ulp of the scalar
// functions of core/activation.hpp, and a value's bits depend only on the value and the
// target. The gated FFNs of this backend compute act(g) with it, and cpu_backend::activate
// exposes it, so keep-all equals dense bit for bit.
void activate(activation a, float* v, std::size_t n);

// The selection passes of the target chosen at run time (null where it has none).
const selection_passes* selection_table();

}  // namespace actsparse::cpu::detail

namespace actsparse::cpu {

// Turns the CPU backend's selection passes (core/selection_passes.hpp) on or off for every
// selector of the program; on by default where the CPU has them. Defined by implementation.hpp.
void use_simd_selection(bool on);

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

}  // namespace actsparse::cpu
