#pragma once
// The reference kernels: plain scalar loops whose order of operations is the definition of
// every operation. Each weight row is dequantized to f32, then multiplied with the vector
// in f32, one std::fma per term, index ascending, starting from +0. The dense and the sparse
// kernels are written separately but share that order, so a subset that keeps everything
// gives bitwise the dense result.
//
// Preconditions (shapes, index ranges, scratch sizes) are the caller's: reference_backend
// checks them before it calls a kernel. Weights are weight_view, so any dtype (and a typed
// matrix_view<const T>, which converts to one) is accepted, row by row.

#include <actsparse/core/activation.hpp>
#include <actsparse/core/dtype.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/core/views.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>

namespace actsparse::reference {

// acc + a·b with a single rounding. Every multiply-add of the reference goes through here so
// that no compiler setting (-ffp-contract, an FMA-capable -march) can change a result.
[[nodiscard]] inline float madd(float a, float b, float acc) noexcept { return std::fma(a, b, acc); }

// Σ_k a[k]·b[k], k = 0, 1, ..., n-1 (n = a.size() = b.size()).
[[nodiscard]] inline float dot(std::span<const float> a, std::span<const float> b) noexcept {
  float acc = 0.0F;
  for (std::size_t k = 0; k < a.size(); ++k) acc = madd(a[k], b[k], acc);
  return acc;
}

// Σ_{j ∈ kept} a[j]·b[j], kept ascending: the dot product with the skipped entries of b read as 0.
[[nodiscard]] inline float dot_kept(std::span<const float> a, std::span<const float> b,
                                    std::span<const std::uint32_t> kept) noexcept {
  float acc = 0.0F;
  for (const std::uint32_t j : kept) acc = madd(a[j], b[j], acc);
  return acc;
}

// Σ_k a[kept[k]]·b[k]: as dot_kept, with b holding only the kept entries (b.size() = kept.size()).
[[nodiscard]] inline float dot_kept_compact(std::span<const float> a, std::span<const float> b,
                                            std::span<const std::uint32_t> kept) noexcept {
  float acc = 0.0F;
  for (std::size_t k = 0; k < kept.size(); ++k) acc = madd(a[kept[k]], b[k], acc);
  return acc;
}

// Row i of w as f32 (out.size() = w.cols).
inline void dequantize_row(const weight_view& w, std::size_t i, std::span<float> out) noexcept {
  visit_dtype(w.type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    actsparse::dequantize_row<T>(w.as<T>().row(i), out.data(), w.cols);
  });
}

// W[i, :]·x, dequantizing the row into `row` (row.size() >= w.cols) first.
[[nodiscard]] inline float row_dot(const weight_view& w, std::size_t i, std::span<const float> x,
                                   std::span<float> row) noexcept {
  const std::span<float> r = row.first(w.cols);
  dequantize_row(w, i, r);
  return dot(r, x);
}

// y = W x (y.size() = w.rows, x.size() = w.cols).
inline void dense_gemv(const weight_view& w, std::span<const float> x, std::span<float> y,
                       std::span<float> row) noexcept {
  for (std::size_t i = 0; i < w.rows; ++i) y[i] = row_dot(w, i, x, row);
}

// y[k] = W[rows[k], :]·x (output-sparse: only the listed rows are read).
inline void row_gather_gemv(const weight_view& w, std::span<const std::uint32_t> rows, std::span<const float> x,
                            std::span<float> y, std::span<float> row) noexcept {
  for (std::size_t k = 0; k < rows.size(); ++k) y[k] = row_dot(w, rows[k], x, row);
}

// y = Σ_{j ∈ inputs} W[:, j]·x[j] (input-sparse: the skipped inputs count as 0). Computed as
// y[i] = Σ_{j ∈ inputs} W[i, j]·x[j] per row, j ascending: the order of dense_gemv.
inline void input_sparse_linear(const weight_view& w, std::span<const std::uint32_t> inputs, std::span<const float> x,
                                std::span<float> y, std::span<float> row) noexcept {
  const std::span<float> r = row.first(w.cols);
  for (std::size_t i = 0; i < w.rows; ++i) {
    dequantize_row(w, i, r);
    y[i] = dot_kept(r, x, inputs);
  }
}

// y = Σ_{j ∈ inputs} x_j · wt[j, :] over a transposed weight (rows = inputs); every y[i] is
// the chain fma(wt[j, i], x_j, ·) over j ascending from 0: the same as input_sparse_linear on W.
inline void transposed_linear(const weight_view& wt, const subset& inputs, std::span<const float> x, std::span<float> y,
                              std::span<float> row) noexcept {
  const std::span<float> r = row.first(wt.cols);
  for (float& v : y) v = 0.0F;
  const std::size_t n = inputs.count(wt.rows);
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t j = inputs.all ? k : inputs.indices[k];
    dequantize_row(wt, j, r);
    for (std::size_t i = 0; i < wt.cols; ++i) y[i] = madd(r[i], x[j], y[i]);
  }
}

