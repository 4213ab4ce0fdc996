// The CPU backend's q8_0 / q4_0 kernels (quant-inl.h) against the reference backend, on every
// compiled Highway target: dense and row-gather GEMV on both paths (f32 activations, and x
// quantized to 8-bit blocks with integer dot products, cpu_backend::int8_activations), the
// quantization of x, the input-sparse linear over a transposed block matrix (row axpy),
// thread-count invariance, and cpu::transpose's requantization.
//
// Bounds (u = 2^-24; γ(n) = n·u/(1 − n·u); dot_factor(n) = γ(n) + the same for f64, which
// also covers this file's double evaluation of the exact values).
//   f32 path (int8_activations = false). A dequantized block value w = q·d is exact in f32
//     (|q| <= 127 or 8 times an f16 scale: at most 18 significant bits), so the CPU and the
//     reference multiply the same values and differ only in the order of the f32 sums:
//     the reference sums n products in order (error <= γ(n)·Σ|w_i x_i|); the CPU sums each
//     block's products lane-wise, scales the block sum by d and accumulates the blocks in
//     two accumulators reduced at the end: every product goes through at most n + 2
//     roundings, so |cpu − ref| <= 2·dot_factor(n + 2)·Σ|w_i x_i|, per row.
//   Integer path (the default). x is quantized per block b of 32 values: d_x = max|x_i|/127
//     (f32), q_x,i = round(x_i/d_x), so e_i = x_i − d_x·q_x,i has |e_i| <= d_x·(1/2 + 2^-16)
//     (the division x_i/d_x is correctly rounded, error <= 127u; the scalar targets' emulated
//     rounding adds at most 2^-18; checked below). With the weight integers q_w and scales
//     d_w, the CPU evaluates the quantized product
//       P = Σ_b d_w,b·d_x,b·D_b,   D_b = Σ_i q_w,i·q_x,i (exact in int32),
//     holding D_b as lane partial sums L_bj (exact integers, exact in f32) and adding the
//     terms L_bj·d_w·d_x: one rounding of d_w·d_x, one of the product (fused with the add
//     where there is an FMA), the additions of the block chain (at most nb = n/32) and of
//     the final reduction of at most 16 lanes: each term through at most nb + 20 roundings, so
//       (1) |cpu − P| <= dot_factor(nb + 20)·M,   M = Σ_b |d_w,b|·d_x,b·Σ_i |q_w,i·q_x,i|
//     (tested against P computed exactly, in long double: d_w·d_x has 35 bits and D_b 20).
//     W·x − P = Σ_b d_w,b·Σ_i q_w,i·e_i, so against the reference (f32 x, the bound above):
//       (2) |cpu − ref| <= E + dot_factor(nb + 20)·M + dot_factor(n)·Σ|w_i x_i|,
//           E = Σ_b |d_w,b|·d_x,b·(1/2 + 2^-16)·Σ_i |q_w,i|.
//     E, x's quantization error, dominates: about half an x step times the row's |weights|.
//   Row axpy: the same chain fma(float(q)·d, x_j, acc) per output: bit for bit where MulAdd
//     is fused; elsewhere the products are rounded first: |cpu − ref| <= 2·dot_factor(k)·Σ|w x|.
#include "cpu_test_support.hpp"
#include "test_reference_support.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/backends/cpu/repack.hpp>
#include <actsparse/backends/reference.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
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

// The slack of x's quantization error bound: |x_i − d_x·q_x,i| <= d_x·(1/2 + quant_slack).
constexpr double quant_slack = 0x1p-16;

cpu_backend backend_with(bool int8, const cpu::weight_layouts* layouts = nullptr) {
  cpu_backend cpu;
  cpu.int8_activations = int8;
  cpu.layouts = layouts;
  return cpu;
}

// The CPU GEMV, int8 = cpu_backend::int8_activations, with the workspace it asks for; with
// layouts, the backend reads the interleaved copies they hold.
std::vector<float> cpu_gemv(const weight_view& w, std::span<const float> x, subset rows, cpu::executor& ex,
                            bool int8 = true, const cpu::weight_layouts* layouts = nullptr) {
  const cpu_backend cpu = backend_with(int8, layouts);
  std::vector<float> y(rows.count(w.rows), -1.0F);
  const gemv_args a{w, x, y, rows};
  std::vector<std::byte> workspace(cpu.workspace_size(a));
  REQUIRE(cpu.run(a, workspace, ex));
  return y;
}

std::vector<float> cpu_gemv(const weight_view& w, std::span<const float> x, subset rows, bool int8 = true,
                            const cpu::weight_layouts* layouts = nullptr) {
  cpu::executor ex;
  return cpu_gemv(w, x, rows, ex, int8, layouts);
}

