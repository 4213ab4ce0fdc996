// The CPU backend's GEMV against the reference backend, on every compiled Highway target.
#include "cpu_test_support.hpp"
#include "test_reference_support.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/backends/reference.hpp>

#include <doctest/doctest.h>
#include <hwy/targets.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

using namespace actsparse;
using namespace reference_test;
using cpu_test::for_each_target;

namespace {

std::vector<float> run(const auto& backend, const weight_view& w, std::span<const float> x, subset rows) {
  std::vector<float> y(rows.count(w.rows));
  typename std::remove_cvref_t<decltype(backend)>::executor_type ex;
  const gemv_args args{w, x, y, rows};
  std::vector<float> workspace((backend.workspace_size(args) + sizeof(float) - 1) / sizeof(float));
  REQUIRE(backend.run(args, std::as_writable_bytes(std::span<float>(workspace)), ex));
  return y;
}

}  // namespace

TEST_CASE("cpu gemv: dense and row gather match the reference on every target, f32 / f16 / bf16") {
  REQUIRE_FALSE(hwy::SupportedAndGeneratedTargets().empty());
  std::mt19937 rng(21);
  const cpu_backend cpu;
  const reference_backend ref;
  for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16}) {
    // Lengths around every vector width (4, 8, 16 floats) and not a multiple of any.
    // 1100 and 2100: several steps of a row run (row_step_bytes), the prefetch of the next
    // rows, and a ragged end.
    for (const std::size_t cols : {1U, 3U, 7U, 16U, 33U, 64U, 100U, 257U, 1100U, 2100U}) {
      const std::size_t rows = 130;                                // more than two tasks of 64 rows
      const test_weights w = make_weights(t, rows, cols, rng, 3);  // padded rows: a strided view
      const auto x = random_vector(cols, rng);
      const auto kept = random_subset(rows, 0.3, rng);
      const auto all = all_indices(rows);
      const auto want_dense = run(ref, w.view, x, subset::everything());
      const auto want_gather = run(ref, w.view, x, subset::only(kept));
      for_each_target([&] {
        INFO(name(t), " cols ", cols);
        const auto dense = run(cpu, w.view, x, subset::everything());
        const auto gather = run(cpu, w.view, x, subset::only(kept));
        // Both sum the same products in f32, in different orders: each is within
        // dot_factor(n)·Σ|w·x| of the exact value, so they are within twice that of each other.
        for (std::size_t i = 0; i < rows; ++i) {
          double mag = 0.0;
          for (std::size_t k = 0; k < cols; ++k) {
            mag += std::fabs(w.values(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(k)) * x[k]);
          }
          REQUIRE(std::fabs(dense[i] - want_dense[i]) <= 2.0 * dot_factor(cols) * mag);
        }
        for (std::size_t k = 0; k < kept.size(); ++k) {
          CHECK(same_bits(std::span<const float>(&gather[k], 1), std::span<const float>(&dense[kept[k]], 1)));
        }
        CHECK(gather.size() == want_gather.size());
        // Keep-all through the gather path equals dense bit for bit.
        CHECK(same_bits(run(cpu, w.view, x, subset::only(all)), dense));
      });
    }
  }
}

TEST_CASE("cpu gemv: the tests ran on several targets, the best one included") {
  // AVX2 and SSE4 run on every x86-64 CPU of the last decade; AVX3 where AVX-512 exists.
  std::string names;
  for (const std::int64_t t : hwy::SupportedAndGeneratedTargets()) names += std::string(hwy::TargetName(t)) + " ";
  MESSAGE("Highway targets tested: ", names);
  CHECK(hwy::SupportedAndGeneratedTargets().size() >= 2);
}

TEST_CASE("cpu gemv: rejects bad shapes") {  // q8_0 / q4_0: test_cpu_quant.cpp
  std::mt19937 rng(22);
  const cpu_backend cpu;
  cpu::executor ex;
  const auto x = random_vector(64, rng);
  std::vector<float> y(4);
  const test_weights w = make_weights(dtype::f32, 4, 64, rng);
  std::vector<float> y3(3);
  CHECK_THROWS_WITH_AS((void)cpu.run(gemv_args{w.view, x, y3, subset::everything()}, {}, ex),
                       doctest::Contains("'y.size()' is 3"), error);
  const std::vector<std::uint32_t> bad = {1, 9};
  std::vector<float> y2(2);
  CHECK_THROWS_WITH_AS((void)cpu.run(gemv_args{w.view, x, y2, subset::only(bad)}, {}, ex),
                       doctest::Contains("'rows.indices[1]' is 9"), error);
  const std::vector<float> x5(5);
  CHECK_THROWS_WITH_AS((void)cpu.run(gemv_args{w.view, x5, y, subset::everything()}, {}, ex),
                       doctest::Contains("'x.size()' is 5"), error);
}

