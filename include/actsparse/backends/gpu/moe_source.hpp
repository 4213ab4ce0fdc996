#pragma once
// The bodies of the Mixture-of-Experts kernels, in the neutral dialect of kernel_source.hpp
// (its macros, positions, $KEY placeholders and lane sums): the routing table built on the
// device (moe_route, and vLLM's padded layout: moe_pad), the grouped expert FFN over the
// expert-major pairs (moe_gated: gate + up + activation, moe_down: the down projection) and
// the weighted combine in token-major order (moe_combine). The layouts are core's
// (core/op_args.hpp, "Mixture of experts"; core/routing.hpp); what each kernel computes, its
// arguments and grid: gpu/op_table.hpp's header.
//
// Every list is written by one warp in pair order and every sum has a fixed order, so the
// tables equal routing_table::assign's and pad()'s exactly, and the floats do not depend on
// scheduling.

#include <actsparse/backends/gpu/kernel_source.hpp>

#include <string_view>

namespace actsparse::gpu::source {

// The segment of a sorted offsets list that holds i: the s in [0, n) with offsets[s] <= i <
// offsets[s + 1] (the last such s when segments are empty), by bisection. Needs offsets[0] <=
// i < offsets[n]. The expert of an expert-major position, the token of a token-major pair.
inline constexpr std::string_view moe_segment =
    R"(GPU_FN unsigned int actsparse_moe_segment(GPU_GLOBAL const unsigned int* offsets, unsigned int n, unsigned int i) {
  unsigned int lo = 0u;
  unsigned int hi = n;
  while (hi - lo > 1u) {
    const unsigned int mid = lo + ((hi - lo) >> 1);
    if (offsets[mid] <= i) lo = mid;
    else hi = mid;
  }
  return lo;
}
)";

// moe_route, kernel 1: one warp per expert counts its pairs (lanes stride over the pairs; an
// integer butterfly).
inline constexpr std::string_view moe_count = R"(  const unsigned int ex = group * $WARPSu + warp;
  if (ex >= experts) return;
  unsigned int n = 0u;
  for (unsigned int p = lane; p < pairs; p += 32u) n += pair_expert[p] == ex ? 1u : 0u;
  n = actsparse_simd_sum_u32(n);
  if (lane == 0u) counts[ex] = n;
)";
inline constexpr param moe_count_params[] = {
    {K::in_u32, "pair_expert"}, {K::u32, "pairs"}, {K::u32, "experts"}, {K::out_u32, "counts"}};

// moe_route, kernel 2: one warp per expert: its offset (the counts of the experts before it),
// then its pairs in token-major order, 32 at a time: a ballot gives each kept pair its place.
inline constexpr std::string_view moe_scatter = R"(  const unsigned int ex = group * $WARPSu + warp;
  if (ex >= experts) return;
  unsigned int at = 0u;
  for (unsigned int i = lane; i < ex; i += 32u) at += counts[i];
  at = actsparse_simd_sum_u32(at);
  if (lane == 0u) {
    expert_offsets[ex] = at;
    if (ex + 1u == experts) expert_offsets[experts] = at + counts[ex];
  }
  for (unsigned int chunk = 0u; chunk < pairs; chunk += 32u) {
    const unsigned int p = chunk + lane;
    const bool mine = p < pairs && pair_expert[p] == ex;
    const unsigned int ballot = GPU_BALLOT(mine);
    if (mine) {
      const unsigned int q = at + GPU_POPC(ballot & ((1u << lane) - 1u));
      expert_pairs[q] = p;
      expert_tokens[q] = actsparse_moe_segment(token_offsets, tokens, p);
      if (pair_position != nullptr) pair_position[p] = q;
    }
    at += GPU_POPC(ballot);
  }
)";
inline constexpr param moe_scatter_params[] = {{K::in_u32, "token_offsets"},
                                               {K::in_u32, "pair_expert"},
                                               {K::u32, "tokens"},
                                               {K::u32, "pairs"},
                                               {K::u32, "experts"},
                                               {K::in_u32, "counts"},
                                               {K::out_u32, "expert_offsets"},
                                               {K::out_u32, "expert_pairs"},
                                               {K::out_u32, "expert_tokens"},
                                               {K::out_u32, "pair_position"}};

// moe_pad: one warp per expert: its padded start (the padded runs of the experts before it),
// its pairs then the sentinel (the pair count) up to a multiple of `block`, and its blocks'
// expert; the last expert's warp writes the total.
inline constexpr std::string_view moe_pad = R"(  const unsigned int ex = group * $WARPSu + warp;
  if (ex >= experts) return;
  unsigned int at = 0u;
  for (unsigned int i = lane; i < ex; i += 32u) {
    const unsigned int m = expert_offsets[i + 1u] - expert_offsets[i];
    at += (m + block - 1u) / block * block;
  }
  at = actsparse_simd_sum_u32(at);
  const unsigned int begin = expert_offsets[ex];
  const unsigned int n = expert_offsets[ex + 1u] - begin;
  const unsigned int padded = (n + block - 1u) / block * block;
  const unsigned int sentinel = expert_offsets[experts];
  for (unsigned int j = lane; j < padded; j += 32u) sorted_pair_ids[at + j] = j < n ? expert_pairs[begin + j] : sentinel;
  for (unsigned int b = lane; b < padded / block; b += 32u) block_experts[at / block + b] = ex;
  if (lane == 0u && ex + 1u == experts) *pairs_post_padded = at + padded;
)";
inline constexpr param moe_pad_params[] = {{K::in_u32, "expert_offsets"},
                                           {K::in_u32, "expert_pairs"},
                                           {K::u32, "experts"},
                                           {K::u32, "block"},
                                           {K::out_u32, "sorted_pair_ids"},
                                           {K::out_u32, "block_experts"},
                                           {K::out_u32, "pairs_post_padded"}};

