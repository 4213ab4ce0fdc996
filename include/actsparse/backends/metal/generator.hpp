#pragma once
// Metal kernel generator: a cuda::kernel_config in, Metal Shading Language source out, for
// run-time compilation with newLibraryWithSource (runtime.hpp). The kernels are the CUDA
// generator's (backends/cuda/generator.hpp) written for Metal: the same names, the same
// arguments in the same order (argument i is [[buffer(i)]]; scalars are `constant T&`, set
// with setBytes), the same launch shapes (a CUDA block is a threadgroup, a warp a simdgroup)
// and the same order of every floating-point operation, so a Metal kernel and its CUDA twin
// compute the same bits wherever the hardware rounds the same. One exception: MSL has no
// double, so cumulative_mass sums in float pairs (hi + lo, exact two-sums) where CUDA sums in
// double, in the same order; the kept set is the same whenever both sums are exact (see the
// kernel). The same config always gives the same text.
//
// Ops: gemv, gather_gemv, row_axpy, gate_select, token_gather, token_scatter_add, top_k,
// row_axpy_split (partial + reduce_partials; the partial kernel's CUDA grid (x, splits) is
// dispatched flattened, threadgroups(c, cols, 0) · splits, see threadgroups) and
// cumulative_mass.
//
// The element decoders, the activations and the order key are device_math.hpp's macros, the
// same text the CUDA kernels use. Its primitives are defined here for MSL, and its pointers
// get their address spaces by one rewrite (metal_snippet below): every `const unsigned char*`
// of a snippet points into a weight buffer (device), every `float* w` is a thread's array.
//
// Assumptions, checked by the host wrapper where it can:
// - The simdgroup is 32 threads wide (every Apple GPU; the reductions are xor butterflies
//   over 5 steps and ballots are read as 32 bits). runtime.hpp refuses a pipeline whose
//   threadExecutionWidth is not 32 (some AMD and Intel Macs).
// - A GPU family and MSL version with SIMD-group functions (simd_shuffle_xor, simd_ballot;
//   Apple's feature tables give the minimum, not verified here). No simd_sum: its order of
//   additions is unspecified, the butterfly's is fixed. bf16 is decoded from its ushort
//   bits, so no `bfloat` (MSL 3.1) is needed.
// - Compiled without fast math (runtime.hpp turns it off): fast math may reassociate the sums
//   and would change the bits. exp and tanh are metal::precise's, which are not bit-exact
//   with the host libm; every other operation is a single IEEE rounding as on the CPU.
// - The kernels of one op run in order on one serial compute encoder (the default), so the
//   compaction kernel sees all of the gate kernel's block counts and the reduction all of
//   the partial sums.
// - cumulative_mass needs IEEE float addition without flush-to-zero of subnormal results for
//   its two-sums to be exact near 0 (not verified on Apple GPUs); row_axpy_split reads a nil
//   idx buffer as a null pointer (idx[k] = k, as CUDA's nullptr; not verified either: bind
//   an index list to be safe).
//
// Only the ops implemented below are accepted; a kernel_op added to the CUDA generator later
// is rejected here with an error that names it, until it has a Metal kernel.

#include <actsparse/backends/cuda/device_math.hpp>
#include <actsparse/backends/cuda/generator.hpp>
#include <actsparse/core/activation.hpp>
#include <actsparse/core/dtype.hpp>
#include <actsparse/core/error.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace actsparse::metal {

using cuda::kernel_config;
using cuda::kernel_op;

// The width the kernels are written for (Apple GPUs' simdgroups).
inline constexpr unsigned simd_width = 32;

