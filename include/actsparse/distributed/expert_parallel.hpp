#pragma once
// Expert parallelism: one MoE layer's routed experts spread over P ranks, each rank owning a
// contiguous block of experts. Every rank routes its own tokens, and the layer runs in three
// local phases around two all-to-all exchanges that the engine does with its own
// communication layer (MPI_Alltoallv, NCCL send / recv, ...):
//   1  ep_dispatch (every source rank): the input row of each (token, expert) pair, grouped by
//      the rank that owns the expert, with the owner's local expert index per row
//      -- exchange 1: counts (one per peer), then rows and expert ids --
//   2  ep_compute (every owning rank): each received row through its expert's gated FFN, on
//      the backend's grouped MoE path (moe_ffn_args: each expert's weights read once for all
//      the rows it received)
//      -- exchange 2: the output rows back, the reverse of exchange 1 --
//   3  ep_combine (every source rank): each token's weighted sum of its returned rows, plus
//      the shared expert, exactly as moe_ffn combines them
// Bits: a source rank's output equals single-process moe_ffn over all experts for its tokens,
// bit for bit (with the backend's own caveats: the CPU backend on a target with a fused
// multiply-add, cpu::detail::fused_multiply_add()), for any placement, rank count and thread
// count: each pair output is the backend's own dense gated FFN of that token and expert
// whatever rows share its expert, and the combine is the same row axpy in the same order.
//
//   expert_placement   which rank owns which experts
//   owned_experts      a rank's experts as a moe_experts view over the stacked weights
//   ep_send            phase 1's output: per-rank counts and offsets, rows, expert ids
//   ep_recv            the owner's receive buffers, sized from the counts it received
//   exchange_bytes     the bytes a rank sends and receives in each exchange

#include <actsparse/core/check_args.hpp>
#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/routing.hpp>
#include <actsparse/core/views.hpp>
#include <actsparse/ops/run.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace actsparse {

// E experts over P ranks: rank r owns the contiguous block [first(r), first(r + 1)) with
// first(r) = floor(r·E / P), so block sizes differ by at most one. ranks > experts is allowed:
// some ranks then own no expert (they send and combine, and receive nothing).
struct expert_placement {
  std::size_t experts = 0;
  std::size_t ranks = 0;

  // experts >= 1 and ranks >= 1.
  void check(std::string_view where) const {
    detail::require(experts >= 1, where, "placement.experts", experts, "at least one expert");
    detail::require(ranks >= 1, where, "placement.ranks", ranks, "at least one rank");
  }
  // First expert of rank r, r <= ranks (first(ranks) = experts).
  [[nodiscard]] std::size_t first(std::size_t r) const {
    check("expert_placement::first");
    detail::require(r <= ranks, "expert_placement::first", "r", r, "a rank <= ranks = " + std::to_string(ranks));
    return r * experts / ranks;
  }
  // Experts rank r owns (0 when ranks > experts leaves it none).
  [[nodiscard]] std::size_t count(std::size_t r) const {
    detail::require(r < ranks, "expert_placement::count", "r", r, "a rank < ranks = " + std::to_string(ranks));
    return first(r + 1) - first(r);
  }
  // The rank owning expert e: the last r with first(r) <= e, i.e. floor(((e + 1)·P - 1) / E).
  [[nodiscard]] std::size_t owner(std::size_t e) const {
    check("expert_placement::owner");
    detail::require(e < experts, "expert_placement::owner", "e", e, "an expert < experts = " + std::to_string(experts));
    return ((e + 1) * ranks - 1) / experts;
  }
};

