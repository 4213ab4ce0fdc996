#pragma once
// The CPU backend's tuning: every speed choice that is a number, as data with today's values
// as defaults (measured figures and how they were measured: docs/PERFORMANCE.md). None of
// these changes a result bit, except the crossover, which changes only the sign of an exact
// zero (see cpu_backend). Pass a modified value as cpu_backend::tuning.

#include <actsparse/core/dtype.hpp>

#include <cstddef>
#include <optional>

namespace actsparse::cpu {

// What the per-target kernels read: software prefetch distances and the run of a row read per
// step. Passed with every kernel call.
struct kernel_tuning {
  // Bytes ahead in each row stream of the f32 / f16 / bf16 and f32-activation block kernels
  // (and past a row's end into the next row of the call): rows are short runs and the hardware
  // prefetchers retrain at every row.
  std::size_t prefetch_bytes = 1024;
  // A row gather or sparse axpy over 16-bit rows reads 4 rows at once with this distance:
  // the same bytes in flight over fewer, scattered rows.
  std::size_t scattered_prefetch_bytes = 2048;
  // Bytes of each row read before the GEMV moves to the next row of its group: longer runs
  // keep DRAM pages open. Per element size: 4-byte rows, 2-byte rows.
  std::size_t row_step_bytes_f32 = 256;
  std::size_t row_step_bytes_16bit = 512;
  // The integer GEMV (x quantized): bytes ahead in each row stream.
  std::size_t int8_prefetch_bytes = 1024;
  // The interleaved GEMV: bytes ahead in each stream of 16 rows, and groups of 16 rows read
  // at once (1, 2, 4 or 8: streams in flight per thread).
  std::size_t interleaved_prefetch_bytes = 2048;
  std::size_t interleaved_groups = 4;
  // The f32-activation block axpy: bytes ahead (a row's share of a column range is a few
  // hundred bytes, which the hardware prefetchers do not see coming).
  std::size_t block_axpy_prefetch_bytes = 8192;
};

// The kept fraction of the d_ff neurons from which the neuron-sparse gated FFN reads every row
// (as dense does, with h = 0 for the dropped neurons) instead of gathering the kept rows: where
// a gather stops beating a dense read. Per dtype of W_up, one thread or more, and whether W_up
// and W_down have interleaved copies (cpu::weight_layouts): those make the dense read faster.
struct crossover_table {
  struct entry {
    double one_thread = 1.0;
    double more_threads = 1.0;
  };
  entry f32{0.95, 0.95};
  entry f16{0.9, 0.85};
  entry bf16{0.9, 0.85};
  entry q8_0{0.9, 0.9};
  entry q4_0{0.8, 0.8};
  entry q8_0_interleaved{0.7, 0.7};
  entry q4_0_interleaved{0.4, 0.35};

  [[nodiscard]] constexpr entry of(dtype up, bool interleaved) const noexcept {
    switch (up) {
      case dtype::f32:
        return f32;
      case dtype::f16:
        return f16;
      case dtype::bf16:
        return bf16;
      case dtype::q8_0:
        return interleaved ? q8_0_interleaved : q8_0;
      case dtype::q4_0:
        return interleaved ? q4_0_interleaved : q4_0;
    }
    return {};
  }
  [[nodiscard]] constexpr double at(dtype up, std::size_t threads, bool interleaved) const noexcept {
    const entry e = of(up, interleaved);
    return threads <= 1 ? e.one_thread : e.more_threads;
  }
  // The smallest over thread counts (what a workspace sized before the executor is known needs).
  [[nodiscard]] constexpr double lowest(dtype up, bool interleaved) const noexcept {
    const entry e = of(up, interleaved);
    return e.one_thread < e.more_threads ? e.one_thread : e.more_threads;
  }
};

struct tuning {
  kernel_tuning kernels{};
  crossover_table crossover{};
  // Set: one crossover fraction in (0, 1] for every case instead of the table (1 reads every
  // row only when every neuron is kept, as dense does anyway).
  std::optional<double> read_all_from{};
};

}  // namespace actsparse::cpu