std::vector<float> cpu_axpy(const weight_view& wt, std::span<const float> x, subset inputs, cpu::executor& ex) {
  std::vector<float> y(wt.cols, -1.0F);
  const transposed_linear_args a{wt, x, y, inputs};
  std::vector<std::byte> workspace(cpu_backend{}.workspace_size(a));
  REQUIRE(cpu_backend{}.run(a, workspace, ex));
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

// The 32 integers of block (row i, block b): q8_0's qs, q4_0's nibbles − 8 (values 0-15 the
// low nibbles, 16-31 the high ones).
std::array<int, 32> block_ints(const weight_view& w, std::size_t i, std::size_t b) {
  const auto* blk = static_cast<const std::byte*>(w.data) + i * w.row_stride + b * block_bytes(w.type);
  std::array<int, 32> q{};
  if (w.type == dtype::q8_0) {
    block_q8_0 v;
    std::memcpy(&v, blk, sizeof v);
    for (std::size_t k = 0; k < 32; ++k) q[k] = v.qs[k];
  } else {
    block_q4_0 v;
    std::memcpy(&v, blk, sizeof v);
    for (std::size_t k = 0; k < 16; ++k) {
      q[k] = (v.qs[k] & 0x0f) - 8;
      q[16 + k] = (v.qs[k] >> 4) - 8;
    }
  }
  return q;
}

// x quantized by the dispatched kernel (the target in force).
struct quantized_x {
  std::vector<std::int8_t> q;
  std::vector<float> d;
};
quantized_x quantize(std::span<const float> x, bool ggml_rounding = false) {
  quantized_x r{std::vector<std::int8_t>(x.size()), std::vector<float>(x.size() / 32)};
  cpu::detail::quantize_q8_0_x(x.data(), x.size(), r.q.data(), r.d.data(), ggml_rounding);
  return r;
}

// ggml's x86 quantize_row_q8_0, written from its definition: per block amax = max |x|,
// d = f16(amax / 127), q = round(x · (127 / amax)) with ties to even (its _mm256_round_ps),
// saturated to int8. Here d is returned as the f16's f32 value.
quantized_x ggml_quantize(std::span<const float> x) {
  quantized_x r{std::vector<std::int8_t>(x.size()), std::vector<float>(x.size() / 32)};
  for (std::size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0.0F;
    for (std::size_t k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(x[32 * b + k]));
    r.d[b] = to_f32(to_f16(amax / 127.0F));
    const float id = amax != 0.0F ? 127.0F / amax : 0.0F;
    for (std::size_t k = 0; k < 32; ++k) {
      const float v = std::nearbyint(x[32 * b + k] * id);  // the default mode: to nearest, ties to even
      r.q[32 * b + k] = r.d[b] == 0.0F ? std::int8_t{0} : static_cast<std::int8_t>(std::clamp(v, -127.0F, 127.0F));
    }
  }
  return r;
}

// Row i against quantized x: P (exact: long double holds each term exactly), M and E of the
// header's bounds.
struct int8_row {
  double exact = 0.0;
  double magnitude = 0.0;
  double quant_error = 0.0;
};
// per_value: the bound of |x − d_x·q_x| in units of d_x (1/2 + slack; ggml's rounding more).
int8_row int8_terms(const weight_view& w, std::size_t i, const quantized_x& xq, double per_value = 0.5 + quant_slack) {
  long double exact = 0.0L;
  int8_row r;
  for (std::size_t b = 0; b < w.cols / 32; ++b) {
    const std::array<int, 32> q = block_ints(w, i, b);
    std::int64_t dot = 0;
    std::int64_t dot_abs = 0;
    std::int64_t q_abs = 0;
    for (std::size_t k = 0; k < 32; ++k) {
      const std::int64_t p = std::int64_t{q[k]} * xq.q[32 * b + k];
      dot += p;
      dot_abs += p < 0 ? -p : p;
      q_abs += q[k] < 0 ? -q[k] : q[k];
    }
    const double dw = block_scale(w, i, b);
    const double dx = xq.d[b];
    exact += static_cast<long double>(dw) * static_cast<long double>(dx) * static_cast<long double>(dot);
    r.magnitude += std::fabs(dw) * dx * static_cast<double>(dot_abs);
    r.quant_error += std::fabs(dw) * dx * per_value * static_cast<double>(q_abs);
  }
  r.exact = static_cast<double>(exact);
  return r;
}

// Checks the integer-path GEMV `got` (rows `kept` of W, or all) against bounds (1) and (2).
// ggml_rounding: x quantized by ggml's rule, whose f16 d_x adds up to 127·2^-11·d_x per value.
void check_int8_rows(const weight_view& w, const Eigen::MatrixXd& values, std::span<const float> x,
                     std::span<const float> got, std::span<const float> want_ref, bool ggml_rounding = false) {
  const quantized_x xq = quantize(x, ggml_rounding);
  const double per_value = ggml_rounding ? 0.5625 + quant_slack : 0.5 + quant_slack;
  const std::size_t nb = w.cols / 32;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const int8_row t = int8_terms(w, i, xq, per_value);
    const double rounding = dot_factor(nb + 20) * t.magnitude;
    INFO("row ", i, ": cpu ", got[i], " exact quantized product ", t.exact, " reference ", want_ref[i]);
    REQUIRE(std::fabs(static_cast<double>(got[i]) - t.exact) <= rounding);
    const double ref_bound =
        t.quant_error + rounding + dot_factor(w.cols) * row_magnitude(values, static_cast<Eigen::Index>(i), x);
    REQUIRE(std::fabs(static_cast<double>(got[i]) - want_ref[i]) <= ref_bound);
  }
}

// x of n values, uniform(-1, 1) times a per-block magnitude 10^k, k in [-3, 3], so blocks
// get very different scales d_x.
std::vector<float> varied_vector(std::size_t n, std::mt19937& rng) {
  std::vector<float> x = random_vector(n, rng);
  std::uniform_int_distribution<int> exponent(-3, 3);
  for (std::size_t b = 0; b < n / 32; ++b) {
    const auto scale = static_cast<float>(std::pow(10.0, exponent(rng)));
    for (std::size_t k = 0; k < 32; ++k) x[32 * b + k] *= scale;
  }
  return x;
}

// A q8_0 / q4_0 matrix of random bytes: every integer (q8_0's −128 included) and random f16
// scales of either sign.
test_weights random_block_weights(dtype t, std::size_t rows, std::size_t cols, std::mt19937& rng) {
  test_weights out;
  const std::size_t stride = row_bytes(t, cols);
  out.storage.resize(rows * stride);
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(-0.02F, 0.02F);
  for (auto& b : out.storage) b = static_cast<std::byte>(byte(rng));
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t b = 0; b < cols / 32; ++b) {
      const f16 d = to_f16(scale(rng));
      std::memcpy(out.storage.data() + i * stride + b * block_bytes(t), &d, sizeof d);
    }
  }
  out.view = weight_view(out.storage.data(), t, rows, cols, stride);
  out.values.resize(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
  std::vector<float> row(cols);
  for (std::size_t i = 0; i < rows; ++i) {
    reference::dequantize_row(out.view, i, row);
    for (std::size_t k = 0; k < cols; ++k)
      out.values(static_cast<Eigen::Index>(i), static_cast<Eigen::Index>(k)) = row[k];
  }
  return out;
}

}  // namespace

