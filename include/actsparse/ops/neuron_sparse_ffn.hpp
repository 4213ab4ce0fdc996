#pragma once
// Neuron-sparse gated FFN for decode (exact gating):
//   g = W_gate·x (dense) → score (from g, act(g) or h) → select S → y = Σ_{j∈S} act(g_j)·u_j·W_down[:, j]
// where only the rows of W_up and the columns of W_down in S are read. The scorer, the
// selector, the per-layer schedule and the backend are template parameters; this is where
// policies and backends meet.

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/gate_factors.hpp>
#include <actsparse/core/layer_setting.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/score_source.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/ops/run.hpp>
#include <actsparse/schedules/uniform_schedule.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace actsparse {

// The weight rows one call of a neuron-sparse FFN needs (each row of each matrix counted once),
// and the bytes of a gate predictor it read: what honest byte counts are made of.
struct ffn_reads {
  std::size_t gate_rows = 0;        // W_gate rows: d_ff, or the predicted rows with a gate predictor
  std::size_t up_rows = 0;          // W_up rows: the kept (first-stage) rows, or d_ff for a score from h
  std::size_t down_rows = 0;        // W_down columns (W_downᵀ rows): the kept neurons
  std::size_t predictor_bytes = 0;  // the gate predictor's factors
  // How the backend read them, where it says (a backend with plan(gated_ffn_args, threads), as
  // the CPU backend): every_row: it read every row of W_up (and W_gate) and zeroed the dropped
  // neurons' h — a dense layer, or past its crossover, where one full read is faster than a
  // gather of that many rows (up_rows above still counts the kept rows the policy needs);
  // interleaved: it read them from interleaved copies (cpu::weight_layouts). Both false otherwise.
  bool every_row = false;
  bool interleaved = false;
  // down_columns: W_down was read from its column blocks (cpu::column_blocks, q8_0 / q4_0,
  // lossless): the count of 32-neuron block columns holding a kept neuron, whose d_model f16
  // scales were read besides the kept neurons' quants (down_rows of them); 0 when read
  // otherwise. W_down's bytes read: down_rows·d_model·(1 or 1/2) + down_columns·d_model·2.
  std::size_t down_columns = 0;
};

// Buffers a neuron_sparse_ffn reuses from call to call (they grow once, then stay).
struct ffn_scratch {
  std::vector<float> gate;           // g, then act(g) (or the predicted g̃ with a gate predictor)
  std::vector<float> preactivation;  // g, kept when the scorer reads it
  std::vector<float> hidden;         // act(g) ⊙ u, when the scorer reads h or a second stage runs
  std::vector<float> up;             // W_up·x, when the scorer reads h or a second stage runs
  std::vector<float> scores;
  std::vector<float> token;               // a per-token selector's scratch (layer_input)
  std::vector<float> low_rank;            // A·x of a gate predictor
  std::vector<float> gate_rows;           // act(g) of the kept rows (a gate predictor with a second stage)
  std::vector<std::uint32_t> candidates;  // the first stage's neurons when a second stage cut them
  selection refined;                      // the second stage's choice among them (positions)
  ffn_reads reads;                        // what the last call read
  std::vector<std::byte> workspace;       // the backend's
  std::vector<float> gates;               // a batch: act(W_gate·x_t) per token [tokens × d_ff]
  std::vector<std::uint32_t> merged;      // a batch: the union being merged
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
  // backend's status: not_handled means the engine should run its own kernel. The schedule's
  // value may also give the layer its own scorer, a per-token selector, a second stage and a
  // gate predictor (core/layer_setting.hpp); s.reads says what the call read.
  status operator()(std::size_t layer, const ffn_layer& w, std::span<const float> x, std::span<float> y,
                    selection& kept, ffn_scratch& s, typename Backend::executor_type& ex) const {
    return token(layer, w, x, {}, y, kept, s, ex);
  }

