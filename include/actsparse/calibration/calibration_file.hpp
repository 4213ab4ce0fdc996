#pragma once
// The calibration file: everything calibration fitted for one model, in one versioned JSON file
// that an engine loads next to the weights. It holds the model's fingerprint (shapes and a hash
// of the FFN weights), per layer the budget-independent data (the calibrated score's per-neuron
// weights, W_down's column norms, the neuron permutation, the tiers with their base sets, the
// tier predictor, the low-rank gate predictor), and any number of budgets: per-layer selector
// settings for a target fraction of FFN bytes, with the bytes each setting read on the
// calibration sample.
//
// Neuron ids in the file (base sets, per-neuron weights, predictor rows) are those of the
// permuted model: load the weights, check the fingerprint (of the weights as loaded), apply the
// permutation (permute_ffn), then build a calibrated_schedule.
//
// Loading is strict: a malformed or truncated document, a missing or unknown key, a wrong type,
// another model or other shapes, a newer version, a permutation that is not one, an index out of
// range, a NaN or infinite value each throw actsparse::error naming the field (its JSON path) and
// what was expected. Floats are written with the digits that read back the same value, so save
// then load gives the same data bit for bit.
//
// JSON is read and written by nlohmann::json (Debian: nlohmann-json3-dev): a well-kept parser
// rather than one of ours. The text form (to_json, parse) is in detail/calibration_json.hpp,
// which the end of this header includes; this header holds the data and its checks.

