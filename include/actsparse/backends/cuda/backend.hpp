#pragma once
// The CUDA backend: the operations of core/op_args.hpp on generated kernels (generator.hpp),
// compiled with NVRTC and launched through the driver table (driver.hpp) on a cuda::context
// (context.hpp), the backend's executor_type.
//
//   gemv_args               dense: gemv; a row subset: gather_gemv
//   transposed_linear_args  row_axpy over Wt (coefficients compacted with gather_values), split
//                           over the kept rows (row_axpy_split + reduce_partials) when long
//   linear_args             gemv over x with the dropped inputs zeroed (reads all of W: pass
//                           Wᵀ as transposed_linear_args for the input-sparse saving)
//   gated_ffn_args          phase 1 gated_gather (the gate computed, or gate_act given; dense
//                           when neurons is everything), phase 2 row_axpy(_split) over down_t,
//                           or, dense with only W_down, a gemv over W_down
//   token_ffn_args          token_gather → batched_gemv gate and up → gated_hidden →
//                           batched_gemv W_down (or a row axpy per token over down_t) →
//                           token_scatter_add into the residual
//   device_select_args      selection on the device (core/select_args.hpp): threshold over
//                           the gate it computes (gate_select + compaction), top_k or
//                           cumulative_mass over given scores; enqueued, not synchronized
//
// Memory: every view and span in the arguments must be memory the device reads (cuda::buffer:
// device or managed, or host memory where the device has pageable memory access). Index lists
// (subset::indices) are also read on the host (run() reads the last index, run_checked every
// one: core/check_args.hpp), so they must be managed (or host-visible) memory. The workspace
// must be device-accessible and 4-byte aligned, workspace_size(args) bytes. run()
// synchronizes the context's stream before it returns (all but device_select_args, whose
// count stays on the device): outputs in managed memory can be read on the host right away,
// which is what the ops layer's host-side scorers and selectors do. run()'s precondition is
// that can_implement(args) returned ok (actsparse::run drives the protocol); it checks the
// shapes in O(1) (check_shapes).
//
// Every kernel has a fixed work partition and fixed reduction orders: the same inputs give the
// same bits on every run, and a subset listing every index gives the dense result bit for bit.

#include <actsparse/backends/cuda/context.hpp>
#include <actsparse/backends/cuda/driver.hpp>
#include <actsparse/backends/cuda/generator.hpp>
#include <actsparse/backends/gpu/device_math.hpp>
#include <actsparse/core/activation.hpp>
#include <actsparse/core/check_args.hpp>
#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/select_args.hpp>
#include <actsparse/core/views.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace actsparse {

namespace cuda {

// The memory a cuda_backend reads and writes: device or managed memory (cuda::buffer), or host
// memory where the device has pageable memory access.
struct device_memory {
  static constexpr std::string_view name = "cuda device";
};

namespace detail {

// Carves 4-byte aligned pieces off the front of the workspace.
class carve {
 public:
  carve(std::span<std::byte> workspace, std::size_t need, std::string_view where) : at_(workspace.data()) {
    if (need == 0) return;
    if (workspace.size() < need) {
      ::actsparse::detail::fail(where, "workspace.size()", workspace.size(),
                                "at least " + std::to_string(need) + " bytes (workspace_size(args)) of device memory");
    }
    if (reinterpret_cast<std::uintptr_t>(workspace.data()) % alignof(float) != 0) {
      ::actsparse::detail::fail_described(where, "workspace.data()", "an address that is not a multiple of 4",
                                          "a workspace aligned to 4 bytes (it holds floats and u32 counts)");
    }
  }
  template <class T>
  T* take(std::size_t n) noexcept {
    T* p = reinterpret_cast<T*>(at_);
    at_ += n * sizeof(T);
    return p;
  }

 private:
  std::byte* at_;
};

}  // namespace detail
}  // namespace cuda

struct cuda_backend {
  static constexpr std::string_view name = "cuda";
  using memory_space = cuda::device_memory;
  using executor_type = cuda::context;

