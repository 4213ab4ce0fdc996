#pragma once
// The llama2.c forward pass under a calibration: a policy that runs every FFN through
// neuron_sparse_ffn with a calibrated_schedule (one op for every layer, the file decides), and
// counts the weight bytes it really read (ffn_scratch::reads: gate, up and down rows and the
// gate predictor's bytes); and the measurement of a policy on a sample (mean KL against dense,
// top-1, perplexity, per-position KL, bytes), the number the calibration searches optimise.

#include "llama2c/model.hpp"
#include "model_demo/harness.hpp"
#include "model_demo/policies.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/calibration/calibrated_schedule.hpp>
#include <actsparse/core/dtype.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>
#include <actsparse/scorers/weight_aware_gate.hpp>
#include <actsparse/selectors/calibrated_selector.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace calibration_run {

using namespace actsparse;
using llama2c::model;
using model_demo::demo_policy;

// Every FFN through a calibrated schedule, on the CPU backend.
class calibrated_policy : public demo_policy {
 public:
  using op_type = neuron_sparse_ffn<weight_aware_gate, calibrated_selector, cpu_backend, calibrated_schedule>;
  // Called after every FFN with the layer, the first stage's neurons and the final ones.
  using recorder = std::function<void(std::size_t, std::span<const std::uint32_t>, std::span<const std::uint32_t>)>;

  explicit calibrated_policy(calibrated_schedule schedule)
      : op_{weight_aware_gate{}, calibrated_selector{}, score_source::gate_preactivation, cpu_backend{},
            std::move(schedule)} {}

  void ffn(std::size_t layer, const ffn_layer& model_layer, std::span<const float> x, std::span<float> y) override {
    const ffn_layer& w = layers_ ? layers_->at(layer) : model_layer;
    check(op_(layer, w, x, y, kept_, scratch_, ex_), "calibrated FFN");
    const double d_ff = static_cast<double>(w.d_ff());
    const double row = static_cast<double>(row_bytes(w.gate.type, w.gate.cols));
    const ffn_reads& r = scratch_.reads;
    bytes_ += static_cast<double>(r.gate_rows + r.up_rows + r.down_rows) / (3.0 * d_ff) +
              static_cast<double>(r.predictor_bytes) / (3.0 * d_ff * row);
    kept_sum_ += static_cast<double>(r.down_rows) / d_ff;
    first_sum_ += static_cast<double>(r.up_rows) / d_ff;
    ++calls_;
    if (record_) {
      const std::span<const std::uint32_t> first =
          scratch_.candidates.empty() ? std::span<const std::uint32_t>(kept_.indices) : scratch_.candidates;
      record_(layer, first, kept_.indices);
    }
  }
  void set_recorder(recorder r) { record_ = std::move(r); }
  // FFN layers to run instead of the model's (its weights with the file's neuron permutation).
  void set_layers(std::shared_ptr<const std::vector<ffn_layer>> layers) { layers_ = std::move(layers); }

  // The share of neurons whose W_down row was read (the final set).
  [[nodiscard]] double kept_fraction() const override { return calls_ == 0 ? 1.0 : kept_sum_ / calls_; }
  // The share of neurons of the first stage (W_up rows read).
  [[nodiscard]] double first_stage_fraction() const { return calls_ == 0 ? 1.0 : first_sum_ / calls_; }
  // Honest bytes: (gate + up + down rows read) / (3 d_ff), plus the predictor's bytes.
  [[nodiscard]] double bytes_fraction() const override { return calls_ == 0 ? 1.0 : bytes_ / calls_; }
  void reset_counts() override { bytes_ = kept_sum_ = first_sum_ = calls_ = 0.0; }

 private:
  op_type op_;
  selection kept_;
  ffn_scratch scratch_;
  recorder record_;
  std::shared_ptr<const std::vector<ffn_layer>> layers_;
  double bytes_ = 0.0, kept_sum_ = 0.0, first_sum_ = 0.0, calls_ = 0.0;
};