namespace detail {

inline constexpr std::string_view generator_where = "metal::generate_metal";

[[nodiscard]] constexpr bool implemented(kernel_op op) noexcept {
  return op == kernel_op::gemv || op == kernel_op::gather_gemv || op == kernel_op::row_axpy ||
         op == kernel_op::gate_select || op == kernel_op::token_gather || op == kernel_op::token_scatter_add ||
         op == kernel_op::top_k || op == kernel_op::row_axpy_split || op == kernel_op::cumulative_mass;
}

inline void validate(const kernel_config& c) {
  const std::string_view w = generator_where;
  if (!implemented(c.op)) {
    // The CUDA generator may know the op (its name then says which); Metal does not have it yet.
    const std::string_view n = cuda::name(c.op);
    actsparse::detail::fail(w, "op", n == "?" ? std::to_string(static_cast<int>(c.op)) : std::string(n),
                            "an op with a Metal kernel: gemv, gather_gemv, row_axpy, gate_select, token_gather, "
                            "token_scatter_add, top_k, row_axpy_split or cumulative_mass");
  }
  actsparse::detail::require(cuda::detail::known(c.weight), w, "weight", static_cast<int>(c.weight),
                             "f32, f16, bf16, q8_0 or q4_0");
  actsparse::detail::require(cuda::detail::known(c.act), w, "act", static_cast<int>(c.act), "silu, gelu or relu");
  actsparse::detail::require(
      c.threads_per_block >= simd_width && c.threads_per_block <= 1024 && c.threads_per_block % simd_width == 0, w,
      "threads_per_block", c.threads_per_block, "a multiple of 32 (the simdgroup width) in [32, 1024]");
  if (cuda::detail::is_f32_op(c.op)) {
    actsparse::detail::require(c.weight == dtype::f32, w, "weight", name(c.weight),
                               "f32 for the token ops, top_k and cumulative_mass (they read f32 activations or "
                               "scores)");
    actsparse::detail::require(c.rows_per_warp == 1, w, "rows_per_warp", c.rows_per_warp,
                               "1 for the token ops (one threadgroup per token), top_k and cumulative_mass (one "
                               "threadgroup)");
  } else if (c.op == kernel_op::row_axpy || c.op == kernel_op::row_axpy_split) {
    actsparse::detail::require(c.rows_per_warp == 1, w, "rows_per_warp", c.rows_per_warp,
                               "1 for row_axpy and row_axpy_split (each thread owns columns and loops over the kept "
                               "rows)");
  } else {
    const unsigned r = c.rows_per_warp;
    actsparse::detail::require(r == 1 || r == 2 || r == 4 || r == 8, w, "rows_per_warp", r, "1, 2, 4 or 8");
  }
}

// A device_math.hpp snippet with MSL address spaces: its byte pointers read device memory,
// its `float* w` is the caller's thread-private array.
[[nodiscard]] inline std::string metal_snippet(std::string s) {
  const auto replace_all = [&s](std::string_view from, std::string_view to) {
    for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
      s.replace(at, from.size(), to);
  };
  replace_all("const unsigned char*", "device const unsigned char*");
  replace_all("float* w)", "thread float* w)");
  return s;
}

[[nodiscard]] inline std::string decoder_source(dtype t) {
  switch (t) {
    case dtype::f32:
      return metal_snippet(ACTSPARSE_CUDA_STRINGIFY(ACTSPARSE_CUDA_DECODE_F32));
    case dtype::f16:
      return metal_snippet(ACTSPARSE_CUDA_STRINGIFY(ACTSPARSE_CUDA_DECODE_F16));
    case dtype::bf16:
      return metal_snippet(ACTSPARSE_CUDA_STRINGIFY(ACTSPARSE_CUDA_DECODE_BF16));
    case dtype::q8_0:
      return metal_snippet(ACTSPARSE_CUDA_STRINGIFY(ACTSPARSE_CUDA_DECODE_Q8_0));
    case dtype::q4_0:
      return metal_snippet(ACTSPARSE_CUDA_STRINGIFY(ACTSPARSE_CUDA_DECODE_Q4_0));
  }
  return {};
}

// device_math.hpp's primitives in MSL, the C math names its snippets call, and the
// simdgroup reductions (xor butterflies: every lane ends with the same sum, in the same
// order as the CUDA kernels' warp sums).
inline constexpr std::string_view prelude = R"(#include <metal_stdlib>
using namespace metal;
#define ACTSPARSE_CUDA_FN inline
#define expf(v) metal::precise::exp(v)
#define tanhf(v) metal::precise::tanh(v)
#define fmaf(a, b, c) metal::fma(a, b, c)
ACTSPARSE_CUDA_FN ushort actsparse_load_u16(device const unsigned char* p) { return *(device const ushort*)p; }
ACTSPARSE_CUDA_FN float actsparse_load_f32(device const unsigned char* p) { return *(device const float*)p; }
ACTSPARSE_CUDA_FN float actsparse_half_to_float(ushort h) { return (float)as_type<half>(h); }
ACTSPARSE_CUDA_FN float actsparse_bits_to_float(uint b) { return as_type<float>(b); }
ACTSPARSE_CUDA_FN uint actsparse_float_to_bits(float f) { return as_type<uint>(f); }
ACTSPARSE_CUDA_FN float actsparse_simd_sum(float v) {
  for (ushort offset = 16; offset > 0; offset /= 2) v += metal::simd_shuffle_xor(v, offset);
  return v;
}
ACTSPARSE_CUDA_FN uint actsparse_simd_sum_u32(uint v) {
  for (ushort offset = 16; offset > 0; offset /= 2) v += metal::simd_shuffle_xor(v, offset);
  return v;
}
// Bit i is lane i's predicate (a simdgroup of 32: the upper half of the 64-bit vote is 0).
ACTSPARSE_CUDA_FN uint actsparse_ballot(bool p) { return (uint)(ulong)metal::simd_ballot(p); }
)";

