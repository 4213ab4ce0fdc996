#pragma once
// The model demo's output: the tables on stdout and the JSON files (nlohmann::json;
// scripts/demo_plots.py, scripts/quality_summary.py and scripts/test_demo_plots.py read the
// keys written here). Numbers have 6 significant digits; a non-finite one is written null.

#include "calibration/pipeline.hpp"
#include "harness.hpp"
#include "kv.hpp"
#include "llama2c/checkpoint.hpp"
#include "moe.hpp"
#include "synthetic.hpp"

#include <actsparse/core/dtype.hpp>
#include <actsparse/core/error.hpp>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace model_demo {

using json = nlohmann::ordered_json;  // keys in the order written

// v rounded to 6 significant digits (more would be noise in a measurement); a non-finite v
// is kept, and written null.
inline double number(double v) {
  if (!std::isfinite(v)) return v;
  char text[32];
  std::snprintf(text, sizeof text, "%.6g", v);
  return std::strtod(text, nullptr);
}

// Writes j to `path` (its folder created), one key per line.
inline void write_json(const std::string& path, const json& j) {
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  std::ofstream f(path);
  if (!f) actsparse::detail::fail("model_demo", "--json", path, "a writable path");
  // A byte that is not UTF-8 (a tokenizer's byte token in the greedy text) becomes U+FFFD.
  f << j.dump(1, ' ', false, json::error_handler_t::replace) << "\n";
  if (!f) actsparse::detail::fail("model_demo", "--json", path, "a path with room to write");
}

// ---------------------------------------------------------------- the evaluation -------

inline void print_results(const options& o, const llama2c::config& cfg, const std::vector<row>& rows) {
  std::printf(
      "actsparse model demo: %s (dim %d, hidden %d, %d layers), %zu sequences x %zu tokens sampled from "
      "the dense model (T = 1)\n\n",
      o.checkpoint.c_str(), cfg.dim, cfg.hidden_dim, cfg.n_layers, o.sequences, o.length);
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
    if (r.kept_per_layer.empty() || r.family != "token_sparse") continue;
    std::printf("%s kept tokens per layer:", r.policy.c_str());
    for (const double f : r.kept_per_layer) std::printf(" %.3f", f);
    std::printf("\n");
  }
}

inline void print_greedy(const std::string& text_dense, const std::string& sparse_name,
                         const std::string& text_sparse) {
  std::printf("\ngreedy from BOS, dense:\n  %s\ngreedy from BOS, %s:\n  %s\n", text_dense.c_str(), sparse_name.c_str(),
              text_sparse.c_str());
}

// {model, sequences, length, greedy_dense, greedy_sparse, rows: [{policy, family, scorer,
// kept_fraction, bytes_fraction, kl, top1, ppl, tokens_per_s[, kept_per_layer][, experts_per_token]
// [, memory_fraction][, ffn_dtype, base_policy, kl_vs_quant_dense, top1_vs_quant_dense]
// [, kl_vs_relu_dense, top1_vs_relu_dense]}]}; KV rows (family "kv") are over sequences of
// kv_length tokens; quantized rows (family "quantized") have kl / top1 against the f32 dense model
// and *_vs_quant_dense against the dense model of their dtype; ReLU rows (family "relu", relu.hpp)
// kl / top1 against the original (SwiGLU) dense model and *_vs_relu_dense against the ReLU model's.
inline json results_json(const options& o, const std::vector<row>& rows, const std::string& text_dense,
                         const std::string& text_sparse) {
  json out = {{"model", o.checkpoint},    {"sequences", o.sequences},   {"length", o.length},
              {"kv_length", o.kv_length}, {"greedy_dense", text_dense}, {"greedy_sparse", text_sparse},
              {"rows", json::array()}};
  for (const row& r : rows) {
    json j = {{"policy", r.policy},
              {"family", r.family},
              {"scorer", r.scorer},
              {"kept_fraction", number(r.kept)},
              {"bytes_fraction", number(r.bytes)},
              {"kl", number(r.q.kl)},
              {"top1", number(r.q.top1)},
              {"ppl", number(r.q.ppl)},
              {"tokens_per_s", number(r.tokens_per_s)}};
    if (!r.kept_per_layer.empty()) {
      json& per_layer = j["kept_per_layer"] = json::array();
      for (const double f : r.kept_per_layer) per_layer.push_back(number(f));
    }
    if (r.experts_per_token) j["experts_per_token"] = number(*r.experts_per_token);
    if (r.memory_fraction) j["memory_fraction"] = number(*r.memory_fraction);
    if (r.vs_quant_dense && r.family == "relu") {
      j["kl_vs_relu_dense"] = number(r.vs_quant_dense->kl);
      j["top1_vs_relu_dense"] = number(r.vs_quant_dense->top1);
    } else if (r.vs_quant_dense) {
      j["ffn_dtype"] = r.ffn_dtype;
      j["base_policy"] = r.base_policy;
      j["kl_vs_quant_dense"] = number(r.vs_quant_dense->kl);
      j["top1_vs_quant_dense"] = number(r.vs_quant_dense->top1);
    }
    out["rows"].push_back(std::move(j));
  }
  return out;
}

