#pragma once
// A per-token tier predictor (WiSparse): a tiny two-layer MLP that maps cheap statistics of the
// FFN input x to a tier, so easy tokens read fewer rows and hard ones more. It predicts, for
// every tier, the token's quality loss (the log of its KL when the layer runs at that tier), and
// picks the highest tier whose predicted loss is within the layer's per-token budget, at most the
// cap: one predictor serves every budget (the budget is a number, not a retraining). It is
// trained at calibration time on the measured per-token losses, in plain C++: Adam on the mean
// squared error, a fixed seed, a fixed order, so the same data gives the same weights on every
// platform. No training framework.
//
// Features (token_features): mean, standard deviation, mean |x|, the 50% / 90% quantiles and the
// maximum of |x|, the share of near-zero entries (|x| < 0.1 rms) and the normalised fourth
// moment E[x⁴] / E[x²]². O(d_model) a token, on a caller's scratch buffer (no allocation once
// it has grown).

#include <actsparse/calibration/detail/checks.hpp>
#include <actsparse/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace actsparse {

inline constexpr std::size_t token_feature_count = 8;

// The features of one input x (at least one value, all finite) into out (token_feature_count).
inline void token_features(std::span<const float> x, std::span<float> out, std::vector<float>& scratch) {
  constexpr std::string_view where = "token_features";
  detail::require(!x.empty(), where, "x.size()", 0, "at least one value");
  detail::require(out.size() == token_feature_count, where, "out.size()", out.size(),
                  "token_feature_count = " + std::to_string(token_feature_count));
  const std::size_t n = x.size();
  scratch.resize(n);
  double sum = 0.0, sq = 0.0, quad = 0.0, abs_sum = 0.0;
  for (std::size_t i = 0; i < n; ++i) {
    const double v = x[i];
    if (!std::isfinite(v)) detail::fail(where, "x[" + std::to_string(i) + "]", x[i], "a finite value");
    sum += v;
    sq += v * v;
    quad += v * v * v * v;
    abs_sum += std::fabs(v);
    scratch[i] = std::fabs(x[i]);
  }
  const double dn = static_cast<double>(n);
  const double mean = sum / dn;
  const double ms = sq / dn;
  const double rms = std::sqrt(ms);
  std::size_t near_zero = 0;
  for (std::size_t i = 0; i < n; ++i) near_zero += scratch[i] < 0.1 * rms ? 1 : 0;
  const auto quantile = [&](double q) {
    const std::size_t pos = std::min(n - 1, static_cast<std::size_t>(std::lround(q * static_cast<double>(n - 1))));
    std::nth_element(scratch.begin(), scratch.begin() + static_cast<std::ptrdiff_t>(pos), scratch.end());
    return static_cast<double>(scratch[pos]);
  };
  const double q90 = quantile(0.9);
  const double q50 = quantile(0.5);
  const double max = *std::max_element(scratch.begin(), scratch.end());
  out[0] = static_cast<float>(mean);
  out[1] = static_cast<float>(std::sqrt(std::max(0.0, ms - mean * mean)));
  out[2] = static_cast<float>(abs_sum / dn);
  out[3] = static_cast<float>(q50);
  out[4] = static_cast<float>(q90);
  out[5] = static_cast<float>(max);
  out[6] = static_cast<float>(static_cast<double>(near_zero) / dn);
  out[7] = static_cast<float>(ms > 0.0 ? (quad / dn) / (ms * ms) : 0.0);
}

struct tier_predictor_options {
  std::size_t hidden = 32;
  std::size_t epochs = 40;
  std::size_t batch = 64;
  double learning_rate = 3e-3;
  std::uint64_t seed = 0x5eed;
};

// The floor of the losses the predictor learns: log(kl + loss_floor), so a loss of 0 is finite.
inline constexpr double tier_loss_floor = 1e-6;