// A sample with its dense reference, measured on a fixed number of workers.
struct sample {
  std::vector<std::vector<int>> sequences;
  std::vector<std::vector<double>> dense_logprobs;
  std::size_t workers = 1;

  static sample of(const model& m, std::vector<std::vector<int>> seqs, std::size_t workers) {
    sample s;
    s.dense_logprobs = model_demo::reference_logprobs(m, seqs, workers);
    s.sequences = std::move(seqs);
    s.workers = std::max<std::size_t>(1, std::min(workers, s.sequences.size()));
    return s;
  }
  [[nodiscard]] std::size_t positions() const {  // predictions scored: every token but the last of each sequence
    std::size_t n = 0;
    for (const auto& q : sequences) n += q.size() - 1;
    return n;
  }
};

struct measurement {
  model_demo::quality q;
  double bytes = 1.0;            // the policy's bytes_fraction
  double kept = 1.0;             // its kept_fraction
  std::vector<double> token_kl;  // per position, sequence after sequence (when asked)
};

using policy_factory = std::function<std::unique_ptr<demo_policy>()>;

// Runs the policy over the sample (teacher forcing), one instance per worker; sequence q runs on
// worker q % workers, so no number depends on timing or on the worker count.
inline measurement measure(const model& m, const sample& s, const policy_factory& make, bool per_token = false) {
  std::vector<std::unique_ptr<demo_policy>> policies;
  for (std::size_t w = 0; w < s.workers; ++w) policies.push_back(make());
  const std::size_t v = m.vocab();
  struct sums {
    double kl = 0.0, agree = 0.0, nll = 0.0, positions = 0.0, bytes = 0.0, kept = 0.0;
    std::vector<double> token_kl;
  };
  std::vector<sums> per(s.sequences.size());
  model_demo::for_each_sequence(s.sequences.size(), s.workers, [&](std::size_t w, std::size_t q) {
    const auto& seq = s.sequences[q];
    auto cache = m.new_cache();
    std::vector<float> logits(seq.size() * v);
    policies[w]->reset_counts();  // counted per sequence: the same sums for any worker count
    m.prefill(seq, cache, logits, *policies[w]);
    const std::vector<double> lp = model_demo::log_softmax(logits, v);
    const std::vector<double>& ref = s.dense_logprobs[q];
    sums& r = per[q];
    r.bytes = policies[w]->bytes_fraction() * static_cast<double>(seq.size());
    r.kept = policies[w]->kept_fraction() * static_cast<double>(seq.size());
    for (std::size_t t = 0; t + 1 < seq.size(); ++t) {
      const double* a = ref.data() + t * v;
      const double* b = lp.data() + t * v;
      double k = 0.0;
      for (std::size_t i = 0; i < v; ++i) k += std::exp(a[i]) * (a[i] - b[i]);
      r.kl += k;
      if (per_token) r.token_kl.push_back(std::max(0.0, k));
      r.agree += (std::max_element(a, a + v) - a) == (std::max_element(b, b + v) - b) ? 1.0 : 0.0;
      r.nll -= b[static_cast<std::size_t>(seq[t + 1])];
      r.positions += 1.0;
    }
  });
  measurement out;
  sums all;
  double tokens = 0.0;
  for (std::size_t q = 0; q < per.size(); ++q) {  // in sequence order: the same bits for any worker count
    const sums& r = per[q];
    all.kl += r.kl;
    all.agree += r.agree;
    all.nll += r.nll;
    all.positions += r.positions;
    all.bytes += r.bytes;  // one FFN call per token and layer: tokens weigh the sequences
    all.kept += r.kept;
    tokens += static_cast<double>(s.sequences[q].size());
    out.token_kl.insert(out.token_kl.end(), r.token_kl.begin(), r.token_kl.end());
  }
  out.q = {all.kl / all.positions, all.agree / all.positions, std::exp(all.nll / all.positions)};
  out.bytes = all.bytes / tokens;
  out.kept = all.kept / tokens;
  return out;
}

}  // namespace calibration_run