// The KV rows: memory held against quality, with what each setting does.
inline void print_kv(const options& o, const std::vector<kv_setting>& settings, const std::vector<row>& rows) {
  std::printf(
      "\nKV cache in tiered stores (%zu sequences continued to %zu tokens, FFN dense): memory = bytes held after the "
      "sequence (rows, scales, minimums) / an f32 cache's\n",
      o.sequences, o.kv_length);
  std::printf("%-46s %7s %11s %6s %7s %9s\n", "policy", "memory", "KL", "top1", "ppl", "tok/s");
  for (const row& r : rows) {
    if (!r.memory_fraction) continue;
    std::printf("%-46s %7.4f %11.6f %6.3f %7.3f %9.0f\n", r.policy.c_str(), *r.memory_fraction, r.q.kl, r.q.top1,
                r.q.ppl, r.tokens_per_s);
  }
  for (const kv_setting& s : settings) std::printf("  %s: %s\n", s.name.c_str(), s.description.c_str());
}

// The rows of `family` against two references: kl / top1 against the first (the f32 / original
// dense model) and against the family's own dense model (`second`: its column's label); rows
// named `per_layer_of` also print their kept fraction per layer.
inline void print_two_references(const std::vector<row>& rows, std::string_view family, std::string_view second,
                                 std::string_view per_layer_of = {}) {
  const std::string kl2 = "KL " + std::string(second);
  std::printf("%-46s %6s %6s %9s %6s %13s %8s %7s %9s\n", "policy", "kept", "bytes", "KL", "top1", kl2.c_str(),
              "top1 2nd", "ppl", "tok/s");
  for (const row& r : rows) {
    if (!r.vs_quant_dense || r.family != family) continue;
    std::printf("%-46s %6.3f %6.3f %9.5f %6.3f %13.5f %8.3f %7.3f %9.0f\n", r.policy.c_str(), r.kept, r.bytes, r.q.kl,
                r.q.top1, r.vs_quant_dense->kl, r.vs_quant_dense->top1, r.q.ppl, r.tokens_per_s);
    if (!per_layer_of.empty() && r.policy == per_layer_of) {
      std::printf("  neurons active per layer (1 - the share of exact zeros):");
      for (const double f : r.kept_per_layer) std::printf(" %.3f", f);
      std::printf("\n");
    }
  }
}

// The quantized rows: the loss of quantization (KL against f32 dense of the quantized dense row)
// and of sparsity (KL against the quantized dense model) side by side.
inline void print_quantized(const std::vector<row>& rows) {
  std::printf(
      "\nQuantized FFN weights (W_gate, W_up, W_down^T by ggml's reference quantizers; attention and classifier "
      "f32): KL / top1 against the f32 dense model, and against the dense model of the same dtype (q dense)\n");
  print_two_references(rows, "quantized", "q dense");
  std::printf(
      "bytes: of the quantized dense model's FFN bytes (the three matrices share one dtype, so a share of rows is a "
      "share of bytes); thresholds and calibrated budgets are the f32 model's.\n");
}

// The ReLU-fied model's rows (relu.hpp): against the original dense model and the ReLU model's
// dense FFN, and the share of neurons active per layer under exact gating.
inline void print_relu(const std::vector<row>& rows) {
  std::printf(
      "\nReLU-fied model (data/stories260K_relu.bin: SiLU -> ReLU, distilled from the original): KL / top1 against "
      "the original (SwiGLU) dense model, and against the ReLU model's dense FFN (relu dense)\n");
  print_two_references(rows, "relu", "relu dense", "relu exact gating");
}

