#pragma once
// Runs generated Metal kernels on the CPU. A dispatch of G threadgroups of T threads starts
// T std::threads; they run the threadgroups one after another (so a kernel's `threadgroup`
// variables can be function statics, see metal_keywords.hpp), with threadgroup_barrier as a
// barrier of the group and the simdgroup functions (simd_shuffle_xor, simd_ballot) as a
// barrier of 32 threads around a slot array. The simdgroup is 32 wide, as on Apple GPUs.
// It checks indexing, synchronization and results of the kernels' logic; it says nothing
// about the GPU's memory model, its math library (exp, tanh) or speed.
//
// The names in namespace metal are MSL's (what the generated source calls); a kernel's
// thread-position arguments ([[thread_index_in_threadgroup]] and the like) are passed by the
// test from the emulated_thread of each call.

#include <actsparse/core/dtype.hpp>

#include <array>
#include <barrier>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

namespace metal {

// As glibc's <sys/types.h> typedefs of the same names, so that `using namespace metal` in
// the kernels' namespace does not make them ambiguous.
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
static_assert(sizeof(ulong) == 8, "MSL's ulong is 64 bits");

struct half {
  ushort bits;
  explicit operator float() const { return actsparse::to_f32(actsparse::f16{bits}); }
};

template <class T, class U>
T as_type(U u) {
  static_assert(sizeof(T) == sizeof(U), "as_type reinterprets bits of the same size");
  return std::bit_cast<T>(u);
}

inline float fma(float a, float b, float c) { return std::fma(a, b, c); }
inline float fabs(float v) { return std::fabs(v); }
inline uint popcount(uint v) { return static_cast<uint>(std::popcount(v)); }

// The host's libm: what core/activation.hpp calls, so the activations compare bit for bit
// here. A GPU's precise::exp and precise::tanh are within a few ulps of it, not equal.
namespace precise {
inline float exp(float v) { return std::exp(v); }
inline float tanh(float v) { return std::tanh(v); }
}  // namespace precise

enum class mem_flags : unsigned { mem_none = 0, mem_device = 1, mem_threadgroup = 2, mem_texture = 4 };

class simd_vote {
 public:
  typedef ulong vote_t;
  explicit simd_vote(vote_t v) : v_(v) {}
  explicit operator vote_t() const { return v_; }

 private:
  vote_t v_;
};

}  // namespace metal

namespace metal_emulation {

inline constexpr unsigned simd_width = 32;

// The thread-position attributes of one kernel invocation.
struct emulated_thread {
  unsigned int thread_position_in_grid = 0;
  unsigned int thread_index_in_threadgroup = 0;
  unsigned int threadgroup_position_in_grid = 0;
  unsigned int threadgroups_per_grid = 0;
  unsigned int thread_index_in_simdgroup = 0;
  unsigned int simdgroup_index_in_threadgroup = 0;
};

struct simdgroup_state {
  std::barrier<> barrier{simd_width};
  std::array<std::uint64_t, simd_width> slot{};
};

struct threadgroup_state {
  explicit threadgroup_state(unsigned int threads) : barrier(threads), simdgroups(threads / simd_width) {
    for (auto& s : simdgroups) s = std::make_unique<simdgroup_state>();
  }
  std::barrier<> barrier;
  std::vector<std::unique_ptr<simdgroup_state>> simdgroups;
};

inline thread_local threadgroup_state* current_group = nullptr;
inline thread_local emulated_thread current_thread{};

inline simdgroup_state& current_simdgroup() {
  return *current_group->simdgroups[current_thread.simdgroup_index_in_threadgroup];
}

// Runs kernel(const emulated_thread&) on `groups` threadgroups of `threads` threads
// (a multiple of 32).
template <class Kernel>
void dispatch(std::size_t groups, unsigned int threads, Kernel kernel) {
  if (groups == 0) return;
  std::vector<std::unique_ptr<threadgroup_state>> states(groups);
  for (auto& s : states) s = std::make_unique<threadgroup_state>(threads);
  std::barrier<> between(threads);  // every thread leaves group g before any enters g + 1
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (std::size_t g = 0; g < groups; ++g) {
        const auto group = static_cast<unsigned int>(g);
        current_group = states[g].get();
        current_thread = {group * threads + t, t, group, static_cast<unsigned int>(groups), t % simd_width,
                          t / simd_width};
        kernel(current_thread);
        // A thread that has returned no longer takes part in barriers (as on a GPU).
        current_simdgroup().barrier.arrive_and_drop();
        current_group->barrier.arrive_and_drop();
        between.arrive_and_wait();
      }
    });
  }
  for (auto& th : pool) th.join();
}

}  // namespace metal_emulation

namespace metal {

inline void threadgroup_barrier(mem_flags /*flags*/) { metal_emulation::current_group->barrier.arrive_and_wait(); }

template <class T>
T simd_shuffle_xor(T v, ushort mask) {
  static_assert(sizeof(T) <= sizeof(std::uint64_t));
  auto& s = metal_emulation::current_simdgroup();
  const unsigned int lane = metal_emulation::current_thread.thread_index_in_simdgroup;
  std::memcpy(&s.slot[lane], &v, sizeof(T));
  s.barrier.arrive_and_wait();
  T r;
  std::memcpy(&r, &s.slot[lane ^ mask], sizeof(T));
  s.barrier.arrive_and_wait();
  return r;
}

inline simd_vote simd_ballot(bool p) {
  auto& s = metal_emulation::current_simdgroup();
  const unsigned int lane = metal_emulation::current_thread.thread_index_in_simdgroup;
  s.slot[lane] = p ? 1U : 0U;
  s.barrier.arrive_and_wait();
  ulong mask = 0;
  for (unsigned int i = 0; i < metal_emulation::simd_width; ++i) mask |= s.slot[i] << i;
  s.barrier.arrive_and_wait();
  return simd_vote(mask);
}

}  // namespace metal
