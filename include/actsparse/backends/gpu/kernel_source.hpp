#pragma once
// Every GPU kernel body, written once in a neutral dialect that the CUDA and the Metal
// generators (backends/cuda/generator.hpp, backends/metal/generator.hpp) both emit: here the
// linear-algebra and token kernels, in selection_source.hpp the selection kernels. A
// generator writes its prelude (the dialect's definitions of the macros below), then for each
// kernel its own signature around the body here; nothing in a body is rewritten per dialect.
//
// The dialect (each prelude defines these; CUDA spelling / Metal spelling):
//   GPU_FN               device function qualifier       __device__ __forceinline__ / inline
//   GPU_GLOBAL           address space of a buffer       (none) / device
//   GPU_THREAD           a thread's own array            (none) / thread
//   GPU_SHARED           a block-shared variable, declared at kernel scope  __shared__ / threadgroup
//   GPU_CONSTANT         a program-scope constant        constexpr / constant
//   GPU_U64              64-bit unsigned                 unsigned long long / ulong
//   GPU_BARRIER()        block barrier, shared memory ordered  __syncthreads() / threadgroup_barrier
//   GPU_SHFL_XOR(v, m)   v of lane ^ m (32 lanes)        __shfl_xor_sync / simd_shuffle_xor
//   GPU_BALLOT(p)        the 32 lanes' p as bits         __ballot_sync / simd_ballot
//   GPU_POPC(v)          set bits                        __popc / popcount
//   GPU_FMA GPU_FABS GPU_EXP GPU_TANH                    fmaf fabsf expf tanhf / metal::fma fabs precise::exp tanh
//   GPU_UNROLL, GPU_UNROLL_N(n)  loop unrolling hints    #pragma unroll [n] / (none)
//   GPU_GROUP_2D(w, c, r) declares c, r: this block's place in a grid of w columns of blocks
//                        by rows      blockIdx.x, blockIdx.y / group % w, group / w (1-D dispatch)
// and device_math.hpp's primitives (actsparse_load_u16, ...). A block is a CUDA thread block or
// a Metal threadgroup, a warp a CUDA warp or a Metal simdgroup: 32 lanes in both.
//
// The thread positions a body reads, bound by the signature (positions below; CUDA computes
// them from threadIdx / blockIdx, Metal takes them as [[attribute]] arguments, in this order):
//   gid (thread in the grid), tid (thread in its block), group (block in the grid, 1-D),
//   groups (blocks in the grid), lane (thread in its warp), warp (warp in its block); grid_2d
//   (the body uses GPU_GROUP_2D: Metal binds group for it, CUDA nothing).
//
// $KEY placeholders are filled from the kernel config (gpu/generator.hpp): $T threads per
// block, $WARPS warps per block, $R rows per warp, $BV values per storage element, $DT the
// weight dtype's name, $ACT the activation's, $PASS tokens per pass, $EUNROLL an unroll hint;
// $ROWS is warp_rows below, filled with $LIMIT and $ROW. A key followed by u ($Tu) is the same
// number as an unsigned literal.
//
// Every reduction has a fixed order (lanes: a 5-step xor butterfly; warps: in index order) and
// no float atomics, so results do not depend on scheduling.

#include <cstdint>
#include <string_view>

