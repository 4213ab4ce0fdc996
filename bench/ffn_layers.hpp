#pragma once
// The decode FFN benchmarks' weights: layers of a model shape in one dtype, enough of them that one
// pass streams past the last-level cache (bench_cpu_ffn and bench_cpu_ffn_replay time the same
// layers), and a selector that keeps a set given from outside.

#include "harness.hpp"
#include "read_bandwidth.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/backends/cpu/layouts.hpp>
#include <actsparse/core/dtype.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/core/selection.hpp>
#include <actsparse/core/views.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace actsparse_bench {

using namespace actsparse;

struct shape {
  const char* label;
  std::size_t d_model;
  std::size_t d_ff;
};
constexpr shape llama2_7b{"7b", 4096, 11008};
constexpr shape qwen25_3b{"3b", 2048, 11008};

template <class T>
struct layer {
  std::vector<T> gate, up, down_t;  // [d_ff × d_model] each
  std::vector<T> down;              // [d_model × d_ff]: with the interleaved copies only
};

template <class T>
struct layers {
  std::vector<layer<T>> l;
  cpu::weight_layouts layouts;  // gate, up and down of every layer interleaved (the <dtype>_x16 rows), or none
};

template <class T>
std::vector<T> random_matrix(std::size_t rows, std::size_t cols, float scale, std::uint64_t seed) {
  const std::vector<float> v = actsparse_bench::random_floats(rows * cols, scale, seed);
  std::vector<T> out(rows * cols / block_values(dtype_traits<T>::type));
  for (std::size_t r = 0; r < rows; ++r)
    quantize_row(v.data() + r * cols, out.data() + r * cols / block_values(dtype_traits<T>::type), cols);
  return out;
}

template <class T>
std::size_t matrix_bytes(const shape& s) {
  return row_bytes(dtype_traits<T>::type, s.d_model) * s.d_ff;
}

template <class T>
weight_view matrix_of(const std::vector<T>& v, std::size_t rows, std::size_t cols) {
  return weight_view(v.data(), dtype_traits<T>::type, rows, cols, row_bytes(dtype_traits<T>::type, cols));
}

// The dtype's label in row names: q8_0_x16 / q4_0_x16 with interleaved copies.
template <class T>
std::string label_of(bool interleaved) {
  return std::string(name(dtype_traits<T>::type)) + (interleaved ? "_x16" : "");
}

// Enough layers (at least 3) that one pass over them streams past the last-level cache.
// Interleaved (q8_0 / q4_0): each layer also holds W_down row-major and the interleaved copies
// of gate, up and W_down (cpu::weight_layouts), which the dense reads (and the sparse FFN's
// gate GEMV, and from its crossover on its up and down); down_t stays what gathers read.
// W_down and down_t hold unrelated random values: only the time is measured here.
template <class T>
const layers<T>& weights(const shape& s, bool interleaved) {
  const std::string key = "cpu_ffn/" + label_of<T>(interleaved) + "/" + s.label;
  return large_dataset::get<layers<T>>(key, [&] {
    const std::size_t one = 3 * matrix_bytes<T>(s);
    const std::size_t count = std::max<std::size_t>(3, (actsparse_bench::streaming_bytes() + one - 1) / one);
    layer<T> first;
    first.gate = random_matrix<T>(s.d_ff, s.d_model, 1.0F / std::sqrt(static_cast<float>(s.d_model)), 1);
    first.up = random_matrix<T>(s.d_ff, s.d_model, 1.0F / std::sqrt(static_cast<float>(s.d_model)), 2);
    first.down_t = random_matrix<T>(s.d_ff, s.d_model, 1.0F / std::sqrt(static_cast<float>(s.d_ff)), 3);
    if (interleaved) first.down = random_matrix<T>(s.d_model, s.d_ff, 1.0F / std::sqrt(static_cast<float>(s.d_ff)), 4);
    layers<T> out;
    out.l.assign(count, first);  // copies: distinct memory, same values
    if constexpr (std::is_same_v<T, block_q4_0> || std::is_same_v<T, block_q8_0>) {
      for (layer<T>& l : out.l) {
        if (!interleaved) break;
        (void)out.layouts.add_interleaved(matrix_of(l.gate, s.d_ff, s.d_model));
        (void)out.layouts.add_interleaved(matrix_of(l.up, s.d_ff, s.d_model));
        (void)out.layouts.add_interleaved(matrix_of(l.down, s.d_model, s.d_ff));
      }
    }
    return out;
  });
}

template <class T>
ffn_layer view_of(const layer<T>& l, const shape& s) {
  return ffn_layer{activation::silu, matrix_of(l.gate, s.d_ff, s.d_model), matrix_of(l.up, s.d_ff, s.d_model),
                   l.down.empty() ? weight_view{} : matrix_of(l.down, s.d_model, s.d_ff),
                   matrix_of(l.down_t, s.d_ff, s.d_model)};
}

// A selector that keeps a fixed set (the clustered sets): the scores are ignored.
struct fixed_set {
  std::vector<std::uint32_t> set;
  void select(std::span<const float> scores, selection& out) const {
    out.universe = scores.size();
    out.indices.assign(set.begin(), set.end());
  }
};

}  // namespace actsparse_bench
