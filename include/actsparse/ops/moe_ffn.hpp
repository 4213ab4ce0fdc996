#pragma once
// A mixture-of-experts FFN layer:
//   router logits → per-token expert count → routing table (tokens grouped by expert)
//   → each routed expert's gated FFN on its tokens → weighted combine in a fixed order
//   (+ a shared expert every token runs).
// The routing policy is moe_routing (ops/moe_router.hpp); the experts are stacked views as
// engines hold them (moe_experts, core/op_args.hpp); the backend runs moe_ffn_args. With an
// Inner op (a neuron_sparse_ffn) every (token, expert) pair runs that op instead, so neuron
// sparsity inside the experts composes with the expert choice.
//
// Bits: every token's output is the fma chain over its experts in increasing expert index (then
// the shared expert), each expert's output the backend's own dense gated FFN of that token:
// the same for any thread count and any grouping of tokens, and equal to a per-token loop over
// the same experts (dense_ffn per pair, then the backend's row axpy over the pair outputs).

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/routing.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/ops/moe_router.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>
#include <actsparse/ops/run.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

namespace actsparse {

// The weight bytes one call read: each routed expert that ran once (the dense path reads an
// expert's three matrices once for all its tokens), the shared expert, or per pair what the
// inner op read.
struct moe_reads {
  std::size_t experts_run = 0;  // distinct routed experts with at least one token
  std::size_t pairs = 0;        // (token, expert) pairs
  std::size_t weight_bytes = 0;
};

// Buffers a moe_ffn reuses from call to call.
struct moe_scratch {
  routing_table table;
  moe_route_scratch route;
  std::vector<float> pair_out;  // the inner path: one token's expert outputs
  std::vector<float> coef;
  selection kept;  // the inner path: the last pair's kept neurons
  ffn_scratch inner;
  moe_reads reads;
  std::vector<std::byte> workspace;
};

// The dense experts (no inner op): the backend's moe_ffn_args path.
struct dense_experts {};

// Bytes of one matrix (rows x row bytes: what reading it whole costs).
[[nodiscard]] inline std::size_t matrix_bytes(const weight_view& w) noexcept {
  return w.absent() ? 0 : w.rows * row_bytes(w.type, w.cols);
}
// Bytes of one gated FFN read whole (down_t when given, else down).
[[nodiscard]] inline std::size_t ffn_bytes(const ffn_layer& f) noexcept {
  return matrix_bytes(f.gate) + matrix_bytes(f.up) +
         (f.down_t.absent() ? matrix_bytes(f.down) : matrix_bytes(f.down_t));
}

// logits[t, :] = W_router · input[t, :] for every token (W_router [n_experts x d_model]).
template <class Backend>
status router_logits(const Backend& backend, const weight_view& w_router, matrix_view<const float> input,
                     matrix_view<float> logits, std::vector<std::byte>& workspace,
                     typename Backend::executor_type& ex) {
  detail::require(logits.rows == input.rows, "router_logits", "logits.rows", logits.rows, "input.rows");
  for (std::size_t t = 0; t < input.rows; ++t) {
    const status st = run(backend,
                          gemv_args{w_router, std::span<const float>(input.row(t), input.cols),
                                    std::span<float>(logits.row(t), logits.cols), subset::everything()},
                          workspace, ex);
    if (!st) return st;
  }
  return status::ok();
}

template <class Backend, class Inner = dense_experts>
struct moe_ffn {
  ACTSPARSE_REQUIRE_BACKEND_FOR(Backend, transposed_linear_args);
  ACTSPARSE_REQUIRE_BACKEND_FOR(Backend, gated_ffn_args);

  moe_routing routing{};
  Backend backend{};
  Inner inner{};