// The body shared by the simdgroup-per-row kernels: acc[r] = W[row(first + r), :]·x, in every
// lane. $ROW is the row of output k; rows of outputs >= $LIMIT are never written (row 0 is
// read in their place so that every lane reaches the shuffles).
inline constexpr std::string_view simd_rows_body = R"(  const uint first = (group * $SGSu + sg) * $Ru;
  const uint n = cols / $BVu;
  device const unsigned char* rowp[$R];
  float acc[$R];
  for (int r = 0; r < $R; ++r) {
    const uint k = first + (uint)r;
    rowp[r] = k < $LIMIT ? w + (ulong)($ROW) * row_stride : w;
    acc[r] = 0.0f;
  }
  for (uint e = lane; e < n; e += 32u) {
    float xv[$BV];
    for (int i = 0; i < $BV; ++i) xv[i] = x[e * $BVu + (uint)i];
    for (int r = 0; r < $R; ++r) {
      float wv[$BV];
      actsparse_decode_$DT(rowp[r], e, wv);
      for (int i = 0; i < $BV; ++i) acc[r] = metal::fma(wv[i], xv[i], acc[r]);
    }
  }
  for (int r = 0; r < $R; ++r) acc[r] = actsparse_simd_sum(acc[r]);
)";

inline constexpr std::string_view gemv_kernel = R"(kernel void $NAME(
    device const unsigned char* w [[buffer(0)]], constant ulong& row_stride [[buffer(1)]],
    device const float* x [[buffer(2)]], constant uint& rows [[buffer(3)]], constant uint& cols [[buffer(4)]],
    device float* y [[buffer(5)]], uint group [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]]) {
$BODY  if (lane == 0u) {
    for (int r = 0; r < $R; ++r) {
      const uint k = first + (uint)r;
      if (k < rows) y[k] = acc[r];
    }
  }
}
)";

inline constexpr std::string_view gather_kernel = R"(kernel void $NAME(
    device const unsigned char* w [[buffer(0)]], constant ulong& row_stride [[buffer(1)]],
    device const float* x [[buffer(2)]], constant uint& cols [[buffer(3)]], device const uint* idx [[buffer(4)]],
    constant uint& count [[buffer(5)]], device float* y [[buffer(6)]], uint group [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]]) {
$BODY  if (lane == 0u) {
    for (int r = 0; r < $R; ++r) {
      const uint k = first + (uint)r;
      if (k < count) y[k] = acc[r];
    }
  }
}
)";

// Threadgroup variables are declared at kernel scope, before the body (MSL requires it).
inline constexpr std::string_view gate_kernel = R"(kernel void $NAME(
    device const unsigned char* w [[buffer(0)]], constant ulong& row_stride [[buffer(1)]],
    device const float* x [[buffer(2)]], constant uint& rows [[buffer(3)]], constant uint& cols [[buffer(4)]],
    constant float& threshold [[buffer(5)]], device float* h [[buffer(6)]], device uint* block_counts [[buffer(7)]],
    uint tid [[thread_index_in_threadgroup]], uint group [[threadgroup_position_in_grid]],
    uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup uint sg_kept[$SGS];
$BODY  if (lane == 0u) {
    uint kept = 0u;
    for (int r = 0; r < $R; ++r) {
      const uint k = first + (uint)r;
      if (k < rows) {
        const float v = actsparse_$ACT(acc[r]);
        h[k] = v;
        if (metal::fabs(v) > threshold) ++kept;
      }
    }
    sg_kept[sg] = kept;
  }
  metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  if (tid == 0u) {
    uint total = 0u;
    for (uint i = 0u; i < $SGSu; ++i) total += sg_kept[i];
    block_counts[group] = total;
  }
}
)";

