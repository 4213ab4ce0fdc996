#pragma once
// The evaluation harness of the model demo: evaluation and calibration sequences sampled from
// the dense model, the dense reference log-probabilities, and the quality of a policy against
// them (mean KL(dense ‖ policy) of the next-token distributions, top-1 agreement, perplexity),
// plus greedy decode speed. Sequences run on a fixed number of workers with a fixed
// assignment, so no result depends on the worker count or on timing.

#include "llama2c/model.hpp"

#include <actsparse/core/dtype.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace model_demo {

using llama2c::model;

// What the evaluation runs (the command line fills it, main.cpp).
struct options {
  std::string checkpoint = std::string(ACTSPARSE_DATA_DIR) + "/stories260K.bin";
  std::string tokenizer = std::string(ACTSPARSE_DATA_DIR) + "/tok512.bin";
  std::string json = "demo-results/latest.json";
  std::size_t sequences = 64;
  std::size_t length = 256;
  std::size_t kv_length = 512;  // the KV rows' sequences: the evaluation set continued to this length
  std::size_t calibration_sequences = 8;
  std::size_t decode_tokens = 128;
  std::string only;  // --policy: run only the policies whose name contains this (dense always runs)
  // --quantized: the FFN dtypes of the quantized rows (quantized.hpp)
  std::vector<actsparse::dtype> quantized{actsparse::dtype::q8_0, actsparse::dtype::q4_0};
  // --relu-checkpoint: the ReLU-fied model of the ReLU rows (relu.hpp); empty: no ReLU rows
  std::string relu_checkpoint = std::string(ACTSPARSE_DATA_DIR) + "/stories260K_relu.bin";
  std::size_t workers = std::max(1U, std::thread::hardware_concurrency());
};

