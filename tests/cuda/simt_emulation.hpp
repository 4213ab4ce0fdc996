#pragma once
// Runs generated CUDA kernels on the CPU, one block at a time (so a kernel's `__shared__`
// variables can be function statics): the threads of a block run as cooperative fibers on
// the calling OS thread (simt_fibers.hpp), __syncthreads is a barrier of the block, and the
// warp primitives (__shfl_xor_sync, __ballot_sync) a barrier of the warp's 32 threads around a
// slot array. It checks indexing, synchronization and results of the kernels' logic; it says
// nothing about GPU memory models or speed. Identifiers are CUDA's (reserved names in C++;
// acceptable in this test only).
//
// The kernels come from cuda::kernel_source (no prelude); the prelude is defined here: the
// macros of cuda::prelude over the emulated built-ins, except three that only NVRTC takes:
// GPU_KERNEL gives C++ linkage (each config's kernels sit in a namespace of their own, and
// configs share kernel names such as actsparse_compact_t64), no unrolling hints (g++ warns
// on #pragma unroll), and f16 -> f32 by core's conversion in place of the PTX cvt.

#include <actsparse/backends/gpu/device_math.hpp>  // before the dialect macros below: it stringifies them
#include <actsparse/core/dtype.hpp>

#include <math.h>  // NOLINT: the kernels call expf, tanhf, fmaf, fabsf

#include "simt_fibers.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstring>
#include <exception>
#include <vector>

#define __global__
#define __device__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(n)

#define GPU_KERNEL
#define GPU_FN inline
#define GPU_GLOBAL
#define GPU_THREAD
#define GPU_SHARED __shared__
#define GPU_CONSTANT constexpr
#define GPU_U64 unsigned long long
#define GPU_BARRIER() __syncthreads()
#define GPU_SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m))
#define GPU_BALLOT(p) __ballot_sync(0xffffffffu, (p))
#define GPU_POPC(v) ((unsigned int)__popc(v))
#define GPU_FMA(a, b, c) fmaf((a), (b), (c))
#define GPU_FABS(v) fabsf(v)
#define GPU_EXP(v) expf(v)
#define GPU_TANH(v) tanhf(v)
#define GPU_UNROLL
#define GPU_UNROLL_N(n)
#define GPU_GROUP_2D(width, col, row) const unsigned int col = blockIdx.x, row = blockIdx.y

struct emulated_dim3 {
  unsigned int x = 0;
  unsigned int y = 0;
  unsigned int z = 0;
};
// Per OS thread: the fibers of a block share the OS thread, and threadIdx is set each time
// a fiber is switched in (emulate_launch's resume).
inline thread_local emulated_dim3 threadIdx;
inline thread_local emulated_dim3 blockIdx;
inline thread_local emulated_dim3 blockDim;
inline thread_local emulated_dim3 gridDim;

struct emulated_warp {
  simt_fibers::sync_point barrier;
  std::array<unsigned long long, 32> slot{};  // 8 bytes: shuffles of double too
};
struct emulated_block {
  explicit emulated_block(unsigned int threads) : barrier{threads}, warps((threads + 31) / 32) {
    for (std::size_t w = 0; w < warps.size(); ++w) {
      warps[w].barrier.expected = std::min(32U, threads - static_cast<unsigned int>(w) * 32);
    }
  }
  simt_fibers::sync_point barrier;
  std::vector<emulated_warp> warps;
};
inline thread_local emulated_block* emulated_current = nullptr;

inline void __syncthreads() { simt_fibers::wait(emulated_current->barrier); }

template <class T>
T __shfl_xor_sync(unsigned int /*mask*/, T v, int offset) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  emulated_warp& w = emulated_current->warps[threadIdx.x / 32];
  const unsigned int lane = threadIdx.x & 31U;
  std::memcpy(&w.slot[lane], &v, sizeof(T));
  simt_fibers::wait(w.barrier);
  T r;
  std::memcpy(&r, &w.slot[lane ^ static_cast<unsigned int>(offset)], sizeof(T));
  simt_fibers::wait(w.barrier);
  return r;
}

inline unsigned int __ballot_sync(unsigned int /*mask*/, bool p) {
  emulated_warp& w = emulated_current->warps[threadIdx.x / 32];
  const unsigned int lane = threadIdx.x & 31U;
  w.slot[lane] = p ? 1U : 0U;
  simt_fibers::wait(w.barrier);
  unsigned int mask = 0;
  for (unsigned int i = 0; i < 32; ++i) mask |= static_cast<unsigned int>(w.slot[i]) << i;
  simt_fibers::wait(w.barrier);
  return mask;
}

inline int __popc(unsigned int v) { return std::popcount(v); }

// The prelude's primitives.
inline unsigned short actsparse_load_u16(const unsigned char* p) {
  unsigned short v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline float actsparse_load_f32(const unsigned char* p) {
  float v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline float actsparse_half_to_float(unsigned short h) { return actsparse::to_f32(actsparse::f16{h}); }
inline float actsparse_bits_to_float(unsigned int b) { return std::bit_cast<float>(b); }
inline unsigned int actsparse_float_to_bits(float f) { return std::bit_cast<unsigned int>(f); }

// Runs kernel() as a grid_x x grid_y grid of blocks of `threads` threads. An exception from
// kernel() ends its thread (as a return would) and is rethrown after the block.
template <class Kernel>
void emulate_launch(std::size_t grid_x, std::size_t grid_y, unsigned int threads, Kernel kernel) {
  struct launch {
    Kernel* kernel;
    emulated_block* block;
    std::exception_ptr error;
  };
  constexpr auto run_thread = +[](void* p, unsigned int t) noexcept {
    auto& l = *static_cast<launch*>(p);
    try {
      (*l.kernel)();
    } catch (...) {
      if (!l.error) l.error = std::current_exception();
    }
    // A thread that has finished no longer takes part in barriers (as on a GPU).
    simt_fibers::drop(l.block->warps[t / 32].barrier);
    simt_fibers::drop(l.block->barrier);
  };
  constexpr auto resume = +[](void* /*p*/, unsigned int t) noexcept { threadIdx = {t, 0, 0}; };
  blockDim = {threads, 0, 0};
  gridDim = {static_cast<unsigned int>(grid_x), static_cast<unsigned int>(grid_y), 0};
  for (std::size_t b = 0; b < grid_x * grid_y; ++b) {
    emulated_block block(threads);
    launch l{&kernel, &block, nullptr};
    blockIdx = {static_cast<unsigned int>(b % grid_x), static_cast<unsigned int>(b / grid_x), 0};
    emulated_current = &block;
    simt_fibers::run(threads, run_thread, resume, &l);
    emulated_current = nullptr;
    if (l.error) std::rethrow_exception(l.error);
  }
}

// Runs kernel() as grid blocks of `threads` threads.
template <class Kernel>
void emulate_launch(std::size_t grid, unsigned int threads, Kernel kernel) {
  emulate_launch(grid, 1, threads, kernel);
}