// Integer counts: their sums are exact in any order. The kept rows of a chunk get their
// positions from a ballot per simdgroup and the counts of the simdgroups before it.
inline constexpr std::string_view compact_kernel = R"(kernel void $NAME(
    device const float* h [[buffer(0)]], constant uint& rows [[buffer(1)]], constant uint& rows_per_block [[buffer(2)]],
    constant float& threshold [[buffer(3)]], device const uint* block_counts [[buffer(4)]],
    device uint* idx [[buffer(5)]], device uint* count [[buffer(6)]], uint tid [[thread_index_in_threadgroup]],
    uint group [[threadgroup_position_in_grid]], uint groups [[threadgroups_per_grid]],
    uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup uint sg_kept[$SGS];
  threadgroup uint base;
  uint before = 0u;
  for (uint b = tid; b < group; b += $Tu) before += block_counts[b];
  before = actsparse_simd_sum_u32(before);
  if (lane == 0u) sg_kept[sg] = before;
  metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  if (tid == 0u) {
    uint total = 0u;
    for (uint i = 0u; i < $SGSu; ++i) total += sg_kept[i];
    base = total;
  }
  const uint first = group * rows_per_block;
  const uint end = first >= rows ? first : (rows - first < rows_per_block ? rows : first + rows_per_block);
  for (uint chunk = first; chunk < end; chunk += $Tu) {
    const uint k = chunk + tid;
    const bool keep = k < end && metal::fabs(h[k]) > threshold;
    const uint ballot = actsparse_ballot(keep);
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if (lane == 0u) sg_kept[sg] = metal::popcount(ballot);
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    uint at = base;
    for (uint i = 0u; i < sg; ++i) at += sg_kept[i];
    if (keep) idx[at + metal::popcount(ballot & ((1u << lane) - 1u))] = k;
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if (tid == 0u) {
      for (uint i = 0u; i < $SGSu; ++i) base += sg_kept[i];
    }
  }
  if (tid == 0u && group == groups - 1u) *count = base;
}
)";

inline constexpr std::string_view axpy_kernel = R"(kernel void $NAME(
    device const unsigned char* wt [[buffer(0)]], constant ulong& row_stride [[buffer(1)]],
    device const uint* idx [[buffer(2)]], device const float* coef [[buffer(3)]], constant uint& count [[buffer(4)]],
    constant uint& cols [[buffer(5)]], device float* y [[buffer(6)]], uint e [[thread_position_in_grid]]) {
  if (e >= cols / $BVu) return;
  float acc[$BV];
  for (int i = 0; i < $BV; ++i) acc[i] = 0.0f;
  for (uint k = 0u; k < count; ++k) {
    const float c = coef[k];
    float wv[$BV];
    actsparse_decode_$DT(wt + (ulong)idx[k] * row_stride, e, wv);
    for (int i = 0; i < $BV; ++i) acc[i] = metal::fma(c, wv[i], acc[i]);
  }
  for (int i = 0; i < $BV; ++i) y[e * $BVu + (uint)i] = acc[i];
}
)";

inline constexpr std::string_view token_gather_kernel = R"(kernel void $NAME(
    device const float* src [[buffer(0)]], constant ulong& src_stride [[buffer(1)]],
    device const uint* tokens [[buffer(2)]], constant uint& count [[buffer(3)]], constant uint& d [[buffer(4)]],
    device float* dst [[buffer(5)]], constant ulong& dst_stride [[buffer(6)]],
    uint tid [[thread_index_in_threadgroup]], uint k [[threadgroup_position_in_grid]]) {
  if (k >= count) return;
  device const float* from = src + (ulong)tokens[k] * src_stride;
  device float* to = dst + (ulong)k * dst_stride;
  for (uint i = tid; i < d; i += $Tu) to[i] = from[i];
}
)";

inline constexpr std::string_view token_scatter_add_kernel = R"(kernel void $NAME(
    device const float* z [[buffer(0)]], constant ulong& z_stride [[buffer(1)]],
    device const uint* tokens [[buffer(2)]], constant uint& count [[buffer(3)]], constant uint& d [[buffer(4)]],
    device float* x [[buffer(5)]], constant ulong& x_stride [[buffer(6)]],
    uint tid [[thread_index_in_threadgroup]], uint k [[threadgroup_position_in_grid]]) {
  if (k >= count) return;
  device const float* from = z + (ulong)k * z_stride;
  device float* to = x + (ulong)tokens[k] * x_stride;
  for (uint i = tid; i < d; i += $Tu) to[i] += from[i];
}
)";

