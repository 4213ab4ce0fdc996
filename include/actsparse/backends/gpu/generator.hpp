#pragma once
// The GPU kernel generation shared by the CUDA and the Metal generators: one validation of a
// kernel config against the op table (gpu/op_table.hpp, where every op's kernels, arguments and
// grids are described), and describe(config, dialect), the kernels of a config as
// dialect-neutral text. A generator (backends/cuda/generator.hpp, backends/metal/generator.hpp)
// adds only its prelude and its signatures.

#include <actsparse/backends/gpu/device_math.hpp>
#include <actsparse/backends/gpu/kernel_source.hpp>
#include <actsparse/backends/gpu/op_table.hpp>
#include <actsparse/core/activation.hpp>
#include <actsparse/core/dtype.hpp>
#include <actsparse/core/error.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace actsparse::gpu {

// A $KEY and its value.
using key = std::pair<std::string_view, std::string>;

namespace detail {

// Replaces every $KEY (the longest run of capital letters after '$') by its value; a key that
// is not in `keys` is a generator bug and throws.
[[nodiscard]] inline std::string substitute(std::string_view text, std::span<const key> keys) {
  std::string out;
  out.reserve(text.size() + 256);
  std::size_t i = 0;
  while (i < text.size()) {
    const std::size_t at = text.find('$', i);
    if (at == std::string_view::npos) {
      out.append(text.substr(i));
      break;
    }
    out.append(text.substr(i, at - i));
    std::size_t end = at + 1;
    while (end < text.size() && text[end] >= 'A' && text[end] <= 'Z') ++end;
    const std::string_view k = text.substr(at + 1, end - at - 1);
    const auto found = std::find_if(keys.begin(), keys.end(), [&](const key& kv) { return kv.first == k; });
    if (found == keys.end()) {
      ::actsparse::detail::fail_described("gpu::substitute", "text", "$" + std::string(k) + " has no value",
                                          "a placeholder of the kernel config");
    }
    out.append(found->second);
    i = end;
  }
  return out;
}

[[nodiscard]] constexpr bool one_two_four_eight(unsigned v) noexcept { return v == 1 || v == 2 || v == 4 || v == 8; }

// "a, b or c" of the names that pass `keep`.
template <class Name, class Keep>
[[nodiscard]] std::string list_of(unsigned count, Name name_at, Keep keep) {
  std::vector<std::string_view> names;
  for (unsigned i = 0; i < count; ++i) {
    if (keep(i)) names.push_back(name_at(i));
  }
  std::string s;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (i > 0) s += i + 1 == names.size() ? " or " : ", ";
    s += names[i];
  }
  return s;
}

inline std::string op_list(const dialect& d) {
  return list_of(
      static_cast<unsigned>(std::size(ops)), [](unsigned i) { return ops[i].name; },
      [&](unsigned i) { return d.supports(ops[i].op); });
}

inline std::string dtype_list() {
  return list_of(
      256, [](unsigned i) { return name(static_cast<dtype>(i)); },
      [](unsigned i) { return info(static_cast<dtype>(i)).name != "?" && supports(static_cast<dtype>(i)); });
}

inline std::string activation_list() {
  return list_of(
      256, [](unsigned i) { return name(static_cast<activation>(i)); },
      [](unsigned i) { return supports(static_cast<activation>(i)); });
}

inline std::string with_block(std::string_view text, const dialect& d) {
  const key k[] = {{"BLOCK", std::string(d.block)}, {"WARP", std::string(d.warp)}};
  return substitute(text, k);
}

}  // namespace detail

