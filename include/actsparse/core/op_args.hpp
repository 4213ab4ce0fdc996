#pragma once
// The arguments of every operation a backend can run. They are plain data (views and
// spans over the caller's memory), shared by ops/ and backends/ so neither includes
// the other. Every index list is sorted and unique.
//
// Lifetimes: an argument struct owns nothing. Every view and span in it points at memory
// that must outlive the call it is passed to (run, can_implement, workspace_size); the spans
// are borrowed_span, so building one from a temporary container does not compile. Keep the
// weights (and a copy such as cpu::transpose's result) alive as long as any view of them.

#include <actsparse/core/activation.hpp>
#include <actsparse/core/borrowed_span.hpp>
#include <actsparse/core/row_format.hpp>
#include <actsparse/core/views.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

namespace actsparse {

// Either every index, or a sorted unique list of them. Build it with everything() or only():
// `all` comes first so that `subset{indices}` does not compile (it would silently mean "all").
struct subset {
  bool all = true;
  borrowed_span<const std::uint32_t> indices{};

  static constexpr subset everything() noexcept { return {}; }
  static constexpr subset only(borrowed_span<const std::uint32_t> sorted_unique) noexcept {
    return {false, sorted_unique};
  }
  [[nodiscard]] constexpr std::size_t count(std::size_t n) const noexcept { return all ? n : indices.size(); }
};

// The weights of one gated FFN layer: y = W_down · (act(W_gate x) ⊙ (W_up x)). The down
// projection is given as W_down [d_model × d_ff], as W_downᵀ [d_ff × d_model] (down_t: one
// contiguous row per neuron, what a neuron-sparse kernel reads; build it once at load time,
// e.g. with cpu::transpose), or both; at least one. Leave the other default (absent).
struct ffn_layer {
  activation act = activation::silu;
  weight_view gate;      // [d_ff × d_model]
  weight_view up;        // [d_ff × d_model]
  weight_view down;      // [d_model × d_ff], or absent when down_t is given
  weight_view down_t{};  // optional W_downᵀ [d_ff × d_model]

  [[nodiscard]] constexpr std::size_t d_model() const noexcept { return gate.cols; }
  [[nodiscard]] constexpr std::size_t d_ff() const noexcept { return gate.rows; }
};

// The weight of one linear layer y = W·x, as W [out × in], as Wt = Wᵀ [in × out] (what an
// input-sparse kernel reads fastest: a skipped input is a skipped row; cpu::transpose builds it
// once at load time), or both; at least one.
struct linear_layer {
  weight_view w;     // [out × in], or absent when wt is given
  weight_view wt{};  // optional Wᵀ [in × out]

  [[nodiscard]] constexpr std::size_t inputs() const noexcept { return w.absent() ? wt.rows : w.cols; }
  [[nodiscard]] constexpr std::size_t outputs() const noexcept { return w.absent() ? wt.cols : w.rows; }
};

// y = W[rows, :] · x. With rows = everything, y has W.rows entries (dense GEMV); otherwise
// y[i] = W[rows[i], :] · x (row gather, output-sparse).
struct gemv_args {
  weight_view w;
  borrowed_span<const float> x;  // W.cols
  borrowed_span<float> y;        // rows.count(W.rows)
  subset rows;
};

// y = Σ_{j ∈ inputs} W[:, j] · x_j (input-sparse linear: skipped inputs are treated as 0).
struct linear_args {
  weight_view w;                 // [out × in]
  borrowed_span<const float> x;  // in
  borrowed_span<float> y;        // out, overwritten
  subset inputs;
};

// The same input-sparse linear over a transposed weight Wt = Wᵀ [in × out] (TEAL's layout:
// every input channel is one contiguous row, so a skipped channel is a skipped row):
// y = Σ_{j ∈ inputs} x_j · Wt[j, :]. Build Wt once at load time (cpu::transpose).
struct transposed_linear_args {
  weight_view wt;                // [in × out]
  borrowed_span<const float> x;  // in
  borrowed_span<float> y;        // out, overwritten
  subset inputs;
};

// Gated FFN over the kept neurons only: y = Σ_{j ∈ neurons} W_down[:, j]·act(g_j)·u_j.
// `gate_act`, when not empty, holds act(W_gate x) for all d_ff neurons already computed
// (the decode path computes the gate once, scores it, then runs the rest). The
// neuron-sparse path of a backend may need weights.down_t (its can_implement says so).
struct gated_ffn_args {
  ffn_layer weights;
  borrowed_span<const float> x;  // d_model
  borrowed_span<float> y;        // d_model, overwritten
  subset neurons;
  borrowed_span<const float> gate_act{};  // optional, d_ff
};

// Y[t] = W · X[t] for every row t of X: the dense GEMV of a few tokens at once (a decode
// batch, the gate of a speculative verify pass), each weight row read once for all of them.
// Each Y[t] is what gemv_args gives for that token (the CPU backend: bit for bit).
struct batched_gemv_args {
  weight_view w;               // [rows × cols]
  matrix_view<const float> x;  // [tokens × cols]
  matrix_view<float> y;        // [tokens × rows], overwritten
};

// Token FFN: residual[t] += FFN(input[t]) for t in tokens; the other rows of residual are left
// as they are. Token-sparse prefill keeps every neuron; a decode batch or a speculative verify
// pass passes in `neurons` the union of its tokens' selections, so every kept token's update is
// the neuron-sparse FFN over that union (each weight row of the union read once for all
// tokens), and in `gate_act` the gate it already computed to select them.
struct token_ffn_args {
  ffn_layer weights;
  matrix_view<const float> input;  // [tokens × d_model], the FFN input (normalised)
  matrix_view<float> residual;     // [tokens × d_model], updated in place
  subset tokens;
  subset neurons = subset::everything();  // sorted, unique (the union)
  matrix_view<const float> gate_act{};    // optional [tokens × d_ff]: act(W_gate·input[t])
};

// ---- Mixture of experts ------------------------------------------------------------------

// One projection of every expert, stored stacked the way engines hold it (llama.cpp's
// ffn_gate_exps / ffn_up_exps / ffn_down_exps, a [n_expert] x [rows x cols] tensor): expert
// e's matrix is `first` moved by e * expert_stride bytes (ggml's nb2).
struct stacked_view {
  weight_view first;              // expert 0's matrix
  std::size_t count = 0;          // experts
  std::size_t expert_stride = 0;  // bytes between the starts of consecutive experts

