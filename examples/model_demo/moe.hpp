#pragma once
// A real mixture-of-experts model made from the demo's dense one (MoEfication, Zhang et al. 2022):
// every layer's FFN split into 8 experts of co-activated neurons, a linear router fitted to
// predict which experts matter for a token, and the MoE rows of the demo run through
// actsparse::moe_ffn on the CPU backend.
//
//   1. Experts. The calibration sample (the sequences main.cpp samples with seed 1'000'000,
//      disjoint from the evaluation set) runs through the dense model; the probe of the
//      calibration pipeline (examples/calibration/pipeline.hpp) records every FFN's input x and
//      h = act(W_gate x) ⊙ (W_up x). Each neuron j's pattern is |h_j| over the calibration tokens,
//      normalised to unit length; balanced spherical k-means (cosine similarity, 8 centroids
//      initialised by farthest-point from the neuron of largest mean |h|, no random numbers)
//      groups them into 8 clusters of ⌈d_ff/8⌉ or ⌊d_ff/8⌋ neurons (172: four of 22, four of 21;
//      each assignment step is a greedy pass over all (neuron, centroid) pairs by decreasing
//      similarity under those capacities). Every expert is padded to ⌈d_ff/8⌉ neurons with
//      all-zero neurons (zero gate and up rows, zero W_down column: silu(0)·0 = 0, exactly nothing
//      added) and stored stacked as engines hold experts: one f32 buffer per projection
//      (gate, up, down_t [8 × 22 × d_model]), a stacked_view with expert_stride 22·d_model·4 bytes.
//   2. Router. Expert e's contribution to a token is m_e(x) = ‖FFN_e(x)‖₂ (the dense FFN is the
//      sum of the 8 expert outputs). The router is a linear map [x, 1] → 8 logits fitted by ridge
//      least squares (Eigen, LDLT of the normal equations, the bias not penalised) to the centred
//      log shares log(m_e/Σm + 1e-3) − mean_e(...), so softmax(logits) predicts each expert's
//      share of the contribution mass. The ridge strength is chosen among 6 values by the held-out
//      squared error on every 5th calibration token, then the router is refitted on all of them.
//      Its weights: f32 [8 × d_model] and a bias of 8.
//   3. Policy. logits = W_router·x + b (the CPU GEMV), then moe_ffn<cpu_backend> with the
//      routing moe_gating::top_k_unit (MoEfication adds the chosen experts' outputs with weight 1:
//      all 8 experts are the dense FFN up to the f32 summation order). Bytes per token: the
//      chosen experts' three matrices as moe_scratch::reads.weight_bytes counts them (what the
//      stacked kernel reads, the padded zero rows included: 22 rows per expert, so the all-experts
//      row reads 176/172 of the dense FFN) plus the router's 8·(d_model + 1)·4 bytes, over the
//      dense FFN's 3·d_ff·d_model·4; kept = experts per token / 8.
//   4. Router quality, on the evaluation set's dense FFN inputs: for k in {1, 2, 3, 4, 6}, the
//      mean over tokens and layers of Σ m_e over the router's top k / Σ m_e over the true top k
//      (1 is a perfect router).

#include "calibration/pipeline.hpp"
#include "harness.hpp"
#include "llama2c/model.hpp"
#include "policies.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/routing.hpp>
#include <actsparse/ops/moe_ffn.hpp>
#include <actsparse/ops/moe_router.hpp>
#include <actsparse/schedules/progressive_top_k.hpp>
#include <actsparse/selectors/adaptive_top_k.hpp>

#include <Eigen/Dense>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace model_demo {

// The router-quality ks (the JSON's keys).
inline constexpr std::array<std::size_t, 5> moe_quality_ks{1, 2, 3, 4, 6};

// One layer's experts and router.
struct moe_layer {
  std::vector<std::vector<std::uint32_t>> neurons;  // per expert: the dense neuron ids, ascending
  std::vector<float> gate, up, down_t;              // [experts × d_ff_expert × d_model], zero-padded
  std::vector<float> router;                        // [experts × d_model]
  std::vector<float> bias;                          // [experts]
};

