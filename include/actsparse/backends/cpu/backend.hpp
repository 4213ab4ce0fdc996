#pragma once
// The CPU SIMD backend (Google Highway): the protocol only. What each call does is decided by a
// plan (plan.hpp); the work partition is tasks.hpp; the kernels are per-target files compiled by
// implementation.hpp in one translation unit of the program; tuning.hpp holds every number.
//
// Operations, for f32, f16, bf16, q8_0 and q4_0 weights (cpu/dtypes.hpp):
//   gemv_args              dense GEMV and row gather
//   linear_args            the input-sparse linear over row-major W: x with the skipped inputs
//                          set to 0, then the dense GEMV (every byte of W is read; pass Wᵀ as
//                          transposed_linear_args to skip rows)
//   transposed_linear_args the input-sparse linear over Wᵀ: a row axpy of the kept rows
//   gated_ffn_args         the decode FFN, dense or neuron-sparse
//   token_ffn_args         the token-sparse prefill FFN
//   moe_ffn_args           an MoE layer: the routed experts' FFNs grouped by expert, then the
//                          weighted combine
//   attention_args         decode attention over KV rows of any row_format (a tiered store's
//                          rows in place), grouped-query or multi-head
// What it does not handle answers not_handled, so the engine or the ops layer can fall back.
//
// Weights of q8_0 / q4_0 meet x quantized to 8-bit blocks (int8_activations, below): the
// result then differs from the reference by x's quantization error, bounded below.

#include <actsparse/backends/cpu/attention.hpp>
#include <actsparse/backends/cpu/dispatch.hpp>
#include <actsparse/backends/cpu/executor.hpp>
#include <actsparse/backends/cpu/moe.hpp>
#include <actsparse/backends/cpu/plan.hpp>
#include <actsparse/backends/cpu/tasks.hpp>
#include <actsparse/core/activation.hpp>
#include <actsparse/core/check_args.hpp>
#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/workspace.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <type_traits>

namespace actsparse {

namespace cpu {
// The integer kernels (q8_0 / q4_0 weights on x quantized) this CPU runs: "avx512_vnni"
// (AVX-512 VNNI, vpdpbusd), "avx2" (vpmaddubsw; also AVX-512 CPUs without VNNI) or "portable".
[[nodiscard]] inline const char* int8_kernels() { return detail::int8_kernels(); }
}  // namespace cpu

struct cpu_backend {
  static constexpr std::string_view name = "cpu";
  using memory_space = host_memory;
  // The calling thread, a thread_pool, or the engine's own (ith, nth) split. Under a split,
  // gemv / linear / transposed linear take one workspace per thread; the gated FFN and the
  // token FFN have phases, need the engine's barrier (executor::split(s, barrier)) and take
  // one workspace shared by the nth threads.
  using executor_type = cpu::executor;

  // GEMV of q8_0 / q4_0 weights (gemv_args, linear_args, the FFN's gate, up and interleaved
  // down): true (default) quantizes x once per call to 8-bit blocks as ggml does (per 32
  // values d_x = max|x|/127 in f32, q_x = round(x/d_x) in int8) and runs integer dot products:
  // per block the exact int32 Σ q_w·q_x, times d_w·d_x. Error against the reference, which
  // multiplies f32 x: per value |x_i − d_x·q_x,i| <= d_x·(1/2 + 2^-16), so per row at most
  // Σ_b |d_w,b|·d_x,b·(1/2 + 2^-16)·Σ_i |q_w,i| plus f32 rounding (tests/unit/test_cpu_quant.cpp
  // checks exactly this bound). false: blocks dequantized exactly and multiplied by f32 x
  // (within f32 rounding of the reference). The row axpy is f32 either way.
  bool int8_activations = true;
  // The rounding of x on that integer path. false (default): d_x in f32 and q_x = round(x/d_x),
  // as above. true: ggml's own (quantize_row_q8_0 on x86): q_x = round(x·(127/max|x|)) and d_x
  // rounded to f16, so x quantized has the bits an engine's ggml kernels give it and their
  // results can be compared with ours block by block (the sums of a row still run in this
  // backend's order, not ggml's). Less accurate: per value |x_i − d_x·q_x,i| <= d_x·0.5625
  // (d_x's f16 rounding adds up to 127·2^-11·d_x), and |x| past 8.3e6 overflows the f16 d_x to
  // infinity as in ggml. The f32 default stays: one rounding less.
  bool ggml_activation_rounding = false;

