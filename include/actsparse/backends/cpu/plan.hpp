#pragma once
// What the CPU backend will do for one call, decided once from (arguments, thread count,
// options): the kernel path, the crossover decision and the workspace regions. The backend's
// workspace_size and run both read a plan, so they cannot disagree; tests and benchmarks read
// it to see which path a call takes.

#include <actsparse/backends/cpu/dispatch.hpp>
#include <actsparse/backends/cpu/dtypes.hpp>
#include <actsparse/backends/cpu/layouts.hpp>
#include <actsparse/backends/cpu/tasks.hpp>
#include <actsparse/backends/cpu/tuning.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/workspace.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace actsparse::cpu {

// Every region starts on a cache line (threads that write neighbouring regions do not share
// lines); the workspace itself need only be 4-byte aligned, so the row axpy's chunk sums, which
// must sit on 64 bytes from the real address, keep their own slack (axpy_partial_floats).
inline constexpr std::size_t region_alignment = 64;
inline constexpr std::size_t workspace_alignment = alignof(float);

// The options of cpu_backend a plan depends on.
struct plan_options {
  bool int8_activations = true;
  std::size_t coalesce_gap = 0;
  const weight_layouts* layouts = nullptr;
  const tuning* tune = nullptr;
};

// x quantized (quantized_x_bytes): d (f32 per block), then q (int8 per value), then the block
// sums of q (int32 per block) that the interleaved GEMV takes.
struct quantized_x {
  float* d = nullptr;
  std::int8_t* q = nullptr;
  std::int32_t* s = nullptr;
};
[[nodiscard]] inline quantized_x quantized_at(std::byte* at, std::size_t n) noexcept {
  auto* const d = reinterpret_cast<float*>(at);
  auto* const q = reinterpret_cast<std::int8_t*>(d + n / 32);
  return {d, q, reinterpret_cast<std::int32_t*>(q + n)};
}

namespace detail {
[[nodiscard]] inline bool int8_path(const plan_options& o, dtype t) noexcept {
  return o.int8_activations && support(t).int8_activations;
}
// The interleaved copy the integer GEMV of w reads when it reads w whole, or null.
[[nodiscard]] inline const interleaved_view* interleaved_copy(const plan_options& o, const weight_view& w) noexcept {
  if (o.layouts == nullptr || !int8_path(o, w.type) || !support(w.type).interleaved) return nullptr;
  return o.layouts->interleaved(w);
}
}  // namespace detail

// ---- y = W[rows, :]·x ------------------------------------------------------------------------
struct gemv_plan {
  bool dense = true;                              // every row, in order (no index reads)
  bool quantize_x = false;                        // the integer GEMV on x quantized
  const interleaved_view* interleaved = nullptr;  // the copy a dense integer GEMV reads
  std::size_t x_at = 0;                           // the quantized x
  std::size_t bytes = 0;
};
[[nodiscard]] inline gemv_plan make_plan(const gemv_args& a, const plan_options& o) noexcept {
  gemv_plan p;
  p.dense = a.rows.all || a.rows.count(a.w.rows) == a.w.rows;  // every row listed runs as dense
  p.quantize_x = detail::int8_path(o, a.w.type);
  if (p.dense) p.interleaved = detail::interleaved_copy(o, a.w);
  workspace_layout l;
  if (p.quantize_x) p.x_at = l.take(quantized_x_bytes(a.w.cols), region_alignment);
  p.bytes = l.bytes;
  return p;
}

// ---- y = W·x over the kept inputs (W row-major: every row is read, x masked) -----------------
struct linear_plan {
  bool masked = false;  // the skipped inputs set to 0 in a copy of x
  gemv_plan gemv;       // the dense GEMV of W on that x
  std::size_t x_at = 0;
  std::size_t bytes = 0;
};
[[nodiscard]] inline linear_plan make_plan(const linear_args& a, const plan_options& o) noexcept {
  linear_plan p;
  p.masked = !a.inputs.all && a.inputs.indices.size() < a.w.cols;
  p.gemv = make_plan(gemv_args{a.w, a.x, a.y, subset::everything()}, o);
  workspace_layout l;
  const std::size_t gemv_at = l.take(p.gemv.bytes, region_alignment);
  p.gemv.x_at += gemv_at;
  if (p.masked) p.x_at = l.take(a.w.cols * sizeof(float), region_alignment);
  p.bytes = l.bytes;
  return p;
}

