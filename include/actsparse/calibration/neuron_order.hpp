#pragma once
// Neuron reordering: a permutation of an FFN's neurons (rows of W_gate and W_up, columns of
// W_down, rows of W_downᵀ), applied once at load time, that puts neurons kept together next to
// each other, so the rows a sparse step reads form fewer, longer contiguous spans and a base set
// becomes a prefix the backend reads as one dense block. The FFN computes the same function on
// the permuted weights: the same terms, added in another order (within f32 rounding of the
// original; keep-all on the permuted weights equals dense on them bit for bit).
//
// order[i] = the original neuron that becomes neuron i.

#include <actsparse/calibration/selection_statistics.hpp>
#include <actsparse/core/dtype.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/views.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace actsparse {

// Checks that order is a permutation of 0 .. n-1; the error names the first bad entry.
inline void check_permutation(std::span<const std::uint32_t> order, std::size_t n, std::string_view where,
                              std::string_view argument = "order") {
  detail::require(order.size() == n, where, std::string(argument) + ".size()", order.size(),
                  "n = " + std::to_string(n) + " entries (one per neuron)");
  std::vector<std::uint8_t> seen(n, 0);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t j = order[i];
    if (j >= n)
      detail::fail(where, std::string(argument) + "[" + std::to_string(i) + "]", j,
                   "an index < n = " + std::to_string(n));
    if (seen[j] != 0) {
      detail::fail(where, std::string(argument) + "[" + std::to_string(i) + "]", j,
                   "each index exactly once (a permutation; this one appears twice)");
    }
    seen[j] = 1;
  }
}

// inverse[order[i]] = i.
[[nodiscard]] inline std::vector<std::uint32_t> inverse_permutation(std::span<const std::uint32_t> order) {
  check_permutation(order, order.size(), "inverse_permutation");
  std::vector<std::uint32_t> inv(order.size());
  for (std::size_t i = 0; i < order.size(); ++i) inv[order[i]] = static_cast<std::uint32_t>(i);
  return inv;
}

// Hot first: neurons by descending frequency (ties: lower index first).
[[nodiscard]] inline std::vector<std::uint32_t> hot_first_order(std::span<const double> frequency) {
  std::vector<std::uint32_t> order(frequency.size());
  std::iota(order.begin(), order.end(), std::uint32_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return frequency[a] > frequency[b]; });
  return order;
}

// Co-activation order: a greedy chain. It starts at the most frequent neuron and appends, one at
// a time, the unplaced neuron kept most often together with the last `window` placed ones (ties:
// the more frequent, then the lower index), so neurons that fire together sit together.
// O(d_ff²). Needs statistics with co-activation counts.
[[nodiscard]] inline std::vector<std::uint32_t> coactivation_order(const selection_statistics& s, std::size_t layer,
                                                                   std::size_t window = 8) {
  constexpr std::string_view where = "coactivation_order";
  if (!s.has_coactivation()) {
    detail::fail(where, "statistics", "statistics without co-activation counts",
                 "statistics built with options.coactivation_tier set");
  }
  detail::require(window >= 1, where, "window", window, "at least 1");
  const std::size_t n = s.d_ff();
  const auto tiers = s.tiers();
  const std::size_t tier_index =
      static_cast<std::size_t>(std::find(tiers.begin(), tiers.end(), s.options().coactivation_tier) - tiers.begin());
  const std::vector<double> freq = s.frequency(layer, tier_index);
  std::vector<std::uint32_t> order;
  order.reserve(n);
  std::vector<std::uint8_t> placed(n, 0);
  std::vector<std::uint64_t> affinity(n, 0);                   // co-activation with the window
  const auto better = [&](std::uint32_t a, std::uint32_t b) {  // is a preferred to b?
    if (affinity[a] != affinity[b]) return affinity[a] > affinity[b];
    if (freq[a] != freq[b]) return freq[a] > freq[b];
    return a < b;
  };
  while (order.size() < n) {
    std::uint32_t pick = 0;
    bool found = false;
    for (std::uint32_t j = 0; j < n; ++j) {
      if (placed[j] != 0) continue;
      if (!found || better(j, pick)) pick = j;
      found = true;
    }
    placed[pick] = 1;
    order.push_back(pick);
    // affinity: the co-activations with the last `window` placed neurons, updated as the window moves
    const std::uint32_t dropped = order.size() > window ? order[order.size() - 1 - window] : pick;
    for (std::uint32_t j = 0; j < n; ++j) {
      if (placed[j] != 0) continue;
      affinity[j] += s.coactivation(layer, j, pick);
      if (dropped != pick) affinity[j] -= s.coactivation(layer, j, dropped);
    }
  }
  return order;
}