  // Row axpy (transposed linear, the FFN's down_t): a skipped run of at most this many rows
  // between two kept rows is read too, with coefficient 0, so the kernel walks longer spans.
  // The same result but for the sign of an exact zero; a row read this way must be finite.
  std::size_t coalesce_gap = 0;

  // Copies of weights in the layouts this backend reads faster (cpu::weight_layouts; not
  // owned, keep it alive). A dense integer GEMV of a matrix with a copy reads the copy.
  const cpu::weight_layouts* layouts = nullptr;

  // Prefetch distances, row steps, group counts and the FFN's crossover (cpu/tuning.hpp).
  cpu::tuning tuning{};

  // v[i] = act(v[i]), vectorized: what this backend's gated FFNs compute for act(g);
  // neuron_sparse_ffn calls it for the act(g) it scores, so keep-all equals dense bit for bit.
  void activate(activation act, std::span<float> v) const { cpu::detail::activate(act, v.data(), v.size()); }

  // The plans (cpu/plan.hpp): what a call will do. threads 0 sizes for any thread count.
  [[nodiscard]] cpu::gemv_plan plan(const gemv_args& a) const noexcept { return cpu::make_plan(a, options()); }
  [[nodiscard]] cpu::linear_plan plan(const linear_args& a) const noexcept { return cpu::make_plan(a, options()); }
  [[nodiscard]] cpu::axpy_plan plan(const transposed_linear_args& a) const noexcept {
    return cpu::make_plan(a, options());
  }
  [[nodiscard]] cpu::ffn_plan plan(const gated_ffn_args& a, std::size_t threads) const noexcept {
    if (threads != 0) return cpu::make_plan(a, threads, options());
    const cpu::ffn_plan one = cpu::make_plan(a, 1, options());
    const cpu::ffn_plan more = cpu::make_plan(a, 2, options());
    return one.bytes >= more.bytes ? one : more;
  }
  [[nodiscard]] cpu::token_plan plan(const token_ffn_args& a) const noexcept { return cpu::make_plan(a, options()); }
  [[nodiscard]] cpu::batched_gemv_plan plan(const batched_gemv_args& a) const noexcept {
    return cpu::make_plan(a, options());
  }
  [[nodiscard]] cpu::moe_plan plan(const moe_ffn_args& a, std::size_t threads = 1) const noexcept {
    return cpu::make_plan(a, threads, options());
  }
  [[nodiscard]] cpu::attention_plan plan(const attention_args& a) const noexcept { return cpu::make_plan(a); }

  // --- can_implement / workspace_size ----------------------------------------------------------
  [[nodiscard]] status can_implement(const gemv_args& a) const noexcept { return weights(a.w); }
  [[nodiscard]] status can_implement(const linear_args& a) const noexcept { return weights(a.w); }
  [[nodiscard]] status can_implement(const transposed_linear_args& a) const noexcept { return weights(a.wt); }
  [[nodiscard]] status can_implement(const gated_ffn_args& a) const noexcept {
    const ffn_layer& f = a.weights;
    if (const status s = layer(f); !s) return s;
    if (f.down_t.absent() && !a.neurons.all) {
      const bool blocks = !f.down.absent() && layouts != nullptr && layouts->column_blocks(f.down) != nullptr;
      if (!blocks) return status::not_handled(needs_down_t);
    }
    return status::ok();
  }
  [[nodiscard]] status can_implement(const token_ffn_args& a) const noexcept {
    if (const status s = layer(a.weights); !s) return s;
    if (!a.neurons.all && a.weights.down_t.absent()) return status::not_handled(needs_down_t);
    return status::ok();
  }
  [[nodiscard]] status can_implement(const batched_gemv_args& a) const noexcept { return weights(a.w); }
  [[nodiscard]] status can_implement(const moe_ffn_args& a) const noexcept {
    const moe_experts& x = a.experts;
    for (const stacked_view* v : {&x.gate, &x.up, x.down_t.absent() ? &x.down : &x.down_t}) {
      if (const status s = weights(v->first); !s) return s;
    }
    return a.shared.gate.absent() ? status::ok() : layer(a.shared);
  }
  [[nodiscard]] status can_implement(const attention_args& /*a*/) const noexcept { return status::ok(); }