// A progress bar on stderr.
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
inline void for_each_sequence(std::size_t n, std::size_t workers,
                              const std::function<void(std::size_t, std::size_t)>& fn) {
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

// Each sequence continued to `length` tokens, sampled from the dense model at temperature 1
// (sequence s draws from its own stream, seed + s: the same tokens for any worker count).
inline std::vector<std::vector<int>> extend_sequences(const model& m, std::vector<std::vector<int>> seqs,
                                                      std::size_t length, std::uint64_t seed, std::size_t workers) {
  for_each_sequence(seqs.size(), workers, [&](std::size_t, std::size_t s) {
    llama2c::dense_policy dense;
    std::mt19937_64 rng(seed + s);
    std::vector<float> logits(m.vocab());
    std::vector<double> p(m.vocab());
    auto cache = m.new_cache();
    std::vector<int>& seq = seqs[s];
    for (std::size_t t = 0; t + 1 < seq.size(); ++t) m.decode(seq[t], cache, logits, dense);  // the prefix
    while (seq.size() < length) {
      m.decode(seq.back(), cache, logits, dense);
      const float max = *std::max_element(logits.begin(), logits.end());
      for (std::size_t i = 0; i < p.size(); ++i) p[i] = std::exp(static_cast<double>(logits[i] - max));
      std::discrete_distribution<int> pick(p.begin(), p.end());
      seq.push_back(pick(rng));
    }
  });
  return seqs;
}

// Sequences of `length` tokens from BOS, sampled from the dense model at temperature 1.
inline std::vector<std::vector<int>> sample_sequences(const model& m, std::size_t count, std::size_t length,
                                                      std::uint64_t seed, std::size_t workers) {
  return extend_sequences(m, std::vector<std::vector<int>>(count, std::vector<int>{1}), length, seed, workers);
}

// log-softmax of every row of logits [rows × vocab], in double.
inline std::vector<double> log_softmax(const std::vector<float>& logits, std::size_t vocab) {
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
  double memory = 1.0;  // KV cache bytes held after each sequence over an f32 cache's, mean over sequences
};

// How a run makes its KV cache: the plain f32 cache unless a row gives tiered stores.
using cache_maker = std::function<model::kv_cache(const model&)>;
inline model::kv_cache plain_cache(const model& m) { return m.new_cache(); }

// The dense model's log-probabilities of every evaluation sequence (the reference).
inline std::vector<std::vector<double>> reference_logprobs(const model& m, const std::vector<std::vector<int>>& seqs,
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

// A reference's log-probabilities: per sequence, [positions × vocab].
using logprobs = std::vector<std::vector<double>>;

// Quality of a policy over the evaluation set against each of `refs` (one forward pass: KL and
// top-1 per reference; perplexity and memory are the policy's own, the same in every entry);
// `policies` holds one instance per worker.
template <class Policy>
std::vector<quality> evaluate_against(const model& m, const std::vector<std::vector<int>>& seqs,
                                      const std::vector<const logprobs*>& refs,
                                      std::vector<std::unique_ptr<Policy>>& policies,
                                      const cache_maker& make_cache = plain_cache) {
  const std::size_t v = m.vocab();
  struct sums {
    double kl = 0.0, agree = 0.0, nll = 0.0, positions = 0.0, memory = 0.0;
  };
  std::vector<std::vector<sums>> per(refs.size(), std::vector<sums>(seqs.size()));  // [reference][sequence]
  for_each_sequence(seqs.size(), policies.size(), [&](std::size_t w, std::size_t q) {
    const auto& s = seqs[q];
    auto cache = make_cache(m);
    std::vector<float> logits(s.size() * v);
    m.prefill(s, cache, logits, *policies[w]);
    const double memory = static_cast<double>(cache.bytes_held()) / static_cast<double>(m.f32_cache_bytes(s.size()));
    const std::vector<double> lp = log_softmax(logits, v);
    for (std::size_t k = 0; k < refs.size(); ++k) {
      const std::vector<double>& ref = (*refs[k])[q];
      sums& r = per[k][q];
      r.memory = memory;
      for (std::size_t t = 0; t + 1 < s.size(); ++t) {  // predictions of tokens 1 .. n-1
        const double* a = ref.data() + t * v;
        const double* b = lp.data() + t * v;
        double kl = 0.0;
        for (std::size_t i = 0; i < v; ++i) kl += std::exp(a[i]) * (a[i] - b[i]);
        r.kl += kl;
        r.agree += (std::max_element(a, a + v) - a) == (std::max_element(b, b + v) - b) ? 1.0 : 0.0;
        r.nll -= b[static_cast<std::size_t>(s[t + 1])];
        r.positions += 1.0;
      }
    }
  });
  std::vector<quality> out;
  for (const std::vector<sums>& of_ref : per) {
    sums all;  // added in sequence order: the same bits for any worker count
    for (const sums& r : of_ref) {
      all.kl += r.kl;
      all.agree += r.agree;
      all.nll += r.nll;
      all.positions += r.positions;
      all.memory += r.memory;
    }
    out.push_back({all.kl / all.positions, all.agree / all.positions, std::exp(all.nll / all.positions),
                   all.memory / static_cast<double>(seqs.size())});
  }
  return out;
}

// Quality of a policy over the evaluation set against the dense reference.
template <class Policy>
quality evaluate(const model& m, const std::vector<std::vector<int>>& seqs, const logprobs& dense_lp,
                 std::vector<std::unique_ptr<Policy>>& policies, const cache_maker& make_cache = plain_cache) {
  return evaluate_against(m, seqs, {&dense_lp}, policies, make_cache).front();
}

// The mean of f over the worker policies, weighted by the sequences each one ran.
template <class Policy, class F>
double over_workers(std::size_t sequences, const std::vector<std::unique_ptr<Policy>>& policies, const F& f) {
  double sum = 0.0;
  for (std::size_t w = 0; w < policies.size(); ++w) {
    const std::size_t ran = sequences / policies.size() + (w < sequences % policies.size() ? 1 : 0);
    sum += f(*policies[w]) * static_cast<double>(ran);
  }
  return sum / static_cast<double>(sequences);
}

// Greedy decode of `tokens` tokens from BOS; tokens per second.
inline double decode_speed(const model& m, llama2c::policy& p, std::size_t tokens,
                           const cache_maker& make_cache = plain_cache) {
  auto cache = make_cache(m);
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

// Token ids of a greedy decode from BOS.
inline std::vector<int> greedy(const model& m, llama2c::policy& p, std::size_t n) {
  auto cache = m.new_cache();
  std::vector<float> logits(m.vocab());
  std::vector<int> out = {1};
  while (out.size() < n) {
    m.decode(out.back(), cache, logits, p);
    out.push_back(static_cast<int>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
  }
  return out;
}

// One row of the results: a policy and what it measured.
struct row {
  std::string policy;
  std::string family;  // dense, top_k, cumulative_mass, cats, teal, token_sparse, calibrated, moe
  std::string scorer;
  double kept = 1.0;
  double bytes = 1.0;
  quality q;
  double tokens_per_s = 0.0;
  std::vector<double> kept_per_layer;       // token-sparse rows and ReLU exact gating only
  std::optional<double> experts_per_token;  // MoE rows only: mean over tokens and layers
  std::optional<double> memory_fraction;    // KV rows only: q.memory
  // Quantized rows only (family "quantized"): the FFN dtype, the f32 table's policy the row runs
  // ("dense" for the quantized dense model), and its quality against the quantized dense model
  // (q holds it against the f32 dense model, as every row).
  std::string ffn_dtype;
  std::string base_policy;
  std::optional<quality> vs_quant_dense;
};

}  // namespace model_demo