  // The same with the gate already computed by the engine (for example in a fused gate + up
  // GEMM): `gate` = W_gate·x before the activation, d_ff finite values. The op skips its own
  // gate pass and reads from the weights only W_up's and W_down's rows; with the backend's own
  // W_gate·x passed in, y and kept have the bits of the call above. A layer whose schedule
  // gives it a gate predictor is an error here (the predictor exists to avoid that pass).
  // s.reads still counts the d_ff gate rows: the call needs them, the engine read them.
  status operator()(std::size_t layer, const ffn_layer& w, std::span<const float> x, std::span<const float> gate,
                    std::span<float> y, selection& kept, ffn_scratch& s, typename Backend::executor_type& ex) const {
    constexpr std::string_view where = "neuron_sparse_ffn";
    detail::require(gate.size() == w.d_ff(), where, "gate.size()", gate.size(),
                    "d_ff = " + std::to_string(w.d_ff()) + " (W_gate·x, one value per neuron)");
    for (std::size_t j = 0; j < gate.size(); ++j) {
      if (!std::isfinite(gate[j])) {
        detail::fail(where, "gate[" + std::to_string(j) + "]", std::to_string(gate[j]), "a finite value of W_gate·x");
      }
    }
    detail::require(layer_gate_predictor(schedule.at(layer)) == nullptr, where, "gate", "given",
                    "no precomputed gate for a layer with a gate predictor (the predictor replaces that pass)");
    return token(layer, w, x, gate, y, kept, s, ex);
  }