  template <class Args>
  [[nodiscard]] std::size_t workspace_size(const Args& a) const noexcept {
    if constexpr (std::is_same_v<Args, gated_ffn_args>) {
      return plan(a, 0).bytes;
    } else if constexpr (std::is_same_v<Args, moe_ffn_args>) {
      return plan(a, 1).bytes;
    } else {
      return plan(a).bytes;
    }
  }

  // --- run (after can_implement; checks shapes in O(1), not index lists: run_checked does) ----
  status run(const gemv_args& a, std::span<std::byte> workspace, executor_type& ex) const {
    constexpr std::string_view where = "cpu::gemv";
    check_shapes(a, where);
    const cpu::gemv_plan p = plan(a);
    std::byte* const ws = cpu_workspace(workspace, p.bytes, where);
    gemv(a.w, p, p.dense ? nullptr : a.rows.indices.data(), a.rows.count(a.w.rows), a.x.data(), ws, a.y.data(), ex);
    return status::ok();
  }

  // Y[t] = W·X[t]: x quantized per token (integer path), then row tasks, each reading its rows
  // once for every token (gemm_rows / gemm_rows_q8x: each value the bits of gemv_args's).
  status run(const batched_gemv_args& a, std::span<std::byte> workspace, executor_type& ex) const {
    constexpr std::string_view where = "cpu::batched_gemv";
    if (!ex.can_sync()) return status::not_handled(needs_barrier);
    check_shapes(a, where);
    const cpu::batched_gemv_plan p = plan(a);
    if (p.tokens == 0) return status::ok();
    std::byte* const ws = cpu_workspace(workspace, p.bytes, where);
    std::byte* const pointers = ws + p.pointers_at;  // per token: x (or q, then d), y
    auto** const y = reinterpret_cast<float**>(pointers + 2 * p.tokens * sizeof(void*));
    for (std::size_t i = 0; i < p.tokens; ++i) y[i] = a.y.row(i);
    const cpu::kernel_tuning& t = tuning.kernels;
    if (p.quantize_x) {
      auto** const xq = reinterpret_cast<const std::int8_t**>(pointers);
      auto** const xd = reinterpret_cast<const float**>(pointers + p.tokens * sizeof(void*));
      ex.parallel_for(p.tokens, [&](std::size_t i) {
        const cpu::quantized_x q = cpu::quantized_at(ws + p.x_at + i * p.x_stride, a.w.cols);
        quantize(a.x.row(i), a.w.cols, q, false);
        xq[i] = q.q;
        xd[i] = q.d;
      });
      ex.sync();
      cpu::for_each_row_task(a.w.rows, ex, [&](std::size_t b, std::size_t e) {
        cpu::detail::gemm_rows_q8x(a.w, b, e, xq, xd, p.tokens, y);
      });
    } else {
      auto** const x = reinterpret_cast<const float**>(pointers);
      for (std::size_t i = 0; i < p.tokens; ++i) x[i] = a.x.row(i);
      cpu::for_each_row_task(a.w.rows, ex, [&](std::size_t b, std::size_t e) {
        if (cpu::support(a.w.type).int8_activations) {  // q8_0 / q4_0 with int8_activations off
          for (std::size_t i = 0; i < p.tokens; ++i) cpu::detail::gemv_rows(a.w, nullptr, b, e, x[i], y[i], t);
        } else {
          cpu::detail::gemm_rows(a.w, b, e, x, p.tokens, y);
        }
      });
    }
    return status::ok();
  }