// The MoEfied model: every layer's experts and router, and what the fit measured.
struct moefied {
  std::size_t experts = 8;
  std::size_t d_model = 0, d_ff = 0, d_ff_expert = 0;
  std::vector<moe_layer> layers;
  std::size_t calibration_tokens = 0;
  std::size_t kmeans_iterations = 0;  // the most any layer took
  double ridge = 0.0;                 // the chosen ridge strength, relative to tr(XᵀX)/d_model
  std::array<double, moe_quality_ks.size()> router_quality{};
  std::size_t quality_tokens = 0;  // evaluation tokens × layers
  double fit_seconds = 0.0, quality_seconds = 0.0;

  [[nodiscard]] bool fitted() const noexcept { return !layers.empty(); }

  [[nodiscard]] actsparse::moe_experts view(std::size_t layer) const {
    const moe_layer& l = layers.at(layer);
    const std::size_t stride = d_ff_expert * d_model * sizeof(float);
    const auto stack = [&](const std::vector<float>& b) {
      weight_view first(b.data(), dtype::f32, d_ff_expert, d_model, d_model * sizeof(float));
      return actsparse::stacked_view{first, experts, stride};
    };
    actsparse::moe_experts x;
    x.act = activation::silu;
    x.gate = stack(l.gate);
    x.up = stack(l.up);
    x.down_t = stack(l.down_t);
    return x;
  }
  [[nodiscard]] weight_view router_view(std::size_t layer) const {
    return {layers.at(layer).router.data(), dtype::f32, experts, d_model, d_model * sizeof(float)};
  }
  // Bytes one token's routing reads: the router's weights and bias.
  [[nodiscard]] std::size_t router_bytes() const noexcept { return experts * (d_model + 1) * sizeof(float); }
};

