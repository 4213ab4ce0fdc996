#pragma once
// CUDA kernel generator: a kernel_config in, CUDA C++ source text out (extern "C"
// __global__ functions whose names are derived from the config), for run-time compilation
// with NVRTC (nvrtc.hpp). The same config always gives the same text.
//
// Every kernel is deterministic: a fixed work partition and fixed reduction orders, no
// float atomics, so the same inputs give the same bits on every run.
//
// Kernels (W a row-major matrix of `weight` storage, rows `row_stride` bytes apart; cols a
// multiple of block_values(weight); x, y, coef and h f32; idx u32; T = threads_per_block,
// R = rows_per_warp; one warp computes R rows, lanes take storage elements round robin and
// the partial sums meet in a xor-butterfly shuffle):
//   gemv:        actsparse_gemv_<dt>_t<T>[_r<R>](w, row_stride, x, rows, cols, y)
//                y[k] = W[k,:]·x.  grid: ceil(rows / (T/32·R)) blocks of T threads.
//   gather_gemv: actsparse_gather_gemv_<dt>_t<T>[_r<R>](w, row_stride, x, cols, idx, count, y)
//                y[k] = W[idx[k],:]·x (output-sparse).  grid: ceil(count / (T/32·R)).
//   row_axpy:    actsparse_row_axpy_<dt>_t<T>(wt, row_stride, idx, coef, count, cols, y)
//                y = Σ_k coef[k]·Wt[idx[k],:] (input-sparse); each thread owns one storage
//                element (1 or 32 columns) and loops over k in order: acc = fma(coef[k], w, acc)
//                from 0. idx == nullptr means idx[k] = k.  grid: ceil(cols / bv / T).
//   gate_select: two kernels, launched in order on the same grid (ceil(rows / (T/32·R))):
//                actsparse_gate_<act>_<dt>_t<T>[_r<R>](w, row_stride, x, rows, cols, threshold, h, block_counts)
//                  h[j] = act(W[j,:]·x); block_counts[b] = #{j in block b : |h[j]| > threshold}
//                actsparse_compact_t<T>(h, rows, rows_per_block, threshold, block_counts, idx, count)
//                  idx = the kept j in increasing order; *count = their number (written by the
//                  last block; the caller sets it when rows == 0). Block b writes at the sum of
//                  block_counts[0..b), so the list does not depend on scheduling.
//   token_gather:      actsparse_token_gather_t<T>(src, src_stride, tokens, count, d, dst, dst_stride)
//                      dst[k,:] = src[tokens[k],:] (f32 rows, strides in floats; weight must be f32).
//   token_scatter_add: actsparse_token_scatter_add_t<T>(z, z_stride, tokens, count, d, x, x_stride)
//                      x[tokens[k],:] += z[k,:]; tokens must be distinct (each element has one writer).
//                      grid of both: count blocks of T threads, one block per token.
//   top_k:       actsparse_top_k_t<T>(scores, n, k, idx, count)
//                idx = the k highest scores' indices in increasing order, ties to the lower
//                index (as the top_k selector); *count = k (0 when k is 0 or above n). Scores
//                must be finite. grid: 1 block: the k-th largest key bit by bit (32 counting
//                passes), then one pass in index order that writes the kept indices.
//   row_axpy_split: row_axpy split over the kept rows (for long kept lists); two kernels, in order:
//                actsparse_row_axpy_partial_<dt>_t<T>(wt, row_stride, idx, coef, count, cols, rows_per_split, partial)
//                  grid: (ceil(cols / bv / T), splits), splits = split_count(count, rows_per_split). Block y = s
//                  runs row_axpy's fma chain over k in [s·rows_per_split, min(count, (s+1)·rows_per_split)),
//                  in order, into partial[s·cols + c] (partial: splits x cols floats). idx may be nullptr.
//                actsparse_reduce_partials_t<T>(partial, splits, cols, y)
//                  y[c] = ((0 + partial[0·cols+c]) + partial[1·cols+c]) + ... in order of s (0 when
//                  splits is 0).  grid: ceil(cols / T). With one split, y equals row_axpy's bits.
//   gather_values: actsparse_gather_values_t<T>(src, idx, count, dst)
//                dst[k] = src[idx[k]] (f32; compacts the coefficients of an input-sparse linear).
//                grid: ceil(count / T).
//   gated_gather: actsparse_gated_gather_<act>_<dt>_t<T>[_r<R>](gate, gate_stride, up, up_stride, x, cols, idx,
//                count, gate_act, h)   (phase 1 of the gated FFN, fused)
//                j = idx ? idx[k] : k; h[k] = (gate_act ? gate_act[j] : act(Gate[j,:]·x)) · (Up[j,:]·x) for
//                k < count; with gate_act given, no gate row is read. Each dot product takes gather_gemv's
//                operations (lanes, order, butterfly), so h[k] == act(gather_gemv(gate)[k]) ·
//                gather_gemv(up)[k] bit for bit (gate_act[j] in place of the first factor when given).
//                grid: ceil(count / (T/32·R)).
//   gated_hidden: actsparse_gated_hidden_<act>_t<T>(g, u, n, h)
//                h[i] = act(g[i]) · u[i] (f32).  grid: ceil(n / T).
//   batched_gemv: actsparse_batched_gemv_<dt>_t<T>[_r<R>]_b<B>(w, row_stride, x, x_stride, ntok, rows, cols, y,
//                y_stride)   (B = tokens_per_pass: several tokens per weight read, token-sparse prefill)
//                y[t·y_stride + k] = W[k,:]·x[t·x_stride + :] for t < ntok, k < rows (strides in floats).
//                Each warp holds R x B accumulators and loops over the tokens in groups of B; each
//                value takes gemv's operations for its token: gemv's bits.  grid: ceil(rows / (T/32·R)).
//   cumulative_mass: actsparse_cumulative_mass_t<T>(scores, n, mass, min_keep, idx, count)
//                The cumulative_mass selector for one row, with recent_n = 0: idx = the kept
//                indices in increasing order, *count their number. Implements mass, min_keep, mass >= 1
//                (everything) and the dense fallbacks (a NaN / inf or negative score, or all zero:
//                everything, as the selector; the kernel does not say which reason). Not recent_n: a
//                launcher that needs it merges the last recent_n indices itself, with min_keep
//                passed as 0 and the top-up done after the merge (or uses the host selector).
//                mass must be finite and > 0 (the launcher checks, as the selector does); n = 0 gives 0.
//                grid: 1 block. Sums in double, in a fixed order (per thread in index order, lanes
//                in a butterfly, warps in order); the kept set is the smallest prefix of the ranking
//                (score descending, index ascending) whose sum reaches mass·total and that holds
//                min(min_keep, n) scores: a boundary key bit by bit (31 passes), then the fewest ties
//                at it by bisection over the index (only when the boundary score is tied).
//                Guarantee: the same set as cumulative_mass{(double)mass, 0, min_keep} on the host
//                whenever the double sums are exact (both orders then give the exact sum: e.g. scores
//                that are multiples of 2^-m, all below 2^(53-m) / n); otherwise they can differ only
//                where a top set's sum lies within about n·2^-52·total of mass·total (the host sums
//                in 8 index-order lanes). mass is a float: a double mass that is not a float (0.9)
//                is rounded to the nearest float by the caller, which can move the boundary too.

