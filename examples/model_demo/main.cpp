// actsparse model demo: every sparsity policy on a real trained LLM (stories260K, a SwiGLU Llama),
// quality and speed side by side. For each policy it runs the whole model (every layer's FFN,
// or every projection, through actsparse operators) over an evaluation set sampled from the
// dense model and reports the kept fraction, the fraction of FFN weight bytes read, KL(dense ‖
// policy) of the next-token distributions, top-1 agreement with dense, perplexity and decode
// tokens/s. Thresholds (CATS, TEAL) are calibrated on a separate calibration sample.
//
//   model_demo [--checkpoint PATH] [--tokenizer PATH] [--sequences N] [--length N] [--kv-length N]
//              [--json PATH] [--threads N] [--policy TEXT] [--quantized q8_0,q4_0|none]
//              [--relu-checkpoint PATH|none] [--quick]
//   model_demo --synthetic 7b|3b|tiny [--dtype f32|f16|bf16|q8_0|q4_0] [--layers N] [--tokens N]
//              [--context N] [--threads N] [--interleave] [--json PATH]
//
// --policy TEXT runs only the policies whose name contains TEXT (and dense). Sequences are
// spread over --threads workers (default: every CPU); results do not depend on it. --synthetic
// decodes through a random-weight stack of that shape instead (speed at a realistic size);
// --interleave (q8_0 / q4_0) also reads interleaved copies of the matrices read whole.
// model_demo --help lists every option with its default and range.
//
// Writes a table to stdout, a progress bar to stderr, and the rows as JSON (default
// demo-results/latest.json, or demo-results/synthetic.json; scripts/demo_plots.py draws the
// plots from it with matplotlib, as PNG and SVG).
//
// The KV rows (names with "kv") keep the KV cache in tiered stores (kv.hpp) over the evaluation
// sequences continued to --kv-length tokens (default 512), the FFN dense.
//
// The quantized rows (names "q8_0 ..." / "q4_0 ...", quantized.hpp) run the model with its FFN
// weights quantized to each dtype of --quantized (default both; none: no quantized rows), KL and
// top-1 against the f32 dense model and against the quantized dense model.
//
// The ReLU rows (names "relu ...", relu.hpp) run the ReLU-fied model (--relu-checkpoint, default
// data/stories260K_relu.bin; none: no ReLU rows) under exact gating and other policies (budgets
// calibrated on the ReLU model itself among them), KL and top-1 against the original dense model
// and against the ReLU model's dense FFN.
//
// The files: harness.hpp (sampling, the dense reference, KL / top-1 / perplexity),
// policies.hpp (the policies, their calibration, the policy table), kv.hpp (the KV rows), moe.hpp (the dense model
// split into 8 experts per layer with a fitted router: the MoE rows), quantized.hpp (the quantized rows),
// calibrated.hpp (the calibrated rows), relu.hpp (the ReLU rows), synthetic.hpp (the random-weight decode),
// output.hpp (tables and JSON), this file (the command line). Libraries (Debian packages; examples only, the library
// itself needs neither):
//   CLI11 (libcli11-dev): the command line: typed options with ranges, choices, defaults in
//     --help, and options of one mode refused in the other, all declared rather than hand-parsed.
//   nlohmann::json (nlohmann-json3-dev): the JSON files: escaping, UTF-8 and number formatting
//     done right by a well-kept library instead of hand-written string building.
//   matplotlib (python3-matplotlib, in scripts/demo_plots.py): the plots, PNG and SVG.

// The CPU backend's kernels are defined in examples/common/cpu_kernels.cpp.
#include <actsparse/backends/cpu/implementation.hpp>

