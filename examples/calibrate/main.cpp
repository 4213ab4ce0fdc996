// actsparse calibrate: fits every calibration method to a llama2.c checkpoint on a calibration
// sample it samples from the dense model, and writes one calibration file (JSON) that an engine
// loads (actsparse/calibration/calibration_file.hpp) and that calibrated_schedule turns into the
// per-layer settings neuron_sparse_ffn runs. examples/calibration/pipeline.hpp does the work.
//
//   calibrate [--checkpoint PATH] [--sequences N] [--length N] [--seed N] [--targets B,...]
//             [--methods M,...] [--ranks R,...] [--step S] [--reorder none|hot|coactivation]
//             [--threads N] [--out PATH]
//
// A progress bar with an ETA goes to stderr; a table of the budgets (bytes and KL on the
// calibration sample) and the time of each stage to stdout. CLI11 (libcli11-dev) reads the
// command line: typed options with ranges and choices, declared rather than hand-parsed.

// The CPU backend's kernels are defined in examples/common/cpu_kernels.cpp.
#include <actsparse/backends/cpu/implementation.hpp>

#include "calibration/pipeline.hpp"
#include "llama2c/checkpoint.hpp"
#include "llama2c/model.hpp"
#include "model_demo/harness.hpp"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace {

// A progress bar with an ETA from the fraction done so far.
struct eta_bar {
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  void operator()(const std::string& stage, double f) const {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int width = 30;
    const int filled = static_cast<int>(std::clamp(f, 0.0, 1.0) * width);
    char eta[32] = "";
    if (f > 0.02 && f < 1.0) std::snprintf(eta, sizeof eta, "ETA %4.0f s", s * (1.0 - f) / f);
    std::fprintf(stderr, "\r[%.*s%*s] %3.0f%% %5.0f s %-12s %-46.46s", filled, "##############################",
                 width - filled, "", 100.0 * f, s, eta, stage.c_str());
    if (f >= 1.0) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }
};

}  // namespace