// The predictor's parameters: features are standardised ((f - mean) / scale), then
// h = relu(w1 f + b1) (hidden), o = w2 h + b2 (one output per tier), and the predicted log loss
// of tier t is o_t · out_scale_t + out_mean_t. Row-major weights. Tier 0 (keep all) is never
// predicted: its loss is 0.
struct tier_predictor_parameters {
  std::size_t hidden = 0;
  std::size_t tiers = 0;
  std::vector<float> mean, scale;          // token_feature_count each
  std::vector<float> w1, b1;               // hidden x features, hidden
  std::vector<float> w2, b2;               // tiers x hidden, tiers
  std::vector<float> out_mean, out_scale;  // tiers each
  friend bool operator==(const tier_predictor_parameters&, const tier_predictor_parameters&) = default;
};

class tier_predictor {
 public:
  tier_predictor() = default;

  // Checks every size and value (finite, scales > 0); the error names the field.
  static tier_predictor from_parameters(tier_predictor_parameters p) {
    constexpr std::string_view where = "tier_predictor::from_parameters";
    constexpr std::size_t f = token_feature_count;
    detail::require(p.hidden >= 1 && p.hidden <= 4096, where, "hidden", p.hidden, "1 .. 4096 hidden units");
    detail::require(p.tiers >= 1 && p.tiers <= 256, where, "tiers", p.tiers, "1 .. 256 tiers");
    detail::require_finite_values(p.mean, f, where, "mean");
    detail::require_finite_values(p.scale, f, where, "scale");
    detail::require_finite_values(p.w1, p.hidden * f, where, "w1");
    detail::require_finite_values(p.b1, p.hidden, where, "b1");
    detail::require_finite_values(p.w2, p.tiers * p.hidden, where, "w2");
    detail::require_finite_values(p.b2, p.tiers, where, "b2");
    detail::require_finite_values(p.out_mean, p.tiers, where, "out_mean");
    detail::require_finite_values(p.out_scale, p.tiers, where, "out_scale");
    for (std::size_t i = 0; i < f; ++i) {
      detail::require(p.scale[i] > 0.0F, where, "scale[" + std::to_string(i) + "]", p.scale[i], "a scale > 0");
    }
    for (std::size_t i = 0; i < p.tiers; ++i) {
      detail::require(p.out_scale[i] > 0.0F, where, "out_scale[" + std::to_string(i) + "]", p.out_scale[i],
                      "a scale > 0");
    }
    tier_predictor t;
    t.p_ = std::move(p);
    return t;
  }