namespace moe_detail {

// Every FFN input x and h = act(g) ⊙ u of the dense model over `sequences`, per layer, in order.
struct ffn_record {
  std::vector<std::vector<float>> x, h;  // per layer: [tokens × d_model], [tokens × d_ff]
  std::size_t tokens = 0;
};

inline ffn_record record(const model& m, const std::vector<std::vector<int>>& sequences) {
  ffn_record r;
  r.x.resize(m.layers());
  r.h.resize(m.layers());
  calibration_run::detail::probe p;
  p.on_ffn = [&](std::size_t l, std::span<const float> x, std::span<const float> g, std::span<const float> u) {
    r.x[l].insert(r.x[l].end(), x.begin(), x.end());
    const activation act = m.ffn(l).act;
    for (std::size_t j = 0; j < g.size(); ++j) r.h[l].push_back(actsparse::apply(act, g[j]) * u[j]);
  };
  for (const auto& q : sequences) {
    auto cache = m.new_cache();
    std::vector<float> logits(q.size() * m.vocab());
    m.prefill(q, cache, logits, p);
    r.tokens += q.size();
  }
  return r;
}

// Expert contributions of one token: m[e] = ‖Σ_{j in e} h_j W_down[:, j]‖₂ (double).
inline void contributions(std::span<const float> h, const weight_view& down_t,
                          const std::vector<std::vector<std::uint32_t>>& neurons, std::vector<double>& acc,
                          std::span<double> m) {
  const auto dt = down_t.as<float>();
  acc.resize(dt.cols);
  for (std::size_t e = 0; e < neurons.size(); ++e) {
    std::fill(acc.begin(), acc.end(), 0.0);
    for (const std::uint32_t j : neurons[e]) {
      const double hj = h[j];
      const float* row = dt.row(j);
      for (std::size_t i = 0; i < acc.size(); ++i) acc[i] += hj * static_cast<double>(row[i]);
    }
    double ss = 0.0;
    for (const double v : acc) ss += v * v;
    m[e] = std::sqrt(ss);
  }
}

// Balanced spherical k-means of the rows of `patterns` [n × dim] (unit rows, or zero) into k
// clusters of ⌈n/k⌉ or ⌊n/k⌋ rows; `first`: the row that seeds the first centroid. Returns the
// cluster of every row; `iterations` the assignment steps taken.
inline std::vector<std::uint32_t> balanced_kmeans(const std::vector<double>& patterns, std::size_t n, std::size_t dim,
                                                  std::size_t k, std::size_t first, std::size_t& iterations) {
  const auto row = [&](std::size_t j) { return patterns.data() + j * dim; };
  const auto dot = [dim](const double* a, const double* b) {
    double s = 0.0;
    for (std::size_t i = 0; i < dim; ++i) s += a[i] * b[i];
    return s;
  };
  // Farthest-point initialisation: each next centroid the row least similar to the chosen ones.
  std::vector<double> centroids(k * dim);
  std::vector<double> best_sim(n, -HUGE_VAL);
  std::size_t pick = first;
  for (std::size_t c = 0; c < k; ++c) {
    std::copy(row(pick), row(pick) + dim, centroids.begin() + static_cast<std::ptrdiff_t>(c * dim));
    for (std::size_t j = 0; j < n; ++j) best_sim[j] = std::max(best_sim[j], dot(row(j), row(pick)));
    best_sim[pick] = HUGE_VAL;  // never picked twice
    pick = static_cast<std::size_t>(std::min_element(best_sim.begin(), best_sim.end()) - best_sim.begin());
  }
  const std::size_t base = n / k;
  const std::size_t extra = n % k;  // clusters that take base + 1
  std::vector<std::uint32_t> assign(n, 0), previous;
  struct pair {
    double sim;
    std::uint32_t j, c;
  };
  std::vector<pair> pairs(n * k);
  iterations = 0;
  for (std::size_t it = 0; it < 100; ++it) {
    ++iterations;
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t c = 0; c < k; ++c) {
        pairs[j * k + c] = {dot(row(j), centroids.data() + c * dim), static_cast<std::uint32_t>(j),
                            static_cast<std::uint32_t>(c)};
      }
    }
    std::sort(pairs.begin(), pairs.end(), [](const pair& a, const pair& b) {
      return a.sim != b.sim ? a.sim > b.sim : (a.j != b.j ? a.j < b.j : a.c < b.c);
    });
    std::vector<std::size_t> size(k, 0);
    std::vector<std::uint8_t> done(n, 0);
    std::size_t big = 0;
    for (const pair& p : pairs) {
      if (done[p.j] != 0) continue;
      const std::size_t cap = big < extra ? base + 1 : base;
      if (size[p.c] >= cap) continue;
      assign[p.j] = p.c;
      done[p.j] = 1;
      if (++size[p.c] == base + 1) ++big;
    }
    if (assign == previous) break;
    previous = assign;
    // New centroids: the normalised mean of each cluster's rows.
    std::fill(centroids.begin(), centroids.end(), 0.0);
    for (std::size_t j = 0; j < n; ++j) {
      double* c = centroids.data() + assign[j] * dim;
      for (std::size_t i = 0; i < dim; ++i) c[i] += row(j)[i];
    }
    for (std::size_t c = 0; c < k; ++c) {
      double* v = centroids.data() + c * dim;
      const double norm = std::sqrt(dot(v, v));
      if (norm > 0.0) {
        for (std::size_t i = 0; i < dim; ++i) v[i] /= norm;
      }
    }
  }
  return assign;
}

// Ridge least squares W = (AᵀA + λ·D)⁻¹ AᵀY over the rows `use` of A = [X, 1] (D: identity on
// the x part, 0 on the bias); (d + 1) × outputs.
inline Eigen::MatrixXd ridge_fit(const Eigen::MatrixXd& a, const Eigen::MatrixXd& y, const std::vector<char>& use,
                                 double lambda) {
  const auto n = static_cast<Eigen::Index>(std::count(use.begin(), use.end(), char{1}));
  Eigen::MatrixXd as(n, a.cols());
  Eigen::MatrixXd ys(n, y.cols());
  Eigen::Index r = 0;
  for (std::size_t t = 0; t < use.size(); ++t) {
    if (use[t] == 0) continue;
    as.row(r) = a.row(static_cast<Eigen::Index>(t));
    ys.row(r++) = y.row(static_cast<Eigen::Index>(t));
  }
  Eigen::MatrixXd g = as.transpose() * as;
  for (Eigen::Index i = 0; i + 1 < g.cols(); ++i) g(i, i) += lambda;
  return g.ldlt().solve(as.transpose() * ys);
}

}  // namespace moe_detail

