// The CPU backend's input-sparse linear over transposed weights (row axpy), against the
// reference: every output is the same fma chain, so the two agree bit for bit.
#include "cpu_test_support.hpp"
#include "test_reference_support.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/backends/cpu/repack.hpp>
#include <actsparse/backends/reference.hpp>

#include <doctest/doctest.h>
#include <hwy/targets.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

using namespace actsparse;
using namespace reference_test;

TEST_CASE("cpu transposed linear equals the reference linear (bit for bit where FMA is native) on every target") {
  std::mt19937 rng(31);
  const cpu_backend cpu;
  const reference_backend ref;
  for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16}) {
    for (const std::size_t out : {1U, 7U, 33U, 600U, 1100U}) {  // 1100: three column tasks, a ragged one
      const std::size_t in = 45;
      const test_weights w = make_weights(t, out, in, rng, 2);  // W [out × in], strided rows
      const cpu::owned_weights wt = cpu::transpose(w.view);
      REQUIRE(wt.view.rows == in);
      REQUIRE(wt.view.cols == out);
      const auto x = random_vector(in, rng);
      for (const double density : {1.0, 0.5, 0.1}) {
        const auto kept = density == 1.0 ? all_indices(in) : random_subset(in, density, rng);
        std::vector<float> want(out);
        REQUIRE(ref.run_with_scratch(linear_args{w.view, x, want, subset::only(kept)}));
        // The reference's own transposed path agrees with its linear on W.
        std::vector<float> want_t(out);
        REQUIRE(ref.run_with_scratch(transposed_linear_args{wt.view, x, want_t, subset::only(kept)}));
        CHECK(same_bits(want_t, want));
        cpu_test::for_each_target([&] {
          INFO(name(t), " out ", out, " density ", density);
          std::vector<float> y(out, -1.0F);
          cpu::executor ex;
          REQUIRE(cpu.run(transposed_linear_args{wt.view, x, y, subset::only(kept)}, {}, ex));
          if (cpu::detail::fused_multiply_add()) {
            CHECK(same_bits(y, want));
          } else {  // products rounded before the add: within the f32 bound of the reference
            for (std::size_t i = 0; i < out; ++i) {
              double mag = 0.0;
              for (const auto j : kept) {
                mag += std::fabs(w.values(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(j)) * x[j]);
              }
              REQUIRE(std::fabs(y[i] - want[i]) <= 2.0 * dot_factor(kept.size()) * mag);
            }
          }
          if (density == 1.0) {  // keep-all equals the dense path
            std::vector<float> dense(out, -1.0F);
            REQUIRE(cpu.run(transposed_linear_args{wt.view, x, dense, subset::everything()}, {}, ex));
            CHECK(same_bits(dense, y));
          }
        });
      }
    }
  }
}

TEST_CASE("cpu transposed linear: same bits for 1, 2 and 3 threads, errors for bad input") {
  std::mt19937 rng(32);
  const cpu_backend cpu;
  const test_weights w = make_weights(dtype::bf16, 2000, 64, rng);
  const cpu::owned_weights wt = cpu::transpose(w.view);
  const auto x = random_vector(64, rng);
  const auto kept = random_subset(64, 0.4, rng);
  std::vector<float> one(2000);
  cpu::executor serial;
  REQUIRE(cpu.run(transposed_linear_args{wt.view, x, one, subset::only(kept)}, {}, serial));
  for (const std::size_t threads : {2U, 3U}) {
    cpu::thread_pool pool(threads);
    cpu::executor ex(pool);
    std::vector<float> y(2000);
    REQUIRE(cpu.run(transposed_linear_args{wt.view, x, y, subset::only(kept)}, {}, ex));
    CHECK(same_bits(y, one));
  }
  std::vector<float> short_y(10);
  CHECK_THROWS_WITH_AS((void)cpu.run(transposed_linear_args{wt.view, x, short_y, subset::everything()}, {}, serial),
                       doctest::Contains("'y.size()' is 10"), error);
  const std::vector<std::uint32_t> bad = {3, 64};
  CHECK_THROWS_WITH_AS((void)cpu.run(transposed_linear_args{wt.view, x, one, subset::only(bad)}, {}, serial),
                       doctest::Contains("'inputs.indices[1]' is 64"), error);
}

