#pragma once
// Per-layer budgets by TEAL's greedy search. Every layer has one or more knobs, each a ladder of
// positions from dense (0) to sparser; a state gives every knob of every layer a position. From
// the all-dense state the search repeatedly makes the one-rung move (one knob of one layer)
// whose measured quality loss per byte saved is smallest, with every other knob where it is,
// until the model reads no more than the smallest target. The path it walks gives the settings
// for every byte target at once: the first state on it that reads no more than the target.
//
// The search knows nothing of models: the caller says what a position reads (layer_bytes) and
// measures states (evaluate: the KL of the model on a calibration sample, and the bytes it
// really read). Candidates of one step are handed to evaluate together, so a caller may measure
// them in parallel; the choice among them is fixed (lowest cost, then lowest layer, then lowest
// knob), so the path does not depend on how they were measured.

#include <actsparse/core/error.hpp>

#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace actsparse {

// positions[layer * knobs + knob]
struct budget_state {
  std::vector<std::size_t> positions;
  friend bool operator==(const budget_state&, const budget_state&) = default;
};

// What evaluate measures for a state.
struct budget_measure {
  double kl = 0.0;     // the quality loss (mean KL against dense on the calibration sample)
  double bytes = 1.0;  // the fraction of the weight bytes the state really read
};

struct budget_problem {
  std::size_t layers = 0;
  std::vector<std::size_t> rungs;  // per knob: its positions 0 .. rungs - 1 (0 = dense)
  // The fraction of one layer's bytes read at these positions of its knobs (knobs values).
  std::function<double(std::size_t layer, std::span<const std::size_t> positions)> layer_bytes;
  // Whether a layer may take these positions (e.g. a second-stage keep no larger than the
  // first); empty: every combination is allowed.
  std::function<bool(std::size_t layer, std::span<const std::size_t> positions)> allowed;
  // Measures each state of the batch into the matching entry of out.
  std::function<void(std::span<const budget_state> states, std::span<budget_measure> out)> evaluate;
};

struct budget_step {
  budget_state state;
  double predicted_bytes = 1.0;  // mean of layer_bytes over the layers
  budget_measure measured;       // what evaluate measured
};

class budget_path {
 public:
  budget_path() = default;
  explicit budget_path(std::vector<budget_step> steps) : steps_(std::move(steps)) {}

  [[nodiscard]] std::span<const budget_step> steps() const noexcept { return steps_; }
  [[nodiscard]] std::size_t size() const noexcept { return steps_.size(); }

  // The first state on the path whose measured bytes are at most target (the densest that fits).
  [[nodiscard]] const budget_step& for_bytes(double target) const {
    for (const budget_step& s : steps_) {
      if (s.measured.bytes <= target) return s;
    }
    detail::fail("budget_path::for_bytes", "target", target,
                 "a byte fraction the search reached (its last state reads " +
                     (steps_.empty() ? std::string("nothing") : std::to_string(steps_.back().measured.bytes)) + ")");
  }

 private:
  std::vector<budget_step> steps_;
};

// Walks the greedy path from the all-dense state down to min_bytes (predicted); progress(step,
// predicted bytes) is called after each move when given.
[[nodiscard]] inline budget_path greedy_budget_search(const budget_problem& p, double min_bytes,
                                                      const std::function<void(std::size_t, double)>& progress = {}) {
  constexpr std::string_view where = "greedy_budget_search";
  detail::require(p.layers >= 1, where, "problem.layers", p.layers, "at least one layer");
  detail::require(!p.rungs.empty(), where, "problem.rungs", "empty", "at least one knob");
  for (std::size_t k = 0; k < p.rungs.size(); ++k) {
    detail::require(p.rungs[k] >= 1, where, "problem.rungs[" + std::to_string(k) + "]", p.rungs[k],
                    "at least one position");
  }
  detail::require(static_cast<bool>(p.layer_bytes), where, "problem.layer_bytes", "empty", "a function");
  detail::require(static_cast<bool>(p.evaluate), where, "problem.evaluate", "empty", "a function");
  detail::require(min_bytes >= 0.0 && min_bytes <= 1.0, where, "min_bytes", min_bytes, "a fraction in [0, 1]");
  const std::size_t knobs = p.rungs.size();
  const auto layer_positions = [&](const budget_state& s, std::size_t l) {
    return std::span<const std::size_t>(s.positions.data() + l * knobs, knobs);
  };
  const auto bytes_of_layer = [&](const budget_state& s, std::size_t l) {
    const double b = p.layer_bytes(l, layer_positions(s, l));
    if (!(b >= 0.0 && b <= 1.0)) {
      detail::fail(where, "layer_bytes(" + std::to_string(l) + ", ...)", b, "a byte fraction in [0, 1]");
    }
    return b;
  };
  const auto bytes_of = [&](const budget_state& s) {
    double sum = 0.0;
    for (std::size_t l = 0; l < p.layers; ++l) sum += bytes_of_layer(s, l);
    return sum / static_cast<double>(p.layers);
  };

  budget_state cur{std::vector<std::size_t>(p.layers * knobs, 0)};
  budget_measure cur_m;
  {
    budget_measure m[1];
    p.evaluate(std::span<const budget_state>(&cur, 1), m);
    cur_m = m[0];
  }
  std::vector<budget_step> path{{cur, bytes_of(cur), cur_m}};
  std::vector<budget_state> cands;
  std::vector<std::pair<std::size_t, std::size_t>> moves;  // (layer, knob)
  std::vector<budget_measure> measured;
  while (path.back().predicted_bytes > min_bytes) {
    cands.clear();
    moves.clear();
    for (std::size_t l = 0; l < p.layers; ++l) {
      for (std::size_t k = 0; k < knobs; ++k) {
        if (cur.positions[l * knobs + k] + 1 >= p.rungs[k]) continue;
        budget_state next = cur;
        ++next.positions[l * knobs + k];
        if (p.allowed && !p.allowed(l, layer_positions(next, l))) continue;
        if (bytes_of_layer(next, l) >= bytes_of_layer(cur, l)) continue;  // a move must save bytes
        cands.push_back(std::move(next));
        moves.emplace_back(l, k);
      }
    }
    if (cands.empty()) break;
    measured.assign(cands.size(), budget_measure{});
    p.evaluate(cands, measured);
    std::size_t best = 0;
    double best_cost = std::numeric_limits<double>::infinity();
    for (std::size_t c = 0; c < cands.size(); ++c) {
      const std::size_t l = moves[c].first;
      const double saved = (bytes_of_layer(cur, l) - bytes_of_layer(cands[c], l)) / static_cast<double>(p.layers);
      const double cost = (measured[c].kl - cur_m.kl) / saved;
      if (std::isnan(cost)) detail::fail(where, "evaluate(...).kl", measured[c].kl, "a number (not NaN)");
      if (cost < best_cost) {  // strict: ties keep the lower layer, then the lower knob
        best_cost = cost;
        best = c;
      }
    }
    cur = cands[best];
    cur_m = measured[best];
    path.push_back({cur, bytes_of(cur), cur_m});
    if (progress) progress(path.size() - 1, path.back().predicted_bytes);
  }
  return budget_path(std::move(path));
}

}  // namespace actsparse