#include <actsparse/backends/cuda/device_math.hpp>
#include <actsparse/core/activation.hpp>
#include <actsparse/core/dtype.hpp>
#include <actsparse/core/error.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#ifdef ACTSPARSE_CUDA_FN
#error "ACTSPARSE_CUDA_FN must not be defined before generator.hpp is included (see device_math.hpp)"
#endif

namespace actsparse::cuda {

enum class kernel_op : std::uint8_t {
  gemv,
  gather_gemv,
  row_axpy,
  gate_select,
  token_gather,
  token_scatter_add,
  top_k,
  row_axpy_split,
  gather_values,
  gated_gather,
  gated_hidden,
  batched_gemv,
  cumulative_mass
};

[[nodiscard]] constexpr std::string_view name(kernel_op op) noexcept {
  switch (op) {
    case kernel_op::gemv:
      return "gemv";
    case kernel_op::gather_gemv:
      return "gather_gemv";
    case kernel_op::row_axpy:
      return "row_axpy";
    case kernel_op::gate_select:
      return "gate_select";
    case kernel_op::token_gather:
      return "token_gather";
    case kernel_op::token_scatter_add:
      return "token_scatter_add";
    case kernel_op::top_k:
      return "top_k";
    case kernel_op::row_axpy_split:
      return "row_axpy_split";
    case kernel_op::gather_values:
      return "gather_values";
    case kernel_op::gated_gather:
      return "gated_gather";
    case kernel_op::gated_hidden:
      return "gated_hidden";
    case kernel_op::batched_gemv:
      return "batched_gemv";
    case kernel_op::cumulative_mass:
      return "cumulative_mass";
  }
  return "?";
}

struct kernel_config {
  kernel_op op = kernel_op::gemv;
  dtype weight = dtype::f32;
  activation act = activation::silu;  // gate_select, gated_gather and gated_hidden only
  unsigned threads_per_block = 256;   // a multiple of 32 in [32, 1024]
  unsigned rows_per_warp = 1;         // 1, 2, 4 or 8 rows share each load of x (the warp-per-row ops; else 1)
  unsigned tokens_per_pass = 1;       // batched_gemv: 1, 2, 4 or 8 tokens share each weight load (else 1)
};

namespace detail {

inline constexpr std::string_view generator_where = "cuda::generate_cuda";

[[nodiscard]] constexpr bool known(dtype t) noexcept {
  return t == dtype::f32 || t == dtype::f16 || t == dtype::bf16 || t == dtype::q8_0 || t == dtype::q4_0;
}

[[nodiscard]] constexpr bool known(activation a) noexcept {
  return a == activation::silu || a == activation::gelu || a == activation::relu;
}

[[nodiscard]] constexpr bool known(kernel_op op) noexcept {
  return op == kernel_op::gemv || op == kernel_op::gather_gemv || op == kernel_op::row_axpy ||
         op == kernel_op::gate_select || op == kernel_op::token_gather || op == kernel_op::token_scatter_add ||
         op == kernel_op::top_k || op == kernel_op::row_axpy_split || op == kernel_op::gather_values ||
         op == kernel_op::gated_gather || op == kernel_op::gated_hidden || op == kernel_op::batched_gemv ||
         op == kernel_op::cumulative_mass;
}

[[nodiscard]] inline std::string decoder_source(dtype t) {
  switch (t) {
    case dtype::f32:
      return ACTSPARSE_CUDA_STRINGIFY(ACTSPARSE_CUDA_DECODE_F32);
    case dtype::f16:
      return ACTSPARSE_CUDA_STRINGIFY(ACTSPARSE_CUDA_DECODE_F16);
    case dtype::bf16:
      return ACTSPARSE_CUDA_STRINGIFY(ACTSPARSE_CUDA_DECODE_BF16);
    case dtype::q8_0:
      return ACTSPARSE_CUDA_STRINGIFY(ACTSPARSE_CUDA_DECODE_Q8_0);
    case dtype::q4_0:
      return ACTSPARSE_CUDA_STRINGIFY(ACTSPARSE_CUDA_DECODE_Q4_0);
  }
  return {};
}

// The device primitives of device_math.hpp, and the warp reduction.
inline constexpr std::string_view prelude = R"(#define ACTSPARSE_CUDA_FN __device__ __forceinline__
ACTSPARSE_CUDA_FN unsigned short actsparse_load_u16(const unsigned char* p) { return *(const unsigned short*)p; }
ACTSPARSE_CUDA_FN float actsparse_load_f32(const unsigned char* p) { return *(const float*)p; }
ACTSPARSE_CUDA_FN float actsparse_half_to_float(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
ACTSPARSE_CUDA_FN float actsparse_bits_to_float(unsigned int b) { return __uint_as_float(b); }
ACTSPARSE_CUDA_FN unsigned int actsparse_float_to_bits(float f) { return __float_as_uint(f); }
// Every lane ends with the same sum: each step adds a pair in both lanes, and a + b == b + a.
ACTSPARSE_CUDA_FN float actsparse_warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
ACTSPARSE_CUDA_FN unsigned int actsparse_warp_sum_u32(unsigned int v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
)";

[[nodiscard]] constexpr bool is_token_op(kernel_op op) noexcept {
  return op == kernel_op::token_gather || op == kernel_op::token_scatter_add;
}

// Ops over f32 activations or scores, not weights.
[[nodiscard]] constexpr bool is_f32_op(kernel_op op) noexcept {
  return is_token_op(op) || op == kernel_op::top_k || op == kernel_op::gather_values || op == kernel_op::gated_hidden ||
         op == kernel_op::cumulative_mass;
}

// Ops whose warps compute whole rows (rows_per_warp rows each).
[[nodiscard]] constexpr bool is_warp_row_op(kernel_op op) noexcept {
  return op == kernel_op::gemv || op == kernel_op::gather_gemv || op == kernel_op::gate_select ||
         op == kernel_op::gated_gather || op == kernel_op::batched_gemv;
}

// Ops that apply `act`.
[[nodiscard]] constexpr bool uses_act(kernel_op op) noexcept {
  return op == kernel_op::gate_select || op == kernel_op::gated_gather || op == kernel_op::gated_hidden;
}

[[nodiscard]] constexpr bool one_two_four_eight(unsigned v) noexcept { return v == 1 || v == 2 || v == 4 || v == 8; }

inline void validate(const kernel_config& c) {
  const std::string_view w = generator_where;
  actsparse::detail::require(known(c.op), w, "op", static_cast<int>(c.op),
                             "gemv, gather_gemv, row_axpy, gate_select, token_gather, token_scatter_add, top_k, "
                             "row_axpy_split, gather_values, gated_gather, gated_hidden, batched_gemv or "
                             "cumulative_mass");
  actsparse::detail::require(known(c.weight), w, "weight", static_cast<int>(c.weight), "f32, f16, bf16, q8_0 or q4_0");
  actsparse::detail::require(known(c.act), w, "act", static_cast<int>(c.act), "silu, gelu or relu");
  actsparse::detail::require(c.threads_per_block >= 32 && c.threads_per_block <= 1024 && c.threads_per_block % 32 == 0,
                             w, "threads_per_block", c.threads_per_block,
                             "a multiple of 32 (the warp size) in [32, 1024]");
  if (is_f32_op(c.op)) {
    actsparse::detail::require(c.weight == dtype::f32, w, "weight", name(c.weight),
                               "f32 for the token ops, top_k, gather_values, gated_hidden and cumulative_mass (they "
                               "read f32 activations or scores)");
    actsparse::detail::require(c.rows_per_warp == 1, w, "rows_per_warp", c.rows_per_warp,
                               "1 for the token ops (one block per token), top_k and cumulative_mass (one block) "
                               "and the elementwise gather_values and gated_hidden");
  } else if (c.op == kernel_op::row_axpy || c.op == kernel_op::row_axpy_split) {
    actsparse::detail::require(c.rows_per_warp == 1, w, "rows_per_warp", c.rows_per_warp,
                               "1 for row_axpy and row_axpy_split (each thread owns columns and loops over the kept "
                               "rows)");
  } else {
    actsparse::detail::require(one_two_four_eight(c.rows_per_warp), w, "rows_per_warp", c.rows_per_warp,
                               "1, 2, 4 or 8");
  }
  if (c.op == kernel_op::batched_gemv) {
    actsparse::detail::require(one_two_four_eight(c.tokens_per_pass), w, "tokens_per_pass", c.tokens_per_pass,
                               "1, 2, 4 or 8 for batched_gemv");
  } else {
    actsparse::detail::require(c.tokens_per_pass == 1, w, "tokens_per_pass", c.tokens_per_pass,
                               "1 (only batched_gemv reads several tokens per pass)");
  }
}

[[nodiscard]] inline std::string suffix(const kernel_config& c) {
  std::string s = "_t" + std::to_string(c.threads_per_block);
  if (c.rows_per_warp > 1) s += "_r" + std::to_string(c.rows_per_warp);
  return s;
}

// Replaces every "$KEY" in text by its value (keys are distinct and not prefixes of one another).
[[nodiscard]] inline std::string fill(std::string_view text,
                                      const std::vector<std::pair<std::string_view, std::string>>& keys) {
  std::string out;
  out.reserve(text.size() + 256);
  std::size_t i = 0;
  while (i < text.size()) {
    bool replaced = false;
    if (text[i] == '$') {
      for (const auto& [key, value] : keys) {
        if (text.substr(i + 1, key.size()) == key) {
          out += value;
          i += 1 + key.size();
          replaced = true;
          break;
        }
      }
    }
    if (!replaced) out += text[i++];
  }
  return out;
}

// The body shared by the warp-per-row kernels: acc[r] = W[row(first + r), :]·x, in every lane.
// $ROW(k) is the row of output k; rows of outputs >= $LIMIT are never written (row 0 is read
// in their place so that every lane reaches the shuffles).
inline constexpr std::string_view warp_rows_body = R"(  const unsigned int lane = threadIdx.x & 31u;
  const unsigned int warp = threadIdx.x >> 5;
  const unsigned int first = (blockIdx.x * $WARPSu + warp) * $Ru;
  const unsigned int n = cols / $BVu;
  const unsigned char* rowp[$R];
  float acc[$R];
#pragma unroll
  for (int r = 0; r < $R; ++r) {
    const unsigned int k = first + (unsigned int)r;
    rowp[r] = k < $LIMIT ? w + (unsigned long long)($ROW) * row_stride : w;
    acc[r] = 0.0f;
  }
  for (unsigned int e = lane; e < n; e += 32u) {
    float xv[$BV];
#pragma unroll
    for (int i = 0; i < $BV; ++i) xv[i] = x[e * $BVu + (unsigned int)i];
#pragma unroll
    for (int r = 0; r < $R; ++r) {
      float wv[$BV];
      actsparse_decode_$DT(rowp[r], e, wv);
#pragma unroll
      for (int i = 0; i < $BV; ++i) acc[r] = fmaf(wv[i], xv[i], acc[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < $R; ++r) acc[r] = actsparse_warp_sum(acc[r]);
)";

inline constexpr std::string_view gemv_kernel = R"(extern "C" __global__ void __launch_bounds__($T) $NAME(
    const unsigned char* __restrict__ w, unsigned long long row_stride, const float* __restrict__ x,
    unsigned int rows, unsigned int cols, float* __restrict__ y) {
$BODY  if (lane == 0u) {
#pragma unroll
    for (int r = 0; r < $R; ++r) {
      const unsigned int k = first + (unsigned int)r;
      if (k < rows) y[k] = acc[r];
    }
  }
}
)";

inline constexpr std::string_view gather_kernel = R"(extern "C" __global__ void __launch_bounds__($T) $NAME(
    const unsigned char* __restrict__ w, unsigned long long row_stride, const float* __restrict__ x,
    unsigned int cols, const unsigned int* __restrict__ idx, unsigned int count, float* __restrict__ y) {
$BODY  if (lane == 0u) {
#pragma unroll
    for (int r = 0; r < $R; ++r) {
      const unsigned int k = first + (unsigned int)r;
      if (k < count) y[k] = acc[r];
    }
  }
}
)";

inline constexpr std::string_view gate_kernel = R"(extern "C" __global__ void __launch_bounds__($T) $NAME(
    const unsigned char* __restrict__ w, unsigned long long row_stride, const float* __restrict__ x,
    unsigned int rows, unsigned int cols, float threshold, float* __restrict__ h,
    unsigned int* __restrict__ block_counts) {
$BODY  __shared__ unsigned int warp_kept[$WARPS];
  if (lane == 0u) {
    unsigned int kept = 0u;
#pragma unroll
    for (int r = 0; r < $R; ++r) {
      const unsigned int k = first + (unsigned int)r;
      if (k < rows) {
        const float v = actsparse_$ACT(acc[r]);
        h[k] = v;
        if (fabsf(v) > threshold) ++kept;
      }
    }
    warp_kept[warp] = kept;
  }
  __syncthreads();
  if (threadIdx.x == 0u) {
    unsigned int total = 0u;
    for (int i = 0; i < $WARPS; ++i) total += warp_kept[i];
    block_counts[blockIdx.x] = total;
  }
}
)";

