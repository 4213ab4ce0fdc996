#pragma once
// reference_backend: the oracle every other backend is tested against. It handles every
// dtype and activation with the scalar kernels of kernels.hpp, checks every argument, and
// takes all its scratch from the caller's workspace:
//   can_implement(args) -> status   (not_handled only for a dtype / activation it does not know)
//   workspace_size(args) -> bytes   (f32 scratch: one dequantized row, plus the hidden vector)
//   run(args, workspace, executor)  (checks every argument, index lists included: the oracle is
//                                    not a hot path; throws actsparse::error when one is wrong)

#include <actsparse/backends/reference/kernels.hpp>
#include <actsparse/core/check_args.hpp>
#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/executor.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/views.hpp>

#include <algorithm>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace actsparse {
namespace reference {

// Whether the reference kernels know this dtype / activation: every dtype of core's table
// (their rows convert through dtype_traits) and every activation.
[[nodiscard]] constexpr bool handles(dtype t) noexcept { return info(t).block_bytes != 0; }

[[nodiscard]] constexpr bool handles(activation a) noexcept {
  switch (a) {
    case activation::silu:
    case activation::gelu:
    case activation::relu:
      return true;
  }
  return false;
}

// The arguments of the operations the reference runs.
template <class Args>
concept operation_args =
    std::same_as<Args, gemv_args> || std::same_as<Args, linear_args> || std::same_as<Args, transposed_linear_args> ||
    std::same_as<Args, gated_ffn_args> || std::same_as<Args, token_ffn_args> || std::same_as<Args, moe_ffn_args> ||
    std::same_as<Args, attention_args> || std::same_as<Args, batched_gemv_args>;

namespace detail {

// The first `floats` f32 values of the workspace; checks its size and alignment.
[[nodiscard]] inline std::span<float> scratch(std::span<std::byte> workspace, std::size_t floats,
                                              std::string_view where) {
  const std::size_t bytes = floats * sizeof(float);
  if (bytes == 0) return {};
  if (workspace.size() < bytes) {
    ::actsparse::detail::fail(where, "workspace.size()", workspace.size(),
                              "at least " + std::to_string(bytes) + " bytes (workspace_size(args))");
  }
  if (reinterpret_cast<std::uintptr_t>(workspace.data()) % alignof(float) != 0) {
    ::actsparse::detail::fail(where, "workspace.data()", static_cast<const void*>(workspace.data()),
                              "an address aligned to alignof(float) = 4 bytes");
  }
  return {reinterpret_cast<float*>(workspace.data()), floats};
}

// One dequantized row of any FFN weight: max(d_model, d_ff) values.
[[nodiscard]] inline std::size_t row_floats(const weight_view& gate) noexcept { return std::max(gate.cols, gate.rows); }

}  // namespace detail

}  // namespace reference

struct reference_backend {
  static constexpr std::string_view name = "reference";
  using memory_space = host_memory;
  using executor_type = inline_executor;

  // --- y = W[rows, :] x ---------------------------------------------------------------------
  [[nodiscard]] status can_implement(const gemv_args& a) const noexcept {
    return reference::handles(a.w.type) ? status::ok() : status::not_handled("reference: unknown weight dtype");
  }
  // One dequantized row of W.
  [[nodiscard]] std::size_t workspace_size(const gemv_args& a) const noexcept {
    return scratch_floats(a) * sizeof(float);
  }
  status run(const gemv_args& a, std::span<std::byte> workspace, inline_executor& /*executor*/) const {
    constexpr std::string_view where = "reference::gemv";
    ::actsparse::check_arguments(a, where);
    const std::span<float> row = reference::detail::scratch(workspace, scratch_floats(a), where);
    if (a.rows.all) {
      reference::dense_gemv(a.w, a.x, a.y, row);
    } else {
      reference::row_gather_gemv(a.w, a.rows.indices, a.x, a.y, row);
    }
    return status::ok();
  }

  // --- Y[t] = W·X[t] for every token: the dense GEMV per token --------------------------------
  [[nodiscard]] status can_implement(const batched_gemv_args& a) const noexcept {
    return reference::handles(a.w.type) ? status::ok() : status::not_handled("reference: unknown weight dtype");
  }
  [[nodiscard]] std::size_t workspace_size(const batched_gemv_args& a) const noexcept {
    return a.x.rows == 0 ? 0 : a.w.cols * sizeof(float);
  }
  status run(const batched_gemv_args& a, std::span<std::byte> workspace, inline_executor& /*executor*/) const {
    constexpr std::string_view where = "reference::batched_gemv";
    ::actsparse::check_arguments(a, where);
    if (a.x.rows == 0) return status::ok();
    const std::span<float> row = reference::detail::scratch(workspace, a.w.cols, where);
    for (std::size_t t = 0; t < a.x.rows; ++t) {
      reference::dense_gemv(a.w, std::span<const float>(a.x.row(t), a.x.cols), std::span<float>(a.y.row(t), a.y.cols),
                            row);
    }
    return status::ok();
  }