int main(int argc, char** argv) try {
  std::string checkpoint = std::string(ACTSPARSE_DATA_DIR) + "/stories260K.bin";
  std::string out = "demo-results/calibration.json";
  std::size_t sequences = 8, length = 256, threads = std::max(1U, std::thread::hardware_concurrency());
  std::uint64_t seed = 1'000'000;  // the demo's calibration seed: disjoint from its evaluation set (2024 + q)
  std::vector<double> targets;
  std::vector<std::string> methods{"budgets", "refine", "tiers", "predictor", "low-rank", "combined", "teal"};
  calibration_run::options o;

  CLI::App app{
      "actsparse calibrate: fit per-layer budgets, tiers with base sets, a tier predictor, low-rank gate "
      "predictors and neuron orders to a llama2.c model; write one calibration file",
      "calibrate"};
  app.add_option("--checkpoint", checkpoint, "llama2.c checkpoint")->type_name("PATH")->capture_default_str();
  app.add_option("--sequences", sequences, "Calibration sequences")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--length", length, "Tokens per sequence (at most the model's seq_len)")
      ->check(CLI::Range(2, 1 << 20))
      ->capture_default_str();
  app.add_option("--seed", seed, "Sampling seed of sequence q: seed + q (the demo evaluates seeds 2024 + q)")
      ->capture_default_str();
  app.add_option("--targets", targets, "FFN byte fractions to fit, in (0, 1] (default 0.9, 5/6, 0.75, 2/3)")
      ->delimiter(',')
      ->check(CLI::Range(0.01, 1.0));
  app.add_option("--methods", methods, "Methods to fit")
      ->delimiter(',')
      ->check(CLI::IsMember({"budgets", "refine", "tiers", "predictor", "low-rank", "combined", "teal"}))
      ->capture_default_str();
  app.add_option("--ranks", o.ranks, "Ranks of the low-rank gate predictors")
      ->delimiter(',')
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  app.add_option("--step", o.step, "Rung of the greedy searches (a share of a layer)")
      ->check(CLI::Range(0.01, 0.5))
      ->capture_default_str();
  app.add_option("--reorder", o.reorder, "The neuron permutation written to the file")
      ->check(CLI::IsMember({"none", "hot", "coactivation"}))
      ->capture_default_str();
  app.add_option("--threads", threads, "Workers (sequences in parallel); results do not depend on it")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  app.add_option("--out", out, "Where the calibration file goes")->type_name("PATH")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  const auto has = [&](const char* m) { return std::find(methods.begin(), methods.end(), m) != methods.end(); };
  o.budgets = has("budgets");
  o.refine = has("refine");
  o.tiers = has("tiers");
  o.predictor = has("predictor");
  o.low_rank = has("low-rank");
  o.combined = has("combined");
  o.teal = has("teal");
  if (!targets.empty()) {
    o.targets.clear();
    for (const double t : targets) {
      char label[32];
      std::snprintf(label, sizeof label, "%.3g", t);
      o.targets.push_back({t, label});
    }
  }

  const eta_bar bar;
  const llama2c::checkpoint ckpt = llama2c::checkpoint::load(checkpoint);
  const llama2c::model m(ckpt);
  if (length > m.seq_len()) {
    actsparse::detail::fail("calibrate", "--length", length,
                            "at most the model's seq_len = " + std::to_string(m.seq_len()));
  }
  bar("sampling the calibration set", 0.0);
  const auto t0 = std::chrono::steady_clock::now();
  auto seqs = model_demo::sample_sequences(m, sequences, length, seed, threads);
  const calibration_run::sample s = calibration_run::sample::of(m, std::move(seqs), threads);
  const calibration_run::result r = calibration_run::run(m, s, o, bar);
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::filesystem::path p(out);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path());
  r.data.save(out);
  // The file as an engine loads it: against the model's fingerprint, then compared with what was written.
  std::vector<actsparse::ffn_layer> ffn;
  for (std::size_t l = 0; l < m.layers(); ++l) ffn.push_back(m.ffn(l));
  const actsparse::calibration_data back =
      actsparse::calibration_data::load(out, actsparse::model_fingerprint::of(ffn));
  const bool same = back == r.data;

  std::printf("calibrated %s on %zu sequences x %zu tokens (seed %llu) in %.1f s; wrote %s\n\n", checkpoint.c_str(),
              sequences, length, static_cast<unsigned long long>(seed), total, out.c_str());
  std::printf("%-28s %8s %8s %10s\n", "budget", "target", "bytes", "KL (calib)");
  for (const auto& b : r.rep.budgets) {
    std::printf("%-28s %8.3f %8.3f %10.5f\n", b.budget.c_str(), b.target_bytes, b.bytes, b.kl);
  }
  std::printf("\nstatistics pass: %.1f us per calibration token (%zu tokens, both passes)\n",
              1e6 * r.rep.statistics_seconds / static_cast<double>(r.rep.tokens), r.rep.tokens);
  for (const auto& [stage, sec] : r.rep.seconds) std::printf("  %-32s %7.1f s\n", stage.c_str(), sec);
  std::printf("\n%s read back: %s\n", out.c_str(), same ? "the same data" : "DIFFERENT data");
  if (!same) return 1;
  if (o.reorder != "none") {
    // The file's neuron permutation applied to the weights (permute_ffn): the first budget must
    // measure the same on the permuted model as it did, in the model's order, during calibration.
    auto permuted = std::make_shared<std::vector<actsparse::permuted_ffn>>();
    auto layers = std::make_shared<std::vector<actsparse::ffn_layer>>();
    for (std::size_t l = 0; l < m.layers(); ++l)
      permuted->push_back(actsparse::permute_ffn(ffn[l], back.layers[l].permutation));
    for (const auto& p : *permuted) layers->push_back(p.layer);
    const actsparse::budget_entry& b = back.budgets.front();
    const actsparse::calibrated_schedule schedule(back, b.name);
    const calibration_run::measurement mm = calibration_run::measure(m, s, [&] {
      auto p = std::make_unique<calibration_run::calibrated_policy>(schedule);
      p->set_layers(layers);
      return p;
    });
    const bool close = std::fabs(mm.q.kl - b.kl) <= 0.01 * b.kl + 1e-6;
    std::printf("%s on the permuted model: KL %.6f (in the model's order during calibration: %.6f)%s\n", b.name.c_str(),
                mm.q.kl, b.kl, close ? "; permuted model: the same KL" : "; they DIFFER");
    if (!close) return 1;
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "\ncalibrate: %s\n", e.what());
  return 1;
}
