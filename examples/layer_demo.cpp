// actsparse demo: one FFN layer of a real trained model (stories260K, a SwiGLU Llama).
// Inputs are the layer's RMS-normalised token embeddings (all 512 tokens). For each
// scorer × selector it prints the kept fraction of neurons, the fraction of FFN weight
// bytes a decode step would read, and the relative error of the FFN output against dense.
// Thresholds are calibrated on the even tokens and everything is measured on the odd ones.
//
//   layer_demo [checkpoint.bin] [layer]

#include "llama2c/checkpoint.hpp"

#include <actsparse/backends/reference.hpp>
#include <actsparse/calibration/threshold_calibration.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>
#include <actsparse/scorers/magnitude.hpp>
#include <actsparse/scorers/relu_exact.hpp>
#include <actsparse/scorers/silu_magnitude.hpp>
#include <actsparse/scorers/weight_aware.hpp>
#include <actsparse/scorers/weight_aware_gate.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>
#include <actsparse/selectors/threshold.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

namespace {

using namespace actsparse;

struct inputs {
  std::vector<std::vector<float>> x;      // normalised FFN inputs
  std::vector<std::vector<float>> dense;  // dense FFN outputs
};

std::vector<float> rms_normalise(std::span<const float> v, std::span<const float> weight) {
  double ss = 0.0;
  for (float a : v) ss += static_cast<double>(a) * a;
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(v.size()) + 1e-5));
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = v[i] * inv * weight[i];
  return out;
}