// Integer counts: their sums are exact in any order. The kept rows of a chunk get their
// positions from a ballot per warp and the counts of the warps before it.
inline constexpr std::string_view compact_kernel = R"(extern "C" __global__ void __launch_bounds__($T) $NAME(
    const float* __restrict__ h, unsigned int rows, unsigned int rows_per_block, float threshold,
    const unsigned int* __restrict__ block_counts, unsigned int* __restrict__ idx, unsigned int* __restrict__ count) {
  __shared__ unsigned int warp_kept[$WARPS];
  __shared__ unsigned int base;
  const unsigned int lane = threadIdx.x & 31u;
  const unsigned int warp = threadIdx.x >> 5;
  unsigned int before = 0u;
  for (unsigned int b = threadIdx.x; b < blockIdx.x; b += $Tu) before += block_counts[b];
  before = actsparse_warp_sum_u32(before);
  if (lane == 0u) warp_kept[warp] = before;
  __syncthreads();
  if (threadIdx.x == 0u) {
    unsigned int total = 0u;
    for (int i = 0; i < $WARPS; ++i) total += warp_kept[i];
    base = total;
  }
  const unsigned int first = blockIdx.x * rows_per_block;
  const unsigned int end = first >= rows ? first : (rows - first < rows_per_block ? rows : first + rows_per_block);
  for (unsigned int chunk = first; chunk < end; chunk += $Tu) {
    const unsigned int k = chunk + threadIdx.x;
    const bool keep = k < end && fabsf(h[k]) > threshold;
    const unsigned int ballot = __ballot_sync(0xffffffffu, keep);
    __syncthreads();
    if (lane == 0u) warp_kept[warp] = (unsigned int)__popc(ballot);
    __syncthreads();
    unsigned int at = base;
    for (unsigned int i = 0u; i < warp; ++i) at += warp_kept[i];
    if (keep) idx[at + (unsigned int)__popc(ballot & ((1u << lane) - 1u))] = k;
    __syncthreads();
    if (threadIdx.x == 0u) {
      for (int i = 0; i < $WARPS; ++i) base += warp_kept[i];
    }
  }
  if (threadIdx.x == 0u && blockIdx.x == gridDim.x - 1u) *count = base;
}
)";