// Rank r's experts (global experts [first(r), first(r) + count(r))) as a moe_experts view over
// the same stacked weights: its local expert i is global expert first(r) + i. An engine that
// loads only its own experts builds this view over its own tensors instead. A rank with no
// expert gets count() = 0 (views left at expert 0; ep_compute runs nothing on it).
[[nodiscard]] inline moe_experts owned_experts(const moe_experts& all, const expert_placement& placement,
                                               std::size_t rank) {
  constexpr std::string_view where = "owned_experts";
  placement.check(where);
  detail::require(all.count() == placement.experts, where, "experts.count()", all.count(),
                  std::to_string(placement.experts) + " (placement.experts: the placement is of this layer's experts)");
  detail::require(rank < placement.ranks, where, "rank", rank,
                  "a rank < placement.ranks = " + std::to_string(placement.ranks));
  const std::size_t n = placement.count(rank);
  const std::size_t at = n == 0 ? 0 : placement.first(rank);
  const auto slice = [&](const stacked_view& s) {
    if (s.absent()) return stacked_view{};
    return stacked_view{s.expert(at), n, s.expert_stride};
  };
  return {all.act, slice(all.gate), slice(all.up), slice(all.down), slice(all.down_t)};
}

// Phase 1's output at a source rank, reused from call to call (it keeps its capacity). Slot q
// (row q of rows) is the pair routing.expert_pairs[q]: the pairs in the routing table's
// expert-major order (experts ascending, tokens ascending within an expert), which groups them
// by destination rank in rank order because every rank owns a contiguous block of experts.
struct ep_send {
  std::size_t d_model = 0;
  std::vector<std::size_t> counts;        // [ranks]: rows sent to rank r (MPI sendcounts, in rows)
  std::vector<std::size_t> offsets;       // [ranks + 1]: exclusive prefix of counts (sdispls), then the total
  std::vector<float> rows;                // [slots x d_model]: input row of each slot's token
  std::vector<std::uint32_t> expert_ids;  // [slots]: the owner's local expert index of each slot
  std::vector<std::uint32_t> slot_pairs;  // [slots]: the token-major pair id of each slot

  [[nodiscard]] std::size_t ranks() const noexcept { return counts.size(); }
  [[nodiscard]] std::size_t slots() const noexcept { return expert_ids.size(); }
  [[nodiscard]] matrix_view<const float> rows_view() const noexcept {
    return matrix_view<const float>::packed(rows.data(), slots(), d_model);
  }
  // The block for rank r: its rows (counts[r] x d_model floats) and their expert ids.
  [[nodiscard]] std::span<const float> rows_to(std::size_t r) const {
    detail::require(r < ranks(), "ep_send::rows_to", "r", r, "a rank < " + std::to_string(ranks()));
    return std::span<const float>(rows).subspan(offsets[r] * d_model, counts[r] * d_model);
  }
  [[nodiscard]] std::span<const std::uint32_t> ids_to(std::size_t r) const {
    detail::require(r < ranks(), "ep_send::ids_to", "r", r, "a rank < " + std::to_string(ranks()));
    return std::span<const std::uint32_t>(expert_ids).subspan(offsets[r], counts[r]);
  }
};

// Phase 1 at a source rank: fills `send` from its routing (check_routing's every rule: finite
// weights, experts < routing.experts, ...) and its input rows [tokens x d_model]. The placement
// is of routing.experts experts. O(tokens + experts + ranks + pairs·d_model).
inline void ep_dispatch(const expert_placement& placement, const routing_view& routing, matrix_view<const float> input,
                        ep_send& send) {
  constexpr std::string_view where = "ep_dispatch";
  placement.check(where);
  check_routing(routing, where);
  detail::require(placement.experts == routing.experts, where, "placement.experts", placement.experts,
                  std::to_string(routing.experts) + " (routing.experts: the placement is of this layer's experts)");
  validate(input, where, "input");
  detail::check_size(input.rows, routing.tokens, where, "input.rows", "routing.tokens, one input row per token");
  const std::size_t d = input.cols;
  const std::size_t pairs = routing.pairs();
  send.d_model = d;
  send.counts.assign(placement.ranks, 0);
  send.offsets.assign(placement.ranks + 1, 0);
  send.rows.resize(pairs * d);
  send.expert_ids.resize(pairs);
  send.slot_pairs.assign(routing.expert_pairs.begin(), routing.expert_pairs.end());
  for (std::size_t r = 0; r < placement.ranks; ++r) {
    const std::size_t e0 = placement.first(r);
    const std::size_t e1 = placement.first(r + 1);
    send.offsets[r] = routing.expert_offsets[e0];
    send.counts[r] = routing.expert_offsets[e1] - routing.expert_offsets[e0];
    for (std::size_t e = e0; e < e1; ++e) {
      for (std::uint32_t q = routing.expert_offsets[e]; q < routing.expert_offsets[e + 1]; ++q) {
        send.expert_ids[q] = static_cast<std::uint32_t>(e - e0);
      }
    }
  }
  send.offsets[placement.ranks] = pairs;
  for (std::size_t q = 0; q < pairs; ++q) {
    if (d > 0) std::memcpy(send.rows.data() + q * d, input.row(routing.expert_tokens[q]), d * sizeof(float));
  }
}