  // output[t] = Σ_{e chosen for t} w_{t,e}·FFN_e(input[t]) (+ FFN_shared(input[t])) for layer
  // `layer` (it picks the per-layer k). logits [tokens x n_experts]; token_scores: what the
  // prefill budget ranks blocks by (optional). s.table holds the routing, s.reads what was read.
  status operator()(std::size_t layer, const moe_experts& experts, matrix_view<const float> logits,
                    matrix_view<const float> input, matrix_view<float> output, moe_scratch& s,
                    typename Backend::executor_type& ex, const ffn_layer& shared = {},
                    std::span<const float> token_scores = {}) const {
    constexpr std::string_view where = "moe_ffn";
    detail::require(logits.rows == input.rows, where, "logits.rows", logits.rows, "input.rows, one row per token");
    detail::require(logits.cols == experts.count(), where, "logits.cols", logits.cols,
                    "experts.count(), one logit per expert");
    route(routing, layer, logits, s.table, s.route, token_scores);
    const routing_table& t = s.table;
    s.reads = {t.active_experts(), t.pairs(), 0};
    if constexpr (std::is_same_v<Inner, dense_experts>) {
      for (std::size_t e = 0; e < t.experts(); ++e) {
        if (t.tokens_of(e) > 0) s.reads.weight_bytes += ffn_bytes(experts.expert(e));
      }
      if (!shared.gate.absent()) s.reads.weight_bytes += ffn_bytes(shared);
      return run(backend, moe_ffn_args{experts, t.view(), input, output, shared}, s.workspace, ex);
    } else {
      return per_pair(layer, experts, input, output, s, ex, shared);
    }
  }

 private:
  // Every (token, expert) pair through the inner op, then each token's combine as the
  // backend's row axpy over its pair outputs (the order of the dense path).
  status per_pair(std::size_t layer, const moe_experts& experts, matrix_view<const float> input,
                  matrix_view<float> output, moe_scratch& s, typename Backend::executor_type& ex,
                  const ffn_layer& shared) const {
    const routing_table& t = s.table;
    const std::size_t d_model = experts.d_model();
    const bool has_shared = !shared.gate.absent();
    for (std::size_t tok = 0; tok < t.tokens(); ++tok) {
      const std::uint32_t b = t.token_offsets()[tok];
      const std::uint32_t e = t.token_offsets()[tok + 1];
      const std::size_t rows = e - b + (has_shared ? 1 : 0);
      s.pair_out.resize(rows * d_model);
      s.coef.resize(rows);
      const std::span<const float> x(input.row(tok), input.cols);
      for (std::uint32_t p = b; p < e; ++p) {
        const ffn_layer f = experts.expert(t.pair_expert()[p]);
        const std::span<float> y(s.pair_out.data() + (p - b) * d_model, d_model);
        const status st = inner(layer, f, x, y, s.kept, s.inner, ex);
        if (!st) return st;
        const ffn_reads& r = s.inner.reads;
        // A kept neuron's W_down column costs what its W_downᵀ row does.
        const std::size_t down_row =
            f.down_t.absent() ? matrix_bytes(f.down) / f.d_ff() : row_bytes(f.down_t.type, f.down_t.cols);
        s.reads.weight_bytes += r.gate_rows * row_bytes(f.gate.type, f.gate.cols) +
                                r.up_rows * row_bytes(f.up.type, f.up.cols) + r.down_rows * down_row +
                                r.predictor_bytes;
        s.coef[p - b] = t.pair_weight()[p];
      }
      if (has_shared) {
        const std::span<float> y(s.pair_out.data() + (rows - 1) * d_model, d_model);
        const status st = run(backend, gated_ffn_args{shared, x, y, subset::everything()}, s.inner.workspace, ex);
        if (!st) return st;
        s.reads.weight_bytes += ffn_bytes(shared);
        s.coef[rows - 1] = 1.0F;
      }
      const std::span<float> out(output.row(tok), output.cols);
      if (rows == 0) {
        for (float& v : out) v = 0.0F;
        continue;
      }
      const weight_view outs(s.pair_out.data(), dtype::f32, rows, d_model, d_model * sizeof(float));
      const status st = run(backend, transposed_linear_args{outs, s.coef, out, subset::everything()}, s.workspace, ex);
      if (!st) return st;
    }
    return status::ok();
  }
};

}  // namespace actsparse
