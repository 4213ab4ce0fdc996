// One FFN layer of an engine, neuron-sparse: the lines to copy are the class below.
// The CPU kernels are compiled in exactly one .cpp of the engine, which defines
// ACTSPARSE_CPU_IMPLEMENTATION before including <actsparse/backends/cpu/implementation.hpp>;
// here that is examples/common/cpu_kernels.cpp, which every program of the project links.
#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/backends/cpu/repack.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>
#include <actsparse/scorers/silu_magnitude.hpp>
#include <actsparse/selectors/top_k.hpp>

namespace as = actsparse;

// y = W_down·(silu(W_gate·x) ⊙ W_up·x) over the `keep` fraction of neurons with the largest
// |silu(gate)|: only their rows of W_up and W_downᵀ are read. Build at load time, call per token.
class sparse_ffn {
 public:
  // Views of the engine's weights (not copied): gate, up [d_ff × d_model], down [d_model × d_ff].
  sparse_ffn(as::weight_view gate, as::weight_view up, as::weight_view down, double keep)
      : down_t_(as::cpu::transpose(down)),  // W_downᵀ once: one contiguous row per neuron
        layer_{as::activation::silu, gate, up, down, down_t_.view},
        op_{as::silu_magnitude{}, as::top_k::by_ratio(keep), as::score_source::gate_preactivation, {}} {}
  sparse_ffn(const sparse_ffn&) = delete;  // layer_ points into down_t_ (a move keeps its bytes)
  sparse_ffn(sparse_ffn&&) = default;
  // One token: x, y hold d_model floats. false: not handled here, run the engine's own FFN.
  bool operator()(std::span<const float> x, std::span<float> y) {
    return bool(op_(layer_, x, y, kept_, scratch_, ex_));
  }
  [[nodiscard]] const as::selection& kept() const { return kept_; }  // the last token's neurons

 private:
  as::cpu::owned_weights down_t_;
  as::ffn_layer layer_;
  as::neuron_sparse_ffn<as::silu_magnitude, as::top_k, as::cpu_backend> op_;
  as::ffn_scratch scratch_;  // buffers that grow once, then are reused: one call at a time
  as::selection kept_;
  as::cpu::executor ex_;  // the calling thread; cpu::executor(pool), or executor::split for the engine's own threads
};

// ------------------------------------------------------------------------------------------
// The rest runs it on layer 0 of stories260K (every token embedding, RMS-normalised, as x) and
// compares with the dense FFN.
//
//   ffn_layer [checkpoint.bin] [keep]     (default: data/stories260K.bin, keep 0.5)

#include "llama2c/checkpoint.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

std::vector<float> rms_normalise(std::span<const float> v, std::span<const float> weight) {
  double ss = 0.0;
  for (const float a : v) ss += static_cast<double>(a) * a;
  const float inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(v.size()) + 1e-5));
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = v[i] * inv * weight[i];
  return out;
}

struct comparison {
  double kept = 0.0;           // mean kept fraction
  double max_abs = 0.0;        // max |y - y_dense| over every output
  double mean_rel = 0.0;       // mean ||y - y_dense|| / ||y_dense||
  double max_abs_dense = 0.0;  // max |y_dense|
};

comparison compare(sparse_ffn& ffn, const as::ffn_layer& dense, const std::vector<std::vector<float>>& xs) {
  const as::cpu_backend cpu;
  as::cpu::executor ex;
  as::ffn_scratch scratch;
  std::vector<float> y(dense.d_model());
  std::vector<float> ref(dense.d_model());
  comparison c;
  for (const std::vector<float>& x : xs) {
    if (!ffn(x, y) || !as::dense_ffn(cpu, dense, x, ref, scratch, ex)) throw std::runtime_error("not handled");
    c.kept += ffn.kept().kept_fraction();
    double num = 0.0;
    double den = 0.0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      const double d = static_cast<double>(y[i]) - ref[i];
      c.max_abs = std::max(c.max_abs, std::fabs(d));
      c.max_abs_dense = std::max(c.max_abs_dense, std::fabs(static_cast<double>(ref[i])));
      num += d * d;
      den += static_cast<double>(ref[i]) * ref[i];
    }
    c.mean_rel += den > 0.0 ? std::sqrt(num / den) : std::sqrt(num);
  }
  c.kept /= static_cast<double>(xs.size());
  c.mean_rel /= static_cast<double>(xs.size());
  return c;
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string path = argc > 1 ? argv[1] : std::string(ACTSPARSE_DATA_DIR) + "/stories260K.bin";
  const double keep = argc > 2 ? std::stod(argv[2]) : 0.5;
  const llama2c::checkpoint ckpt = llama2c::checkpoint::load(path);
  const std::size_t layer = 0;
  // llama2.c: h = silu(w1·x) ⊙ (w3·x), y = w2·h. So gate = w1, up = w3, down = w2.
  sparse_ffn ffn(ckpt.w1(layer), ckpt.w3(layer), ckpt.w2(layer), keep);
  sparse_ffn keep_all(ckpt.w1(layer), ckpt.w3(layer), ckpt.w2(layer), 1.0);
  const as::ffn_layer dense{as::activation::silu, ckpt.w1(layer), ckpt.w3(layer), ckpt.w2(layer)};

  std::vector<std::vector<float>> xs;
  const auto emb = ckpt.token_embedding();
  for (std::size_t t = 0; t < emb.rows; ++t) {
    xs.push_back(rms_normalise(std::span<const float>(emb.row(t), emb.cols), ckpt.rms_ffn(layer)));
  }
  const comparison sparse = compare(ffn, dense, xs);
  const comparison all = compare(keep_all, dense, xs);
  std::printf("ffn_layer: %s layer %zu (d_model %zu, d_ff %zu), %zu tokens, silu_magnitude + top_k keep %.2f\n",
              path.c_str(), layer, dense.d_model(), dense.d_ff(), xs.size(), keep);
  std::printf("  kept fraction %.3f, max |y - dense| %.3g (max |dense| %.3g), mean relative error %.4f\n", sparse.kept,
              sparse.max_abs, sparse.max_abs_dense, sparse.mean_rel);
  std::printf("  keep 1.0: kept fraction %.3f, max |y - dense| %.3g\n", all.kept, all.max_abs);
  // Checks (the ctest test runs this): top_k keeps ceil(keep * d_ff) neurons of every token, and
  // keeping every neuron is the dense FFN up to f32 rounding (W_downᵀ's row axpy sums in another
  // order than the dense W_down GEMV).
  const double d_ff = static_cast<double>(dense.d_ff());
  if (std::fabs(sparse.kept - std::ceil(keep * d_ff) / d_ff) > 1e-9 || all.kept != 1.0) {
    std::fprintf(stderr, "ffn_layer: kept fraction %.6f, expected ceil(%g * d_ff) / d_ff\n", sparse.kept, keep);
    return 1;
  }
  if (!(all.max_abs <= 1e-5 * std::max(1.0, all.max_abs_dense)) || !std::isfinite(sparse.max_abs)) {
    std::fprintf(stderr, "ffn_layer: keep-all differs from dense by %.3g\n", all.max_abs);
    return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "ffn_layer: %s\n", e.what());
  return 1;
}