// Throws actsparse::error naming d.where and what was expected when d cannot generate c.
inline const op_entry& validate(const kernel_config& c, const dialect& d) {
  namespace ad = ::actsparse::detail;
  const std::string_view w = d.where;
  const op_entry* e = find(c.op);
  if (e == nullptr || !d.supports(c.op)) {
    ad::fail(w, "op", e != nullptr ? std::string(e->name) : std::to_string(static_cast<int>(c.op)),
             "an op with a " + std::string(d.language) + " kernel: " + detail::op_list(d));
  }
  ad::require(supports(c.weight), w, "weight", static_cast<int>(c.weight), detail::dtype_list());
  ad::require(supports(c.act), w, "act", static_cast<int>(c.act), detail::activation_list());
  ad::require(c.threads_per_block >= 32 && c.threads_per_block <= 1024 && c.threads_per_block % 32 == 0, w,
              "threads_per_block", c.threads_per_block,
              "a multiple of 32 (the " + std::string(d.warp) + " width) in [32, 1024]");
  if (e->reads_f32) {
    ad::require(c.weight == dtype::f32, w, "weight", name(c.weight),
                "f32 for " + std::string(e->name) + " (it reads f32 activations or scores)");
  }
  if (!e->one_row.empty()) {
    ad::require(c.rows_per_warp == 1, w, "rows_per_warp", c.rows_per_warp,
                "1 for " + std::string(e->name) + " (" + detail::with_block(e->one_row, d) + ")");
  } else {
    ad::require(detail::one_two_four_eight(c.rows_per_warp), w, "rows_per_warp", c.rows_per_warp, "1, 2, 4 or 8");
  }
  if (e->batched) {
    ad::require(detail::one_two_four_eight(c.tokens_per_pass), w, "tokens_per_pass", c.tokens_per_pass,
                "1, 2, 4 or 8 for batched_gemv");
  } else {
    ad::require(c.tokens_per_pass == 1, w, "tokens_per_pass", c.tokens_per_pass,
                "1 (only batched_gemv reads several tokens per pass)");
  }
  return *e;
}

namespace detail {

[[nodiscard]] inline std::string suffix(const kernel_config& c) {
  std::string s = "_t" + std::to_string(c.threads_per_block);
  if (c.rows_per_warp > 1) s += "_r" + std::to_string(c.rows_per_warp);
  return s;
}

// The keys of a valid config.
[[nodiscard]] inline std::vector<key> config_keys(const kernel_config& c) {
  const std::size_t bv = block_values(c.weight);
  return {{"T", std::to_string(c.threads_per_block)},
          {"WARPS", std::to_string(c.threads_per_block / 32)},
          {"R", std::to_string(c.rows_per_warp)},
          {"BV", std::to_string(bv)},
          {"DT", std::string(name(c.weight))},
          {"ACT", std::string(name(c.act))},
          {"PASS", std::to_string(c.tokens_per_pass)},
          {"SUFFIX", suffix(c)},
          {"EUNROLL", bv == 1 ? "GPU_UNROLL_N(2)" : "GPU_UNROLL_N(1)"}};
}

}  // namespace detail

// The names of the kernels c defines, in launch order (the same in every dialect).
[[nodiscard]] inline std::vector<std::string> kernel_names(const kernel_config& c, const dialect& d) {
  const op_entry& e = validate(c, d);
  const std::vector<key> keys = detail::config_keys(c);
  std::vector<std::string> names;
  for (const kernel_text& k : e.kernels) names.push_back(detail::substitute(k.name, keys));
  return names;
}

// Rows of the matrix (gemv, gate_select, batched_gemv) or of the index list (gather_gemv,
// gated_gather) that one block covers; for gate_select it is also compact's rows_per_block.
[[nodiscard]] inline unsigned rows_per_block(const kernel_config& c, const dialect& d) {
  (void)validate(c, d);
  return c.threads_per_block / 32 * c.rows_per_warp;
}

// row_axpy_split: the number of splits for `count` kept rows, rows_per_split of them per split.
// 0 when count is 0: launch only the reduction then (it writes zeros).
[[nodiscard]] inline std::size_t split_count(std::size_t count, std::size_t rows_per_split) {
  ::actsparse::detail::require(rows_per_split > 0, "gpu::split_count", "rows_per_split", rows_per_split,
                               "at least 1 kept row per split");
  return (count + rows_per_split - 1) / rows_per_split;
}

