#pragma once
// The calibration file's JSON text: calibration_data::to_json and calibration_data::parse, by
// nlohmann::json (Debian: nlohmann-json3-dev). calibration_file.hpp includes this header at its
// end; include that one. The reader's errors name the JSON path of the field and what was
// expected (calibration_file.hpp's header lists what loading rejects).

#include <actsparse/calibration/calibration_file.hpp>
#include <actsparse/calibration/detail/checks.hpp>

#include <nlohmann/json.hpp>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace actsparse {

namespace detail {
// A float as the double nearest its shortest decimal form (std::to_chars): the JSON shows 0.4,
// not 0.4000000059604645, and reads back to the same float.
inline double json_shortest(float x) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}
inline nlohmann::ordered_json json_floats(const std::vector<float>& v) {
  nlohmann::ordered_json a = nlohmann::ordered_json::array();
  for (const float x : v) a.push_back(json_shortest(x));
  return a;
}
// Typed access with errors that name the JSON path.
struct calibration_reader {
  std::string_view where;

  [[nodiscard]] const nlohmann::json& at(const nlohmann::json& o, std::string_view key, const std::string& path) const {
    const std::string full = path.empty() ? std::string(key) : path + "." + std::string(key);
    if (!o.is_object()) fail_described(where, path.empty() ? "(document)" : path, o.type_name(), "an object");
    const auto it = o.find(std::string(key));
    if (it == o.end()) fail_described(where, full, "missing", "a value (a required key)");
    return *it;
  }
  void keys(const nlohmann::json& o, const std::string& path, std::initializer_list<std::string_view> known) const {
    if (!o.is_object()) {
      fail_described(where, path.empty() ? "(document)" : path, std::string("a JSON ") + o.type_name(), "an object");
    }
    for (auto it = o.begin(); it != o.end(); ++it) {
      bool ok = false;
      for (const std::string_view k : known) ok |= it.key() == k;
      if (!ok) {
        std::string list;
        for (const std::string_view k : known) list.append(list.empty() ? "" : ", ").append(k);
        fail_described(where, path.empty() ? it.key() : path + "." + it.key(), "an unknown key", "one of: " + list);
      }
    }
  }
  [[nodiscard]] std::string string(const nlohmann::json& o, std::string_view key, const std::string& path = "") const {
    const nlohmann::json& v = at(o, key, "");
    if (!v.is_string()) fail_described(where, path.empty() ? std::string(key) : path, v.dump(), "a string");
    return v.get<std::string>();
  }
  [[nodiscard]] std::size_t size(const nlohmann::json& o, const std::string& path, std::string_view key, std::size_t lo,
                                 std::size_t hi) const {
    return integer(at(o, key, ""), path, lo, hi);
  }
  [[nodiscard]] std::size_t integer(const nlohmann::json& v, const std::string& path, std::size_t lo,
                                    std::size_t hi) const {
    if (!v.is_number_integer() || (v.is_number_integer() && !v.is_number_unsigned() && v.get<std::int64_t>() < 0)) {
      fail_described(where, path, v.dump(), "a non-negative integer");
    }
    const auto x = v.get<std::uint64_t>();
    if (x < lo || x > hi) {
      fail_described(where, path, v.dump(), "an integer in " + std::to_string(lo) + " .. " + std::to_string(hi));
    }
    return static_cast<std::size_t>(x);
  }
  [[nodiscard]] double number(const nlohmann::json& o, std::string_view key, const std::string& path) const {
    const nlohmann::json& v = at(o, key, "");
    if (!v.is_number()) fail_described(where, path, v.dump(), "a number");
    return v.get<double>();
  }
  [[nodiscard]] bool boolean(const nlohmann::json& o, std::string_view key, const std::string& path) const {
    const nlohmann::json& v = at(o, key, "");
    if (!v.is_boolean()) fail_described(where, path, v.dump(), "true or false");
    return v.get<bool>();
  }
  [[nodiscard]] const nlohmann::json& array(const nlohmann::json& o, std::string_view key,
                                            const std::string& path) const {
    const nlohmann::json& v = at(o, key, "");
    if (!v.is_array()) fail_described(where, path, std::string("a JSON ") + v.type_name(), "an array");
    return v;
  }
  [[nodiscard]] std::vector<float> floats(const nlohmann::json& o, std::string_view key,
                                          const std::string& path) const {
    const nlohmann::json& a = array(o, key, path);
    std::vector<float> out;
    out.reserve(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      const nlohmann::json& v = a[i];
      const std::string p = path + "[" + std::to_string(i) + "]";
      if (!v.is_number()) fail_described(where, p, v.dump(), "a number");
      const double x = v.get<double>();
      if (!std::isfinite(x) || std::fabs(x) > std::numeric_limits<float>::max()) {
        fail_described(where, p, v.dump(), "a finite number in the range of float");
      }
      out.push_back(static_cast<float>(x));
    }
    return out;
  }
  [[nodiscard]] std::vector<std::uint32_t> ids(const nlohmann::json& o, std::string_view key, const std::string& path,
                                               std::size_t n) const {
    const nlohmann::json& a = array(o, key, path);
    std::vector<std::uint32_t> out;
    out.reserve(a.size());
    for (std::size_t i = 0; i < a.size(); ++i) {
      out.push_back(static_cast<std::uint32_t>(integer(a[i], path + "[" + std::to_string(i) + "]", 0, n - 1)));
    }
    return out;
  }