// Neuron j's hidden value act(g_j)·u_j, with g_j = W_gate[j, :]·x unless the activated gate
// is given (gate_act not empty: act(g_j) = gate_act[j]).
[[nodiscard]] inline float hidden(const ffn_layer& f, std::size_t j, std::span<const float> x,
                                  std::span<const float> gate_act, std::span<float> row) noexcept {
  const float a = gate_act.empty() ? apply(f.act, row_dot(f.gate, j, x, row)) : gate_act[j];
  return a * row_dot(f.up, j, x, row);
}

// h[j] for every neuron j (h.size() = d_ff).
inline void dense_hidden(const ffn_layer& f, std::span<const float> x, std::span<const float> gate_act,
                         std::span<float> h, std::span<float> row) noexcept {
  for (std::size_t j = 0; j < f.d_ff(); ++j) h[j] = hidden(f, j, x, gate_act, row);
}

// h[k] for the kept neurons j = neurons[k] only (h.size() = neurons.size()).
inline void sparse_hidden(const ffn_layer& f, std::span<const std::uint32_t> neurons, std::span<const float> x,
                          std::span<const float> gate_act, std::span<float> h, std::span<float> row) noexcept {
  for (std::size_t k = 0; k < neurons.size(); ++k) h[k] = hidden(f, neurons[k], x, gate_act, row);
}

// The down projection y = Σ_{k} W_down[:, j_k]·h[k], j_k = neurons ? neurons[k] : k, written as
// y[i] = Σ_k W_down[i, j_k]·h[k], k ascending from +0: the same chain whether W_down is read by
// rows (down) or its transpose by rows (down_t). Scratch: row holds max(d_model, d_ff) values.
inline void down_projection(const ffn_layer& f, const std::uint32_t* neurons, std::span<const float> h,
                            std::span<float> y, std::span<float> row) noexcept {
  if (!f.down.absent()) {
    const std::span<float> r = row.first(f.down.cols);
    for (std::size_t i = 0; i < f.down.rows; ++i) {
      dequantize_row(f.down, i, r);
      float acc = 0.0F;
      for (std::size_t k = 0; k < h.size(); ++k) acc = madd(r[neurons != nullptr ? neurons[k] : k], h[k], acc);
      y[i] = acc;
    }
    return;
  }
  const std::span<float> r = row.first(f.down_t.cols);
  for (float& v : y) v = 0.0F;
  for (std::size_t k = 0; k < h.size(); ++k) {
    dequantize_row(f.down_t, neurons != nullptr ? neurons[k] : k, r);
    for (std::size_t i = 0; i < y.size(); ++i) y[i] = madd(r[i], h[k], y[i]);
  }
}

// Dense gated FFN: y = W_down h, y[i] = Σ_j W_down[i, j]·h[j], j ascending. Scratch: row holds
// max(d_model, d_ff) values, h holds d_ff.
inline void dense_gated_ffn(const ffn_layer& f, std::span<const float> x, std::span<const float> gate_act,
                            std::span<float> y, std::span<float> h, std::span<float> row) noexcept {
  dense_hidden(f, x, gate_act, h, row);
  down_projection(f, nullptr, h, y, row);
}

// Neuron-sparse gated FFN: y = Σ_{j ∈ neurons} W_down[:, j]·h_j, computed per output as
// y[i] = Σ_{j ∈ neurons} W_down[i, j]·h_j, j ascending (the order of dense_gated_ffn). Scratch:
// row holds max(d_model, d_ff) values, h holds neurons.size().
inline void neuron_sparse_gated_ffn(const ffn_layer& f, std::span<const std::uint32_t> neurons,
                                    std::span<const float> x, std::span<const float> gate_act, std::span<float> y,
                                    std::span<float> h, std::span<float> row) noexcept {
  sparse_hidden(f, neurons, x, gate_act, h, row);
  down_projection(f, neurons.data(), h, y, row);
}