  status run(const linear_args& a, std::span<std::byte> workspace, executor_type& ex) const {
    constexpr std::string_view where = "cpu::linear";
    check_shapes(a, where);
    const cpu::linear_plan p = plan(a);
    std::byte* const ws = cpu_workspace(workspace, p.bytes, where);
    const float* x = a.x.data();
    if (p.masked) {  // x with the skipped inputs set to 0
      auto* const masked = reinterpret_cast<float*>(ws + p.x_at);
      std::fill(masked, masked + a.w.cols, 0.0F);
      for (const std::uint32_t j : a.inputs.indices) masked[j] = a.x[j];
      x = masked;
    }
    gemv(a.w, p.gemv, nullptr, a.w.rows, x, ws, a.y.data(), ex);
    return status::ok();
  }

  status run(const transposed_linear_args& a, std::span<std::byte> workspace, executor_type& ex) const {
    constexpr std::string_view where = "cpu::transposed_linear";
    check_shapes(a, where);
    const cpu::axpy_plan p = plan(a);
    std::byte* const ws = cpu_workspace(workspace, p.bytes, where);
    auto* const partials = reinterpret_cast<float*>(ws + p.partials_at);
    if (p.coalesce) {
      auto* const coef = reinterpret_cast<float*>(ws + p.coef_at);
      auto* const rows = reinterpret_cast<std::uint32_t*>(ws + p.rows_at);
      const std::size_t count = cpu::coalesced_rows(a.inputs.indices, coalesce_gap, rows);
      for (std::size_t k = 0; k < count; ++k) coef[rows[k]] = 0.0F;
      for (const std::uint32_t j : a.inputs.indices) coef[j] = a.x[j];
      cpu::axpy_all_columns(a.wt, rows, count, coef, a.y.data(), partials, ex, tuning.kernels);
      return status::ok();
    }
    const std::uint32_t* rows = a.inputs.all ? nullptr : a.inputs.indices.data();
    cpu::axpy_all_columns(a.wt, rows, a.inputs.count(a.wt.rows), a.x.data(), a.y.data(), partials, ex, tuning.kernels);
    return status::ok();
  }