// Counts are integers: exact in any order. Passes bit = 31 .. 0 find the k-th largest order
// key bit by bit (are there k keys above candidate - 1?); pass bit = -1 counts the keys above
// it. Every thread keeps the running totals in registers, updated identically from the
// per-simdgroup ballots, so no threadgroup running state.
inline constexpr std::string_view top_k_kernel = R"(ACTSPARSE_CUDA_FN uint actsparse_count_above(
    device const float* scores, uint n, uint bound, uint tid) {
  uint c = 0u;
  for (uint i = tid; i < n; i += $Tu) c += actsparse_order_key(scores[i]) > bound ? 1u : 0u;
  return actsparse_simd_sum_u32(c);
}
kernel void $NAME(
    device const float* scores [[buffer(0)]], constant uint& n [[buffer(1)]], constant uint& k [[buffer(2)]],
    device uint* idx [[buffer(3)]], device uint* count [[buffer(4)]], uint tid [[thread_index_in_threadgroup]],
    uint lane [[thread_index_in_simdgroup]], uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup uint sg_gt[$SGS];
  threadgroup uint sg_eq[$SGS];
  if (k == 0u || k > n) {
    if (tid == 0u) *count = 0u;
    return;
  }
  uint kth = 0u;
  uint above = 0u;
  for (int bit = 31; bit >= -1; --bit) {
    const uint bound = bit >= 0 ? (kth | (1u << (uint)bit)) - 1u : kth;
    const uint part = actsparse_count_above(scores, n, bound, tid);
    if (lane == 0u) sg_gt[sg] = part;
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    uint total = 0u;
    for (uint s = 0u; s < $SGSu; ++s) total += sg_gt[s];
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if (bit < 0) {
      above = total;
    } else if (total >= k) {
      kth |= 1u << (uint)bit;
    }
  }
  const uint ties = k - above;
  const uint lanes_before = (1u << lane) - 1u;
  uint gt_base = 0u;
  uint eq_base = 0u;
  for (uint chunk = 0u; chunk < n; chunk += $Tu) {
    const uint i = chunk + tid;
    const uint key = i < n ? actsparse_order_key(scores[i]) : 0u;
    const bool gt = i < n && key > kth;
    const bool eq = i < n && key == kth;
    const uint ballot_gt = actsparse_ballot(gt);
    const uint ballot_eq = actsparse_ballot(eq);
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if (lane == 0u) {
      sg_gt[sg] = metal::popcount(ballot_gt);
      sg_eq[sg] = metal::popcount(ballot_eq);
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    uint gt_before = gt_base + metal::popcount(ballot_gt & lanes_before);
    uint eq_before = eq_base + metal::popcount(ballot_eq & lanes_before);
    for (uint s = 0u; s < $SGSu; ++s) {
      if (s < sg) {
        gt_before += sg_gt[s];
        eq_before += sg_eq[s];
      }
      gt_base += sg_gt[s];
      eq_base += sg_eq[s];
    }
    if (gt || (eq && eq_before < ties)) idx[gt_before + (eq_before < ties ? eq_before : ties)] = i;
  }
  if (tid == 0u) *count = k;
}
)";

// row_axpy over the kept rows [s·rows_per_split, min(count, (s+1)·rows_per_split)) of split s,
// into its own row of partial: row_axpy's fma chain within a split. The wrapper dispatches
// 1-D grids, so CUDA's grid (x, splits) is flattened: threadgroup g is split g / x, column
// group g % x, with x = threadgroups(c, cols, 0) (computed here from cols). idx == nullptr
// means idx[k] = k, as in CUDA.
inline constexpr std::string_view axpy_partial_kernel = R"(kernel void $NAME(
    device const unsigned char* wt [[buffer(0)]], constant ulong& row_stride [[buffer(1)]],
    device const uint* idx [[buffer(2)]], device const float* coef [[buffer(3)]], constant uint& count [[buffer(4)]],
    constant uint& cols [[buffer(5)]], constant uint& rows_per_split [[buffer(6)]], device float* partial [[buffer(7)]],
    uint tid [[thread_index_in_threadgroup]], uint group [[threadgroup_position_in_grid]]) {
  const uint groups_per_split = (cols / $BVu + $Tu - 1u) / $Tu;
  if (groups_per_split == 0u) return;
  const uint split = group / groups_per_split;
  const uint e = (group - split * groups_per_split) * $Tu + tid;
  if (e >= cols / $BVu) return;
  const uint begin = split * rows_per_split;
  const uint end = begin >= count ? begin : (count - begin < rows_per_split ? count : begin + rows_per_split);
  float acc[$BV];
  for (int i = 0; i < $BV; ++i) acc[i] = 0.0f;
  for (uint k = begin; k < end; ++k) {
    const float c = coef[k];
    float wv[$BV];
    actsparse_decode_$DT(wt + (ulong)(idx != nullptr ? idx[k] : k) * row_stride, e, wv);
    for (int i = 0; i < $BV; ++i) acc[i] = metal::fma(c, wv[i], acc[i]);
  }
  device float* out = partial + (ulong)split * cols;
  for (int i = 0; i < $BV; ++i) out[e * $BVu + (uint)i] = acc[i];
}
)";

