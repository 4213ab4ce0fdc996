// libFuzzer target for the llama2.c loaders. The first input byte picks what the rest is fed to:
//   0: llama2c::checkpoint::from_bytes
//   1: llama2c::tokenizer::from_bytes with vocab_size 512 (tok512's)
//   2: llama2c::tokenizer::from_bytes with vocab_size = the next 4 bytes (little-endian uint32)
//   3: actsparse::per_layer_table<float> / <std::size_t>::parse (the per-layer text format that
//      threshold_calibration uses), then the text form parsed back
//   4: actsparse::calibration_data::parse (the JSON calibration file); a file that loads is
//      written and parsed back (it must come back equal), and every budget is turned into its
//      schedule and run: the selector of every layer on a score vector, the tier predictor on
//      an input, the TEAL tables
// A loaded object is then used (every weight view read, every token decoded, text encoded).
// actsparse::error is the expected outcome for malformed bytes; anything else (a crash, a
// sanitizer report, another exception) is a finding.

#include "llama2c/checkpoint.hpp"
#include "llama2c/tokenizer.hpp"

#include <actsparse/calibration/calibrated_schedule.hpp>
#include <actsparse/calibration/calibration_file.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/schedules/per_layer_table.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string_view>
#include <vector>

namespace {

volatile float sink;  // keeps the reads of the weights

void touch(const float* p, std::size_t n) {
  if (n > 0) sink = p[0] + p[n - 1];
}

void use(const llama2c::checkpoint& c) {
  const auto& k = c.cfg();
  auto m = [](const actsparse::matrix_view<const float>& v) { touch(v.data, v.rows * v.cols); };
  m(c.token_embedding());
  m(c.classifier());
  for (std::size_t l = 0; l < static_cast<std::size_t>(k.n_layers); ++l) {
    touch(c.rms_att(l).data(), c.rms_att(l).size());
    touch(c.rms_ffn(l).data(), c.rms_ffn(l).size());
    m(c.wq(l));
    m(c.wk(l));
    m(c.wv(l));
    m(c.wo(l));
    m(c.w1(l));
    m(c.w2(l));
    m(c.w3(l));
  }
  touch(c.rms_final().data(), c.rms_final().size());
}

void use(const llama2c::tokenizer& t, std::string_view text) {
  std::vector<int> all;
  for (std::size_t i = 0; i < t.vocab_size(); ++i) {
    all.push_back(static_cast<int>(i));
    (void)t.decode(llama2c::tokenizer::bos_id, static_cast<int>(i));
  }
  (void)t.decode(all);
  const std::vector<int> ids = t.encode(text.substr(0, 64), true, true);
  (void)t.decode(ids);
}

// A calibration file that loaded: round trip, then every budget's schedule used.
void use(const actsparse::calibration_data& d) {
  if (!(actsparse::calibration_data::parse(d.to_json()) == d)) __builtin_trap();  // exact round trip
  if (d.model.d_ff > 4096 || d.model.d_model > 4096) return;                      // bounded work per input
  std::vector<float> scores(d.model.d_ff), x(d.model.d_model), scratch;
  for (std::size_t j = 0; j < scores.size(); ++j) scores[j] = static_cast<float>((j * 7) % 13) * 0.1F;
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 5) % 11) * 0.2F - 1.0F;
  for (const actsparse::budget_entry& b : d.budgets) {
    if (!b.input_thresholds.empty()) {
      for (std::size_t p = 0; p < actsparse::input_projections; ++p) (void)actsparse::input_thresholds(d, b.name, p);
    }
    if (b.layers.empty()) continue;
    const actsparse::calibrated_schedule s(d, b.name);
    for (std::size_t l = 0; l < s.layers(); ++l) {
      const actsparse::calibrated_setting v = s.at(l);
      const actsparse::calibrated_selector sel =
          actsparse::configure(actsparse::calibrated_selector{}, v, actsparse::layer_input{x, &scratch});
      (void)sel.select(scores);
      std::vector<float> weighted(d.model.d_ff);
      actsparse::configure_scorer(actsparse::weight_aware_gate{}, v)
          .score({scores, actsparse::activation::silu}, weighted);
      (void)actsparse::refine_stage(v).kept_of(d.model.d_ff);
      if (const actsparse::gate_factors* g = actsparse::gate_predictor(v); g != nullptr)
        sink = static_cast<float>(g->bytes());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::span<const char> rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    switch (data[0] % 5) {
      case 0:
        use(llama2c::checkpoint::from_bytes(rest, "fuzz"));
        break;
      case 1:
        use(llama2c::tokenizer::from_bytes(rest, 512, "fuzz"), std::string_view(rest.data(), rest.size()));
        break;
      case 3: {
        const std::string_view text(rest.data(), rest.size());
        try {
          const auto t = actsparse::per_layer_table<float>::parse(text);
          if (!(actsparse::per_layer_table<float>::parse(t.to_string()) == t)) __builtin_trap();  // exact round trip
        } catch (const actsparse::error&) {
        }
        (void)actsparse::per_layer_table<std::size_t>::parse(text);
        break;
      }
      case 4:
        use(actsparse::calibration_data::parse(std::string_view(rest.data(), rest.size())));
        break;
      default: {
        if (rest.size() < 4) return 0;
        std::uint32_t vocab = 0;
        std::memcpy(&vocab, rest.data(), sizeof vocab);
        const auto body = rest.subspan(4);
        use(llama2c::tokenizer::from_bytes(body, vocab, "fuzz"), std::string_view(body.data(), body.size()));
        break;
      }
    }
  } catch (const actsparse::error&) {
    // a malformed input, reported as it should be
  }
  return 0;
}
