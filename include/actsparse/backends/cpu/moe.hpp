#pragma once
// The CPU backend's MoE layer (moe_ffn_args): y_t = Σ_p w_p · FFN_{e_p}(x_t) (+ shared) over
// the routing table, in phases with ex.sync() between them:
//   0  every token's x quantized (int8 path); the active groups (experts with tokens, then the
//      shared expert) and the combine's row list and coefficients
//   1  tasks (group, 64 rows of d_ff): h = act(W_gate[rows]·x)·(W_up[rows]·x) for every token
//      of the group, each expert's rows read once for all its tokens
//   2  tasks (group, columns of d_model): f = Σ_j h_j·W_downᵀ[j, :] per token in the decode
//      FFN's chunked order, several tokens per weight load for more than 4 tokens (or rows of
//      W_down: f = W_down·h)
//   3  per token: y_t = the row axpy of its pairs' f rows with their weights, in token-major
//      order, then its shared row with coefficient 1
// Each f row is the token FFN's (and the dense decode FFN's) bits for that token and expert;
// the combine is the row axpy's fma chain (the reference's chain on a target with FMA). Every
// task's work and order are fixed by the shapes and the routing table, never by the thread count.

#include <actsparse/backends/cpu/dispatch.hpp>
#include <actsparse/backends/cpu/executor.hpp>
#include <actsparse/backends/cpu/plan.hpp>
#include <actsparse/backends/cpu/tasks.hpp>
#include <actsparse/backends/cpu/tuning.hpp>
#include <actsparse/core/op_args.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace actsparse::cpu {

class moe_run {
 public:
  moe_run(const moe_ffn_args& a, const moe_plan& p, std::byte* ws, const kernel_tuning& kt,
          bool ggml_rounding = false) noexcept
      : a_(a),
        p_(p),
        ws_(ws),
        kt_(kt),
        ggml_rounding_(ggml_rounding),
        shared_(!a.shared.gate.absent()),
        experts_(a.experts.count()),
        h_(reinterpret_cast<float*>(ws + p.h_at)),
        f_(reinterpret_cast<float*>(ws + p.f_at)),
        comb_rows_(reinterpret_cast<std::uint32_t*>(ws + p.rows_at)),
        coef_(reinterpret_cast<float*>(ws + p.coef_at)),
        groups_(reinterpret_cast<std::uint32_t*>(ws + p.groups_at)),
        sums_(reinterpret_cast<float*>(ws + p.sums_at)) {}

  void operator()(executor& ex) const {
    if (p_.quantize_x) {
      ex.parallel_for(p_.tokens, [&](std::size_t t) {
        const quantized_x q = quantized(t);
        detail::quantize_q8_0_x(a_.input.row(t), p_.d_model, q.q, q.d, ggml_rounding_);
      });
    }
    ex.parallel_for(1, [&](std::size_t) { prepare(); });
    ex.sync();
    ex.parallel_for(hidden_tasks(), [&](std::size_t task) { hidden(task); });
    ex.sync();
    const std::size_t blocks = column_blocks();
    ex.parallel_for(groups_[0] * blocks, [&](std::size_t task) { down(task / blocks, task % blocks); });
    ex.sync();
    ex.parallel_for(p_.tokens, [&](std::size_t t) { combine(t); });
  }

 private:
  static constexpr std::size_t group8 = 8;      // rows per step of the many-token int8 path
  static constexpr std::size_t few_tokens = 4;  // at most: each token reads the block's rows in two calls
  static constexpr std::size_t token_chunk = 16;

  // Phase 0 (one task): groups_ = {count, experts with tokens..., shared}; the combine's inputs.
  void prepare() const {
    const routing_view& r = a_.routing;
    std::uint32_t n = 0;
    for (std::size_t e = 0; e < experts_; ++e) {
      if (r.expert_offsets[e + 1] > r.expert_offsets[e]) groups_[1 + n++] = static_cast<std::uint32_t>(e);
    }
    if (shared_) groups_[1 + n++] = static_cast<std::uint32_t>(experts_);
    groups_[0] = n;
    for (std::size_t q = 0; q < p_.pairs; ++q) coef_[q] = r.pair_weight[r.expert_pairs[q]];
    if (shared_) std::fill(coef_ + p_.pairs, coef_ + p_.rows, 1.0F);
    // comb_rows_[token-major slot] = the f row of that pair: the inverse of expert_pairs.
    for (std::size_t q = 0; q < p_.pairs; ++q) {
      const std::uint32_t pr = r.expert_pairs[q];
      comb_rows_[pr + (shared_ ? r.expert_tokens[q] : 0)] = static_cast<std::uint32_t>(q);
    }
    if (shared_) {
      for (std::size_t t = 0; t < p_.tokens; ++t)
        comb_rows_[r.token_offsets[t + 1] + t] = static_cast<std::uint32_t>(p_.pairs + t);
    }
  }

