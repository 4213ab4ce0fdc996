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
//                element (1 or 32 columns) and loops over k in order.  grid: ceil(cols / bv / T).
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
  top_k
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
  }
  return "?";
}

struct kernel_config {
  kernel_op op = kernel_op::gemv;
  dtype weight = dtype::f32;
  activation act = activation::silu;  // gate_select only
  unsigned threads_per_block = 256;   // a multiple of 32 in [32, 1024]
  unsigned rows_per_warp = 1;         // 1, 2, 4 or 8 rows share each load of x (1 for row_axpy and the token ops)
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
         op == kernel_op::top_k;
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
[[nodiscard]] constexpr bool is_f32_op(kernel_op op) noexcept { return is_token_op(op) || op == kernel_op::top_k; }

inline void validate(const kernel_config& c) {
  const std::string_view w = generator_where;
  actsparse::detail::require(known(c.op), w, "op", static_cast<int>(c.op),
                             "gemv, gather_gemv, row_axpy, gate_select, token_gather, token_scatter_add or top_k");
  actsparse::detail::require(known(c.weight), w, "weight", static_cast<int>(c.weight), "f32, f16, bf16, q8_0 or q4_0");
  actsparse::detail::require(known(c.act), w, "act", static_cast<int>(c.act), "silu, gelu or relu");
  actsparse::detail::require(c.threads_per_block >= 32 && c.threads_per_block <= 1024 && c.threads_per_block % 32 == 0,
                             w, "threads_per_block", c.threads_per_block,
                             "a multiple of 32 (the warp size) in [32, 1024]");
  if (is_f32_op(c.op)) {
    actsparse::detail::require(c.weight == dtype::f32, w, "weight", name(c.weight),
                               "f32 for the token ops and top_k (they read f32 activations or scores)");
    actsparse::detail::require(c.rows_per_warp == 1, w, "rows_per_warp", c.rows_per_warp,
                               "1 for the token ops (one block per token) and top_k (one block)");
  } else if (c.op == kernel_op::row_axpy) {
    actsparse::detail::require(c.rows_per_warp == 1, w, "rows_per_warp", c.rows_per_warp,
                               "1 for row_axpy (each thread owns columns and loops over the kept rows)");
  } else {
    const unsigned r = c.rows_per_warp;
    actsparse::detail::require(r == 1 || r == 2 || r == 4 || r == 8, w, "rows_per_warp", r, "1, 2, 4 or 8");
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
    actsparse_decode_$DT(wt + (unsigned long long)idx[k] * row_stride, e, wv);
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
  }
  return {};
}

// Rows of the matrix (gemv, gate_select) or of the index list (gather_gemv) that one thread
// block covers; for gate_select it is also compact's rows_per_block argument.
[[nodiscard]] inline unsigned rows_per_block(const kernel_config& c) {
  detail::validate(c);
  return c.threads_per_block / 32 * c.rows_per_warp;
}

// Thread blocks to launch for n = rows (gemv, gate_select), count (gather_gemv) or cols (row_axpy).
[[nodiscard]] inline std::size_t grid_blocks(const kernel_config& c, std::size_t n) {
  detail::validate(c);
  if (detail::is_token_op(c.op)) return n;
  if (c.op == kernel_op::top_k) return 1;
  const std::size_t per_block = c.op == kernel_op::row_axpy ? std::size_t{c.threads_per_block} * block_values(c.weight)
                                                            : std::size_t{rows_per_block(c)};
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
  };

  std::string s = "// Generated by actsparse::cuda::generate_cuda: op=";
  s.append(name(c.op)).append(" weight=").append(dt);
  if (c.op == kernel_op::gate_select) s.append(" act=").append(name(c.act));
  s.append(" threads_per_block=").append(std::to_string(c.threads_per_block));
  s.append(" rows_per_warp=").append(std::to_string(c.rows_per_warp)).append("\n");
  s.append(detail::prelude);
  if (!detail::is_f32_op(c.op)) s.append(detail::decoder_source(c.weight)).append("\n");
  if (c.op == kernel_op::top_k) s.append(ACTSPARSE_CUDA_STRINGIFY(ACTSPARSE_CUDA_ORDER_KEY)).append("\n");
  if (c.op == kernel_op::gate_select) s.append(ACTSPARSE_CUDA_STRINGIFY(ACTSPARSE_CUDA_ACTIVATIONS)).append("\n");

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
  }
  return s;
}

}  // namespace actsparse::cuda
