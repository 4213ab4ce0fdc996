#pragma once
// reference_backend: the oracle every other backend is tested against. It handles every
// dtype and activation with the scalar kernels of kernels.hpp, checks every argument, and
// takes all its scratch from the caller's workspace:
//   can_implement(args) -> status   (not_handled only for a dtype / activation it does not know)
//   workspace_size(args) -> bytes   (f32 scratch: one dequantized row, plus the hidden vector)
//   run(args, workspace, executor)  (checks args, throws actsparse::error when one is wrong)

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

// Whether the reference kernels know this dtype / activation (every value core defines).
[[nodiscard]] constexpr bool handles(dtype t) noexcept {
  switch (t) {
    case dtype::f32:
    case dtype::bf16:
    case dtype::f16:
    case dtype::q8_0:
    case dtype::q4_0:
      return true;
  }
  return false;
}

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
    std::same_as<Args, gated_ffn_args> || std::same_as<Args, token_ffn_args>;

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
  static constexpr memory_space memory = memory_space::host;
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
    if (const status s = can_implement(a); !s) return s;
    ::actsparse::check_arguments(a, where);
    const std::span<float> row = reference::detail::scratch(workspace, scratch_floats(a), where);
    if (a.rows.all) {
      reference::dense_gemv(a.w, a.x, a.y, row);
    } else {
      reference::row_gather_gemv(a.w, a.rows.indices, a.x, a.y, row);
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
    if (const status s = can_implement(a); !s) return s;
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
    if (const status s = can_implement(a); !s) return s;
    ::actsparse::check_arguments(a, where);
    const std::span<float> row = reference::detail::scratch(workspace, a.wt.cols, where);
    reference::transposed_linear(a.wt, a.inputs, a.x, a.y, row);
    return status::ok();
  }

  // --- y = W_down (act(W_gate x) ⊙ W_up x) over the kept neurons ----------------------------
  [[nodiscard]] status can_implement(const gated_ffn_args& a) const noexcept {
    return ffn_status(a.act, a.gate, a.up, a.down, a.down_t);
  }
  // The kept neurons' hidden values, plus one dequantized row of max(d_model, d_ff) values.
  [[nodiscard]] std::size_t workspace_size(const gated_ffn_args& a) const noexcept {
    return (hidden_floats(a) + reference::detail::row_floats(a.gate)) * sizeof(float);
  }
  status run(const gated_ffn_args& a, std::span<std::byte> workspace, inline_executor& /*executor*/) const {
    constexpr std::string_view where = "reference::gated_ffn";
    if (const status s = can_implement(a); !s) return s;
    ::actsparse::check_arguments(a, where);
    const std::size_t nh = hidden_floats(a);
    const std::span<float> all =
        reference::detail::scratch(workspace, nh + reference::detail::row_floats(a.gate), where);
    const std::span<float> h = all.first(nh);
    const std::span<float> row = all.subspan(nh);
    const reference::gated_weights f{a.act, a.gate, a.up, a.down, a.down_t};
    if (a.neurons.all) {
      reference::dense_gated_ffn(f, a.x, a.gate_act, a.y, h, row);
    } else {
      reference::neuron_sparse_gated_ffn(f, a.neurons.indices, a.x, a.gate_act, a.y, h, row);
    }
    return status::ok();
  }

  // --- residual[t] += FFN(input[t]) for the kept tokens -------------------------------------
  [[nodiscard]] status can_implement(const token_ffn_args& a) const noexcept {
    return ffn_status(a.act, a.gate, a.up, a.down, a.down_t);
  }
  // One token's hidden values (d_ff), one dequantized row of max(d_model, d_ff) values and
  // the token's FFN output (d_model); nothing when no token is kept.
  [[nodiscard]] std::size_t workspace_size(const token_ffn_args& a) const noexcept {
    return scratch_floats(a) * sizeof(float);
  }
  status run(const token_ffn_args& a, std::span<std::byte> workspace, inline_executor& /*executor*/) const {
    constexpr std::string_view where = "reference::token_ffn";
    if (const status s = can_implement(a); !s) return s;
    ::actsparse::check_arguments(a, where);
    const std::span<float> all = reference::detail::scratch(workspace, scratch_floats(a), where);
    if (all.empty()) return status::ok();
    const std::span<float> h = all.first(a.gate.rows);
    const std::span<float> row = all.subspan(a.gate.rows, reference::detail::row_floats(a.gate));
    const std::span<float> y = all.subspan(a.gate.rows + row.size());
    reference::token_sparse_ffn({a.act, a.gate, a.up, a.down, a.down_t}, a.input, a.residual, a.tokens, h, row, y);
    return status::ok();
  }

  // Allocates the workspace and runs on an inline_executor: for tests and demos, not hot paths.
  template <reference::operation_args Args>
  status run_with_scratch(const Args& args) const {
    std::vector<std::byte> workspace(workspace_size(args));
    inline_executor executor;
    return run(args, workspace, executor);
  }

 private:
  static constexpr status ffn_status(activation act, const weight_view& gate, const weight_view& up,
                                     const weight_view& down, const weight_view& down_t) noexcept {
    if (!reference::handles(act)) return status::not_handled("reference: unknown activation");
    if (!reference::handles(gate.type) || !reference::handles(up.type) || !reference::handles(down.type) ||
        !reference::handles(down_t.type)) {
      return status::not_handled("reference: unknown weight dtype");
    }
    return status::ok();
  }

  static constexpr std::size_t scratch_floats(const gemv_args& a) noexcept {
    return a.rows.count(a.w.rows) == 0 ? 0 : a.w.cols;
  }
  static constexpr std::size_t scratch_floats(const linear_args& a) noexcept { return a.w.rows == 0 ? 0 : a.w.cols; }
  static constexpr std::size_t hidden_floats(const gated_ffn_args& a) noexcept { return a.neurons.count(a.gate.rows); }
  static std::size_t scratch_floats(const token_ffn_args& a) noexcept {
    if (a.tokens.count(a.input.rows) == 0) return 0;
    return a.gate.rows + reference::detail::row_floats(a.gate) + a.gate.cols;
  }
};

ACTSPARSE_REQUIRE_BACKEND_FOR(reference_backend, gemv_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(reference_backend, linear_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(reference_backend, transposed_linear_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(reference_backend, gated_ffn_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(reference_backend, token_ffn_args);

}  // namespace actsparse