inline constexpr std::string_view axpy_kernel = R"(extern "C" __global__ void __launch_bounds__($T) $NAME(
    const unsigned char* __restrict__ wt, unsigned long long row_stride, const unsigned int* __restrict__ idx,
    const float* __restrict__ coef, unsigned int count, unsigned int cols, float* __restrict__ y) {
  const unsigned int e = blockIdx.x * $Tu + threadIdx.x;
  if (e >= cols / $BVu) return;
  float acc[$BV];
#pragma unroll
  for (int i = 0; i < $BV; ++i) acc[i] = 0.0f;
  for (unsigned int k = 0u; k < count; ++k) {
    const float c = coef[k];
    float wv[$BV];
    actsparse_decode_$DT(wt + (unsigned long long)(idx != nullptr ? idx[k] : k) * row_stride, e, wv);
#pragma unroll
    for (int i = 0; i < $BV; ++i) acc[i] = fmaf(c, wv[i], acc[i]);
  }
#pragma unroll
  for (int i = 0; i < $BV; ++i) y[e * $BVu + (unsigned int)i] = acc[i];
}
)";

inline constexpr std::string_view token_gather_kernel = R"(extern "C" __global__ void __launch_bounds__($T) $NAME(
    const float* __restrict__ src, unsigned long long src_stride, const unsigned int* __restrict__ tokens,
    unsigned int count, unsigned int d, float* __restrict__ dst, unsigned long long dst_stride) {
  const unsigned int k = blockIdx.x;
  if (k >= count) return;
  const float* from = src + (unsigned long long)tokens[k] * src_stride;
  float* to = dst + (unsigned long long)k * dst_stride;
  for (unsigned int i = threadIdx.x; i < d; i += $Tu) to[i] = from[i];
}
)";

inline constexpr std::string_view token_scatter_add_kernel = R"(extern "C" __global__ void __launch_bounds__($T) $NAME(
    const float* __restrict__ z, unsigned long long z_stride, const unsigned int* __restrict__ tokens,
    unsigned int count, unsigned int d, float* __restrict__ x, unsigned long long x_stride) {
  const unsigned int k = blockIdx.x;
  if (k >= count) return;
  const float* from = z + (unsigned long long)k * z_stride;
  float* to = x + (unsigned long long)tokens[k] * x_stride;
  for (unsigned int i = threadIdx.x; i < d; i += $Tu) to[i] += from[i];
}
)";