  // --- y = Σ_{j ∈ inputs} W[:, j] x_j -------------------------------------------------------
  [[nodiscard]] status can_implement(const linear_args& a) const noexcept {
    return reference::handles(a.w.type) ? status::ok() : status::not_handled("reference: unknown weight dtype");
  }
  // One dequantized row of W.
  [[nodiscard]] std::size_t workspace_size(const linear_args& a) const noexcept {
    return scratch_floats(a) * sizeof(float);
  }
  status run(const linear_args& a, std::span<std::byte> workspace, inline_executor& /*executor*/) const {
    constexpr std::string_view where = "reference::linear";
    ::actsparse::check_arguments(a, where);
    const std::span<float> row = reference::detail::scratch(workspace, scratch_floats(a), where);
    if (a.inputs.all) {
      reference::dense_gemv(a.w, a.x, a.y, row);
    } else {
      reference::input_sparse_linear(a.w, a.inputs.indices, a.x, a.y, row);
    }
    return status::ok();
  }

  // --- y = Σ_{j ∈ inputs} x_j · Wt[j, :] over a transposed weight ---------------------------
  [[nodiscard]] status can_implement(const transposed_linear_args& a) const noexcept {
    return reference::handles(a.wt.type) ? status::ok() : status::not_handled("reference: unknown dtype");
  }
  [[nodiscard]] std::size_t workspace_size(const transposed_linear_args& a) const noexcept {
    return a.wt.cols * sizeof(float);
  }
  status run(const transposed_linear_args& a, std::span<std::byte> workspace, inline_executor& /*executor*/) const {
    constexpr std::string_view where = "reference::transposed_linear";
    ::actsparse::check_arguments(a, where);
    const std::span<float> row = reference::detail::scratch(workspace, a.wt.cols, where);
    reference::transposed_linear(a.wt, a.inputs, a.x, a.y, row);
    return status::ok();
  }

  // --- y = W_down (act(W_gate x) ⊙ W_up x) over the kept neurons ----------------------------
  [[nodiscard]] status can_implement(const gated_ffn_args& a) const noexcept { return ffn_status(a.weights); }
  // The kept neurons' hidden values, plus one dequantized row of max(d_model, d_ff) values.
  [[nodiscard]] std::size_t workspace_size(const gated_ffn_args& a) const noexcept {
    return (hidden_floats(a) + reference::detail::row_floats(a.weights.gate)) * sizeof(float);
  }
  status run(const gated_ffn_args& a, std::span<std::byte> workspace, inline_executor& /*executor*/) const {
    constexpr std::string_view where = "reference::gated_ffn";
    ::actsparse::check_arguments(a, where);
    const std::size_t nh = hidden_floats(a);
    const std::span<float> all =
        reference::detail::scratch(workspace, nh + reference::detail::row_floats(a.weights.gate), where);
    const std::span<float> h = all.first(nh);
    const std::span<float> row = all.subspan(nh);
    const ffn_layer& f = a.weights;
    if (a.neurons.all) {
      reference::dense_gated_ffn(f, a.x, a.gate_act, a.y, h, row);
    } else {
      reference::neuron_sparse_gated_ffn(f, a.neurons.indices, a.x, a.gate_act, a.y, h, row);
    }
    return status::ok();
  }

  // --- residual[t] += FFN(input[t]) for the kept tokens -------------------------------------
  [[nodiscard]] status can_implement(const token_ffn_args& a) const noexcept { return ffn_status(a.weights); }
  // One token's hidden values (d_ff), one dequantized row of max(d_model, d_ff) values and
  // the token's FFN output (d_model); nothing when no token is kept.
  [[nodiscard]] std::size_t workspace_size(const token_ffn_args& a) const noexcept {
    return scratch_floats(a) * sizeof(float);
  }
  status run(const token_ffn_args& a, std::span<std::byte> workspace, inline_executor& /*executor*/) const {
    constexpr std::string_view where = "reference::token_ffn";
    ::actsparse::check_arguments(a, where);
    const std::span<float> all = reference::detail::scratch(workspace, scratch_floats(a), where);
    if (all.empty()) return status::ok();
    const std::size_t d_ff = a.weights.d_ff();
    const std::span<float> h = all.first(d_ff);
    const std::span<float> row = all.subspan(d_ff, reference::detail::row_floats(a.weights.gate));
    const std::span<float> y = all.subspan(d_ff + row.size());
    reference::token_sparse_ffn(a.weights, a.input, a.residual, a.tokens, a.neurons, a.gate_act, h, row, y);
    return status::ok();
  }

