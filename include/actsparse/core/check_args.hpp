#pragma once
// The argument checks of every operation in op_args.hpp, shared by all backends so that a bad
// call gets the same clear error whichever backend runs it. Two levels:
//   check_shapes(args, where)     O(1): views valid, sizes agree, an index list's last entry in
//                                 range. Every backend's run() calls it.
//   check_arguments(args, where)  check_shapes and every index list walked (in range, strictly
//                                 increasing): O(|indices|). actsparse::run_checked calls it;
//                                 the ops, whose index lists come from a selector (sorted and
//                                 unique by construction), do not.
// Messages are built only on the failing path: a valid call allocates nothing.

#include <actsparse/core/error.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/routing.hpp>
#include <actsparse/core/views.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace actsparse {
namespace detail {

// O(1): `all` without indices, and (indices sorted, as the precondition says) the last < n.
inline void check_subset_bounds(const subset& s, std::size_t n, std::string_view where, std::string_view argument,
                                std::string_view meaning_of_n) {
  if (s.all) {
    if (!s.indices.empty()) {
      fail(where, argument, "a subset with all = true and " + std::to_string(s.indices.size()) + " indices",
           "subset::everything() (no indices) or subset::only(indices) (all = false)");
    }
    return;
  }
  if (s.indices.size() > n) {
    fail(where, std::string(argument) + ".indices.size()", s.indices.size(),
         "at most " + std::to_string(n) + " (" + std::string(meaning_of_n) + "; indices are unique)");
  }
  if (!s.indices.empty() && s.indices.back() >= n) {
    fail(where, std::string(argument) + ".indices[" + std::to_string(s.indices.size() - 1) + "]", s.indices.back(),
         "an index < " + std::to_string(n) + " (" + std::string(meaning_of_n) + ")");
  }
}

// O(|indices|): every index < n and strictly increasing.
inline void check_subset(const subset& s, std::size_t n, std::string_view where, std::string_view argument,
                         std::string_view meaning_of_n) {
  check_subset_bounds(s, n, where, argument, meaning_of_n);
  if (s.all) return;
  for (std::size_t k = 0; k < s.indices.size(); ++k) {
    const std::uint32_t j = s.indices[k];
    if (j >= n) {
      fail(where, std::string(argument) + ".indices[" + std::to_string(k) + "]", j,
           "an index < " + std::to_string(n) + " (" + std::string(meaning_of_n) + ")");
    }
    if (k > 0 && j <= s.indices[k - 1]) {
      fail(where, std::string(argument) + ".indices[" + std::to_string(k) + "]", j,
           "an index > " + std::string(argument) + ".indices[" + std::to_string(k - 1) +
               "] = " + std::to_string(s.indices[k - 1]) + " (indices strictly increasing: sorted, no duplicates)");
    }
  }
}

inline void check_size(std::size_t got, std::size_t want, std::string_view where, std::string_view argument,
                       std::string_view meaning) {
  if (got != want) {
    fail(where, argument, got, std::to_string(want) + " (" + std::string(meaning) + ")");
  }
}

}  // namespace detail

// ---- O(1) shape checks, one per operation. `where` names the caller in the message. --------

inline void check_shapes(const gemv_args& a, std::string_view where) {
  validate(a.w, where, "w");
  detail::check_subset_bounds(a.rows, a.w.rows, where, "rows", "w.rows");
  detail::check_size(a.x.size(), a.w.cols, where, "x.size()", "w.cols");
  detail::check_size(a.y.size(), a.rows.count(a.w.rows), where, "y.size()",
                     a.rows.all ? "w.rows" : "rows.indices.size()");
}

inline void check_shapes(const transposed_linear_args& a, std::string_view where) {
  validate(a.wt, where, "wt");
  detail::check_subset_bounds(a.inputs, a.wt.rows, where, "inputs", "wt.rows");
  detail::check_size(a.x.size(), a.wt.rows, where, "x.size()", "wt.rows, the inputs");
  detail::check_size(a.y.size(), a.wt.cols, where, "y.size()", "wt.cols, the outputs");
}