// Token FFN: residual[t, :] += FFN(input[t, :]) for t in tokens (the dense FFN per token, or the
// neuron-sparse one over `neurons`, with the gate act(W_gate x_t) taken from gate_act's row t
// when given); the other rows are not touched. residual[t, i] + y_i is one f32 addition of the
// dense_gated_ffn output. Scratch: row holds max(d_model, d_ff) values, h holds d_ff, y holds
// d_model.
inline void token_sparse_ffn(const ffn_layer& f, matrix_view<const float> input, matrix_view<float> residual,
                             subset tokens, subset neurons, matrix_view<const float> gate_act, std::span<float> h,
                             std::span<float> row, std::span<float> y) noexcept {
  const std::size_t n = tokens.count(input.rows);
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t t = tokens.all ? k : tokens.indices[k];
    const std::span<const float> x(input.row(t), input.cols);
    const std::span<float> out(residual.row(t), residual.cols);
    const std::span<const float> g =
        gate_act.data == nullptr ? std::span<const float>{} : std::span<const float>(gate_act.row(t), gate_act.cols);
    if (neurons.all) {
      dense_gated_ffn(f, x, g, y, h, row);
    } else {
      neuron_sparse_gated_ffn(f, neurons.indices, x, g, y, h.first(neurons.indices.size()), row);
    }
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = out[i] + y[i];
  }
}

// MoE layer: for every token t, y_t[i] = fma chain from +0 over t's pairs p (token-major
// order) of w_p·f_p[i], f_p = dense_gated_ffn of expert e_p on x_t; then + the shared expert's
// output when one is given. Scratch: acc and f hold d_model values, h holds the largest d_ff,
// row max(d_model, that d_ff) values.
inline void moe_ffn(const moe_ffn_args& a, std::span<float> acc, std::span<float> f, std::span<float> h,
                    std::span<float> row) noexcept {
  const routing_view& r = a.routing;
  const bool shared = !a.shared.gate.absent();
  for (std::size_t t = 0; t < r.tokens; ++t) {
    const std::span<const float> x(a.input.row(t), a.input.cols);
    for (float& v : acc) v = 0.0F;
    for (std::uint32_t p = r.token_offsets[t]; p < r.token_offsets[t + 1]; ++p) {
      const ffn_layer e = a.experts.expert(r.pair_expert[p]);
      dense_gated_ffn(e, x, {}, f, h.first(e.d_ff()), row);
      const float w = r.pair_weight[p];
      for (std::size_t i = 0; i < acc.size(); ++i) acc[i] = madd(w, f[i], acc[i]);
    }
    if (shared) {
      dense_gated_ffn(a.shared, x, {}, f, h.first(a.shared.d_ff()), row);
      for (std::size_t i = 0; i < acc.size(); ++i) acc[i] = acc[i] + f[i];
    }
    float* const y = a.output.row(t);
    for (std::size_t i = 0; i < acc.size(); ++i) y[i] = acc[i];
  }
}

// Decode attention (attention_args), the oracle: per head, the scores q_h·K_p[g] summed in
// double and rounded to float (times scale), then the softmax and the weighted sum of V in
// double over the present positions in order, rounded once. Scratch: one float per position.
inline void attention(const attention_args& a, std::span<float> scores) noexcept {
  const std::size_t hd = a.head_dim;
  const std::size_t group = a.n_heads / a.n_kv_heads;
  const std::size_t n = a.k_rows.size();
  const auto present = [&](std::size_t p) { return a.k_rows[p].data != nullptr && a.v_rows[p].data != nullptr; };
  for (float& m : a.position_mass) m = 0.0F;
  for (std::size_t h = 0; h < a.n_heads; ++h) {
    const std::size_t g = h / group;
    const float* q = a.q.data() + h * hd;
    double top = -std::numeric_limits<double>::infinity();
    for (std::size_t p = 0; p < n; ++p) {
      if (!present(p)) continue;
      double dot = 0.0;
      for (std::size_t i = 0; i < hd; ++i) {
        dot += static_cast<double>(q[i]) * decode_value(a.k_rows[p].format, a.k_rows[p].data, g * hd + i);
      }
      scores[p] = static_cast<float>(dot * static_cast<double>(a.scale));
      top = std::max(top, static_cast<double>(scores[p]));
    }
    double total = 0.0;
    for (std::size_t p = 0; p < n; ++p) {
      if (present(p)) total += std::exp(static_cast<double>(scores[p]) - top);
    }
    float* o = a.output.data() + h * hd;
    for (std::size_t i = 0; i < hd; ++i) {
      double acc = 0.0;
      for (std::size_t p = 0; p < n; ++p) {
        if (!present(p)) continue;
        acc += std::exp(static_cast<double>(scores[p]) - top) *
               decode_value(a.v_rows[p].format, a.v_rows[p].data, g * hd + i);
      }
      o[i] = total > 0.0 ? static_cast<float>(acc / total) : 0.0F;
    }
    if (!a.position_mass.empty()) {
      for (std::size_t p = 0; p < n; ++p) {
        if (present(p)) {
          a.position_mass[p] += static_cast<float>(std::exp(static_cast<double>(scores[p]) - top) / total);
        }
      }
    }
  }
}

}  // namespace actsparse::reference