  [[nodiscard]] weight_view expert(std::size_t e) const noexcept {
    weight_view w = first;
    w.data = static_cast<const std::byte*>(first.data) + e * expert_stride;
    return w;
  }
  [[nodiscard]] constexpr bool absent() const noexcept { return first.absent() && count == 0; }
};

// The routed experts of one MoE layer: n_expert gated FFNs of one shape, each projection one
// stacked view. Expert e is the ffn_layer expert(e): gate and up [d_ff x d_model], down
// [d_model x d_ff] and / or down_t [d_ff x d_model] (at least one, as in ffn_layer).
struct moe_experts {
  activation act = activation::silu;
  stacked_view gate;
  stacked_view up;
  stacked_view down;
  stacked_view down_t{};

  [[nodiscard]] constexpr std::size_t count() const noexcept { return gate.count; }
  [[nodiscard]] constexpr std::size_t d_model() const noexcept { return gate.first.cols; }
  [[nodiscard]] constexpr std::size_t d_ff() const noexcept { return gate.first.rows; }
  [[nodiscard]] ffn_layer expert(std::size_t e) const noexcept {
    return {act, gate.expert(e), up.expert(e), down.absent() ? weight_view{} : down.expert(e),
            down_t.absent() ? weight_view{} : down_t.expert(e)};
  }
};

// The (token, expert, weight) pairs of one MoE call, both ways round (core/routing.hpp builds
// them; routing_table::view() gives this view):
//   token-major: the pairs of token t are p in [token_offsets[t], token_offsets[t+1]), their
//                experts pair_expert[p] strictly increasing, weights pair_weight[p]. This is
//                the combine order.
//   expert-major: the pairs of expert e are expert_pairs[q] for q in [expert_offsets[e],
//                expert_offsets[e+1]), in increasing token order; expert_tokens[q] is the
//                token of pair expert_pairs[q].
struct routing_view {
  std::size_t tokens = 0;
  std::size_t experts = 0;
  borrowed_span<const std::uint32_t> token_offsets{};   // tokens + 1
  borrowed_span<const std::uint32_t> pair_expert{};     // pairs
  borrowed_span<const float> pair_weight{};             // pairs
  borrowed_span<const std::uint32_t> expert_offsets{};  // experts + 1
  borrowed_span<const std::uint32_t> expert_pairs{};    // pairs
  borrowed_span<const std::uint32_t> expert_tokens{};   // pairs

  [[nodiscard]] constexpr std::size_t pairs() const noexcept { return pair_expert.size(); }
};

// An MoE layer over n tokens: for every token t,
//   y_t = Σ_{p of t, in token-major order} w_p · FFN_{e_p}(x_t)   (+ FFN_shared(x_t))
// computed per output value as the fma chain acc = fma(w_p, f_p, acc) from +0 over the pairs
// in order, then acc + s for the shared expert. f_p = FFN_{e_p}(x_t) is the backend's own
// dense gated FFN of that expert on that token (the bits of its gated_ffn_args path), so the
// result does not depend on how tokens are grouped or on the thread count, and it equals a
// per-token loop over the same experts bit for bit.
struct moe_ffn_args {
  moe_experts experts;
  routing_view routing;
  matrix_view<const float> input;  // [tokens x d_model]
  matrix_view<float> output;       // [tokens x d_model], overwritten
  ffn_layer shared{};              // optional: a shared expert every token runs (weight 1), absent: none
};

// Decode attention of one query over a KV cache whose rows may sit in different formats (a
// tiered store's rows in place: tiered_store::view). Position p's K row k_rows[p] and V row
// v_rows[p] hold n_kv_heads × head_dim values; query head h reads KV head g = h / (n_heads /
// n_kv_heads) (grouped-query attention; n_kv_heads == n_heads is multi-head). For every head:
//   s_p = scale · (q_h · K_p[g]),  o_h = Σ_p softmax(s)_p · V_p[g]
// over the present positions: a position whose K or V row is absent (data == nullptr) is
// skipped (the caller's mask). No present position: o_h = 0. position_mass, when given,
// receives Σ_h softmax(s)_p per position (0 for absent ones): what a heavy-hitter policy adds
// to tiered_store::add_importance.
struct attention_args {
  borrowed_span<const float> q;  // [n_heads × head_dim]
  borrowed_span<const row_ref> k_rows;
  borrowed_span<const row_ref> v_rows;
  std::size_t n_heads = 0;
  std::size_t n_kv_heads = 0;
  std::size_t head_dim = 0;
  float scale = 0.0F;                    // usually 1 / sqrt(head_dim)
  borrowed_span<float> output;           // [n_heads × head_dim], overwritten
  borrowed_span<float> position_mass{};  // optional [positions], overwritten
};

}  // namespace actsparse