// Blocks to launch kernel_names(c)[kernel] on for n = rows (gemv, gate_select, batched_gemv),
// count (gather_gemv, gated_gather, gather_values), cols (row_axpy, both kernels of
// row_axpy_split: the partial kernel's blocks of one split), n (gated_hidden), tokens (the token
// ops), experts (moe_route, moe_pad); top_k and cumulative_mass take 1 block. The 2-D MoE
// kernels take this as their grid's y: n = d_ff (moe_gated), cols = d_model (moe_down,
// moe_combine); their x is pairs (tokens for moe_combine).
[[nodiscard]] inline std::size_t grid_blocks(const kernel_config& c, std::size_t n, std::size_t kernel,
                                             const dialect& d) {
  const op_entry& e = validate(c, d);
  ::actsparse::detail::require(kernel < e.kernels.size(), d.where, "kernel", kernel,
                               "the position of a kernel in kernel_names(c)");
  std::size_t per_block = 1;
  switch (e.kernels[kernel].grid) {
    case grid_rule::one_per_item:
      return n;
    case grid_rule::single:
      return 1;
    case grid_rule::rows:
      per_block = std::size_t{c.threads_per_block} / 32 * c.rows_per_warp;
      break;
    case grid_rule::elements:
      per_block = std::size_t{c.threads_per_block} * block_values(c.weight);
      break;
    case grid_rule::threads:
      per_block = c.threads_per_block;
      break;
  }
  return (n + per_block - 1) / per_block;
}

// One kernel of a config, neutral: a dialect writes its signature around `body`.
struct kernel_body {
  std::string name;
  std::span<const param> params;
  unsigned positions;
  std::string body;
};

// The kernels of a config: device functions first (decoder, order key, activations, lane sums,
// the mass accumulator, the op's helpers), then each kernel. All of it is dialect-neutral text.
struct kernel_set {
  std::string functions;
  std::vector<kernel_body> kernels;
};

[[nodiscard]] inline kernel_set describe(const kernel_config& c, const dialect& d) {
  const op_entry& e = validate(c, d);
  const std::vector<key> keys = detail::config_keys(c);
  kernel_set out;
  std::string& f = out.functions;
  if (!e.reads_f32) {
    const dtype_info t = info(c.weight);
    const std::string dt(t.name);
    f += "GPU_CONSTANT unsigned int actsparse_" + dt + "_bytes = " + std::to_string(t.block_bytes) + "u;\n";
    if (t.block_values > 1)
      f += "GPU_CONSTANT unsigned int actsparse_" + dt + "_values = " + std::to_string(t.block_values) + "u;\n";
    f.append(decoder_source(c.weight)).append("\n");
  }
  if (e.order_key) f.append(order_key_source).append("\n");
  if (e.uses_act) f.append(activations_source).append("\n");
  f.append(source::simd_sums);
  if (e.mass) f.append(d.mass == mass_sum::f64 ? source::mass_f64 : source::mass_f32_pair);
  f += detail::substitute(e.helpers, keys);
  for (const kernel_text& k : e.kernels) {
    std::vector<key> kk = keys;
    if (!k.limit.empty()) {
      std::vector<key> rows = keys;
      rows.emplace_back("LIMIT", k.limit);
      rows.emplace_back("ROW", k.row);
      kk.emplace_back("ROWS", detail::substitute(source::warp_rows, rows));
      kk.emplace_back("GATED", detail::substitute(source::gated_rows, rows));
      kk.emplace_back("LIMIT", k.limit);
    }
    out.kernels.push_back({detail::substitute(k.name, keys), k.params, k.positions, detail::substitute(k.body, kk)});
  }
  return out;
}

// "op=gemv weight=f16 act=silu threads_per_<block>=256 rows_per_<warp>=2": the config in a
// generated source's first line.
[[nodiscard]] inline std::string config_line(const kernel_config& c, const dialect& d) {
  const op_entry& e = validate(c, d);
  std::string s = "op=" + std::string(e.name) + " weight=" + std::string(name(c.weight));
  if (e.uses_act) s += " act=" + std::string(name(c.act));
  s += " threads_per_" + std::string(d.block) + "=" + std::to_string(c.threads_per_block);
  s += " rows_per_" + std::string(d.warp) + "=" + std::to_string(c.rows_per_warp);
  if (e.batched) s += " tokens_per_pass=" + std::to_string(c.tokens_per_pass);
  return s;
}

}  // namespace actsparse::gpu