  // A batch of decode tokens, or the tokens of a speculative verify pass: every row t of
  // `input` selects its own set S_t (kept[t], as a call for that token alone would, from the
  // gate computed here for all rows at once), and the FFN runs over the union U = ∪ S_t
  // (`united`) for every row: residual[t] += FFN_U(input[t]), each weight row of U read once
  // for the batch (token_ffn_args with neurons = U, the gate given). Each row's update equals
  // the one-token FFN over U (the union gathered) bit for bit on the CPU backend; the union
  // grows with the batch (benchmarks: cpu_ffn_batch, cpu_ffn_spec). s.reads counts the union.
  // One row runs the decode step itself (the token FFN's batch kernels are slower for one token).
  // Not for layers whose schedule gives a second stage or a gate predictor, nor a score from h
  // (clear errors): those read per token what a batch reads once.
  status batch(std::size_t layer, const ffn_layer& w, matrix_view<const float> input, matrix_view<float> residual,
               std::vector<selection>& kept, selection& united, ffn_scratch& s,
               typename Backend::executor_type& ex) const {
    constexpr std::string_view where = "neuron_sparse_ffn::batch";
    ACTSPARSE_REQUIRE_BACKEND_FOR(Backend, token_ffn_args);
    const auto setting = schedule.at(layer);
    const std::size_t d_ff = w.d_ff();
    const std::size_t n = input.rows;
    detail::require(layer_gate_predictor(setting) == nullptr, where, "schedule", "a gate predictor",
                    "a layer without a gate predictor (a batch computes the gate once for every token)");
    detail::require(!layer_refine(setting).cuts(d_ff), where, "schedule", "a second stage",
                    "a layer without a second stage (it reads per token what a batch reads once)");
    detail::require(source != score_source::hidden, where, "source", name(source),
                    "gate_preactivation or gate_activation (a score from h reads every row per token)");
    kept.resize(n);
    united.reset(d_ff);
    if (n == 1) {                   // one token: the decode step itself (its union is its own set)
      s.gates.resize(w.d_model());  // holds y here (the buffer grows once, as every scratch)
      const std::span<float> y(s.gates.data(), w.d_model());
      const status one = token(layer, w, std::span<const float>(input.row(0), input.cols), {}, y, kept[0], s, ex);
      if (!one) return one;
      united.indices.assign(kept[0].indices.begin(), kept[0].indices.end());
      float* const out = residual.row(0);
      for (std::size_t c = 0; c < y.size(); ++c) out[c] += y[c];
      return status::ok();
    }
    s.gates.resize(n * d_ff);
    const matrix_view<float> gates{s.gates.data(), n, d_ff, d_ff * sizeof(float)};
    status st = status::ok();
    if (n > 0) {
      if constexpr (backend_for<Backend, batched_gemv_args>) {
        st = run(backend, batched_gemv_args{w.gate, input, gates}, s.workspace, ex);
      } else {
        for (std::size_t t = 0; t < n && st; ++t) {
          st = run(backend,
                   gemv_args{w.gate, std::span<const float>(input.row(t), input.cols),
                             std::span<float>(gates.row(t), d_ff), subset::everything()},
                   s.workspace, ex);
        }
      }
    }
    if (!st) return st;
    if (layer_is_dense(setting)) {
      for (std::size_t t = 0; t < n; ++t) {
        kept[t].reset(d_ff);
        kept[t].keep_all(d_ff, fallback_reason::dense_layer);
        detail::activate(backend, w.act, std::span<float>(gates.row(t), d_ff));
      }
      united.keep_all(d_ff, fallback_reason::dense_layer);
    } else {
      const auto& layer_score = layer_scorer(scorer, setting);
      for (std::size_t t = 0; t < n; ++t) {
        const std::span<float> g(gates.row(t), d_ff);
        std::span<const float> values = g;
        if (source == score_source::gate_preactivation) {
          s.preactivation.assign(g.begin(), g.end());
          values = s.preactivation;
        }
        detail::activate(backend, w.act, g);
        const auto in = neuron_input<std::decay_t<decltype(layer_score)>>(values, w.act);
        s.scores.resize(layer_score.score_count(in));
        layer_score.score(in, s.scores);
        const Selector select =
            layer_selector(selector, setting, layer_input{std::span<const float>(input.row(t), input.cols), &s.token});
        select.select(std::span<const float>(s.scores), kept[t]);
        s.merged.clear();
        std::set_union(united.indices.begin(), united.indices.end(), kept[t].indices.begin(), kept[t].indices.end(),
                       std::back_inserter(s.merged));
        united.indices.swap(s.merged);
      }
    }
    const std::size_t u = united.size();
    s.reads = {d_ff, u, u, 0};
    const subset neurons = u == d_ff ? subset::everything() : subset::only(united.indices);
    return run(backend,
               token_ffn_args{w, input, residual, subset::everything(), neurons,
                              matrix_view<const float>{gates.data, n, d_ff, d_ff * sizeof(float)}},
               s.workspace, ex);
  }

  // The same for an op whose schedule is uniform (every layer alike): no layer to name.
  status operator()(const ffn_layer& w, std::span<const float> x, std::span<float> y, selection& kept, ffn_scratch& s,
                    typename Backend::executor_type& ex) const requires std::same_as<Schedule, uniform_schedule> {
    return (*this)(0, w, x, y, kept, s, ex);
  }
  status operator()(const ffn_layer& w, std::span<const float> x, std::span<const float> gate, std::span<float> y,
                    selection& kept, ffn_scratch& s,
                    typename Backend::executor_type& ex) const requires std::same_as<Schedule, uniform_schedule> {
    return (*this)(0, w, x, gate, y, kept, s, ex);
  }

 private:
  // s.reads.every_row / interleaved from the backend's plan of this call, when it has one.
  void note_path(const gated_ffn_args& a, ffn_scratch& s, typename Backend::executor_type& ex) const {
    if constexpr (requires { backend.plan(a, ex.concurrency()).every_row(); }) {
      const auto plan = backend.plan(a, ex.concurrency());
      s.reads.every_row = plan.every_row();
      s.reads.interleaved = plan.up_interleaved != nullptr;
      s.reads.down_columns = 0;
      if (plan.down_columns_copy != nullptr) {
        const std::size_t d_ff = a.weights.d_ff();
        if (a.neurons.all) {
          s.reads.down_columns = (d_ff + 31) / 32;
        } else {
          std::size_t last = d_ff;  // no column yet
          for (const std::uint32_t j : a.neurons.indices) {
            if (j / 32 != last) ++s.reads.down_columns;
            last = j / 32;
          }
        }
      }
    }
  }