// An owning rank's receive buffers for exchange 1 and its outputs for exchange 2: counts[s]
// rows from source rank s, stored in source order at offsets[s] (MPI recvcounts / rdispls, in
// rows). Reused from call to call.
struct ep_recv {
  std::size_t d_model = 0;
  std::vector<std::size_t> counts;        // [ranks]
  std::vector<std::size_t> offsets;       // [ranks + 1]
  std::vector<float> rows;                // [n x d_model], received
  std::vector<std::uint32_t> expert_ids;  // [n], received
  std::vector<float> out;                 // [n x d_model], ep_compute's output, sent back

  // Sizes the buffers for the counts this rank received in the counts exchange.
  void resize(std::span<const std::size_t> received_counts, std::size_t width) {
    counts.assign(received_counts.begin(), received_counts.end());
    offsets.assign(counts.size() + 1, 0);
    for (std::size_t s = 0; s < counts.size(); ++s) offsets[s + 1] = offsets[s] + counts[s];
    d_model = width;
    rows.resize(offsets.back() * width);
    expert_ids.resize(offsets.back());
    out.resize(offsets.back() * width);
  }
  [[nodiscard]] std::size_t size() const noexcept { return expert_ids.size(); }
  [[nodiscard]] matrix_view<const float> rows_view() const noexcept {
    return matrix_view<const float>::packed(rows.data(), size(), d_model);
  }
  [[nodiscard]] matrix_view<float> out_view() noexcept {
    return matrix_view<float>::packed(out.data(), size(), d_model);
  }
};

// Buffers ep_compute and ep_combine reuse from call to call.
struct ep_scratch {
  routing_table table;  // ep_compute: one pair per received row
  std::vector<std::uint32_t> offsets;
  std::vector<float> ones;
  std::vector<std::uint32_t> slot_of;  // ep_combine: the send slot of each token-major pair
  std::vector<float> shared_out;       // ep_combine: [tokens x d_model], the shared expert's rows
  std::vector<float> pair_rows;        // ep_combine: one token's rows to combine
  std::vector<float> coef;
  std::vector<std::byte> workspace;
};

