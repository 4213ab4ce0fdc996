#pragma once
// Input-sparse linear layer (TEAL style): score the input channels (|x_j|, or |x_j|·‖W[:, j]‖),
// select, and compute y = Σ_{j∈S} W[:, j]·x_j, skipping the weights of the dropped channels.

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>

#include <cstddef>
#include <span>
#include <vector>

namespace actsparse {

struct linear_scratch {
  std::vector<float> scores;
  std::vector<std::byte> workspace;
};

template <class Scorer, class Selector, class Backend>
struct input_sparse_linear {
  ACTSPARSE_REQUIRE_IMPORTANCE_SCORER(Scorer);
  ACTSPARSE_REQUIRE_SELECTOR(Selector);
  ACTSPARSE_REQUIRE_BACKEND_FOR(Backend, linear_args);

  Scorer scorer;
  Selector selector;
  Backend backend{};

  // y = W·x over the kept input channels; the kept channels are written into `kept`.
  status operator()(const weight_view& w, std::span<const float> x, std::span<float> y, selection& kept,
                    linear_scratch& s, typename Backend::executor_type& ex) const {
    const typename Scorer::input_type input(x);
    const std::size_t n = scorer.score_count(input);
    detail::require(n == x.size(), "input_sparse_linear", "scorer.score_count()", n,
                    "x.size() (one score per input channel)");
    s.scores.resize(n);
    scorer.score(input, s.scores);
    selector.select(std::span<const float>(s.scores), kept);
    return detail::run_op(backend, linear_args{w, x, y, subset::only(kept.indices)}, s.workspace, ex);
  }
};

template <class Scorer, class Selector, class Backend>
input_sparse_linear(Scorer, Selector, Backend) -> input_sparse_linear<Scorer, Selector, Backend>;

}  // namespace actsparse
