// The CPU backend's q8_0 / q4_0 kernels (quant-inl.h) against the reference backend, on every
// compiled Highway target: dense and row-gather GEMV, the input-sparse linear over a
// transposed block matrix (row axpy), thread-count invariance, and cpu::transpose's
// requantization.
//
// Bounds. A dequantized block value w = q·d is exact in f32 (|q| <= 127 or 8 times an f16
// scale: at most 18 significant bits), so the CPU and the reference multiply the same
// values and differ only in the order of the f32 sums:
//   GEMV: the reference sums n products in order (error <= γ(n)·Σ|w_i x_i|); the CPU sums
//     each block's products lane-wise, scales the block sum by d and accumulates the blocks
//     in two accumulators reduced at the end: every product goes through at most n + 2
//     roundings, so |cpu − ref| <= 2·dot_factor(n + 2)·Σ|w_i x_i|, per row.
//   Row axpy: the same chain fma(float(q)·d, x_j, acc) per output: bit for bit where MulAdd
//     is fused; elsewhere the products are rounded first: |cpu − ref| <= 2·dot_factor(k)·Σ|w x|.
#include "cpu_test_support.hpp"
#include "test_reference_support.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/backends/cpu/repack.hpp>
#include <actsparse/backends/reference.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

using namespace actsparse;
using namespace reference_test;
namespace {

// cpu_test::for_each_target, then once more with the default dispatch: the best target the
// CPU supports among those implementation.hpp compiled. That covers AVX3_DL where the CPU has
// it (this translation unit does not define HWY_WANT_AVX3_DL, so its target list lacks it).
template <class F>
void for_each_target(F&& f) {
  cpu_test::for_each_target(f);
  INFO("default dispatch");
  f();
}

constexpr dtype block_dtypes[] = {dtype::q8_0, dtype::q4_0};

std::vector<float> cpu_gemv(const weight_view& w, std::span<const float> x, subset rows, cpu::executor& ex) {
  std::vector<float> y(rows.count(w.rows), -1.0F);
  REQUIRE(cpu_backend{}.run(gemv_args{w, x, y, rows}, {}, ex));
  return y;
}

std::vector<float> cpu_gemv(const weight_view& w, std::span<const float> x, subset rows) {
  cpu::executor ex;
  return cpu_gemv(w, x, rows, ex);
}

std::vector<float> cpu_axpy(const weight_view& wt, std::span<const float> x, subset inputs, cpu::executor& ex) {
  std::vector<float> y(wt.cols, -1.0F);
  REQUIRE(cpu_backend{}.run(transposed_linear_args{wt, x, y, inputs}, {}, ex));
  return y;
}

std::vector<float> cpu_axpy(const weight_view& wt, std::span<const float> x, subset inputs) {
  cpu::executor ex;
  return cpu_axpy(wt, x, inputs, ex);
}

// Σ_k |W[i, k]·x[k]|.
double row_magnitude(const Eigen::MatrixXd& w, Eigen::Index i, std::span<const float> x) {
  double mag = 0.0;
  for (std::size_t k = 0; k < x.size(); ++k) mag += std::fabs(w(i, static_cast<Eigen::Index>(k)) * x[k]);
  return mag;
}

// Σ_{j kept} |Wt[j, c]·x[j]|, the magnitude of output c of a transposed linear.
double column_magnitude(const Eigen::MatrixXd& wt, Eigen::Index c, std::span<const float> x,
                        std::span<const std::uint32_t> kept) {
  double mag = 0.0;
  for (const std::uint32_t j : kept) mag += std::fabs(wt(j, c) * x[j]);
  return mag;
}

// The f32 scale of block (row i, block b) of a q8_0 / q4_0 matrix.
float block_scale(const weight_view& w, std::size_t i, std::size_t b) {
  const auto* row = static_cast<const std::byte*>(w.data) + i * w.row_stride + b * block_bytes(w.type);
  f16 d;
  std::memcpy(&d, row, sizeof d);  // d is the first member of both block types
  return to_f32(d);
}

}  // namespace

