#pragma once
// Cooperative fibers for the SIMT emulation (simt_emulation.hpp): the threads of one block run
// as user-space fibers on the calling OS thread, one at a time, and a barrier (sync_point) is
// where a fiber yields to the next runnable one until every live thread of the barrier has
// arrived. A thread that has returned drops out of its barriers (drop), as on a GPU. The order
// of the fibers is fixed (round robin from the one that blocks), so a run is deterministic.
//
// The switch is a few instructions of assembly on x86-64 (the callee-saved registers and the
// stack pointer; the kernels leave MXCSR and the x87 control word alone) and ucontext
// elsewhere. Stacks are mmap'd (256 KiB and a guard page each), kept per OS thread and reused
// from block to block, unmapped when the thread exits. Under AddressSanitizer every switch is
// announced (__sanitizer_start_switch_fiber / __sanitizer_finish_switch_fiber) and a stack's
// shadow is cleared before it is reused; under ThreadSanitizer each fiber is a TSan fiber and
// each switch a synchronizing __tsan_switch_to_fiber.

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#define ACTSPARSE_SIMT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ACTSPARSE_SIMT_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define ACTSPARSE_SIMT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ACTSPARSE_SIMT_TSAN 1
#endif
#endif
#ifdef ACTSPARSE_SIMT_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef ACTSPARSE_SIMT_TSAN
#include <sanitizer/tsan_interface.h>
#endif

#if defined(__x86_64__) && !defined(ACTSPARSE_SIMT_UCONTEXT)
#define ACTSPARSE_SIMT_ASM_SWITCH 1
#else
#include <ucontext.h>
#endif