  // y = W_down (act(W_gate x) ⊙ W_up x) over the kept neurons, in phases (ex.sync() between):
  //   0  x quantized (int8 path); coalescing: the filled row list, h = 0
  //   1  row tasks: u = W_up[rows]·x, g = act(W_gate[rows]·x) unless gate_act is given,
  //      h_j = act(g_j)·u_j; from the crossover on every row is read and dropped neurons get 0
  //   2  the down projection (plan.down): the row axpy over down_t, or y = W_down·h (h quantized
  //      first for an interleaved W_down)
  // Keep-all equals dense bit for bit: both run the same row kernels in the same order.
  status run(const gated_ffn_args& a, std::span<std::byte> workspace, executor_type& ex) const {
    constexpr std::string_view where = "cpu::gated_ffn";
    if (!ex.can_sync()) return status::not_handled(needs_barrier);
    check_shapes(a, where);
    check_tuning(where);
    const ffn_layer& f = a.weights;
    const cpu::ffn_plan p = plan(a, ex.concurrency());
    if (p.rows == cpu::phase1_rows::kept_rows && p.down == cpu::down_path::gemv) {
      return status::not_handled(needs_down_t);
    }
    std::byte* const ws = cpu_workspace(workspace, p.bytes, where);
    auto* const u = reinterpret_cast<float*>(ws + p.u_at);
    auto* const g = reinterpret_cast<float*>(ws + p.g_at);
    auto* const h = reinterpret_cast<float*>(ws + p.h_at);
    auto* const filled = reinterpret_cast<std::uint32_t*>(ws + p.filled_at);  // count, then rows
    const cpu::quantized_x qx = cpu::quantized_at(ws + p.x_at, p.d_model);
    const std::uint32_t* const kept = a.neurons.indices.data();
    const std::uint32_t* const rows = p.rows == cpu::phase1_rows::kept_rows ? kept : nullptr;
    const cpu::kernel_tuning& t = tuning.kernels;

    ex.parallel_for(1, [&](std::size_t) {
      if (p.quantize_x) quantize(a.x.data(), p.d_model, qx, p.up_interleaved || p.gate_interleaved);
      if (p.down == cpu::down_path::axpy_coalesced) {
        std::fill(h, h + p.d_ff, 0.0F);  // the filled-in rows add 0
        filled[0] = static_cast<std::uint32_t>(cpu::coalesced_rows(a.neurons.indices, coalesce_gap, filled + 1));
      }
    });
    ex.sync();
    const auto phase1 = [&](const weight_view& w, const cpu::interleaved_view* copy, bool int8, std::size_t b,
                            std::size_t e, float* out) {
      if (copy != nullptr) {
        cpu::detail::gemv_rows_interleaved(*copy, b, e, qx.q, qx.d, qx.s, out, t);
      } else if (int8) {
        cpu::detail::gemv_rows_q8x(w, rows, b, e, qx.q, qx.d, out, t);
      } else {
        cpu::detail::gemv_rows(w, rows, b, e, a.x.data(), out, t);
      }
    };
    cpu::for_each_row_task(p.phase1, ex, [&](std::size_t b, std::size_t e) {
      phase1(f.up, p.up_interleaved, p.up_int8, b, e, u);
      if (!p.gate_given) {
        phase1(f.gate, p.gate_interleaved, p.gate_int8, b, e, g);
        cpu::detail::activate(f.act, g + b, e - b);
      }
      for (std::size_t k = b; k < e; ++k) {
        const std::size_t j = rows != nullptr ? rows[k] : k;
        h[j] = (p.gate_given ? a.gate_act[j] : g[k]) * u[k];
      }
      if (p.rows == cpu::phase1_rows::every_row_then_drop) {  // dropped neurons (not in kept) add 0
        const std::uint32_t* next = std::lower_bound(kept, kept + p.kept, static_cast<std::uint32_t>(b));
        for (std::size_t j = b; j < e; ++j) {
          if (next != kept + p.kept && *next == j) {
            ++next;
          } else {
            h[j] = 0.0F;
          }
        }
      }
    });
    ex.sync();
    auto* const partials = reinterpret_cast<float*>(ws + p.partials_at);
    switch (p.down) {
      case cpu::down_path::column_blocks: {
        // One contiguous range of rows (whole groups of 32) per thread.
        const cpu::column_blocks_view& w = *p.down_columns_copy;
        const std::size_t groups = p.d_model / 32;
        const std::size_t parts = std::min(ex.concurrency(), groups);
        const std::uint32_t* list = a.neurons.all ? nullptr : kept;
        ex.parallel_for(parts, [&](std::size_t k) {
          const std::size_t b = groups * k / parts * 32;
          const std::size_t e = groups * (k + 1) / parts * 32;
          cpu::detail::column_blocks_down(w, list, p.kept, h, b, e, a.y.data());
        });
        break;
      }
      case cpu::down_path::interleaved_gemv: {
        const cpu::quantized_x qh = cpu::quantized_at(ws + p.h_quantized_at, p.d_ff);
        ex.parallel_for(1, [&](std::size_t) { quantize(h, p.d_ff, qh, true); });
        ex.sync();
        cpu::for_each_row_task(p.d_model, ex, [&](std::size_t b, std::size_t e) {
          cpu::detail::gemv_rows_interleaved(*p.down_interleaved, b, e, qh.q, qh.d, qh.s, a.y.data(), t);
        });
        break;
      }
      case cpu::down_path::axpy_coalesced:
        cpu::axpy_all_columns(f.down_t, filled + 1, filled[0], h, a.y.data(), partials, ex, t);
        break;
      case cpu::down_path::axpy:
        cpu::axpy_all_columns(f.down_t, rows, p.phase1, h, a.y.data(), partials, ex, t);
        break;
      case cpu::down_path::gemv:
        cpu::for_each_row_task(p.d_model, ex, [&](std::size_t b, std::size_t e) {
          cpu::detail::gemv_rows(f.down, nullptr, b, e, h, a.y.data(), t);
        });
        break;
    }
    return status::ok();
  }

