#pragma once
// Token-sparse FFN for prefill (RedKnot Algorithm 1): score each token (by default the L2 norm
// of its attention output), keep tokens with the selector the schedule configures for this
// layer (by default cumulative mass, plus the recent_n last tokens, at least min_keep), run the
// FFN on the kept rows only and add it to their residual; the other tokens pass through
// unchanged. A layer the schedule marks dense runs every token.

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/layer_setting.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/ops/run.hpp>
#include <actsparse/schedules/depth_schedule.hpp>
#include <actsparse/scorers/token_l2.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>

#include <cstddef>
#include <span>
#include <vector>

namespace actsparse {

struct token_scratch {
  std::vector<float> scores;
  std::vector<std::byte> workspace;
};

template <class Backend, class Scorer = token_l2, class Selector = cumulative_mass, class Schedule = depth_schedule>
struct token_sparse_ffn {
  ACTSPARSE_REQUIRE_IMPORTANCE_SCORER(Scorer);
  ACTSPARSE_REQUIRE_SELECTOR(Selector);
  ACTSPARSE_REQUIRE_LAYER_SCHEDULE(Schedule);
  ACTSPARSE_REQUIRE_CONFIGURES(typename Schedule::value_type, Selector);
  ACTSPARSE_REQUIRE_BACKEND_FOR(Backend, token_ffn_args);

  Schedule schedule;
  Scorer scorer{};
  Backend backend{};
  Selector selector{};  // the base selector; schedule.at(layer) configures it per layer

  // residual[t] += FFN(input[t]) for the kept tokens t of this layer; writes them to `kept`.
  //   attention_out [tokens × d_model]: what tokens are scored by
  //   input         [tokens × d_model]: the FFN input (the normalised residual)
  status operator()(std::size_t layer, const ffn_layer& w, matrix_view<const float> attention_out,
                    matrix_view<const float> input, matrix_view<float> residual, selection& kept, token_scratch& s,
                    typename Backend::executor_type& ex) const {
    const std::size_t tokens = input.rows;
    detail::require(attention_out.rows == tokens, "token_sparse_ffn", "attention_out.rows", attention_out.rows,
                    "the number of tokens (input.rows)");
    const auto setting = schedule.at(layer);
    const bool dense = layer_is_dense(setting);
    if (dense || tokens == 0) {
      kept.reset(tokens);
      kept.keep_all(tokens, dense ? fallback_reason::dense_layer : fallback_reason::none);
    } else {
      const typename Scorer::input_type scored(attention_out);
      s.scores.resize(scorer.score_count(scored));
      scorer.score(scored, s.scores);
      layer_selector(selector, setting).select(std::span<const float>(s.scores), kept);
    }
    const subset tokens_run = dense ? subset::everything() : subset::only(kept.indices);
    return run(backend, token_ffn_args{w, input, residual, tokens_run}, s.workspace, ex);
  }
};

}  // namespace actsparse