// Phase 2 at an owning rank: out[i] = FFN_{expert_ids[i]}(rows[i]) for the n received rows, the
// backend's own dense gated FFN of that row (local experts: this rank's owned_experts). It runs
// the backend's grouped MoE path (moe_ffn_args) with each row a token of one pair of weight
// 1.0: its output is fma(1, f, +0) = f, every bit of f but a -0 made +0, which no combine can
// tell apart (a combine chain starting at +0 never holds -0). Rows from every source, in any
// order; rows.cols = out.cols = d_model. A not_handled status is returned as it is.
template <class Backend>
status ep_compute(const Backend& backend, const moe_experts& local, matrix_view<const float> rows,
                  std::span<const std::uint32_t> expert_ids, matrix_view<float> out, ep_scratch& s,
                  typename Backend::executor_type& ex) {
  ACTSPARSE_REQUIRE_BACKEND_FOR(Backend, moe_ffn_args);
  constexpr std::string_view where = "ep_compute";
  const std::size_t n = rows.rows;
  detail::check_size(expert_ids.size(), n, where, "expert_ids.size()", "rows.rows, one local expert per received row");
  detail::check_size(out.rows, n, where, "out.rows", "rows.rows, one output row per received row");
  if (n == 0) return status::ok();
  detail::require(local.count() >= 1, where, "local.count()", local.count(),
                  "at least one expert: this rank received " + std::to_string(n) +
                      " rows, and a rank that owns no expert receives none (counts not matching the placement)");
  detail::check_size(rows.cols, local.d_model(), where, "rows.cols", "d_model = local.gate.first.cols");
  detail::check_size(out.cols, local.d_model(), where, "out.cols", "d_model = local.gate.first.cols");
  for (std::size_t i = 0; i < n; ++i) {
    if (expert_ids[i] >= local.count()) {
      detail::fail(where, detail::at_index("expert_ids", i), expert_ids[i],
                   "a local expert index < " + std::to_string(local.count()) +
                       " (the experts this rank owns; ep_dispatch sends the owner's local index)");
    }
  }
  s.offsets.resize(n + 1);
  for (std::size_t i = 0; i <= n; ++i) s.offsets[i] = static_cast<std::uint32_t>(i);
  s.ones.assign(n, 1.0F);
  s.table.assign(local.count(), s.offsets, expert_ids, s.ones);
  return run(backend, moe_ffn_args{local, s.table.view(), rows, out, {}}, s.workspace, ex);
}

// Phase 3 at a source rank: output[t] for every token t of `routing` (the view ep_dispatch
// sent), from `returned` [pairs x d_model], the rows of exchange 2 in send order (slot q =
// pair routing.expert_pairs[q]; it may be ep_send::rows itself once exchange 1 is done). Per
// token, in token order: its pairs' rows in token-major order (experts ascending) with their
// weights, then the shared expert's output (FFN_shared(input[t]), the backend's grouped path)
// with coefficient 1 when given, combined by the backend's row axpy (transposed_linear_args) as
// moe_ffn's per-pair path does; a token with no pair and no shared expert gets zeros. input:
// the tokens' input rows [tokens x d_model] (the shared expert's input).
template <class Backend>
status ep_combine(const Backend& backend, const routing_view& routing, matrix_view<const float> input,
                  matrix_view<const float> returned, matrix_view<float> output, ep_scratch& s,
                  typename Backend::executor_type& ex, const ffn_layer& shared = {}) {
  ACTSPARSE_REQUIRE_BACKEND_FOR(Backend, moe_ffn_args);
  ACTSPARSE_REQUIRE_BACKEND_FOR(Backend, transposed_linear_args);
  constexpr std::string_view where = "ep_combine";
  check_routing(routing, where);
  const std::size_t tokens = routing.tokens;
  const std::size_t pairs = routing.pairs();
  const std::size_t d = output.cols;
  validate(input, where, "input");
  validate(returned, where, "returned");
  validate(output, where, "output");
  detail::check_size(output.rows, tokens, where, "output.rows", "routing.tokens, one output row per token");
  detail::check_size(input.rows, tokens, where, "input.rows", "routing.tokens, one input row per token");
  detail::check_size(input.cols, d, where, "input.cols", "output.cols = d_model");
  detail::check_size(returned.rows, pairs, where, "returned.rows", "routing.pairs(), one returned row per send slot");
  if (pairs > 0) detail::check_size(returned.cols, d, where, "returned.cols", "output.cols = d_model");
  const bool has_shared = !shared.gate.absent();
  if (has_shared && tokens > 0) {
    // The shared expert alone on the grouped path (no routed pair: the one-expert stack is never
    // read), as single-process moe_ffn runs it.
    check_ffn_layer(shared, where);
    detail::check_size(shared.d_model(), d, where, "shared.gate.cols", "output.cols = d_model");
    const auto one = [](const weight_view& w) { return w.absent() ? stacked_view{} : stacked_view{w, 1, 0}; };
    const moe_experts none{shared.act, one(shared.gate), one(shared.up), one(shared.down), one(shared.down_t)};
    s.offsets.assign(tokens + 1, 0);
    s.table.assign(1, s.offsets, {}, {});
    s.shared_out.resize(tokens * d);
    const status st = run(
        backend,
        moe_ffn_args{none, s.table.view(), input, matrix_view<float>::packed(s.shared_out.data(), tokens, d), shared},
        s.workspace, ex);
    if (!st) return st;
  }
  s.slot_of.resize(pairs);
  for (std::size_t q = 0; q < pairs; ++q) s.slot_of[routing.expert_pairs[q]] = static_cast<std::uint32_t>(q);
  for (std::size_t t = 0; t < tokens; ++t) {
    const std::uint32_t b = routing.token_offsets[t];
    const std::uint32_t e = routing.token_offsets[t + 1];
    const std::size_t n = e - b + (has_shared ? 1 : 0);
    const std::span<float> y(output.row(t), d);
    if (n == 0) {
      std::fill(y.begin(), y.end(), 0.0F);
      continue;
    }
    s.pair_rows.resize(n * d);
    s.coef.resize(n);
    for (std::uint32_t p = b; p < e; ++p) {
      std::memcpy(s.pair_rows.data() + (p - b) * d, returned.row(s.slot_of[p]), d * sizeof(float));
      s.coef[p - b] = routing.pair_weight[p];
    }
    if (has_shared) {
      std::memcpy(s.pair_rows.data() + (n - 1) * d, s.shared_out.data() + t * d, d * sizeof(float));
      s.coef[n - 1] = 1.0F;
    }
    const weight_view rows(s.pair_rows.data(), dtype::f32, n, d, d * sizeof(float));
    const status st = run(backend, transposed_linear_args{rows, s.coef, y, subset::everything()}, s.workspace, ex);
    if (!st) return st;
  }
  return status::ok();
}