  [[nodiscard]] layer_calibration layer(const nlohmann::json& o, const std::string& path,
                                        const model_fingerprint& m) const {
    keys(o, path, {"score_weights", "down_norms", "permutation", "tiers", "tier_predictor", "gate_predictors"});
    layer_calibration c;
    c.score_weights = floats(o, "score_weights", path + ".score_weights");
    c.down_norms = floats(o, "down_norms", path + ".down_norms");
    c.permutation = ids(o, "permutation", path + ".permutation", m.d_ff);
    const nlohmann::json& ts = array(o, "tiers", path + ".tiers");
    for (std::size_t t = 0; t < ts.size(); ++t) {
      const std::string tp = path + ".tiers[" + std::to_string(t) + "]";
      keys(ts[t], tp, {"m", "base"});
      tier_entry e;
      e.m = size(ts[t], tp + ".m", "m", 1, m.d_ff);
      e.base = ids(ts[t], "base", tp + ".base", m.d_ff);
      c.tiers.push_back(std::move(e));
    }
    const nlohmann::json& tp = at(o, "tier_predictor", path);
    if (!tp.is_null()) {
      const std::string p = path + ".tier_predictor";
      keys(tp, p, {"hidden", "tiers", "mean", "scale", "w1", "b1", "w2", "b2", "out_mean", "out_scale"});
      tier_predictor_parameters q;
      q.hidden = size(tp, p + ".hidden", "hidden", 1, 4096);
      q.tiers = size(tp, p + ".tiers", "tiers", 1, 256);
      q.mean = floats(tp, "mean", p + ".mean");
      q.scale = floats(tp, "scale", p + ".scale");
      q.w1 = floats(tp, "w1", p + ".w1");
      q.b1 = floats(tp, "b1", p + ".b1");
      q.w2 = floats(tp, "w2", p + ".w2");
      q.b2 = floats(tp, "b2", p + ".b2");
      q.out_mean = floats(tp, "out_mean", p + ".out_mean");
      q.out_scale = floats(tp, "out_scale", p + ".out_scale");
      c.tier_predictor = std::move(q);
    }
    const nlohmann::json& gs = array(o, "gate_predictors", path + ".gate_predictors");
    for (std::size_t r = 0; r < gs.size(); ++r) {
      const std::string p = path + ".gate_predictors[" + std::to_string(r) + "]";
      keys(gs[r], p, {"rank", "a", "u"});
      gate_predictor_data g;
      g.rank = size(gs[r], p + ".rank", "rank", 1, std::min(m.d_ff, m.d_model));
      g.a = floats(gs[r], "a", p + ".a");
      g.u = floats(gs[r], "u", p + ".u");
      c.gate_predictors.push_back(std::move(g));
    }
    return c;
  }

