#pragma once
// The GPU ops as data: kernel_op, the kernel config, the dialect a generator writes, and one
// table entry per op (its kernels' names, arguments, launch shapes and the neutral bodies of
// kernel_source.hpp, selection_source.hpp and moe_source.hpp). gpu/generator.hpp validates a
// config against this table and emits its kernels; the launchers read the same entries.
//
// The kernels (W a row-major matrix of `weight` storage, rows `row_stride` bytes apart; cols a
// multiple of block_values(weight); x, y, coef and h f32; idx u32; T = threads_per_block, R =
// rows_per_warp; one warp computes R rows, lanes take storage elements round robin and the
// partial sums meet in a xor butterfly). Arguments in this order; grid in blocks of T threads:
//   gemv:        actsparse_gemv_<dt>_t<T>[_r<R>](w, row_stride, x, rows, cols, y)
//                y[k] = W[k,:]·x.  grid: ceil(rows / (T/32·R)).
//   gather_gemv: actsparse_gather_gemv_<dt>_t<T>[_r<R>](w, row_stride, x, cols, idx, count, y)
//                y[k] = W[idx[k],:]·x (output-sparse).  grid: ceil(count / (T/32·R)).
//   row_axpy:    actsparse_row_axpy_<dt>_t<T>(wt, row_stride, idx, coef, count, cols, y)
//                y = Σ_k coef[k]·Wt[idx[k],:] (input-sparse); each thread owns one storage element
//                (1 or 32 columns) and loops over k in order: acc = fma(coef[k], w, acc) from 0.
//                idx == nullptr means idx[k] = k.  grid: ceil(cols / bv / T).
//   gate_select: two kernels, launched in order on the same grid (ceil(rows / (T/32·R))):
//                actsparse_gate_<act>_<dt>_t<T>[_r<R>](w, row_stride, x, rows, cols, threshold, h, block_counts)
//                  h[j] = act(W[j,:]·x); block_counts[b] = #{j in block b : |h[j]| > threshold}
//                actsparse_compact_t<T>(h, rows, rows_per_block, threshold, block_counts, idx, count)
//                  idx = the kept j in increasing order; *count = their number (written by the last
//                  block; the caller sets it when rows == 0). Block b writes at the sum of
//                  block_counts[0..b), so the list does not depend on scheduling.
//   token_gather:      actsparse_token_gather_t<T>(src, src_stride, tokens, count, d, dst, dst_stride)
//                      dst[k,:] = src[tokens[k],:] (f32 rows, strides in floats).
//   token_scatter_add: actsparse_token_scatter_add_t<T>(z, z_stride, tokens, count, d, x, x_stride)
//                      x[tokens[k],:] += z[k,:]; tokens must be distinct (each element has one writer).
//                      grid of both: count blocks, one per token.
//   top_k:       actsparse_top_k_t<T>(scores, n, k, idx, count)
//                idx = the k highest scores' indices in increasing order, ties to the lower index (as
//                the top_k selector); *count = k (0 when k is 0 or above n). Scores must be finite.
//                grid: 1 block: the k-th largest key bit by bit (33 counting passes), then one pass
//                in index order that writes the kept indices.
//   row_axpy_split: row_axpy split over the kept rows (for long kept lists); two kernels, in order:
//                actsparse_row_axpy_partial_<dt>_t<T>(wt, row_stride, idx, coef, count, cols, rows_per_split, partial)
//                  grid: (grid_blocks(c, cols, 0), splits), splits = split_count(count, rows_per_split)
//                  (Metal: the product, flattened: split g / grid_blocks(c, cols, 0)). Split s
//                  runs row_axpy's fma chain over k in [s·rows_per_split, min(count,
//                  (s+1)·rows_per_split)), in order, into partial[s·cols + c] (partial: splits x
//                  cols floats). idx may be nullptr.
//                actsparse_reduce_partials_t<T>(partial, splits, cols, y)
//                  y[c] = ((0 + partial[0·cols+c]) + partial[1·cols+c]) + ... in order of s (0 when
//                  splits is 0).  grid: ceil(cols / T). With one split, y equals row_axpy's bits.
//   cumulative_mass: actsparse_cumulative_mass_t<T>(scores, n, mass, min_keep, idx, count)
//                The cumulative_mass selector for one row, recent_n = 0: idx = the kept indices in
//                increasing order, *count their number; the smallest prefix of the ranking (score
//                descending, index ascending) whose sum reaches mass·total and that holds
//                min(min_keep, n) scores; mass >= 1 and the dense fallbacks (a NaN / inf or
//                negative score, or all zero) keep everything. mass must be finite and > 0; n = 0
//                gives 0. grid: 1 block. Sums in double (CUDA) or float pairs (Metal), in one fixed
//                order; how the kept set compares with the host selector's: docs/POLICIES.md,
//                "Device selection".
//   gather_values: actsparse_gather_values_t<T>(src, idx, count, dst)
//                dst[k] = src[idx[k]] (compacts the coefficients of an input-sparse linear).
//                grid: ceil(count / T).
//   gated_gather: actsparse_gated_gather_<act>_<dt>_t<T>[_r<R>](gate, gate_stride, up, up_stride, x, cols,
//                idx, count, gate_act, h)   (phase 1 of the gated FFN, fused)
//                j = idx ? idx[k] : k; h[k] = (gate_act ? gate_act[j] : act(Gate[j,:]·x)) · (Up[j,:]·x);
//                with gate_act given, no gate row is read (gate may be null). Each dot product takes
//                gather_gemv's operations, so h[k] == act(gather_gemv(gate)[k]) · gather_gemv(up)[k]
//                bit for bit.  grid: ceil(count / (T/32·R)).
//   gated_hidden: actsparse_gated_hidden_<act>_t<T>(g, u, n, h)
//                h[i] = act(g[i]) · u[i].  grid: ceil(n / T).
//   batched_gemv: actsparse_batched_gemv_<dt>_t<T>[_r<R>]_b<B>(w, row_stride, x, x_stride, ntok, rows, cols,
//                y, y_stride)   (B = tokens_per_pass: several tokens per weight read)
//                y[t·y_stride + k] = W[k,:]·x[t·x_stride + :] for t < ntok, k < rows (strides in
//                floats); each value takes gemv's operations for its token: gemv's bits.
//                grid: ceil(rows / (T/32·R)). Registers grow with R·B (the compile tests keep
//                the configs they assemble free of spills).
// Mixture of experts (moe_source.hpp; the layouts of core/op_args.hpp, "Mixture of experts", and
// core/routing.hpp). P pairs, E experts; expert e's matrix of a stacked projection starts
// e·expert_stride bytes after expert 0's. The expert of expert-major position q is the e with
// expert_offsets[e] <= q < expert_offsets[e+1] (found by bisection in each kernel that needs it).
// Launch nothing on an empty grid (P, E or tokens 0). One layer runs moe_route (once per call,
// shared by every projection), then moe_gated, moe_down, moe_combine.
//   moe_route:   the expert-major side of a routing table from its token-major side, exactly
//                routing_table::assign's (a stable counting sort: within an expert, its pairs in
//                token-major order). Two kernels, in order, on the same grid, ceil(E / (T/32)),
//                one warp per expert (rows_per_warp 1):
//                actsparse_moe_count_t<T>(pair_expert, pairs, experts, counts)
//                  counts[e] = #{p : pair_expert[p] == e} (counts: E u32 of scratch)
//                actsparse_moe_scatter_t<T>(token_offsets, pair_expert, tokens, pairs, experts, counts,
//                expert_offsets, expert_pairs, expert_tokens, pair_position)
//                  expert_offsets (E+1) = the exclusive sums of counts; expert e's warp walks the
//                  pairs in order, 32 at a time, and writes each of its own at the next place:
//                  expert_pairs[q] = p, expert_tokens[q] = the token of p, pair_position[p] = q
//                  (the inverse permutation, which moe_combine reads; nullptr: not written).
//   moe_pad:     actsparse_moe_pad_t<T>(expert_offsets, expert_pairs, experts, block, sorted_pair_ids,
//                block_experts, pairs_post_padded)   (vLLM's fused-MoE inputs, core's pad())
//                each expert's run of expert_pairs padded with the sentinel P up to a multiple of
//                block, experts without pairs left out; block_experts[b] = the expert of block b;
//                *pairs_post_padded = the padded length (at most P + min(E, P)·(block − 1)).
//                grid: ceil(E / (T/32)), one warp per expert.
//   moe_gated:   actsparse_moe_gated_<act>_<dt>_t<T>[_r<R>](gate, gate_stride, gate_expert_stride, up,
//                up_stride, up_expert_stride, x, x_stride, cols, d_ff, expert_offsets, experts,
//                expert_tokens, pairs, h)   (phase 1: the hidden values of every pair)
//                with e the expert of q and t = expert_tokens[q]: h[q·d_ff + j] = act(Gate_e[j,:]·x_t)
//                · (Up_e[j,:]·x_t) (x_t = x + t·x_stride floats, cols = d_model). gated_gather's
//                operations: act(gemv(Gate_e, x_t)[j]) · gemv(Up_e, x_t)[j] bit for bit.
//                grid: (P, ceil(d_ff / (T/32·R))) (Metal: flattened, q = group % P).
//   moe_down:    actsparse_moe_down_<dt>_t<T>(wt, row_stride, expert_stride, expert_offsets, experts, h,
//                pairs, d_ff, cols, f)   (phase 2: each pair's expert output)
//                f[q·cols + c] = Σ_j h[q·d_ff + j]·DownT_e[j, c] (DownT_e = expert e's W_downᵀ,
//                d_ff x cols, cols = d_model), row_axpy's chain: each thread owns one storage
//                element and runs acc = fma(h, w, acc) from 0 over j ascending.
//                grid: (P, ceil(cols / bv / T)).
//   moe_combine: actsparse_moe_combine_t<T>(f, cols, token_offsets, pair_weight, pair_position, tokens,
//                y, y_stride)
//                y[t·y_stride + c] = the fma chain from +0 over t's pairs p in token-major order:
//                acc = fma(pair_weight[p], f[pair_position[p]·cols + c], acc) (a token without pairs
//                gets +0; no shared expert: add it after). One thread per (t, c).
//                grid: (tokens, ceil(cols / T)).
//                The MoE ops are CUDA only (metal::dialect does not list them).
// Every kernel has a fixed work partition and fixed reduction orders, no float atomics: the
// same inputs give the same bits on every run.
//
// These are the GPU side's own shapes: a kernel_config is a run-time value, not the CPU
// backend's compile-time configuration (its row groups and prefetch distances), which the
// generators do not read.