  // Trains on features [n x token_feature_count] and losses [n x tiers] (row-major; the KL of
  // token i when the layer runs at tier t, finite and >= 0; column 0 is not learned).
  static tier_predictor train(std::span<const float> features, std::span<const double> losses, std::size_t tiers,
                              const tier_predictor_options& o = {}) {
    constexpr std::string_view where = "tier_predictor::train";
    constexpr std::size_t f = token_feature_count;
    detail::require(tiers >= 1 && tiers <= 256, where, "tiers", tiers, "1 .. 256 tiers");
    detail::require(!features.empty() && features.size() % f == 0, where, "features.size()", features.size(),
                    "a positive multiple of token_feature_count (tokens x features)");
    const std::size_t n = features.size() / f;
    detail::require(losses.size() == n * tiers, where, "losses.size()", losses.size(),
                    "tokens x tiers = " + std::to_string(n * tiers));
    detail::require(o.hidden >= 1 && o.hidden <= 4096, where, "options.hidden", o.hidden, "1 .. 4096");
    detail::require(o.batch >= 1, where, "options.batch", o.batch, "at least 1");
    detail::require(o.learning_rate > 0.0 && std::isfinite(o.learning_rate), where, "options.learning_rate",
                    o.learning_rate, "a finite rate > 0");
    for (std::size_t i = 0; i < features.size(); ++i) {
      if (!std::isfinite(features[i])) {
        detail::fail(where, "features[" + std::to_string(i) + "]", features[i], "a finite value");
      }
    }
    for (std::size_t i = 0; i < losses.size(); ++i) {
      if (!(losses[i] >= 0.0) || std::isinf(losses[i])) {
        detail::fail(where, "losses[" + std::to_string(i) + "]", losses[i], "a finite loss >= 0");
      }
    }
    tier_predictor_parameters p;
    p.hidden = o.hidden;
    p.tiers = tiers;
    std::vector<double> target(n * tiers);
    for (std::size_t i = 0; i < target.size(); ++i) target[i] = std::log(losses[i] + tier_loss_floor);
    standardise(features, n, f, p.mean, p.scale);
    standardise(target, n, tiers, p.out_mean, p.out_scale);
    std::uint64_t rng = o.seed;
    const auto uniform = [&rng] {  // splitmix64 -> [-1, 1)
      std::uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
      z ^= z >> 31;
      return static_cast<double>(z >> 11) * 0x1.0p-52 - 1.0;
    };
    const double r1 = std::sqrt(6.0 / static_cast<double>(f + o.hidden));
    const double r2 = std::sqrt(6.0 / static_cast<double>(o.hidden + tiers));
    p.w1.resize(o.hidden * f);
    p.b1.assign(o.hidden, 0.0F);
    p.w2.resize(tiers * o.hidden);
    p.b2.assign(tiers, 0.0F);
    for (float& w : p.w1) w = static_cast<float>(r1 * uniform());
    for (float& w : p.w2) w = static_cast<float>(r2 * uniform());

    // Adam over every parameter, in one flat order: w1, b1, w2, b2.
    std::vector<float*> params;
    for (auto* v : {&p.w1, &p.b1, &p.w2, &p.b2}) {
      for (float& x : *v) params.push_back(&x);
    }
    std::vector<double> grad(params.size()), m1(params.size(), 0.0), m2(params.size(), 0.0);
    std::vector<std::size_t> order(n);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::vector<double> z(f), h(o.hidden), out(tiers), dout(tiers), dh(o.hidden);
    const std::size_t b1_at = p.w1.size(), w2_at = b1_at + p.b1.size(), b2_at = w2_at + p.w2.size();
    std::size_t step = 0;
    for (std::size_t epoch = 0; epoch < o.epochs; ++epoch) {
      for (std::size_t i = n; i > 1; --i) {  // Fisher-Yates with the fixed-seed generator
        const auto j = static_cast<std::size_t>((uniform() + 1.0) * 0.5 * static_cast<double>(i));
        std::swap(order[i - 1], order[std::min(j, i - 1)]);
      }
      for (std::size_t b = 0; b < n; b += o.batch) {
        const std::size_t e = std::min(n, b + o.batch);
        std::fill(grad.begin(), grad.end(), 0.0);
        for (std::size_t s = b; s < e; ++s) {
          const std::size_t i = order[s];
          for (std::size_t k = 0; k < f; ++k) z[k] = (features[i * f + k] - p.mean[k]) / p.scale[k];
          forward(p, z, h, out);
          std::fill(dh.begin(), dh.end(), 0.0);
          for (std::size_t t = 1; t < tiers; ++t) {  // tier 0's loss is 0 by definition
            const double want = (target[i * tiers + t] - p.out_mean[t]) / p.out_scale[t];
            dout[t] = out[t] - want;
            grad[b2_at + t] += dout[t];
            for (std::size_t u = 0; u < o.hidden; ++u) {
              grad[w2_at + t * o.hidden + u] += dout[t] * h[u];
              dh[u] += dout[t] * p.w2[t * o.hidden + u];
            }
          }
          for (std::size_t u = 0; u < o.hidden; ++u) {
            if (h[u] <= 0.0) continue;  // relu
            grad[b1_at + u] += dh[u];
            for (std::size_t k = 0; k < f; ++k) grad[u * f + k] += dh[u] * z[k];
          }
        }
        ++step;
        const double inv = 1.0 / static_cast<double>(e - b);
        const double c1 = 1.0 - std::pow(0.9, static_cast<double>(step));
        const double c2 = 1.0 - std::pow(0.999, static_cast<double>(step));
        for (std::size_t q = 0; q < params.size(); ++q) {
          const double g = grad[q] * inv;
          m1[q] = 0.9 * m1[q] + 0.1 * g;
          m2[q] = 0.999 * m2[q] + 0.001 * g * g;
          *params[q] -= static_cast<float>(o.learning_rate * (m1[q] / c1) / (std::sqrt(m2[q] / c2) + 1e-8));
        }
      }
    }
    return from_parameters(std::move(p));
  }