TEST_CASE("cpu q8_0 / q4_0 gemv: dense and row gather match the reference on every target") {
  std::mt19937 rng(41);
  const reference_backend ref;
  for (const dtype t : block_dtypes) {
    for (const std::size_t cols : {32U, 64U, 96U, 4096U}) {
      for (const std::size_t rows : {1U, 7U, 33U, 130U}) {           // not multiples of 4; 130: three 64-row tasks
        const test_weights w = make_weights(t, rows, cols, rng, 3);  // strided: 3 padding blocks of 0xff per row
        const auto x = random_vector(cols, rng);
        const auto kept = random_subset(rows, 0.4, rng);
        const auto all = all_indices(rows);
        std::vector<float> want(rows);
        REQUIRE(ref.run_with_scratch(gemv_args{w.view, x, want, subset::everything()}));
        for_each_target([&] {
          INFO(name(t), " rows ", rows, " cols ", cols);
          const auto dense = cpu_gemv(w.view, x, subset::everything());
          for (std::size_t i = 0; i < rows; ++i) {
            const double mag = row_magnitude(w.values, static_cast<Eigen::Index>(i), x);
            INFO("row ", i, ": cpu ", dense[i], " reference ", want[i]);
            REQUIRE(std::fabs(static_cast<double>(dense[i]) - want[i]) <= 2.0 * dot_factor(cols + 2) * mag);
          }
          const auto gather = cpu_gemv(w.view, x, subset::only(kept));
          REQUIRE(gather.size() == kept.size());
          for (std::size_t k = 0; k < kept.size(); ++k) {
            CHECK(same_bits(std::span<const float>(&gather[k], 1), std::span<const float>(&dense[kept[k]], 1)));
          }
          CHECK(same_bits(cpu_gemv(w.view, x, subset::only(all)), dense));  // keep-all gather == dense
        });
      }
    }
  }
}

TEST_CASE("cpu q8_0 / q4_0 transposed linear equals the reference (bit for bit where FMA is native) on every target") {
  std::mt19937 rng(42);
  const reference_backend ref;
  for (const dtype t : block_dtypes) {
    // out: whole blocks; 1056 = two 512-column tasks and a ragged 32-column one.
    for (const std::size_t out : {32U, 64U, 96U, 1056U, 4096U}) {
      for (const std::size_t in : {1U, 7U, 33U, 130U}) {
        const test_weights wt = make_weights(t, in, out, rng, 2);  // Wt [in × out], strided rows
        const auto x = random_vector(in, rng);
        for (const double density : {1.0, 0.5, 0.1}) {
          const auto kept = density == 1.0 ? all_indices(in) : random_subset(in, density, rng);
          std::vector<float> want(out);
          REQUIRE(ref.run_with_scratch(transposed_linear_args{wt.view, x, want, subset::only(kept)}));
          for_each_target([&] {
            INFO(name(t), " in ", in, " out ", out, " density ", density);
            const auto y = cpu_axpy(wt.view, x, subset::only(kept));
            if (cpu::dispatch_fused_multiply_add()) {
              CHECK(same_bits(y, want));
            } else {  // products rounded before the add: within the f32 bound of the reference
              for (std::size_t c = 0; c < out; ++c) {
                const double mag = column_magnitude(wt.values, static_cast<Eigen::Index>(c), x, kept);
                REQUIRE(std::fabs(static_cast<double>(y[c]) - want[c]) <= 2.0 * dot_factor(kept.size()) * mag);
              }
            }
            if (density == 1.0) CHECK(same_bits(cpu_axpy(wt.view, x, subset::everything()), y));  // keep-all == dense
          });
        }
      }
    }
  }
}

