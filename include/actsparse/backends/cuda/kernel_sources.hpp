#pragma once
// The CUDA source templates that generator.hpp fills in: the prelude of device primitives
// and one text per kernel, with $KEY placeholders (generate_cuda's keys: $NAME, $T, $WARPS,
// $R, $DT, $BV, $ACT, $PASS, $EUNROLL; $BODY, $ROW, $LIMIT for the warp-per-row kernels;
// a key followed by u, as $Tu, is the same number as an unsigned literal). The kernels'
// signatures, grids and guarantees are documented at the top of generator.hpp.

#include <string_view>

namespace actsparse::cuda::detail {

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

}  // namespace actsparse::cuda::detail
