#pragma once
// An extension point of the selectors: faster versions of their three index-order passes over
// every score (selectors/detail/partition.hpp: scan_scores, sum_and_gather and the emission of
// a cut), which a backend may install. None is installed by default: the selectors then run
// their portable passes. The CPU backend installs AVX-512 versions when its kernels are linked
// (implementation.hpp) and the CPU has AVX-512 (cpu::use_simd_selection turns them on / off).
// An installed pass must give exactly the portable pass's result, bit for bit: the masses in
// the lane order of core/mass_lanes.hpp, the indices in index order.

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace actsparse {

struct selection_passes {
  // The lane sum of every score (core/mass_lanes.hpp) and the largest bit pattern of a score.
  struct scan_result {
    double total;
    std::uint32_t top;
  };
  // (Total) the lane sum of every score; the scores whose order key minus lo is <= width
  // (unsigned) compressed to dst in index order, and their count; (Sign) the OR of every
  // score's bits. Positive: the keys are the raw bits (a bracket of non-negative scores).
  struct gather_result {
    double total;
    std::size_t inside;
    std::uint32_t bits;
  };
  // The indices whose key is >= tk (Strict: > tk), in index order, to dst; their count and the
  // lane sum of their scores.
  struct emit_result {
    std::size_t count;
    double mass;
  };
  using scan_fn = scan_result (*)(const float* scores, std::size_t n);
  using gather_fn = gather_result (*)(const float* scores, std::size_t n, std::uint32_t lo, std::uint32_t width,
                                      float* dst);
  using emit_fn = emit_result (*)(const float* scores, std::size_t n, std::uint32_t tk, std::uint32_t* dst);

  scan_fn scan = nullptr;
  gather_fn sum_and_gather[2][2][2] = {};  // [Total][Sign][Positive]
  emit_fn emit_above[2][2] = {};           // [Positive][Strict]
};

namespace detail {
inline std::atomic<const selection_passes*>& installed_selection_passes_slot() noexcept {
  static std::atomic<const selection_passes*> slot{nullptr};
  return slot;
}
}  // namespace detail

// The passes the selectors use (null: the portable ones). `passes` must outlive its use.
inline void install_selection_passes(const selection_passes* passes) noexcept {
  detail::installed_selection_passes_slot().store(passes, std::memory_order_release);
}
[[nodiscard]] inline const selection_passes* installed_selection_passes() noexcept {
  return detail::installed_selection_passes_slot().load(std::memory_order_acquire);
}

}  // namespace actsparse