// y[c] = ((0 + partial[0][c]) + partial[1][c]) + ..., in split order.
inline constexpr std::string_view reduce_partials_kernel = R"(kernel void $NAME(
    device const float* partial [[buffer(0)]], constant uint& splits [[buffer(1)]], constant uint& cols [[buffer(2)]],
    device float* y [[buffer(3)]], uint c [[thread_position_in_grid]]) {
  if (c >= cols) return;
  float acc = 0.0f;
  for (uint s = 0u; s < splits; ++s) acc += partial[(ulong)s * cols + c];
  y[c] = acc;
}
)";

// The CUDA kernel sums in double; MSL has no double, so the sums here are float pairs
// (hi + lo, hi = the float nearest the pair's value), added with exact two-sums (Knuth's
// TwoSum: s + err == a + b exactly, for either order of a and b, so a butterfly step gives
// the same pair in both lanes). One pair addition has a relative error of a few 2^-48; it is
// exact when all values are multiples of 2^-m and the sums stay below 2^(46-m). The order
// is CUDA's: each thread adds its scores in index order, the lanes meet in a xor butterfly,
// the simdgroups in order. Pairs compare lexicographically (both have hi = RN(hi + lo)).
//
// One loop of counting passes (a single call site, so the threadgroup arrays stay at kernel
// scope as MSL requires): pass 0 the total; passes 1 .. 31 the boundary key bits 30 .. 0;
// pass 32 and 33 the scores above the boundary and with its ties; then the bisection over
// the index of the ties. The kept set is {key > ke} ∪ {key == ke, index < je}.
//
// target = mass·total: mass·hi exactly as p + e (an fma), plus the rounded mass·lo. So the
// kept set is cumulative_mass{(double)mass, 0, min_keep}'s (and the CUDA kernel's) whenever
// the sums are exact in both and total is a float (target is then exact on both sides: e.g.
// scores that are multiples of 2^-m with total below 2^(24-m)); otherwise they can differ only
// where a top set's sum lies within about n·2^-46·total of mass·total. The scores' total must
// be below FLT_MAX (it would overflow the pair), and mass·total must not underflow a float
// (where it does and the host's double does not, the kernel keeps only the min(min_keep, n)
// top scores, the host at least one).
inline constexpr std::string_view cumulative_mass_kernel = R"(struct actsparse_pair {
  float hi;
  float lo;
};
ACTSPARSE_CUDA_FN actsparse_pair actsparse_two_sum(float a, float b) {
  const float s = a + b;
  const float bb = s - a;
  actsparse_pair r;
  r.hi = s;
  r.lo = (a - (s - bb)) + (b - bb);
  return r;
}
ACTSPARSE_CUDA_FN actsparse_pair actsparse_pair_add(actsparse_pair a, actsparse_pair b) {
  const actsparse_pair s = actsparse_two_sum(a.hi, b.hi);
  const actsparse_pair t = actsparse_two_sum(a.lo, b.lo);
  const actsparse_pair u = actsparse_two_sum(s.hi, s.lo + t.hi);
  return actsparse_two_sum(u.hi, u.lo + t.lo);
}
ACTSPARSE_CUDA_FN bool actsparse_pair_ge(actsparse_pair a, actsparse_pair b) {
  return a.hi > b.hi || (a.hi == b.hi && a.lo >= b.lo);
}
kernel void $NAME(
    device const float* scores [[buffer(0)]], constant uint& n [[buffer(1)]], constant float& mass [[buffer(2)]],
    constant uint& min_keep [[buffer(3)]], device uint* idx [[buffer(4)]], device uint* count [[buffer(5)]],
    uint tid [[thread_index_in_threadgroup]], uint lane [[thread_index_in_simdgroup]],
    uint sg [[simdgroup_index_in_threadgroup]]) {
  threadgroup float sg_hi[$SGS];
  threadgroup float sg_lo[$SGS];
  threadgroup uint sg_count[$SGS];
  // The selector's dense fallbacks: a NaN / inf or a negative score (-0 is not), or all zero.
  uint bad = 0u;
  for (uint i = tid; i < n; i += $Tu) {
    const uint u = actsparse_float_to_bits(scores[i]);
    bad += ((u & 0x7F800000u) == 0x7F800000u || u > 0x80000000u) ? 1u : 0u;
  }
  bad = actsparse_simd_sum_u32(bad);
  if (lane == 0u) sg_count[sg] = bad;
  metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  bad = 0u;
  for (uint s = 0u; s < $SGSu; ++s) bad += sg_count[s];
  metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
  const uint keep = min_keep < n ? min_keep : n;
  actsparse_pair target;
  target.hi = 0.0f;
  target.lo = 0.0f;
  uint ke = 0x80000000u;  // keep {key > ke} or {key == ke, index < je}; every key is >= 1: ke = 0 keeps everything
  uint je = n;
  uint lo = 0u;     // the bisection: the ties below index lo are not enough, those below je are
  uint above = 0u;  // the scores with key > ke
  for (uint pass = 0u;; ++pass) {
    uint qk = ke;  // this pass sums {key > qk} or {key == qk, index < qj}
    uint qj = n;
    if (pass == 0u) {
      qk = 0x80000000u;  // every score >= 0
    } else if (pass <= 31u) {
      qk = ke | (1u << (31u - pass));
    } else if (pass == 32u) {
      qj = 0u;
    } else if (pass > 33u) {
      if (je - lo <= 1u) break;
      qj = lo + (je - lo) / 2u;
    }
    actsparse_pair m;
    m.hi = 0.0f;
    m.lo = 0.0f;
    uint c = 0u;
    for (uint i = tid; i < n; i += $Tu) {
      const float s = scores[i];
      const uint key = actsparse_order_key(s);
      if (key > qk || (key == qk && i < qj)) {
        actsparse_pair v;
        v.hi = s;
        v.lo = 0.0f;
        m = actsparse_pair_add(m, v);
        ++c;
      }
    }
    for (ushort offset = 16; offset > 0; offset /= 2) {
      actsparse_pair o;
      o.hi = metal::simd_shuffle_xor(m.hi, offset);
      o.lo = metal::simd_shuffle_xor(m.lo, offset);
      m = actsparse_pair_add(m, o);
    }
    c = actsparse_simd_sum_u32(c);
    if (lane == 0u) {
      sg_hi[sg] = m.hi;
      sg_lo[sg] = m.lo;
      sg_count[sg] = c;
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    m.hi = 0.0f;
    m.lo = 0.0f;
    c = 0u;
    for (uint s = 0u; s < $SGSu; ++s) {
      actsparse_pair v;
      v.hi = sg_hi[s];
      v.lo = sg_lo[s];
      m = actsparse_pair_add(m, v);
      c += sg_count[s];
    }
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    // Whether the set of this pass is enough: it reaches target and holds min(min_keep, n).
    const bool enough = c >= keep && actsparse_pair_ge(m, target);
    if (pass == 0u) {
      if (bad != 0u || m.hi == 0.0f || mass >= 1.0f) {
        ke = 0u;  // everything
        je = n;
        break;
      }
      // target = mass * total: mass * hi exactly as p + e (an fma), plus mass * lo.
      const float p = mass * m.hi;
      const float e = metal::fma(mass, m.hi, -p);
      target = actsparse_two_sum(p, e + mass * m.lo);
      if (keep == 0u && target.hi <= 0.0f) {
        ke = 0xFFFFFFFFu;  // nothing: mass * total is not above 0 and min_keep is 0
        je = 0u;
        break;
      }
    } else if (pass <= 31u) {
      if (enough) ke = qk;  // the largest boundary key whose {key >= ke} is enough, bit by bit
    } else if (pass == 32u) {
      above = c;
    } else if (pass == 33u) {
      if (c - above <= 1u) break;  // at most one tie at ke: keep it (je = n)
    } else if (enough) {
      je = qj;
    } else {
      lo = qj;
    }
  }
  const uint lanes_before = (1u << lane) - 1u;
  uint base = 0u;
  for (uint chunk = 0u; chunk < n; chunk += $Tu) {
    const uint i = chunk + tid;
    const uint key = i < n ? actsparse_order_key(scores[i]) : 0u;
    const bool kept = i < n && (key > ke || (key == ke && i < je));
    const uint ballot = actsparse_ballot(kept);
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    if (lane == 0u) sg_count[sg] = metal::popcount(ballot);
    metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup);
    uint at = base + metal::popcount(ballot & lanes_before);
    for (uint s = 0u; s < $SGSu; ++s) {
      if (s < sg) at += sg_count[s];
      base += sg_count[s];
    }
    if (kept) idx[at] = i;
  }
  if (tid == 0u) *count = base;
}
)";

}  // namespace detail

