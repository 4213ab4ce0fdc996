#pragma once
// What the memory system gives a decode step's access pattern with nothing computed: the same
// weight rows read in the kernels' order and grouping (rows side by side in 512-byte runs, a
// software prefetch 1 KiB ahead in each row, the next group's rows prefetched near the ends),
// summed as 64-bit integers and thrown away. bench_cpu_ffn's cpu_ffn_step rows time it against
// a read of every row of the same layer: how far a random set of rows falls short of dense's
// speed per byte before any arithmetic, i.e. the ceiling of a gathered step on this machine.

#include <actsparse/backends/cpu/backend.hpp>

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#endif

namespace actsparse_bench {

inline constexpr std::size_t read_run_bytes = 512;        // bytes of a row per visit (the 16-bit kernels' run)
inline constexpr std::size_t read_prefetch_bytes = 1024;  // the kernels' prefetch distance

namespace detail {

// Σ of the 64-bit words of `lines` 64-byte lines from p, with two independent vector sums.
[[nodiscard]] inline std::uint64_t sum_lines_portable(const std::byte* p, std::size_t lines) noexcept {
  std::uint64_t a[8] = {};
  std::uint64_t b[8] = {};
  std::size_t line = 0;
  for (; line + 2 <= lines; line += 2) {
    std::uint64_t w[16];
    std::memcpy(w, p + line * 64, sizeof w);
    for (std::size_t k = 0; k < 8; ++k) a[k] += w[k];
    for (std::size_t k = 0; k < 8; ++k) b[k] += w[8 + k];
  }
  for (; line < lines; ++line) {
    std::uint64_t w[8];
    std::memcpy(w, p + line * 64, sizeof w);
    for (std::size_t k = 0; k < 8; ++k) a[k] += w[k];
  }
  std::uint64_t total = 0;
  for (std::size_t k = 0; k < 8; ++k) total += a[k] + b[k];
  return total;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The same with one 64-byte load per line (the library's kernels read with AVX-512 here; the
// portable loop, built for the baseline x86-64, spills its accumulators and is slower than them).
[[nodiscard]] __attribute__((target("avx512f"))) inline std::uint64_t sum_lines_avx512(const std::byte* p,
                                                                                       std::size_t lines) noexcept {
  __m512i a = _mm512_setzero_si512();
  __m512i b = _mm512_setzero_si512();
  std::size_t line = 0;
  for (; line + 2 <= lines; line += 2) {
    a = _mm512_add_epi64(a, _mm512_loadu_si512(p + line * 64));
    b = _mm512_add_epi64(b, _mm512_loadu_si512(p + line * 64 + 64));
  }
  if (line < lines) a = _mm512_add_epi64(a, _mm512_loadu_si512(p + line * 64));
  alignas(64) std::uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(a, b));
  std::uint64_t total = 0;
  for (const std::uint64_t v : lanes) total += v;
  return total;
}
#endif

}  // namespace detail

// Σ of the 64-bit words of `lines` lines from p: AVX-512 where the CPU has it, else portable.
[[nodiscard]] inline std::uint64_t sum_lines(const std::byte* p, std::size_t lines) noexcept {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  if (avx512) return detail::sum_lines_avx512(p, lines);
#endif
  return detail::sum_lines_portable(p, lines);
}

// Σ of the 64-bit words of rows row(k) for k in [begin, end), R rows at a time (then one by
// one), each `bytes` long (a multiple of 64; what is left over is not read).
template <std::size_t R, class Row>
[[nodiscard]] std::uint64_t read_rows(const Row& row, std::size_t begin, std::size_t end, std::size_t bytes) noexcept {
  std::uint64_t acc = 0;
  const std::size_t lines = bytes / 64;
  // Lines [from, to) of the row at p, each prefetching the line read_prefetch_bytes ahead
  // (past the row's end: into `next`, the row read after it, when there is one).
  const auto visit = [&](const std::byte* p, std::size_t from, std::size_t to, const std::byte* next) {
    for (std::size_t line = from; line < to; ++line) {
      const std::size_t ahead = line * 64 + read_prefetch_bytes;
      if (ahead < lines * 64) {
        __builtin_prefetch(p + ahead);
      } else if (next != nullptr) {
        __builtin_prefetch(next + ahead - lines * 64);
      }
    }
    acc += sum_lines(p + from * 64, to - from);
  };
  constexpr std::size_t run_lines = read_run_bytes / 64;
  std::size_t k = begin;
  for (; k + R <= end; k += R) {
    const std::byte* group[R];
    const std::byte* following[R] = {};
    for (std::size_t r = 0; r < R; ++r) group[r] = row(k + r);
    if (k + 2 * R <= end) {
      for (std::size_t r = 0; r < R; ++r) following[r] = row(k + R + r);
    }
    for (std::size_t line = 0; line < lines; line += run_lines) {
      const std::size_t to = line + run_lines < lines ? line + run_lines : lines;
      for (std::size_t r = 0; r < R; ++r) visit(group[r], line, to, following[r]);
    }
  }
  for (; k < end; ++k) visit(row(k), 0, lines, nullptr);
  return acc;
}

// The rows of one [rows × bytes] matrix at `base` listed in `kept` (null: every row), on the
// executor's threads in the GEMV's fixed tasks (cpu::rows_per_task listed rows): 8 rows
// at a time for every row, 4 for a list (as the 16-bit kernels read them).
template <class Executor>
void read_matrix_rows(const void* base, std::size_t bytes, const std::uint32_t* kept, std::size_t count,
                      const Executor& ex) {
  constexpr std::size_t per_task = actsparse::cpu::rows_per_task;
  const auto* b = static_cast<const std::byte*>(base);
  const auto row = [&](std::size_t k) { return b + (kept != nullptr ? kept[k] : k) * bytes; };
  ex.parallel_for((count + per_task - 1) / per_task, [&](std::size_t t) {
    const std::size_t begin = t * per_task;
    const std::size_t end = begin + per_task < count ? begin + per_task : count;
    const std::uint64_t sum =
        kept != nullptr ? read_rows<4>(row, begin, end, bytes) : read_rows<8>(row, begin, end, bytes);
    benchmark::DoNotOptimize(sum);
  });
}

}  // namespace actsparse_bench