#include <actsparse/backends/gpu/kernel_source.hpp>
#include <actsparse/backends/gpu/moe_source.hpp>
#include <actsparse/backends/gpu/selection_source.hpp>
#include <actsparse/core/activation.hpp>
#include <actsparse/core/dtype.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace actsparse::gpu {

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
  cumulative_mass,
  moe_route,
  moe_pad,
  moe_gated,
  moe_down,
  moe_combine
};

struct kernel_config {
  kernel_op op = kernel_op::gemv;
  dtype weight = dtype::f32;
  activation act = activation::silu;  // gate_select, gated_gather, gated_hidden and moe_gated only
  unsigned threads_per_block = 256;   // a multiple of 32 in [32, 1024]
  unsigned rows_per_warp = 1;         // 1, 2, 4 or 8 rows share each load of x (the warp-per-row ops; else 1)
  unsigned tokens_per_pass = 1;       // batched_gemv: 1, 2, 4 or 8 tokens share each weight load (else 1)
};

// How cumulative_mass sums in a dialect (kernel_source.hpp: mass_f64, mass_f32_pair).
enum class mass_sum : std::uint8_t { f64, f32_pair };

[[nodiscard]] constexpr std::uint32_t op_bit(kernel_op op) noexcept { return 1U << static_cast<unsigned>(op); }

