#pragma once
// Neuron-sparse gated FFN for decode (exact gating):
//   g = W_gate·x (dense) → score (from g, act(g) or h) → select S → y = Σ_{j∈S} act(g_j)·u_j·W_down[:, j]
// where only the rows of W_up and the columns of W_down in S are read. The scorer, the
// selector, the per-layer schedule and the backend are template parameters; this is where
// policies and backends meet.

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/layer_setting.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/score_source.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/ops/run.hpp>
#include <actsparse/schedules/uniform_schedule.hpp>

#include <cstddef>
#include <span>
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

// v[i] = act(v[i]) with the backend's own activation when it has one
// (backend_with_activation: the act(g) passed in then has the bits its dense path computes,
// so keep-all equals dense), else the scalar functions of core/activation.hpp.
template <class Backend>
void activate(const Backend& backend, activation act, std::span<float> v) {
  if constexpr (backend_with_activation<Backend>) {
    backend.activate(act, v);
  } else {
    for (float& value : v) value = apply(act, value);
  }
}

}  // namespace detail

template <class Scorer, class Selector, class Backend, class Schedule = uniform_schedule>
struct neuron_sparse_ffn {
  ACTSPARSE_REQUIRE_NEURON_SCORER(Scorer);
  ACTSPARSE_REQUIRE_SELECTOR(Selector);
  ACTSPARSE_REQUIRE_LAYER_SCHEDULE(Schedule);
  ACTSPARSE_REQUIRE_CONFIGURES(typename Schedule::value_type, Selector);
  ACTSPARSE_REQUIRE_BACKEND_FOR(Backend, gemv_args);
  ACTSPARSE_REQUIRE_BACKEND_FOR(Backend, gated_ffn_args);

  Scorer scorer;
  Selector selector;  // the base selector; schedule.at(layer) configures it per layer
  score_source source = score_source::gate_activation;
  Backend backend{};
  Schedule schedule{};

  // One token of layer `layer`: writes y (d_model) and the neurons kept into `kept`. A layer
  // the schedule marks dense runs every neuron (kept: all, fallback dense_layer). Returns the
  // backend's status: not_handled means the engine should run its own kernel.
  status operator()(std::size_t layer, const ffn_layer& w, std::span<const float> x, std::span<float> y,
                    selection& kept, ffn_scratch& s, typename Backend::executor_type& ex) const {
    const auto setting = schedule.at(layer);
    if (layer_is_dense(setting)) {
      kept.reset(w.d_ff());
      kept.keep_all(w.d_ff(), fallback_reason::dense_layer);
      return run(backend, gated_ffn_args{w, x, y, subset::everything()}, s.workspace, ex);
    }
    const Selector layer_select = layer_selector(selector, setting);
    const std::size_t d_ff = w.d_ff();
    s.gate.resize(d_ff);
    status st = run(backend, gemv_args{w.gate, x, s.gate, subset::everything()}, s.workspace, ex);
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
      st = run(backend, gemv_args{w.up, x, s.up, subset::everything()}, s.workspace, ex);
      if (!st) return st;
      for (std::size_t j = 0; j < d_ff; ++j) s.hidden[j] = s.gate[j] * s.up[j];
      values = s.hidden;
    }
    const auto input = neuron_input<Scorer>(values, w.act);
    const std::size_t n = scorer.score_count(input);
    detail::require(n == d_ff, "neuron_sparse_ffn", "scorer.score_count()", n, "d_ff (one score per neuron)");
    s.scores.resize(n);
    scorer.score(input, s.scores);
    layer_select.select(std::span<const float>(s.scores), kept);
    return run(backend, gated_ffn_args{w, x, y, subset::only(kept.indices), s.gate}, s.workspace, ex);
  }

  // The same for an op whose schedule is uniform (every layer alike): no layer to name.
  status operator()(const ffn_layer& w, std::span<const float> x, std::span<float> y, selection& kept, ffn_scratch& s,
                    typename Backend::executor_type& ex) const requires std::same_as<Schedule, uniform_schedule> {
    return (*this)(0, w, x, y, kept, s, ex);
  }
};

template <class Scorer, class Selector, class Backend>
neuron_sparse_ffn(Scorer, Selector, score_source, Backend) -> neuron_sparse_ffn<Scorer, Selector, Backend>;
template <class Scorer, class Selector, class Backend, class Schedule>
neuron_sparse_ffn(Scorer, Selector, score_source, Backend, Schedule)
    -> neuron_sparse_ffn<Scorer, Selector, Backend, Schedule>;

// The dense FFN with the same interface (every neuron).
template <class Backend>
status dense_ffn(const Backend& backend, const ffn_layer& w, std::span<const float> x, std::span<float> y,
                 ffn_scratch& s, typename Backend::executor_type& ex) {
  return run(backend, gated_ffn_args{w, x, y, subset::everything()}, s.workspace, ex);
}

}  // namespace actsparse
