#pragma once
// Runs generated CUDA kernels on the CPU: one std::thread per CUDA thread, one block at a
// time (so a kernel's `__shared__` variables can be function statics), __syncthreads as a
// barrier of the block, and the warp primitives (__shfl_xor_sync, __ballot_sync) as a
// barrier of 32 threads around a slot array. It checks indexing, synchronization and
// results of the kernels' logic; it says nothing about GPU memory models or speed.
// Identifiers are CUDA's (reserved names in C++; acceptable in this test only).
//
// The kernels come from cuda::kernel_source (no prelude); the prelude is defined here: the
// macros of cuda::prelude over the emulated built-ins, except three that only NVRTC takes:
// GPU_KERNEL gives C++ linkage (each config's kernels sit in a namespace of their own, and
// configs share kernel names such as actsparse_compact_t64), no unrolling hints (g++ warns
// on #pragma unroll), and f16 -> f32 by core's conversion in place of the PTX cvt.

#include <actsparse/backends/gpu/device_math.hpp>  // before the dialect macros below: it stringifies them
#include <actsparse/core/dtype.hpp>

#include <math.h>  // NOLINT: the kernels call expf, tanhf, fmaf, fabsf

#include <array>
#include <barrier>
#include <bit>
#include <cstring>
#include <memory>
#include <thread>
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
inline thread_local emulated_dim3 threadIdx;
inline thread_local emulated_dim3 blockIdx;
inline thread_local emulated_dim3 blockDim;
inline thread_local emulated_dim3 gridDim;

struct emulated_warp {
  std::barrier<> barrier{32};
  std::array<unsigned long long, 32> slot{};  // 8 bytes: shuffles of double too
};
struct emulated_block {
  explicit emulated_block(unsigned int threads) : barrier(threads), warps(threads / 32) {
    for (auto& w : warps) w = std::make_unique<emulated_warp>();
  }
  std::barrier<> barrier;
  std::vector<std::unique_ptr<emulated_warp>> warps;
};
inline thread_local emulated_block* emulated_current = nullptr;

inline void __syncthreads() { emulated_current->barrier.arrive_and_wait(); }

template <class T>
T __shfl_xor_sync(unsigned int /*mask*/, T v, int offset) {
  static_assert(sizeof(T) == 4 || sizeof(T) == 8);
  emulated_warp& w = *emulated_current->warps[threadIdx.x / 32];
  const unsigned int lane = threadIdx.x & 31U;
  std::memcpy(&w.slot[lane], &v, sizeof(T));
  w.barrier.arrive_and_wait();
  T r;
  std::memcpy(&r, &w.slot[lane ^ static_cast<unsigned int>(offset)], sizeof(T));
  w.barrier.arrive_and_wait();
  return r;
}

inline unsigned int __ballot_sync(unsigned int /*mask*/, bool p) {
  emulated_warp& w = *emulated_current->warps[threadIdx.x / 32];
  const unsigned int lane = threadIdx.x & 31U;
  w.slot[lane] = p ? 1U : 0U;
  w.barrier.arrive_and_wait();
  unsigned int mask = 0;
  for (unsigned int i = 0; i < 32; ++i) mask |= static_cast<unsigned int>(w.slot[i]) << i;
  w.barrier.arrive_and_wait();
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

// Runs kernel() as a grid_x x grid_y grid of blocks of `threads` threads.
template <class Kernel>
void emulate_launch(std::size_t grid_x, std::size_t grid_y, unsigned int threads, Kernel kernel) {
  for (std::size_t b = 0; b < grid_x * grid_y; ++b) {
    emulated_block block(threads);
    std::vector<std::thread> pool;
    pool.reserve(threads);
    for (unsigned int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        threadIdx = {t, 0, 0};
        blockIdx = {static_cast<unsigned int>(b % grid_x), static_cast<unsigned int>(b / grid_x), 0};
        blockDim = {threads, 0, 0};
        gridDim = {static_cast<unsigned int>(grid_x), static_cast<unsigned int>(grid_y), 0};
        emulated_current = &block;
        kernel();
        // A thread that has finished no longer takes part in barriers (as on a GPU).
        block.warps[t / 32]->barrier.arrive_and_drop();
        block.barrier.arrive_and_drop();
      });
    }
    for (auto& th : pool) th.join();
  }
}

// Runs kernel() as grid blocks of `threads` threads.
template <class Kernel>
void emulate_launch(std::size_t grid, unsigned int threads, Kernel kernel) {
  emulate_launch(grid, 1, threads, kernel);
}
