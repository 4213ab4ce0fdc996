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
#include <actsparse/core/views.hpp>

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

// Token-sparse FFN (prefill): residual[t] += FFN(input[t]) for t in tokens; the other
// rows of residual are left as they are.
struct token_ffn_args {
  ffn_layer weights;
  matrix_view<const float> input;  // [tokens × d_model], the FFN input (normalised)
  matrix_view<float> residual;     // [tokens × d_model], updated in place
  subset tokens;
};

}  // namespace actsparse