TEST_CASE("cpu q8_0 / q4_0: the same bits for 1, 2 and 3 threads and for an engine's (ith, nth) split") {
  std::mt19937 rng(43);
  for (const dtype t : block_dtypes) {
    const test_weights w = make_weights(t, 1000, 96, rng);  // GEMV: 16 tasks of 64 rows
    const auto x = random_vector(96, rng);
    const test_weights wt = make_weights(t, 96, 2080, rng);  // axpy: one column task per thread, the last ragged
    const auto kept_rows = random_subset(1000, 0.4, rng);
    const auto kept_inputs = random_subset(96, 0.4, rng);
    for (const subset rows : {subset::everything(), subset::only(kept_rows)}) {
      const auto one = cpu_gemv(w.view, x, rows);
      for (const std::size_t threads : {1U, 2U, 3U}) {
        INFO(name(t), " gemv, threads ", threads);
        cpu::thread_pool pool(threads);
        cpu::executor ex(pool);
        CHECK(same_bits(cpu_gemv(w.view, x, rows, ex), one));
        std::vector<float> y(one.size(), -1.0F);
        std::vector<std::thread> engine;
        for (std::size_t i = 0; i < threads; ++i) {
          engine.emplace_back([&, i] {
            cpu::executor mine = cpu::executor::split({i, threads});
            (void)cpu_backend{}.run(gemv_args{w.view, x, y, rows}, {}, mine);
          });
        }
        for (auto& e : engine) e.join();
        CHECK(same_bits(y, one));
      }
    }
    for (const subset inputs : {subset::everything(), subset::only(kept_inputs)}) {
      const auto one = cpu_axpy(wt.view, x, inputs);
      for (const std::size_t threads : {1U, 2U, 3U}) {
        INFO(name(t), " axpy, threads ", threads);
        cpu::thread_pool pool(threads);
        cpu::executor ex(pool);
        CHECK(same_bits(cpu_axpy(wt.view, x, inputs, ex), one));
      }
    }
  }
}

TEST_CASE("cpu q8_0 / q4_0: rows of a length not a multiple of 32, and column ranges splitting a block, are errors") {
  std::mt19937 rng(44);
  cpu::executor ex;
  for (const dtype t : block_dtypes) {
    INFO(name(t));
    std::vector<std::byte> bytes(4 * 64 * 2, std::byte{0});
    const weight_view w48(bytes.data(), t, 4, 48, 64);  // 48 values per row: one and a half blocks
    const std::vector<float> x(48, 1.0F);
    std::vector<float> y(4);
    CHECK_THROWS_WITH_AS((void)cpu_backend{}.run(gemv_args{w48, x, y, subset::everything()}, {}, ex),
                         doctest::Contains("a multiple of 32 values per row for q8_0 / q4_0 weights"), error);
    const weight_view wt48(bytes.data(), t, 4, 48, 64);  // Wt [4 inputs × 48 outputs]
    const std::vector<float> x4(4, 1.0F);
    std::vector<float> y48(48);
    CHECK_THROWS_WITH_AS((void)cpu_backend{}.run(transposed_linear_args{wt48, x4, y48, subset::everything()}, {}, ex),
                         doctest::Contains("'wt' is 48 values per row of"), error);
    // The kernel entry point itself takes whole blocks only.
    const test_weights wt = make_weights(t, 4, 64, rng);
    std::vector<float> y64(64);
    CHECK_THROWS_WITH_AS(cpu::dispatch_axpy_rows(wt.view, nullptr, 4, x4.data(), 16, 64, y64.data()),
                         doctest::Contains("whole 32-value blocks"), error);
    CHECK_NOTHROW(cpu::dispatch_axpy_rows(wt.view, nullptr, 4, x4.data(), 32, 64, y64.data()));
  }
}