  // residual[t] += FFN(input[t]) for the kept tokens t (token-sparse prefill; over a neuron
  // union for a decode batch or a verify pass). The weights are read once per call, not per
  // token: phase 1 runs the multi-token GEMVs over up and gate (the union's rows, or every row;
  // the gate skipped when gate_act is given) in 64-row tasks, each weight row loaded once for
  // several tokens; phase 2 the multi-token row axpy over down_t in tiles of 64 output columns
  // (or W_down in groups of 8 rows for every neuron; a neuron union needs down_t). A kept token's update equals the
  // decode gated FFN of that token over the same neurons (the union gathered) bit for bit, whatever else is kept and on
  // any thread count.
  status run(const token_ffn_args& a, std::span<std::byte> workspace, executor_type& ex) const {
    constexpr std::string_view where = "cpu::token_ffn";
    if (!ex.can_sync()) return status::not_handled(needs_barrier);
    check_shapes(a, where);
    const ffn_layer& f = a.weights;
    const cpu::token_plan p = plan(a);
    if (p.tokens == 0) return status::ok();
    if (!a.neurons.all && f.down_t.absent()) return status::not_handled(needs_down_t);
    std::byte* const ws = cpu_workspace(workspace, p.bytes, where);
    const std::size_t d_ff = f.d_ff();
    const std::size_t d_model = f.d_model();
    auto* const h = reinterpret_cast<float*>(ws + p.h_at);
    auto* const y = reinterpret_cast<float*>(ws + p.y_at);
    const auto token = [&](std::size_t i) { return a.tokens.all ? i : a.tokens.indices[i]; };
    const auto quantized = [&](std::size_t i) { return cpu::quantized_at(ws + p.x_at + i * p.x_stride, d_model); };
    const cpu::kernel_tuning& t = tuning.kernels;

    if (p.quantize_x) {
      ex.parallel_for(p.tokens, [&](std::size_t i) { quantize(a.input.row(token(i)), d_model, quantized(i), false); });
      ex.sync();
    }
    // Per token: its quantized x (or x), its u and g rows, its h and y (the kernels' pointer arrays).
    const std::uint32_t* const list = a.neurons.all ? nullptr : a.neurons.indices.data();
    std::byte* const pointers = ws + p.pointers_at;
    auto** const xq = reinterpret_cast<const std::int8_t**>(pointers);
    auto** const xd = reinterpret_cast<const float**>(pointers + p.tokens * sizeof(void*));
    auto** const xf = reinterpret_cast<const float**>(pointers + 2 * p.tokens * sizeof(void*));
    auto** const ur = reinterpret_cast<float**>(pointers + 3 * p.tokens * sizeof(void*));
    auto** const gr = reinterpret_cast<float**>(pointers + 4 * p.tokens * sizeof(void*));
    auto* const u = reinterpret_cast<float*>(ws + p.u_at);
    auto* const g = reinterpret_cast<float*>(ws + p.g_at);
    for (std::size_t i = 0; i < p.tokens; ++i) {
      const cpu::quantized_x q = quantized(i);
      xq[i] = q.q;
      xd[i] = q.d;
      xf[i] = a.input.row(token(i));
      ur[i] = u + i * p.neurons;
      gr[i] = g + i * p.neurons;
    }
    // Rows [b, e) of w (positions of the neuron list) for every token: out[i][k] for k in [b, e),
    // each weight row read once for several tokens (each value the token's GEMV bits).
    const auto rows_of = [&](const weight_view& w, bool int8, std::size_t b, std::size_t e, float* const* out) {
      if (int8) {
        cpu::detail::gemm_rows_q8x(w, b, e, xq, xd, p.tokens, out, list);
      } else if (info(w.type).block_values == 1) {
        cpu::detail::gemm_rows(w, b, e, xf, p.tokens, out, list);
      } else {  // q8_0 / q4_0 on f32 x: one token at a time
        for (std::size_t i = 0; i < p.tokens; ++i) cpu::detail::gemv_rows(w, list, b, e, xf[i], out[i], t);
      }
    };
    cpu::for_each_row_task(p.neurons, ex, [&](std::size_t begin, std::size_t end) {
      rows_of(f.up, p.up_int8, begin, end, ur);
      if (!p.gate_given) rows_of(f.gate, p.gate_int8, begin, end, gr);
      for (std::size_t i = 0; i < p.tokens; ++i) {
        if (p.gate_given) {
          const float* ga = a.gate_act.row(token(i));
          for (std::size_t k = begin; k < end; ++k) gr[i][k] = ga[list != nullptr ? list[k] : k];
        } else {
          cpu::detail::activate(f.act, gr[i] + begin, end - begin);
        }
        for (std::size_t k = begin; k < end; ++k) h[i * d_ff + (list != nullptr ? list[k] : k)] = gr[i][k] * ur[i][k];
      }
    });
    ex.sync();
    if (!f.down_t.absent()) {  // y_i = Σ_j h_i[j]·down_t[j, :], tile by tile: the decode FFN's chunked order
      const cpu::row_chunks ch = cpu::cut_rows(d_ff, list, p.neurons);
      const std::size_t tiles = (d_model + cpu::axpy_column_quantum - 1) / cpu::axpy_column_quantum;
      for (std::size_t i = 0; i < p.tokens; ++i) {  // the pointer slots of x and u, free now: h and y
        xf[i] = h + i * d_ff;
        ur[i] = y + i * d_model;
      }
      if (p.by_chunks) {  // few tokens: each chunk's rows streamed once, every column
        auto* const partials = reinterpret_cast<float*>(ws + p.partials_at);
        auto** const out = reinterpret_cast<float**>(ws + p.chunk_pointers_at);
        for (std::size_t c = 0; c < ch.count; ++c) {
          for (std::size_t i = 0; i < p.tokens; ++i) out[c * p.tokens + i] = partials + (c * p.tokens + i) * d_model;
        }
        ex.parallel_for(ch.count, [&](std::size_t c) {
          cpu::detail::axpy_tokens(f.down_t, ch.first + c, 1, xf, p.tokens, 0, d_model, out + c * p.tokens, list);
        });
        ex.sync();
        ex.parallel_for(p.tokens, [&](std::size_t i) {  // y = s_0 + s_1 + ...: the chunks in order
          for (std::size_t col = 0; col < d_model; ++col) {
            float sum = out[i][col];
            for (std::size_t c = 1; c < ch.count; ++c) sum += out[c * p.tokens + i][col];
            ur[i][col] = sum;
          }
        });
      } else {
        ex.parallel_for(tiles, [&](std::size_t tile) {
          const std::size_t c0 = tile * cpu::axpy_column_quantum;
          const std::size_t c1 = std::min(c0 + cpu::axpy_column_quantum, d_model);
          cpu::detail::axpy_tokens(f.down_t, ch.first, ch.count, xf, p.tokens, c0, c1, ur, list);
        });
      }
    } else {  // y_i = W_down·h_i, groups of rows of W_down
      constexpr std::size_t group = 8;
      cpu::for_each_row_task(d_model, ex, [&](std::size_t begin, std::size_t end) {
        for (std::size_t r = begin; r < end; r += group) {
          for (std::size_t i = 0; i < p.tokens; ++i) {
            cpu::detail::gemv_rows(f.down, nullptr, r, std::min(r + group, end), h + i * d_ff, y + i * d_model, t);
          }
        }
      });
    }
    ex.sync();
    ex.parallel_for(p.tokens, [&](std::size_t i) {
      float* const res = a.residual.row(token(i));
      for (std::size_t c = 0; c < d_model; ++c) res[c] += y[i * d_model + c];
    });
    return status::ok();
  }