// ---- y = Σ_{j ∈ inputs} x_j·Wt[j, :] ---------------------------------------------------------
struct axpy_plan {
  bool coalesce = false;        // skipped runs of at most coalesce_gap rows read with coefficient 0
  std::size_t partials_at = 0;  // the chunk sums (axpy_partial_floats)
  std::size_t coef_at = 0;      // coalescing: the coefficients (0 for a filled-in row)
  std::size_t rows_at = 0;      // coalescing: the filled row list
  std::size_t bytes = 0;
};
[[nodiscard]] inline axpy_plan make_plan(const transposed_linear_args& a, const plan_options& o) noexcept {
  axpy_plan p;
  p.coalesce = o.coalesce_gap > 0 && !a.inputs.all;
  workspace_layout l;
  p.partials_at = l.take(axpy_partial_floats(a.wt) * sizeof(float), region_alignment);
  if (p.coalesce) {
    p.coef_at = l.take(a.wt.rows * sizeof(float), region_alignment);
    p.rows_at = l.take(a.wt.rows * sizeof(std::uint32_t), region_alignment);
  }
  p.bytes = l.bytes;
  return p;
}

// ---- y = W_down (act(W_gate x) ⊙ W_up x) over the kept neurons --------------------------------
// Phase 1 computes u, g and h = act(g)·u over a list of rows of W_up / W_gate; phase 2 is the
// down projection.
enum class phase1_rows {
  every_row,            // dense: every neuron kept
  kept_rows,            // a row gather of the kept neurons
  every_row_then_drop,  // from the crossover on: every row read, h = 0 for the dropped neurons
};
enum class down_path {
  column_blocks,     // W_down's column-block copy (lossless): the kept neurons' quants and the
                     // scales of their block columns, h in f32 (every neuron when dense)
  interleaved_gemv,  // y = W_down·h from W_down's interleaved copy, h quantized (every row read)
  axpy_coalesced,    // the row axpy over down_t on the kept rows with short gaps filled in
  axpy,              // the row axpy over down_t (the kept rows, or every row)
  gemv,              // y = W_down·h, row-major W_down (dense, no down_t)
};

struct ffn_plan {
  std::size_t d_model = 0;
  std::size_t d_ff = 0;
  std::size_t kept = 0;    // neurons kept
  std::size_t phase1 = 0;  // rows of W_up (and W_gate) phase 1 computes
  phase1_rows rows = phase1_rows::every_row;
  down_path down = down_path::axpy;
  bool gate_given = false;                           // gate_act passed: W_gate is not read
  bool up_int8 = false;                              // W_up's GEMV runs on x quantized (int8 kernels)
  bool gate_int8 = false;                            // W_gate's likewise (when it is read)
  bool quantize_x = false;                           // some GEMV of phase 1 runs on x quantized
  const interleaved_view* up_interleaved = nullptr;  // copies phase 1 reads (every row read)
  const interleaved_view* gate_interleaved = nullptr;
  const interleaved_view* down_interleaved = nullptr;     // down == interleaved_gemv
  const column_blocks_view* down_columns_copy = nullptr;  // down == column_blocks
  // Workspace regions (byte offsets).
  std::size_t u_at = 0, g_at = 0;  // phase-1 outputs, phase1 floats each (g: when computed here)
  std::size_t h_at = 0;            // h[j] for every neuron j (d_ff floats)
  std::size_t filled_at = 0;       // axpy_coalesced: the filled row count, then the row list
  std::size_t partials_at = 0;     // the row axpy's chunk sums
  std::size_t x_at = 0;            // quantize_x: x quantized
  std::size_t h_quantized_at = 0;  // interleaved_gemv: h quantized
  std::size_t bytes = 0;

  // Whether phase 1 reads every row of W_up (and W_gate).
  [[nodiscard]] bool every_row() const noexcept { return rows != phase1_rows::kept_rows; }
};