  // Kernel shapes (the generator's kernel_config fields). Defaults for a large GPU; the
  // fake-driver tests use small ones.
  unsigned threads_per_block = 256;    // warp-per-row kernels: gemv, gather_gemv, gated_gather, batched_gemv, gate
  unsigned rows_per_warp = 2;          // rows sharing each load of x
  unsigned axpy_threads = 128;         // row_axpy(_split): one thread per storage element (1 or 32 columns)
  unsigned tokens_per_pass = 4;        // batched_gemv: tokens sharing each weight load (1, 2, 4, 8)
  unsigned elementwise_threads = 256;  // gather_values, gated_hidden, reduce_partials, token ops
  unsigned select_threads = 1024;      // device_select_args' top_k and cumulative_mass (one block)
  // Row axpy split over the kept rows: rows_per_split kept rows per partial sum; 0 chooses it
  // so that about parallel_blocks thread blocks run (4 per multiprocessor; for_device counts
  // them), with at least min_rows_per_split rows each. One split runs row_axpy alone.
  unsigned rows_per_split = 0;
  unsigned parallel_blocks = 4 * 132;
  unsigned min_rows_per_split = 64;

  // Defaults with parallel_blocks from the device's multiprocessor count.
  [[nodiscard]] static cuda_backend for_device(const cuda::context& ctx) {
    cuda_backend b;
    b.parallel_blocks = 4 * static_cast<unsigned>(std::max(ctx.info().multiprocessors, 1));
    return b;
  }

  // --- y = W[rows, :] x ---------------------------------------------------------------------
  [[nodiscard]] status can_implement(const gemv_args& a) const noexcept { return supported(a.w.type); }
  [[nodiscard]] std::size_t workspace_size(const gemv_args& /*a*/) const noexcept { return 0; }
  status run(const gemv_args& a, std::span<std::byte> /*workspace*/, executor_type& ctx) const {
    check_shapes(a, "cuda::gemv");
    ctx.make_current();
    const std::size_t count = a.rows.count(a.w.rows);
    if (a.rows.all) {
      gemv(ctx, a.w, a.x.data(), a.y.data());
    } else {
      const gpu::kernel_config c = warp_config(gpu::kernel_op::gather_gemv, a.w.type);
      ctx.launch(ctx.functions(c)[0], cuda::grid_blocks(c, count), 1, c.threads_per_block, ptr(a.w.data), stride(a.w),
                 ptr(a.x.data()), u32(a.w.cols), ptr(a.rows.indices.data()), u32(count), ptr(a.y.data()));
    }
    ctx.synchronize();
    return status::ok();
  }

  // --- y = Σ_{j ∈ inputs} x_j · Wt[j, :] ------------------------------------------------------
  [[nodiscard]] status can_implement(const transposed_linear_args& a) const noexcept { return supported(a.wt.type); }
  // Compacted coefficients (sparse), then the partial sums (split).
  [[nodiscard]] std::size_t workspace_size(const transposed_linear_args& a) const noexcept {
    const std::size_t count = a.inputs.count(a.wt.rows);
    return (a.inputs.all ? 0 : count) * sizeof(float) + axpy_workspace(a.wt, count);
  }
  status run(const transposed_linear_args& a, std::span<std::byte> workspace, executor_type& ctx) const {
    constexpr std::string_view where = "cuda::transposed_linear";
    check_shapes(a, where);
    cuda::detail::carve ws(workspace, workspace_size(a), where);
    ctx.make_current();
    const std::size_t count = a.inputs.count(a.wt.rows);
    const std::uint32_t* idx = a.inputs.all ? nullptr : a.inputs.indices.data();
    const float* coef = a.x.data();
    if (idx != nullptr) {
      float* compact = ws.take<float>(count);
      gather_values(ctx, a.x.data(), idx, count, compact);
      coef = compact;
    }
    row_axpy(ctx, a.wt, idx, coef, count, a.y.data(), ws);
    ctx.synchronize();
    return status::ok();
  }