// moe_gated: gated_rows (kernel_source.hpp) for the expert of position q on the token of q,
// rows first .. first + R - 1 of d_ff: act(gemv(gate_e)) · gemv(up_e) bit for bit.
inline constexpr std::string_view moe_gated = R"(  GPU_GROUP_2D(pairs, q, tile);
  if (q >= pairs) return;
  const unsigned int ex = actsparse_moe_segment(expert_offsets, experts, q);
  gate += (GPU_U64)ex * gate_expert_stride;
  up += (GPU_U64)ex * up_expert_stride;
  x += (GPU_U64)expert_tokens[q] * x_stride;
  const unsigned int first = (tile * $WARPSu + warp) * $Ru;
  const bool need_gate = true;
$GATED  if (lane == 0u) {
    GPU_GLOBAL float* hq = h + (GPU_U64)q * d_ff;
    GPU_UNROLL
    for (int r = 0; r < $R; ++r) {
      const unsigned int k = first + (unsigned int)r;
      if (k < d_ff) hq[k] = actsparse_$ACT(acc_g[r]) * acc_u[r];
    }
  }
)";
inline constexpr param moe_gated_params[] = {{K::bytes, "gate"},
                                             {K::u64, "gate_stride"},
                                             {K::u64, "gate_expert_stride"},
                                             {K::bytes, "up"},
                                             {K::u64, "up_stride"},
                                             {K::u64, "up_expert_stride"},
                                             {K::in_f32, "x"},
                                             {K::u64, "x_stride"},
                                             {K::u32, "cols"},
                                             {K::u32, "d_ff"},
                                             {K::in_u32, "expert_offsets"},
                                             {K::u32, "experts"},
                                             {K::in_u32, "expert_tokens"},
                                             {K::u32, "pairs"},
                                             {K::out_f32, "h"}};

// moe_down: row_axpy over all d_ff rows of the expert of q's W_downᵀ with q's hidden values as
// the coefficients: each thread owns one storage element of f's row q and runs one fma chain
// per value over j in order, from 0.
inline constexpr std::string_view moe_down = R"(  GPU_GROUP_2D(pairs, q, column_group);
  const unsigned int e = column_group * $Tu + tid;
  if (q >= pairs || e >= cols / $BVu) return;
  GPU_GLOBAL const unsigned char* w = wt + (GPU_U64)actsparse_moe_segment(expert_offsets, experts, q) * expert_stride;
  GPU_GLOBAL const float* hq = h + (GPU_U64)q * d_ff;
  float acc[$BV];
  GPU_UNROLL
  for (int i = 0; i < $BV; ++i) acc[i] = 0.0f;
  for (unsigned int j = 0u; j < d_ff; ++j) {
    const float c = hq[j];
    float wv[$BV];
    actsparse_decode_$DT(w + (GPU_U64)j * row_stride, e, wv);
    GPU_UNROLL
    for (int i = 0; i < $BV; ++i) acc[i] = GPU_FMA(c, wv[i], acc[i]);
  }
  GPU_GLOBAL float* fq = f + (GPU_U64)q * cols;
  GPU_UNROLL
  for (int i = 0; i < $BV; ++i) fq[e * $BVu + (unsigned int)i] = acc[i];
)";
inline constexpr param moe_down_params[] = {
    {K::bytes, "wt"},    {K::u64, "row_stride"}, {K::u64, "expert_stride"}, {K::in_u32, "expert_offsets"},
    {K::u32, "experts"}, {K::in_f32, "h"},       {K::u32, "pairs"},         {K::u32, "d_ff"},
    {K::u32, "cols"},    {K::out_f32, "f"}};

// moe_combine: one thread per (token, column): the fma chain over the token's pairs in
// token-major order, from +0, reading each pair's row of f at its expert-major position.
inline constexpr std::string_view moe_combine = R"(  GPU_GROUP_2D(tokens, t, column_group);
  const unsigned int c = column_group * $Tu + tid;
  if (t >= tokens || c >= cols) return;
  float acc = 0.0f;
  const unsigned int end = token_offsets[t + 1u];
  for (unsigned int p = token_offsets[t]; p < end; ++p)
    acc = GPU_FMA(pair_weight[p], f[(GPU_U64)pair_position[p] * cols + c], acc);
  y[(GPU_U64)t * y_stride + c] = acc;
)";
inline constexpr param moe_combine_params[] = {{K::in_f32, "f"},
                                               {K::u32, "cols"},
                                               {K::in_u32, "token_offsets"},
                                               {K::in_f32, "pair_weight"},
                                               {K::in_u32, "pair_position"},
                                               {K::u32, "tokens"},
                                               {K::out_f32, "y"},
                                               {K::u64, "y_stride"}};

}  // namespace actsparse::gpu::source