// The crossover fraction for the FFN with W_up of this dtype on `threads` threads (0: the lowest
// over thread counts, what a workspace sized before the executor is known needs).
[[nodiscard]] inline double crossover_fraction(const plan_options& o, dtype up, bool interleaved,
                                               std::size_t threads) noexcept {
  static constexpr tuning defaults{};
  const tuning& t = o.tune != nullptr ? *o.tune : defaults;
  if (t.read_all_from) return *t.read_all_from;
  return threads == 0 ? t.crossover.lowest(up, interleaved) : t.crossover.at(up, threads, interleaved);
}

[[nodiscard]] inline ffn_plan make_plan(const gated_ffn_args& a, std::size_t threads, const plan_options& o) noexcept {
  const ffn_layer& f = a.weights;
  ffn_plan p;
  p.d_model = f.d_model();
  p.d_ff = f.d_ff();
  p.kept = a.neurons.count(p.d_ff);
  p.gate_given = !a.gate_act.empty();
  const interleaved_view* const down_copy = f.down.absent() ? nullptr : detail::interleaved_copy(o, f.down);
  const column_blocks_view* const down_blocks =
      f.down.absent() || o.layouts == nullptr ? nullptr : o.layouts->column_blocks(f.down);
  const bool sparse_down = !f.down_t.absent() || down_blocks != nullptr;
  const interleaved_view* const up_copy = detail::interleaved_copy(o, f.up);
  // Every neuron listed (sorted, unique: 0 .. d_ff-1) runs as dense: the same bits.
  if (a.neurons.all || p.kept == p.d_ff) {
    p.rows = phase1_rows::every_row;
  } else {
    const double from = crossover_fraction(o, f.up.type, up_copy != nullptr && down_copy != nullptr, threads);
    const bool read_all = sparse_down && static_cast<double>(p.kept) >= from * static_cast<double>(p.d_ff);
    p.rows = read_all ? phase1_rows::every_row_then_drop : phase1_rows::kept_rows;
  }
  p.phase1 = p.every_row() ? p.d_ff : p.kept;
  if (p.every_row()) {
    p.up_interleaved = up_copy;
    if (!p.gate_given) p.gate_interleaved = detail::interleaved_copy(o, f.gate);
  }
  if (down_blocks != nullptr) {
    p.down = down_path::column_blocks;
    p.down_columns_copy = down_blocks;
  } else if (p.every_row() && down_copy != nullptr) {
    p.down = down_path::interleaved_gemv;
    p.down_interleaved = down_copy;
  } else if (sparse_down && p.rows == phase1_rows::kept_rows && o.coalesce_gap > 0) {
    p.down = down_path::axpy_coalesced;
  } else {
    p.down = sparse_down ? down_path::axpy : down_path::gemv;
  }
  p.up_int8 = detail::int8_path(o, f.up.type);
  p.gate_int8 = !p.gate_given && detail::int8_path(o, f.gate.type);
  p.quantize_x = p.up_int8 || p.gate_int8;

  workspace_layout l;
  p.u_at = l.take(p.phase1 * sizeof(float), region_alignment);
  if (!p.gate_given) p.g_at = l.take(p.phase1 * sizeof(float), region_alignment);
  p.h_at = l.take(p.d_ff * sizeof(float), region_alignment);
  if (p.down == down_path::axpy_coalesced) p.filled_at = l.take((1 + p.d_ff) * sizeof(std::uint32_t), region_alignment);
  if (p.down == down_path::axpy || p.down == down_path::axpy_coalesced) {
    p.partials_at = l.take(axpy_partial_floats(f.down_t) * sizeof(float), region_alignment);
  }
  if (p.quantize_x) p.x_at = l.take(quantized_x_bytes(p.d_model), region_alignment);
  if (p.down == down_path::interleaved_gemv) p.h_quantized_at = l.take(quantized_x_bytes(p.d_ff), region_alignment);
  p.bytes = l.bytes;
  return p;
}