TEST_CASE("cpu::transpose of q8_0 / q4_0 requantizes within the quantization step, and needs rows in blocks of 32") {
  std::mt19937 rng(45);
  const reference_backend ref;
  for (const dtype t : block_dtypes) {
    // |requantized − value| per element, in units of the new block's |d| (see repack.hpp):
    // q8_0 rounds to the nearest step (0.5, plus f16 rounding of d: 127·2^-11 and the
    // product's rounding), q4_0 also clamps the top nibble (1, plus 8·2^-11).
    const double step = t == dtype::q8_0 ? 0.57 : 1.01;
    for (const auto& [rows, cols] :
         {std::pair{32U, 32U}, std::pair{64U, 96U}, std::pair{96U, 64U}, std::pair{256U, 4096U}}) {
      INFO(name(t), " W ", rows, " x ", cols);
      const test_weights w = make_weights(t, rows, cols, rng, 1);  // strided W
      const cpu::owned_weights wt = cpu::transpose(w.view);
      REQUIRE(wt.view.type == t);
      REQUIRE(wt.view.rows == cols);
      REQUIRE(wt.view.cols == rows);
      REQUIRE(wt.view.row_stride == row_bytes(t, rows));
      // Element by element: Wt[j, i] ≈ W[i, j], |error| <= step·|d| of Wt's block holding it.
      std::vector<float> row(rows);
      Eigen::MatrixXd wt_values(static_cast<Eigen::Index>(cols), static_cast<Eigen::Index>(rows));
      Eigen::MatrixXd err_bound(static_cast<Eigen::Index>(cols), static_cast<Eigen::Index>(rows));
      double worst = 0.0;  // max |error| / |d|
      for (std::size_t j = 0; j < cols; ++j) {
        reference::dequantize_row(wt.view, j, row);
        for (std::size_t i = 0; i < rows; ++i) {
          const auto ji = static_cast<Eigen::Index>(j);
          const auto ii = static_cast<Eigen::Index>(i);
          const double d = std::fabs(block_scale(wt.view, j, i / 32));
          const double err = std::fabs(row[i] - w.values(ii, ji));
          wt_values(ji, ii) = row[i];
          err_bound(ji, ii) = step * d;
          if (d > 0.0) worst = std::max(worst, err / d);
          REQUIRE(err <= step * d);
        }
      }
      MESSAGE(name(t), " W ", rows, "x", cols, ": max |Wt - W| = ", worst, " |d| (bound ", step, ")");
      // The linear y = W x: the reference over Wt vs the reference over W, within Σ_j e_ij·|x_j|
      // (the requantization) plus the f32 bound of each.
      const auto x = random_vector(cols, rng);
      std::vector<float> want_w(rows);
      REQUIRE(ref.run_with_scratch(linear_args{w.view, x, want_w, subset::everything()}));
      std::vector<float> want_t(rows);
      REQUIRE(ref.run_with_scratch(transposed_linear_args{wt.view, x, want_t, subset::everything()}));
      const Eigen::VectorXd xa = to_double(x).cwiseAbs();
      const Eigen::VectorXd bound =
          err_bound.transpose() * xa +
          dot_factor(cols) * (w.values.cwiseAbs() * xa + wt_values.transpose().cwiseAbs() * xa);
      for (std::size_t i = 0; i < rows; ++i) {
        INFO("output ", i, ": over Wt ", want_t[i], ", over W ", want_w[i]);
        REQUIRE(std::fabs(static_cast<double>(want_t[i]) - want_w[i]) <= bound(static_cast<Eigen::Index>(i)));
      }
      // The CPU's linear over Wt is the reference's over Wt (bit for bit with FMA).
      for_each_target([&] {
        const auto y = cpu_axpy(wt.view, x, subset::everything());
        if (cpu::dispatch_fused_multiply_add()) CHECK(same_bits(y, want_t));
      });
    }
    // Rows not a multiple of 32: the rows of Wᵀ could not be blocked.
    const test_weights odd = make_weights(t, 33, 64, rng);
    CHECK_THROWS_WITH_AS((void)cpu::transpose(odd.view), doctest::Contains("'w.rows' is 33 rows of"), error);
    CHECK_THROWS_WITH_AS((void)cpu::transpose(odd.view), doctest::Contains("a multiple of 32 rows"), error);
  }
}