// A kernel language as a generator writes it: its words in messages and what it generates.
struct dialect {
  std::string_view where;     // the generator, named in errors ("cuda::generate_cuda")
  std::string_view language;  // "CUDA", "Metal"
  std::string_view warp;      // what it calls 32 lanes ("warp", "simdgroup")
  std::string_view block;     // and a group of threads ("block", "threadgroup")
  std::uint32_t ops;          // op_bit(op) of every op it generates
  mass_sum mass;

  [[nodiscard]] constexpr bool supports(kernel_op op) const noexcept { return (ops & op_bit(op)) != 0; }
};

// How many blocks a kernel is launched on, for the n of grid_blocks.
enum class grid_rule : std::uint8_t {
  rows,          // ceil(n / rows_per_block): the warp-per-row kernels
  elements,      // ceil(n / (T · block_values)): one storage element per thread (n = cols)
  threads,       // ceil(n / T): one value per thread
  one_per_item,  // n: one block per token
  single         // 1 block
};

// One kernel of an op: its name ($DT, $ACT, $SUFFIX, $T, $PASS filled), arguments, the thread
// positions its body reads, its grid, and its body (kernel_source.hpp). With $LIMIT and $ROW
// given, a body's $ROWS is source::warp_rows and its $GATED source::gated_rows.
struct kernel_text {
  std::string_view name;
  std::span<const param> params;
  unsigned positions;
  grid_rule grid;
  std::string_view body;
  std::string_view limit{};
  std::string_view row{};
};