// The MoE rows' experts per token and what the MoEfication measured (moe.hpp).
inline void print_moe(const moefied& moe, const std::vector<row>& rows) {
  std::printf(
      "\nMoE (MoEfication): each layer's %zu neurons in %zu experts of %zu (balanced k-means of |h| patterns over %zu "
      "calibration tokens, zero-padded), a linear router per layer (ridge %g, fitted in %.2f s); top_k_unit gating.\n"
      "bytes: the chosen experts' stacked matrices (padded rows included) + the router, over the dense FFN.\n",
      moe.d_ff, moe.experts, moe.d_ff_expert, moe.calibration_tokens, moe.ridge, moe.fit_seconds);
  std::printf("%-34s %8s %6s %13s %6s %7s\n", "policy", "experts", "bytes", "KL", "top1", "ppl");
  for (const row& r : rows) {
    if (!r.experts_per_token) continue;
    std::printf("%-34s %8.3f %6.3f %13.6e %6.3f %7.3f\n", r.policy.c_str(), *r.experts_per_token, r.bytes, r.q.kl,
                r.q.top1, r.q.ppl);
  }
  std::printf(
      "router quality (sum of true contribution mass over the router's top k / over the true top k, %zu "
      "evaluation tokens x layers):",
      moe.quality_tokens);
  for (std::size_t i = 0; i < moe_quality_ks.size(); ++i) {
    std::printf(" k=%zu %.4f", moe_quality_ks[i], moe.router_quality[i]);
  }
  std::printf("\n");
}

// {experts, d_ff_expert, d_ff, padded_neurons, calibration_tokens, clustering, router, ridge,
//  kmeans_iterations, fit_seconds, router_quality: {k: ratio}, router_quality_tokens, cluster_sizes: [[per layer]]}
inline json moe_json(const moefied& moe) {
  json out = {{"experts", moe.experts},
              {"d_ff_expert", moe.d_ff_expert},
              {"d_ff", moe.d_ff},
              {"padded_neurons", moe.experts * moe.d_ff_expert - moe.d_ff},
              {"calibration_tokens", moe.calibration_tokens},
              {"clustering",
               "balanced spherical k-means of each neuron's |h_j| over the calibration tokens (unit-normalised), "
               "farthest-point init, sizes ceil/floor(d_ff/experts), experts zero-padded to d_ff_expert"},
              {"router",
               "linear [x, 1] -> experts logits, ridge least squares (Eigen LDLT) of centred log(m_e/sum m + 1e-3), "
               "m_e = ||FFN_e(x)||_2; ridge chosen on every 5th calibration token; top_k_unit gating"},
              {"bytes", "chosen experts' gate, up, down_t incl. padded rows + router weights and bias, over dense FFN"},
              {"ridge", moe.ridge},
              {"kmeans_iterations", moe.kmeans_iterations},
              {"fit_seconds", number(moe.fit_seconds)},
              {"router_quality", json::object()},
              {"router_quality_tokens", moe.quality_tokens},
              {"cluster_sizes", json::array()}};
  for (std::size_t i = 0; i < moe_quality_ks.size(); ++i) {
    out["router_quality"][std::to_string(moe_quality_ks[i])] = number(moe.router_quality[i]);
  }
  for (const moe_layer& l : moe.layers) {
    json sizes = json::array();
    for (const auto& n : l.neurons) sizes.push_back(n.size());
    out["cluster_sizes"].push_back(std::move(sizes));
  }
  return out;
}

