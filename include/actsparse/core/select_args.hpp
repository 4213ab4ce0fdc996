#pragma once
// Selection as a backend operation, for engines that keep a whole decode step on one device:
// the backend scores (optionally) and selects in its own memory and writes the kept indices
// and their count there; nothing is read back to the host. The rules are three host selectors'
// (selectors/threshold.hpp, top_k.hpp, cumulative_mass.hpp, without recent_n); exactly where a
// backend's answer may differ from theirs is in docs/POLICIES.md, "Device selection".
//
// Lifetimes as op_args.hpp: every span points at memory (the backend's: device memory for the
// CUDA backend) that outlives the call; a backend may return before the results are written
// (cuda_backend: enqueued on its stream), so they must outlive that too.

#include <actsparse/core/activation.hpp>
#include <actsparse/core/borrowed_span.hpp>
#include <actsparse/core/check_args.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/views.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace actsparse {

// Which candidates to keep, with the rule's parameters (build it with the named functions).
struct device_rule {
  enum class kind : std::uint8_t { threshold, top_k, cumulative_mass };
  kind what = kind::top_k;
  float t = 0.0F;            // threshold: the scores > t (threshold{t})
  std::size_t k = 0;         // top_k: the k highest, ties to the lower index (top_k::by_count(k))
  float mass = 1.0F;         // cumulative_mass: the smallest top set holding mass of the total,
  std::size_t min_keep = 0;  //   and at least min(min_keep, n) (cumulative_mass{mass, 0, min_keep})

  [[nodiscard]] static constexpr device_rule threshold(float t) noexcept { return {kind::threshold, t}; }
  [[nodiscard]] static constexpr device_rule top_k(std::size_t k) noexcept { return {kind::top_k, 0.0F, k}; }
  [[nodiscard]] static constexpr device_rule cumulative_mass(float mass, std::size_t min_keep = 0) noexcept {
    return {kind::cumulative_mass, 0.0F, 0, mass, min_keep};
  }
};

// Scores the backend computes: |act(gate · x)| for every row of gate, the activation written to
// h (what gated_ffn_args::gate_act takes next, so the gate is computed once).
struct gate_scores {
  weight_view gate{};  // [d_ff x d_model]
  activation act = activation::silu;
  borrowed_span<const float> x{};  // d_model
  borrowed_span<float> h{};        // d_ff, overwritten with act(gate · x)
};

// Keeps candidates by `rule`, from `scores` or, when gate.gate is given, from the gate it
// computes. indices[0 .. *count) = the kept candidates in increasing order.
struct device_select_args {
  device_rule rule;
  borrowed_span<const float> scores{};   // n scores; empty when gate computes them
  gate_scores gate{};                    // optional
  borrowed_span<std::uint32_t> indices;  // at least n entries
  borrowed_span<std::uint32_t> count;    // one entry

  [[nodiscard]] bool computes_scores() const noexcept { return !gate.gate.absent(); }
  // The number of candidates.
  [[nodiscard]] std::size_t n() const noexcept { return computes_scores() ? gate.gate.rows : scores.size(); }
};

// O(1): the views, the sizes and the rule's parameters (as the host selector checks them).
inline void check_shapes(const device_select_args& a, std::string_view where) {
  const std::size_t n = a.n();
  if (a.computes_scores()) {
    validate(a.gate.gate, where, "gate.gate");
    detail::check_size(a.gate.x.size(), a.gate.gate.cols, where, "gate.x.size()", "gate.gate.cols");
    detail::check_size(a.gate.h.size(), a.gate.gate.rows, where, "gate.h.size()", "gate.gate.rows, the candidates");
    detail::check_size(a.scores.size(), 0, where, "scores.size()", "0: the scores are computed from gate");
  }
  if (a.indices.size() < n) {
    detail::fail(where, "indices.size()", a.indices.size(),
                 "at least " + std::to_string(n) + " (the candidates: every one may be kept)");
  }
  detail::check_size(a.count.size(), 1, where, "count.size()", "1, where the number kept is written");
  switch (a.rule.what) {
    case device_rule::kind::threshold:
      detail::require(!std::isnan(a.rule.t), where, "rule.t", a.rule.t, "a threshold that is not NaN");
      break;
    case device_rule::kind::top_k:
      detail::require(a.rule.k <= n, where, "rule.k", a.rule.k,
                      "at most n = " + std::to_string(n) + " (the candidates)");
      break;
    case device_rule::kind::cumulative_mass:
      detail::require(std::isfinite(a.rule.mass) && a.rule.mass > 0.0F, where, "rule.mass", a.rule.mass,
                      "a finite mass > 0");
      break;
    default:
      detail::fail(where, "rule.what", static_cast<int>(a.rule.what), "threshold, top_k or cumulative_mass");
  }
}

// No index list to walk: the same checks (so that run_checked accepts these arguments).
inline void check_arguments(const device_select_args& a, std::string_view where) { check_shapes(a, where); }

}  // namespace actsparse
