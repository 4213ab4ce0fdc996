#pragma once
// How the CPU backend runs a kernel's tasks. A kernel cuts its work into a fixed list of
// tasks (fixed by the shapes, never by the thread count) whose outputs are disjoint, so the
// result is bitwise the same however the tasks are spread over threads. Three ways to run:
//   executor{}                    the calling thread runs every task
//   executor{pool}                a thread_pool runs them (a short spin, then blocking waits)
//   executor::split({ith, nth})   the engine calls the kernel from each of its nth threads;
//                                 this one runs its contiguous share (ggml's ith / nth)
//   executor::split({ith, nth}, barrier)
//                                 the same, with the engine's barrier across its nth threads
//                                 (ggml_barrier): kernels with phases (the gated FFN, the
//                                 token FFN) then run too, each thread passing the same
//                                 workspace; sync() waits at the barrier between phases

#include <actsparse/core/error.hpp>
#include <actsparse/core/executor.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace actsparse::cpu {

// A fixed set of worker threads. Between jobs a worker first spins for up to `spin` (a new
// job that comes within it starts without a wake-up: the FFN's second phase follows its
// first by microseconds, and a futex wake-up on a virtual machine costs tens of them), then
// sleeps on a condition variable (the host may be shared: threads that spin for long stall
// others). spin = 0 never spins. The caller spins the same way while the workers finish.
class thread_pool {
 public:
  static constexpr std::chrono::microseconds default_spin{50};

  // threads: how many threads run a job, the caller included (>= 1).
  explicit thread_pool(std::size_t threads, std::chrono::microseconds spin = default_spin)
      : threads_(threads), spin_(spin) {
    ::actsparse::detail::require(threads >= 1, "cpu::thread_pool", "threads", threads,
                                 "at least 1 (the calling thread)");
    ::actsparse::detail::require(spin.count() >= 0, "cpu::thread_pool", "spin (microseconds)", spin.count(),
                                 "at least 0");
    workers_.reserve(threads - 1);
    for (std::size_t i = 1; i < threads; ++i) workers_.emplace_back([this] { work(); });
  }
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;
  ~thread_pool() {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      stop_.store(true, std::memory_order_release);
    }
    wake_.notify_all();
    for (auto& w : workers_) w.join();
  }

  [[nodiscard]] std::size_t concurrency() const noexcept { return threads_; }

  // Runs task(0..n-1) on the pool's threads and the caller; returns when all are done.
  // Tasks are taken in order from a shared counter; an exception in a task is rethrown here.
  void parallel_for(std::size_t n, const std::function<void(std::size_t)>& task) {
    if (n == 0) return;
    if (threads_ == 1 || n == 1) {
      for (std::size_t i = 0; i < n; ++i) task(i);
      return;
    }
    const std::lock_guard<std::mutex> one_job(job_mutex_);  // one job at a time
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      task_ = &task;
      count_ = n;
      next_.store(0, std::memory_order_relaxed);
      busy_.store(workers_.size(), std::memory_order_relaxed);
      error_ = nullptr;
      generation_.fetch_add(1, std::memory_order_release);  // publishes the job to spinning workers
    }
    wake_.notify_all();
    run_tasks();
    if (!spin_until([this] { return busy_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [this] { return busy_.load(std::memory_order_acquire) == 0; });
    }
    const std::lock_guard<std::mutex> lock(mutex_);
    task_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  // Spins until ready() or `spin_` has passed; whether ready() came true.
  template <class Ready>
  bool spin_until(Ready&& ready) const {
    if (ready()) return true;
    if (spin_.count() == 0) return false;
    const auto until = std::chrono::steady_clock::now() + spin_;
    for (;;) {
      for (int i = 0; i < 64; ++i) {
        if (ready()) return true;
        pause();
      }
      if (std::chrono::steady_clock::now() >= until) return ready();
    }
  }
  static void pause() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    asm volatile("yield");
#endif
  }

  void run_tasks() {
    for (std::size_t i = next_.fetch_add(1); i < count_; i = next_.fetch_add(1)) {
      try {
        (*task_)(i);
      } catch (...) {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
  }

  void work() {
    std::size_t seen = 0;
    const auto job_or_stop = [&] {
      return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen;
    };
    for (;;) {
      if (!spin_until(job_or_stop)) {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, job_or_stop);
      }
      if (stop_.load(std::memory_order_acquire)) return;
      {
        // The job's fields were written under mutex_ before generation_ moved; taking it
        // here orders this worker's reads after those writes for every checker.
        const std::lock_guard<std::mutex> lock(mutex_);
        seen = generation_.load(std::memory_order_relaxed);
      }
      run_tasks();
      if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        const std::lock_guard<std::mutex> lock(mutex_);  // the caller may be about to wait
        done_.notify_one();
      }
    }
  }

  std::size_t threads_;
  std::chrono::microseconds spin_;
  std::vector<std::thread> workers_;
  std::mutex job_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(std::size_t)>* task_ = nullptr;
  std::size_t count_ = 0;
  std::atomic<std::size_t> next_{0};
  std::atomic<std::size_t> busy_{0};
  std::atomic<std::size_t> generation_{0};
  std::atomic<bool> stop_{false};
  std::exception_ptr error_;
};

// The engine's barrier across the threads of a split: wait(context) returns once every one
// of the nth threads has called it (ggml: [](void* tp) { ggml_barrier(tp); } with the
// threadpool as context).
struct barrier {
  void (*wait)(void* context) = nullptr;
  void* context = nullptr;
};

class executor {
 public:
  executor() = default;                                            // the calling thread runs every task
  explicit executor(thread_pool& pool) noexcept : pool_(&pool) {}  // the pool runs them
  static executor split(thread_split s, barrier b = {}) {
    ::actsparse::detail::require(s.count >= 1 && s.index < s.count, "cpu::executor::split", "index", s.index,
                                 "index < count (count = " + std::to_string(s.count) + ")");
    executor e;
    e.split_ = s;
    e.barrier_ = b;
    return e;
  }

  // Threads that run a job's tasks (for split: the engine's nth).
  [[nodiscard]] std::size_t concurrency() const noexcept {
    return pool_ != nullptr ? pool_->concurrency() : split_.count;
  }
  // Whether this thread runs only its share of each job: then a kernel whose second phase
  // reads the first phase's output needs the engine's barrier between two calls.
  [[nodiscard]] bool splits_work() const noexcept { return pool_ == nullptr && split_.count > 1; }
  // Whether a kernel with phases can run here: every executor but a split without a barrier.
  [[nodiscard]] bool can_sync() const noexcept { return !splits_work() || barrier_.wait != nullptr; }
  // Between two phases: waits at the engine's barrier under a split (every parallel_for of a
  // pool or of the calling thread has finished all its tasks when it returns).
  void sync() const {
    if (splits_work() && barrier_.wait != nullptr) barrier_.wait(barrier_.context);
  }
  // This thread's index in a split (0 otherwise).
  [[nodiscard]] std::size_t thread_index() const noexcept { return pool_ == nullptr ? split_.index : 0; }

  template <class F>
  void parallel_for(std::size_t n, F&& task) const {
    if (pool_ != nullptr) {
      pool_->parallel_for(n, std::function<void(std::size_t)>(std::forward<F>(task)));
      return;
    }
    for (std::size_t i = split_.begin(n); i < split_.end(n); ++i) task(i);
  }

 private:
  thread_pool* pool_ = nullptr;
  thread_split split_{};
  barrier barrier_{};
};

static_assert(actsparse::executor<executor>);

}  // namespace actsparse::cpu