// ---- Y[t] = W·X[t] for a few tokens ------------------------------------------------------------
struct batched_gemv_plan {
  std::size_t tokens = 0;
  bool quantize_x = false;      // the integer GEMM on every token's x quantized
  std::size_t x_at = 0;         // quantize_x: the tokens' quantized x
  std::size_t x_stride = 0;     // bytes between two tokens' quantized x
  std::size_t pointers_at = 0;  // the kernels' per-token pointers: x (or q and d), y
  std::size_t bytes = 0;
};
[[nodiscard]] inline batched_gemv_plan make_plan(const batched_gemv_args& a, const plan_options& o) noexcept {
  batched_gemv_plan p;
  p.tokens = a.x.rows;
  p.quantize_x = detail::int8_path(o, a.w.type);
  workspace_layout l;
  if (p.quantize_x) {
    p.x_stride = (quantized_x_bytes(a.w.cols) + region_alignment - 1) / region_alignment * region_alignment;
    p.x_at = l.take(p.tokens * p.x_stride, region_alignment);
  }
  p.pointers_at = l.take(3 * p.tokens * sizeof(void*), region_alignment);
  p.bytes = l.bytes;
  return p;
}

// ---- residual[t] += FFN(input[t]) for the kept tokens (over the given neurons) ----------------
struct token_plan {
  std::size_t tokens = 0;   // kept
  std::size_t neurons = 0;  // the neurons every token uses (d_ff, or the union)
  bool gate_given = false;  // gate_act passed: W_gate is not read
  bool up_int8 = false;     // W_up's GEMV runs on the inputs quantized
  bool gate_int8 = false;   // W_gate's likewise
  bool quantize_x = false;
  std::size_t u_at = 0, g_at = 0;  // [tokens × neurons]: W_up·x_t, act(W_gate·x_t) (computed or given)
  std::size_t h_at = 0;            // [tokens × d_ff]: h_t[j] at j (the neurons used only)
  std::size_t y_at = 0;            // [tokens × d_model]
  std::size_t pointers_at = 0;     // the multi-token kernels' per-token pointers (5 per token)
  // A few tokens (decode batches, verify passes: at most batch_tokens): phase 2 by row chunks,
  // every column, each chunk's sums per token in partials (chunks × tokens × d_model), then
  // added in chunk order; more tokens: tiles of 64 columns, the sums in registers.
  static constexpr std::size_t batch_tokens = 16;
  bool by_chunks = false;
  std::size_t partials_at = 0;
  std::size_t chunk_pointers_at = 0;  // chunks × tokens output pointers
  std::size_t x_at = 0;               // quantize_x: every kept token's input quantized
  std::size_t x_stride = 0;           // bytes between two tokens' quantized inputs
  std::size_t bytes = 0;
};
[[nodiscard]] inline token_plan make_plan(const token_ffn_args& a, const plan_options& o) noexcept {
  const ffn_layer& f = a.weights;
  token_plan p;
  p.tokens = a.tokens.count(a.input.rows);
  p.neurons = a.neurons.count(f.d_ff());
  p.gate_given = a.gate_act.data != nullptr;
  p.up_int8 = detail::int8_path(o, f.up.type);
  p.gate_int8 = !p.gate_given && detail::int8_path(o, f.gate.type);
  p.quantize_x = p.up_int8 || p.gate_int8;
  workspace_layout l;
  p.u_at = l.take(p.tokens * p.neurons * sizeof(float), region_alignment);
  p.g_at = l.take(p.tokens * p.neurons * sizeof(float), region_alignment);
  p.h_at = l.take(p.tokens * f.d_ff() * sizeof(float), region_alignment);
  p.y_at = l.take(p.tokens * f.d_model() * sizeof(float), region_alignment);
  p.pointers_at = l.take(5 * p.tokens * sizeof(void*), region_alignment);
  p.by_chunks = !f.down_t.absent() && p.tokens <= token_plan::batch_tokens;
  if (p.by_chunks) {
    const std::size_t chunks = axpy_chunk_count(f.d_ff());
    p.partials_at = l.take(chunks * p.tokens * f.d_model() * sizeof(float), region_alignment);
    p.chunk_pointers_at = l.take(chunks * p.tokens * sizeof(void*), region_alignment);
  }
  if (p.quantize_x) {
    p.x_stride = (quantized_x_bytes(f.d_model()) + region_alignment - 1) / region_alignment * region_alignment;
    p.x_at = l.take(p.tokens * p.x_stride, region_alignment);
  }
  p.bytes = l.bytes;
  return p;
}