namespace actsparse::gpu {

// The kinds of kernel argument; each dialect spells them in its signatures.
enum class param_kind : std::uint8_t {
  bytes,    // const unsigned char* (weights)
  in_f32,   // const float*
  out_f32,  // float*
  in_u32,   // const unsigned int*
  out_u32,  // unsigned int*
  u32,      // unsigned int
  u64,      // 64-bit unsigned (strides)
  f32       // float
};

struct param {
  param_kind kind;
  std::string_view name;
};

// The thread positions a kernel body reads (bits), in the order Metal's signatures take them.
namespace position {
inline constexpr unsigned gid = 1U;
inline constexpr unsigned tid = 2U;
inline constexpr unsigned group = 4U;
inline constexpr unsigned groups = 8U;
inline constexpr unsigned lane = 16U;
inline constexpr unsigned warp = 32U;
inline constexpr unsigned grid_2d = 64U;
}  // namespace position

namespace source {

using K = param_kind;

// Sums over the 32 lanes: every lane ends with the same sum (each step adds a pair in both
// lanes, and a + b == b + a).
inline constexpr std::string_view simd_sums = R"(GPU_FN float actsparse_simd_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += GPU_SHFL_XOR(v, offset);
  return v;
}
GPU_FN unsigned int actsparse_simd_sum_u32(unsigned int v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += GPU_SHFL_XOR(v, offset);
  return v;
}
)";

// The body shared by the warp-per-row kernels: acc[r] = W[row(first + r), :]·x, in every lane.
// $ROW is the row of output k; rows of outputs >= $LIMIT are never written (row 0 is read in
// their place so that every lane reaches the shuffles). Lanes take storage elements round
// robin into one fma chain each, then the butterfly.
inline constexpr std::string_view warp_rows = R"(  const unsigned int first = (group * $WARPSu + warp) * $Ru;
  const unsigned int n = cols / $BVu;
  GPU_GLOBAL const unsigned char* rowp[$R];
  float acc[$R];
  GPU_UNROLL
  for (int r = 0; r < $R; ++r) {
    const unsigned int k = first + (unsigned int)r;
    rowp[r] = k < $LIMIT ? w + (GPU_U64)($ROW) * row_stride : w;
    acc[r] = 0.0f;
  }
  for (unsigned int e = lane; e < n; e += 32u) {
    float xv[$BV];
    GPU_UNROLL
    for (int i = 0; i < $BV; ++i) xv[i] = x[e * $BVu + (unsigned int)i];
    GPU_UNROLL
    for (int r = 0; r < $R; ++r) {
      float wv[$BV];
      actsparse_decode_$DT(rowp[r], e, wv);
      GPU_UNROLL
      for (int i = 0; i < $BV; ++i) acc[r] = GPU_FMA(wv[i], xv[i], acc[r]);
    }
  }
  GPU_UNROLL
  for (int r = 0; r < $R; ++r) acc[r] = actsparse_simd_sum(acc[r]);
)";

// gemv and gather_gemv: warp_rows, then lane 0 stores the rows below $LIMIT.
inline constexpr std::string_view rows_store = R"($ROWS  if (lane == 0u) {
    GPU_UNROLL
    for (int r = 0; r < $R; ++r) {
      const unsigned int k = first + (unsigned int)r;
      if (k < $LIMIT) y[k] = acc[r];
    }
  }
)";
inline constexpr param gemv_params[] = {{K::bytes, "w"},  {K::u64, "row_stride"}, {K::in_f32, "x"},
                                        {K::u32, "rows"}, {K::u32, "cols"},       {K::out_f32, "y"}};
inline constexpr param gather_params[] = {{K::bytes, "w"},  {K::u64, "row_stride"}, {K::in_f32, "x"},
                                          {K::u32, "cols"}, {K::in_u32, "idx"},     {K::u32, "count"},
                                          {K::out_f32, "y"}};