#include <actsparse/calibration/detail/checks.hpp>
#include <actsparse/calibration/neuron_order.hpp>
#include <actsparse/calibration/tier_predictor.hpp>
#include <actsparse/core/activation.hpp>
#include <actsparse/core/dtype.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/views.hpp>
#include <actsparse/selectors/calibrated_selector.hpp>

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace actsparse {

// The model a calibration belongs to.
struct model_fingerprint {
  std::size_t layers = 0;
  std::size_t d_model = 0;
  std::size_t d_ff = 0;
  activation act = activation::silu;
  std::string weights;  // "fnv1a64:" + 16 hex digits over the FFN weight bytes

  // Of the FFN layers as the engine holds them (before any permutation): FNV-1a 64 over, layer by
  // layer, the bytes of every row of W_gate, W_up and W_down (W_downᵀ when W_down is absent), in
  // their own dtype (so an f32 and a q4_0 copy of one model are different models).
  static model_fingerprint of(std::span<const ffn_layer> ffn) {
    constexpr std::string_view where = "model_fingerprint::of";
    detail::require(!ffn.empty(), where, "ffn.size()", 0, "at least one layer");
    model_fingerprint f;
    f.layers = ffn.size();
    f.d_model = ffn[0].d_model();
    f.d_ff = ffn[0].d_ff();
    f.act = ffn[0].act;
    std::uint64_t h = 0xcbf29ce484222325ULL;
    const auto bytes = [&h](const weight_view& w) {
      const std::size_t rb = row_bytes(w.type, w.cols);
      for (std::size_t r = 0; r < w.rows; ++r) {
        const auto* p = static_cast<const unsigned char*>(w.data) + r * w.row_stride;
        for (std::size_t i = 0; i < rb; ++i) h = (h ^ p[i]) * 0x100000001b3ULL;
      }
    };
    for (std::size_t l = 0; l < ffn.size(); ++l) {
      const ffn_layer& w = ffn[l];
      if (w.d_model() != f.d_model || w.d_ff() != f.d_ff || w.act != f.act) {
        detail::fail(where, "ffn[" + std::to_string(l) + "]", "another shape or activation",
                     "every layer of the shape and activation of layer 0");
      }
      validate(w.gate, where, "gate");
      validate(w.up, where, "up");
      bytes(w.gate);
      bytes(w.up);
      const weight_view& d = w.down.absent() ? w.down_t : w.down;
      validate(d, where, "down");
      bytes(d);
    }
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
    f.weights = std::string("fnv1a64:") + hex;
    return f;
  }
  friend bool operator==(const model_fingerprint&, const model_fingerprint&) = default;
};

// A tier: keep ceil(d_ff / m), the base set first.
struct tier_entry {
  std::size_t m = 1;
  std::vector<std::uint32_t> base;  // sorted, unique, < d_ff
  friend bool operator==(const tier_entry&, const tier_entry&) = default;
};

// The low-rank gate predictor's factors (low_rank_gate.hpp fits them): a [rank x d_model],
// u [d_ff x rank], row-major f32.
struct gate_predictor_data {
  std::size_t rank = 0;
  std::vector<float> a, u;
  friend bool operator==(const gate_predictor_data&, const gate_predictor_data&) = default;
};

// Per layer, whatever the budget.
struct layer_calibration {
  std::vector<float> score_weights;        // the calibrated gate-only score's weights (weight_aware_gate norms)
  std::vector<float> down_norms;           // ‖W_down[:, j]‖ (the second stage's weights)
  std::vector<std::uint32_t> permutation;  // order[i] = original neuron of neuron i; empty: none
  std::vector<tier_entry> tiers;           // increasing m; may be empty
  std::optional<tier_predictor_parameters> tier_predictor;
  std::vector<gate_predictor_data> gate_predictors;  // of different ranks, increasing

  // The gate predictor of this rank, or null.
  [[nodiscard]] const gate_predictor_data* gate_predictor_of(std::size_t rank) const noexcept {
    for (const gate_predictor_data& g : gate_predictors) {
      if (g.rank == rank) return &g;
    }
    return nullptr;
  }
  friend bool operator==(const layer_calibration&, const layer_calibration&) = default;
};

// One layer's selector setting in one budget.
struct layer_budget {
  bool dense = false;
  neuron_rule rule = neuron_rule::top_k;
  double keep = 1.0;            // the first stage's share (top_k: k = ceil(keep d_ff); threshold: t's share)
  float threshold = 0.0F;       // the threshold rule's t (finite)
  std::size_t tier = 0;         // the tier rule's tier index (with predict_tier: the cap)
  bool predict_tier = false;    // the tier predictor picks a tier <= tier per token
  double tier_budget = 0.0;     // its per-token loss budget (a KL)
  bool with_base = false;       // top_k / threshold: also keep tier `tier`'s base set
  double refine = 1.0;          // the second stage keeps this share of the first stage's neurons
  std::size_t gate_rank = 0;    // > 0: the gate predictor of this rank picks the first stage (gate read for it only)
  double bytes_fraction = 1.0;  // measured on the calibration sample
  friend bool operator==(const layer_budget&, const layer_budget&) = default;
};

inline constexpr std::size_t input_projections = 7;  // q, k, v, o, gate, up, down

struct budget_entry {
  std::string name;    // unique in the file
  std::string method;  // how it was fitted (free text: "budgets", "tiers", ...)
  double target_bytes = 1.0;
  double bytes_fraction = 1.0;          // measured on the calibration sample
  double kl = 0.0;                      // mean KL against dense on the calibration sample
  std::vector<layer_budget> layers;     // one per layer, or empty (an input-sparse budget)
  std::vector<float> input_thresholds;  // layers x 7 thresholds of |x| per projection (TEAL), or empty
  friend bool operator==(const budget_entry&, const budget_entry&) = default;
};

struct calibration_data {
  static constexpr std::int64_t current_version = 1;
  static constexpr std::string_view format_name = "actsparse-calibration";

  model_fingerprint model;
  std::size_t sample_sequences = 0;
  std::size_t sample_tokens = 0;
  std::vector<layer_calibration> layers;
  std::vector<budget_entry> budgets;

  friend bool operator==(const calibration_data&, const calibration_data&) = default;

  [[nodiscard]] const budget_entry& budget(std::string_view name) const {
    std::string names;
    for (const budget_entry& b : budgets) {
      if (b.name == name) return b;
      names.append(names.empty() ? "" : ", ").append(b.name);
    }
    detail::fail("calibration_data::budget", "name", std::string(name),
                 "one of the file's budgets (" + (names.empty() ? std::string("none") : names) + ")");
  }

  // Throws unless the data belongs to this model (the fingerprint of its weights as loaded).
  void check_model(const model_fingerprint& m) const {
    constexpr std::string_view where = "calibration_data::check_model";
    const auto same = [&](std::string_view field, std::size_t a, std::size_t b) {
      if (a != b) {
        detail::fail(where, "model." + std::string(field), a, std::to_string(b) + " (the model being loaded)");
      }
    };
    same("layers", model.layers, m.layers);
    same("d_model", model.d_model, m.d_model);
    same("d_ff", model.d_ff, m.d_ff);
    if (model.act != m.act) detail::fail(where, "model.activation", name(model.act), std::string(name(m.act)));
    if (model.weights != m.weights) {
      detail::fail(where, "model.weights", model.weights,
                   m.weights + " (the hash of the model being loaded: this file calibrates another model)");
    }
  }

  // ------------------------------------------------------------------ text form -------
  // The file's JSON text (runs validate_data first). detail/calibration_json.hpp.
  [[nodiscard]] std::string to_json() const;
  // The data of a JSON text, checked as the header says. detail/calibration_json.hpp.
  [[nodiscard]] static calibration_data parse(std::string_view text);

  // parse, then check_model.
  [[nodiscard]] static calibration_data parse(std::string_view text, const model_fingerprint& expected) {
    calibration_data d = parse(text);
    d.check_model(expected);
    return d;
  }

  [[nodiscard]] static calibration_data load(const std::filesystem::path& path, const model_fingerprint& expected) {
    std::ifstream in(path, std::ios::binary);
    if (!in) detail::fail("calibration_data::load", "path", path.string(), "a readable calibration file");
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (in.bad()) detail::fail("calibration_data::load", "path", path.string(), "a readable file (reading failed)");
    return parse(text, expected);
  }

  void save(const std::filesystem::path& path) const {
    const std::string text = to_json();
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) detail::fail("calibration_data::save", "path", path.string(), "a writable file");
  }

  // The consistency checks of parse on data built in memory (to_json runs them too).
  void validate_data(std::string_view where) const {
    validate_layers(where);
    for (std::size_t b = 0; b < budgets.size(); ++b) {
      const std::string at = "budgets[" + std::to_string(b) + "]";
      for (std::size_t o = 0; o < b; ++o) {
        if (budgets[o].name == budgets[b].name)
          detail::fail(where, at + ".name", budgets[b].name, "a name no other budget has");
      }
      validate_budget(budgets[b], where, at);
    }
  }

  // The model's and the layers' part of validate_data.
  void validate_layers(std::string_view where) const {
    const std::size_t d_ff = model.d_ff;
    detail::require(layers.size() == model.layers, where, "layers.size()", layers.size(),
                    "model.layers = " + std::to_string(model.layers));
    for (std::size_t l = 0; l < layers.size(); ++l) {
      const std::string at = "layers[" + std::to_string(l) + "]";
      const layer_calibration& c = layers[l];
      detail::require_finite_values(c.score_weights, d_ff, where, at + ".score_weights", true);
      detail::require_finite_values(c.down_norms, d_ff, where, at + ".down_norms", true);
      if (!c.permutation.empty()) check_permutation(c.permutation, d_ff, where, at + ".permutation");
      for (std::size_t t = 0; t < c.tiers.size(); ++t) {
        const std::string tat = at + ".tiers[" + std::to_string(t) + "]";
        const tier_entry& e = c.tiers[t];
        detail::require(e.m >= 1 && e.m <= d_ff && (t == 0 || e.m > c.tiers[t - 1].m), where, tat + ".m", e.m,
                        "a tier m in 1 .. d_ff, increasing from tier to tier");
        for (std::size_t i = 0; i < e.base.size(); ++i) {
          if (e.base[i] >= d_ff || (i > 0 && e.base[i] <= e.base[i - 1])) {
            detail::fail(where, tat + ".base[" + std::to_string(i) + "]", e.base[i],
                         "sorted unique neuron ids < d_ff = " + std::to_string(d_ff));
          }
        }
      }
      if (c.tier_predictor) {
        try {
          (void)tier_predictor::from_parameters(*c.tier_predictor);
        } catch (const error& e) {
          detail::fail_described(where, at + ".tier_predictor." + e.argument(), e.value(), e.expected());
        }
        if (c.tier_predictor->tiers != c.tiers.size()) {
          detail::fail(where, at + ".tier_predictor.tiers", c.tier_predictor->tiers,
                       "the layer's tier count, " + std::to_string(c.tiers.size()));
        }
      }
      for (std::size_t r = 0; r < c.gate_predictors.size(); ++r) {
        const std::string gat = at + ".gate_predictors[" + std::to_string(r) + "]";
        const gate_predictor_data& g = c.gate_predictors[r];
        detail::require(g.rank >= 1 && g.rank <= std::min(d_ff, model.d_model) &&
                            (r == 0 || g.rank > c.gate_predictors[r - 1].rank),
                        where, gat + ".rank", g.rank,
                        "1 .. min(d_ff, d_model), increasing from predictor to predictor");
        detail::require_finite_values(g.a, g.rank * model.d_model, where, gat + ".a", false);
        detail::require_finite_values(g.u, d_ff * g.rank, where, gat + ".u", false);
      }
    }
  }

  // One budget against the model and layers (`at` names it in errors).
  void validate_budget(const budget_entry& e, std::string_view where, const std::string& at) const {
    {
      detail::require(!e.name.empty(), where, at + ".name", "", "a non-empty name");
      check_fraction(e.target_bytes, where, at + ".target_bytes");
      check_fraction(e.bytes_fraction, where, at + ".bytes_fraction");
      detail::require(e.kl >= 0.0 && std::isfinite(e.kl), where, at + ".kl", e.kl, "a finite KL >= 0");
      detail::require(e.layers.empty() || e.layers.size() == model.layers, where, at + ".layers",
                      std::to_string(e.layers.size()) + " entries", "none, or one per layer");
      detail::require(!e.layers.empty() || !e.input_thresholds.empty(), where, at, "a budget with no settings",
                      "layers, input_thresholds, or both");
      if (!e.input_thresholds.empty()) {
        detail::require(e.input_thresholds.size() == model.layers * input_projections, where, at + ".input_thresholds",
                        std::to_string(e.input_thresholds.size()) + " values",
                        "layers x 7 = " + std::to_string(model.layers * input_projections));
        for (std::size_t i = 0; i < e.input_thresholds.size(); ++i) {
          if (std::isnan(e.input_thresholds[i]) || e.input_thresholds[i] == std::numeric_limits<float>::infinity()) {
            detail::fail(where, at + ".input_thresholds[" + std::to_string(i) + "]", e.input_thresholds[i],
                         "a threshold that is a number below +inf");
          }
        }
      }
      for (std::size_t l = 0; l < e.layers.size(); ++l) {
        const std::string lat = at + ".layers[" + std::to_string(l) + "]";
        const layer_budget& s = e.layers[l];
        const layer_calibration& c = layers[l];
        detail::require(s.keep > 0.0 && s.keep <= 1.0, where, lat + ".keep", s.keep, "a share in (0, 1]");
        detail::require(s.refine > 0.0 && s.refine <= 1.0, where, lat + ".refine", s.refine, "a share in (0, 1]");
        detail::require(std::isfinite(s.threshold), where, lat + ".threshold", s.threshold, "a finite threshold");
        check_fraction(s.bytes_fraction, where, lat + ".bytes_fraction");
        if (s.rule == neuron_rule::tier || s.predict_tier || s.with_base) {
          detail::require(s.tier < c.tiers.size(), where, lat + ".tier", s.tier,
                          "a tier index below the layer's " + std::to_string(c.tiers.size()) + " tiers");
        }
        if (s.predict_tier) {
          detail::require(s.rule == neuron_rule::tier && c.tier_predictor.has_value(), where, lat + ".predict_tier",
                          true, "the tier rule and a layer with a tier_predictor");
        }
        detail::require(s.tier_budget >= 0.0 && std::isfinite(s.tier_budget), where, lat + ".tier_budget",
                        s.tier_budget, "a finite loss >= 0");
        if (s.with_base) {
          detail::require(s.rule == neuron_rule::top_k || s.rule == neuron_rule::threshold, where, lat + ".with_base",
                          true, "the top_k or threshold rule (the tier rule always keeps its base)");
        }
        if (s.gate_rank != 0 && c.gate_predictor_of(s.gate_rank) == nullptr) {
          detail::fail(where, lat + ".gate_rank", s.gate_rank,
                       "0 (no predictor) or the rank of one of the layer's gate_predictors");
        }
      }
    }
  }

 private:
  static void check_fraction(double v, std::string_view where, const std::string& at) {
    detail::require(v >= 0.0 && v <= 1.0, where, at, v, "a fraction in [0, 1]");
  }
};

}  // namespace actsparse

#include <actsparse/calibration/detail/calibration_json.hpp>  // IWYU pragma: export