  [[nodiscard]] budget_entry budget(const nlohmann::json& o, const std::string& path) const {
    keys(o, path, {"name", "method", "target_bytes", "bytes_fraction", "kl", "layers", "input_thresholds"});
    budget_entry b;
    b.name = string(o, "name", path + ".name");
    b.method = string(o, "method", path + ".method");
    b.target_bytes = number(o, "target_bytes", path + ".target_bytes");
    b.bytes_fraction = number(o, "bytes_fraction", path + ".bytes_fraction");
    b.kl = number(o, "kl", path + ".kl");
    const nlohmann::json& ls = array(o, "layers", path + ".layers");
    for (std::size_t l = 0; l < ls.size(); ++l) {
      const std::string p = path + ".layers[" + std::to_string(l) + "]";
      keys(ls[l], p,
           {"dense", "rule", "keep", "threshold", "tier", "predict_tier", "tier_budget", "with_base", "refine",
            "gate_rank", "bytes_fraction"});
      layer_budget s;
      s.dense = boolean(ls[l], "dense", p + ".dense");
      const std::string rule = string(ls[l], "rule", p + ".rule");
      bool found = false;
      for (const neuron_rule r :
           {neuron_rule::keep_all, neuron_rule::top_k, neuron_rule::threshold, neuron_rule::tier}) {
        if (rule == name(r)) {
          s.rule = r;
          found = true;
        }
      }
      if (!found) fail(where, p + ".rule", rule, "\"keep_all\", \"top_k\", \"threshold\" or \"tier\"");
      s.keep = number(ls[l], "keep", p + ".keep");
      const double t = number(ls[l], "threshold", p + ".threshold");
      if (!(std::fabs(t) <= std::numeric_limits<float>::max())) {
        fail(where, p + ".threshold", t, "a finite number in the range of float");
      }
      s.threshold = static_cast<float>(t);
      s.tier = size(ls[l], p + ".tier", "tier", 0, 255);
      s.predict_tier = boolean(ls[l], "predict_tier", p + ".predict_tier");
      s.tier_budget = number(ls[l], "tier_budget", p + ".tier_budget");
      s.with_base = boolean(ls[l], "with_base", p + ".with_base");
      s.refine = number(ls[l], "refine", p + ".refine");
      s.gate_rank = size(ls[l], p + ".gate_rank", "gate_rank", 0, std::size_t{1} << 20);
      s.bytes_fraction = number(ls[l], "bytes_fraction", p + ".bytes_fraction");
      b.layers.push_back(s);
    }
    b.input_thresholds = floats_allow_neg_inf(o, "input_thresholds", path + ".input_thresholds");
    return b;
  }

  // TEAL thresholds may be -inf (keep every input); JSON has no infinity, so -inf is written as
  // the string "-inf".
  [[nodiscard]] std::vector<float> floats_allow_neg_inf(const nlohmann::json& o, std::string_view key,
                                                        const std::string& path) const {
    const nlohmann::json& a = array(o, key, path);
    std::vector<float> out;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const nlohmann::json& v = a[i];
      const std::string p = path + "[" + std::to_string(i) + "]";
      if (v.is_string() && v.get<std::string>() == "-inf") {
        out.push_back(-std::numeric_limits<float>::infinity());
        continue;
      }
      if (!v.is_number()) fail_described(where, p, v.dump(), "a number or \"-inf\"");
      const double x = v.get<double>();
      if (!std::isfinite(x) || std::fabs(x) > std::numeric_limits<float>::max()) {
        fail_described(where, p, v.dump(), "a finite number in the range of float, or \"-inf\"");
      }
      out.push_back(static_cast<float>(x));
    }
    return out;
  }
};

}  // namespace detail

inline std::string calibration_data::to_json() const {
  validate_data("calibration_data::to_json");
  nlohmann::ordered_json j;
  j["format"] = format_name;
  j["version"] = current_version;
  j["model"] = {{"layers", model.layers},
                {"d_model", model.d_model},
                {"d_ff", model.d_ff},
                {"activation", name(model.act)},
                {"weights", model.weights}};
  j["sample"] = {{"sequences", sample_sequences}, {"tokens", sample_tokens}};
  nlohmann::ordered_json ls = nlohmann::ordered_json::array();
  for (const layer_calibration& l : layers) {
    nlohmann::ordered_json o;
    o["score_weights"] = detail::json_floats(l.score_weights);
    o["down_norms"] = detail::json_floats(l.down_norms);
    o["permutation"] = l.permutation;
    nlohmann::ordered_json ts = nlohmann::ordered_json::array();
    for (const tier_entry& t : l.tiers) ts.push_back({{"m", t.m}, {"base", t.base}});
    o["tiers"] = ts;
    if (l.tier_predictor) {
      const tier_predictor_parameters& p = *l.tier_predictor;
      nlohmann::ordered_json t;
      t["hidden"] = p.hidden;
      t["tiers"] = p.tiers;
      t["mean"] = detail::json_floats(p.mean);
      t["scale"] = detail::json_floats(p.scale);
      t["w1"] = detail::json_floats(p.w1);
      t["b1"] = detail::json_floats(p.b1);
      t["w2"] = detail::json_floats(p.w2);
      t["b2"] = detail::json_floats(p.b2);
      t["out_mean"] = detail::json_floats(p.out_mean);
      t["out_scale"] = detail::json_floats(p.out_scale);
      o["tier_predictor"] = std::move(t);
    } else {
      o["tier_predictor"] = nullptr;
    }
    nlohmann::ordered_json gs = nlohmann::ordered_json::array();
    for (const gate_predictor_data& g : l.gate_predictors) {
      gs.push_back({{"rank", g.rank}, {"a", detail::json_floats(g.a)}, {"u", detail::json_floats(g.u)}});
    }
    o["gate_predictors"] = std::move(gs);
    ls.push_back(std::move(o));
  }
  j["layers"] = std::move(ls);
  nlohmann::ordered_json bs = nlohmann::ordered_json::array();
  for (const budget_entry& b : budgets) {
    nlohmann::ordered_json o;
    o["name"] = b.name;
    o["method"] = b.method;
    o["target_bytes"] = b.target_bytes;
    o["bytes_fraction"] = b.bytes_fraction;
    o["kl"] = b.kl;
    nlohmann::ordered_json lb = nlohmann::ordered_json::array();
    for (const layer_budget& s : b.layers) {
      lb.push_back({{"dense", s.dense},
                    {"rule", name(s.rule)},
                    {"keep", s.keep},
                    {"threshold", detail::json_shortest(s.threshold)},
                    {"tier", s.tier},
                    {"predict_tier", s.predict_tier},
                    {"tier_budget", s.tier_budget},
                    {"with_base", s.with_base},
                    {"refine", s.refine},
                    {"gate_rank", s.gate_rank},
                    {"bytes_fraction", s.bytes_fraction}});
    }
    o["layers"] = std::move(lb);
    nlohmann::ordered_json it = nlohmann::ordered_json::array();
    for (const float t : b.input_thresholds) {
      if (std::isinf(t)) {
        it.push_back("-inf");  // JSON has no infinity
      } else {
        it.push_back(detail::json_shortest(t));
      }
    }
    o["input_thresholds"] = std::move(it);
    bs.push_back(std::move(o));
  }
  j["budgets"] = std::move(bs);
  return j.dump(1) + "\n";
}

