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
//                k < count; with gate_act given, no gate row is read (gate may be null). Each dot product
//                takes gather_gemv's operations (lanes, order, butterfly), so h[k] == act(gather_gemv(gate)[k])
//                · gather_gemv(up)[k] bit for bit (gate_act[j] in place of the first factor when given),
//                which is also gated_hidden over the two gather_gemv outputs.  grid: ceil(count / (T/32·R)).
//   gated_hidden: actsparse_gated_hidden_<act>_t<T>(g, u, n, h)
//                h[i] = act(g[i]) · u[i] (f32).  grid: ceil(n / T).
//   batched_gemv: actsparse_batched_gemv_<dt>_t<T>[_r<R>]_b<B>(w, row_stride, x, x_stride, ntok, rows, cols, y,
//                y_stride)   (B = tokens_per_pass: several tokens per weight read, token-sparse prefill)
//                y[t·y_stride + k] = W[k,:]·x[t·x_stride + :] for t < ntok, k < rows (strides in floats).
//                Each warp holds R x B accumulators and loops over the tokens in groups of B; each
//                value takes gemv's operations for its token: gemv's bits.  grid: ceil(rows / (T/32·R)).
//                Registers grow with R·B: the block dtypes (q8_0, q4_0) take up to 128 at R·B = 8 and
//                254-255 at R 4 x B 8 (no spill); R 8 x B 8 spills for them (not a tested config).
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
#include <actsparse/backends/cuda/kernel_sources.hpp>
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

[[nodiscard]] constexpr bool is_token_op(kernel_op op) noexcept {
  return op == kernel_op::token_gather || op == kernel_op::token_scatter_add;
}

// Ops over f32 activations or scores, not weights.
[[nodiscard]] constexpr bool is_f32_op(kernel_op op) noexcept {
  return is_token_op(op) || op == kernel_op::top_k || op == kernel_op::gather_values || op == kernel_op::gated_hidden ||
         op == kernel_op::cumulative_mass;
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

// Replaces every "$KEY" in text by its value; the first key that matches wins, so a key that
// is a prefix of another (R, ROW) comes after it.
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