// Counts are integers: exact in any order. Every thread keeps the running totals in
// registers, updated identically from the per-warp ballots, so no shared running state.
inline constexpr std::string_view top_k_kernel = R"(ACTSPARSE_CUDA_FN unsigned int actsparse_count_above(
    const float* __restrict__ scores, unsigned int n, unsigned int bound, unsigned int* warp_part) {
  unsigned int c = 0u;
  for (unsigned int i = threadIdx.x; i < n; i += $Tu) c += actsparse_order_key(scores[i]) > bound ? 1u : 0u;
  c = actsparse_warp_sum_u32(c);
  if ((threadIdx.x & 31u) == 0u) warp_part[threadIdx.x >> 5] = c;
  __syncthreads();
  unsigned int total = 0u;
  for (int w = 0; w < $WARPS; ++w) total += warp_part[w];
  __syncthreads();
  return total;
}
extern "C" __global__ void __launch_bounds__($T) $NAME(
    const float* __restrict__ scores, unsigned int n, unsigned int k, unsigned int* __restrict__ idx,
    unsigned int* __restrict__ count) {
  __shared__ unsigned int warp_gt[$WARPS];
  __shared__ unsigned int warp_eq[$WARPS];
  const unsigned int lane = threadIdx.x & 31u;
  const unsigned int warp = threadIdx.x >> 5;
  if (k == 0u || k > n) {
    if (threadIdx.x == 0u) *count = 0u;
    return;
  }
  unsigned int kth = 0u;
  for (int bit = 31; bit >= 0; --bit) {
    const unsigned int candidate = kth | (1u << bit);
    if (actsparse_count_above(scores, n, candidate - 1u, warp_gt) >= k) kth = candidate;
  }
  const unsigned int ties = k - actsparse_count_above(scores, n, kth, warp_gt);
  const unsigned int lanes_before = (1u << lane) - 1u;
  unsigned int gt_base = 0u;
  unsigned int eq_base = 0u;
  for (unsigned int chunk = 0u; chunk < n; chunk += $Tu) {
    const unsigned int i = chunk + threadIdx.x;
    const unsigned int key = i < n ? actsparse_order_key(scores[i]) : 0u;
    const bool gt = i < n && key > kth;
    const bool eq = i < n && key == kth;
    const unsigned int ballot_gt = __ballot_sync(0xffffffffu, gt);
    const unsigned int ballot_eq = __ballot_sync(0xffffffffu, eq);
    __syncthreads();
    if (lane == 0u) {
      warp_gt[warp] = (unsigned int)__popc(ballot_gt);
      warp_eq[warp] = (unsigned int)__popc(ballot_eq);
    }
    __syncthreads();
    unsigned int gt_before = gt_base + (unsigned int)__popc(ballot_gt & lanes_before);
    unsigned int eq_before = eq_base + (unsigned int)__popc(ballot_eq & lanes_before);
    for (unsigned int w = 0u; w < $WARPSu; ++w) {
      if (w < warp) {
        gt_before += warp_gt[w];
        eq_before += warp_eq[w];
      }
      gt_base += warp_gt[w];
      eq_base += warp_eq[w];
    }
    if (gt || (eq && eq_before < ties)) idx[gt_before + (eq_before < ties ? eq_before : ties)] = i;
  }
  if (threadIdx.x == 0u) *count = k;
}
)";

// row_axpy over the kept rows [s·rows_per_split, min(count, (s+1)·rows_per_split)) of split
// s = blockIdx.y, into its own row of partial; the same fma chain as row_axpy within a split.
inline constexpr std::string_view axpy_partial_kernel = R"(extern "C" __global__ void __launch_bounds__($T) $NAME(
    const unsigned char* __restrict__ wt, unsigned long long row_stride, const unsigned int* __restrict__ idx,
    const float* __restrict__ coef, unsigned int count, unsigned int cols, unsigned int rows_per_split,
    float* __restrict__ partial) {
  const unsigned int e = blockIdx.x * $Tu + threadIdx.x;
  if (e >= cols / $BVu) return;
  const unsigned int begin = blockIdx.y * rows_per_split;
  const unsigned int end = begin >= count ? begin : (count - begin < rows_per_split ? count : begin + rows_per_split);
  float acc[$BV];
#pragma unroll
  for (int i = 0; i < $BV; ++i) acc[i] = 0.0f;
  for (unsigned int k = begin; k < end; ++k) {
    const float c = coef[k];
    float wv[$BV];
    actsparse_decode_$DT(wt + (unsigned long long)(idx != nullptr ? idx[k] : k) * row_stride, e, wv);
#pragma unroll
    for (int i = 0; i < $BV; ++i) acc[i] = fmaf(c, wv[i], acc[i]);
  }
  float* out = partial + (unsigned long long)blockIdx.y * cols;
#pragma unroll
  for (int i = 0; i < $BV; ++i) out[e * $BVu + (unsigned int)i] = acc[i];
}
)";

inline constexpr std::string_view reduce_partials_kernel = R"(extern "C" __global__ void __launch_bounds__($T) $NAME(
    const float* __restrict__ partial, unsigned int splits, unsigned int cols, float* __restrict__ y) {
  const unsigned int c = blockIdx.x * $Tu + threadIdx.x;
  if (c >= cols) return;
  float acc = 0.0f;
  for (unsigned int s = 0u; s < splits; ++s) acc += partial[(unsigned long long)s * cols + c];
  y[c] = acc;
}
)";

inline constexpr std::string_view gather_values_kernel = R"(extern "C" __global__ void __launch_bounds__($T) $NAME(
    const float* __restrict__ src, const unsigned int* __restrict__ idx, unsigned int count, float* __restrict__ dst) {
  const unsigned int k = blockIdx.x * $Tu + threadIdx.x;
  if (k < count) dst[k] = src[idx[k]];
}
)";

inline constexpr std::string_view gated_hidden_kernel = R"(extern "C" __global__ void __launch_bounds__($T) $NAME(
    const float* __restrict__ g, const float* __restrict__ u, unsigned int n, float* __restrict__ h) {
  const unsigned int i = blockIdx.x * $Tu + threadIdx.x;
  if (i < n) h[i] = actsparse_$ACT(g[i]) * u[i];
}
)";