TEST_CASE("cpu transposed linear over 2048+ rows: chunks of rows, the same bits on any executor") {
  std::mt19937 rng(33);
  const cpu_backend cpu;
  CHECK(cpu::axpy_chunk_count(2047) == 1);
  CHECK(cpu::axpy_chunk_count(2048) == 2);
  CHECK(cpu::axpy_chunk_count(11008) == 8);
  CHECK(cpu::axpy_chunk_count(100000) == 8);
  for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0}) {
    for (const std::size_t in : {2048U, 9000U - 9000U % 32U}) {  // 2 and 8 chunks
      const std::size_t out = 96;
      const test_weights wt = make_weights(t, in, out, rng, 2);  // Wt itself [in × out], strided rows
      const auto x = random_vector(in, rng);
      const auto value = [&](std::size_t j, std::size_t i) {
        return static_cast<float>(wt.values(static_cast<Eigen::Index>(j), static_cast<Eigen::Index>(i)));
      };
      for (const double density : {1.0, 0.3, 0.002, 0.0}) {
        const auto kept = density == 1.0 ? all_indices(in) : random_subset(in, density, rng);
        const subset inputs = density == 1.0 ? subset::everything() : subset::only(kept);
        REQUIRE(cpu.workspace_size(transposed_linear_args{wt.view, x, {}, inputs}) ==
                ((cpu::axpy_chunk_count(in) - 1) * out + 16) * sizeof(float));  // + 64 B to align them
        const auto want = cpu_test::chunked_axpy(value, in, out, x, kept);
        std::vector<float> ref_y(out);
        REQUIRE(reference_backend{}.run_with_scratch(transposed_linear_args{wt.view, x, ref_y, subset::only(kept)}));
        cpu_test::for_each_target([&] {
          INFO(name(t), " in ", in, " density ", density);
          const auto run = [&](cpu::executor ex, const cpu_backend& b) {
            std::vector<float> y(out, -1.0F);
            const transposed_linear_args a{wt.view, x, y, inputs};
            std::vector<std::byte> workspace(b.workspace_size(a));
            REQUIRE(b.run(a, workspace, ex));
            return y;
          };
          const auto y = run({}, cpu);
          if (cpu::detail::fused_multiply_add()) CHECK(same_bits(y, want));
          for (std::size_t i = 0; i < out; ++i) {  // and within the f32 bound of the reference
            double mag = 0.0;
            for (const auto j : kept) mag += std::fabs(static_cast<double>(value(j, i)) * x[j]);
            REQUIRE(std::fabs(y[i] - ref_y[i]) <= 2.0 * dot_factor(kept.size()) * mag);
          }
          for (const std::size_t threads : {2U, 3U}) {
            cpu::thread_pool pool(threads);
            CHECK(same_bits(run(cpu::executor(pool), cpu), y));
            // An engine's (ith, nth) split: each thread its columns of every chunk, one workspace.
            std::vector<float> split_y(out, -1.0F);
            const transposed_linear_args a{wt.view, x, split_y, inputs};
            std::vector<std::byte> workspace(cpu.workspace_size(a));
            for (std::size_t i = 0; i < threads; ++i) {
              cpu::executor mine = cpu::executor::split({i, threads});
              REQUIRE(cpu.run(a, workspace, mine));
            }
            CHECK(same_bits(split_y, y));
          }
          if (density < 1.0) {  // skipped rows read with coefficient 0: the same values
            cpu_backend coalescing;
            coalescing.coalesce_gap = 1000;
            CHECK(run({}, coalescing) == y);
          } else {  // keep-all as a list equals dense
            std::vector<float> listed(out, -1.0F);
            const transposed_linear_args a{wt.view, x, listed, subset::only(kept)};
            std::vector<std::byte> workspace(cpu.workspace_size(a));
            cpu::executor ex;
            REQUIRE(cpu.run(a, workspace, ex));
            CHECK(same_bits(listed, y));
          }
        });
      }
    }
  }
  std::vector<float> y(96);
  const test_weights wt = make_weights(dtype::f32, 2048, 96, rng);
  const auto x = random_vector(2048, rng);
  cpu::executor ex;
  CHECK_THROWS_WITH_AS((void)cpu.run(transposed_linear_args{wt.view, x, y, subset::everything()}, {}, ex),
                       doctest::Contains("'workspace.size()' is 0; expected at least 448 bytes"), error);
}