  // --- y = Σ_{j ∈ inputs} W[:, j] x_j (W [out × in]) -----------------------------------------
  [[nodiscard]] status can_implement(const linear_args& a) const noexcept { return supported(a.w.type); }
  // Sparse: the kept inputs compacted, and x with the dropped inputs zeroed.
  [[nodiscard]] std::size_t workspace_size(const linear_args& a) const noexcept {
    return a.inputs.all ? 0 : (a.inputs.indices.size() + a.w.cols) * sizeof(float);
  }
  status run(const linear_args& a, std::span<std::byte> workspace, executor_type& ctx) const {
    constexpr std::string_view where = "cuda::linear";
    check_shapes(a, where);
    cuda::detail::carve ws(workspace, workspace_size(a), where);
    ctx.make_current();
    const float* x = a.x.data();
    if (!a.inputs.all) {
      const std::size_t count = a.inputs.indices.size();
      float* kept = ws.take<float>(count);
      float* masked = ws.take<float>(a.w.cols);
      gather_values(ctx, a.x.data(), a.inputs.indices.data(), count, kept);
      ctx.fill_u32(masked, 0, a.w.cols);
      // masked[idx[k]] += kept[k]: the token scatter-add with one value per "token".
      const gpu::kernel_config c = elementwise(gpu::kernel_op::token_scatter_add);
      ctx.launch(ctx.functions(c)[0], cuda::grid_blocks(c, count), 1, c.threads_per_block, ptr(kept), u64(1),
                 ptr(a.inputs.indices.data()), u32(count), u32(1), ptr(masked), u64(1));
      x = masked;
    }
    gemv(ctx, a.w, x, a.y.data());
    ctx.synchronize();
    return status::ok();
  }

  // --- y = W_down (act(W_gate x) ⊙ W_up x) over the kept neurons ----------------------------
  [[nodiscard]] status can_implement(const gated_ffn_args& a) const noexcept {
    const ffn_layer& w = a.weights;
    if (const status s = ffn_status(w, !a.gate_act.empty()); !s) return s;
    if (a.gate_act.empty() && w.gate.type != w.up.type) {
      return status::not_handled("cuda: gate and up of different dtypes (the fused gate + up kernel decodes one)");
    }
    if (w.down_t.absent() && !a.neurons.all) {
      return status::not_handled(
          "cuda: the neuron-sparse FFN reads one row of W_down transposed per kept neuron: pass down_t");
    }
    return status::ok();
  }
  // h of the kept neurons, then the row axpy's partial sums (split) over down_t.
  [[nodiscard]] std::size_t workspace_size(const gated_ffn_args& a) const noexcept {
    const std::size_t count = a.neurons.count(a.weights.d_ff());
    return count * sizeof(float) + (a.weights.down_t.absent() ? 0 : axpy_workspace(a.weights.down_t, count));
  }
  status run(const gated_ffn_args& a, std::span<std::byte> workspace, executor_type& ctx) const {
    constexpr std::string_view where = "cuda::gated_ffn";
    check_shapes(a, where);
    const ffn_layer& w = a.weights;
    cuda::detail::carve ws(workspace, workspace_size(a), where);
    ctx.make_current();
    const std::size_t count = a.neurons.count(w.d_ff());
    const std::uint32_t* idx = a.neurons.all ? nullptr : a.neurons.indices.data();
    float* h = ws.take<float>(count);
    gated_gather(ctx, w.act, w.gate, w.up, a.x.data(), idx, count, a.gate_act.empty() ? nullptr : a.gate_act.data(), h);
    if (!w.down_t.absent()) {
      row_axpy(ctx, w.down_t, idx, h, count, a.y.data(), ws);
    } else {  // dense, W_down only
      gemv(ctx, w.down, h, a.y.data());
    }
    ctx.synchronize();
    return status::ok();
  }