// One op: everything the generators and launchers know about it.
struct op_entry {
  kernel_op op;
  std::string_view name;
  std::span<const kernel_text> kernels;  // in launch order
  bool reads_f32 = false;                // f32 activations or scores, not weights: weight must be f32
  std::string_view one_row{};            // rows_per_warp must be 1, because ($BLOCK: the dialect's word)
  bool uses_act = false;
  bool batched = false;        // tokens_per_pass applies
  bool order_key = false;      // reads device_math's order key
  bool mass = false;           // sums with the dialect's mass accumulator
  std::string_view helpers{};  // device functions the kernels call
};

namespace detail {

namespace p = position;
inline constexpr unsigned rows_positions = p::group | p::lane | p::warp;

inline constexpr kernel_text gemv_kernels[] = {{"actsparse_gemv_$DT$SUFFIX", source::gemv_params, rows_positions,
                                                grid_rule::rows, source::rows_store, "rows", "k"}};
inline constexpr kernel_text gather_kernels[] = {{"actsparse_gather_gemv_$DT$SUFFIX", source::gather_params,
                                                  rows_positions, grid_rule::rows, source::rows_store, "count",
                                                  "idx[k]"}};
inline constexpr kernel_text axpy_kernels[] = {
    {"actsparse_row_axpy_$DT$SUFFIX", source::axpy_params, p::gid, grid_rule::elements, source::axpy}};
inline constexpr kernel_text gate_kernels[] = {
    {"actsparse_gate_$ACT_$DT$SUFFIX", source::gate_params, p::tid | rows_positions, grid_rule::rows, source::gate,
     "rows", "k"},
    {"actsparse_compact_t$T", source::compact_params, p::tid | p::group | p::groups | p::lane | p::warp,
     grid_rule::rows, source::compact}};
inline constexpr kernel_text token_gather_kernels[] = {{"actsparse_token_gather$SUFFIX", source::token_gather_params,
                                                        p::tid | p::group, grid_rule::one_per_item,
                                                        source::token_gather}};
inline constexpr kernel_text token_scatter_kernels[] = {{"actsparse_token_scatter_add$SUFFIX",
                                                         source::token_scatter_params, p::tid | p::group,
                                                         grid_rule::one_per_item, source::token_scatter_add}};
inline constexpr kernel_text top_k_kernels[] = {
    {"actsparse_top_k$SUFFIX", source::top_k_params, p::tid | p::lane | p::warp, grid_rule::single, source::top_k}};
inline constexpr kernel_text split_kernels[] = {
    {"actsparse_row_axpy_partial_$DT$SUFFIX", source::axpy_partial_params, p::tid | p::grid_2d, grid_rule::elements,
     source::axpy_partial},
    {"actsparse_reduce_partials_t$T", source::reduce_params, p::gid, grid_rule::threads, source::reduce_partials}};
inline constexpr kernel_text gather_values_kernels[] = {{"actsparse_gather_values$SUFFIX", source::gather_values_params,
                                                         p::gid, grid_rule::threads, source::gather_values}};
inline constexpr kernel_text gated_gather_kernels[] = {
    {"actsparse_gated_gather_$ACT_$DT$SUFFIX", source::gated_gather_params, rows_positions, grid_rule::rows,
     source::gated_gather, "count", "(idx != nullptr ? idx[k] : k)"}};
inline constexpr kernel_text gated_hidden_kernels[] = {{"actsparse_gated_hidden_$ACT$SUFFIX",
                                                        source::gated_hidden_params, p::gid, grid_rule::threads,
                                                        source::gated_hidden}};
inline constexpr kernel_text batched_kernels[] = {{"actsparse_batched_gemv_$DT$SUFFIX_b$PASS",
                                                   source::batched_gemv_params, rows_positions, grid_rule::rows,
                                                   source::batched_gemv}};
inline constexpr kernel_text mass_kernels[] = {{"actsparse_cumulative_mass$SUFFIX", source::cumulative_mass_params,
                                                p::tid | p::lane | p::warp, grid_rule::single,
                                                source::cumulative_mass}};

inline constexpr kernel_text moe_route_kernels[] = {
    {"actsparse_moe_count$SUFFIX", source::moe_count_params, rows_positions, grid_rule::rows, source::moe_count},
    {"actsparse_moe_scatter$SUFFIX", source::moe_scatter_params, rows_positions, grid_rule::rows, source::moe_scatter}};
inline constexpr kernel_text moe_pad_kernels[] = {
    {"actsparse_moe_pad$SUFFIX", source::moe_pad_params, rows_positions, grid_rule::rows, source::moe_pad}};
inline constexpr kernel_text moe_gated_kernels[] = {{"actsparse_moe_gated_$ACT_$DT$SUFFIX", source::moe_gated_params,
                                                     p::lane | p::warp | p::grid_2d, grid_rule::rows, source::moe_gated,
                                                     "d_ff", "k"}};
inline constexpr kernel_text moe_down_kernels[] = {{"actsparse_moe_down_$DT$SUFFIX", source::moe_down_params,
                                                    p::tid | p::grid_2d, grid_rule::elements, source::moe_down}};
inline constexpr kernel_text moe_combine_kernels[] = {{"actsparse_moe_combine$SUFFIX", source::moe_combine_params,
                                                       p::tid | p::grid_2d, grid_rule::threads, source::moe_combine}};

inline constexpr std::string_view per_token = "one $BLOCK per token";
inline constexpr std::string_view per_expert = "one $WARP per expert";
inline constexpr std::string_view one_block = "one $BLOCK";
inline constexpr std::string_view elementwise = "elementwise";
inline constexpr std::string_view owns_columns = "each thread owns columns and loops over the kept rows";

}  // namespace detail

