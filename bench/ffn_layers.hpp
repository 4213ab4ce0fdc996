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
  cpu::weight_layouts columns;  // column_weights: W_down of every layer in column blocks (cpu::column_blocks)
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

// Enough layers (at least 3) that one pass over them streams past the last-level cache.
template <class T>
std::size_t layer_count(const shape& s) {
  const std::size_t one = 3 * matrix_bytes<T>(s);
  return std::max<std::size_t>(3, (actsparse_bench::streaming_bytes() + one - 1) / one);
}

// Gate, up and down_t of random values at the shape (fixed seeds).
template <class T>
layer<T> random_layer(const shape& s) {
  layer<T> l;
  l.gate = random_matrix<T>(s.d_ff, s.d_model, 1.0F / std::sqrt(static_cast<float>(s.d_model)), 1);
  l.up = random_matrix<T>(s.d_ff, s.d_model, 1.0F / std::sqrt(static_cast<float>(s.d_model)), 2);
  l.down_t = random_matrix<T>(s.d_ff, s.d_model, 1.0F / std::sqrt(static_cast<float>(s.d_ff)), 3);
  return l;
}

// The dtype's label in row names: q8_0_x16 / q4_0_x16 with interleaved copies.
template <class T>
std::string label_of(bool interleaved) {
  return std::string(name(dtype_traits<T>::type)) + (interleaved ? "_x16" : "");
}

// The layers of a shape (layer_count of them).
// Interleaved (q8_0 / q4_0): each layer also holds W_down row-major and the interleaved copies
// of gate, up and W_down (cpu::weight_layouts), which the dense reads (and the sparse FFN's
// gate GEMV, and from its crossover on its up and down); down_t stays what gathers read.
// W_down and down_t hold unrelated random values: only the time is measured here.
template <class T>
const layers<T>& weights(const shape& s, bool interleaved) {
  const std::string key = "cpu_ffn/" + label_of<T>(interleaved) + "/" + s.label;
  return large_dataset::get<layers<T>>(key, [&] {
    layer<T> first = random_layer<T>(s);
    if (interleaved) first.down = random_matrix<T>(s.d_model, s.d_ff, 1.0F / std::sqrt(static_cast<float>(s.d_ff)), 4);
    layers<T> out;
    out.l.assign(layer_count<T>(s), first);  // copies: distinct memory, same values
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

// The q8_0 / q4_0 layers of weights(s, false) with W_down as well, held once in column blocks
// (cpu::column_blocks) in `columns`: a backend with these layouts reads W_down from them, one
// without them the (unrelated, random) down_t. W_down's row-major blocks are dropped once the
// copy is built: only the view's address stays, as the layouts' key, so with down_t left out
// the layer holds gate + up + one W_down (the model's bytes).
template <class T>
const layers<T>& column_weights(const shape& s) {
  const std::string key = "cpu_ffn/" + std::string(name(dtype_traits<T>::type)) + "_cols/" + s.label;
  return large_dataset::get<layers<T>>(key, [&] {
    const std::vector<T> down = random_matrix<T>(s.d_model, s.d_ff, 1.0F / std::sqrt(static_cast<float>(s.d_ff)), 4);
    layers<T> out;
    out.l.assign(layer_count<T>(s), random_layer<T>(s));
    for (layer<T>& l : out.l) {
      l.down.resize(1);  // a distinct address per layer for the layouts' key (never read)
      const weight_view source(l.down.data(), dtype_traits<T>::type, s.d_model, s.d_ff,
                               row_bytes(dtype_traits<T>::type, s.d_ff));
      cpu::column_blocks_weights blocks = cpu::column_blocks(matrix_of(down, s.d_model, s.d_ff));
      blocks.source = source;
      (void)out.columns.add(std::move(blocks));
    }
    return out;
  });
}

template <class T>
ffn_layer view_of(const layer<T>& l, const shape& s) {
  return ffn_layer{activation::silu, matrix_of(l.gate, s.d_ff, s.d_model), matrix_of(l.up, s.d_ff, s.d_model),
                   l.down.empty() ? weight_view{}
                                  : weight_view(l.down.data(), dtype_traits<T>::type, s.d_model, s.d_ff,
                                                row_bytes(dtype_traits<T>::type, s.d_ff)),
                   matrix_of(l.down_t, s.d_ff, s.d_model)};
}

// One iteration comparing a dense call and a step on two neighbouring layers of w (moved on
// by two each iteration, so both stream their weights from DRAM), timed by time_pair; returns
// the step's seconds. `next` carries the rotation from one iteration to the next.
template <class T, class Dense, class Step>
double time_on_layers(std::int64_t iteration, const layers<T>& w, const shape& s, std::size_t& next, Dense&& dense,
                      Step&& step, double& dense_s, double& step_s) {
  const ffn_layer d = view_of(w.l[next % w.l.size()], s);
  const ffn_layer sp = view_of(w.l[(next + 1) % w.l.size()], s);
  next += 2;
  return time_pair(
      iteration, [&] { dense(d); }, [&] { step(sp); }, dense_s, step_s);
}

// A decode batch of n tokens over the CPU backend (the cpu_ffn_batch and cpu_ffn_spec rows):
// dense, the token FFN over every neuron (every row read once for the batch); sparse, the gate
// of the n tokens at once (batched_gemv_args), its activation, and the token FFN over a neuron
// union with that gate given: what neuron_sparse_ffn::batch runs after its selection.
struct batch_runner {
  batch_runner(const std::vector<float>& input, std::size_t tokens, const shape& s, cpu::executor& ex)
      : in(matrix_view<const float>::packed(input.data(), tokens, s.d_model)),
        residual(tokens * s.d_model, 0.0F),
        gates(tokens * s.d_ff),
        ex_(&ex) {}

  void dense(const ffn_layer& l) {
    run(token_ffn_args{l, in, matrix_view<float>::packed(residual.data(), in.rows, in.cols), subset::everything()});
  }
  void sparse(const ffn_layer& l, subset neurons) {
    const std::size_t d_ff = l.d_ff();
    run(batched_gemv_args{l.gate, in, matrix_view<float>::packed(gates.data(), in.rows, d_ff)});
    cpu.activate(l.act, std::span<float>(gates));
    run(token_ffn_args{l, in, matrix_view<float>::packed(residual.data(), in.rows, in.cols), subset::everything(),
                       neurons, matrix_view<const float>::packed(gates.data(), in.rows, d_ff)});
  }

  cpu_backend cpu;
  matrix_view<const float> in;
  std::vector<float> residual;
  std::vector<float> gates;
  std::vector<std::byte> workspace;
  bool ok = true;

 private:
  template <class Args>
  void run(const Args& a) {
    workspace.resize(std::max(workspace.size(), cpu.workspace_size(a)));
    ok = cpu.run(a, workspace, *ex_).handled() && ok;
  }
  cpu::executor* ex_;
};

// A selector that keeps a fixed set (the clustered sets): the scores are ignored.
struct fixed_set {
  std::vector<std::uint32_t> set;
  void select(std::span<const float> scores, selection& out) const {
    out.universe = scores.size();
    out.indices.assign(set.begin(), set.end());
  }
};

}  // namespace actsparse_bench