  // --- residual[t] += FFN(input[t]) for the kept tokens t ------------------------------------
  // Every neuron, the gate computed here: a neuron union (decode batches) is not built for CUDA.
  static constexpr std::string_view no_union =
      "cuda: the token FFN over a neuron union or with a given gate (a decode batch) is not built; "
      "the CPU and reference backends run it";
  [[nodiscard]] status can_implement(const token_ffn_args& a) const noexcept {
    if (const status s = ffn_status(a.weights, false); !s) return s;
    if (!a.neurons.all || a.gate_act.data != nullptr) return status::not_handled(no_union);
    if (a.input.row_stride % sizeof(float) != 0 || a.residual.row_stride % sizeof(float) != 0) {
      return status::not_handled("cuda: token rows must be a whole number of floats apart");
    }
    return status::ok();
  }
  // For k kept tokens: the gathered inputs X (k × d_model, when a subset), G, U, H (k × d_ff
  // each), Y (k × d_model), the token list (k, when every token), then the row axpy's partial
  // sums when only down_t is given.
  [[nodiscard]] std::size_t workspace_size(const token_ffn_args& a) const noexcept {
    const std::size_t k = a.tokens.count(a.input.rows);
    const std::size_t d_model = a.weights.d_model();
    const std::size_t d_ff = a.weights.d_ff();
    std::size_t floats = (a.tokens.all ? 0 : k * d_model) + 3 * k * d_ff + k * d_model + (a.tokens.all ? k : 0);
    const std::size_t partials = a.weights.down.absent() && k > 0 ? axpy_workspace(a.weights.down_t, d_ff) : 0;
    return floats * sizeof(float) + partials;
  }
  status run(const token_ffn_args& a, std::span<std::byte> workspace, executor_type& ctx) const {
    constexpr std::string_view where = "cuda::token_ffn";
    check_shapes(a, where);
    if (!a.neurons.all || a.gate_act.data != nullptr) return status::not_handled(no_union);
    const std::size_t k = a.tokens.count(a.input.rows);
    if (k == 0) return status::ok();
    cuda::detail::carve ws(workspace, workspace_size(a), where);
    ctx.make_current();
    const ffn_layer& w = a.weights;
    const std::size_t d_model = w.d_model();
    const std::size_t d_ff = w.d_ff();
    const std::uint64_t input_stride = a.input.row_stride / sizeof(float);
    const float* x = a.input.data;
    std::uint64_t x_stride = input_stride;
    const std::uint32_t* tokens = a.tokens.all ? nullptr : a.tokens.indices.data();
    if (tokens != nullptr) {
      float* gathered = ws.take<float>(k * d_model);
      const gpu::kernel_config c = elementwise(gpu::kernel_op::token_gather);
      ctx.launch(ctx.functions(c)[0], cuda::grid_blocks(c, k), 1, c.threads_per_block, ptr(a.input.data), input_stride,
                 ptr(tokens), u32(k), u32(d_model), ptr(gathered), u64(d_model));
      x = gathered;
      x_stride = d_model;
    }
    float* g = ws.take<float>(k * d_ff);
    float* u = ws.take<float>(k * d_ff);
    float* h = ws.take<float>(k * d_ff);
    float* y = ws.take<float>(k * d_model);
    if (tokens == nullptr) {  // the scatter-add reads a token list: 0 .. k-1
      auto* all = ws.take<std::uint32_t>(k);
      std::vector<std::uint32_t> identity(k);
      for (std::size_t i = 0; i < k; ++i) identity[i] = static_cast<std::uint32_t>(i);
      ctx.copy_to_device(all, identity.data(), k * sizeof(std::uint32_t));
      ctx.synchronize();  // the host vector dies at the end of this scope
      tokens = all;
    }
    batched_gemv(ctx, w.gate, x, x_stride, k, g, d_ff);
    batched_gemv(ctx, w.up, x, x_stride, k, u, d_ff);
    {
      const gpu::kernel_config c = elementwise(gpu::kernel_op::gated_hidden, w.act);
      ctx.launch(ctx.functions(c)[0], cuda::grid_blocks(c, k * d_ff), 1, c.threads_per_block, ptr(g), ptr(u),
                 u32(k * d_ff), ptr(h));
    }
    if (!w.down.absent()) {
      batched_gemv(ctx, w.down, h, d_ff, k, y, d_model);
    } else {  // down_t only: one row axpy per token, over every neuron
      for (std::size_t i = 0; i < k; ++i) {
        cuda::detail::carve partials = ws;  // the same partials for every token (the stream orders them)
        row_axpy(ctx, w.down_t, nullptr, h + i * d_ff, d_ff, y + i * d_model, partials);
      }
    }
    {
      const gpu::kernel_config c = elementwise(gpu::kernel_op::token_scatter_add);
      ctx.launch(ctx.functions(c)[0], cuda::grid_blocks(c, k), 1, c.threads_per_block, ptr(y), u64(d_model),
                 ptr(tokens), u32(k), u32(d_model), ptr(a.residual.data), u64(a.residual.row_stride / sizeof(float)));
    }
    ctx.synchronize();
    return status::ok();
  }