  // One token; `given_gate` is the engine's W_gate·x, or empty to compute it (or predict it).
  status token(std::size_t layer, const ffn_layer& w, std::span<const float> x, std::span<const float> given_gate,
               std::span<float> y, selection& kept, ffn_scratch& s, typename Backend::executor_type& ex) const {
    const auto setting = schedule.at(layer);
    const std::size_t d_ff = w.d_ff();
    s.candidates.clear();
    if (layer_is_dense(setting)) {
      kept.reset(d_ff);
      kept.keep_all(d_ff, fallback_reason::dense_layer);
      s.reads = {d_ff, d_ff, d_ff, 0, true, false};
      gated_ffn_args args{w, x, y, subset::everything()};
      if (!given_gate.empty()) {
        s.gate.assign(given_gate.begin(), given_gate.end());
        detail::activate(backend, w.act, std::span<float>(s.gate));
        args.gate_act = borrowed_span<const float>(std::span<const float>(s.gate));
      }
      note_path(args, s, ex);
      return run(backend, args, s.workspace, ex);
    }
    const Selector layer_select = layer_selector(selector, setting, layer_input{x, &s.token});
    const auto& layer_score = layer_scorer(scorer, setting);
    const gate_factors* predictor = layer_gate_predictor(setting);
    s.gate.resize(d_ff);
    status st = status::ok();
    if (!given_gate.empty()) {
      s.gate.assign(given_gate.begin(), given_gate.end());
    } else {
      st = predictor == nullptr ? run(backend, gemv_args{w.gate, x, s.gate, subset::everything()}, s.workspace, ex)
                                : predict_gate(*predictor, w, x, s, ex);
    }
    if (!st) return st;
    std::span<const float> values = s.gate;
    if (source == score_source::gate_preactivation) {
      s.preactivation.assign(s.gate.begin(), s.gate.end());
      values = s.preactivation;
    }
    detail::activate(backend, w.act, std::span<float>(s.gate));
    if (source == score_source::hidden) {
      if (predictor != nullptr) {
        detail::fail("neuron_sparse_ffn", "source", name(source),
                     "gate_preactivation or gate_activation with a gate predictor (a score from h reads every row)");
      }
      s.up.resize(d_ff);
      s.hidden.resize(d_ff);
      st = run(backend, gemv_args{w.up, x, s.up, subset::everything()}, s.workspace, ex);
      if (!st) return st;
      for (std::size_t j = 0; j < d_ff; ++j) s.hidden[j] = s.gate[j] * s.up[j];
      values = s.hidden;
    }
    const auto input = neuron_input<std::decay_t<decltype(layer_score)>>(values, w.act);
    const std::size_t n = layer_score.score_count(input);
    detail::require(n == d_ff, "neuron_sparse_ffn", "scorer.score_count()", n, "d_ff (one score per neuron)");
    s.scores.resize(n);
    layer_score.score(input, s.scores);
    layer_select.select(std::span<const float>(s.scores), kept);
    const refine_rule refine = layer_refine(setting);
    const std::size_t predictor_bytes = predictor != nullptr ? predictor->bytes() : 0;
    if (!refine.cuts(kept.size())) {
      s.reads = {predictor != nullptr ? kept.size() : d_ff, source == score_source::hidden ? d_ff : kept.size(),
                 kept.size(), predictor_bytes};
      const borrowed_span<const float> gate_act =
          predictor != nullptr ? borrowed_span<const float>{} : borrowed_span<const float>(s.gate);
      const gated_ffn_args args{w, x, y, subset::only(kept.indices), gate_act};
      note_path(args, s, ex);
      return run(backend, args, s.workspace, ex);
    }
    return second_stage(refine, predictor, w, x, y, kept, s, ex);
  }

