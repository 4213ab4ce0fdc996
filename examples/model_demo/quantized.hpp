#pragma once
// The model demo's quantized rows: the bundled model with its FFN weights quantized to q8_0 and to
// q4_0 (llama2c::model(checkpoint, dtype): W_gate, W_up and W_downᵀ by core's ggml-identical
// quantizers, W_downᵀ from the f32 W_down so that no weight is rounded twice; attention, the
// embedding and the classifier stay f32), its dense FFN and a few policies of the f32 table run on
// it unchanged (their thresholds and calibrated budgets are the f32 model's). Every row's KL and
// top-1 are against the f32 dense model (quantization and sparsity together) and against the
// dense model of the same quantization (sparsity alone), both from one forward pass.

#include "harness.hpp"
#include "policies.hpp"

#include <actsparse/core/dtype.hpp>

#include <algorithm>
#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace model_demo {

inline constexpr std::array<dtype, 2> quantized_types{dtype::q8_0, dtype::q4_0};

// The f32 table's rows run on each quantized model, after its dense row: the top-k row of the
// greedy sample, CATS's calibrated threshold at 50% and the calibration file's budgets+refine at
// 0.833 of the bytes (the best calibrated method, docs/QUALITY.md).
inline constexpr std::array<std::string_view, 3> quantized_policies{"magnitude top_k 50%", "CATS 50% sparse",
                                                                    "calibrated budgets+refine @ 0.833"};

// "q4_0 dense", "q4_0 + magnitude top_k 50%", ...
inline std::string quantized_name(dtype t, std::string_view base) {
  return std::string(name(t)) + (base == "dense" ? " dense" : " + " + std::string(base));
}

// The f32 policies whose quantized row of `t` runs under --policy `only` ("dense" first when any
// does: the quantized dense model is every row's second reference).
inline std::vector<std::string> quantized_bases(dtype t, const std::string& only) {
  std::vector<std::string> out;
  const auto wanted = [&](std::string_view base) { return quantized_name(t, base).find(only) != std::string::npos; };
  for (const std::string_view base : quantized_policies) {
    if (wanted(base)) out.emplace_back(base);
  }
  if (!out.empty() || wanted("dense")) out.insert(out.begin(), "dense");
  return out;
}

// Whether a quantized row that needs the calibration file runs under --policy `only`.
inline bool quantized_needs_calibration(const std::string& only) {
  return std::any_of(quantized_types.begin(), quantized_types.end(), [&](dtype t) {
    const std::vector<std::string> bases = quantized_bases(t, only);
    return std::any_of(bases.begin(), bases.end(), [](const std::string& b) { return b.rfind("calibrated ", 0) == 0; });
  });
}

}  // namespace model_demo