  // --- Selection on the device (core/select_args.hpp) ----------------------------------------
  // For engines that keep everything on the GPU: enqueued on the context's stream, returns
  // without synchronizing; every span is device-accessible and *count is written on the device.
  // Handled: threshold over the scores this computes (h = act(gate·x), kept |h| > t: the gate
  // kernel and the compaction), top_k and cumulative_mass over given scores. Exactness against
  // the host selectors: docs/POLICIES.md, "Device selection".
  [[nodiscard]] status can_implement(const device_select_args& a) const noexcept {
    if (!cuda::driver().available) return status::not_handled(cuda::driver().reason);
    if (a.rule.what == device_rule::kind::threshold) {
      if (!a.computes_scores()) {
        return status::not_handled(
            "cuda: a threshold over given scores (the device threshold is fused with the gate GEMV: pass gate)");
      }
      if (const status s = supported(a.gate.gate.type); !s) return s;
      if (!gpu::supports(a.gate.act)) return status::not_handled("cuda: activation not supported");
      return status::ok();
    }
    if (a.computes_scores()) {
      return status::not_handled("cuda: top_k and cumulative_mass over given scores only (pass scores, not gate)");
    }
    return status::ok();
  }
  // The gate kernel's per-block counts (threshold); nothing for the others.
  [[nodiscard]] std::size_t workspace_size(const device_select_args& a) const noexcept {
    if (a.rule.what != device_rule::kind::threshold || !gpu::supports(a.gate.gate.type)) return 0;
    const gpu::kernel_config c = warp_config(gpu::kernel_op::gate_select, a.gate.gate.type);
    return (a.gate.gate.rows + block_rows(c) - 1) / block_rows(c) * sizeof(std::uint32_t);
  }
  status run(const device_select_args& a, std::span<std::byte> workspace, executor_type& ctx) const {
    constexpr std::string_view where = "cuda::device_select";
    check_shapes(a, where);
    cuda::detail::carve ws(workspace, workspace_size(a), where);
    ctx.make_current();
    const std::size_t n = a.n();
    switch (a.rule.what) {
      case device_rule::kind::threshold: {
        const weight_view& gate = a.gate.gate;
        if (n == 0) {
          ctx.fill_u32(a.count.data(), 0, 1);
          break;
        }
        const gpu::kernel_config c = warp_config(gpu::kernel_op::gate_select, gate.type, a.gate.act);
        const std::size_t grid = cuda::grid_blocks(c, n);
        auto* block_counts = ws.take<std::uint32_t>(grid);
        const auto& f = ctx.functions(c);
        ctx.launch(f[0], grid, 1, c.threads_per_block, ptr(gate.data), stride(gate), ptr(a.gate.x.data()), u32(n),
                   u32(gate.cols), a.rule.t, ptr(a.gate.h.data()), ptr(block_counts));
        ctx.launch(f[1], grid, 1, c.threads_per_block, ptr(a.gate.h.data()), u32(n), cuda::rows_per_block(c), a.rule.t,
                   ptr(block_counts), ptr(a.indices.data()), ptr(a.count.data()));
        break;
      }
      case device_rule::kind::top_k: {
        const gpu::kernel_config c = single_block(gpu::kernel_op::top_k);
        ctx.launch(ctx.functions(c)[0], 1, 1, c.threads_per_block, ptr(a.scores.data()), u32(n), u32(a.rule.k),
                   ptr(a.indices.data()), ptr(a.count.data()));
        break;
      }
      case device_rule::kind::cumulative_mass: {
        const gpu::kernel_config c = single_block(gpu::kernel_op::cumulative_mass);
        ctx.launch(ctx.functions(c)[0], 1, 1, c.threads_per_block, ptr(a.scores.data()), u32(n), a.rule.mass,
                   u32(a.rule.min_keep), ptr(a.indices.data()), ptr(a.count.data()));
        break;
      }
    }
    return status::ok();
  }