TEST_CASE("cpu gemv: bitwise identical output for 1, 2 and 3 threads and for an engine's (ith, nth) split") {
  std::mt19937 rng(23);
  const cpu_backend cpu;
  for (const dtype t : {dtype::f32, dtype::bf16}) {
    const test_weights w = make_weights(t, 1000, 96, rng);  // 16 tasks of 64 rows
    const auto x = random_vector(96, rng);
    const auto kept = random_subset(1000, 0.4, rng);
    for (const subset rows : {subset::everything(), subset::only(kept)}) {
      const std::size_t out = rows.count(1000);
      std::vector<float> one(out);
      cpu::executor serial;
      REQUIRE(cpu.run(gemv_args{w.view, x, one, rows}, {}, serial));
      for (const std::size_t threads : {1U, 2U, 3U}) {
        cpu::thread_pool pool(threads);
        cpu::executor ex(pool);
        for (int repeat = 0; repeat < 3; ++repeat) {
          std::vector<float> y(out, -1.0F);
          REQUIRE(cpu.run(gemv_args{w.view, x, y, rows}, {}, ex));
          CHECK(same_bits(y, one));
        }
        // The engine's own threads: each calls run() with its share.
        std::vector<float> y(out, -1.0F);
        std::vector<std::thread> engine;
        for (std::size_t i = 0; i < threads; ++i) {
          engine.emplace_back([&, i] {
            cpu::executor mine = cpu::executor::split({i, threads});
            (void)cpu.run(gemv_args{w.view, x, y, rows}, {}, mine);
          });
        }
        for (auto& e : engine) e.join();
        CHECK(same_bits(y, one));
      }
    }
  }
}

TEST_CASE("cpu thread_pool: every task runs once, exceptions reach the caller, bad sizes are errors") {
  cpu::thread_pool pool(3);
  std::vector<int> hits(1000, 0);
  pool.parallel_for(hits.size(), [&](std::size_t i) { ++hits[i]; });
  CHECK(std::all_of(hits.begin(), hits.end(), [](int h) { return h == 1; }));
  CHECK_THROWS_WITH(pool.parallel_for(10,
                                      [](std::size_t i) {
                                        if (i == 7) throw std::runtime_error("task 7 failed");
                                      }),
                    "task 7 failed");
  pool.parallel_for(0, [](std::size_t) { FAIL("no task"); });
  CHECK_THROWS_AS(cpu::thread_pool(0), error);
  CHECK_THROWS_AS(cpu::thread_pool(2, std::chrono::microseconds{-1}), error);
  CHECK_THROWS_AS((void)cpu::executor::split({3, 3}), error);
}

TEST_CASE("cpu thread_pool: back-to-back jobs, spinning or sleeping between them, lose no task") {
  // Jobs follow each other within the spin (workers pick them up without a wake-up), after
  // it (workers asleep), and with spin 0 (always asleep); each job sees the previous one's
  // results, as a kernel's second phase reads its first.
  for (const auto spin :
       {std::chrono::microseconds{0}, std::chrono::microseconds{50}, std::chrono::microseconds{5000}}) {
    cpu::thread_pool pool(3, spin);
    std::vector<std::size_t> a(257, 0);
    std::vector<std::size_t> b(a.size(), 0);
    std::size_t wrong = 0;
    for (std::size_t job = 1; job <= 300; ++job) {
      pool.parallel_for(a.size(), [&](std::size_t i) { a[i] = job * i; });
      pool.parallel_for(a.size(), [&](std::size_t i) { b[i] = a[(i + 1) % a.size()]; });
      for (std::size_t i = 0; i < a.size(); ++i) wrong += b[i] != job * ((i + 1) % a.size()) ? 1 : 0;
      if (job % 100 == 0) std::this_thread::sleep_for(std::chrono::microseconds{200});
    }
    CHECK(wrong == 0);
  }
}
