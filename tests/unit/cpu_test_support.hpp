#pragma once
// Shared by the CPU backend's tests: run a check once per Highway target, and the row
// axpy's summation order written out.

#include <actsparse/backends/cpu/backend.hpp>

#include <doctest/doctest.h>
#include <hwy/targets.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace cpu_test {

// Runs f once for every Highway target this CPU supports and this program compiled, each
// time with dynamic dispatch forced to that target, then once more with the default.
template <class F>
void for_each_target(F&& f) {
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string target_name = hwy::TargetName(target);
    INFO("target ", target_name);
    f();
  }
  // SupportedAndGeneratedTargets() is computed in this translation unit, which does not
  // build AVX3_DL; the implementation unit does. One more pass with the default dispatch
  // runs the best target the implementation compiled (AVX3_DL on a CPU with VNNI).
  hwy::SetSupportedTargetsForTest(0);
  INFO("target: the default dispatch");
  f();
}

// y = Σ_{j listed} x_j · Wt[j, :] in the CPU row axpy's order (cpu::axpy_all_columns): per
// chunk of Wt's rows (cpu::cut_rows) the chain acc = fma(Wt[j, i], x_j, acc) over its listed
// rows in order, then the chunk sums added in chunk order. wt(j, i) gives Wt[j, i] in f32
// (dequantized). What the backend computes, bit for bit, on targets with a native FMA.
template <class Wt>
std::vector<float> chunked_axpy(const Wt& wt, std::size_t rows, std::size_t cols, std::span<const float> x,
                                std::span<const std::uint32_t> listed) {
  const actsparse::cpu::row_chunks ch = actsparse::cpu::cut_rows(rows, listed.data(), listed.size());
  std::vector<float> y(cols, 0.0F);
  for (std::size_t c = 0; c < ch.count; ++c) {
    for (std::size_t i = 0; i < cols; ++i) {
      float acc = 0.0F;
      for (std::size_t k = ch.first[c]; k < ch.first[c + 1]; ++k) acc = std::fma(wt(listed[k], i), x[listed[k]], acc);
      y[i] = c == 0 ? acc : y[i] + acc;
    }
  }
  return y;
}

}  // namespace cpu_test