// row_axpy: each thread owns one storage element of y (1 or 32 columns) and runs one fma chain
// per value over the kept rows in order, from 0. idx == nullptr means idx[k] = k.
inline constexpr std::string_view axpy = R"(  const unsigned int e = gid;
  if (e >= cols / $BVu) return;
  float acc[$BV];
  GPU_UNROLL
  for (int i = 0; i < $BV; ++i) acc[i] = 0.0f;
  for (unsigned int k = 0u; k < count; ++k) {
    const float c = coef[k];
    float wv[$BV];
    actsparse_decode_$DT(wt + (GPU_U64)(idx != nullptr ? idx[k] : k) * row_stride, e, wv);
    GPU_UNROLL
    for (int i = 0; i < $BV; ++i) acc[i] = GPU_FMA(c, wv[i], acc[i]);
  }
  GPU_UNROLL
  for (int i = 0; i < $BV; ++i) y[e * $BVu + (unsigned int)i] = acc[i];
)";
inline constexpr param axpy_params[] = {{K::bytes, "wt"},    {K::u64, "row_stride"}, {K::in_u32, "idx"},
                                        {K::in_f32, "coef"}, {K::u32, "count"},      {K::u32, "cols"},
                                        {K::out_f32, "y"}};

// row_axpy_split, kernel 1: row_axpy's fma chain over the kept rows [s·rows_per_split,
// min(count, (s+1)·rows_per_split)) of split s, into row s of partial. A 2-D grid of x column
// blocks by the splits (GPU_GROUP_2D: CUDA's blockIdx.x / .y; Metal dispatches it flattened).
inline constexpr std::string_view axpy_partial =
    R"(  const unsigned int groups_per_split = (cols / $BVu + $Tu - 1u) / $Tu;
  if (groups_per_split == 0u) return;
  GPU_GROUP_2D(groups_per_split, column_group, split);
  const unsigned int e = column_group * $Tu + tid;
  if (e >= cols / $BVu) return;
  const unsigned int begin = split * rows_per_split;
  const unsigned int end = begin >= count ? begin : (count - begin < rows_per_split ? count : begin + rows_per_split);
  float acc[$BV];
  GPU_UNROLL
  for (int i = 0; i < $BV; ++i) acc[i] = 0.0f;
  for (unsigned int k = begin; k < end; ++k) {
    const float c = coef[k];
    float wv[$BV];
    actsparse_decode_$DT(wt + (GPU_U64)(idx != nullptr ? idx[k] : k) * row_stride, e, wv);
    GPU_UNROLL
    for (int i = 0; i < $BV; ++i) acc[i] = GPU_FMA(c, wv[i], acc[i]);
  }
  GPU_GLOBAL float* out = partial + (GPU_U64)split * cols;
  GPU_UNROLL
  for (int i = 0; i < $BV; ++i) out[e * $BVu + (unsigned int)i] = acc[i];
)";
inline constexpr param axpy_partial_params[] = {{K::bytes, "wt"},           {K::u64, "row_stride"}, {K::in_u32, "idx"},
                                                {K::in_f32, "coef"},        {K::u32, "count"},      {K::u32, "cols"},
                                                {K::u32, "rows_per_split"}, {K::out_f32, "partial"}};

// row_axpy_split, kernel 2: y[c] = ((0 + partial[0][c]) + partial[1][c]) + ..., in split order.
inline constexpr std::string_view reduce_partials = R"(  const unsigned int c = gid;
  if (c >= cols) return;
  float acc = 0.0f;
  for (unsigned int s = 0u; s < splits; ++s) acc += partial[(GPU_U64)s * cols + c];
  y[c] = acc;
)";
inline constexpr param reduce_params[] = {
    {K::in_f32, "partial"}, {K::u32, "splits"}, {K::u32, "cols"}, {K::out_f32, "y"}};

// The token kernels: one block per kept token (f32 rows, strides in floats).
inline constexpr std::string_view token_gather = R"(  const unsigned int k = group;
  if (k >= count) return;
  GPU_GLOBAL const float* from = src + (GPU_U64)tokens[k] * src_stride;
  GPU_GLOBAL float* to = dst + (GPU_U64)k * dst_stride;
  for (unsigned int i = tid; i < d; i += $Tu) to[i] = from[i];
)";
inline constexpr param token_gather_params[] = {{K::in_f32, "src"},    {K::u64, "src_stride"}, {K::in_u32, "tokens"},
                                                {K::u32, "count"},     {K::u32, "d"},          {K::out_f32, "dst"},
                                                {K::u64, "dst_stride"}};