inline calibration_data calibration_data::parse(std::string_view text) {
  constexpr std::string_view where = "calibration_data::parse";
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    detail::fail_described(where, "json", std::string("not a JSON document (") + e.what() + ")",
                           "a complete, well-formed JSON document");
  }
  detail::calibration_reader r{where};
  calibration_data d;
  r.keys(j, "", {"format", "version", "model", "sample", "layers", "budgets"});
  if (r.string(j, "format") != format_name) {
    detail::fail(where, "format", r.string(j, "format"), "\"actsparse-calibration\"");
  }
  const nlohmann::json& version = r.at(j, "version", "");
  if (!version.is_number_integer() || version.get<std::int64_t>() < 1) {
    detail::fail_described(where, "version", version.dump(), "an integer >= 1");
  }
  if (version.get<std::int64_t>() > current_version) {
    detail::fail_described(
        where, "version", version.dump(),
        "a version <= " + std::to_string(current_version) + " (the file is newer than this library; update actsparse)");
  }
  const nlohmann::json& m = r.at(j, "model", "");
  r.keys(m, "model", {"layers", "d_model", "d_ff", "activation", "weights"});
  d.model.layers = r.size(m, "model.layers", "layers", 1, 1u << 16);
  d.model.d_model = r.size(m, "model.d_model", "d_model", 1, std::size_t{1} << 20);
  d.model.d_ff = r.size(m, "model.d_ff", "d_ff", 2, std::size_t{1} << 24);
  const std::string act = r.string(m, "activation", "model.activation");
  bool found = false;
  for (const activation a : {activation::silu, activation::gelu, activation::relu}) {
    if (act == name(a)) {
      d.model.act = a;
      found = true;
    }
  }
  if (!found) detail::fail(where, "model.activation", act, "\"silu\", \"gelu\" or \"relu\"");
  d.model.weights = r.string(m, "weights", "model.weights");
  const nlohmann::json& sample = r.at(j, "sample", "");
  r.keys(sample, "sample", {"sequences", "tokens"});
  d.sample_sequences = r.size(sample, "sample.sequences", "sequences", 0, std::numeric_limits<std::uint32_t>::max());
  d.sample_tokens = r.size(sample, "sample.tokens", "tokens", 0, std::numeric_limits<std::uint32_t>::max());
  const nlohmann::json& ls = r.array(j, "layers", "layers");
  if (ls.size() != d.model.layers) {
    detail::fail(where, "layers", std::to_string(ls.size()) + " entries",
                 "one per layer: model.layers = " + std::to_string(d.model.layers));
  }
  for (std::size_t l = 0; l < ls.size(); ++l)
    d.layers.push_back(r.layer(ls[l], "layers[" + std::to_string(l) + "]", d.model));
  const nlohmann::json& bs = r.array(j, "budgets", "budgets");
  for (std::size_t b = 0; b < bs.size(); ++b)
    d.budgets.push_back(r.budget(bs[b], "budgets[" + std::to_string(b) + "]"));
  d.validate_data(where);
  return d;
}

}  // namespace actsparse