double relative_error(std::span<const float> y, std::span<const float> ref) {
  double num = 0.0;
  double den = 0.0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    num += (static_cast<double>(y[i]) - ref[i]) * (static_cast<double>(y[i]) - ref[i]);
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Runs one policy over the evaluation tokens (odd ids) and prints a row.
template <class Scorer, class Selector>
void evaluate(const char* scorer_name, const std::string& selector_name, const Scorer& scorer, const Selector& selector,
              score_source source, const ffn_layer& w, const inputs& in) {
  const neuron_sparse_ffn<Scorer, Selector, reference_backend> op{scorer, selector, source, {}};
  ffn_scratch scratch;
  selection kept;
  inline_executor ex;
  std::vector<float> y(w.d_model());
  double kept_sum = 0.0;
  double err_sum = 0.0;
  std::size_t n = 0;
  std::size_t fallbacks = 0;
  for (std::size_t t = 1; t < in.x.size(); t += 2, ++n) {
    if (!op(w, in.x[t], y, kept, scratch, ex)) throw std::runtime_error("reference backend declined");
    kept_sum += kept.kept_fraction();
    err_sum += relative_error(y, in.dense[t]);
    fallbacks += kept.dense_fallback ? 1 : 0;
  }
  const double a = kept_sum / static_cast<double>(n);
  std::printf("%-18s %-22s %-19s %6.3f %6.3f %9.4f %5zu\n", scorer_name, selector_name.c_str(),
              std::string(name(source)).c_str(), a, ffn_bytes_fraction(source, a), err_sum / static_cast<double>(n),
              fallbacks);
}

template <class Scorer>
void evaluate_all(const char* scorer_name, const Scorer& scorer, score_source source, const ffn_layer& w,
                  const inputs& in, const threshold& calibrated) {
  evaluate(scorer_name, "top_k keep 50%", scorer, top_k::by_ratio(0.5), source, w, in);
  evaluate(scorer_name, "top_k keep 25%", scorer, top_k::by_ratio(0.25), source, w, in);
  evaluate(scorer_name, "cumulative_mass 0.9", scorer, cumulative_mass{0.9, 0, 1}, source, w, in);
  evaluate(scorer_name, "cumulative_mass 0.7", scorer, cumulative_mass{0.7, 0, 1}, source, w, in);
  char buf[64];
  std::snprintf(buf, sizeof buf, "threshold %.3g (50%%)", static_cast<double>(calibrated.t));
  evaluate(scorer_name, buf, scorer, calibrated, source, w, in);
}

// Calibrates, on the even tokens, the threshold that drops half of this scorer's scores.
template <class Scorer>
threshold calibrate(const Scorer& scorer, score_source source, const ffn_layer& w, const inputs& in) {
  threshold_calibration cal;
  const neuron_sparse_ffn<Scorer, threshold, reference_backend> probe{scorer, threshold{-INFINITY}, source, {}};
  ffn_scratch scratch;
  selection kept;
  inline_executor ex;
  std::vector<float> y(w.d_model());
  for (std::size_t t = 0; t < in.x.size(); t += 2) {
    if (!probe(w, in.x[t], y, kept, scratch, ex)) throw std::runtime_error("reference backend declined");
    cal.add(0, scratch.scores);
  }
  return cal.selector_for(0, 0.5);
}

template <class Scorer>
void run_scorer(const char* scorer_name, const Scorer& scorer, score_source source, const ffn_layer& w,
                const inputs& in) {
  evaluate_all(scorer_name, scorer, source, w, in, calibrate(scorer, source, w, in));
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string path = argc > 1 ? argv[1] : std::string(ACTSPARSE_DATA_DIR) + "/stories260K.bin";
  const llama2c::checkpoint ckpt = llama2c::checkpoint::load(path);
  const auto& cfg = ckpt.cfg();
  const std::size_t layer = argc > 2 ? std::stoul(argv[2]) : static_cast<std::size_t>(cfg.n_layers) / 2;
  if (layer >= static_cast<std::size_t>(cfg.n_layers)) {
    detail::fail("layer_demo", "layer", layer, "a layer < n_layers = " + std::to_string(cfg.n_layers));
  }
  // llama2.c: h = silu(w1·x) ⊙ (w3·x), y = w2·h. So gate = w1, up = w3, down = w2.
  const ffn_layer w{activation::silu, ckpt.w1(layer), ckpt.w3(layer), ckpt.w2(layer)};

  inputs in;
  const auto emb = ckpt.token_embedding();
  const reference_backend ref;
  ffn_scratch scratch;
  inline_executor ex;
  for (std::size_t t = 0; t < emb.rows; ++t) {
    in.x.push_back(rms_normalise(std::span<const float>(emb.row(t), emb.cols), ckpt.rms_ffn(layer)));
    in.dense.emplace_back(w.d_model());
    if (!dense_ffn(ref, w, in.x.back(), in.dense.back(), scratch, ex)) return 1;
  }

  std::printf("actsparse layer demo: %s, layer %zu of %d, d_model %zu, d_ff %zu, %zu inputs (odd tokens)\n\n",
              path.c_str(), layer, cfg.n_layers, w.d_model(), w.d_ff(), in.x.size() / 2);
  std::printf("%-18s %-22s %-19s %6s %6s %9s %5s\n", "scorer", "selector", "score source", "kept", "bytes", "rel.err",
              "fallb");
  std::printf("%s\n", std::string(89, '-').c_str());

  run_scorer("silu_magnitude", silu_magnitude{}, score_source::gate_preactivation, w, in);
  run_scorer("weight_aware_gate", weight_aware_gate::from_weights(w.up, w.down), score_source::gate_preactivation, w,
             in);
  run_scorer("magnitude(h)", magnitude{}, score_source::hidden, w, in);
  run_scorer("weight_aware(h)", weight_aware::from_weights(w.down), score_source::hidden, w, in);
  evaluate("relu_exact", "threshold 0", relu_exact{}, threshold{0.0F}, score_source::gate_preactivation, w, in);

  std::printf(
      "\nkept: mean fraction of the %zu neurons kept; bytes: fraction of the FFN weight bytes a decode step reads\n"
      "((1+2a)/3 when the score needs only the gate, (2+a)/3 when it needs h = act(g)*u, which reads all of up);\n"
      "rel.err: mean ||y - y_dense|| / ||y_dense||; fallb: tokens where the selector fell back to dense.\n"
      "magnitude of act(g) ranks exactly like silu_magnitude for this SwiGLU model, so it is not repeated.\n",
      w.d_ff());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "layer_demo: %s\n", e.what());
  return 1;
}
