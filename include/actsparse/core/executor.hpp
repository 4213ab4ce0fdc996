#pragma once
// How a kernel's independent tasks are run. The engine owns threads: it can pass its own
// executor, or split work itself with (thread index, thread count). Task partitions are
// fixed by the kernel, never by the executor, so results do not depend on the thread count.

#include <concepts>
#include <cstddef>
#include <functional>

namespace actsparse {

template <class E>
concept executor = requires(E& e, std::size_t n, std::function<void(std::size_t)> task) {
  {e.parallel_for(n, task)};
  { e.concurrency() } -> std::convertible_to<std::size_t>;
};

// Runs every task on the calling thread, in order.
struct inline_executor {
  template <class F>
  void parallel_for(std::size_t n, F&& task) const {
    for (std::size_t i = 0; i < n; ++i) task(i);
  }
  [[nodiscard]] constexpr std::size_t concurrency() const noexcept { return 1; }
};

static_assert(executor<inline_executor>);

// The engine's own split: thread `index` of `count` takes its share of n tasks.
struct thread_split {
  std::size_t index = 0;
  std::size_t count = 1;

  // [begin, end) of n tasks for this thread: contiguous, fixed by (n, count).
  [[nodiscard]] constexpr std::size_t begin(std::size_t n) const noexcept { return n * index / count; }
  [[nodiscard]] constexpr std::size_t end(std::size_t n) const noexcept { return n * (index + 1) / count; }
};

}  // namespace actsparse