inline void check_shapes(const linear_args& a, std::string_view where) {
  validate(a.w, where, "w");
  detail::check_subset_bounds(a.inputs, a.w.cols, where, "inputs", "w.cols");
  detail::check_size(a.x.size(), a.w.cols, where, "x.size()", "w.cols, the inputs");
  detail::check_size(a.y.size(), a.w.rows, where, "y.size()", "w.rows, the outputs");
}

// gate and up [d_ff × d_model], down [d_model × d_ff] and / or down_t [d_ff × d_model] (at
// least one of the two), with d_model = gate.cols, d_ff = gate.rows.
inline void check_ffn_layer(const ffn_layer& f, std::string_view where) {
  validate(f.gate, where, "weights.gate");
  validate(f.up, where, "weights.up");
  detail::check_size(f.up.rows, f.gate.rows, where, "weights.up.rows",
                     "d_ff = gate.rows; gate and up are [d_ff x d_model]");
  detail::check_size(f.up.cols, f.gate.cols, where, "weights.up.cols",
                     "d_model = gate.cols; gate and up are [d_ff x d_model]");
  if (f.down.absent() && f.down_t.absent()) {
    detail::fail_described(where, "weights.down, weights.down_t", "neither given",
                           "W_down [d_model x d_ff] in down, or W_down transposed [d_ff x d_model] in down_t");
  }
  if (!f.down.absent()) {
    validate(f.down, where, "weights.down");
    detail::check_size(f.down.rows, f.gate.cols, where, "weights.down.rows",
                       "d_model = gate.cols; down is [d_model x d_ff]");
    detail::check_size(f.down.cols, f.gate.rows, where, "weights.down.cols",
                       "d_ff = gate.rows; down is [d_model x d_ff]");
  }
  if (!f.down_t.absent()) {
    validate(f.down_t, where, "weights.down_t");
    detail::check_size(f.down_t.rows, f.gate.rows, where, "weights.down_t.rows",
                       "d_ff = gate.rows; down_t is [d_ff x d_model]");
    detail::check_size(f.down_t.cols, f.gate.cols, where, "weights.down_t.cols",
                       "d_model = gate.cols; down_t is [d_ff x d_model]");
  }
}

inline void check_shapes(const gated_ffn_args& a, std::string_view where) {
  check_ffn_layer(a.weights, where);
  const std::size_t d_model = a.weights.d_model();
  const std::size_t d_ff = a.weights.d_ff();
  detail::check_subset_bounds(a.neurons, d_ff, where, "neurons", "d_ff = gate.rows");
  detail::check_size(a.x.size(), d_model, where, "x.size()", "d_model = gate.cols");
  detail::check_size(a.y.size(), d_model, where, "y.size()", "d_model = gate.cols");
  if (!a.gate_act.empty()) {
    detail::check_size(a.gate_act.size(), d_ff, where, "gate_act.size()",
                       "d_ff = gate.rows, or 0 to compute the gate here");
  }
}

inline void check_shapes(const token_ffn_args& a, std::string_view where) {
  check_ffn_layer(a.weights, where);
  validate(a.input, where, "input");
  validate(a.residual, where, "residual");
  detail::check_size(a.input.cols, a.weights.d_model(), where, "input.cols", "d_model = gate.cols");
  detail::check_size(a.residual.cols, a.weights.d_model(), where, "residual.cols", "d_model = gate.cols");
  detail::check_size(a.residual.rows, a.input.rows, where, "residual.rows", "input.rows, one residual row per token");
  detail::check_subset_bounds(a.tokens, a.input.rows, where, "tokens", "input.rows");
  detail::check_subset_bounds(a.neurons, a.weights.d_ff(), where, "neurons", "d_ff = gate.rows");
  if (a.gate_act.rows != 0 || a.gate_act.cols != 0) {
    validate(a.gate_act, where, "gate_act");
    detail::check_size(a.gate_act.rows, a.input.rows, where, "gate_act.rows", "input.rows, one gate row per token");
    detail::check_size(a.gate_act.cols, a.weights.d_ff(), where, "gate_act.cols",
                       "d_ff = gate.rows, or an empty view to compute the gate here");
  }
}

