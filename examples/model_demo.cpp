// actsparse demo: every sparsity policy on a real trained LLM (stories260K, a SwiGLU Llama),
// quality and speed side by side. For each policy it runs the whole model (every layer's FFN,
// or every projection, through actsparse operators) over an evaluation set sampled from the
// dense model and reports the kept fraction, the fraction of FFN weight bytes read, KL(dense ‖
// policy) of the next-token distributions, top-1 agreement with dense, perplexity and decode
// tokens/s. Thresholds (CATS, TEAL) are calibrated on a separate calibration sample.
//
//   model_demo [--checkpoint PATH] [--tokenizer PATH] [--sequences N] [--length N]
//              [--json PATH] [--threads N] [--policy TEXT] [--quick]
//
// --policy TEXT runs only the policies whose name contains TEXT (and dense), e.g.
// --policy "CATS" or --policy "weight_aware top_k 50%".
//
// Sequences are spread over --threads workers (default: every CPU); results do not depend on it.
//
//   model_demo --synthetic 7b|3b|tiny [--dtype f32|f16|bf16|q8_0|q4_0] [--layers N] [--tokens N]
//              [--context N] [--threads N] [--interleave] [--json PATH]
//
// decodes through a random-weight stack of that shape instead (speed at a realistic size).
// --interleave (q8_0 / q4_0) also builds interleaved copies (cpu::interleave_rows) of the
// attention projections, gate and up, which their dense GEMVs then read.
//
// Writes a table to stdout, a progress bar to stderr, and the rows as JSON (default
// demo-results/latest.json; scripts/demo_plots.py draws the plots from it).

// The one translation unit of this program that defines the CPU backend's kernels.
#define ACTSPARSE_CPU_IMPLEMENTATION
#include <actsparse/backends/cpu/implementation.hpp>

#include "llama2c/checkpoint.hpp"
#include "llama2c/model.hpp"
#include "llama2c/tokenizer.hpp"

#include <actsparse/backends/cpu/repack.hpp>
#include <actsparse/backends/reference.hpp>
#include <actsparse/calibration/threshold_calibration.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/ops/input_sparse_linear.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>
#include <actsparse/ops/token_sparse_ffn.hpp>
#include <actsparse/schedules/depth_schedule.hpp>
#include <actsparse/scorers/magnitude.hpp>
#include <actsparse/scorers/silu_magnitude.hpp>
#include <actsparse/scorers/weight_aware.hpp>
#include <actsparse/scorers/weight_aware_gate.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>
#include <actsparse/selectors/threshold.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace actsparse;
using llama2c::model;
using llama2c::policy;
using llama2c::projection;

// ---------------------------------------------------------------- policies -------------

// Counts of what a policy kept, over every call.
struct kept_counter {
  double kept = 0.0;
  double total = 0.0;
  void add(const selection& s) {
    kept += static_cast<double>(s.size());
    total += static_cast<double>(s.universe);
  }
  [[nodiscard]] double fraction() const { return total > 0.0 ? kept / total : 1.0; }
};

class demo_policy : public policy {
 public:
  // Kept fraction of what this policy selects (neurons, input channels or tokens).
  [[nodiscard]] virtual double kept_fraction() const { return 1.0; }
  // Fraction of the FFN weight bytes read per decode token.
  [[nodiscard]] virtual double bytes_fraction() const { return 1.0; }
  virtual void reset_counts() {}
};

class dense_demo_policy : public demo_policy {
 public:
  void ffn(std::size_t, const ffn_layer& w, std::span<const float> x, std::span<float> y) override {
    check(dense_ffn(backend_, w, x, y, scratch_, ex_), "dense FFN");
  }

 private:
  ffn_scratch scratch_;
};

// Neuron-sparse FFN on the CPU backend (up row gather, down row axpy over W_downᵀ): one
// operator per layer (scorers with weight norms and calibrated thresholds are per layer).
template <class Scorer, class Selector>
class neuron_policy : public demo_policy {
 public:
  using op_type = neuron_sparse_ffn<Scorer, Selector, cpu_backend>;
  explicit neuron_policy(std::vector<op_type> ops) : ops_(std::move(ops)) {}
  void ffn(std::size_t layer, const ffn_layer& w, std::span<const float> x, std::span<float> y) override {
    check(ops_.at(layer)(w, x, y, kept_, scratch_, ex_), "neuron-sparse FFN");
    count_.add(kept_);
  }
  [[nodiscard]] double kept_fraction() const override { return count_.fraction(); }
  [[nodiscard]] double bytes_fraction() const override {
    return ffn_bytes_fraction(ops_.front().source, count_.fraction());
  }
  void reset_counts() override { count_ = {}; }

 private:
  std::vector<op_type> ops_;
  selection kept_;
  ffn_scratch scratch_;
  kept_counter count_;
};

// TEAL: every projection input-sparse, by |x| against a per-layer, per-projection threshold,
// on the CPU backend (linear_args over row-major W: the quality of TEAL's rule; its speed needs
// W transposed, transposed_linear_args, which bench_cpu_gemv measures).
class teal_policy : public demo_policy {
 public:
  explicit teal_policy(std::vector<threshold> thresholds) : thresholds_(std::move(thresholds)) {}
  void linear(std::size_t layer, projection p, const weight_view& w, std::span<const float> x,
              std::span<float> y) override {
    const input_sparse_linear<magnitude, threshold, cpu_backend> op{
        magnitude{}, thresholds_.at(layer * 7 + static_cast<std::size_t>(p)), backend_};
    check(op(linear_layer{w}, x, y, kept_, scratch_, ex_), "input-sparse linear");
    const bool in_ffn = p == projection::gate || p == projection::up || p == projection::down;
    const double bytes = static_cast<double>(w.rows) * static_cast<double>(w.cols);
    all_.kept += bytes * kept_.kept_fraction();
    all_.total += bytes;
    if (in_ffn) {
      ffn_.kept += bytes * kept_.kept_fraction();
      ffn_.total += bytes;
    }
  }
  // The kept fraction of input channels, weighted by the weights each one reads.
  [[nodiscard]] double kept_fraction() const override { return all_.fraction(); }
  [[nodiscard]] double bytes_fraction() const override { return ffn_.fraction(); }
  void reset_counts() override { all_ = ffn_ = {}; }