#include "calibrated.hpp"
#include "calibration/pipeline.hpp"
#include "harness.hpp"
#include "kv.hpp"
#include "llama2c/checkpoint.hpp"
#include "llama2c/model.hpp"
#include "llama2c/tokenizer.hpp"
#include "moe.hpp"
#include "output.hpp"
#include "policies.hpp"
#include "quantized.hpp"
#include "relu.hpp"
#include "synthetic.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace model_demo {
namespace {

// One row: the policy over the evaluation set against refs.front() (the f32 dense model), and
// against refs[1] (a quantized row's quantized dense model) when given.
row evaluate_row(const model& m, const options& o, const std::vector<std::vector<int>>& eval,
                 const std::vector<const logprobs*>& refs, const policy_config& c) {
  std::vector<std::unique_ptr<demo_policy>> p;
  for (std::size_t w = 0; w < std::min(o.workers, o.sequences); ++w) p.push_back(c.make());
  row r;
  r.policy = c.name;
  r.family = c.family;
  r.scorer = c.scorer;
  const std::vector<quality> q = evaluate_against(m, eval, refs, p);
  r.q = q.front();
  if (q.size() > 1) r.vs_quant_dense = q[1];
  r.kept = over_workers(o.sequences, p, [](const demo_policy& d) { return d.kept_fraction(); });
  r.bytes = over_workers(o.sequences, p, [](const demo_policy& d) { return d.bytes_fraction(); });
  if (p.front()->experts_per_token()) {
    r.experts_per_token =
        over_workers(o.sequences, p, [](const demo_policy& d) { return d.experts_per_token().value_or(0.0); });
  }
  for (std::size_t l = 0; l < p.front()->kept_per_layer().size(); ++l) {
    r.kept_per_layer.push_back(
        over_workers(o.sequences, p, [l](const demo_policy& d) { return d.kept_per_layer()[l]; }));
  }
  p.front()->reset_counts();
  r.tokens_per_s = decode_speed(m, *p.front(), o.decode_tokens);
  return r;
}

// "FFN weights held: ..." for a model: the bytes its layers' views hold against the model's own
// FFN bytes in that dtype (f32: W_down and its transpose; quantized: W_downᵀ alone).
std::string resident_line(std::string_view label, const model& m) {
  char line[200];
  std::snprintf(line, sizeof line, "FFN weights held (%.*s): %zu bytes, %.2fx the model's own %zu\n",
                static_cast<int>(label.size()), label.data(), m.ffn_resident_bytes(),
                static_cast<double>(m.ffn_resident_bytes()) / static_cast<double>(m.ffn_model_bytes()),
                m.ffn_model_bytes());
  return line;
}

// Every policy of the table over the evaluation set, then the greedy samples and the JSON.
int run_evaluation(const options& o) {
  const llama2c::checkpoint ckpt = llama2c::checkpoint::load(o.checkpoint);
  const model m(ckpt);
  const llama2c::tokenizer tok = llama2c::tokenizer::load(o.tokenizer, m.vocab());
  for (const auto& [flag, n] : {std::pair{"--length", o.length}, std::pair{"--kv-length", o.kv_length}}) {
    if (n > m.seq_len()) {
      detail::fail("model_demo", flag, n, "at most the model's seq_len = " + std::to_string(m.seq_len()));
    }
  }
  const layer_scorers scorers = layer_scorers::of(m);
  calibration cal;  // filled below, read when a CATS or TEAL policy is made
  moefied moe;      // fitted below when an MoE row runs, read when its policy is made
  std::vector<policy_config> every = policy_table(m.layers(), scorers, cal);  // the quantized rows' bases too
  for (policy_config& c : moe_table(m.layers(), moe)) every.push_back(std::move(c));
  std::vector<policy_config> table = matching(every, o.only);
  const bool with_moe =
      std::any_of(table.begin(), table.end(), [](const policy_config& c) { return c.family == "moe"; });
  // The calibrated rows are named after the calibration has run; calibrate when one may match.
  const calibration_run::options calibration_options;
  bool with_calibrated = o.only.empty();
  for (const auto& name : calibrated_names(calibration_options))
    with_calibrated |= name.find(o.only) != std::string::npos;
  std::vector<dtype> quantized;  // the dtypes with a quantized row to run
  for (const dtype t : o.quantized) {
    if (!quantized_bases(t, o.only).empty()) quantized.push_back(t);
  }
  with_calibrated |= !quantized.empty() && quantized_needs_calibration(o.only);

  progress bar;
  bar.total = 3 + table.size() + (with_calibrated ? 1 : 0) + (with_moe ? 1 : 0);
  // Evaluation and calibration samples (different seeds).
  const auto eval = sample_sequences(m, o.sequences, o.length, 2024, o.workers);
  bar.step("sampled the evaluation set");
  auto calib = sample_sequences(m, o.calibration_sequences, o.length, 1'000'000, o.workers);
  const auto relu_calib = o.relu_checkpoint.empty() ? decltype(calib){} : calib;  // the ReLU model's calibration text
  const auto dense_lp = reference_logprobs(m, eval, o.workers);
  bar.step("dense reference");
  calibrate(m, calib, cal);
  bar.step("calibrated CATS and TEAL thresholds");
  if (with_moe) {
    moe = moefy(m, calib);
    measure_router(m, eval, o.workers, moe);
    bar.step("MoEfication: experts and routers");
  }

  std::vector<row> rows;
  for (const policy_config& c : table) {
    rows.push_back(evaluate_row(m, o, eval, {&dense_lp}, c));
    bar.step(c.name);
  }
  calibration_run::result calibrated;
  if (with_calibrated) {
    const calibration_run::sample cs = calibration_run::sample::of(m, std::move(calib), o.workers);
    calibrated = calibration_run::run(m, cs, calibration_options);
    bar.step("calibrated budgets, tiers, predictors");
    const std::vector<policy_config> all_calibrated = calibrated_table(calibrated);
    std::vector<policy_config> more = matching(all_calibrated, o.only);
    bar.total += more.size();
    for (const policy_config& c : more) {
      rows.push_back(evaluate_row(m, o, eval, {&dense_lp}, c));
      bar.step(c.name);
    }
    table.insert(table.end(), more.begin(), more.end());
    every.insert(every.end(), all_calibrated.begin(), all_calibrated.end());
  }
  // The FFN bytes each model's layers hold against the model's own (printed with the results).
  std::string resident = resident_line("f32", m);
  // The quantized rows: each dtype's model, its own dense reference, then the chosen f32 policies on it.
  for (const dtype t : quantized) {
    const std::vector<std::string> bases = quantized_bases(t, o.only);
    bar.total += 1 + bases.size();
    const model mq(ckpt, t);
    resident += resident_line(name(t), mq);
    const logprobs quant_lp = reference_logprobs(mq, eval, o.workers);
    bar.step(quantized_name(t, "dense") + " reference");
    for (const std::string& base : bases) {
      const auto c = std::find_if(every.begin(), every.end(), [&](const policy_config& e) { return e.name == base; });
      if (c == every.end()) detail::fail("model_demo", "quantized row", base, "a policy of the table");
      row r = evaluate_row(mq, o, eval, {&dense_lp, &quant_lp}, *c);
      r.policy = quantized_name(t, base);
      r.family = "quantized";
      r.ffn_dtype = name(t);
      r.base_policy = base;
      rows.push_back(std::move(r));
      bar.step(rows.back().policy);
    }
  }
  // The ReLU rows: the ReLU-fied checkpoint, its own dense reference, its policies (relu.hpp).
  bool with_relu = false;
  if (!o.relu_checkpoint.empty()) {
    const llama2c::checkpoint rc = llama2c::checkpoint::load(o.relu_checkpoint);
    const auto same = [](const llama2c::config& a, const llama2c::config& b) {
      return a.dim == b.dim && a.hidden_dim == b.hidden_dim && a.n_layers == b.n_layers && a.n_heads == b.n_heads &&
             a.n_kv_heads == b.n_kv_heads && a.vocab_size == b.vocab_size;
    };
    if (!same(rc.cfg(), ckpt.cfg())) {
      detail::fail("model_demo", "--relu-checkpoint", o.relu_checkpoint,
                   "a ReLU-fied checkpoint of the same shape as --checkpoint (scripts/relufy.py)");
    }
    const model mr(rc, dtype::f32, activation::relu);
    const layer_scorers relu_scorers = layer_scorers::of(mr);
    std::vector<policy_config> relu = relu_table(mr.layers(), relu_scorers);
    std::vector<policy_config> chosen = matching(relu, o.only);
    // The ReLU model's own calibration, on the same calibration text, when one of its rows may match.
    const calibration_run::options relu_cal = relu_calibration_options();
    bool with_relu_calibrated = false;
    for (const auto& name : calibrated_names(relu_cal, relu_prefix))
      with_relu_calibrated |= name.find(o.only) != std::string::npos;
    if (!chosen.empty() || with_relu_calibrated) {
      with_relu = true;
      bar.total += 1 + chosen.size() + (with_relu_calibrated ? 1 : 0);
      const logprobs relu_lp = reference_logprobs(mr, eval, o.workers);
      bar.step("relu dense reference");
      if (with_relu_calibrated) {
        const calibration_run::sample cs = calibration_run::sample::of(mr, relu_calib, o.workers);
        const calibration_run::result r = calibration_run::run(mr, cs, relu_cal);
        bar.step("relu calibrated budgets");
        std::vector<policy_config> more = matching(calibrated_table(r, relu_prefix, "relu"), o.only);
        bar.total += more.size();
        chosen.insert(chosen.end(), more.begin(), more.end());
      }
      for (const policy_config& c : chosen) {
        rows.push_back(evaluate_row(mr, o, eval, {&dense_lp, &relu_lp}, c));
        bar.step(c.name);
      }
    }
  }
  // The KV rows: the evaluation sequences continued to --kv-length, their own dense reference.
  std::vector<kv_setting> kv;
  for (kv_setting& s : kv_table(m.layers(), m.kv_dim(), o.kv_length)) {
    if (s.name.find(o.only) != std::string::npos) kv.push_back(std::move(s));
  }
  if (!kv.empty()) {
    bar.total += 1 + kv.size();
    auto long_eval = extend_sequences(m, eval, o.kv_length, 4048, o.workers);
    for (auto& q : long_eval) q.resize(o.kv_length);
    const auto long_lp = reference_logprobs(m, long_eval, o.workers);
    bar.step("evaluation set continued to --kv-length");
    for (const kv_setting& s : kv) {
      rows.push_back(evaluate_kv(m, o, long_eval, long_lp, s));
      bar.step(s.name);
    }
  }
  if (rows.size() == 1) detail::fail("model_demo", "--policy", o.only, "text found in at least one policy name");
  print_results(o, m.cfg(), rows);
  std::printf("\n%s", resident.c_str());
  if (moe.fitted()) print_moe(moe, rows);
  if (!quantized.empty()) print_quantized(rows);
  if (with_relu) print_relu(rows);
  if (!kv.empty()) print_kv(o, kv, rows);

  // A greedy sample under dense and under one sparse preset, as text.
  dense_demo_policy dense_greedy;
  std::size_t shown = table.size() > 1 ? 1 : 0;  // magnitude top_k 50% when present
  for (std::size_t i = 0; i < table.size(); ++i) {
    if (table[i].name == "magnitude top_k 50%") shown = i;
  }
  const auto sparse_greedy = table[shown].make();
  const std::string text_dense = tok.decode(greedy(m, dense_greedy, 96));
  const std::string text_sparse = tok.decode(greedy(m, *sparse_greedy, 96));
  print_greedy(text_dense, table[shown].name, text_sparse);
  json out = results_json(o, rows, text_dense, text_sparse);
  if (moe.fitted()) out["moe"] = moe_json(moe);
  if (with_calibrated) {
    out["calibration"] = calibration_json(calibrated.rep);
    const std::filesystem::path file = std::filesystem::path(o.json).parent_path() / "calibration.json";
    if (file.has_parent_path()) std::filesystem::create_directories(file.parent_path());
    calibrated.data.save(file);
    std::printf("wrote %s\n", file.string().c_str());
  }
  write_json(o.json, out);
  std::printf("\nwrote %s\n", o.json.c_str());
  return 0;
}

int run_synthetic_decode(const synthetic_options& o) {
  const synthetic_result s = run_synthetic(o);
  print_synthetic(o, s);
  write_json(o.json, synthetic_json(o, s));
  std::printf("\nwrote %s\n", o.json.c_str());
  return 0;
}

}  // namespace
}  // namespace model_demo