inline void check_shapes(const batched_gemv_args& a, std::string_view where) {
  validate(a.w, where, "w");
  validate(a.x, where, "x");
  validate(a.y, where, "y");
  detail::check_size(a.x.cols, a.w.cols, where, "x.cols", "w.cols");
  detail::check_size(a.y.rows, a.x.rows, where, "y.rows", "x.rows, one output row per token");
  detail::check_size(a.y.cols, a.w.rows, where, "y.cols", "w.rows");
}

// A stacked projection: a valid first matrix, `count` experts, and expert strides that hold a
// whole matrix and keep every expert aligned.
inline void check_stacked(const stacked_view& s, std::size_t count, std::size_t rows, std::size_t cols,
                          std::string_view where, std::string_view argument) {
  const std::string arg(argument);
  validate(s.first, where, arg + ".first");
  detail::check_size(s.count, count, where, arg + ".count", "experts.count() = gate.count, one matrix per expert");
  detail::check_size(s.first.rows, rows, where, arg + ".first.rows", "the expert shape");
  detail::check_size(s.first.cols, cols, where, arg + ".first.cols", "the expert shape");
  const std::size_t bytes =
      s.first.rows == 0 ? 0 : (s.first.rows - 1) * s.first.row_stride + row_bytes(s.first.type, s.first.cols);
  if (count > 1 && s.expert_stride < bytes) {
    detail::fail(where, arg + ".expert_stride", s.expert_stride,
                 "at least " + std::to_string(bytes) + " bytes (one expert's matrix; experts must not overlap)");
  }
  const std::size_t align = info(s.first.type).alignment;
  if (count > 1 && s.expert_stride % align != 0) {
    detail::fail(where, arg + ".expert_stride", s.expert_stride,
                 "a multiple of " + std::to_string(align) + " bytes (every expert's rows start aligned)");
  }
}

inline void check_shapes(const moe_ffn_args& a, std::string_view where) {
  const moe_experts& x = a.experts;
  const std::size_t n = x.count();
  detail::require(n >= 1, where, "experts.gate.count", n, "at least one expert");
  const std::size_t d_model = x.d_model();
  const std::size_t d_ff = x.d_ff();
  check_stacked(x.gate, n, d_ff, d_model, where, "experts.gate");
  check_stacked(x.up, n, d_ff, d_model, where, "experts.up");
  if (x.down.absent() && x.down_t.absent()) {
    detail::fail_described(where, "experts.down, experts.down_t", "neither given",
                           "stacked W_down [d_model x d_ff] in down, or W_down transposed [d_ff x d_model] in down_t");
  }
  if (!x.down.absent()) check_stacked(x.down, n, d_model, d_ff, where, "experts.down");
  if (!x.down_t.absent()) check_stacked(x.down_t, n, d_ff, d_model, where, "experts.down_t");
  validate(a.input, where, "input");
  validate(a.output, where, "output");
  detail::check_size(a.input.cols, d_model, where, "input.cols", "d_model = experts.gate.first.cols");
  detail::check_size(a.output.cols, d_model, where, "output.cols", "d_model = experts.gate.first.cols");
  detail::check_size(a.output.rows, a.input.rows, where, "output.rows", "input.rows, one output row per token");
  detail::check_size(a.routing.tokens, a.input.rows, where, "routing.tokens", "input.rows, the tokens routed");
  detail::check_size(a.routing.experts, n, where, "routing.experts", "experts.count()");
  detail::check_size(a.routing.token_offsets.size(), a.routing.tokens + 1, where, "routing.token_offsets.size()",
                     "tokens + 1");
  detail::check_size(a.routing.expert_offsets.size(), n + 1, where, "routing.expert_offsets.size()", "experts + 1");
  const std::size_t pairs = a.routing.pairs();
  detail::check_size(a.routing.pair_weight.size(), pairs, where, "routing.pair_weight.size()", "one weight per pair");
  detail::check_size(a.routing.expert_pairs.size(), pairs, where, "routing.expert_pairs.size()", "every pair once");
  detail::check_size(a.routing.expert_tokens.size(), pairs, where, "routing.expert_tokens.size()",
                     "one token per pair");
  if (!a.shared.gate.absent()) {
    check_ffn_layer(a.shared, where);
    detail::check_size(a.shared.d_model(), d_model, where, "shared.gate.cols", "d_model, the routed experts' width");
  }
}