TEST_CASE(
    "cpu quantize_q8_0_x: d = max|x|/127, |x - d q| <= d (1/2 + 2^-16), zero and non-finite blocks, on every target") {
  std::mt19937 rng(40);
  std::vector<float> x = varied_vector(4128, rng);
  for (std::size_t k = 0; k < 32; ++k) {
    x[32 + k] = 0.0F;                        // block 1: zeros
    x[64 + k] = k == 5 ? -3.0F : 0.0F;       // block 2: one value
    x[96 + k] *= 1e30F;                      // block 3: large
    x[128 + k] *= 1e-30F;                    // block 4: tiny (d still normal)
    x[160 + k] = k % 2 == 0 ? 0.5F : -0.5F;  // block 5: every |x| the maximum
  }
  for_each_target([&] {
    const quantized_x q = quantize(x);
    for (std::size_t b = 0; b < x.size() / 32; ++b) {
      float amax = 0.0F;
      for (std::size_t k = 0; k < 32; ++k) amax = std::max(amax, std::fabs(x[32 * b + k]));
      INFO("block ", b);
      REQUIRE(q.d[b] == amax / 127.0F);
      for (std::size_t k = 0; k < 32; ++k) {
        const std::size_t i = 32 * b + k;
        REQUIRE(q.q[i] >= -127);
        REQUIRE(q.q[i] <= 127);
        const double err = std::fabs(static_cast<double>(x[i]) - static_cast<double>(q.d[b]) * q.q[i]);
        REQUIRE(err <= q.d[b] * (0.5 + quant_slack));
      }
    }
    CHECK(q.d[1] == 0.0F);
    CHECK(std::all_of(q.q.begin() + 32, q.q.begin() + 64, [](std::int8_t v) { return v == 0; }));
    CHECK(q.q[64 + 5] == -127);
    // A NaN or an infinity makes its block's d so (and its integers 0): non-finite products.
    std::vector<float> bad(64, 1.0F);
    bad[3] = std::numeric_limits<float>::quiet_NaN();
    bad[40] = -std::numeric_limits<float>::infinity();
    const quantized_x qb = quantize(bad);
    CHECK(std::isnan(qb.d[0]));
    CHECK(std::isinf(qb.d[1]));
    CHECK(std::all_of(qb.q.begin(), qb.q.end(), [](std::int8_t v) { return v == 0; }));
  });
  std::vector<std::int8_t> q(48);
  std::vector<float> d(2);
  CHECK_THROWS_WITH_AS(cpu::detail::quantize_q8_0_x(x.data(), 48, q.data(), d.data()),
                       doctest::Contains("'n' is 48; expected a multiple of 32"), error);
}

TEST_CASE("cpu x quantized by ggml's rule: the bits of ggml's quantize_row_q8_0, and the GEMV within its bound") {
  std::mt19937 rng(49);
  std::vector<float> x = varied_vector(4128, rng);
  for (std::size_t k = 0; k < 32; ++k) x[k] = 0.0F;                            // a block of zeros: d 0, q 0
  for (std::size_t k = 32; k < 64; ++k) x[k] = 1e-40F * (k % 3);               // subnormal: f16 d is 0, q 0
  for (std::size_t k = 64; k < 96; ++k) x[k] = static_cast<float>(k) - 80.0F;  // integers: exact ties
  const quantized_x want = ggml_quantize(x);
  const reference_backend ref;
  for_each_target([&] {
    const quantized_x got = quantize(x, true);
    CHECK(got.q == want.q);
    CHECK(same_bits(got.d, want.d));
  });
  for (const dtype t : block_dtypes) {
    for (const std::size_t cols : {32U, 1120U, 4128U}) {
      const test_weights w = make_weights(t, 33, cols, rng, 3);
      const auto xs = varied_vector(cols, rng);
      std::vector<float> ref_y(33);
      REQUIRE(ref.run_with_scratch(gemv_args{w.view, xs, ref_y, subset::everything()}));
      cpu::weight_layouts copies;
      (void)copies.add_interleaved(w.view);
      for (const cpu::weight_layouts* layouts : std::array<const cpu::weight_layouts*, 2>{nullptr, &copies}) {
        cpu_backend cpu = backend_with(true, layouts);
        cpu.ggml_activation_rounding = true;
        for_each_target([&] {
          INFO(name(t), " cols ", cols, " interleaved ", layouts != nullptr);
          std::vector<float> y(33);
          const gemv_args a{w.view, xs, y, subset::everything()};
          std::vector<std::byte> workspace(cpu.workspace_size(a));
          cpu::executor ex;
          REQUIRE(cpu.run(a, workspace, ex));
          check_int8_rows(w.view, w.values, xs, y, ref_y, true);
        });
      }
    }
  }
}

