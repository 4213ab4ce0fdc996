#pragma once
// Ranks for the distributed tests, without MPI: the same all-gather an engine's collective
// gives, run either in lockstep in one thread (every rank's round in turn; deterministic, fast)
// or with one thread per rank over std::barrier (so ASan / UBSan / TSan see real concurrency).
// For tests only: engines use their own collective (MPI, NCCL, gloo).

#include <actsparse/distributed/sharded_selection.hpp>

#include <barrier>
#include <cstddef>
#include <cstring>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

namespace rank_test {

// The all-gather of `ranks` threads: gather(rank, mine, all) copies every rank's `mine` (the
// same size on every rank) into `all` in rank order. A rank that fails leaves the barrier
// (arrive_and_drop), so the others finish instead of waiting for it.
class thread_group {
 public:
  explicit thread_group(std::size_t ranks) : ranks_(ranks), sync_(static_cast<std::ptrdiff_t>(ranks)) {}

  void gather(std::size_t rank, std::span<const std::byte> mine, std::span<std::byte> all) {
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      slots_.resize(ranks_ * mine.size());
      std::memcpy(slots_.data() + rank * mine.size(), mine.data(), mine.size());
    }
    sync_.arrive_and_wait();
    std::memcpy(all.data(), slots_.data(), all.size());
    sync_.arrive_and_wait();  // nobody writes the next round's slots before all have read
  }

  // Runs body(rank) on one thread per rank; returns each rank's exception (null: none).
  std::vector<std::exception_ptr> run(const std::function<void(std::size_t)>& body) {
    std::vector<std::exception_ptr> errors(ranks_);
    std::vector<std::thread> threads;
    for (std::size_t r = 0; r < ranks_; ++r) {
      threads.emplace_back([&, r] {
        try {
          body(r);
        } catch (...) {
          errors[r] = std::current_exception();
          sync_.arrive_and_drop();
        }
      });
    }
    for (std::thread& t : threads) t.join();
    return errors;
  }

 private:
  std::size_t ranks_;
  std::barrier<> sync_;
  std::mutex mutex_;
  std::vector<std::byte> slots_;
};

// One sharded selection over `scores` split into `ranks` even slices, the rounds run in
// lockstep: the global kept set (sorted global indices), each rank's selection and the rounds.
struct lockstep_result {
  std::vector<std::uint32_t> global;
  std::vector<actsparse::selection> local;
  std::size_t rounds = 0;
};

template <class Policy>
lockstep_result select_lockstep(const Policy& policy, const std::vector<float>& scores, std::size_t ranks,
                                std::size_t align = 1) {
  using namespace actsparse;
  std::vector<neuron_shard> shards(ranks);
  std::vector<sharded_selection> states(ranks);
  for (std::size_t r = 0; r < ranks; ++r) {
    shards[r] = neuron_shard::even(scores.size(), r, ranks, align);
    states[r].begin(policy, std::span<const float>(scores).subspan(shards[r].begin, shards[r].size), shards[r]);
  }
  std::vector<std::byte> all(ranks * shard_summary::bytes);
  while (!states[0].done()) {
    for (std::size_t r = 0; r < ranks; ++r) {
      const auto mine = states[r].summary_bytes();
      std::memcpy(all.data() + r * mine.size(), mine.data(), mine.size());
    }
    for (std::size_t r = 0; r < ranks; ++r) states[r].next(all);
  }
  lockstep_result out;
  out.local.resize(ranks);
  out.rounds = states[0].rounds();
  for (std::size_t r = 0; r < ranks; ++r) {
    states[r].result(out.local[r]);
    for (const std::uint32_t i : out.local[r].indices) {
      out.global.push_back(static_cast<std::uint32_t>(shards[r].begin + i));
    }
  }
  return out;
}

}  // namespace rank_test