// values permuted: out[i] = values[order[i]].
template <class T>
[[nodiscard]] std::vector<T> permute_values(std::span<const T> values, std::span<const std::uint32_t> order) {
  check_permutation(order, values.size(), "permute_values");
  std::vector<T> out(values.size());
  for (std::size_t i = 0; i < order.size(); ++i) out[i] = values[order[i]];
  return out;
}

// An FFN layer whose neurons are permuted; owns its weights (keep it alive while `layer` is used).
struct permuted_ffn {
  std::vector<std::byte> gate, up, down, down_t;
  ffn_layer layer;
  permuted_ffn() = default;
  permuted_ffn(const permuted_ffn&) = delete;  // layer points into the vectors
  permuted_ffn& operator=(const permuted_ffn&) = delete;
  permuted_ffn(permuted_ffn&&) noexcept = default;  // vector moves keep their buffers
  permuted_ffn& operator=(permuted_ffn&&) noexcept = default;
  ~permuted_ffn() = default;
};

// The layer with neuron i = original neuron order[i]: rows of gate, up and down_t are moved
// whole (any dtype, lossless); W_down's columns are moved value by value for f32 / f16 / bf16.
// For q8_0 / q4_0 a column of W_down lies inside 32-value blocks and cannot move without
// requantizing, so the permuted layer has no W_down and needs down_t (the neuron-sparse and
// dense paths read down_t; an error says so when it is absent).
[[nodiscard]] inline permuted_ffn permute_ffn(const ffn_layer& f, std::span<const std::uint32_t> order) {
  constexpr std::string_view where = "permute_ffn";
  validate(f.gate, where, "gate");
  validate(f.up, where, "up");
  const std::size_t d_ff = f.d_ff();
  detail::require(f.up.rows == d_ff && f.up.cols == f.d_model(), where, "up.rows x up.cols",
                  std::to_string(f.up.rows) + " x " + std::to_string(f.up.cols), "the gate's shape (d_ff x d_model)");
  check_permutation(order, d_ff, where);
  const bool blocks = block_values(f.down.absent() ? f.down_t.type : f.down.type) != 1;
  if (f.down_t.absent() && (f.down.absent() || blocks)) {
    detail::fail_described(where, "down_t", "absent",
                           f.down.absent()
                               ? "W_down or W_downᵀ"
                               : "W_downᵀ for a q8_0 / q4_0 W_down (its columns cannot move without requantizing)");
  }
  permuted_ffn p;
  const auto rows = [&](const weight_view& w, std::vector<std::byte>& out) {
    const std::size_t rb = row_bytes(w.type, w.cols);
    out.resize(w.rows * rb);
    for (std::size_t i = 0; i < w.rows; ++i) {
      std::memcpy(out.data() + i * rb, static_cast<const std::byte*>(w.data) + order[i] * w.row_stride, rb);
    }
    return weight_view(out.data(), w.type, w.rows, w.cols, rb);
  };
  p.layer.act = f.act;
  p.layer.gate = rows(f.gate, p.gate);
  p.layer.up = rows(f.up, p.up);
  if (!f.down_t.absent()) {
    validate(f.down_t, where, "down_t");
    detail::require(f.down_t.rows == d_ff, where, "down_t.rows", f.down_t.rows, "d_ff = " + std::to_string(d_ff));
    p.layer.down_t = rows(f.down_t, p.down_t);
  }
  if (!f.down.absent() && !blocks) {
    validate(f.down, where, "down");
    detail::require(f.down.cols == d_ff, where, "down.cols", f.down.cols, "d_ff = " + std::to_string(d_ff));
    const std::size_t e = block_bytes(f.down.type);
    p.down.resize(f.down.rows * d_ff * e);
    for (std::size_t r = 0; r < f.down.rows; ++r) {
      const auto* src = static_cast<const std::byte*>(f.down.data) + r * f.down.row_stride;
      std::byte* dst = p.down.data() + r * d_ff * e;
      for (std::size_t i = 0; i < d_ff; ++i) std::memcpy(dst + i * e, src + order[i] * e, e);
    }
    p.layer.down = weight_view(p.down.data(), f.down.type, f.down.rows, d_ff, d_ff * e);
  }
  return p;
}

}  // namespace actsparse
