#pragma once
// Neuron-sparse gated FFN for decode (exact gating):
//   g = W_gate·x (dense) → score (from g, act(g) or h) → select S → y = Σ_{j∈S} act(g_j)·u_j·W_down[:, j]
// where only the rows of W_up and the columns of W_down in S are read. The scorer, the
// selector and the backend are template parameters; this is where policies and backends meet.

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/ops/ffn_weights.hpp>
#include <actsparse/scorers/weight_aware_gate.hpp>

#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

namespace actsparse {

// Buffers a neuron_sparse_ffn reuses from call to call (they grow once, then stay).
struct ffn_scratch {
  std::vector<float> gate;           // g, then act(g)
  std::vector<float> preactivation;  // g, kept when the scorer reads it
  std::vector<float> hidden;         // act(g) ⊙ u, when the scorer reads h
  std::vector<float> up;             // W_up·x, when the scorer reads h
  std::vector<float> scores;
  std::vector<std::byte> workspace;  // the backend's
};

namespace detail {

template <class Backend, class Args>
status run_op(const Backend& backend, const Args& args, std::vector<std::byte>& workspace,
              typename Backend::executor_type& ex) {
  ACTSPARSE_REQUIRE_BACKEND_FOR(Backend, Args);
  const status can = backend.can_implement(args);
  if (!can) return can;
  const std::size_t need = backend.workspace_size(args);
  if (workspace.size() < need) workspace.resize(need);
  return backend.run(args, std::span<std::byte>(workspace.data(), need), ex);
}

// The scorer's input built from a vector of neuron values.
template <class Scorer>
typename Scorer::input_type score_input(std::span<const float> v, activation act) {
  if constexpr (std::is_same_v<typename Scorer::input_type, gate_input>) {
    return gate_input{v, act};
  } else {
    static_assert(std::is_constructible_v<typename Scorer::input_type, std::span<const float>>,
                  "actsparse: a neuron scorer must take a std::span<const float> (or gate_input) as its input_type");
    return typename Scorer::input_type(v);
  }
}

// v[i] = act(v[i]) with the backend's own activation when it has one (`activate(act, v)`,
// as cpu_backend: the act(g) passed in then has the bits its dense path computes, so keep-all
// equals dense), else the scalar functions of core/activation.hpp.
template <class Backend>
void activate(const Backend& backend, activation act, std::span<float> v) {
  if constexpr (requires { backend.activate(act, v); }) {
    backend.activate(act, v);
  } else {
    for (float& value : v) value = apply(act, value);
  }
}

}  // namespace detail

template <class Scorer, class Selector, class Backend>
struct neuron_sparse_ffn {
  ACTSPARSE_REQUIRE_IMPORTANCE_SCORER(Scorer);
  ACTSPARSE_REQUIRE_SELECTOR(Selector);
  ACTSPARSE_REQUIRE_BACKEND_FOR(Backend, gemv_args);
  ACTSPARSE_REQUIRE_BACKEND_FOR(Backend, gated_ffn_args);

  Scorer scorer;
  Selector selector;
  score_source source = score_source::gate_activation;
  Backend backend{};

  // One token: writes y (d_model) and the neurons kept into `kept`. Returns the backend's
  // status: not_handled means the engine should run its own kernel.
  status operator()(const ffn_weights& w, std::span<const float> x, std::span<float> y, selection& kept, ffn_scratch& s,
                    typename Backend::executor_type& ex) const {
    const std::size_t d_ff = w.d_ff();
    s.gate.resize(d_ff);
    status st = detail::run_op(backend, gemv_args{w.gate, x, s.gate, subset::everything()}, s.workspace, ex);
    if (!st) return st;
    std::span<const float> values = s.gate;
    if (source == score_source::gate_preactivation) {
      s.preactivation.assign(s.gate.begin(), s.gate.end());
      values = s.preactivation;
    }
    detail::activate(backend, w.act, std::span<float>(s.gate));
    if (source == score_source::hidden) {
      s.up.resize(d_ff);
      s.hidden.resize(d_ff);
      st = detail::run_op(backend, gemv_args{w.up, x, s.up, subset::everything()}, s.workspace, ex);
      if (!st) return st;
      for (std::size_t j = 0; j < d_ff; ++j) s.hidden[j] = s.gate[j] * s.up[j];
      values = s.hidden;
    }
    const auto input = detail::score_input<Scorer>(values, w.act);
    const std::size_t n = scorer.score_count(input);
    detail::require(n == d_ff, "neuron_sparse_ffn", "scorer.score_count()", n, "d_ff (one score per neuron)");
    s.scores.resize(n);
    scorer.score(input, s.scores);
    selector.select(std::span<const float>(s.scores), kept);
    gated_ffn_args args{w.act, w.gate, w.up, w.down, x, y, subset::only(kept.indices), s.gate, w.down_t};
    return detail::run_op(backend, args, s.workspace, ex);
  }
};

template <class Scorer, class Selector, class Backend>
neuron_sparse_ffn(Scorer, Selector, score_source, Backend) -> neuron_sparse_ffn<Scorer, Selector, Backend>;

// The dense FFN with the same interface (every neuron).
template <class Backend>
status dense_ffn(const Backend& backend, const ffn_weights& w, std::span<const float> x, std::span<float> y,
                 ffn_scratch& s, typename Backend::executor_type& ex) {
  gated_ffn_args args{w.act, w.gate, w.up, w.down, x, y, subset::everything(), {}, w.down_t};
  return detail::run_op(backend, args, s.workspace, ex);
}

}  // namespace actsparse