// ---- MoE: y_t = Σ_p w_p · FFN_{e_p}(x_t) (+ shared) ------------------------------------------
// The call's groups are the experts with at least one token (expert order) and then the shared
// expert; a group's rows in h and f are its pairs' expert-major positions q (the shared
// expert's: pairs + t). Phase 1 tasks are (group, 64-row block of d_ff); phase 2 tasks
// (group, column range of d_model) with down_t, (group, 64-row block of d_model) with down.
struct moe_plan {
  std::size_t tokens = 0;
  std::size_t pairs = 0;
  std::size_t rows = 0;  // rows of h and f: pairs, plus tokens with a shared expert
  std::size_t d_model = 0;
  std::size_t h_stride = 0;                 // floats: the larger d_ff of the experts and the shared expert
  bool up_int8 = false, gate_int8 = false;  // the experts' GEMVs on quantized x
  bool shared_up_int8 = false, shared_gate_int8 = false;  // the shared expert's
  bool quantize_x = false;
  std::size_t column_tile = 0;  // phase 2 column range with down_t: 64 (many tokens) or wide
  std::size_t h_at = 0;         // [rows x h_stride] hidden values
  std::size_t f_at = 0;         // [rows x d_model] each pair's expert output
  std::size_t rows_at = 0;      // u32 [rows]: the combine's row list, token by token
  std::size_t coef_at = 0;      // f32 [rows]: the combine's coefficient of each row of f
  std::size_t groups_at = 0;    // u32 [experts + 2]: the groups' experts (shared: experts)
  std::size_t sums_at = 0;      // wide column tiles: f32 [(experts + 1) x d_model] chunk sums
  std::size_t x_at = 0;         // quantize_x: every token's input quantized
  std::size_t x_stride = 0;
  std::size_t bytes = 0;
};
[[nodiscard]] inline moe_plan make_plan(const moe_ffn_args& a, std::size_t threads, const plan_options& o) noexcept {
  moe_plan p;
  const bool shared = !a.shared.gate.absent();
  p.tokens = a.input.rows;
  p.pairs = a.routing.pairs();
  p.rows = p.pairs + (shared ? p.tokens : 0);
  p.d_model = a.experts.d_model();
  p.h_stride = shared ? std::max(a.experts.d_ff(), a.shared.d_ff()) : a.experts.d_ff();
  p.up_int8 = detail::int8_path(o, a.experts.up.first.type);
  p.gate_int8 = detail::int8_path(o, a.experts.gate.first.type);
  if (shared) {
    p.shared_up_int8 = detail::int8_path(o, a.shared.up.type);
    p.shared_gate_int8 = detail::int8_path(o, a.shared.gate.type);
  }
  p.quantize_x = p.up_int8 || p.gate_int8 || p.shared_up_int8 || p.shared_gate_int8;
  const std::size_t wide = (p.d_model + axpy_column_quantum - 1) / axpy_column_quantum /
                           std::max<std::size_t>(threads, 1) * axpy_column_quantum;
  p.column_tile = p.rows > a.experts.count() ? axpy_column_quantum : std::max(wide, axpy_column_quantum);
  workspace_layout l;
  p.h_at = l.take(p.rows * p.h_stride * sizeof(float), region_alignment);
  p.f_at = l.take(p.rows * p.d_model * sizeof(float), region_alignment);
  p.rows_at = l.take(p.rows * sizeof(std::uint32_t), region_alignment);
  p.coef_at = l.take(p.rows * sizeof(float), region_alignment);
  p.groups_at = l.take((a.experts.count() + 2) * sizeof(std::uint32_t), region_alignment);
  if (p.column_tile > axpy_column_quantum) {
    p.sums_at = l.take((a.experts.count() + 1) * p.d_model * sizeof(float), region_alignment);
  }
  if (p.quantize_x) {
    p.x_stride = (quantized_x_bytes(p.d_model) + region_alignment - 1) / region_alignment * region_alignment;
    p.x_at = l.take(p.tokens * p.x_stride, region_alignment);
  }
  p.bytes = l.bytes;
  return p;
}

}  // namespace actsparse::cpu