  // The MoE layer in phases (cpu/moe.hpp): experts' hidden rows, their down projections, the combine.
  status run(const moe_ffn_args& a, std::span<std::byte> workspace, executor_type& ex) const {
    constexpr std::string_view where = "cpu::moe_ffn";
    if (!ex.can_sync()) return status::not_handled(needs_barrier);
    check_shapes(a, where);
    const cpu::moe_plan p = plan(a, ex.concurrency());
    if (p.tokens == 0) return status::ok();
    cpu::moe_run(a, p, cpu_workspace(workspace, p.bytes, where), tuning.kernels, ggml_activation_rounding)(ex);
    return status::ok();
  }

  // Decode attention in phases (cpu/attention.hpp): chunks of positions per KV head, then per head.
  status run(const attention_args& a, std::span<std::byte> workspace, executor_type& ex) const {
    constexpr std::string_view where = "cpu::attention";
    if (!ex.can_sync()) return status::not_handled(needs_barrier);
    check_shapes(a, where);
    const cpu::attention_plan p = plan(a);
    cpu::attention_run(a, p, cpu_workspace(workspace, p.bytes, where))(ex);
    return status::ok();
  }

 private:
  static constexpr std::string_view needs_down_t =
      "cpu: the neuron-sparse FFN reads one row of W_down transposed per kept neuron: pass weights.down_t "
      "(cpu::transpose(down) once at load time), or for q8_0 / q4_0 give W_down a column-block copy "
      "(layouts->add_column_blocks(down): lossless)";
  static constexpr std::string_view needs_barrier =
      "cpu: this operation has phases; under executor::split pass the engine's barrier "
      "(cpu::executor::split(s, cpu::barrier{wait, context}))";