int main(int argc, char** argv) try {
  using model_demo::options;
  using model_demo::synthetic_options;
  options o;
  synthetic_options so;
  std::size_t threads = o.workers;
  std::string json;
  std::string dtype_name(name(so.type));

  CLI::App app{
      "actsparse model demo: every sparsity policy on stories260K (KL, top-1, perplexity, tokens/s), "
      "or --synthetic: decode speed of a random-weight stack",
      "model_demo"};
  const char* eval = "Evaluation on a trained model";
  const char* synth = "Synthetic decode (--synthetic)";
  const auto range = [](std::size_t lo, std::size_t hi) {
    return CLI::Range(lo, hi).description("in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  };
  app.add_option("--threads", threads, "Workers (evaluation: sequences in parallel) or pool threads (synthetic)")
      ->type_name("N")
      ->check(range(1, 256))
      ->capture_default_str();
  app.add_option("--json", json, "Where the JSON goes (default demo-results/latest.json, or synthetic.json)")
      ->type_name("PATH");
  CLI::Option* checkpoint = app.add_option("--checkpoint", o.checkpoint, "llama2.c checkpoint")
                                ->type_name("PATH")
                                ->group(eval)
                                ->capture_default_str();
  CLI::Option* tokenizer = app.add_option("--tokenizer", o.tokenizer, "llama2.c tokenizer")
                               ->type_name("PATH")
                               ->group(eval)
                               ->capture_default_str();
  CLI::Option* sequences = app.add_option("--sequences", o.sequences, "Evaluation sequences")
                               ->type_name("N")
                               ->check(range(1, 4096))
                               ->group(eval)
                               ->capture_default_str();
  CLI::Option* length = app.add_option("--length", o.length, "Tokens per sequence (at most the model's seq_len)")
                            ->type_name("N")
                            ->check(range(2, std::size_t{1} << 20))
                            ->group(eval)
                            ->capture_default_str();
  CLI::Option* kv_length =
      app.add_option("--kv-length", o.kv_length, "Tokens per sequence of the KV rows (at most the model's seq_len)")
          ->type_name("N")
          ->check(range(2, std::size_t{1} << 20))
          ->group(eval)
          ->capture_default_str();
  CLI::Option* only =
      app.add_option("--policy", o.only, "Run only the policies whose name contains TEXT (and dense)")->group(eval);
  std::vector<std::string> quantized_names{"q8_0", "q4_0"};
  CLI::Option* quantized =
      app.add_option("--quantized", quantized_names,
                     "Run the quantized rows on the model with its FFN weights quantized to these dtypes "
                     "(comma-separated; none: no quantized rows)")
          ->type_name("DTYPES")
          ->delimiter(',')
          ->check(CLI::IsMember({"q8_0", "q4_0", "none"}))
          ->group(eval)
          ->capture_default_str();
  CLI::Option* relu_checkpoint =
      app.add_option("--relu-checkpoint", o.relu_checkpoint,
                     "The ReLU-fied checkpoint of the ReLU rows (scripts/relufy.py; none: no ReLU rows)")
          ->type_name("PATH")
          ->group(eval)
          ->capture_default_str();
  bool quick_run = false;
  CLI::Option* quick = app.add_flag("--quick", quick_run,
                                    "A small run: 4 sequences of 40 tokens (KV rows: 96; unless given), 2 calibration "
                                    "sequences, 16 decode tokens")
                           ->group(eval);
  CLI::Option* synthetic = app.add_option("--synthetic", so.shape, "Decode through a random-weight stack of this shape")
                               ->type_name("SHAPE")
                               ->check(CLI::IsMember({"7b", "3b", "tiny"}))
                               ->group(synth);
  const auto synthetic_only = [&](CLI::Option* opt) { opt->group(synth)->capture_default_str()->needs(synthetic); };
  const auto count = [&](const char* flag, std::size_t& value, const char* what, std::size_t lo, std::size_t hi) {
    synthetic_only(app.add_option(flag, value, what)->type_name("N")->check(range(lo, hi)));
  };
  synthetic_only(app.add_option("--dtype", dtype_name, "Weight dtype")
                     ->type_name("DTYPE")
                     ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"})));
  count("--layers", so.layers, "Layers", 1, 64);
  count("--tokens", so.tokens, "Decode steps per row", 1, 100000);
  count("--context", so.context, "KV cache positions", 1, 1 << 16);
  synthetic_only(app.add_flag("--interleave", so.interleave, "Interleaved copies of q8_0 / q4_0 matrices"));
  for (CLI::Option* e :
       {checkpoint, tokenizer, sequences, length, kv_length, only, quantized, relu_checkpoint, quick}) {
    synthetic->excludes(e);
  }
  CLI11_PARSE(app, argc, argv);

  if (*synthetic) {
    for (const actsparse::dtype d : {actsparse::dtype::f32, actsparse::dtype::f16, actsparse::dtype::bf16,
                                     actsparse::dtype::q8_0, actsparse::dtype::q4_0}) {
      if (dtype_name == name(d)) so.type = d;
    }
    so.threads = threads;
    if (!json.empty()) so.json = json;
    return model_demo::run_synthetic_decode(so);
  }
  o.workers = threads;
  if (o.relu_checkpoint == "none") o.relu_checkpoint.clear();
  if (!*relu_checkpoint && !std::ifstream(o.relu_checkpoint).good()) {  // the default, not made yet
    std::fprintf(stderr, "model_demo: no ReLU rows: %s not found (./dev relufy makes it)\n", o.relu_checkpoint.c_str());
    o.relu_checkpoint.clear();
  }
  if (!json.empty()) o.json = json;
  o.quantized.clear();
  for (const actsparse::dtype t : {actsparse::dtype::q8_0, actsparse::dtype::q4_0}) {  // each once, in this order
    if (std::find(quantized_names.begin(), quantized_names.end(), name(t)) != quantized_names.end()) {
      o.quantized.push_back(t);
    }
  }
  if (quick_run) {
    if (!*sequences) o.sequences = 4;
    if (!*length) o.length = 40;
    if (!*kv_length) o.kv_length = 96;
    o.calibration_sequences = 2;
    o.decode_tokens = 16;
  }
  return model_demo::run_evaluation(o);
} catch (const std::exception& e) {
  std::fprintf(stderr, "\nmodel_demo: %s\n", e.what());
  return 1;
}