TEST_CASE("cpu q8_0 / q4_0 integer gemv: within the derived bounds of the exact quantized product and the reference") {
  std::mt19937 rng(46);
  const reference_backend ref;
  for (const dtype t : block_dtypes) {
    // 1088 / 1120: 34 / 35 blocks (an odd count leaves one block after the pairs of AVX-512);
    // 4128 = 4096 + 32: several 1 KB steps per row, then a ragged end.
    for (const std::size_t cols : {32U, 64U, 96U, 1088U, 1120U, 4128U}) {
      for (const std::size_t rows : {1U, 7U, 33U, 130U}) {           // 130: three 64-row tasks, 8-row groups and a rest
        const test_weights w = make_weights(t, rows, cols, rng, 3);  // strided: 3 padding blocks of 0xff per row
        const auto x = varied_vector(cols, rng);
        const auto kept = random_subset(rows, 0.4, rng);
        const auto all = all_indices(rows);
        std::vector<float> want(rows);
        REQUIRE(ref.run_with_scratch(gemv_args{w.view, x, want, subset::everything()}));
        for_each_target([&] {
          INFO(name(t), " rows ", rows, " cols ", cols);
          const auto dense = cpu_gemv(w.view, x, subset::everything());
          check_int8_rows(w.view, w.values, x, dense, want);
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

TEST_CASE("cpu q8_0 / q4_0 integer gemv: every weight integer (q8_0's -128 too), zero blocks, large and tiny x") {
  std::mt19937 rng(47);
  const reference_backend ref;
  for (const dtype t : block_dtypes) {
    for (const std::size_t cols : {64U, 1120U}) {
      const test_weights w = random_block_weights(t, 21, cols, rng);
      std::vector<float> x = varied_vector(cols, rng);
      for (std::size_t k = 0; k < 32; ++k) x[32 + k] = 0.0F;  // a zero block: d_x = 0, no NaN
      for (const float scale : {1.0F, 1e30F, 1e-20F}) {       // 1e-20: d_w·d_x stays a normal f32
        std::vector<float> xs(x);
        for (float& v : xs) v *= scale;
        std::vector<float> want(w.view.rows);
        REQUIRE(ref.run_with_scratch(gemv_args{w.view, xs, want, subset::everything()}));
        for_each_target([&] {
          INFO(name(t), " cols ", cols, " x scaled by ", scale);
          const auto y = cpu_gemv(w.view, xs, subset::everything());
          REQUIRE(std::all_of(y.begin(), y.end(), [](float v) { return std::isfinite(v); }));
          check_int8_rows(w.view, w.values, xs, y, want);
        });
      }
      // A NaN in x: every row's result is non-finite (as on the f32 path).
      std::vector<float> nan_x(x);
      nan_x[cols - 1] = std::numeric_limits<float>::quiet_NaN();
      for_each_target([&] {
        const auto y = cpu_gemv(w.view, nan_x, subset::everything());
        CHECK(std::none_of(y.begin(), y.end(), [](float v) { return std::isfinite(v); }));
      });
    }
  }
}

TEST_CASE("cpu q8_0 / q4_0 gemv, f32 path (int8_activations = false): dense and row gather match the reference") {
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
          CHECK(backend_with(false).workspace_size(gemv_args{w.view, x, want, subset::everything()}) == 0);
          const auto dense = cpu_gemv(w.view, x, subset::everything(), false);
          for (std::size_t i = 0; i < rows; ++i) {
            const double mag = row_magnitude(w.values, static_cast<Eigen::Index>(i), x);
            INFO("row ", i, ": cpu ", dense[i], " reference ", want[i]);
            REQUIRE(std::fabs(static_cast<double>(dense[i]) - want[i]) <= 2.0 * dot_factor(cols + 2) * mag);
          }
          const auto gather = cpu_gemv(w.view, x, subset::only(kept), false);
          REQUIRE(gather.size() == kept.size());
          for (std::size_t k = 0; k < kept.size(); ++k) {
            CHECK(same_bits(std::span<const float>(&gather[k], 1), std::span<const float>(&dense[kept[k]], 1)));
          }
          CHECK(same_bits(cpu_gemv(w.view, x, subset::only(all), false), dense));  // keep-all gather == dense
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
            if (cpu::detail::fused_multiply_add()) {
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
  // The GEMV from the row-major blocks and from an interleaved copy (cpu::interleave_rows).
  std::mt19937 rng(43);
  for (const dtype t : block_dtypes) {
    const test_weights w = make_weights(t, 1000, 1120, rng);  // GEMV: 16 tasks of 64 rows
    const auto x = varied_vector(1120, rng);
    const test_weights wt = make_weights(t, 96, 2080, rng);  // axpy: one column task per thread, the last ragged
    const auto x_in = random_vector(96, rng);
    const auto kept_rows = random_subset(1000, 0.4, rng);
    const auto kept_inputs = random_subset(96, 0.4, rng);
    cpu::weight_layouts copies;
    (void)copies.add_interleaved(w.view);
    const weight_view& view = w.view;
    const std::array<const cpu::weight_layouts*, 2> with_and_without{nullptr, &copies};
    for (const cpu::weight_layouts* layouts : with_and_without) {
      for (const bool int8 : {true, false}) {
        const cpu_backend cpu = backend_with(int8, layouts);
        for (const subset rows : {subset::everything(), subset::only(kept_rows)}) {
          const auto one = cpu_gemv(view, x, rows, int8, layouts);
          for (const std::size_t threads : {1U, 2U, 3U}) {
            INFO(name(t), " gemv, int8 ", int8, ", threads ", threads, ", interleaved ", layouts != nullptr);
            cpu::thread_pool pool(threads);
            cpu::executor ex(pool);
            CHECK(same_bits(cpu_gemv(view, x, rows, ex, int8, layouts), one));
            std::vector<float> y(one.size(), -1.0F);
            std::vector<std::thread> engine;
            for (std::size_t i = 0; i < threads; ++i) {
              engine.emplace_back([&, i] {
                // Each engine thread quantizes x into its own workspace.
                const gemv_args a{view, x, y, rows};
                std::vector<std::byte> workspace(cpu.workspace_size(a));
                cpu::executor mine = cpu::executor::split({i, threads});
                (void)cpu.run(a, workspace, mine);
              });
            }
            for (auto& e : engine) e.join();
            CHECK(same_bits(y, one));
          }
        }
      }
    }
    for (const subset inputs : {subset::everything(), subset::only(kept_inputs)}) {
      const auto one = cpu_axpy(wt.view, x_in, inputs);
      for (const std::size_t threads : {1U, 2U, 3U}) {
        INFO(name(t), " axpy, threads ", threads);
        cpu::thread_pool pool(threads);
        cpu::executor ex(pool);
        CHECK(same_bits(cpu_axpy(wt.view, x_in, inputs, ex), one));
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
                         doctest::Contains("is 48 values per row of q"), error);
    const weight_view wt48(bytes.data(), t, 4, 48, 64);  // Wt [4 inputs × 48 outputs]
    const std::vector<float> x4(4, 1.0F);
    std::vector<float> y48(48);
    CHECK_THROWS_WITH_AS((void)cpu_backend{}.run(transposed_linear_args{wt48, x4, y48, subset::everything()}, {}, ex),
                         doctest::Contains("'wt' is 48 values per row of"), error);
    // The kernel entry point itself takes whole blocks only.
    const test_weights wt = make_weights(t, 4, 64, rng);
    std::vector<float> y64(64);
    CHECK_THROWS_WITH_AS(cpu::detail::axpy_rows(wt.view, nullptr, 4, x4.data(), 16, 64, y64.data()),
                         doctest::Contains("whole 32-value blocks"), error);
    CHECK_NOTHROW(cpu::detail::axpy_rows(wt.view, nullptr, 4, x4.data(), 32, 64, y64.data()));
    // The integer path needs its workspace: x quantized, 4 bytes of d per 32 values, 1 per
    // value, then 4 per 32 values for the interleaved GEMV's corrections.
    const test_weights w64 = make_weights(t, 4, 64, rng);
    const std::vector<float> x64(64, 1.0F);
    std::vector<float> y4(4);
    const gemv_args a{w64.view, x64, y4, subset::everything()};
    CHECK(cpu_backend{}.workspace_size(a) == 2 * 4 + 64 + 2 * 4);
    CHECK_THROWS_WITH_AS((void)cpu_backend{}.run(a, {}, ex),
                         doctest::Contains("cpu::gemv: argument 'workspace.size()' is 0; expected at least 80 bytes"),
                         error);
    std::vector<std::byte> workspace(80);
    CHECK_NOTHROW((void)cpu_backend{}.run(a, workspace, ex));
    CHECK_NOTHROW((void)backend_with(false).run(a, {}, ex));
  }
  // The integer kernels' entry point takes q8_0 / q4_0 weights only.
  std::vector<float> f(4 * 32, 1.0F);
  const auto wf = matrix_view<const float>::packed(f.data(), 4, 32);
  std::vector<std::int8_t> xq(32);
  std::vector<float> xd(1);
  std::vector<float> y(4);
  CHECK_THROWS_WITH_AS(cpu::detail::gemv_rows_q8x(wf, nullptr, 0, 4, xq.data(), xd.data(), y.data()),
                       doctest::Contains("'w.type' is \"f32\"; expected q8_0 or q4_0"), error);
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
      // The CPU's linear over Wt: the reference's chain over Wt per chunk of 1024 or more rows
      // (bit for bit with FMA), the chunk sums added in order; with one chunk the reference's.
      const auto chunked = cpu_test::chunked_axpy(
          [&](std::size_t j, std::size_t i) {
            return static_cast<float>(wt_values(static_cast<Eigen::Index>(j), static_cast<Eigen::Index>(i)));
          },
          cols, rows, x, all_indices(cols));
      if (cpu::axpy_chunk_count(cols) == 1) CHECK(same_bits(chunked, want_t));
      for_each_target([&] {
        const auto y = cpu_axpy(wt.view, x, subset::everything());
        if (cpu::detail::fused_multiply_add()) CHECK(same_bits(y, chunked));
      });
    }
    // Rows not a multiple of 32: the rows of Wᵀ could not be blocked.
    const test_weights odd = make_weights(t, 33, 64, rng);
    CHECK_THROWS_WITH_AS((void)cpu::transpose(odd.view), doctest::Contains("'w.rows' is 33 rows of"), error);
    CHECK_THROWS_WITH_AS((void)cpu::transpose(odd.view), doctest::Contains("a multiple of 32 rows"), error);
  }
}

TEST_CASE("cpu::interleave_rows: lossless (each row reads back as its blocks), odd row counts, and its errors") {
  std::mt19937 rng(60);
  for (const dtype t : block_dtypes) {
    for (const std::size_t cols : {32U, 96U, 1120U}) {
      for (const std::size_t rows : {1U, 15U, 16U, 17U, 37U, 130U}) {
        const test_weights w = random_block_weights(t, rows, cols, rng);  // every byte value
        const cpu::interleaved_weights iw = cpu::interleave_rows(w.view);
        INFO(name(t), " rows ", rows, " cols ", cols);
        CHECK(iw.bytes.size() == cpu::interleaved_bytes(t, rows, cols));
        CHECK(iw.bytes.size() == (rows + 15) / 16 * 16 * row_bytes(t, cols));
        CHECK(iw.view.data == iw.bytes.data());
        CHECK(iw.source.data == w.view.data);
        CHECK(iw.view.rows == rows);
        CHECK(iw.view.cols == cols);
        std::vector<std::byte> row(row_bytes(t, cols));
        for (std::size_t i = 0; i < rows; ++i) {
          cpu::deinterleave_row(t, iw.view.data, cols, i, row.data());
          REQUIRE(std::memcmp(row.data(), static_cast<const std::byte*>(w.view.data) + i * w.view.row_stride,
                              row.size()) == 0);
        }
        for (std::size_t i = rows; i % 16 != 0; ++i) {  // rows past the last: scale 0
          cpu::deinterleave_row(t, iw.view.data, cols, i, row.data());
          for (std::size_t b = 0; b < cols / 32; ++b) {
            CHECK(row[b * block_bytes(t)] == std::byte{0});
            CHECK(row[b * block_bytes(t) + 1] == std::byte{0});
          }
        }
      }
    }
  }
  const test_weights h = make_weights(dtype::f16, 16, 64, rng);
  CHECK_THROWS_WITH_AS(
      (void)cpu::interleave_rows(h.view),
      doctest::Contains("'w.type' is \"f16\"; expected q8_0 or q4_0 (the dtypes with an interleaved layout)"), error);
  const test_weights f = make_weights(dtype::f32, 16, 64, rng);
  CHECK_THROWS_AS((void)cpu::interleave_rows(f.view), error);
  const test_weights q4 = make_weights(dtype::q4_0, 16, 64, rng);
  weight_view empty = q4.view;
  empty.rows = 0;
  CHECK_THROWS_WITH_AS((void)cpu::interleave_rows(empty), doctest::Contains("a non-empty matrix"), error);
  weight_view ragged(q4.view.data, dtype::q4_0, 16, 48, q4.view.row_stride);
  CHECK_THROWS_WITH_AS((void)cpu::interleave_rows(ragged), doctest::Contains("a multiple of 32 values per row"), error);
}

TEST_CASE("cpu::column_blocks: lossless (each row reads back as its blocks), the down kernel, and their errors") {
  std::mt19937 rng(64);
  for (const dtype t : block_dtypes) {
    for (const std::size_t rows : {32U, 96U, 1120U}) {
      for (const std::size_t cols : {32U, 224U}) {
        const test_weights w = random_block_weights(t, rows, cols, rng);  // every byte value
        const cpu::column_blocks_weights cb = cpu::column_blocks(w.view);
        INFO(name(t), " rows ", rows, " cols ", cols);
        CHECK(cb.bytes.size() == rows * row_bytes(t, cols));  // the model's bytes, no more
        CHECK(cpu::column_blocks_bytes(w.view) == cb.bytes.size());
        CHECK(cb.view.column_bytes() * (cols / 32) == cb.bytes.size());
        std::vector<std::byte> row(row_bytes(t, cols));
        for (std::size_t i = 0; i < rows; ++i) {
          cpu::column_blocks_row(cb.view, i, row.data());
          REQUIRE(std::memcmp(row.data(), static_cast<const std::byte*>(w.view.data) + i * w.view.row_stride,
                              row.size()) == 0);
        }
        // y = W·h over a kept set (and every neuron) against the double sum of the same terms:
        // the weights exact, f32 rounding only.
        std::vector<float> h = varied_vector(cols, rng);
        for (std::size_t j = 0; j < cols; j += 7) h[j] = 0.0F;
        const std::vector<std::uint32_t> kept = random_subset(cols, 0.3, rng);
        const std::vector<std::uint32_t> every = all_indices(cols);
        for_each_target([&] {
          for (const auto* set : std::array<const std::vector<std::uint32_t>*, 2>{&kept, &every}) {
            std::vector<float> y(rows, -1.0F);
            cpu::detail::column_blocks_down(cb.view, set->data(), set->size(), h.data(), 0, rows, y.data());
            for (std::size_t i = 0; i < rows; ++i) {
              double want = 0.0, magnitude = 0.0;
              for (const std::uint32_t j : *set) {
                want += static_cast<double>(h[j]) * w.values(static_cast<Eigen::Index>(i), j);
                magnitude += std::fabs(static_cast<double>(h[j]) * w.values(static_cast<Eigen::Index>(i), j));
              }
              REQUIRE(std::fabs(y[i] - want) <= 1e-5 * magnitude + 1e-30);
            }
            if (rows > 32) {  // a row range: the same bits as the whole
              std::vector<float> part(rows, -1.0F);
              cpu::detail::column_blocks_down(cb.view, set->data(), set->size(), h.data(), 32, rows, part.data());
              CHECK(same_bits(std::span<const float>(part).subspan(32), std::span<const float>(y).subspan(32)));
              CHECK(part[0] == -1.0F);
            }
            if (set == &every) {  // every index listed: the bits of the dense call (no list)
              std::vector<float> dense(rows);
              cpu::detail::column_blocks_down(cb.view, nullptr, 0, h.data(), 0, rows, dense.data());
              CHECK(same_bits(dense, y));
            }
          }
        });
      }
    }
  }
  const test_weights q4 = make_weights(dtype::q4_0, 64, 96, rng);
  const cpu::column_blocks_weights cb = cpu::column_blocks(q4.view);
  // Into the engine's buffer: the same bytes; a short buffer is refused.
  std::vector<std::byte> buffer(cb.bytes.size());
  (void)cpu::column_blocks_into(q4.view, buffer);
  CHECK(buffer == cb.bytes);
  std::vector<std::byte> small(cb.bytes.size() - 1);
  CHECK_THROWS_WITH_AS((void)cpu::column_blocks_into(q4.view, small), doctest::Contains("column_blocks_bytes(w)"),
                       error);
  const test_weights odd = make_weights(dtype::q8_0, 33, 64, rng);
  CHECK_THROWS_WITH_AS((void)cpu::column_blocks(odd.view),
                       doctest::Contains("'w.rows' is 33; expected a positive multiple of 32"), error);
  const test_weights f = make_weights(dtype::f16, 32, 64, rng);
  CHECK_THROWS_WITH_AS((void)cpu::column_blocks(f.view),
                       doctest::Contains("q8_0 or q4_0 (the dtypes with a column-block layout)"), error);
  const std::vector<float> h(96, 1.0F);
  std::vector<float> y(64);
  CHECK_THROWS_WITH_AS(cpu::detail::column_blocks_down(cb.view, nullptr, 0, h.data(), 16, 64, y.data()),
                       doctest::Contains("'[begin, end)' is \"[16, 64)\"; expected multiples of 32"), error);
  CHECK_THROWS_WITH_AS(cpu::detail::column_blocks_down(cb.view, nullptr, 0, h.data(), 0, 96, y.data()),
                       doctest::Contains("'end' is 96; expected in [begin, w.rows] = [0, 64]"), error);
  // The layouts table: one copy per matrix, found by the source view only.
  cpu::weight_layouts layouts;
  (void)layouts.add_column_blocks(q4.view);
  CHECK(layouts.column_blocks(q4.view) != nullptr);
  CHECK(layouts.interleaved(q4.view) == nullptr);
  CHECK(layouts.bytes() == cb.bytes.size());
  CHECK_THROWS_WITH_AS((void)layouts.add_column_blocks(q4.view), doctest::Contains("one column-block copy per matrix"),
                       error);
  cpu::column_blocks_view wrong = cb.view;
  wrong.rows = 32;
  CHECK_THROWS_WITH_AS((void)cpu::weight_layouts{}.add_borrowed(q4.view, wrong),
                       doctest::Contains("the layout of the source matrix"), error);
}

TEST_CASE("cpu integer kernels: VNNI on every x86 target that has it, AVX2 or the portable body on the others") {
  // Each target this program can run, forced in turn: AVX3_DL (AVX-512 VNNI) runs vpdpbusd,
  // AVX3 and AVX2 vpmaddubsw, every other target the portable code (the bits of all of them
  // are compared in the GEMV tests above).
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string kernels = cpu::int8_kernels();
    INFO("target ", hwy::TargetName(target), ": ", kernels);
    if (target == HWY_AVX3_DL) {
      CHECK(kernels == "avx512_vnni");
    } else if (target == HWY_AVX3 || target == HWY_AVX2) {
      CHECK(kernels == "avx2");
    } else {
      CHECK(kernels == "portable");
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  // The default dispatch on a CPU with AVX-512 VNNI picks it (this unit does not compile
  // AVX3_DL, the kernels' unit does: SupportedTargets() says what the CPU has).
  const std::string best = cpu::int8_kernels();
  MESSAGE("integer kernels of this CPU: ", best);
  if ((hwy::SupportedTargets() & HWY_AVX3_DL) != 0) CHECK(best == "avx512_vnni");
}

TEST_CASE(
    "layouts written into an engine's buffer: interleave_rows_into and transpose_into give the owned copies' bytes") {
  std::mt19937 rng(62);
  for (const dtype t : block_dtypes) {
    const test_weights w = random_block_weights(t, 37, 1120, rng);
    const cpu::interleaved_weights owned = cpu::interleave_rows(w.view);
    const std::size_t need = cpu::interleaved_bytes(t, 37, 1120);
    std::vector<std::byte> buffer(need + 8, std::byte{0xab});  // the engine's memory, with a guard
    const cpu::interleaved_view placed = cpu::interleave_rows_into(w.view, buffer);
    INFO(name(t));
    CHECK(placed.data == buffer.data());
    CHECK(std::memcmp(buffer.data(), owned.bytes.data(), need) == 0);
    CHECK(std::all_of(buffer.begin() + static_cast<std::ptrdiff_t>(need), buffer.end(),
                      [](std::byte b) { return b == std::byte{0xab}; }));
    // The backend reads the borrowed copy as it reads an owned one: the same bits.
    cpu::weight_layouts borrowed;
    CHECK(borrowed.add_borrowed(w.view, placed).data == buffer.data());
    CHECK(borrowed.bytes() == 0);
    REQUIRE(borrowed.interleaved(w.view) != nullptr);
    cpu::weight_layouts own;
    (void)own.add_interleaved(w.view);
    const auto x = random_vector(1120, rng);
    CHECK(same_bits(cpu_gemv(w.view, x, subset::everything(), true, &borrowed),
                    cpu_gemv(w.view, x, subset::everything(), true, &own)));
    std::vector<std::byte> small(need - 1);
    CHECK_THROWS_WITH_AS((void)cpu::interleave_rows_into(w.view, small),
                         doctest::Contains(("at least " + std::to_string(need) + " bytes").c_str()), error);
    cpu::interleaved_view wrong = placed;
    wrong.rows = 36;
    CHECK_THROWS_WITH_AS((void)cpu::weight_layouts{}.add_borrowed(w.view, wrong),
                         doctest::Contains("the layout of the source matrix"), error);
  }
  for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0}) {
    INFO(name(t));
    const test_weights w = make_weights(t, 64, 96, rng, 1);  // strided rows
    const cpu::owned_weights owned = cpu::transpose(w.view);
    const std::size_t need = cpu::transposed_bytes(w.view);
    CHECK(need == owned.bytes.size());
    std::vector<std::byte> buffer(need + 8, std::byte{0xab});
    const weight_view placed = cpu::transpose_into(w.view, buffer);
    CHECK(placed.data == buffer.data());
    CHECK(placed.rows == 96);
    CHECK(placed.cols == 64);
    CHECK(placed.row_stride == owned.view.row_stride);
    CHECK(std::memcmp(buffer.data(), owned.bytes.data(), need) == 0);
    CHECK(std::all_of(buffer.begin() + static_cast<std::ptrdiff_t>(need), buffer.end(),
                      [](std::byte b) { return b == std::byte{0xab}; }));
    std::vector<std::byte> small(need - 1);
    CHECK_THROWS_WITH_AS((void)cpu::transpose_into(w.view, small),
                         doctest::Contains(("at least " + std::to_string(need) + " bytes").c_str()), error);
    if (alignment(t) > 1) {
      CHECK_THROWS_WITH_AS((void)cpu::transpose_into(w.view, std::span<std::byte>(buffer).subspan(1, need)),
                           doctest::Contains("aligned to"), error);
    }
  }
  const test_weights odd = make_weights(dtype::q8_0, 33, 64, rng);
  CHECK_THROWS_WITH_AS((void)cpu::transposed_bytes(odd.view), doctest::Contains("a multiple of 32 rows"), error);
}

TEST_CASE("cpu q8_0 / q4_0 interleaved gemv: within the integer bounds on every target, and gathers read the blocks") {
  std::mt19937 rng(61);
  const reference_backend ref;
  // 1120 / 4128: odd block counts, several prefetch steps; 7 / 33 / 130: partial last groups;
  // 130 rows also make two whole 64-row tasks of four groups, then a rest.
  for (const dtype t : block_dtypes) {
    for (const std::size_t cols : {32U, 64U, 1120U, 4128U}) {
      for (const std::size_t rows : {1U, 7U, 16U, 33U, 130U}) {
        const test_weights w = make_weights(t, rows, cols, rng, 3);
        cpu::weight_layouts copies;
        const cpu::interleaved_view iw = copies.add_interleaved(w.view);
        const auto x = varied_vector(cols, rng);
        const auto kept = random_subset(rows, 0.4, rng);
        std::vector<float> want(rows);
        REQUIRE(ref.run_with_scratch(gemv_args{w.view, x, want, subset::everything()}));
        for_each_target([&] {
          INFO(name(t), " rows ", rows, " cols ", cols);
          CHECK(backend_with(true, &copies).plan(gemv_args{w.view, x, want, subset::everything()}).interleaved ==
                copies.interleaved(w.view));
          const auto dense = cpu_gemv(w.view, x, subset::everything(), true, &copies);
          check_int8_rows(w.view, w.values, x, dense, want);
          const std::vector<std::uint32_t> every_index = all_indices(rows);
          CHECK(same_bits(cpu_gemv(w.view, x, subset::only(every_index), true, &copies), dense));  // every row: dense
          if (kept.size() < rows) {  // a proper subset is gathered from the row-major blocks
            CHECK(same_bits(cpu_gemv(w.view, x, subset::only(kept), true, &copies),
                            cpu_gemv(w.view, x, subset::only(kept))));
          }
          CHECK(same_bits(cpu_gemv(w.view, x, subset::everything(), false, &copies),  // f32 path: the row-major blocks
                          cpu_gemv(w.view, x, subset::everything(), false)));
          for (const std::size_t threads : {2U, 3U}) {
            cpu::thread_pool pool(threads);
            cpu::executor ex(pool);
            CHECK(same_bits(cpu_gemv(w.view, x, subset::everything(), ex, true, &copies), dense));
          }
          // A row range computes the same bits as the whole (begin on a group of 16).
          if (rows > 16) {
            const quantized_x q = quantize(x);
            std::vector<std::int32_t> xs(cols / 32);
            cpu::block_sums(q.q.data(), cols, xs.data());
            std::vector<float> part(rows, -1.0F);
            cpu::detail::gemv_rows_interleaved(iw, 16, rows, q.q.data(), q.d.data(), xs.data(), part.data());
            CHECK(same_bits(std::span<const float>(part).subspan(16), std::span<const float>(dense).subspan(16)));
            CHECK(part[0] == -1.0F);
          }
        });
      }
    }
  }
}

TEST_CASE("cpu q8_0 / q4_0 interleaved gemv: every weight integer, zero and large x, and the argument errors") {
  std::mt19937 rng(62);
  const reference_backend ref;
  for (const dtype t : block_dtypes) {
    const test_weights w = random_block_weights(t, 37, 1120, rng);  // every integer (q8_0's -128 too)
    cpu::weight_layouts copies;
    const cpu::interleaved_view iw = copies.add_interleaved(w.view);
    for (const float scale : {1.0F, 1e-20F, 1e20F}) {
      auto x = varied_vector(1120, rng);
      for (float& v : x) v *= scale;
      std::fill(x.begin() + 64, x.begin() + 96, 0.0F);  // a zero block of x
      std::vector<float> want(37);
      REQUIRE(ref.run_with_scratch(gemv_args{w.view, x, want, subset::everything()}));
      for_each_target([&] {
        INFO(name(t), " x scale ", scale);
        check_int8_rows(w.view, w.values, x, cpu_gemv(w.view, x, subset::everything(), true, &copies), want);
      });
    }
    const quantized_x q = quantize(std::vector<float>(1120, 1.0F));
    std::vector<std::int32_t> xs(1120 / 32);
    std::vector<float> y(37);
    CHECK_THROWS_WITH_AS(cpu::detail::gemv_rows_interleaved(iw, 8, 37, q.q.data(), q.d.data(), xs.data(), y.data()),
                         doctest::Contains("'begin' is 8; expected a multiple of 16"), error);
    CHECK_THROWS_WITH_AS(cpu::detail::gemv_rows_interleaved(iw, 16, 38, q.q.data(), q.d.data(), xs.data(), y.data()),
                         doctest::Contains("'end' is 38; expected in [begin, w.rows] = [16, 37]"), error);
    CHECK_THROWS_WITH_AS(cpu::detail::gemv_rows_interleaved(cpu::interleaved_view{t, nullptr, 37, 1120}, 0, 37,
                                                            q.q.data(), q.d.data(), xs.data(), y.data()),
                         doctest::Contains("the interleaved copy of a q8_0 or q4_0 matrix"), error);
    // A second copy of the same matrix is refused.
    CHECK_THROWS_WITH_AS((void)copies.add_interleaved(w.view), doctest::Contains("one interleaved copy per matrix"),
                         error);
    // A view that differs from the copy's source (here: fewer rows) does not find it.
    weight_view fewer = w.view;
    fewer.rows = 36;
    CHECK(copies.interleaved(fewer) == nullptr);
    CHECK(copies.interleaved(w.view) != nullptr);
    CHECK(copies.size() == 1);
    CHECK(copies.bytes() == cpu::interleaved_bytes(t, 37, 1120));
  }
}