  // g̃ = U (A x) into s.gate.
  status predict_gate(const gate_factors& p, const ffn_layer& w, std::span<const float> x, ffn_scratch& s,
                      typename Backend::executor_type& ex) const {
    constexpr std::string_view where = "neuron_sparse_ffn";
    detail::require(p.a.cols == w.d_model() && p.u.rows == w.d_ff() && p.u.cols == p.a.rows, where, "gate predictor",
                    std::to_string(p.a.rows) + " x " + std::to_string(p.a.cols) + " and " + std::to_string(p.u.rows) +
                        " x " + std::to_string(p.u.cols),
                    "A [rank x d_model] and U [d_ff x rank] for this layer");
    s.low_rank.resize(p.a.rows);
    const status st = run(backend, gemv_args{p.a, x, s.low_rank, subset::everything()}, s.workspace, ex);
    if (!st) return st;
    return run(backend, gemv_args{p.u, s.low_rank, s.gate, subset::everything()}, s.workspace, ex);
  }

  // The second stage: exact h on the first stage's neurons, the refine rule's share of them by
  // |h_j|·weights[j], and the down projection of those only.
  status second_stage(const refine_rule& refine, const gate_factors* predictor, const ffn_layer& w,
                      std::span<const float> x, std::span<float> y, selection& kept, ffn_scratch& s,
                      typename Backend::executor_type& ex) const {
    constexpr std::string_view where = "neuron_sparse_ffn";
    const std::size_t d_ff = w.d_ff();
    detail::require(refine.weights.size() == d_ff, where, "refine_stage(...).weights.size()", refine.weights.size(),
                    "d_ff (one weight per neuron)");
    s.candidates.assign(kept.indices.begin(), kept.indices.end());
    const std::size_t c = s.candidates.size();
    const subset rows = subset::only(s.candidates);
    s.up.resize(c);
    status st = run(backend, gemv_args{w.up, x, s.up, rows}, s.workspace, ex);
    if (!st) return st;
    if (predictor != nullptr) {  // the gate of the kept rows, exact
      s.gate_rows.resize(c);
      st = run(backend, gemv_args{w.gate, x, s.gate_rows, rows}, s.workspace, ex);
      if (!st) return st;
      detail::activate(backend, w.act, std::span<float>(s.gate_rows));
    }
    s.scores.resize(c);
    s.hidden.assign(d_ff, 0.0F);
    for (std::size_t k = 0; k < c; ++k) {
      const std::uint32_t j = s.candidates[k];
      const float h = (predictor != nullptr ? s.gate_rows[k] : s.gate[j]) * s.up[k];
      s.hidden[j] = h;
      s.scores[k] = std::fabs(h) * refine.weights[j];
    }
    top_k::by_count(refine.kept_of(c)).select(std::span<const float>(s.scores), s.refined);
    kept.indices.clear();
    for (const std::uint32_t k : s.refined.indices) kept.indices.push_back(s.candidates[k]);
    kept.covered_mass = 0.0;  // the first stage's masses are not the kept set's
    kept.total_mass = 0.0;
    s.reads = {predictor != nullptr ? c : d_ff, c, kept.size(), predictor != nullptr ? predictor->bytes() : 0};
    if constexpr (backend_for<Backend, transposed_linear_args>) {
      if (!w.down_t.absent()) {
        return run(backend, transposed_linear_args{w.down_t, s.hidden, y, subset::only(kept.indices)}, s.workspace, ex);
      }
    }
    if constexpr (backend_for<Backend, linear_args>) {
      if (!w.down.absent()) {
        return run(backend, linear_args{w.down, s.hidden, y, subset::only(kept.indices)}, s.workspace, ex);
      }
    }
    return status::not_handled(
        "neuron_sparse_ffn: a second stage needs transposed_linear_args over W_downᵀ or "
        "linear_args over W_down");
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