  // --- y_t = Σ_p w_p · FFN_{e_p}(x_t) (+ shared) over the routing table --------------------------
  [[nodiscard]] status can_implement(const moe_ffn_args& a) const noexcept {
    if (!reference::handles(a.experts.act)) return status::not_handled("reference: unknown activation");
    for (const stacked_view* s : {&a.experts.gate, &a.experts.up, &a.experts.down, &a.experts.down_t}) {
      if (!reference::handles(s->first.type)) return status::not_handled("reference: unknown weight dtype");
    }
    return a.shared.gate.absent() ? status::ok() : ffn_status(a.shared);
  }
  // acc and f (d_model each), h (the larger d_ff of experts and shared) and one dequantized row.
  [[nodiscard]] std::size_t workspace_size(const moe_ffn_args& a) const noexcept {
    const std::size_t d_ff = moe_d_ff(a);
    return (2 * a.experts.d_model() + d_ff + std::max(d_ff, a.experts.d_model())) * sizeof(float);
  }
  status run(const moe_ffn_args& a, std::span<std::byte> workspace, inline_executor& /*executor*/) const {
    constexpr std::string_view where = "reference::moe_ffn";
    ::actsparse::check_arguments(a, where);
    const std::size_t d_model = a.experts.d_model();
    const std::size_t d_ff = moe_d_ff(a);
    const std::span<float> all =
        reference::detail::scratch(workspace, 2 * d_model + d_ff + std::max(d_ff, d_model), where);
    reference::moe_ffn(a, all.first(d_model), all.subspan(d_model, d_model), all.subspan(2 * d_model, d_ff),
                       all.subspan(2 * d_model + d_ff));
    return status::ok();
  }

  // --- decode attention over a mixed-format KV cache --------------------------------------------
  [[nodiscard]] status can_implement(const attention_args& /*a*/) const noexcept { return status::ok(); }
  // One float per position (a head's scores).
  [[nodiscard]] std::size_t workspace_size(const attention_args& a) const noexcept {
    return a.k_rows.size() * sizeof(float);
  }
  status run(const attention_args& a, std::span<std::byte> workspace, inline_executor& /*executor*/) const {
    constexpr std::string_view where = "reference::attention";
    ::actsparse::check_arguments(a, where);
    reference::attention(a, reference::detail::scratch(workspace, a.k_rows.size(), where));
    return status::ok();
  }

  // can_implement, then run with a workspace of its own on an inline_executor: for tests and
  // demos, not hot paths (actsparse::run(backend, args) in ops/run.hpp does the same for any
  // backend).
  template <reference::operation_args Args>
  status run_with_scratch(const Args& args) const {
    std::vector<std::byte> workspace(workspace_size(args));
    inline_executor executor;
    if (const status can = can_implement(args); !can) return can;
    return run(args, workspace, executor);
  }

 private:
  static constexpr status ffn_status(const ffn_layer& f) noexcept {
    if (!reference::handles(f.act)) return status::not_handled("reference: unknown activation");
    if (!reference::handles(f.gate.type) || !reference::handles(f.up.type) || !reference::handles(f.down.type) ||
        !reference::handles(f.down_t.type)) {
      return status::not_handled("reference: unknown weight dtype");
    }
    return status::ok();
  }

  static constexpr std::size_t moe_d_ff(const moe_ffn_args& a) noexcept {
    return a.shared.gate.absent() ? a.experts.d_ff() : std::max(a.experts.d_ff(), a.shared.d_ff());
  }
  static constexpr std::size_t scratch_floats(const gemv_args& a) noexcept {
    return a.rows.count(a.w.rows) == 0 ? 0 : a.w.cols;
  }
  static constexpr std::size_t scratch_floats(const linear_args& a) noexcept { return a.w.rows == 0 ? 0 : a.w.cols; }
  static constexpr std::size_t hidden_floats(const gated_ffn_args& a) noexcept {
    return a.neurons.count(a.weights.d_ff());
  }
  static std::size_t scratch_floats(const token_ffn_args& a) noexcept {
    if (a.tokens.count(a.input.rows) == 0) return 0;
    return a.weights.d_ff() + reference::detail::row_floats(a.weights.gate) + a.weights.d_model();
  }
};

ACTSPARSE_REQUIRE_BACKEND_FOR(reference_backend, gemv_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(reference_backend, linear_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(reference_backend, transposed_linear_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(reference_backend, gated_ffn_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(reference_backend, token_ffn_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(reference_backend, batched_gemv_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(reference_backend, moe_ffn_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(reference_backend, attention_args);

}  // namespace actsparse