  // Group e (an expert, or experts_ for the shared one): its layer, token count, i-th token and
  // the row of h / f of its i-th token.
  [[nodiscard]] ffn_layer layer(std::uint32_t e) const { return e == experts_ ? a_.shared : a_.experts.expert(e); }
  [[nodiscard]] std::size_t size(std::uint32_t e) const {
    const routing_view& r = a_.routing;
    return e == experts_ ? p_.tokens : static_cast<std::size_t>(r.expert_offsets[e + 1] - r.expert_offsets[e]);
  }
  [[nodiscard]] std::size_t token(std::uint32_t e, std::size_t i) const {
    return e == experts_ ? i : a_.routing.expert_tokens[a_.routing.expert_offsets[e] + i];
  }
  [[nodiscard]] std::size_t row(std::uint32_t e, std::size_t i) const {
    return e == experts_ ? p_.pairs + i : a_.routing.expert_offsets[e] + i;
  }
  [[nodiscard]] quantized_x quantized(std::size_t t) const {
    return quantized_at(ws_ + p_.x_at + t * p_.x_stride, p_.d_model);
  }
  [[nodiscard]] float* h_row(std::uint32_t e, std::size_t i) const { return h_ + row(e, i) * p_.h_stride; }

  // Phase 1 tasks: each group's d_ff in blocks of rows_per_task, groups in order.
  [[nodiscard]] std::size_t hidden_tasks() const {
    std::size_t n = 0;
    for (std::size_t g = 0; g < groups_[0]; ++g) n += row_task_count(layer(groups_[1 + g]).d_ff());
    return n;
  }
  void hidden(std::size_t task) const {
    std::uint32_t e = 0;
    for (std::size_t g = 0; g < groups_[0]; ++g) {  // the task's group and block
      e = groups_[1 + g];
      const std::size_t blocks = row_task_count(layer(e).d_ff());
      if (task < blocks) break;
      task -= blocks;
    }
    const ffn_layer L = layer(e);
    const bool up8 = e == experts_ ? p_.shared_up_int8 : p_.up_int8;
    const bool gate8 = e == experts_ ? p_.shared_gate_int8 : p_.gate_int8;
    const std::size_t begin = task * rows_per_task;
    const std::size_t end = std::min(begin + rows_per_task, L.d_ff());
    const std::size_t n = size(e);
    if (n > few_tokens && up8 == gate8) {
      hidden_many(L, e, up8, begin, end);
      return;
    }
    // Few tokens: each token's rows of the block in two calls (up, then gate), the decode
    // FFN's streams; many tokens with one projection on each path: 8 rows at a time for every
    // token, while they sit in L1.
    float g[rows_per_task];
    const std::size_t step = n <= few_tokens ? end - begin : group8;
    for (std::size_t rb = begin; rb < end; rb += step) {
      const std::size_t re = std::min(rb + step, end);
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t t = token(e, i);
        float* const hr = h_row(e, i) + rb;
        rows_of(L.up, up8, t, rb, re, hr);
        rows_of(L.gate, gate8, t, rb, re, g);
        detail::activate(L.act, g, re - rb);
        for (std::size_t j = 0; j < re - rb; ++j) hr[j] *= g[j];
      }
    }
  }
  // Many tokens: several tokens per weight load (gemm_rows on f32 x, gemm_rows_q8x on
  // quantized x; each sum is the one-token kernel's bits).
  void hidden_many(const ffn_layer& L, std::uint32_t e, bool int8, std::size_t begin, std::size_t end) const {
    const weight_view up = rows_from(L.up, begin, end);
    const weight_view gate = rows_from(L.gate, begin, end);
    float gates[token_chunk][rows_per_task];
    const float* xs[token_chunk];
    const std::int8_t* xq[token_chunk];
    const float* xd[token_chunk];
    float* hs[token_chunk];
    float* gs[token_chunk];
    const std::size_t n = size(e);
    const std::size_t rows = end - begin;
    for (std::size_t i0 = 0; i0 < n; i0 += token_chunk) {
      const std::size_t c = std::min(token_chunk, n - i0);
      for (std::size_t i = 0; i < c; ++i) {
        const std::size_t t = token(e, i0 + i);
        if (int8) {
          const quantized_x q = quantized(t);
          xq[i] = q.q;
          xd[i] = q.d;
        } else {
          xs[i] = a_.input.row(t);
        }
        hs[i] = h_row(e, i0 + i) + begin;
        gs[i] = gates[i];
      }
      if (int8) {
        detail::gemm_rows_q8x(up, 0, rows, xq, xd, c, hs);
        detail::gemm_rows_q8x(gate, 0, rows, xq, xd, c, gs);
      } else {
        detail::gemm_rows(up, 0, rows, xs, c, hs);
        detail::gemm_rows(gate, 0, rows, xs, c, gs);
      }
      for (std::size_t i = 0; i < c; ++i) {
        detail::activate(L.act, gs[i], rows);
        for (std::size_t j = 0; j < rows; ++j) hs[i][j] *= gs[i][j];
      }
    }
  }
  // Rows b .. e of w as rows 0 .. e - b.
  [[nodiscard]] static weight_view rows_from(const weight_view& w, std::size_t b, std::size_t e) noexcept {
    weight_view v = w;
    v.data = static_cast<const std::byte*>(w.data) + b * w.row_stride;
    v.rows = e - b;
    return v;
  }
  // out[k] = W[b + k, :]·x_t for k < e - b, on quantized x (int8) or f32 x.
  void rows_of(const weight_view& w, bool int8, std::size_t t, std::size_t b, std::size_t e, float* out) const {
    const weight_view from = rows_from(w, b, e);
    if (int8) {
      const quantized_x q = quantized(t);
      detail::gemv_rows_q8x(from, nullptr, 0, e - b, q.q, q.d, out, kt_);
    } else {
      detail::gemv_rows(from, nullptr, 0, e - b, a_.input.row(t), out, kt_);
    }
  }

  // Phase 2 tasks: (group slot, block of `per` columns of d_model with down_t, or rows of down).
  [[nodiscard]] std::size_t column_width() const { return std::max(p_.column_tile, rows_per_task); }
  [[nodiscard]] std::size_t column_blocks() const { return (p_.d_model + column_width() - 1) / column_width(); }
  void down(std::size_t slot, std::size_t block) const {
    const std::uint32_t e = groups_[1 + slot];
    const ffn_layer L = layer(e);
    const std::size_t n = size(e);
    const std::size_t d_model = p_.d_model;
    const std::size_t c0 = block * column_width();
    const std::size_t c1 = std::min(c0 + column_width(), d_model);
    if (L.down_t.absent()) {  // rows of W_down, 8 at a time for every token
      for (std::size_t rb = c0; rb < c1; rb += group8) {
        for (std::size_t i = 0; i < n; ++i) {
          detail::gemv_rows(L.down, nullptr, rb, std::min(rb + group8, c1), h_row(e, i), f_ + row(e, i) * d_model, kt_);
        }
      }
      return;
    }
    const row_chunks ch = cut_rows(L.d_ff(), nullptr, L.d_ff());
    if (n > few_tokens) {  // several tokens per weight load, outputs held in registers per chunk
      const float* hs[token_chunk];
      float* fs[token_chunk];
      for (std::size_t i0 = 0; i0 < n; i0 += token_chunk) {
        const std::size_t c = std::min(token_chunk, n - i0);
        for (std::size_t i = 0; i < c; ++i) {
          hs[i] = h_row(e, i0 + i);
          fs[i] = f_ + row(e, i0 + i) * d_model;
        }
        detail::axpy_tokens(L.down_t, ch.first, ch.count, hs, c, c0, c1, fs);
      }
      return;
    }
    // Few tokens: the task's columns of whole rows (chunk sums in the plan's region).
    float tile[axpy_column_quantum];
    float* const sum = p_.column_tile > axpy_column_quantum ? sums_ + slot * d_model + c0 : tile;
    for (std::size_t i = 0; i < n; ++i) {
      axpy_chunks_in_columns(L.down_t, nullptr, h_row(e, i), ch, c0, c1, f_ + row(e, i) * d_model, sum, kt_);
    }
  }

  // Phase 3: token t's pairs in token-major order, then its shared row.
  void combine(std::size_t t) const {
    const routing_view& r = a_.routing;
    const std::size_t b = r.token_offsets[t] + (shared_ ? t : 0);
    const std::size_t e = r.token_offsets[t + 1] + (shared_ ? t + 1 : 0);
    float* const y = a_.output.row(t);
    if (b == e) {
      std::fill(y, y + p_.d_model, 0.0F);
      return;
    }
    const weight_view outputs(f_, dtype::f32, p_.rows, p_.d_model, p_.d_model * sizeof(float));
    detail::axpy_rows(outputs, comb_rows_ + b, e - b, coef_, 0, p_.d_model, y, kt_);
  }

  const moe_ffn_args& a_;
  const moe_plan& p_;
  std::byte* ws_;
  const kernel_tuning& kt_;
  bool ggml_rounding_ = false;  // x quantized by ggml's rule (cpu_backend::ggml_activation_rounding)
  bool shared_;
  std::size_t experts_;
  float* h_;
  float* f_;
  std::uint32_t* comb_rows_;
  float* coef_;
  std::uint32_t* groups_;  // count, then the groups' experts (shared: experts_)
  float* sums_;
};

}  // namespace actsparse::cpu