 private:
  static const void* ptr(const void* p) noexcept { return p; }
  static std::uint32_t u32(std::size_t v) { return cuda::context::narrow(v, "a size"); }
  static std::uint64_t u64(std::size_t v) noexcept { return v; }
  static std::uint64_t stride(const weight_view& w) noexcept { return w.row_stride; }

  [[nodiscard]] static status supported(dtype t) noexcept {
    if (!cuda::driver().available) return status::not_handled(cuda::driver().reason);
    if (!gpu::supports(t)) return status::not_handled("cuda: weight dtype not supported");
    return status::ok();
  }
  [[nodiscard]] static status ffn_status(const ffn_layer& w, bool gate_given) noexcept {
    if (const status s = supported(w.up.type); !s) return s;
    if (!gpu::supports(w.act)) return status::not_handled("cuda: activation not supported");
    if (!gate_given && !gpu::supports(w.gate.type)) return status::not_handled("cuda: gate dtype not supported");
    if (!w.down.absent() && !gpu::supports(w.down.type)) return status::not_handled("cuda: down dtype not supported");
    if (!w.down_t.absent() && !gpu::supports(w.down_t.type)) {
      return status::not_handled("cuda: down_t dtype not supported");
    }
    return status::ok();
  }

  // The rows of one block of the warp-per-row kernels (gpu::rows_per_block, without validating).
  [[nodiscard]] static std::size_t block_rows(const gpu::kernel_config& c) noexcept {
    return std::size_t{c.threads_per_block} / 32 * c.rows_per_warp;
  }
  [[nodiscard]] gpu::kernel_config warp_config(gpu::kernel_op op, dtype t,
                                               activation act = activation::silu) const noexcept {
    return {op, t, act, threads_per_block, rows_per_warp};
  }
  [[nodiscard]] gpu::kernel_config elementwise(gpu::kernel_op op, activation act = activation::silu) const noexcept {
    return {op, dtype::f32, act, elementwise_threads, 1};
  }
  [[nodiscard]] gpu::kernel_config single_block(gpu::kernel_op op) const noexcept {
    return {op, dtype::f32, activation::silu, select_threads, 1};
  }
  [[nodiscard]] gpu::kernel_config axpy_config(dtype t, bool split) const noexcept {
    return {split ? gpu::kernel_op::row_axpy_split : gpu::kernel_op::row_axpy, t, activation::silu, axpy_threads, 1};
  }

  // Kept rows per split for `count` kept rows of wt: fixed, or about parallel_blocks blocks.
  [[nodiscard]] std::size_t split_rows(const weight_view& wt, std::size_t count) const noexcept {
    if (rows_per_split > 0) return rows_per_split;
    const std::size_t elements = wt.cols / block_values(wt.type);
    const std::size_t column_blocks = std::max<std::size_t>(1, (elements + axpy_threads - 1) / axpy_threads);
    const std::size_t splits = std::max<std::size_t>(1, (parallel_blocks + column_blocks - 1) / column_blocks);
    return std::max<std::size_t>(min_rows_per_split, (count + splits - 1) / splits);
  }
  [[nodiscard]] std::size_t splits_for(const weight_view& wt, std::size_t count) const noexcept {
    const std::size_t rows = split_rows(wt, count);
    return (count + rows - 1) / rows;  // gpu::split_count
  }
  [[nodiscard]] std::size_t axpy_workspace(const weight_view& wt, std::size_t count) const noexcept {
    const std::size_t splits = splits_for(wt, count);
    return splits > 1 ? splits * wt.cols * sizeof(float) : 0;
  }