// The bytes of one exchange as one rank sees it: to and from the other ranks, and its block to
// itself (a local copy: no link traffic, but an all_to_all_v moves it).
struct ep_exchange_bytes {
  std::size_t sent = 0;
  std::size_t received = 0;
  std::size_t local = 0;
};

// Both exchanges: dispatch = one count per peer (ep_count_bytes) + per row d_model f32 values
// and a 4-byte expert id; combine = per row d_model f32 values back.
struct ep_bytes {
  ep_exchange_bytes dispatch;
  ep_exchange_bytes combine;
};

inline constexpr std::size_t ep_count_bytes = sizeof(std::uint64_t);

// A rank's bytes from the rows it sends (ep_send::counts) and receives (ep_recv::counts) per
// rank; both have one entry per rank.
[[nodiscard]] inline ep_bytes exchange_bytes(std::span<const std::size_t> send_counts,
                                             std::span<const std::size_t> recv_counts, std::size_t rank,
                                             std::size_t d_model) {
  constexpr std::string_view where = "exchange_bytes";
  detail::require(!send_counts.empty(), where, "send_counts.size()", send_counts.size(), "one count per rank (>= 1)");
  detail::check_size(recv_counts.size(), send_counts.size(), where, "recv_counts.size()",
                     "send_counts.size(), one count per rank");
  detail::require(rank < send_counts.size(), where, "rank", rank,
                  "a rank < " + std::to_string(send_counts.size()) + " (the rank count)");
  const std::size_t row = d_model * sizeof(float);
  const std::size_t id = sizeof(std::uint32_t);
  ep_bytes b;
  for (std::size_t r = 0; r < send_counts.size(); ++r) {
    if (r == rank) {
      b.dispatch.local = ep_count_bytes + send_counts[r] * (row + id);
      b.combine.local = send_counts[r] * row;
      continue;
    }
    b.dispatch.sent += ep_count_bytes + send_counts[r] * (row + id);
    b.dispatch.received += ep_count_bytes + recv_counts[r] * (row + id);
    b.combine.sent += recv_counts[r] * row;
    b.combine.received += send_counts[r] * row;
  }
  return b;
}

}  // namespace actsparse