 private:
  std::vector<threshold> thresholds_;
  selection kept_;
  linear_scratch scratch_;
  kept_counter all_, ffn_;
};

// Token-sparse prefill FFN (RedKnot) on the CPU backend; decode stays dense.
class token_policy : public demo_policy {
 public:
  token_policy(depth_schedule schedule, std::size_t layers) : op_{schedule, {}, {}}, per_layer_(layers) {}
  void ffn(std::size_t, const ffn_layer& w, std::span<const float> x, std::span<float> y) override {
    check(dense_ffn(backend_, w, x, y, dense_scratch_, ex_), "dense FFN");
  }
  void ffn_prefill(std::size_t layer, const ffn_layer& w, const llama2c::rows_buffer& attention_out,
                   const llama2c::rows_buffer& input, llama2c::rows_buffer& residual) override {
    check(op_(layer, w, attention_out.view(), input.view(), residual.view(), kept_, scratch_, ex_), "token-sparse FFN");
    per_layer_.at(layer).add(kept_);
    all_.add(kept_);
  }
  [[nodiscard]] double kept_fraction() const override { return all_.fraction(); }
  // Prefill reads every FFN weight once whatever it keeps: the saving is in FLOPs.
  [[nodiscard]] double bytes_fraction() const override { return 1.0; }
  void reset_counts() override {
    all_ = {};
    for (auto& c : per_layer_) c = {};
  }
  [[nodiscard]] std::vector<double> per_layer() const {
    std::vector<double> out;
    for (const auto& c : per_layer_) out.push_back(c.fraction());
    return out;
  }

 private:
  token_sparse_ffn<cpu_backend> op_;
  std::vector<kept_counter> per_layer_;
  kept_counter all_;
  selection kept_;
  token_scratch scratch_;
  ffn_scratch dense_scratch_;
};

// Records the FFN scores of `Scorer` per layer (keeping every neuron), for calibration.
template <class Scorer>
class score_probe : public policy {
 public:
  score_probe(std::vector<Scorer> scorers, score_source source, threshold_calibration& cal)
      : scorers_(std::move(scorers)), source_(source), cal_(&cal) {}
  void ffn(std::size_t layer, const ffn_layer& w, std::span<const float> x, std::span<float> y) override {
    const neuron_sparse_ffn<Scorer, threshold, cpu_backend> op{scorers_.at(layer), threshold{-INFINITY}, source_, {}};
    check(op(w, x, y, kept_, scratch_, ex_), "calibration FFN");
    cal_->add(layer, scratch_.scores);
  }

 private:
  std::vector<Scorer> scorers_;
  score_source source_;
  threshold_calibration* cal_;
  selection kept_;
  ffn_scratch scratch_;
};

// Records |x| of every projection's input per (layer, projection), for TEAL.
class input_probe : public policy {
 public:
  explicit input_probe(threshold_calibration& cal) : cal_(&cal) {}
  void linear(std::size_t layer, projection p, const weight_view& w, std::span<const float> x,
              std::span<float> y) override {
    abs_.resize(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) abs_[i] = std::fabs(x[i]);
    cal_->add(layer * 7 + static_cast<std::size_t>(p), abs_);
    policy::linear(layer, p, w, x, y);
  }

 private:
  threshold_calibration* cal_;
  std::vector<float> abs_;
};

// ---------------------------------------------------------------- evaluation -----------

struct options {
  std::string checkpoint = std::string(ACTSPARSE_DATA_DIR) + "/stories260K.bin";
  std::string tokenizer = std::string(ACTSPARSE_DATA_DIR) + "/tok512.bin";
  std::string json = "demo-results/latest.json";
  std::size_t sequences = 64;
  std::size_t length = 256;
  std::size_t calibration_sequences = 8;
  std::size_t decode_tokens = 128;
  std::string only;  // --policy: run only the policies whose name contains this (dense always runs)
  std::size_t workers = std::max(1U, std::thread::hardware_concurrency());
};

struct progress {
  std::size_t done = 0;
  std::size_t total = 1;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  void step(const std::string& what) {
    ++done;
    const double f = static_cast<double>(done) / static_cast<double>(total);
    const int width = 30;
    const int filled = static_cast<int>(f * width);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "\r[%.*s%*s] %3.0f%% %5.0f s  %-40.40s", filled, "##############################",
                 width - filled, "", 100.0 * f, s, what.c_str());
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }
};

