#pragma once
// The neuron-sparse FFN under tensor parallelism. Rank r holds the neurons [begin, begin + size)
// of d_ff: those rows of W_gate and W_up, those columns of W_down (or rows of W_downᵀ). Its
// part of the FFN is an ordinary neuron_sparse_ffn on that slice whose selector is
// sharded_selector: the scores are the slice's, the selection the global one (the rounds of
// distributed/sharded_selection.hpp, through the engine's all-gather), so every rank keeps
// exactly its part of the set the whole layer would keep. Each rank writes its partial y; the
// engine sums the partials over the ranks (an all-reduce, or sum_in_rank_order over an
// all-gather, which fixes the order and so the bits for a given shard count).
//
//   sharded_selection state;                                  // per rank, reused
//   auto gather = [&](std::span<const std::byte> mine, std::span<std::byte> all) {
//     MPI_Allgather(mine.data(), int(mine.size()), MPI_BYTE, all.data(), int(mine.size()), MPI_BYTE, comm);
//   };
//   neuron_sparse_ffn op{magnitude{}, sharded_selector{top_k::by_ratio(0.2), shard, &gather, &state},
//                        score_source::gate_activation, cpu_backend{}};
//   op(layer_slice, x, partial_y, kept, scratch, ex);          // kept: local neuron indices

#include <actsparse/core/dtype.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/distributed/sharded_selection.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace actsparse {

// A selector (the selector concept) that selects globally from a slice's scores: Policy is
// top_k or cumulative_mass, run over the whole universe with `gather` (a callable
// gather(std::span<const std::byte> mine, std::span<std::byte> all), every rank's bytes in rank
// order) and `state` (the rank's rounds, reused). Both pointers must outlive the calls; one
// selector per rank and thread. Every rank must call select for the same layer and token.
template <class Policy, class AllGather>
struct sharded_selector {
  Policy policy;
  neuron_shard shard;
  AllGather* gather = nullptr;
  sharded_selection* state = nullptr;

  void select(std::span<const float> scores, selection& out) const {
    constexpr std::string_view where = "sharded_selector";
    detail::require(gather != nullptr && state != nullptr, where, "gather / state", "null",
                    "the rank's all-gather and sharded_selection");
    select_sharded(policy, scores, shard, *gather, *state, out);
  }
};

namespace detail {

inline std::size_t value_bytes(const weight_view& w, std::size_t values, std::string_view where,
                               std::string_view argument) {
  const dtype_info t = info(w.type);
  if (values % t.block_values != 0) {
    fail(where, argument, values,
         "a multiple of " + std::to_string(t.block_values) + " (" + std::string(t.name) + " blocks are not split)");
  }
  return values / t.block_values * t.block_bytes;
}

}  // namespace detail

// Rows [begin, begin + count) of w (a view of the same bytes).
[[nodiscard]] inline weight_view rows_of(const weight_view& w, std::size_t begin, std::size_t count) {
  detail::require(begin <= w.rows && count <= w.rows - begin, "rows_of", "rows",
                  "[" + std::to_string(begin) + ", " + std::to_string(begin + count) + ")",
                  "rows of [0, " + std::to_string(w.rows) + ")");
  return {static_cast<const std::byte*>(w.data) + begin * w.row_stride, w.type, count, w.cols, w.row_stride};
}

// Columns [begin, begin + count) of w (a view of the same bytes with w's row stride); for the
// block types begin and count are multiples of the block (32 values).
[[nodiscard]] inline weight_view columns_of(const weight_view& w, std::size_t begin, std::size_t count) {
  detail::require(begin <= w.cols && count <= w.cols - begin, "columns_of", "columns",
                  "[" + std::to_string(begin) + ", " + std::to_string(begin + count) + ")",
                  "columns of [0, " + std::to_string(w.cols) + ")");
  const std::size_t offset = detail::value_bytes(w, begin, "columns_of", "begin");
  (void)detail::value_bytes(w, count, "columns_of", "count");
  return {static_cast<const std::byte*>(w.data) + offset, w.type, w.rows, count, w.row_stride};
}

// The slice of a whole layer that rank `shard` holds: gate and up rows, down columns (down_t
// rows) of its neurons. An engine that loads only its slice builds the same views over its
// own buffers.
[[nodiscard]] inline ffn_layer shard_of(const ffn_layer& whole, const neuron_shard& shard) {
  detail::require(shard.total == whole.d_ff(), "shard_of", "shard.total", shard.total,
                  "d_ff = " + std::to_string(whole.d_ff()));
  ffn_layer s;
  s.act = whole.act;
  s.gate = rows_of(whole.gate, shard.begin, shard.size);
  s.up = rows_of(whole.up, shard.begin, shard.size);
  if (!whole.down.absent()) s.down = columns_of(whole.down, shard.begin, shard.size);
  if (!whole.down_t.absent()) s.down_t = rows_of(whole.down_t, shard.begin, shard.size);
  return s;
}

// y = ((p_0 + p_1) + p_2) + ... over the ranks' partial outputs `all` (ranks × y.size(), rank
// order, as an all-gather leaves them): the order is fixed, so the bits depend only on the
// partials and the shard count.
inline void sum_in_rank_order(std::span<const float> all, std::size_t ranks, std::span<float> y) {
  constexpr std::string_view where = "sum_in_rank_order";
  detail::require(ranks >= 1, where, "ranks", ranks, "at least 1");
  detail::require(all.size() == ranks * y.size(), where, "all.size()", all.size(),
                  std::to_string(ranks * y.size()) + " (ranks x y.size())");
  const std::size_t d = y.size();
  for (std::size_t c = 0; c < d; ++c) y[c] = all[c];
  for (std::size_t r = 1; r < ranks; ++r) {
    for (std::size_t c = 0; c < d; ++c) y[c] += all[r * d + c];
  }
}

}  // namespace actsparse