  [[nodiscard]] cpu::plan_options options() const noexcept {
    return {int8_activations, coalesce_gap, layouts, &tuning};
  }

  [[nodiscard]] static status weights(const weight_view& w) noexcept {
    if (cpu::support(w.type).f32_activations) return status::ok();
    return status::not_handled("cpu: no kernels for this weight dtype (cpu/dtypes.hpp lists the dtypes)");
  }
  [[nodiscard]] static status layer(const ffn_layer& f) noexcept {
    if (const status s = weights(f.gate); !s) return s;
    if (const status s = weights(f.up); !s) return s;
    if (!f.down_t.absent()) return weights(f.down_t);
    if (!f.down.absent()) return weights(f.down);
    return status::ok();
  }

  void check_tuning(std::string_view where) const {
    if (tuning.read_all_from) {
      ::actsparse::detail::require(*tuning.read_all_from > 0.0 && *tuning.read_all_from <= 1.0, where,
                                   "cpu_backend::tuning.read_all_from", *tuning.read_all_from,
                                   "a fraction of the d_ff neurons in (0, 1], or unset for the crossover table");
    }
  }

  // x[0, n) quantized into q (and the block sums the interleaved GEMV takes).
  void quantize(const float* x, std::size_t n, const cpu::quantized_x& q, bool sums) const {
    cpu::detail::quantize_q8_0_x(x, n, q.q, q.d, ggml_activation_rounding);
    if (sums) cpu::block_sums(q.q, n, q.s);
  }

  // y[k] = W[row_k, :]·x for k < count on the executor's row tasks, the path of plan p.
  void gemv(const weight_view& w, const cpu::gemv_plan& p, const std::uint32_t* rows, std::size_t count, const float* x,
            std::byte* ws, float* y, executor_type& ex) const {
    const cpu::kernel_tuning& t = tuning.kernels;
    if (!p.quantize_x) {
      cpu::for_each_row_task(count, ex,
                             [&](std::size_t b, std::size_t e) { cpu::detail::gemv_rows(w, rows, b, e, x, y, t); });
      return;
    }
    const cpu::quantized_x q = cpu::quantized_at(ws + p.x_at, w.cols);
    quantize(x, w.cols, q, p.interleaved != nullptr);  // on every calling thread: its own workspace
    cpu::for_each_row_task(count, ex, [&](std::size_t b, std::size_t e) {
      if (p.interleaved != nullptr) {
        cpu::detail::gemv_rows_interleaved(*p.interleaved, b, e, q.q, q.d, q.s, y, t);
      } else {
        cpu::detail::gemv_rows_q8x(w, rows, b, e, q.q, q.d, y, t);
      }
    });
  }

  static std::byte* cpu_workspace(std::span<std::byte> workspace, std::size_t bytes, std::string_view where) {
    return detail::checked_workspace(workspace, bytes, cpu::workspace_alignment, where);
  }
};

ACTSPARSE_REQUIRE_BACKEND_FOR(cpu_backend, gemv_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(cpu_backend, linear_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(cpu_backend, transposed_linear_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(cpu_backend, gated_ffn_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(cpu_backend, token_ffn_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(cpu_backend, batched_gemv_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(cpu_backend, moe_ffn_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(cpu_backend, attention_args);

}  // namespace actsparse