namespace simt_fibers {

// A barrier of `expected` live threads; `phase` counts its completions.
struct sync_point {
  unsigned int expected = 0;
  unsigned int arrived = 0;
  unsigned long long phase = 0;
};

namespace detail {

inline constexpr std::size_t stack_size = std::size_t{256} * 1024;

#ifdef ACTSPARSE_SIMT_ASM_SWITCH
// Saves the callee-saved registers on the current stack, stores the stack pointer in *save_sp,
// and continues on to_sp (a stack saved by this function, or one prepared by make_context).
__attribute__((naked, noinline)) inline void switch_stack(void** /*save_sp*/, void* /*to_sp*/) {
  asm("pushq %rbp\n\t"
      "pushq %rbx\n\t"
      "pushq %r12\n\t"
      "pushq %r13\n\t"
      "pushq %r14\n\t"
      "pushq %r15\n\t"
      "movq %rsp, (%rdi)\n\t"
      "movq %rsi, %rsp\n\t"
      "popq %r15\n\t"
      "popq %r14\n\t"
      "popq %r13\n\t"
      "popq %r12\n\t"
      "popq %rbx\n\t"
      "popq %rbp\n\t"
      "ret\n\t");
}

struct context {
  void* sp = nullptr;
};

// A context that starts entry() on [lo, lo + size): switch_stack's frame of six zero registers
// and entry as its return address, entry's own return address 0 (it never returns), and the
// stack aligned as after a call.
inline void make_context(context& c, char* lo, std::size_t size, void (*entry)()) {
  auto** sp = reinterpret_cast<void**>(lo + size);  // lo and size are page multiples
  *--sp = nullptr;                                  // entry's return address
  *--sp = reinterpret_cast<void*>(entry);
  for (int i = 0; i < 6; ++i) *--sp = nullptr;  // rbp rbx r12 r13 r14 r15
  c.sp = sp;
}

inline void jump(context& from, context& to) { switch_stack(&from.sp, to.sp); }
#else
struct context {
  ucontext_t uc{};
};

inline void make_context(context& c, char* lo, std::size_t size, void (*entry)()) {
  if (getcontext(&c.uc) != 0) std::abort();
  c.uc.uc_stack.ss_sp = lo;
  c.uc.uc_stack.ss_size = size;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, entry, 0);
  // ASan's swapcontext clears the shadow of the target's uc_stack on each switch; the stack is
  // set up now, and its shadow is cleared where it is reused (prepare).
  c.uc.uc_stack.ss_sp = nullptr;
  c.uc.uc_stack.ss_size = 0;
}

inline void jump(context& from, context& to) {
  if (swapcontext(&from.uc, &to.uc) != 0) std::abort();
}
#endif

struct fiber {
  fiber() {
    const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    map_size = stack_size + page;
    void* m = mmap(nullptr, map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (m == MAP_FAILED) throw std::bad_alloc();
    map = static_cast<char*>(m);
    lo = map + page;
    if (mprotect(map, page, PROT_NONE) != 0) {  // the guard page: an overflow faults
      munmap(map, map_size);
      throw std::bad_alloc();
    }
  }
  fiber(const fiber&) = delete;
  fiber& operator=(const fiber&) = delete;
  ~fiber() { munmap(map, map_size); }

  context ctx;
  char* map = nullptr;
  std::size_t map_size = 0;
  char* lo = nullptr;  // the stack: [lo, lo + stack_size)
  const sync_point* waiting_on = nullptr;
  unsigned long long waiting_phase = 0;
  bool done = false;
  void* fake_stack = nullptr;  // ASan's, while switched out
  void* tsan_fiber = nullptr;  // TSan's, for one block
};

struct scheduler {
  std::vector<std::unique_ptr<fiber>> pool;  // reused from block to block
  context main_ctx;
  void* main_fake_stack = nullptr;
  void* main_tsan_fiber = nullptr;
  const void* main_bottom = nullptr;  // ASan: the OS thread's stack
  std::size_t main_size = 0;
  bool from_main = false;  // the switch in progress leaves the OS thread's stack
  bool active = false;
  unsigned int threads = 0;
  unsigned int live = 0;
  unsigned int current = 0;
  void (*run_thread)(void*, unsigned int) = nullptr;
  void (*resume)(void*, unsigned int) = nullptr;
  void* arg = nullptr;
};

inline scheduler& this_thread() {
  thread_local scheduler s;
  return s;
}

// After a switch has landed on a fiber (fake_stack: its own, null on its first entry).
inline void finish_switch([[maybe_unused]] scheduler& s, [[maybe_unused]] void* fake_stack) {
#ifdef ACTSPARSE_SIMT_ASAN
  const void* bottom = nullptr;
  std::size_t size = 0;
  __sanitizer_finish_switch_fiber(fake_stack, &bottom, &size);
  if (s.from_main) {
    s.main_bottom = bottom;
    s.main_size = size;
    s.from_main = false;
  }
#else
  s.from_main = false;
#endif
}

// Leaves the current fiber (blocked, or done when `finished`) for the next runnable one in
// round-robin order, or for the OS thread's stack once every fiber is done.
inline void switch_away(scheduler& s, [[maybe_unused]] bool finished) {
  fiber& self = *s.pool[s.current];
  for (unsigned int k = 1; k <= s.threads; ++k) {
    const unsigned int j = (s.current + k) % s.threads;
    fiber& f = *s.pool[j];
    if (f.done || (f.waiting_on != nullptr && f.waiting_on->phase == f.waiting_phase)) continue;
    f.waiting_on = nullptr;
    if (&f == &self) return;
    s.current = j;
    s.resume(s.arg, j);
#ifdef ACTSPARSE_SIMT_ASAN
    __sanitizer_start_switch_fiber(finished ? nullptr : &self.fake_stack, f.lo, stack_size);
#endif
#ifdef ACTSPARSE_SIMT_TSAN
    __tsan_switch_to_fiber(f.tsan_fiber, 0);
#endif
    jump(self.ctx, f.ctx);
    finish_switch(s, self.fake_stack);
    return;
  }
  if (s.live != 0) {
    std::fputs("simt emulation: deadlock, every live thread of the block waits at a barrier that cannot complete\n",
               stderr);
    std::abort();
  }
#ifdef ACTSPARSE_SIMT_ASAN
  __sanitizer_start_switch_fiber(nullptr, s.main_bottom, s.main_size);
#endif
#ifdef ACTSPARSE_SIMT_TSAN
  __tsan_switch_to_fiber(s.main_tsan_fiber, 0);
#endif
  jump(self.ctx, s.main_ctx);
  std::abort();  // a finished fiber is never resumed
}

[[noreturn]] inline void fiber_entry() {
  scheduler& s = this_thread();
  finish_switch(s, nullptr);
  const unsigned int t = s.current;
  s.run_thread(s.arg, t);  // noexcept: run() takes a function that catches
  fiber& self = *s.pool[t];
  self.done = true;
  --s.live;
  switch_away(s, true);
  std::abort();
}

}  // namespace detail

// Waits until every live thread of b has arrived (or returned).
inline void wait(sync_point& b) {
  if (++b.arrived >= b.expected) {
    b.arrived = 0;
    ++b.phase;
    return;
  }
  detail::scheduler& s = detail::this_thread();
  detail::fiber& self = *s.pool[s.current];
  self.waiting_on = &b;
  self.waiting_phase = b.phase;
  detail::switch_away(s, false);
}

// The calling thread leaves b: it has arrived at the current phase and is not expected at the
// next ones (std::barrier::arrive_and_drop).
inline void drop(sync_point& b) {
  --b.expected;
  if (b.arrived != 0 && b.arrived >= b.expected) {
    b.arrived = 0;
    ++b.phase;
  }
}

// Runs run_thread(arg, t) for t in [0, threads) as fibers on the calling OS thread and returns
// when all have returned. resume(arg, t) is called each time thread t is switched in (first
// entry included): it restores what is per thread. run_thread must not throw.
inline void run(unsigned int threads, void (*run_thread)(void*, unsigned int) noexcept,
                void (*resume)(void*, unsigned int) noexcept, void* arg) {
  if (threads == 0) return;
  detail::scheduler& s = detail::this_thread();
  if (s.active) {
    std::fputs("simt emulation: a launch inside a launch\n", stderr);
    std::abort();
  }
  while (s.pool.size() < threads) s.pool.push_back(std::make_unique<detail::fiber>());
  for (unsigned int t = 0; t < threads; ++t) {
    detail::fiber& f = *s.pool[t];
#ifdef ACTSPARSE_SIMT_ASAN
    // Frames a previous fiber left (it never returned from fiber_entry) are still poisoned.
    __asan_unpoison_memory_region(f.lo, detail::stack_size);
#endif
    detail::make_context(f.ctx, f.lo, detail::stack_size, detail::fiber_entry);
    f.waiting_on = nullptr;
    f.done = false;
    f.fake_stack = nullptr;
#ifdef ACTSPARSE_SIMT_TSAN
    f.tsan_fiber = __tsan_create_fiber(0);
#endif
  }
  s.active = true;
  s.threads = threads;
  s.live = threads;
  s.current = 0;
  s.run_thread = run_thread;
  s.resume = resume;
  s.arg = arg;
  s.from_main = true;
  resume(arg, 0);
#ifdef ACTSPARSE_SIMT_ASAN
  __sanitizer_start_switch_fiber(&s.main_fake_stack, s.pool[0]->lo, detail::stack_size);
#endif
#ifdef ACTSPARSE_SIMT_TSAN
  s.main_tsan_fiber = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(s.pool[0]->tsan_fiber, 0);
#endif
  detail::jump(s.main_ctx, s.pool[0]->ctx);
#ifdef ACTSPARSE_SIMT_ASAN
  __sanitizer_finish_switch_fiber(s.main_fake_stack, nullptr, nullptr);
#endif
#ifdef ACTSPARSE_SIMT_TSAN
  // A fiber that has finished never returned from its frames: a fresh TSan fiber per block.
  for (unsigned int t = 0; t < threads; ++t) __tsan_destroy_fiber(s.pool[t]->tsan_fiber);
#endif
  s.active = false;
}

}  // namespace simt_fibers