  // The predicted log(loss + tier_loss_floor) of every tier (out: tiers values; out[0] is the
  // floor's log, tier 0 keeps everything).
  void predicted_losses(std::span<const float> features, std::span<double> out) const {
    constexpr std::string_view where = "tier_predictor::predicted_losses";
    detail::require(p_.tiers >= 1, where, "predictor", "empty", "a trained predictor (train or from_parameters)");
    detail::require(features.size() == token_feature_count, where, "features.size()", features.size(),
                    "token_feature_count");
    detail::require(out.size() == p_.tiers, where, "out.size()", out.size(), "tiers");
    double z[token_feature_count];
    for (std::size_t k = 0; k < token_feature_count; ++k) z[k] = (features[k] - p_.mean[k]) / p_.scale[k];
    double h[4096];
    forward(p_, std::span<const double>(z, token_feature_count), std::span<double>(h, p_.hidden), out);
    for (std::size_t t = 0; t < p_.tiers; ++t) out[t] = out[t] * p_.out_scale[t] + p_.out_mean[t];
    out[0] = std::log(tier_loss_floor);
  }

  // The highest tier t <= cap whose predicted loss is at most budget (0 when none is).
  [[nodiscard]] std::size_t predict(std::span<const float> features, std::size_t cap, double budget) const {
    double losses[256];
    predicted_losses(features, std::span<double>(losses, p_.tiers));
    const double limit = std::log(budget + tier_loss_floor);
    for (std::size_t t = std::min(cap, p_.tiers - 1); t > 0; --t) {
      if (losses[t] <= limit) return t;
    }
    return 0;
  }

  // From the input x itself (token_features on scratch).
  [[nodiscard]] std::size_t predict_from_input(std::span<const float> x, std::size_t cap, double budget,
                                               std::vector<float>& scratch) const {
    float feats[token_feature_count];
    token_features(x, std::span<float>(feats, token_feature_count), scratch);
    return predict(std::span<const float>(feats, token_feature_count), cap, budget);
  }

  [[nodiscard]] const tier_predictor_parameters& parameters() const noexcept { return p_; }
  [[nodiscard]] std::size_t tiers() const noexcept { return p_.tiers; }
  [[nodiscard]] std::size_t parameter_count() const noexcept {
    return p_.w1.size() + p_.b1.size() + p_.w2.size() + p_.b2.size() + p_.mean.size() + p_.scale.size() +
           p_.out_mean.size() + p_.out_scale.size();
  }
  friend bool operator==(const tier_predictor&, const tier_predictor&) = default;

 private:
  // Column means and standard deviations (1 where a column is constant) of an n x k matrix.
  template <class T>
  static void standardise(std::span<const T> v, std::size_t n, std::size_t k, std::vector<float>& mean,
                          std::vector<float>& scale) {
    mean.assign(k, 0.0F);
    scale.assign(k, 1.0F);
    for (std::size_t c = 0; c < k; ++c) {
      double s = 0.0, s2 = 0.0;
      for (std::size_t i = 0; i < n; ++i) s += static_cast<double>(v[i * k + c]);
      const double m = s / static_cast<double>(n);
      for (std::size_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(v[i * k + c]) - m;
        s2 += d * d;
      }
      const double sd = std::sqrt(s2 / static_cast<double>(n));
      mean[c] = static_cast<float>(m);
      scale[c] = sd > 1e-12 ? static_cast<float>(sd) : 1.0F;
    }
  }
  template <class T>
  static void standardise(const std::vector<T>& v, std::size_t n, std::size_t k, std::vector<float>& mean,
                          std::vector<float>& scale) {
    standardise(std::span<const T>(v), n, k, mean, scale);
  }

  static void forward(const tier_predictor_parameters& p, std::span<const double> z, std::span<double> h,
                      std::span<double> out) {
    constexpr std::size_t f = token_feature_count;
    for (std::size_t u = 0; u < p.hidden; ++u) {
      double a = p.b1[u];
      for (std::size_t k = 0; k < f; ++k) a += static_cast<double>(p.w1[u * f + k]) * z[k];
      h[u] = a > 0.0 ? a : 0.0;
    }
    for (std::size_t t = 0; t < p.tiers; ++t) {
      double a = p.b2[t];
      for (std::size_t u = 0; u < p.hidden; ++u) a += static_cast<double>(p.w2[t * p.hidden + u]) * h[u];
      out[t] = a;
    }
  }

  tier_predictor_parameters p_;
};

}  // namespace actsparse