// What the demo's calibration measured (examples/calibration/pipeline.hpp's report):
// {tokens, statistics_us_per_token, seconds: {stage: s}, predictor_parameters,
//  predictor: [{target, budget, accuracy, too_sparse, too_dense, tokens}],
//  low_rank: [{rank, target, predictor_bytes, keep_predicted, keep_exact, precision, recall}],
//  spans: [{target, order, first_spans, final_spans, first_rows, final_rows}],
//  budgets: [{budget, method, target, target_bytes, bytes, kl}]} (bytes and KL on the calibration sample)
inline json calibration_json(const calibration_run::report& r) {
  json out = {{"tokens", r.tokens},
              {"statistics_us_per_token", number(1e6 * r.statistics_seconds / static_cast<double>(r.tokens))},
              {"seconds", json::object()},
              {"predictor_parameters", r.predictor_parameters},
              {"predictor", json::array()},
              {"low_rank", json::array()},
              {"spans", json::array()},
              {"budgets", json::array()}};
  for (const auto& [stage, s] : r.seconds) out["seconds"][stage] = number(s);
  for (const auto& p : r.predictor) {
    out["predictor"].push_back({{"target", p.target},
                                {"budget", number(p.budget)},
                                {"accuracy", number(p.accuracy)},
                                {"too_sparse", number(p.too_sparse)},
                                {"too_dense", number(p.too_dense)},
                                {"tokens", p.tokens}});
  }
  for (const auto& l : r.low_rank) {
    out["low_rank"].push_back({{"rank", l.rank},
                               {"target", l.target},
                               {"predictor_bytes", number(l.predictor_bytes)},
                               {"keep_predicted", number(l.keep_predicted)},
                               {"keep_exact", number(l.keep_exact)},
                               {"precision", number(l.precision)},
                               {"recall", number(l.recall)}});
  }
  for (const auto& s : r.spans) {
    out["spans"].push_back({{"target", s.target},
                            {"order", s.order},
                            {"first_spans", number(s.first_spans)},
                            {"final_spans", number(s.final_spans)},
                            {"first_rows", number(s.first_rows)},
                            {"final_rows", number(s.final_rows)}});
  }
  for (const auto& b : r.budgets) {
    out["budgets"].push_back({{"budget", b.budget},
                              {"method", b.method},
                              {"target", b.target},
                              {"target_bytes", number(b.target_bytes)},
                              {"bytes", number(b.bytes)},
                              {"kl", number(b.kl)}});
  }
  return out;
}

// ---------------------------------------------------------------- --synthetic ----------

inline void print_synthetic(const synthetic_options& o, const synthetic_result& s) {
  const synthetic_row& d = s.rows.front();
  std::printf(
      "actsparse synthetic decode: %zu random %s layers%s of the %s shape (d_model %zu, d_ff %zu, %zu heads), "
      "KV context %zu, %zu threads, %zu tokens per row\n\n",
      o.layers, std::string(name(o.type)).c_str(), o.interleave ? " (interleaved copies)" : "", o.shape.c_str(),
      s.shape.d_model, s.shape.d_ff, s.shape.heads, o.context, o.threads, o.tokens);
  std::printf("%-14s %9s %9s %9s %9s %9s %9s %9s\n", "policy", "tok/s", "ms/tok", "FFN ms", "other ms", "speed-up",
              "FFN x", "ideal");
  std::printf("%s\n", std::string(86, '-').c_str());
  for (const synthetic_row& r : s.rows) {
    std::printf("%-14s %9.2f %9.2f %9.2f %9.2f %9.3f %9.3f %9.3f\n", r.policy.c_str(), r.tokens_per_s, r.ms_per_token,
                r.ffn_ms, r.other_ms, r.tokens_per_s / d.tokens_per_s, d.ffn_ms / r.ffn_ms,
                3.0 / (1.0 + 2.0 * r.activity));
  }
  std::printf(
      "\nspeed-up: end to end over dense; FFN x: FFN time of dense / this; ideal: the FFN's 3/(1+2a) (the gate is\n"
      "read whole to score act(gate), up and W_down^T rows only for kept neurons). other: attention and norms.\n");
}

// {shape, dtype, interleaved, layers, threads, context, rows: [{policy, activity,
// tokens_per_s, ffn_ms, other_ms}]}
inline json synthetic_json(const synthetic_options& o, const synthetic_result& s) {
  json out = {{"shape", o.shape},
              {"dtype", std::string(name(o.type))},
              {"interleaved", o.interleave},
              {"layers", o.layers},
              {"threads", o.threads},
              {"context", o.context},
              {"rows", json::array()}};
  for (const synthetic_row& r : s.rows) {
    json j = {{"policy", r.policy},
              {"activity", number(r.activity)},
              {"tokens_per_s", number(r.tokens_per_s)},
              {"ffn_ms", number(r.ffn_ms)},
              {"other_ms", number(r.other_ms)}};
    out["rows"].push_back(std::move(j));
  }
  return out;
}

}  // namespace model_demo