// One entry per op, in the order of kernel_op.
inline constexpr op_entry ops[] = {
    {kernel_op::gemv, "gemv", detail::gemv_kernels},
    {kernel_op::gather_gemv, "gather_gemv", detail::gather_kernels},
    {kernel_op::row_axpy, "row_axpy", detail::axpy_kernels, false, detail::owns_columns},
    {kernel_op::gate_select, "gate_select", detail::gate_kernels, false, {}, true},
    {kernel_op::token_gather, "token_gather", detail::token_gather_kernels, true, detail::per_token},
    {kernel_op::token_scatter_add, "token_scatter_add", detail::token_scatter_kernels, true, detail::per_token},
    {kernel_op::top_k, "top_k", detail::top_k_kernels, true, detail::one_block, false, false, true, false,
     source::top_k_helpers},
    {kernel_op::row_axpy_split, "row_axpy_split", detail::split_kernels, false, detail::owns_columns},
    {kernel_op::gather_values, "gather_values", detail::gather_values_kernels, true, detail::elementwise},
    {kernel_op::gated_gather, "gated_gather", detail::gated_gather_kernels, false, {}, true},
    {kernel_op::gated_hidden, "gated_hidden", detail::gated_hidden_kernels, true, detail::elementwise, true},
    {kernel_op::batched_gemv, "batched_gemv", detail::batched_kernels, false, {}, false, true},
    {kernel_op::cumulative_mass, "cumulative_mass", detail::mass_kernels, true, detail::one_block, false, false, true,
     true},
    {.op = kernel_op::moe_route,
     .name = "moe_route",
     .kernels = detail::moe_route_kernels,
     .reads_f32 = true,
     .one_row = detail::per_expert,
     .helpers = source::moe_segment},
    {.op = kernel_op::moe_pad,
     .name = "moe_pad",
     .kernels = detail::moe_pad_kernels,
     .reads_f32 = true,
     .one_row = detail::per_expert},
    {.op = kernel_op::moe_gated,
     .name = "moe_gated",
     .kernels = detail::moe_gated_kernels,
     .uses_act = true,
     .helpers = source::moe_segment},
    {.op = kernel_op::moe_down,
     .name = "moe_down",
     .kernels = detail::moe_down_kernels,
     .one_row = detail::owns_columns,
     .helpers = source::moe_segment},
    {.op = kernel_op::moe_combine,
     .name = "moe_combine",
     .kernels = detail::moe_combine_kernels,
     .reads_f32 = true,
     .one_row = detail::elementwise},
};

// The entry of op; nullptr for a value outside the enum.
[[nodiscard]] constexpr const op_entry* find(kernel_op op) noexcept {
  for (const op_entry& e : ops) {
    if (e.op == op) return &e;
  }
  return nullptr;
}

[[nodiscard]] constexpr std::string_view name(kernel_op op) noexcept {
  const op_entry* e = find(op);
  return e != nullptr ? e->name : "?";
}

// Every op a generator can know.
inline constexpr std::uint32_t all_ops = [] {
  std::uint32_t bits = 0;
  for (const op_entry& e : ops) bits |= op_bit(e.op);
  return bits;
}();

}  // namespace actsparse::gpu