// Tokens are distinct: each element has one writer.
inline constexpr std::string_view token_scatter_add = R"(  const unsigned int k = group;
  if (k >= count) return;
  GPU_GLOBAL const float* from = z + (GPU_U64)k * z_stride;
  GPU_GLOBAL float* to = x + (GPU_U64)tokens[k] * x_stride;
  for (unsigned int i = tid; i < d; i += $Tu) to[i] += from[i];
)";
inline constexpr param token_scatter_params[] = {{K::in_f32, "z"},    {K::u64, "z_stride"}, {K::in_u32, "tokens"},
                                                 {K::u32, "count"},   {K::u32, "d"},        {K::out_f32, "x"},
                                                 {K::u64, "x_stride"}};

// gather_values: dst[k] = src[idx[k]].
inline constexpr std::string_view gather_values = R"(  if (gid < count) dst[gid] = src[idx[gid]];
)";
inline constexpr param gather_values_params[] = {
    {K::in_f32, "src"}, {K::in_u32, "idx"}, {K::u32, "count"}, {K::out_f32, "dst"}};

// gated_hidden: h[i] = act(g[i]) · u[i].
inline constexpr std::string_view gated_hidden = R"(  if (gid < n) h[gid] = actsparse_$ACT(g[gid]) * u[gid];
)";
inline constexpr param gated_hidden_params[] = {{K::in_f32, "g"}, {K::in_f32, "u"}, {K::u32, "n"}, {K::out_f32, "h"}};

// warp_rows over two matrices (after `first`): acc_u[r] = up[row(first + r), :]·x and, where
// need_gate, acc_g[r] = gate[row, :]·x. Each accumulator sees exactly warp_rows' operations
// (the same lanes, order and butterfly), so its sums are gather_gemv's bits. $ROW is the row of
// output k; outputs >= $LIMIT read row 0 in their place.
inline constexpr std::string_view gated_rows = R"(  const unsigned int n = cols / $BVu;
  unsigned int row[$R];
  float acc_g[$R];
  float acc_u[$R];
  GPU_UNROLL
  for (int r = 0; r < $R; ++r) {
    const unsigned int k = first + (unsigned int)r;
    row[r] = k < $LIMIT ? $ROW : 0u;
    acc_g[r] = 0.0f;
    acc_u[r] = 0.0f;
  }
  for (unsigned int e = lane; e < n; e += 32u) {
    float xv[$BV];
    GPU_UNROLL
    for (int i = 0; i < $BV; ++i) xv[i] = x[e * $BVu + (unsigned int)i];
    GPU_UNROLL
    for (int r = 0; r < $R; ++r) {
      float wv[$BV];
      actsparse_decode_$DT(up + (GPU_U64)row[r] * up_stride, e, wv);
      GPU_UNROLL
      for (int i = 0; i < $BV; ++i) acc_u[r] = GPU_FMA(wv[i], xv[i], acc_u[r]);
    }
    if (need_gate) {
      GPU_UNROLL
      for (int r = 0; r < $R; ++r) {
        float wv[$BV];
        actsparse_decode_$DT(gate + (GPU_U64)row[r] * gate_stride, e, wv);
        GPU_UNROLL
        for (int i = 0; i < $BV; ++i) acc_g[r] = GPU_FMA(wv[i], xv[i], acc_g[r]);
      }
    }
  }
  GPU_UNROLL
  for (int r = 0; r < $R; ++r) {
    acc_u[r] = actsparse_simd_sum(acc_u[r]);
    if (need_gate) acc_g[r] = actsparse_simd_sum(acc_g[r]);
  }
)";

// gated_gather: gated_rows over the listed rows (idx, or the first count). With gate_act
// given, the gate loads and sums are skipped (a uniform branch).
inline constexpr std::string_view gated_gather = R"(  const unsigned int first = (group * $WARPSu + warp) * $Ru;
  const bool need_gate = gate_act == nullptr;