inline void check_shapes(const attention_args& a, std::string_view where) {
  detail::require(a.n_heads >= 1 && a.n_kv_heads >= 1, where, "n_kv_heads", a.n_kv_heads,
                  "at least one query head and one KV head");
  if (a.n_heads % a.n_kv_heads != 0) {
    detail::fail(
        where, "n_heads", a.n_heads,
        "a multiple of n_kv_heads = " + std::to_string(a.n_kv_heads) + " (each KV head serves as many query heads)");
  }
  detail::require(a.head_dim >= 1, where, "head_dim", a.head_dim, "at least 1");
  detail::require(std::isfinite(a.scale), where, "scale", a.scale, "a finite value (usually 1 / sqrt(head_dim))");
  detail::check_size(a.q.size(), a.n_heads * a.head_dim, where, "q.size()", "n_heads x head_dim");
  detail::check_size(a.output.size(), a.n_heads * a.head_dim, where, "output.size()", "n_heads x head_dim");
  detail::check_size(a.v_rows.size(), a.k_rows.size(), where, "v_rows.size()", "one V row per K row (position)");
  if (!a.position_mass.empty()) {
    detail::check_size(a.position_mass.size(), a.k_rows.size(), where, "position_mass.size()",
                       "one value per position, or empty");
  }
}

// ---- Full checks: the shapes and every index list walked. ----------------------------------

inline void check_arguments(const gemv_args& a, std::string_view where) {
  check_shapes(a, where);
  detail::check_subset(a.rows, a.w.rows, where, "rows", "w.rows");
}
inline void check_arguments(const transposed_linear_args& a, std::string_view where) {
  check_shapes(a, where);
  detail::check_subset(a.inputs, a.wt.rows, where, "inputs", "wt.rows");
}
inline void check_arguments(const linear_args& a, std::string_view where) {
  check_shapes(a, where);
  detail::check_subset(a.inputs, a.w.cols, where, "inputs", "w.cols");
}
inline void check_arguments(const gated_ffn_args& a, std::string_view where) {
  check_shapes(a, where);
  detail::check_subset(a.neurons, a.weights.d_ff(), where, "neurons", "d_ff = gate.rows");
}
inline void check_arguments(const token_ffn_args& a, std::string_view where) {
  check_shapes(a, where);
  detail::check_subset(a.tokens, a.input.rows, where, "tokens", "input.rows");
  detail::check_subset(a.neurons, a.weights.d_ff(), where, "neurons", "d_ff = gate.rows");
}
inline void check_arguments(const batched_gemv_args& a, std::string_view where) { check_shapes(a, where); }

inline void check_arguments(const moe_ffn_args& a, std::string_view where) {
  check_shapes(a, where);
  check_routing(a.routing, where);
}

// The shapes, q finite, and every present row's format known.
inline void check_arguments(const attention_args& a, std::string_view where) {
  check_shapes(a, where);
  for (std::size_t i = 0; i < a.q.size(); ++i) {
    if (!std::isfinite(a.q[i])) detail::fail(where, "q[" + std::to_string(i) + "]", a.q[i], "finite values");
  }
  for (const borrowed_span<const row_ref>* rows : {&a.k_rows, &a.v_rows}) {
    for (std::size_t p = 0; p < rows->size(); ++p) {
      const row_ref& r = (*rows)[p];
      if (r.data != nullptr && static_cast<unsigned>(r.format) > static_cast<unsigned>(row_format::int4_g32_min)) {
        detail::fail(where, std::string(rows == &a.k_rows ? "k_rows[" : "v_rows[") + std::to_string(p) + "].format",
                     static_cast<unsigned>(r.format), "a row_format (core/row_format.hpp)");
      }
    }
  }
}

// Whether check_arguments has an overload for these arguments (run_checked requires one).
template <class Args>
concept checkable_args = requires(const Args& a) {
  check_arguments(a, std::string_view{});
};

}  // namespace actsparse