// The names of the kernels generate_metal(c) defines, in dispatch order (the CUDA
// generator's names: one name per config on every backend).
[[nodiscard]] inline std::vector<std::string> kernel_names(const kernel_config& c) {
  detail::validate(c);
  return cuda::kernel_names(c);
}

// Rows of the matrix (gemv, gate_select) or of the index list (gather_gemv) that one
// threadgroup covers; for gate_select it is also the compaction kernel's rows_per_block.
[[nodiscard]] inline unsigned rows_per_threadgroup(const kernel_config& c) {
  detail::validate(c);
  return c.threads_per_block / simd_width * c.rows_per_warp;
}

// Threadgroups to dispatch kernel_names(c)[kernel] (each of threads_per_block threads) for
// n = rows (gemv, gate_select), count (gather_gemv, the token ops) or cols (row_axpy, both
// kernels of row_axpy_split); 1 for top_k and cumulative_mass. row_axpy_split's partial
// kernel (kernel 0) is dispatched on threadgroups(c, cols, 0) · splits threadgroups (CUDA's
// grid x times grid y, flattened: the wrapper dispatches 1-D grids), splits =
// cuda::split_count(count, rows_per_split); when splits is 0 only the reduction runs.
[[nodiscard]] inline std::size_t threadgroups(const kernel_config& c, std::size_t n, std::size_t kernel = 0) {
  detail::validate(c);
  return cuda::grid_blocks(c, n, kernel);
}