$GATED  if (lane == 0u) {
    GPU_UNROLL
    for (int r = 0; r < $R; ++r) {
      const unsigned int k = first + (unsigned int)r;
      if (k < count) h[k] = (need_gate ? actsparse_$ACT(acc_g[r]) : gate_act[row[r]]) * acc_u[r];
    }
  }
)";
inline constexpr param gated_gather_params[] = {
    {K::bytes, "gate"}, {K::u64, "gate_stride"}, {K::bytes, "up"},  {K::u64, "up_stride"},   {K::in_f32, "x"},
    {K::u32, "cols"},   {K::in_u32, "idx"},      {K::u32, "count"}, {K::in_f32, "gate_act"}, {K::out_f32, "h"}};

// batched_gemv: warp_rows for $PASS tokens at a time: one decode of a weight element feeds the
// accumulators of its row; each accumulator sees gemv's operations for its token (gemv's
// bits). $EUNROLL bounds the unrolling of the element loop: a fully unrolled loop of the
// one-value dtypes spills; the block dtypes' loop body is too large to be unrolled anyway.
inline constexpr std::string_view batched_gemv = R"(  const unsigned int first = (group * $WARPSu + warp) * $Ru;
  const unsigned int n = cols / $BVu;
  GPU_GLOBAL const unsigned char* rowp[$R];
  GPU_UNROLL
  for (int r = 0; r < $R; ++r) {
    const unsigned int k = first + (unsigned int)r;
    rowp[r] = k < rows ? w + (GPU_U64)k * row_stride : w;
  }
  for (unsigned int t0 = 0u; t0 < ntok; t0 += $PASSu) {
    GPU_GLOBAL const float* xb[$PASS];
    float acc[$R][$PASS];
    GPU_UNROLL
    for (int b = 0; b < $PASS; ++b) {
      const unsigned int t = t0 + (unsigned int)b;
      xb[b] = x + (GPU_U64)(t < ntok ? t : t0) * x_stride;
      GPU_UNROLL
      for (int r = 0; r < $R; ++r) acc[r][b] = 0.0f;
    }
    $EUNROLL
    for (unsigned int e = lane; e < n; e += 32u) {
      GPU_UNROLL
      for (int r = 0; r < $R; ++r) {
        float wv[$BV];
        actsparse_decode_$DT(rowp[r], e, wv);
        GPU_UNROLL
        for (int b = 0; b < $PASS; ++b) {
          GPU_UNROLL
          for (int i = 0; i < $BV; ++i) acc[r][b] = GPU_FMA(wv[i], xb[b][e * $BVu + (unsigned int)i], acc[r][b]);
        }
      }
    }
    GPU_UNROLL
    for (int r = 0; r < $R; ++r) {
      GPU_UNROLL
      for (int b = 0; b < $PASS; ++b) acc[r][b] = actsparse_simd_sum(acc[r][b]);
    }
    if (lane == 0u) {
      GPU_UNROLL
      for (int b = 0; b < $PASS; ++b) {
        const unsigned int t = t0 + (unsigned int)b;
        GPU_UNROLL
        for (int r = 0; r < $R; ++r) {
          const unsigned int k = first + (unsigned int)r;
          if (t < ntok && k < rows) y[(GPU_U64)t * y_stride + k] = acc[r][b];
        }
      }
    }
  }
)";
inline constexpr param batched_gemv_params[] = {{K::bytes, "w"},      {K::u64, "row_stride"}, {K::in_f32, "x"},
                                                {K::u64, "x_stride"}, {K::u32, "ntok"},       {K::u32, "rows"},
                                                {K::u32, "cols"},     {K::out_f32, "y"},      {K::u64, "y_stride"}};

}  // namespace source
}  // namespace actsparse::gpu