// warp_rows_body over two matrices: each accumulator sees exactly the operations of
// warp_rows_body (the same lanes, order and butterfly), so its sums are gather_gemv's bits.
// With gate_act given, the gate loads and sums are skipped (a uniform branch).
inline constexpr std::string_view gated_gather_kernel = R"(extern "C" __global__ void __launch_bounds__($T) $NAME(
    const unsigned char* __restrict__ gate, unsigned long long gate_stride, const unsigned char* __restrict__ up,
    unsigned long long up_stride, const float* __restrict__ x, unsigned int cols, const unsigned int* __restrict__ idx,
    unsigned int count, const float* __restrict__ gate_act, float* __restrict__ h) {
  const unsigned int lane = threadIdx.x & 31u;
  const unsigned int warp = threadIdx.x >> 5;
  const unsigned int first = (blockIdx.x * $WARPSu + warp) * $Ru;
  const unsigned int n = cols / $BVu;
  const bool need_gate = gate_act == nullptr;
  unsigned int row[$R];
  float acc_g[$R];
  float acc_u[$R];
#pragma unroll
  for (int r = 0; r < $R; ++r) {
    const unsigned int k = first + (unsigned int)r;
    row[r] = k < count ? (idx != nullptr ? idx[k] : k) : 0u;
    acc_g[r] = 0.0f;
    acc_u[r] = 0.0f;
  }
  for (unsigned int e = lane; e < n; e += 32u) {
    float xv[$BV];
#pragma unroll
    for (int i = 0; i < $BV; ++i) xv[i] = x[e * $BVu + (unsigned int)i];
#pragma unroll
    for (int r = 0; r < $R; ++r) {
      float wv[$BV];
      actsparse_decode_$DT(up + (unsigned long long)row[r] * up_stride, e, wv);
#pragma unroll
      for (int i = 0; i < $BV; ++i) acc_u[r] = fmaf(wv[i], xv[i], acc_u[r]);
    }
    if (need_gate) {
#pragma unroll
      for (int r = 0; r < $R; ++r) {
        float wv[$BV];
        actsparse_decode_$DT(gate + (unsigned long long)row[r] * gate_stride, e, wv);
#pragma unroll
        for (int i = 0; i < $BV; ++i) acc_g[r] = fmaf(wv[i], xv[i], acc_g[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < $R; ++r) {
    acc_u[r] = actsparse_warp_sum(acc_u[r]);
    if (need_gate) acc_g[r] = actsparse_warp_sum(acc_g[r]);
  }
  if (lane == 0u) {
#pragma unroll
    for (int r = 0; r < $R; ++r) {
      const unsigned int k = first + (unsigned int)r;
      if (k < count) h[k] = (need_gate ? actsparse_$ACT(acc_g[r]) : gate_act[row[r]]) * acc_u[r];
    }
  }
}
)";

// warp_rows_body for tokens_per_pass tokens at a time: one decode of a weight element feeds
// the accumulators of its row; each accumulator sees gemv's operations for its token.
// $EUNROLL bounds the unrolling of the element loop: left to itself, ptxas for sm_90 unrolled
// the one-value dtypes' loop and then spilled (12 bytes at 40 registers, T=512 R=4 B=2); the
// block dtypes' loop body is large enough that it is not unrolled anyway.
inline constexpr std::string_view batched_gemv_kernel = R"(extern "C" __global__ void __launch_bounds__($T) $NAME(
    const unsigned char* __restrict__ w, unsigned long long row_stride, const float* __restrict__ x,
    unsigned long long x_stride, unsigned int ntok, unsigned int rows, unsigned int cols, float* __restrict__ y,
    unsigned long long y_stride) {
  const unsigned int lane = threadIdx.x & 31u;
  const unsigned int warp = threadIdx.x >> 5;
  const unsigned int first = (blockIdx.x * $WARPSu + warp) * $Ru;
  const unsigned int n = cols / $BVu;
  const unsigned char* rowp[$R];
#pragma unroll
  for (int r = 0; r < $R; ++r) {
    const unsigned int k = first + (unsigned int)r;
    rowp[r] = k < rows ? w + (unsigned long long)k * row_stride : w;
  }
  for (unsigned int t0 = 0u; t0 < ntok; t0 += $PASSu) {
    const float* xb[$PASS];
    float acc[$R][$PASS];
#pragma unroll
    for (int b = 0; b < $PASS; ++b) {
      const unsigned int t = t0 + (unsigned int)b;
      xb[b] = x + (unsigned long long)(t < ntok ? t : t0) * x_stride;
#pragma unroll
      for (int r = 0; r < $R; ++r) acc[r][b] = 0.0f;
    }
$EUNROLL
    for (unsigned int e = lane; e < n; e += 32u) {
#pragma unroll
      for (int r = 0; r < $R; ++r) {
        float wv[$BV];
        actsparse_decode_$DT(rowp[r], e, wv);
#pragma unroll
        for (int b = 0; b < $PASS; ++b) {
#pragma unroll
          for (int i = 0; i < $BV; ++i) acc[r][b] = fmaf(wv[i], xb[b][e * $BVu + (unsigned int)i], acc[r][b]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < $R; ++r) {
#pragma unroll
      for (int b = 0; b < $PASS; ++b) acc[r][b] = actsparse_warp_sum(acc[r][b]);
    }
    if (lane == 0u) {
#pragma unroll
      for (int b = 0; b < $PASS; ++b) {
        const unsigned int t = t0 + (unsigned int)b;
#pragma unroll
        for (int r = 0; r < $R; ++r) {
          const unsigned int k = first + (unsigned int)r;
          if (t < ntok && k < rows) y[(unsigned long long)t * y_stride + k] = acc[r][b];
        }
      }
    }
  }
}
)";

// Sums in double: each thread adds its scores (i = threadIdx.x, + T, ...) in index order,
// the lanes meet in a xor butterfly (the same sum in every lane), the warps in warp order;
// every thread returns the same values. The mass of a set of scores >= 0 never decreases
// when a score joins it (each step is a rounded addition of terms >= 0), so bisection over
// the boundary is sound. The set is {key > k} ∪ {key == k, index < j}: a prefix of the
// ranking by (score descending, index ascending) of the selectors.
inline constexpr std::string_view cumulative_mass_kernel = R"(ACTSPARSE_CUDA_FN double actsparse_mass_above(
    const float* __restrict__ scores, unsigned int n, unsigned int k, unsigned int j, unsigned int* count,
    double* warp_mass, unsigned int* warp_count) {
  double m = 0.0;
  unsigned int c = 0u;
  for (unsigned int i = threadIdx.x; i < n; i += $Tu) {
    const float s = scores[i];
    const unsigned int key = actsparse_order_key(s);
    if (key > k || (key == k && i < j)) {
      m += (double)s;
      ++c;
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) m += __shfl_xor_sync(0xffffffffu, m, offset);
  c = actsparse_warp_sum_u32(c);
  if ((threadIdx.x & 31u) == 0u) {
    warp_mass[threadIdx.x >> 5] = m;
    warp_count[threadIdx.x >> 5] = c;
  }
  __syncthreads();
  double total = 0.0;
  unsigned int total_count = 0u;
  for (int w = 0; w < $WARPS; ++w) {
    total += warp_mass[w];
    total_count += warp_count[w];
  }
  __syncthreads();
  *count = total_count;
  return total;
}
extern "C" __global__ void __launch_bounds__($T) $NAME(
    const float* __restrict__ scores, unsigned int n, float mass, unsigned int min_keep, unsigned int* __restrict__ idx,
    unsigned int* __restrict__ count) {
  __shared__ double warp_mass[$WARPS];
  __shared__ unsigned int warp_count[$WARPS];
  __shared__ unsigned int warp_eq[$WARPS];
  const unsigned int lane = threadIdx.x & 31u;
  const unsigned int warp = threadIdx.x >> 5;
  // The selector's dense fallbacks: a NaN / inf or a negative score (-0 is not), or all zero.
  unsigned int bad = 0u;
  for (unsigned int i = threadIdx.x; i < n; i += $Tu) {
    const unsigned int u = actsparse_float_to_bits(scores[i]);
    bad += ((u & 0x7F800000u) == 0x7F800000u || u > 0x80000000u) ? 1u : 0u;
  }
  bad = actsparse_warp_sum_u32(bad);
  if (lane == 0u) warp_count[warp] = bad;
  __syncthreads();
  bad = 0u;
  for (int w = 0; w < $WARPS; ++w) bad += warp_count[w];
  __syncthreads();
  unsigned int c = 0u;
  const double total = actsparse_mass_above(scores, n, 0x80000000u, n, &c, warp_mass, warp_count);
  const unsigned int keep = min_keep < n ? min_keep : n;
  const double target = (double)mass * total;
  // Whether a set of this mass and size is enough: it reaches target and holds min_keep.
  auto enough = [&](double m, unsigned int size) { return size >= keep && m >= target; };
  unsigned int ke = 0u;  // keep {key > ke} ∪ {key == ke, index < je}; every key is >= 1: everything
  unsigned int je = n;
  if (bad != 0u || total == 0.0 || mass >= 1.0f) {
    // Everything is kept.
  } else if (enough(0.0, 0u)) {
    ke = 0xFFFFFFFFu;  // nothing: mass * total is not above 0 and min_keep is 0
    je = 0u;
  } else {
    // The largest boundary key whose {key >= ke} is enough, bit by bit (the keys of scores >= 0 are >= 2^31).
    ke = 0x80000000u;
    for (int bit = 30; bit >= 0; --bit) {
      const unsigned int candidate = ke | (1u << bit);
      const double m = actsparse_mass_above(scores, n, candidate, n, &c, warp_mass, warp_count);
      if (enough(m, c)) ke = candidate;
    }
    // {key > ke} is not enough, {key >= ke} is: the fewest ties at ke, in index order, that are.
    unsigned int above = 0u;
    unsigned int with_ties = 0u;
    (void)actsparse_mass_above(scores, n, ke, 0u, &above, warp_mass, warp_count);
    (void)actsparse_mass_above(scores, n, ke, n, &with_ties, warp_mass, warp_count);
    if (with_ties - above > 1u) {
      unsigned int lo = 0u;  // the ties below index lo are not enough, those below je are
      while (je - lo > 1u) {
        const unsigned int mid = lo + (je - lo) / 2u;
        const double m = actsparse_mass_above(scores, n, ke, mid, &c, warp_mass, warp_count);
        if (enough(m, c)) {
          je = mid;
        } else {
          lo = mid;
        }
      }
    }
  }
  const unsigned int lanes_before = (1u << lane) - 1u;
  unsigned int base = 0u;
  for (unsigned int chunk = 0u; chunk < n; chunk += $Tu) {
    const unsigned int i = chunk + threadIdx.x;
    const unsigned int key = i < n ? actsparse_order_key(scores[i]) : 0u;
    const bool kept = i < n && (key > ke || (key == ke && i < je));
    const unsigned int ballot = __ballot_sync(0xffffffffu, kept);
    __syncthreads();
    if (lane == 0u) warp_eq[warp] = (unsigned int)__popc(ballot);
    __syncthreads();
    unsigned int at = base + (unsigned int)__popc(ballot & lanes_before);
    for (unsigned int w = 0u; w < $WARPSu; ++w) {
      if (w < warp) at += warp_eq[w];
      base += warp_eq[w];
    }
    if (kept) idx[at] = i;
  }
  if (threadIdx.x == 0u) *count = base;
}
)";

}  // namespace detail

// The names of the extern "C" kernels generate_cuda(c) defines, in launch order.
[[nodiscard]] inline std::vector<std::string> kernel_names(const kernel_config& c) {
  detail::validate(c);
  const std::string dt(name(c.weight));
  switch (c.op) {
    case kernel_op::gemv:
      return {"actsparse_gemv_" + dt + detail::suffix(c)};
    case kernel_op::gather_gemv:
      return {"actsparse_gather_gemv_" + dt + detail::suffix(c)};
    case kernel_op::row_axpy:
      return {"actsparse_row_axpy_" + dt + detail::suffix(c)};
    case kernel_op::gate_select:
      return {"actsparse_gate_" + std::string(name(c.act)) + "_" + dt + detail::suffix(c),
              "actsparse_compact_t" + std::to_string(c.threads_per_block)};
    case kernel_op::token_gather:
      return {"actsparse_token_gather" + detail::suffix(c)};
    case kernel_op::token_scatter_add:
      return {"actsparse_token_scatter_add" + detail::suffix(c)};
    case kernel_op::top_k:
      return {"actsparse_top_k" + detail::suffix(c)};
    case kernel_op::row_axpy_split:
      return {"actsparse_row_axpy_partial_" + dt + detail::suffix(c),
              "actsparse_reduce_partials_t" + std::to_string(c.threads_per_block)};
    case kernel_op::gather_values:
      return {"actsparse_gather_values" + detail::suffix(c)};
    case kernel_op::gated_gather:
      return {"actsparse_gated_gather_" + std::string(name(c.act)) + "_" + dt + detail::suffix(c)};
    case kernel_op::gated_hidden:
      return {"actsparse_gated_hidden_" + std::string(name(c.act)) + detail::suffix(c)};
    case kernel_op::batched_gemv:
      return {"actsparse_batched_gemv_" + dt + detail::suffix(c) + "_b" + std::to_string(c.tokens_per_pass)};
    case kernel_op::cumulative_mass:
      return {"actsparse_cumulative_mass" + detail::suffix(c)};
  }
  return {};
}

// Rows of the matrix (gemv, gate_select, batched_gemv) or of the index list (gather_gemv,
// gated_gather) that one thread block covers; for gate_select it is also compact's
// rows_per_block argument.
[[nodiscard]] inline unsigned rows_per_block(const kernel_config& c) {
  detail::validate(c);
  return c.threads_per_block / 32 * c.rows_per_warp;
}

// row_axpy_split: the number of splits (grid y of the partial kernel, the `splits` argument of
// the reduction) for `count` kept rows, rows_per_split of them per split. 0 when count is 0:
// launch only the reduction then (it writes zeros).
[[nodiscard]] inline std::size_t split_count(std::size_t count, std::size_t rows_per_split) {
  actsparse::detail::require(rows_per_split > 0, "cuda::split_count", "rows_per_split", rows_per_split,
                             "at least 1 kept row per split");
  return (count + rows_per_split - 1) / rows_per_split;
}

// Thread blocks (grid x) to launch kernel_names(c)[kernel] for n = rows (gemv, gate_select,
// batched_gemv), count (gather_gemv, gated_gather, gather_values), cols (row_axpy, both kernels of
// row_axpy_split), n (gated_hidden), tokens (token ops); top_k and cumulative_mass take 1 block.
[[nodiscard]] inline std::size_t grid_blocks(const kernel_config& c, std::size_t n, std::size_t kernel = 0) {
  const std::size_t kernels = kernel_names(c).size();  // validates c
  actsparse::detail::require(kernel < kernels, detail::generator_where, "kernel", kernel,
                             "the position of a kernel in kernel_names(c)");
  if (detail::is_token_op(c.op)) return n;
  if (c.op == kernel_op::top_k || c.op == kernel_op::cumulative_mass) return 1;
  std::size_t per_block = rows_per_block(c);
  if (c.op == kernel_op::row_axpy || (c.op == kernel_op::row_axpy_split && kernel == 0)) {
    per_block = std::size_t{c.threads_per_block} * block_values(c.weight);
  } else if (c.op == kernel_op::row_axpy_split || c.op == kernel_op::gather_values || c.op == kernel_op::gated_hidden) {
    per_block = c.threads_per_block;
  }
  return (n + per_block - 1) / per_block;
}

[[nodiscard]] inline std::string generate_cuda(const kernel_config& c) {
  const std::vector<std::string> names = kernel_names(c);  // validates c
  const unsigned warps = c.threads_per_block / 32;
  const std::string dt(name(c.weight));
  std::vector<std::pair<std::string_view, std::string>> keys = {
      {"NAME", names[0]},
      {"WARPS", std::to_string(warps)},
      {"DT", dt},
      {"BV", std::to_string(block_values(c.weight))},
      {"ACT", std::string(name(c.act))},
      {"R", std::to_string(c.rows_per_warp)},
      {"T", std::to_string(c.threads_per_block)},
      {"PASS", std::to_string(c.tokens_per_pass)},
      {"EUNROLL", block_values(c.weight) == 1 ? "#pragma unroll 2" : "#pragma unroll 1"},
  };

  std::string s = "// Generated by actsparse::cuda::generate_cuda: op=";
  s.append(name(c.op)).append(" weight=").append(dt);
  if (detail::uses_act(c.op)) s.append(" act=").append(name(c.act));
  s.append(" threads_per_block=").append(std::to_string(c.threads_per_block));
  s.append(" rows_per_warp=").append(std::to_string(c.rows_per_warp));
  if (c.op == kernel_op::batched_gemv) s.append(" tokens_per_pass=").append(std::to_string(c.tokens_per_pass));
  s.append("\n");
  s.append(detail::prelude);
  if (!detail::is_f32_op(c.op)) s.append(detail::decoder_source(c.weight)).append("\n");
  if (c.op == kernel_op::top_k || c.op == kernel_op::cumulative_mass)
    s.append(ACTSPARSE_CUDA_STRINGIFY(ACTSPARSE_CUDA_ORDER_KEY)).append("\n");
  if (detail::uses_act(c.op)) s.append(ACTSPARSE_CUDA_STRINGIFY(ACTSPARSE_CUDA_ACTIVATIONS)).append("\n");

  auto warp_rows = [&](std::string_view limit, std::string_view row) {
    std::vector<std::pair<std::string_view, std::string>> k = keys;
    k.emplace(k.begin(), "LIMIT", std::string(limit));
    k.emplace(k.begin(), "ROW", std::string(row));
    return detail::fill(detail::warp_rows_body, k);
  };
  switch (c.op) {
    case kernel_op::gemv:
      keys.emplace(keys.begin(), "BODY", warp_rows("rows", "k"));
      s += detail::fill(detail::gemv_kernel, keys);
      break;
    case kernel_op::gather_gemv:
      keys.emplace(keys.begin(), "BODY", warp_rows("count", "idx[k]"));
      s += detail::fill(detail::gather_kernel, keys);
      break;
    case kernel_op::row_axpy:
      s += detail::fill(detail::axpy_kernel, keys);
      break;
    case kernel_op::gate_select:
      keys.emplace(keys.begin(), "BODY", warp_rows("rows", "k"));
      s += detail::fill(detail::gate_kernel, keys);
      keys[1].second = names[1];  // NAME (after BODY)
      s += detail::fill(detail::compact_kernel, keys);
      break;
    case kernel_op::token_gather:
      s += detail::fill(detail::token_gather_kernel, keys);
      break;
    case kernel_op::token_scatter_add:
      s += detail::fill(detail::token_scatter_add_kernel, keys);
      break;
    case kernel_op::top_k:
      s += detail::fill(detail::top_k_kernel, keys);
      break;
    case kernel_op::row_axpy_split:
      s += detail::fill(detail::axpy_partial_kernel, keys);
      keys[0].second = names[1];  // NAME
      s += detail::fill(detail::reduce_partials_kernel, keys);
      break;
    case kernel_op::gather_values:
      s += detail::fill(detail::gather_values_kernel, keys);
      break;
    case kernel_op::gated_gather:
      s += detail::fill(detail::gated_gather_kernel, keys);
      break;
    case kernel_op::gated_hidden:
      s += detail::fill(detail::gated_hidden_kernel, keys);
      break;
    case kernel_op::batched_gemv:
      s += detail::fill(detail::batched_gemv_kernel, keys);
      break;
    case kernel_op::cumulative_mass:
      s += detail::fill(detail::cumulative_mass_kernel, keys);
      break;
  }
  return s;
}

}  // namespace actsparse::cuda