[[nodiscard]] inline std::string generate_metal(const kernel_config& c) {
  const std::vector<std::string> names = metal::kernel_names(c);  // validates c
  const std::string dt(name(c.weight));
  std::vector<std::pair<std::string_view, std::string>> keys = {
      {"NAME", names[0]},
      {"SGS", std::to_string(c.threads_per_block / simd_width)},
      {"DT", dt},
      {"BV", std::to_string(block_values(c.weight))},
      {"ACT", std::string(name(c.act))},
      {"R", std::to_string(c.rows_per_warp)},
      {"T", std::to_string(c.threads_per_block)},
  };

  std::string s = "// Generated by actsparse::metal::generate_metal: op=";
  s.append(cuda::name(c.op)).append(" weight=").append(dt);
  if (c.op == kernel_op::gate_select) s.append(" act=").append(name(c.act));
  s.append(" threads_per_threadgroup=").append(std::to_string(c.threads_per_block));
  s.append(" rows_per_simdgroup=").append(std::to_string(c.rows_per_warp)).append("\n");
  s.append(detail::prelude);
  if (!cuda::detail::is_f32_op(c.op)) s.append(detail::decoder_source(c.weight)).append("\n");
  if (c.op == kernel_op::top_k || c.op == kernel_op::cumulative_mass)
    s.append(ACTSPARSE_CUDA_STRINGIFY(ACTSPARSE_CUDA_ORDER_KEY)).append("\n");
  if (c.op == kernel_op::gate_select) s.append(ACTSPARSE_CUDA_STRINGIFY(ACTSPARSE_CUDA_ACTIVATIONS)).append("\n");

  auto simd_rows = [&](std::string_view limit, std::string_view row) {
    std::vector<std::pair<std::string_view, std::string>> k = keys;
    k.emplace(k.begin(), "LIMIT", std::string(limit));
    k.emplace(k.begin(), "ROW", std::string(row));
    return cuda::detail::fill(detail::simd_rows_body, k);
  };
  switch (c.op) {
    case kernel_op::gemv:
      keys.emplace(keys.begin(), "BODY", simd_rows("rows", "k"));
      s += cuda::detail::fill(detail::gemv_kernel, keys);
      break;
    case kernel_op::gather_gemv:
      keys.emplace(keys.begin(), "BODY", simd_rows("count", "idx[k]"));
      s += cuda::detail::fill(detail::gather_kernel, keys);
      break;
    case kernel_op::row_axpy:
      s += cuda::detail::fill(detail::axpy_kernel, keys);
      break;
    case kernel_op::gate_select:
      keys.emplace(keys.begin(), "BODY", simd_rows("rows", "k"));
      s += cuda::detail::fill(detail::gate_kernel, keys);
      keys[1].second = names[1];  // NAME (after BODY)
      s += cuda::detail::fill(detail::compact_kernel, keys);
      break;
    case kernel_op::token_gather:
      s += cuda::detail::fill(detail::token_gather_kernel, keys);
      break;
    case kernel_op::token_scatter_add:
      s += cuda::detail::fill(detail::token_scatter_add_kernel, keys);
      break;
    case kernel_op::top_k:
      s += cuda::detail::fill(detail::top_k_kernel, keys);
      break;
    case kernel_op::row_axpy_split:
      s += cuda::detail::fill(detail::axpy_partial_kernel, keys);
      keys[0].second = names[1];  // NAME
      s += cuda::detail::fill(detail::reduce_partials_kernel, keys);
      break;
    case kernel_op::cumulative_mass:
      s += cuda::detail::fill(detail::cumulative_mass_kernel, keys);
      break;
    default:  // not reached: validate() rejects the ops without a Metal kernel
      break;
  }
  return s;
}

}  // namespace actsparse::metal
