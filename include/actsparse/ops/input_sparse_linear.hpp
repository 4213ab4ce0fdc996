#pragma once
// Input-sparse linear layer (TEAL style): score the input channels (|x_j|, or |x_j|·‖W[:, j]‖),
// select, and compute y = Σ_{j∈S} W[:, j]·x_j, skipping the weights of the dropped channels.
// With Wᵀ given (linear_layer::wt) and a backend that runs transposed_linear_args, a dropped
// channel is a row not read; otherwise the backend's linear_args runs on W.

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/layer_setting.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/ops/run.hpp>
#include <actsparse/schedules/uniform_schedule.hpp>

#include <cstddef>
#include <span>
#include <vector>

namespace actsparse {

struct linear_scratch {
  std::vector<float> scores;
  std::vector<std::byte> workspace;
};

template <class Scorer, class Selector, class Backend, class Schedule = uniform_schedule>
struct input_sparse_linear {
  ACTSPARSE_REQUIRE_IMPORTANCE_SCORER(Scorer);
  ACTSPARSE_REQUIRE_SELECTOR(Selector);
  ACTSPARSE_REQUIRE_LAYER_SCHEDULE(Schedule);
  ACTSPARSE_REQUIRE_CONFIGURES(typename Schedule::value_type, Selector);
  static_assert(backend_for<Backend, linear_args> || backend_for<Backend, transposed_linear_args>,
                "actsparse: input_sparse_linear needs a backend for linear_args or transposed_linear_args");

  Scorer scorer;
  Selector selector;  // the base selector; schedule.at(layer) configures it per layer
  Backend backend{};
  Schedule schedule{};

  // y = W·x over the kept input channels of layer `layer`; the kept channels are written into
  // `kept`. A layer the schedule marks dense keeps every channel.
  status operator()(std::size_t layer, const linear_layer& w, std::span<const float> x, std::span<float> y,
                    selection& kept, linear_scratch& s, typename Backend::executor_type& ex) const {
    const auto setting = schedule.at(layer);
    if (layer_is_dense(setting)) {
      kept.reset(x.size());
      kept.keep_all(x.size(), fallback_reason::dense_layer);
      return linear(w, x, y, subset::everything(), s, ex);
    }
    const typename Scorer::input_type input(x);
    const std::size_t n = scorer.score_count(input);
    detail::require(n == x.size(), "input_sparse_linear", "scorer.score_count()", n,
                    "x.size() (one score per input channel)");
    s.scores.resize(n);
    scorer.score(input, s.scores);
    layer_selector(selector, setting).select(std::span<const float>(s.scores), kept);
    return linear(w, x, y, subset::only(kept.indices), s, ex);
  }

  // The same for an op whose schedule is uniform: no layer to name.
  status operator()(const linear_layer& w, std::span<const float> x, std::span<float> y, selection& kept,
                    linear_scratch& s,
                    typename Backend::executor_type& ex) const requires std::same_as<Schedule, uniform_schedule> {
    return (*this)(0, w, x, y, kept, s, ex);
  }

 private:
  status linear(const linear_layer& w, std::span<const float> x, std::span<float> y, subset inputs, linear_scratch& s,
                typename Backend::executor_type& ex) const {
    if (w.w.absent() && w.wt.absent()) {
      detail::fail_described("input_sparse_linear", "w", "a linear_layer with neither w nor wt",
                             "W [out x in] in w, or W transposed [in x out] in wt");
    }
    if constexpr (backend_for<Backend, transposed_linear_args>) {
      if (!w.wt.absent()) return run(backend, transposed_linear_args{w.wt, x, y, inputs}, s.workspace, ex);
    }
    if constexpr (backend_for<Backend, linear_args>) {
      if (!w.w.absent()) return run(backend, linear_args{w.w, x, y, inputs}, s.workspace, ex);
    }
    return status::not_handled(backend_for<Backend, linear_args>
                                   ? "input_sparse_linear: this backend runs linear_args only: give linear_layer::w"
                                   : "input_sparse_linear: this backend runs transposed_linear_args only: give "
                                     "linear_layer::wt");
  }
};

template <class Scorer, class Selector, class Backend>
input_sparse_linear(Scorer, Selector, Backend) -> input_sparse_linear<Scorer, Selector, Backend>;

}  // namespace actsparse