// Runs fn(worker, q) for q in [0, n): sequence q on worker q % workers (a fixed assignment,
// so results never depend on timing).
void for_each_sequence(std::size_t n, std::size_t workers, const std::function<void(std::size_t, std::size_t)>& fn) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(workers);
  for (std::size_t w = 0; w < workers; ++w) {
    threads.emplace_back([&, w] {
      try {
        for (std::size_t q = w; q < n; q += workers) fn(w, q);
      } catch (...) {
        errors[w] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// Sequences of `length` tokens from BOS, sampled from the dense model at temperature 1.
std::vector<std::vector<int>> sample_sequences(const model& m, std::size_t count, std::size_t length,
                                               std::uint64_t seed, std::size_t workers) {
  std::vector<std::vector<int>> out(count);
  for_each_sequence(count, workers, [&](std::size_t, std::size_t s) {
    llama2c::dense_policy dense;
    std::mt19937_64 rng(seed + s);  // one stream per sequence: the same set for any worker count
    std::vector<float> logits(m.vocab());
    std::vector<double> p(m.vocab());
    auto cache = m.new_cache();
    std::vector<int> seq = {1};
    while (seq.size() < length) {
      m.decode(seq.back(), cache, logits, dense);
      const float max = *std::max_element(logits.begin(), logits.end());
      for (std::size_t i = 0; i < p.size(); ++i) p[i] = std::exp(static_cast<double>(logits[i] - max));
      std::discrete_distribution<int> pick(p.begin(), p.end());
      seq.push_back(pick(rng));
    }
    out[s] = std::move(seq);
  });
  return out;
}

// log-softmax of every row of logits [rows × vocab], in double.
std::vector<double> log_softmax(const std::vector<float>& logits, std::size_t vocab) {
  std::vector<double> out(logits.size());
  for (std::size_t r = 0; r < logits.size() / vocab; ++r) {
    const float* l = logits.data() + r * vocab;
    const double max = *std::max_element(l, l + vocab);
    double sum = 0.0;
    for (std::size_t i = 0; i < vocab; ++i) sum += std::exp(l[i] - max);
    const double lse = max + std::log(sum);
    for (std::size_t i = 0; i < vocab; ++i) out[r * vocab + i] = l[i] - lse;
  }
  return out;
}

struct quality {
  double kl = 0.0;
  double top1 = 0.0;
  double ppl = 0.0;
};

// The dense model's log-probabilities of every evaluation sequence (the reference).
std::vector<std::vector<double>> reference_logprobs(const model& m, const std::vector<std::vector<int>>& seqs,
                                                    std::size_t workers) {
  std::vector<std::vector<double>> out(seqs.size());
  for_each_sequence(seqs.size(), workers, [&](std::size_t, std::size_t q) {
    llama2c::dense_policy dense;
    auto cache = m.new_cache();
    std::vector<float> logits(seqs[q].size() * m.vocab());
    m.prefill(seqs[q], cache, logits, dense);
    out[q] = log_softmax(logits, m.vocab());
  });
  return out;
}

// Quality of a policy over the evaluation set; `policies` holds one instance per worker.
quality evaluate(const model& m, const std::vector<std::vector<int>>& seqs,
                 const std::vector<std::vector<double>>& dense_lp,
                 std::vector<std::unique_ptr<demo_policy>>& policies) {
  const std::size_t v = m.vocab();
  struct sums {
    double kl = 0.0, agree = 0.0, nll = 0.0, positions = 0.0;
  };
  std::vector<sums> per(seqs.size());
  for_each_sequence(seqs.size(), policies.size(), [&](std::size_t w, std::size_t q) {
    const auto& s = seqs[q];
    auto cache = m.new_cache();
    std::vector<float> logits(s.size() * v);
    m.prefill(s, cache, logits, *policies[w]);
    const std::vector<double> lp = log_softmax(logits, v);
    const std::vector<double>& ref = dense_lp[q];
    sums& r = per[q];
    for (std::size_t t = 0; t + 1 < s.size(); ++t) {  // predictions of tokens 1 .. n-1
      const double* a = ref.data() + t * v;
      const double* b = lp.data() + t * v;
      double k = 0.0;
      for (std::size_t i = 0; i < v; ++i) k += std::exp(a[i]) * (a[i] - b[i]);
      r.kl += k;
      r.agree += (std::max_element(a, a + v) - a) == (std::max_element(b, b + v) - b) ? 1.0 : 0.0;
      r.nll -= b[static_cast<std::size_t>(s[t + 1])];
      r.positions += 1.0;
    }
  });
  sums all;  // added in sequence order: the same bits for any worker count
  for (const sums& r : per) {
    all.kl += r.kl;
    all.agree += r.agree;
    all.nll += r.nll;
    all.positions += r.positions;
  }
  return {all.kl / all.positions, all.agree / all.positions, std::exp(all.nll / all.positions)};
}

// The mean of f over the worker policies, weighted by the sequences each one ran.
double over_workers(std::size_t sequences, const std::vector<std::unique_ptr<demo_policy>>& policies,
                    const std::function<double(const demo_policy&)>& f) {
  double sum = 0.0;
  for (std::size_t w = 0; w < policies.size(); ++w) {
    const std::size_t ran = sequences / policies.size() + (w < sequences % policies.size() ? 1 : 0);
    sum += f(*policies[w]) * static_cast<double>(ran);
  }
  return sum / static_cast<double>(sequences);
}

// Greedy decode of `tokens` tokens from BOS; tokens per second.
double decode_speed(const model& m, policy& p, std::size_t tokens) {
  auto cache = m.new_cache();
  std::vector<float> logits(m.vocab());
  int token = 1;
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < tokens; ++i) {
    m.decode(token, cache, logits, p);
    token = static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return static_cast<double>(tokens) / s;
}

struct row {
  std::string policy;
  std::string family;  // dense, top_k, cumulative_mass, cats, teal, token_sparse
  std::string scorer;
  double kept = 1.0;
  double bytes = 1.0;
  quality q;
  double tokens_per_s = 0.0;
  std::vector<double> kept_per_layer;
};

std::string json_number(double v) {
  if (!std::isfinite(v)) return "null";
  std::ostringstream os;
  os.precision(6);
  os << v;
  return os.str();
}

void write_json(const std::string& path, const std::vector<row>& rows, const options& o, const std::string& text_dense,
                const std::string& text_sparse) {
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream f(path);
  if (!f) detail::fail("model_demo", "--json", path, "a writable path");
  const auto quote = [](const std::string& s) {
    std::string out = "\"";
    for (const char c : s) {
      if (c == '"' || c == '\\') {
        out += '\\';
        out += c;
      } else if (c == '\n') {
        out += "\\n";
      } else if (static_cast<unsigned char>(c) < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\u%04x", c);
        out += buf;
      } else {
        out += c;
      }
    }
    return out + "\"";
  };
  f << "{\n \"model\": " << quote(o.checkpoint) << ",\n \"sequences\": " << o.sequences
    << ",\n \"length\": " << o.length << ",\n \"greedy_dense\": " << quote(text_dense)
    << ",\n \"greedy_sparse\": " << quote(text_sparse) << ",\n \"rows\": [\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const row& r = rows[i];
    f << "  {\"policy\": " << quote(r.policy) << ", \"family\": " << quote(r.family)
      << ", \"scorer\": " << quote(r.scorer) << ", \"kept_fraction\": " << json_number(r.kept)
      << ", \"bytes_fraction\": " << json_number(r.bytes) << ", \"kl\": " << json_number(r.q.kl)
      << ", \"top1\": " << json_number(r.q.top1) << ", \"ppl\": " << json_number(r.q.ppl)
      << ", \"tokens_per_s\": " << json_number(r.tokens_per_s);
    if (!r.kept_per_layer.empty()) {
      f << ", \"kept_per_layer\": [";
      for (std::size_t l = 0; l < r.kept_per_layer.size(); ++l) {
        f << (l ? ", " : "") << json_number(r.kept_per_layer[l]);
      }
      f << "]";
    }
    f << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  f << " ]\n}\n";
}

// Token ids of a greedy decode from BOS.
std::vector<int> greedy(const model& m, policy& p, std::size_t n) {
  auto cache = m.new_cache();
  std::vector<float> logits(m.vocab());
  std::vector<int> out = {1};
  while (out.size() < n) {
    m.decode(out.back(), cache, logits, p);
    out.push_back(static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
  }
  return out;
}

// ---------------------------------------------------------------- --synthetic ----------
// A random-weight Llama-shaped stack at a realistic size (7b: d_model 4096, d_ff 11008, 32
// heads; 3b: 2048, 11008, 16 heads), weights in any CPU dtype, running real decode steps:
// RMSNorm, q/k/v/o GEMVs, attention over a KV cache of `context` positions (per head a GEMV
// over the cached keys and a row axpy over the cached values), and the FFN
// through the same operators (dense_ffn, or neuron_sparse_ffn with magnitude of act(gate)
// and top_k at activity a, on the CPU backend's thread pool). It reports tokens/s and the
// time in the FFN and outside it, so the end-to-end gain is measured, not only the FFN's.

struct synthetic_options {
  std::string shape = "7b";
  dtype type = dtype::bf16;
  std::size_t layers = 4;
  std::size_t tokens = 16;
  std::size_t context = 256;
  std::size_t threads = std::max(1U, std::thread::hardware_concurrency());
  bool interleave = false;  // interleaved copies of the matrices read whole (q8_0 / q4_0)
  std::string json = "demo-results/synthetic.json";
};

// Owned weights of any dtype, from random values in [-scale, scale].
struct owned_matrix {
  std::vector<std::byte> bytes;
  weight_view view;
};

template <class T>
owned_matrix random_matrix_as(std::size_t rows, std::size_t cols, float scale, std::uint64_t seed) {
  owned_matrix m;
  const std::size_t stride = row_bytes(dtype_traits<T>::type, cols);
  m.bytes.resize(rows * stride);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> row(cols);
  for (std::size_t r = 0; r < rows; ++r) {
    for (float& v : row) v = u(rng);
    quantize_row(row.data(), reinterpret_cast<T*>(m.bytes.data() + r * stride), cols);
  }
  m.view = weight_view(m.bytes.data(), dtype_traits<T>::type, rows, cols, stride);
  return m;
}

owned_matrix random_matrix(dtype t, std::size_t rows, std::size_t cols, float scale, std::uint64_t seed) {
  switch (t) {
    case dtype::f32:
      return random_matrix_as<float>(rows, cols, scale, seed);
    case dtype::f16:
      return random_matrix_as<f16>(rows, cols, scale, seed);
    case dtype::bf16:
      return random_matrix_as<bf16>(rows, cols, scale, seed);
    case dtype::q8_0:
      return random_matrix_as<block_q8_0>(rows, cols, scale, seed);
    case dtype::q4_0:
      return random_matrix_as<block_q4_0>(rows, cols, scale, seed);
  }
  detail::fail("model_demo --synthetic", "dtype", static_cast<int>(t), "f32, f16, bf16, q8_0 or q4_0");
}

// A copy in fresh memory (layers share values, never bytes: each layer is read from DRAM).
owned_matrix copy_of(const owned_matrix& m) {
  owned_matrix c;
  c.bytes = m.bytes;
  c.view = m.view;
  c.view.data = c.bytes.data();
  return c;
}

struct synthetic_layer {
  owned_matrix wq, wk, wv, wo, gate, up, down_t;
  std::vector<float> k_cache, v_cache;  // [context × d_model]
};

struct synthetic_row {
  std::string policy;
  double activity = 1.0;
  double tokens_per_s = 0.0;
  double ms_per_token = 0.0;
  double ffn_ms = 0.0;
  double other_ms = 0.0;
};

int run_synthetic(const synthetic_options& o) {
  std::size_t d_model = 4096;
  std::size_t heads = 32;
  std::size_t d_ff = 11008;
  if (o.shape == "3b") {
    d_model = 2048;
    heads = 16;
  } else if (o.shape == "tiny") {  // for tests: the same code path in milliseconds
    d_model = 256;
    d_ff = 704;
    heads = 4;
  } else if (o.shape != "7b") {
    detail::fail("model_demo", "--synthetic", o.shape, "7b, 3b or tiny");
  }
  const std::size_t head_size = d_model / heads;
  std::fprintf(stderr, "building %zu random %s layers of the %s shape (d_model %zu, d_ff %zu)...\n", o.layers,
               std::string(name(o.type)).c_str(), o.shape.c_str(), d_model, d_ff);
  synthetic_layer first;
  const float sm = 1.0F / std::sqrt(static_cast<float>(d_model));
  first.wq = random_matrix(o.type, d_model, d_model, sm, 1);
  first.wk = random_matrix(o.type, d_model, d_model, sm, 2);
  first.wv = random_matrix(o.type, d_model, d_model, sm, 3);
  first.wo = random_matrix(o.type, d_model, d_model, sm, 4);
  first.gate = random_matrix(o.type, d_ff, d_model, sm, 5);
  first.up = random_matrix(o.type, d_ff, d_model, sm, 6);
  first.down_t = random_matrix(o.type, d_ff, d_model, 1.0F / std::sqrt(static_cast<float>(d_ff)), 7);
  std::vector<synthetic_layer> layers;
  cpu::weight_layouts layouts;  // --interleave: the copies, found by the views the calls pass
  for (std::size_t l = 0; l < o.layers; ++l) {
    synthetic_layer s;
    for (auto [dst, src] : {std::pair{&s.wq, &first.wq},
                            {&s.wk, &first.wk},
                            {&s.wv, &first.wv},
                            {&s.wo, &first.wo},
                            {&s.gate, &first.gate},
                            {&s.up, &first.up},
                            {&s.down_t, &first.down_t}}) {
      *dst = copy_of(*src);
    }
    std::mt19937_64 rng(100 + l);
    std::uniform_real_distribution<float> u(-1.0F, 1.0F);
    s.k_cache.resize(o.context * d_model);
    s.v_cache.resize(o.context * d_model);
    for (float& v : s.k_cache) v = u(rng);
    for (float& v : s.v_cache) v = u(rng);
    if (o.interleave) {  // every matrix a decode step reads whole (down_t is read by kept rows)
      for (const owned_matrix* m : {&s.wq, &s.wk, &s.wv, &s.wo, &s.gate, &s.up}) (void)layouts.add_interleaved(m->view);
    }
    layers.push_back(std::move(s));
  }
  first = {};

  cpu::thread_pool pool(o.threads);
  cpu::executor ex(pool);
  cpu_backend cpu;
  cpu.layouts = &layouts;
  std::vector<std::byte> workspace;
  const auto gemv = [&](const weight_view& w, std::span<const float> x, std::span<float> y) {
    if (!run(cpu, gemv_args{w, x, y, subset::everything()}, workspace, ex)) {
      detail::fail("model_demo --synthetic", "gemv", name(w.type), "a dtype the CPU backend handles");
    }
  };

  std::vector<synthetic_row> rows;
  std::vector<float> x(d_model), xb(d_model), q(d_model), k(d_model), v(d_model), att(d_model), o_out(d_model),
      ffn_out(d_model), scores(o.context);
  bool warm = false;  // a first dense pass, not reported, brings the whole stack through once
  for (const double a : {1.0, 1.0, 0.8, 0.6, 0.4, 0.2, 0.1, 0.05}) {
    const bool dense = a >= 1.0;
    const neuron_sparse_ffn<magnitude, top_k, cpu_backend> op{
        magnitude{}, top_k::by_ratio(a), score_source::gate_activation, {}};
    ffn_scratch scratch;
    selection kept;
    double ffn_s = 0.0;
    double total_s = 0.0;
    std::mt19937_64 rng(9);
    std::uniform_real_distribution<float> u(-1.0F, 1.0F);
    for (std::size_t step = 0; step < o.tokens + 1; ++step) {  // the first step warms up, untimed
      for (float& e : x) e = u(rng);
      double step_ffn = 0.0;
      const auto start = std::chrono::steady_clock::now();
      for (std::size_t l = 0; l < layers.size(); ++l) {
        synthetic_layer& L = layers[l];
        const std::vector<float> ones(d_model, 1.0F);
        llama2c::rmsnorm(x, ones, xb);
        gemv(L.wq.view, xb, q);
        gemv(L.wk.view, xb, k);
        gemv(L.wv.view, xb, v);
        const std::size_t pos = step % o.context;  // the new token overwrites a cache slot
        std::copy(k.begin(), k.end(), L.k_cache.begin() + static_cast<std::ptrdiff_t>(pos * d_model));
        std::copy(v.begin(), v.end(), L.v_cache.begin() + static_cast<std::ptrdiff_t>(pos * d_model));
        // Per head: scores = K_h·q_h (a GEMV over the cache rows of this head), softmax,
        // att_h = Σ_s p_s V_h[s, :] (a row axpy over the cache): the CPU backend's kernels.
        const float scale = 1.0F / std::sqrt(static_cast<float>(head_size));
        const std::size_t cache_stride = d_model * sizeof(float);
        for (std::size_t h = 0; h < heads; ++h) {
          const weight_view kh(L.k_cache.data() + h * head_size, dtype::f32, o.context, head_size, cache_stride);
          const weight_view vh(L.v_cache.data() + h * head_size, dtype::f32, o.context, head_size, cache_stride);
          gemv(kh, std::span<const float>(q).subspan(h * head_size, head_size), scores);
          float max = -INFINITY;
          for (float& e : scores) max = std::max(max, e *= scale);
          float sum = 0.0F;
          for (float& e : scores) sum += e = std::exp(e - max);
          for (float& e : scores) e /= sum;
          const transposed_linear_args pv{vh, scores, std::span<float>(att).subspan(h * head_size, head_size),
                                          subset::everything()};
          if (!run(cpu, pv, workspace, ex)) detail::fail("model_demo --synthetic", "attention", "", "");
        }
        gemv(L.wo.view, att, o_out);
        for (std::size_t i = 0; i < d_model; ++i) x[i] += o_out[i];
        llama2c::rmsnorm(x, ones, xb);
        const ffn_layer w{activation::silu, L.gate.view, L.up.view, weight_view{}, L.down_t.view};
        const auto f0 = std::chrono::steady_clock::now();
        const status st = dense ? dense_ffn(cpu, w, xb, ffn_out, scratch, ex) : op(w, xb, ffn_out, kept, scratch, ex);
        step_ffn += std::chrono::duration<double>(std::chrono::steady_clock::now() - f0).count();
        if (!st) detail::fail("model_demo --synthetic", "FFN", st.reason, "the CPU backend to run it");
        for (std::size_t i = 0; i < d_model; ++i) x[i] += ffn_out[i] * 1e-3F;  // keep x bounded
      }
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (step > 0) {
        total_s += t;
        ffn_s += step_ffn;
      }
    }
    if (!warm) {
      warm = true;
      continue;
    }
    const double n = static_cast<double>(o.tokens);
    char label[48];
    std::snprintf(label, sizeof label, dense ? "dense" : "top_k a=%.2f", a);
    rows.push_back({label, a, n / total_s, 1e3 * total_s / n, 1e3 * ffn_s / n, 1e3 * (total_s - ffn_s) / n});
    std::fprintf(stderr, "  %s: %.2f tokens/s\n", label, n / total_s);
  }

  const synthetic_row& d = rows.front();
  std::printf(
      "actsparse synthetic decode: %zu random %s layers%s of the %s shape (d_model %zu, d_ff %zu, %zu heads), "
      "KV context %zu, %zu threads, %zu tokens per row\n\n",
      o.layers, std::string(name(o.type)).c_str(), o.interleave ? " (interleaved copies)" : "", o.shape.c_str(),
      d_model, d_ff, heads, o.context, o.threads, o.tokens);
  std::printf("%-14s %9s %9s %9s %9s %9s %9s %9s\n", "policy", "tok/s", "ms/tok", "FFN ms", "other ms", "speed-up",
              "FFN x", "ideal");
  std::printf("%s\n", std::string(86, '-').c_str());
  for (const synthetic_row& r : rows) {
    std::printf("%-14s %9.2f %9.2f %9.2f %9.2f %9.3f %9.3f %9.3f\n", r.policy.c_str(), r.tokens_per_s, r.ms_per_token,
                r.ffn_ms, r.other_ms, r.tokens_per_s / d.tokens_per_s, d.ffn_ms / r.ffn_ms,
                3.0 / (1.0 + 2.0 * r.activity));
  }
  std::printf(
      "\nspeed-up: end to end over dense; FFN x: FFN time of dense / this; ideal: the FFN's 3/(1+2a) (the gate is\n"
      "read whole to score act(gate), up and W_down^T rows only for kept neurons). other: attention and norms.\n");

  const std::filesystem::path p(o.json);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream f(o.json);
  if (!f) detail::fail("model_demo", "--json", o.json, "a writable path");
  f << "{\n \"shape\": \"" << o.shape << "\", \"dtype\": \"" << name(o.type)
    << "\", \"interleaved\": " << (o.interleave ? "true" : "false") << ", \"layers\": " << o.layers
    << ", \"threads\": " << o.threads << ", \"context\": " << o.context << ",\n \"rows\": [\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const synthetic_row& r = rows[i];
    f << "  {\"policy\": \"" << r.policy << "\", \"activity\": " << json_number(r.activity)
      << ", \"tokens_per_s\": " << json_number(r.tokens_per_s) << ", \"ffn_ms\": " << json_number(r.ffn_ms)
      << ", \"other_ms\": " << json_number(r.other_ms) << "}" << (i + 1 < rows.size() ? "," : "") << "\n";
  }
  f << " ]\n}\n";
  std::printf("\nwrote %s\n", o.json.c_str());
  return 0;
}

// The value after the flag argv[i] (i moves onto it), or a clear error when there is none.
std::string argument_value(int argc, char** argv, int& i) {
  const std::string flag = argv[i];
  if (i + 1 >= argc) detail::fail("model_demo", flag, "no value", "a value after " + flag);
  return argv[++i];
}

// The integer value in [lo, hi] after the flag argv[i], or a clear error.
std::size_t argument_count(int argc, char** argv, int& i, std::size_t lo, std::size_t hi) {
  const std::string flag = argv[i];
  const std::string v = argument_value(argc, argv, i);
  std::size_t pos = 0;
  unsigned long n = 0;
  try {
    n = std::stoul(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos != v.size() || n < lo || n > hi) {
    detail::fail("model_demo", flag, v, "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return static_cast<std::size_t>(n);
}

options parse(int argc, char** argv) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&] { return argument_value(argc, argv, i); };
    const auto count = [&](std::size_t lo, std::size_t hi) { return argument_count(argc, argv, i, lo, hi); };
    if (a == "--checkpoint") {
      o.checkpoint = value();
    } else if (a == "--tokenizer") {
      o.tokenizer = value();
    } else if (a == "--json") {
      o.json = value();
    } else if (a == "--sequences") {
      o.sequences = count(1, 4096);
    } else if (a == "--length") {
      o.length = count(2, 1 << 20);
    } else if (a == "--threads") {
      o.workers = count(1, 256);
    } else if (a == "--policy") {
      o.only = value();
    } else if (a == "--quick") {
      o.sequences = 4;
      o.length = 40;
      o.calibration_sequences = 2;
      o.decode_tokens = 16;
    } else {
      detail::fail("model_demo", "argument", a,
                   "one of --checkpoint PATH, --tokenizer PATH, --json PATH, --sequences N, --length N, --threads N, "
                   "--policy TEXT, --quick");
    }
  }
  return o;
}

}  // namespace

// --synthetic SHAPE [--dtype T] [--layers N] [--tokens N] [--context N] [--threads N] [--interleave]
// [--json PATH]
synthetic_options parse_synthetic(int argc, char** argv) {
  synthetic_options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto value = [&] { return argument_value(argc, argv, i); };
    const auto count = [&](std::size_t lo, std::size_t hi) { return argument_count(argc, argv, i, lo, hi); };
    if (a == "--synthetic") {
      o.shape = value();
    } else if (a == "--dtype") {
      const std::string t = value();
      bool found = false;
      for (const dtype d : {dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0}) {
        if (t == name(d)) {
          o.type = d;
          found = true;
        }
      }
      if (!found) detail::fail("model_demo", "--dtype", t, "one of f32, f16, bf16, q8_0, q4_0");
    } else if (a == "--layers") {
      o.layers = count(1, 64);
    } else if (a == "--tokens") {
      o.tokens = count(1, 100000);
    } else if (a == "--context") {
      o.context = count(1, 1 << 16);
    } else if (a == "--threads") {
      o.threads = count(1, 256);
    } else if (a == "--interleave") {
      o.interleave = true;
    } else if (a == "--json") {
      o.json = value();
    } else {
      detail::fail("model_demo --synthetic", "argument", a,
                   "one of --dtype T, --layers N, --tokens N, --context N, --threads N, --interleave, --json PATH");
    }
  }
  if (o.interleave && o.type != dtype::q8_0 && o.type != dtype::q4_0) {
    detail::fail("model_demo --synthetic", "--interleave with --dtype", name(o.type),
                 "--dtype q8_0 or q4_0 (the dtypes with interleaved copies)");
  }
  return o;
}

int main(int argc, char** argv) try {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--synthetic") return run_synthetic(parse_synthetic(argc, argv));
  }
  const options o = parse(argc, argv);
  const llama2c::checkpoint ckpt = llama2c::checkpoint::load(o.checkpoint);
  const model m(ckpt);
  const llama2c::tokenizer tok = llama2c::tokenizer::load(o.tokenizer, m.vocab());
  if (o.length > m.seq_len()) {
    detail::fail("model_demo", "--length", o.length, "at most the model's seq_len = " + std::to_string(m.seq_len()));
  }
  const std::size_t layers = m.layers();

  // Per-layer scorers.
  std::vector<weight_aware> wa;
  std::vector<weight_aware_gate> wag;
  for (std::size_t l = 0; l < layers; ++l) {
    wa.push_back(weight_aware::from_weights(m.ffn(l).down));
    wag.push_back(weight_aware_gate::from_weights(m.ffn(l).up, m.ffn(l).down));
  }

  // Every configuration as a name and a way to build its policy.
  struct config {
    std::string name, family, scorer;
    std::function<std::unique_ptr<demo_policy>()> make;
    bool token_sparse = false;
  };
  std::vector<config> configs;
  configs.push_back({"dense", "dense", "-", [] { return std::make_unique<dense_demo_policy>(); }});
  const auto per_layer = [&](auto scorers, auto selector, score_source source) {
    using Scorer = typename decltype(scorers)::value_type;
    using Selector = decltype(selector);
    std::vector<neuron_sparse_ffn<Scorer, Selector, cpu_backend>> ops;
    for (std::size_t l = 0; l < layers; ++l) ops.push_back({scorers[l], selector, source, {}});
    return std::make_unique<neuron_policy<Scorer, Selector>>(std::move(ops));
  };
  const std::vector<magnitude> mag(layers);
  for (const double keep : {0.9, 0.75, 0.5, 0.35, 0.25}) {
    const std::string k = std::to_string(static_cast<int>(std::lround(keep * 100)));
    configs.push_back({"magnitude top_k " + k + "%", "top_k", "magnitude",
                       [=, &mag] { return per_layer(mag, top_k::by_ratio(keep), score_source::hidden); }});
    configs.push_back({"weight_aware top_k " + k + "%", "top_k", "weight_aware",
                       [=, &wa] { return per_layer(wa, top_k::by_ratio(keep), score_source::hidden); }});
    configs.push_back({"gate weight_aware top_k " + k + "%", "top_k", "weight_aware_gate",
                       [=, &wag] { return per_layer(wag, top_k::by_ratio(keep), score_source::gate_preactivation); }});
  }
  for (const double mass : {0.99, 0.95, 0.9, 0.8, 0.7}) {
    char name[64];
    std::snprintf(name, sizeof name, "magnitude cumulative_mass %.2f", mass);
    configs.push_back({name, "cumulative_mass", "magnitude", [=, &mag] {
                         return per_layer(mag, cumulative_mass{mass, 0, 1}, score_source::hidden);
                       }});
  }

  progress bar;
  const std::size_t cats_levels = 3;
  const std::size_t teal_levels = 3;
  const std::size_t token_levels = 3;
  bar.total = 3 + configs.size() + cats_levels + teal_levels + token_levels;

  // Evaluation and calibration samples (different seeds).
  const auto eval = sample_sequences(m, o.sequences, o.length, 2024, o.workers);
  bar.step("sampled the evaluation set");
  const auto calib = sample_sequences(m, o.calibration_sequences, o.length, 1'000'000, o.workers);
  const auto dense_lp = reference_logprobs(m, eval, o.workers);
  bar.step("dense reference");

  // Calibration: CATS thresholds on silu(gate) magnitudes per layer, TEAL on |x| per
  // (layer, projection).
  threshold_calibration cats_cal;
  threshold_calibration teal_cal;
  {
    score_probe<silu_magnitude> cats_probe(std::vector<silu_magnitude>(layers), score_source::gate_preactivation,
                                           cats_cal);
    input_probe teal_probe(teal_cal);
    for (const auto& s : calib) {
      auto c1 = m.new_cache();
      auto c2 = m.new_cache();
      std::vector<float> logits(s.size() * m.vocab());
      m.prefill(s, c1, logits, cats_probe);
      m.prefill(s, c2, logits, teal_probe);
    }
  }
  bar.step("calibrated CATS and TEAL thresholds");
  for (const double sparsity : {0.25, 0.4, 0.5}) {
    const std::string pct = std::to_string(static_cast<int>(std::lround(sparsity * 100)));
    configs.push_back({"CATS " + pct + "% sparse", "cats", "silu_magnitude", [=, &cats_cal] {
                         std::vector<threshold> t;
                         for (std::size_t l = 0; l < layers; ++l) t.push_back(cats_cal.selector_for(l, sparsity));
                         std::vector<neuron_sparse_ffn<silu_magnitude, threshold, cpu_backend>> ops;
                         for (std::size_t l = 0; l < layers; ++l) {
                           ops.push_back({silu_magnitude{}, t[l], score_source::gate_preactivation, {}});
                         }
                         return std::make_unique<neuron_policy<silu_magnitude, threshold>>(std::move(ops));
                       }});
  }
  for (const double sparsity : {0.25, 0.4, 0.5}) {
    const std::string pct = std::to_string(static_cast<int>(std::lround(sparsity * 100)));
    configs.push_back({"TEAL " + pct + "% sparse", "teal", "magnitude(x)", [=, &teal_cal] {
                         std::vector<threshold> t;
                         for (std::size_t k = 0; k < layers * 7; ++k) t.push_back(teal_cal.selector_for(k, sparsity));
                         return std::make_unique<teal_policy>(std::move(t));
                       }});
  }
  for (const char* preset : {"quality", "balanced", "speed"}) {
    configs.push_back(
        {std::string("token-sparse ") + preset, "token_sparse", "token_l2",
         [=] { return std::make_unique<token_policy>(depth_schedule::preset(preset).scaled_to(layers), layers); },
         true});
  }

  if (!o.only.empty()) {
    std::vector<config> chosen;
    for (const config& c : configs) {
      if (c.name == "dense" || c.name.find(o.only) != std::string::npos) chosen.push_back(c);
    }
    if (chosen.size() == 1) detail::fail("model_demo", "--policy", o.only, "text found in at least one policy name");
    bar.total -= configs.size() - chosen.size();
    configs = std::move(chosen);
  }
  std::vector<row> rows;
  for (const config& c : configs) {
    std::vector<std::unique_ptr<demo_policy>> p;
    for (std::size_t w = 0; w < std::min(o.workers, o.sequences); ++w) p.push_back(c.make());
    const quality q = evaluate(m, eval, dense_lp, p);
    row r{c.name,
          c.family,
          c.scorer,
          over_workers(o.sequences, p, [](const demo_policy& d) { return d.kept_fraction(); }),
          over_workers(o.sequences, p, [](const demo_policy& d) { return d.bytes_fraction(); }),
          q,
          0.0,
          {}};
    if (c.token_sparse) {
      for (std::size_t l = 0; l < layers; ++l) {
        r.kept_per_layer.push_back(over_workers(
            o.sequences, p, [l](const demo_policy& d) { return static_cast<const token_policy&>(d).per_layer()[l]; }));
      }
    }
    p.front()->reset_counts();
    r.tokens_per_s = decode_speed(m, *p.front(), o.decode_tokens);
    rows.push_back(r);
    bar.step(c.name);
  }

  std::printf(
      "actsparse model demo: %s (dim %d, hidden %d, %d layers), %zu sequences x %zu tokens sampled from "
      "the dense model (T = 1)\n\n",
      o.checkpoint.c_str(), m.cfg().dim, m.cfg().hidden_dim, m.cfg().n_layers, o.sequences, o.length);
  std::printf("%-34s %6s %6s %9s %6s %7s %9s\n", "policy", "kept", "bytes", "KL", "top1", "ppl", "tok/s");
  std::printf("%s\n", std::string(83, '-').c_str());
  for (const row& r : rows) {
    std::printf("%-34s %6.3f %6.3f %9.5f %6.3f %7.3f %9.0f\n", r.policy.c_str(), r.kept, r.bytes, r.q.kl, r.q.top1,
                r.q.ppl, r.tokens_per_s);
  }
  std::printf(
      "\nkept: fraction of FFN neurons (top_k, cumulative_mass, CATS), of input channels weighted by weight bytes\n"
      "(TEAL, all seven projections) or of prefill tokens (token-sparse) kept. bytes: fraction of the FFN weight\n"
      "bytes a decode token reads ((2+a)/3 when the score needs h = act(g)*u, which reads all of up; (1+2a)/3\n"
      "when it needs the gate only; token-sparse decodes dense). KL: mean KL(dense || policy) of the next-token\n"
      "distributions; top1: agreement with dense; ppl: perplexity of the evaluation set; tok/s: greedy decode.\n");
  for (const row& r : rows) {
    if (r.kept_per_layer.empty()) continue;
    std::printf("%s kept tokens per layer:", r.policy.c_str());
    for (const double f : r.kept_per_layer) std::printf(" %.3f", f);
    std::printf("\n");
  }

  // A greedy sample under dense and under one sparse preset, as text.
  dense_demo_policy dense_greedy;
  std::size_t shown = configs.size() > 1 ? 1 : 0;  // magnitude top_k 50% when present
  for (std::size_t i = 0; i < configs.size(); ++i) {
    if (configs[i].name == "magnitude top_k 50%") shown = i;
  }
  auto sparse_greedy = configs[shown].make();
  const std::string text_dense = tok.decode(greedy(m, dense_greedy, 96));
  const std::string text_sparse = tok.decode(greedy(m, *sparse_greedy, 96));
  std::printf("\ngreedy from BOS, dense:\n  %s\ngreedy from BOS, %s:\n  %s\n", text_dense.c_str(),
              configs[shown].name.c_str(), text_sparse.c_str());
  write_json(o.json, rows, o, text_dense, text_sparse);
  std::printf("\nwrote %s\n", o.json.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "\nmodel_demo: %s\n", e.what());
  return 1;
}