// Splits every layer's FFN of `m` into `experts` experts and fits each layer's router, on the
// calibration sequences (see the top of this file).
inline moefied moefy(const model& m, const std::vector<std::vector<int>>& calibration, std::size_t experts = 8) {
  const auto start = std::chrono::steady_clock::now();
  moefied out;
  out.experts = experts;
  out.d_model = m.dim();
  out.d_ff = m.ffn(0).d_ff();
  out.d_ff_expert = (out.d_ff + experts - 1) / experts;
  const std::size_t d = out.d_model;
  const std::size_t n = out.d_ff;
  const moe_detail::ffn_record rec = moe_detail::record(m, calibration);
  const std::size_t tokens = rec.tokens;
  out.calibration_tokens = tokens;
  const std::vector<double> lambdas{1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0};
  std::vector<double> held_out_error(lambdas.size(), 0.0);
  std::vector<Eigen::MatrixXd> a_of(m.layers()), y_of(m.layers());
  std::vector<double> scale_of(m.layers());
  for (std::size_t l = 0; l < m.layers(); ++l) {
    const std::vector<float>& h = rec.h[l];
    const std::vector<float>& x = rec.x[l];
    // 1. Clusters of normalised |h_j| patterns.
    std::vector<double> patterns(n * tokens);
    std::size_t first = 0;
    double first_mean = -1.0;
    for (std::size_t j = 0; j < n; ++j) {
      double ss = 0.0, sum = 0.0;
      for (std::size_t t = 0; t < tokens; ++t) {
        const double v = std::fabs(static_cast<double>(h[t * n + j]));
        patterns[j * tokens + t] = v;
        ss += v * v;
        sum += v;
      }
      const double norm = std::sqrt(ss);
      if (norm > 0.0) {
        for (std::size_t t = 0; t < tokens; ++t) patterns[j * tokens + t] /= norm;
      }
      if (sum > first_mean) {
        first_mean = sum;
        first = j;
      }
    }
    std::size_t iterations = 0;
    const std::vector<std::uint32_t> cluster =
        moe_detail::balanced_kmeans(patterns, n, tokens, experts, first, iterations);
    out.kmeans_iterations = std::max(out.kmeans_iterations, iterations);
    std::vector<std::vector<std::uint32_t>> groups(experts);
    for (std::size_t j = 0; j < n; ++j) groups[cluster[j]].push_back(static_cast<std::uint32_t>(j));
    // Experts in a fixed order: larger first, then by their first neuron.
    std::sort(groups.begin(), groups.end(), [](const auto& a, const auto& b) {
      return a.size() != b.size() ? a.size() > b.size() : a.front() < b.front();
    });
    moe_layer layer;
    layer.neurons = groups;
    // 2. The stacked, zero-padded experts.
    const auto w_gate = m.ffn(l).gate.as<float>();
    const auto w_up = m.ffn(l).up.as<float>();
    const auto w_down_t = m.ffn(l).down_t.as<float>();
    const std::size_t per_expert = out.d_ff_expert * d;
    layer.gate.assign(experts * per_expert, 0.0F);
    layer.up.assign(experts * per_expert, 0.0F);
    layer.down_t.assign(experts * per_expert, 0.0F);
    for (std::size_t e = 0; e < experts; ++e) {
      for (std::size_t r = 0; r < groups[e].size(); ++r) {
        const std::size_t j = groups[e][r];
        const std::size_t at = e * per_expert + r * d;
        std::copy(w_gate.row(j), w_gate.row(j) + d, layer.gate.begin() + static_cast<std::ptrdiff_t>(at));
        std::copy(w_up.row(j), w_up.row(j) + d, layer.up.begin() + static_cast<std::ptrdiff_t>(at));
        std::copy(w_down_t.row(j), w_down_t.row(j) + d, layer.down_t.begin() + static_cast<std::ptrdiff_t>(at));
      }
    }
    // 3. The router's targets: centred log shares of the contribution mass.
    Eigen::MatrixXd a(static_cast<Eigen::Index>(tokens), static_cast<Eigen::Index>(d + 1));
    Eigen::MatrixXd y(static_cast<Eigen::Index>(tokens), static_cast<Eigen::Index>(experts));
    std::vector<double> acc, mass(experts);
    for (std::size_t t = 0; t < tokens; ++t) {
      const auto ti = static_cast<Eigen::Index>(t);
      for (std::size_t i = 0; i < d; ++i) a(ti, static_cast<Eigen::Index>(i)) = x[t * d + i];
      a(ti, static_cast<Eigen::Index>(d)) = 1.0;
      moe_detail::contributions(std::span<const float>(h.data() + t * n, n), m.ffn(l).down_t, groups, acc, mass);
      const double total = std::accumulate(mass.begin(), mass.end(), 0.0);
      double mean = 0.0;
      for (std::size_t e = 0; e < experts; ++e) {
        const double v = std::log((total > 0.0 ? mass[e] / total : 1.0 / static_cast<double>(experts)) + 1e-3);
        y(ti, static_cast<Eigen::Index>(e)) = v;
        mean += v;
      }
      mean /= static_cast<double>(experts);
      for (std::size_t e = 0; e < experts; ++e) y(ti, static_cast<Eigen::Index>(e)) -= mean;
    }
    const Eigen::MatrixXd xs = a.leftCols(static_cast<Eigen::Index>(d));
    scale_of[l] = xs.squaredNorm() / static_cast<double>(d);  // tr(XᵀX) / d
    // Held-out error of each ridge strength: fit on 4 of every 5 tokens, score the 5th.
    std::vector<char> train(tokens), test(tokens);
    for (std::size_t t = 0; t < tokens; ++t) {
      train[t] = t % 5 != 4 ? 1 : 0;
      test[t] = t % 5 == 4 ? 1 : 0;
    }
    for (std::size_t i = 0; i < lambdas.size(); ++i) {
      const Eigen::MatrixXd w = moe_detail::ridge_fit(a, y, train, lambdas[i] * scale_of[l]);
      const Eigen::MatrixXd r = a * w - y;
      for (std::size_t t = 0; t < tokens; ++t) {
        if (test[t] != 0) held_out_error[i] += r.row(static_cast<Eigen::Index>(t)).squaredNorm();
      }
    }
    a_of[l] = std::move(a);
    y_of[l] = std::move(y);
    out.layers.push_back(std::move(layer));
  }
  // One ridge strength for every layer (the least held-out error summed over layers), then the
  // routers refitted on every calibration token.
  const std::size_t best =
      static_cast<std::size_t>(std::min_element(held_out_error.begin(), held_out_error.end()) - held_out_error.begin());
  out.ridge = lambdas[best];
  const std::vector<char> all(tokens, 1);
  for (std::size_t l = 0; l < m.layers(); ++l) {
    const Eigen::MatrixXd w = moe_detail::ridge_fit(a_of[l], y_of[l], all, out.ridge * scale_of[l]);
    moe_layer& layer = out.layers[l];
    layer.router.resize(experts * d);
    layer.bias.resize(experts);
    for (std::size_t e = 0; e < experts; ++e) {
      for (std::size_t i = 0; i < d; ++i) {
        layer.router[e * d + i] = static_cast<float>(w(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(e)));
      }
      layer.bias[e] = static_cast<float>(w(static_cast<Eigen::Index>(d), static_cast<Eigen::Index>(e)));
    }
  }
  out.fit_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

// logits = W_router·x + b through the backend's GEMV (the router of one token).
inline void router_logits(const moefied& moe, std::size_t layer, std::span<const float> x, std::span<float> logits,
                          std::vector<std::byte>& workspace, cpu::executor& ex) {
  const cpu_backend backend;
  const status s = run(backend, gemv_args{moe.router_view(layer), x, logits, subset::everything()}, workspace, ex);
  if (!s) actsparse::detail::fail("model_demo::router_logits", "router GEMV", s.reason, "the CPU GEMV to run");
  const std::vector<float>& b = moe.layers.at(layer).bias;
  for (std::size_t e = 0; e < logits.size(); ++e) logits[e] += b[e];
}

// Router quality on the dense model's FFN inputs of `sequences` (fills moe.router_quality):
// for each k, the mean over tokens and layers of Σ m_e over the router's top k / Σ m_e over the
// true top k. Sequences spread over `workers`, sums added in sequence order.
inline void measure_router(const model& m, const std::vector<std::vector<int>>& sequences, std::size_t workers,
                           moefied& moe) {
  const auto start = std::chrono::steady_clock::now();
  constexpr std::size_t nk = moe_quality_ks.size();
  struct sums {
    std::array<double, nk> ratio{};
    double count = 0.0;
  };
  std::vector<sums> per(sequences.size());
  // One probe per worker, with its buffers; `sequence` is the one it runs now.
  struct worker {
    calibration_run::detail::probe probe;
    std::size_t sequence = 0;
    std::vector<float> h, logits;
    std::vector<double> mass, sorted, acc;
    std::vector<std::uint32_t> order;
    std::vector<std::byte> workspace;
    cpu::executor ex;
  };
  workers = std::max<std::size_t>(1, std::min(workers, sequences.size()));
  std::vector<std::unique_ptr<worker>> ws;
  for (std::size_t w = 0; w < workers; ++w) {
    ws.push_back(std::make_unique<worker>());
    worker& k = *ws.back();
    k.probe.on_ffn = [&m, &moe, &per, &k](std::size_t l, std::span<const float> x, std::span<const float> g,
                                          std::span<const float> u) {
      k.h.resize(g.size());
      for (std::size_t j = 0; j < g.size(); ++j) k.h[j] = actsparse::apply(m.ffn(l).act, g[j]) * u[j];
      k.mass.resize(moe.experts);
      moe_detail::contributions(k.h, m.ffn(l).down_t, moe.layers.at(l).neurons, k.acc, k.mass);
      k.logits.resize(moe.experts);
      router_logits(moe, l, x, k.logits, k.workspace, k.ex);
      k.order.resize(moe.experts);
      std::iota(k.order.begin(), k.order.end(), 0U);
      // The router's ranking, ties to the lower expert (as route()).
      std::stable_sort(k.order.begin(), k.order.end(),
                       [&k](std::uint32_t a, std::uint32_t b) { return k.logits[a] > k.logits[b]; });
      k.sorted = k.mass;
      std::sort(k.sorted.begin(), k.sorted.end(), std::greater<>());
      sums& s = per[k.sequence];
      for (std::size_t i = 0; i < nk; ++i) {
        const std::size_t top = std::min(moe_quality_ks[i], moe.experts);
        double got = 0.0, best = 0.0;
        for (std::size_t r = 0; r < top; ++r) {
          got += k.mass[k.order[r]];
          best += k.sorted[r];
        }
        s.ratio[i] += best > 0.0 ? got / best : 1.0;
      }
      s.count += 1.0;
    };
  }
  for_each_sequence(sequences.size(), workers, [&](std::size_t w, std::size_t q) {
    ws[w]->sequence = q;
    auto cache = m.new_cache();
    std::vector<float> logits(sequences[q].size() * m.vocab());
    m.prefill(sequences[q], cache, logits, ws[w]->probe);
  });
  sums all;
  for (const sums& s : per) {
    for (std::size_t i = 0; i < nk; ++i) all.ratio[i] += s.ratio[i];
    all.count += s.count;
  }
  for (std::size_t i = 0; i < nk; ++i) moe.router_quality[i] = all.count > 0.0 ? all.ratio[i] / all.count : 0.0;
  moe.quality_tokens = static_cast<std::size_t>(all.count);
  moe.quality_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The MoE FFN: the layer's router, then moe_ffn over its stacked experts (the dense FFN `w` the
// forward pass hands in is only the byte reference).
class moe_policy : public demo_policy {
 public:
  moe_policy(const moefied& moe, moe_routing routing) : moe_(&moe), op_{std::move(routing), cpu_backend{}, {}} {}

  void ffn(std::size_t layer, const ffn_layer& w, std::span<const float> x, std::span<float> y) override {
    const std::size_t e = moe_->experts;
    logits_.resize(e);
    router_logits(*moe_, layer, x, logits_, workspace_, ex_);
    check(op_(layer, moe_->view(layer), matrix_view<const float>::packed(logits_.data(), 1, e),
              matrix_view<const float>::packed(x.data(), 1, x.size()),
              matrix_view<float>::packed(y.data(), 1, y.size()), scratch_, ex_),
          "MoE FFN");
    read_ += static_cast<double>(scratch_.reads.weight_bytes + moe_->router_bytes());
    dense_ += static_cast<double>(ffn_bytes(w));
    pairs_ += static_cast<double>(scratch_.reads.pairs);
    calls_ += 1.0;
  }
  [[nodiscard]] double kept_fraction() const override {
    return calls_ > 0.0 ? pairs_ / (calls_ * static_cast<double>(moe_->experts)) : 1.0;
  }
  [[nodiscard]] double bytes_fraction() const override { return dense_ > 0.0 ? read_ / dense_ : 1.0; }
  [[nodiscard]] std::optional<double> experts_per_token() const override {
    return calls_ > 0.0 ? pairs_ / calls_ : 0.0;
  }
  void reset_counts() override { read_ = dense_ = pairs_ = calls_ = 0.0; }

 private:
  const moefied* moe_;
  moe_ffn<cpu_backend> op_;
  moe_scratch scratch_;
  std::vector<float> logits_;
  std::vector<std::byte> workspace_;
  double read_ = 0.0, dense_ = 0.0, pairs_ = 0.0, calls_ = 0.0;
};

// The adaptive rows' buckets: every count from 1 to 4, then 6 and all 8 (a token the router is
// unsure of jumps to 6 or 8 rather than through every count: a few fixed batch shapes).
inline std::vector<std::size_t> moe_adaptive_buckets(std::size_t experts) {
  std::vector<std::size_t> b;
  for (const std::size_t k : {1U, 2U, 3U, 4U, 6U}) {
    if (k < experts) b.push_back(k);
  }
  b.push_back(experts);
  return b;
}

// The MoE rows (family "moe"): top-k for k in {1, 2, 3, 4, 6}, all experts, adaptive top-k at
// three masses, and two progressive schedules of equal mean (4 experts in the first 2/5 of the
// layers and 2 after, and the reverse). `moe` is read when a policy is made, so it may be
// fitted after this call; it must outlive the table.
inline std::vector<policy_config> moe_table(std::size_t layers, const moefied& moe, std::size_t experts = 8) {
  std::vector<policy_config> table;
  const auto base = [](std::size_t k) {
    moe_routing r;
    r.gating = moe_gating::top_k_unit;
    r.native_k = k;
    return r;
  };
  const auto add = [&](std::string name, std::string scorer, moe_routing r) {
    table.push_back(
        {std::move(name), "moe", std::move(scorer), [r, &moe] { return std::make_unique<moe_policy>(moe, r); }});
  };
  for (const std::size_t k : {1U, 2U, 3U, 4U, 6U}) {
    if (k < experts) add("moe top-" + std::to_string(k), "router top_k", base(k));
  }
  add("moe all " + std::to_string(experts), "router top_k", base(experts));
  for (const double mass : {0.5, 0.7, 0.9}) {
    moe_routing r = base(experts);
    r.adaptive = adaptive_top_k{moe_adaptive_buckets(experts), mass};
    char name[64];
    std::snprintf(name, sizeof name, "moe adaptive %.1f", mass);
    add(name, "router adaptive_top_k", r);
  }
  if (layers >= 2 && experts >= 4) {
    const std::size_t split = std::max<std::size_t>(1, (2 * layers) / 5);
    const std::size_t rest = layers - split;
    for (const auto& ranges : {std::vector<layer_range_k>{{0, split - 1, 4}, {split, layers - 1, 2}},
                               std::vector<layer_range_k>{{0, rest - 1, 2}, {rest, layers - 1, 4}}}) {
      moe_routing r = base(experts);
      r.layer_k = progressive_top_k(ranges);
      add("moe progressive " + r.layer_k->to_string(), "router progressive_top_k", r);
    }
  }
  return table;
}

}  // namespace model_demo