  void gemv(executor_type& ctx, const weight_view& w, const float* x, float* y) const {
    const gpu::kernel_config c = warp_config(gpu::kernel_op::gemv, w.type);
    ctx.launch(ctx.functions(c)[0], cuda::grid_blocks(c, w.rows), 1, c.threads_per_block, ptr(w.data), stride(w),
               ptr(x), u32(w.rows), u32(w.cols), ptr(y));
  }

  void gather_values(executor_type& ctx, const float* src, const std::uint32_t* idx, std::size_t count,
                     float* dst) const {
    const gpu::kernel_config c = elementwise(gpu::kernel_op::gather_values);
    ctx.launch(ctx.functions(c)[0], cuda::grid_blocks(c, count), 1, c.threads_per_block, ptr(src), ptr(idx), u32(count),
               ptr(dst));
  }

  // y = Σ_k coef[k]·Wt[idx ? idx[k] : k, :] over k < count: one row_axpy, or split over the
  // kept rows into partial sums (taken from ws) and reduced in split order.
  void row_axpy(executor_type& ctx, const weight_view& wt, const std::uint32_t* idx, const float* coef,
                std::size_t count, float* y, cuda::detail::carve& ws) const {
    const std::size_t splits = splits_for(wt, count);
    if (splits <= 1) {
      const gpu::kernel_config c = axpy_config(wt.type, false);
      ctx.launch(ctx.functions(c)[0], cuda::grid_blocks(c, wt.cols), 1, c.threads_per_block, ptr(wt.data), stride(wt),
                 ptr(idx), ptr(coef), u32(count), u32(wt.cols), ptr(y));
      return;
    }
    const gpu::kernel_config c = axpy_config(wt.type, true);
    const auto& f = ctx.functions(c);
    float* partial = ws.take<float>(splits * wt.cols);
    ctx.launch(f[0], cuda::grid_blocks(c, wt.cols, 0), splits, c.threads_per_block, ptr(wt.data), stride(wt), ptr(idx),
               ptr(coef), u32(count), u32(wt.cols), u32(split_rows(wt, count)), ptr(partial));
    ctx.launch(f[1], cuda::grid_blocks(c, wt.cols, 1), 1, c.threads_per_block, ptr(partial), u32(splits), u32(wt.cols),
               ptr(y));
  }

  // h[k] = act_k·(W_up[j, :]·x), j = idx ? idx[k] : k; act_k = gate_act[j], or act(W_gate[j, :]·x).
  void gated_gather(executor_type& ctx, activation act, const weight_view& gate, const weight_view& up, const float* x,
                    const std::uint32_t* idx, std::size_t count, const float* gate_act, float* h) const {
    const gpu::kernel_config c = warp_config(gpu::kernel_op::gated_gather, up.type, act);
    const std::uint64_t gate_stride = gate_act == nullptr ? gate.row_stride : 0;
    ctx.launch(ctx.functions(c)[0], cuda::grid_blocks(c, count), 1, c.threads_per_block,
               ptr(gate_act == nullptr ? gate.data : nullptr), gate_stride, ptr(up.data), stride(up), ptr(x),
               u32(up.cols), ptr(idx), u32(count), ptr(gate_act), ptr(h));
  }

  // y[t, :] = W·x[t, :] for t < ntok (strides in floats).
  void batched_gemv(executor_type& ctx, const weight_view& w, const float* x, std::uint64_t x_stride, std::size_t ntok,
                    float* y, std::uint64_t y_stride) const {
    gpu::kernel_config c = warp_config(gpu::kernel_op::batched_gemv, w.type);
    c.tokens_per_pass = tokens_per_pass;
    ctx.launch(ctx.functions(c)[0], cuda::grid_blocks(c, w.rows), 1, c.threads_per_block, ptr(w.data), stride(w),
               ptr(x), x_stride, u32(ntok), u32(w.rows), u32(w.cols), ptr(y), y_stride);
  }
};

ACTSPARSE_REQUIRE_BACKEND_FOR(cuda_backend, gemv_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(cuda_backend, transposed_linear_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(cuda_backend, linear_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(cuda_backend, gated_ffn_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(cuda_backend, token_ffn_args);
ACTSPARSE_REQUIRE_BACKEND_FOR(cuda_backend, device_select_args);

}  // namespace actsparse
