// The generated kernels run on the CPU (simt_emulation.hpp: the threads of a block as fibers,
// barriers for __syncthreads and the warp primitives) against the reference math: indexing,
// block partitions, shuffles, ballots and the order of the compacted lists. The kernels are
// generated at build time (cuda_emulation/emit_kernels.cpp). Not a GPU run: memory model,
// timing and the hardware's f16 conversion are not exercised.
#include "mass_selection_cases.hpp"
#include "quantized_matrix.hpp"
#include "simt_emulation.hpp"
#include "test_reference_support.hpp"
#include "token_kernel_cases.hpp"

#include <actsparse/backends/cuda/generator.hpp>
#include <actsparse/backends/reference.hpp>
#include <actsparse/core/activation.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/core/routing.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <stdexcept>
#include <utility>
#include <vector>

#include "emulated_kernels.inc"  // generated: tests/cuda_emulation/emit_kernels.cpp

namespace cuda = actsparse::cuda;
namespace gpu = actsparse::gpu;
using actsparse::activation;
using actsparse::dtype;

namespace {

using gemv_fn = void (*)(const unsigned char*, unsigned long long, const float*, unsigned int, unsigned int, float*);
using gather_fn = void (*)(const unsigned char*, unsigned long long, const float*, unsigned int, const unsigned int*,
                           unsigned int, float*);
using axpy_fn = void (*)(const unsigned char*, unsigned long long, const unsigned int*, const float*, unsigned int,
                         unsigned int, float*);

struct dtype_kernels {
  dtype t;
  gemv_fn gemv;
  gather_fn gather;
  axpy_fn axpy;
};

// The configs of emit_kernels.cpp, in its order.
const dtype_kernels by_dtype[] = {
    {dtype::f32, emulated_0::actsparse_gemv_f32_t64_r2, emulated_1::actsparse_gather_gemv_f32_t64,
     emulated_2::actsparse_row_axpy_f32_t32},
    {dtype::f16, emulated_3::actsparse_gemv_f16_t64_r2, emulated_4::actsparse_gather_gemv_f16_t64,
     emulated_5::actsparse_row_axpy_f16_t32},
    {dtype::bf16, emulated_6::actsparse_gemv_bf16_t64_r2, emulated_7::actsparse_gather_gemv_bf16_t64,
     emulated_8::actsparse_row_axpy_bf16_t32},
    {dtype::q8_0, emulated_9::actsparse_gemv_q8_0_t64_r2, emulated_10::actsparse_gather_gemv_q8_0_t64,
     emulated_11::actsparse_row_axpy_q8_0_t32},
    {dtype::q4_0, emulated_12::actsparse_gemv_q4_0_t64_r2, emulated_13::actsparse_gather_gemv_q4_0_t64,
     emulated_14::actsparse_row_axpy_q4_0_t32},
};

using matrix = actsparse_test::quantized_matrix;

matrix make_matrix(dtype t, std::size_t rows, std::size_t cols, unsigned seed) {
  std::mt19937 rng(seed);
  return actsparse_test::make_quantized_matrix(t, rows, cols, rng);
}

std::vector<float> random_vector(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0F, 1.0F);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// W[r,:]·x in double, and the bound of |float sum - exact| used as the tolerance.
void check_dot(const matrix& m, std::size_t r, std::size_t cols, const std::vector<float>& x, float got) {
  double exact = 0;
  double magnitude = 0;
  for (std::size_t c = 0; c < cols; ++c) {
    exact += static_cast<double>(m.values[r * cols + c]) * x[c];
    magnitude += std::abs(static_cast<double>(m.values[r * cols + c]) * x[c]);
  }
  CHECK(std::abs(got - exact) <= 1e-5 * magnitude + 1e-6);
}

}  // namespace

TEST_CASE("cuda emulated: gemv, gather_gemv and row_axpy match the reference for every dtype") {
  constexpr std::size_t rows = 37;
  constexpr std::size_t cols = 96;
  for (const auto& k : by_dtype) {
    CAPTURE(actsparse::name(k.t));
    const matrix m = make_matrix(k.t, rows, cols, 3);
    const std::vector<float> x = random_vector(cols, 4);

    const gpu::kernel_config gemv{gpu::kernel_op::gemv, k.t, activation::silu, 64, 2};
    std::vector<float> y(rows, -1.0F);
    emulate_launch(cuda::grid_blocks(gemv, rows), 64,
                   [&] { k.gemv(m.bytes.data(), m.stride, x.data(), rows, cols, y.data()); });
    for (std::size_t r = 0; r < rows; ++r) check_dot(m, r, cols, x, y[r]);
    std::vector<float> again(rows);
    emulate_launch(cuda::grid_blocks(gemv, rows), 64,
                   [&] { k.gemv(m.bytes.data(), m.stride, x.data(), rows, cols, again.data()); });
    CHECK(std::memcmp(y.data(), again.data(), rows * sizeof(float)) == 0);  // the same bits every run

    const std::vector<unsigned int> idx = {36, 0, 5, 5, 17, 2, 30};
    const gpu::kernel_config gather{gpu::kernel_op::gather_gemv, k.t, activation::silu, 64, 1};
    std::vector<float> yg(idx.size(), -1.0F);
    emulate_launch(cuda::grid_blocks(gather, idx.size()), 64, [&] {
      k.gather(m.bytes.data(), m.stride, x.data(), cols, idx.data(), static_cast<unsigned int>(idx.size()), yg.data());
    });
    for (std::size_t i = 0; i < idx.size(); ++i) CHECK(yg[i] == y[idx[i]]);  // the same row, the same bits

    // row_axpy over the matrix as Wt (rows x cols): y = Σ coef[k]·Wt[idx[k], :], in order.
    const std::vector<unsigned int> kept = {1, 4, 9, 10, 36};
    const std::vector<float> coef = {0.5F, -2.0F, 1.25F, 3.0F, -0.75F};
    const gpu::kernel_config axpy{gpu::kernel_op::row_axpy, k.t, activation::silu, 32, 1};
    std::vector<float> ya(cols, -1.0F);
    emulate_launch(cuda::grid_blocks(axpy, cols), 32, [&] {
      k.axpy(m.bytes.data(), m.stride, kept.data(), coef.data(), static_cast<unsigned int>(kept.size()), cols,
             ya.data());
    });
    for (std::size_t c = 0; c < cols; ++c) {
      float expected = 0.0F;
      for (std::size_t j = 0; j < kept.size(); ++j)
        expected = std::fma(coef[j], m.values[kept[j] * cols + c], expected);
      CHECK(ya[c] == expected);  // the same fma chain in the same order: the same bits
    }
  }
}

namespace {

template <class Gate, class Compact>
void check_gate(Gate gate, Compact compact, const gpu::kernel_config& c, std::size_t rows, std::size_t cols) {
  const matrix m = make_matrix(c.weight, rows, cols, 8);
  const std::vector<float> x = random_vector(cols, 9);
  const float threshold = 0.4F;
  const std::size_t grid = cuda::grid_blocks(c, rows);
  const unsigned rpb = cuda::rows_per_block(c);
  std::vector<float> h(rows, -9.0F);
  std::vector<unsigned int> block_counts(grid, 999U);
  std::vector<unsigned int> idx(rows, 0xFFFFFFFFU);
  unsigned int count = 12345;
  emulate_launch(grid, c.threads_per_block, [&] {
    gate(m.bytes.data(), m.stride, x.data(), static_cast<unsigned int>(rows), static_cast<unsigned int>(cols),
         threshold, h.data(), block_counts.data());
  });
  emulate_launch(grid, c.threads_per_block, [&] {
    compact(h.data(), static_cast<unsigned int>(rows), rpb, threshold, block_counts.data(), idx.data(), &count);
  });
  std::vector<unsigned int> expected;
  for (std::size_t j = 0; j < rows; ++j) {
    double g = 0;
    double magnitude = 0;
    for (std::size_t i = 0; i < cols; ++i) {
      g += static_cast<double>(m.values[j * cols + i]) * x[i];
      magnitude += std::abs(static_cast<double>(m.values[j * cols + i]) * x[i]);
    }
    const float act = actsparse::apply(c.act, static_cast<float>(g));
    CHECK(std::abs(h[j] - act) <= 1e-5 * magnitude + 1e-6);
    if (std::abs(h[j]) > threshold) expected.push_back(static_cast<unsigned int>(j));
  }
  REQUIRE(count == expected.size());
  CHECK(expected.size() > 0);
  CHECK(expected.size() < rows);
  for (std::size_t i = 0; i < expected.size(); ++i) CHECK(idx[i] == expected[i]);
  for (std::size_t i = expected.size(); i < rows; ++i) CHECK(idx[i] == 0xFFFFFFFFU);  // nothing written past count
}

}  // namespace

TEST_CASE("cuda emulated: gate + activation + threshold, then compaction, gives the kept rows in order") {
  check_gate(emulated_15::actsparse_gate_silu_q4_0_t64_r2, emulated_15::actsparse_compact_t64,
             {gpu::kernel_op::gate_select, dtype::q4_0, activation::silu, 64, 2}, 53, 64);
  check_gate(emulated_16::actsparse_gate_gelu_f16_t96, emulated_16::actsparse_compact_t96,
             {gpu::kernel_op::gate_select, dtype::f16, activation::gelu, 96, 1}, 200, 32);
}

TEST_CASE("cuda emulated: compaction with blocks of many warps and many chunks") {
  // rows_per_block is an argument of the compact kernel: 150 rows per block of 64 threads
  // takes 3 chunks per block, with kept rows in both warps of every chunk.
  constexpr unsigned rows = 400;
  constexpr unsigned rpb = 150;
  constexpr unsigned grid = (rows + rpb - 1) / rpb;
  const std::vector<float> h = random_vector(rows, 31);
  const float threshold = 0.6F;
  std::vector<unsigned int> block_counts(grid, 0);
  std::vector<unsigned int> expected;
  for (unsigned j = 0; j < rows; ++j) {
    if (std::abs(h[j]) > threshold) {
      expected.push_back(j);
      ++block_counts[j / rpb];
    }
  }
  std::vector<unsigned int> idx(rows, 0xFFFFFFFFU);
  unsigned int count = 12345;
  emulate_launch(grid, 64, [&] {
    emulated_15::actsparse_compact_t64(h.data(), rows, rpb, threshold, block_counts.data(), idx.data(), &count);
  });
  REQUIRE(count == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) CHECK(idx[i] == expected[i]);
}

TEST_CASE("cuda emulated: token gather and scatter-add") {
  constexpr unsigned d = 70;  // more than one pass of 64 threads
  constexpr unsigned stride = 75;
  constexpr unsigned dst_stride = actsparse_test::token_dst_stride;
  actsparse_test::check_token_gather_scatter<unsigned int>(
      random_vector(10 * stride, 12), stride, d,
      [&](const float* src, const unsigned int* tokens, float* dst) {
        emulate_launch(3, 64,
                       [&] { emulated_17::actsparse_token_gather_t64(src, stride, tokens, 3, d, dst, dst_stride); });
      },
      [&](const float* dst, const unsigned int* tokens, float* x) {
        emulate_launch(3, 64,
                       [&] { emulated_18::actsparse_token_scatter_add_t64(dst, dst_stride, tokens, 3, d, x, stride); });
      });
}

TEST_CASE("cuda emulated: top_k gives the top_k selector's indices, ties to the lower index") {
  std::mt19937 rng(21);
  std::uniform_int_distribution<int> level(-6, 6);
  std::vector<float> scores(300);
  for (auto& s : scores) s = static_cast<float>(level(rng)) * 0.25F;  // many ties
  scores[10] = -0.0F;
  for (const unsigned k : {0U, 1U, 17U, 150U, 299U, 300U}) {
    CAPTURE(k);
    actsparse::selection expected;
    actsparse::top_k::by_count(k).select(scores, expected);
    std::vector<unsigned int> idx(300, 0xFFFFFFFFU);
    unsigned int count = 12345;
    emulate_launch(1, 64, [&] { emulated_19::actsparse_top_k_t64(scores.data(), 300, k, idx.data(), &count); });
    REQUIRE(count == expected.indices.size());
    for (std::size_t i = 0; i < count; ++i) CHECK(idx[i] == expected.indices[i]);
  }
}

namespace {

using partial_fn = decltype(&emulated_20::actsparse_row_axpy_partial_f32_t32);
using reduce_fn = decltype(&emulated_20::actsparse_reduce_partials_t32);
using gated_fn = decltype(&emulated_21::actsparse_gated_gather_silu_f32_t64_r2);
using batched_fn = decltype(&emulated_22::actsparse_batched_gemv_f32_t64_r2_b4);

struct split_kernels {
  dtype t;
  partial_fn partial;
  reduce_fn reduce;
  gated_fn gated;
  batched_fn batched;
};

// The configs of emit_kernels.cpp 20 .. 34, in its order.
const split_kernels new_by_dtype[] = {
    {dtype::f32, emulated_20::actsparse_row_axpy_partial_f32_t32, emulated_20::actsparse_reduce_partials_t32,
     emulated_21::actsparse_gated_gather_silu_f32_t64_r2, emulated_22::actsparse_batched_gemv_f32_t64_r2_b4},
    {dtype::f16, emulated_23::actsparse_row_axpy_partial_f16_t32, emulated_23::actsparse_reduce_partials_t32,
     emulated_24::actsparse_gated_gather_silu_f16_t64_r2, emulated_25::actsparse_batched_gemv_f16_t64_r2_b4},
    {dtype::bf16, emulated_26::actsparse_row_axpy_partial_bf16_t32, emulated_26::actsparse_reduce_partials_t32,
     emulated_27::actsparse_gated_gather_silu_bf16_t64_r2, emulated_28::actsparse_batched_gemv_bf16_t64_r2_b4},
    {dtype::q8_0, emulated_29::actsparse_row_axpy_partial_q8_0_t32, emulated_29::actsparse_reduce_partials_t32,
     emulated_30::actsparse_gated_gather_silu_q8_0_t64_r2, emulated_31::actsparse_batched_gemv_q8_0_t64_r2_b4},
    {dtype::q4_0, emulated_32::actsparse_row_axpy_partial_q4_0_t32, emulated_32::actsparse_reduce_partials_t32,
     emulated_33::actsparse_gated_gather_silu_q4_0_t64_r2, emulated_34::actsparse_batched_gemv_q4_0_t64_r2_b4},
};

}  // namespace

TEST_CASE("cuda emulated: row_axpy with idx == nullptr is row_axpy over rows 0 .. count-1") {
  constexpr std::size_t cols = 96;
  for (const auto& k : by_dtype) {
    CAPTURE(actsparse::name(k.t));
    const matrix m = make_matrix(k.t, 9, cols, 5);
    const std::vector<float> coef = random_vector(9, 6);
    const std::vector<unsigned int> iota = {0, 1, 2, 3, 4, 5, 6, 7, 8};
    const gpu::kernel_config axpy{gpu::kernel_op::row_axpy, k.t, activation::silu, 32, 1};
    std::vector<float> with(cols, -1.0F);
    std::vector<float> without(cols, -2.0F);
    emulate_launch(cuda::grid_blocks(axpy, cols), 32,
                   [&] { k.axpy(m.bytes.data(), m.stride, iota.data(), coef.data(), 9, cols, with.data()); });
    emulate_launch(cuda::grid_blocks(axpy, cols), 32,
                   [&] { k.axpy(m.bytes.data(), m.stride, nullptr, coef.data(), 9, cols, without.data()); });
    CHECK(std::memcmp(with.data(), without.data(), cols * sizeof(float)) == 0);
  }
}

TEST_CASE("cuda emulated: row_axpy_split = per-split fma chains, then their sum in split order") {
  constexpr std::size_t rows = 37;
  constexpr std::size_t cols = 96;
  for (const auto& k : new_by_dtype) {
    CAPTURE(actsparse::name(k.t));
    const matrix m = make_matrix(k.t, rows, cols, 13);
    const gpu::kernel_config c{gpu::kernel_op::row_axpy_split, k.t, activation::silu, 32, 1};
    const std::vector<unsigned int> kept = {0, 3, 4, 8, 9, 10, 15, 21, 22, 30, 36};
    struct run {
      const unsigned int* idx;
      unsigned int count;
      unsigned int rows_per_split;
    };
    // A ragged last split (11 = 4 + 4 + 3), nullptr idx over every row (37 = 7 x 5 + 2),
    // one split (row_axpy's bits), and no kept row at all.
    for (const run r : {run{kept.data(), 11, 4}, run{nullptr, 37, 5}, run{kept.data(), 11, 64}, run{nullptr, 0, 4}}) {
      CAPTURE(r.count);
      CAPTURE(r.rows_per_split);
      const std::vector<float> coef = random_vector(r.count, 14);
      const std::size_t splits = gpu::split_count(r.count, r.rows_per_split);
      std::vector<float> partial(splits * cols + 1, -3.0F);
      std::vector<float> y(cols + 1, -1.0F);
      if (splits > 0) {
        emulate_launch(cuda::grid_blocks(c, cols, 0), splits, 32, [&] {
          k.partial(m.bytes.data(), m.stride, r.idx, coef.data(), r.count, cols, r.rows_per_split, partial.data());
        });
      }
      emulate_launch(cuda::grid_blocks(c, cols, 1), 32,
                     [&] { k.reduce(partial.data(), static_cast<unsigned int>(splits), cols, y.data()); });
      for (std::size_t col = 0; col < cols; ++col) {
        float expected = 0.0F;
        for (std::size_t s = 0; s < splits; ++s) {
          float acc = 0.0F;
          for (std::size_t j = s * r.rows_per_split; j < std::min<std::size_t>(r.count, (s + 1) * r.rows_per_split);
               ++j) {
            const std::size_t row = r.idx != nullptr ? r.idx[j] : j;
            acc = std::fma(coef[j], m.values[row * cols + col], acc);
          }
          CHECK(partial[s * cols + col] == acc);
          expected += acc;
        }
        CHECK(y[col] == expected);
      }
      CHECK(partial[splits * cols] == -3.0F);  // nothing written past the splits
      CHECK(y[cols] == -1.0F);
    }
  }
}

TEST_CASE("cuda emulated: gated_gather equals act(gather_gemv(gate)) * gather_gemv(up) bit for bit") {
  constexpr std::size_t rows = 13;
  constexpr std::size_t cols = 96;
  for (std::size_t d = 0; d < std::size(by_dtype); ++d) {
    const auto& k = by_dtype[d];
    CAPTURE(actsparse::name(k.t));
    const matrix gate = make_matrix(k.t, rows, cols, 40);
    const matrix up = make_matrix(k.t, rows, cols, 41);
    const std::vector<float> x = random_vector(cols, 42);
    const std::vector<float> gate_act = random_vector(rows, 43);
    std::vector<unsigned int> iota(rows);
    for (unsigned int i = 0; i < rows; ++i) iota[i] = i;
    const std::vector<unsigned int> idx = {12, 0, 5, 5, 7, 2, 11, 9, 10};
    const gpu::kernel_config gather{gpu::kernel_op::gather_gemv, k.t, activation::silu, 64, 1};
    const gpu::kernel_config gated{gpu::kernel_op::gated_gather, k.t, activation::silu, 64, 2};
    for (const bool all : {false, true}) {
      const std::vector<unsigned int>& list = all ? iota : idx;
      const auto count = static_cast<unsigned int>(list.size());
      const unsigned int* pass = all ? nullptr : idx.data();  // nullptr: j = k
      std::vector<float> g(count);
      std::vector<float> u(count);
      emulate_launch(cuda::grid_blocks(gather, count), 64,
                     [&] { k.gather(gate.bytes.data(), gate.stride, x.data(), cols, list.data(), count, g.data()); });
      emulate_launch(cuda::grid_blocks(gather, count), 64,
                     [&] { k.gather(up.bytes.data(), up.stride, x.data(), cols, list.data(), count, u.data()); });
      std::vector<float> h(count + 1, -5.0F);
      emulate_launch(cuda::grid_blocks(gated, count), 64, [&] {
        new_by_dtype[d].gated(gate.bytes.data(), gate.stride, up.bytes.data(), up.stride, x.data(), cols, pass, count,
                              nullptr, h.data());
      });
      for (std::size_t i = 0; i < count; ++i) CHECK(h[i] == actsparse::silu(g[i]) * u[i]);
      CHECK(h[count] == -5.0F);
      // With gate_act the gate matrix is not read (nullptr here).
      std::vector<float> ha(count + 1, -5.0F);
      emulate_launch(cuda::grid_blocks(gated, count), 64, [&] {
        new_by_dtype[d].gated(nullptr, 0, up.bytes.data(), up.stride, x.data(), cols, pass, count, gate_act.data(),
                              ha.data());
      });
      for (std::size_t i = 0; i < count; ++i) CHECK(ha[i] == gate_act[list[i]] * u[i]);
      CHECK(ha[count] == -5.0F);
    }
    // count 0: nothing written even by a launched block.
    std::vector<float> h(4, -5.0F);
    emulate_launch(1, 64, [&] {
      new_by_dtype[d].gated(gate.bytes.data(), gate.stride, up.bytes.data(), up.stride, x.data(), cols, idx.data(), 0,
                            nullptr, h.data());
    });
    for (const float v : h) CHECK(v == -5.0F);
  }
  // gelu, one row per warp, three warps per block.
  const matrix gate = make_matrix(dtype::f16, 50, 64, 44);
  const matrix up = make_matrix(dtype::f16, 50, 64, 45);
  const std::vector<float> x = random_vector(64, 46);
  std::vector<unsigned int> idx;
  for (unsigned int j = 1; j < 50; j += 3) idx.push_back(j);
  const auto count = static_cast<unsigned int>(idx.size());
  std::vector<float> g(count);
  std::vector<float> u(count);
  std::vector<float> h(count);
  emulate_launch(cuda::grid_blocks({gpu::kernel_op::gather_gemv, dtype::f16, activation::silu, 64, 1}, count), 64, [&] {
    emulated_4::actsparse_gather_gemv_f16_t64(gate.bytes.data(), gate.stride, x.data(), 64, idx.data(), count,
                                              g.data());
    emulated_4::actsparse_gather_gemv_f16_t64(up.bytes.data(), up.stride, x.data(), 64, idx.data(), count, u.data());
  });
  emulate_launch(
      cuda::grid_blocks({gpu::kernel_op::gated_gather, dtype::f16, activation::gelu, 96, 1}, count), 96, [&] {
        emulated_35::actsparse_gated_gather_gelu_f16_t96(gate.bytes.data(), gate.stride, up.bytes.data(), up.stride,
                                                         x.data(), 64, idx.data(), count, nullptr, h.data());
      });
  for (std::size_t i = 0; i < count; ++i) CHECK(h[i] == actsparse::gelu(g[i]) * u[i]);
}

TEST_CASE("cuda emulated: gated_hidden and gather_values") {
  constexpr unsigned n = 77;
  const std::vector<float> g = random_vector(n, 50);
  const std::vector<float> u = random_vector(n, 51);
  using hidden_fn = decltype(&emulated_36::actsparse_gated_hidden_silu_t64);
  const std::pair<activation, hidden_fn> kernels[] = {{activation::silu, emulated_36::actsparse_gated_hidden_silu_t64},
                                                      {activation::gelu, emulated_37::actsparse_gated_hidden_gelu_t64},
                                                      {activation::relu, emulated_38::actsparse_gated_hidden_relu_t64}};
  for (const auto& [act, kernel] : kernels) {
    CAPTURE(actsparse::name(act));
    std::vector<float> h(n + 1, -7.0F);
    emulate_launch(cuda::grid_blocks({gpu::kernel_op::gated_hidden, dtype::f32, act, 64, 1}, n), 64,
                   [&] { kernel(g.data(), u.data(), n, h.data()); });
    for (unsigned i = 0; i < n; ++i) CHECK(h[i] == actsparse::apply(act, g[i]) * u[i]);
    CHECK(h[n] == -7.0F);
  }

  std::mt19937 rng(52);
  std::uniform_int_distribution<unsigned int> pick(0, n - 1);
  std::vector<unsigned int> idx(45);
  for (auto& i : idx) i = pick(rng);
  const gpu::kernel_config c{gpu::kernel_op::gather_values, dtype::f32, activation::silu, 32, 1};
  for (const unsigned count : {45U, 33U, 0U}) {
    CAPTURE(count);
    std::vector<float> dst(46, -7.0F);
    emulate_launch(std::max<std::size_t>(cuda::grid_blocks(c, count), 1), 32,
                   [&] { emulated_39::actsparse_gather_values_t32(g.data(), idx.data(), count, dst.data()); });
    for (unsigned k = 0; k < count; ++k) CHECK(dst[k] == g[idx[k]]);
    for (unsigned k = count; k < 46; ++k) CHECK(dst[k] == -7.0F);
  }
}

namespace {

constexpr std::size_t batch_rows = 13;
constexpr std::size_t batch_cols = 96;
constexpr std::size_t x_stride = 100;
constexpr std::size_t y_stride = 17;
constexpr unsigned max_tokens = 9;

struct batch_case {
  matrix m;
  std::vector<float> x;                // max_tokens rows, x_stride apart
  std::vector<std::vector<float>> y1;  // the gemv kernel (R = 2) run on each token alone
};

batch_case make_batch_case(dtype t, gemv_fn gemv) {
  batch_case b{make_matrix(t, batch_rows, batch_cols, 60), random_vector(max_tokens * x_stride, 61), {}};
  const gpu::kernel_config g{gpu::kernel_op::gemv, t, activation::silu, 64, 2};
  for (unsigned tok = 0; tok < max_tokens; ++tok) {
    std::vector<float> one(batch_rows);
    emulate_launch(cuda::grid_blocks(g, batch_rows), 64, [&] {
      gemv(b.m.bytes.data(), b.m.stride, b.x.data() + tok * x_stride, batch_rows, batch_cols, one.data());
    });
    b.y1.push_back(std::move(one));
  }
  return b;
}

// y[t, :] of a batched kernel against gemv's, for t < ntok; nothing else written.
template <class Batched>
void check_batched(Batched batched, const batch_case& b, const gpu::kernel_config& c, unsigned ntok) {
  CAPTURE(actsparse::name(c.weight));
  CAPTURE(c.tokens_per_pass);
  CAPTURE(ntok);
  std::vector<float> y(max_tokens * y_stride, -9.0F);
  emulate_launch(cuda::grid_blocks(c, batch_rows), c.threads_per_block, [&] {
    batched(b.m.bytes.data(), b.m.stride, b.x.data(), x_stride, ntok, batch_rows, batch_cols, y.data(), y_stride);
  });
  for (unsigned t = 0; t < max_tokens; ++t) {
    for (std::size_t k = 0; k < y_stride; ++k) {
      const float expected = t < ntok && k < batch_rows ? b.y1[t][k] : -9.0F;
      CHECK(y[t * y_stride + k] == expected);  // gemv's bits
    }
  }
}

}  // namespace

TEST_CASE("cuda emulated: batched_gemv gives each token gemv's bits") {
  for (std::size_t d = 0; d < std::size(by_dtype); ++d) {
    const batch_case b = make_batch_case(by_dtype[d].t, by_dtype[d].gemv);
    const gpu::kernel_config c{gpu::kernel_op::batched_gemv, by_dtype[d].t, activation::silu, 64, 2, 4};
    check_batched(new_by_dtype[d].batched, b, c, 7);  // 4 + 3 tokens
    if (by_dtype[d].t == dtype::q8_0) {
      const gpu::kernel_config q8{gpu::kernel_op::batched_gemv, dtype::q8_0, activation::silu, 32, 1, 8};
      for (const unsigned ntok : {0U, 3U, 9U})
        check_batched(emulated_42::actsparse_batched_gemv_q8_0_t32_b8, b, q8, ntok);
    }
    if (by_dtype[d].t == dtype::bf16) {
      const gpu::kernel_config bf{gpu::kernel_op::batched_gemv, dtype::bf16, activation::silu, 96, 4, 1};
      check_batched(emulated_43::actsparse_batched_gemv_bf16_t96_r4_b1, b, bf, 5);
    }
  }
}

namespace {

using mass_fn = decltype(&emulated_40::actsparse_cumulative_mass_t64);

std::vector<unsigned int> device_mass(mass_fn kernel, unsigned threads, const std::vector<float>& scores, float mass,
                                      unsigned min_keep) {
  const auto n = static_cast<unsigned int>(scores.size());
  return actsparse_test::kept_list(n, [&](unsigned int* idx, unsigned int* count) {
    emulate_launch(1, threads, [&] { kernel(scores.data(), n, mass, min_keep, idx, count); });
  });
}

}  // namespace

TEST_CASE("cuda emulated: cumulative_mass keeps the cumulative_mass selector's set") {
  actsparse_test::run_mass_cases([](const std::vector<float>& scores, float mass, unsigned min_keep) {
    return device_mass(emulated_40::actsparse_cumulative_mass_t64, 64, scores, mass, min_keep);
  });
  // Three warps (not a power of two) on a few cases: emulated passes are slow.
  actsparse_test::run_mass_cases_few([](const std::vector<float>& scores, float mass, unsigned min_keep) {
    return device_mass(emulated_41::actsparse_cumulative_mass_t96, 96, scores, mass, min_keep);
  });
}

namespace {

// --- Mixture of experts -------------------------------------------------------------------

constexpr unsigned int canary = 0xDEADBEEFU;

using expert_lists = std::vector<std::vector<std::uint32_t>>;

// A routing table from per-token expert lists (increasing), with weights in [0.05, 1).
actsparse::routing_table make_routing(std::size_t experts, const expert_lists& lists, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> weight(0.05F, 1.0F);
  std::vector<std::uint32_t> offsets{0};
  std::vector<std::uint32_t> pair_expert;
  std::vector<float> pair_weight;
  for (const auto& l : lists) {
    for (const std::uint32_t e : l) {
      pair_expert.push_back(e);
      pair_weight.push_back(weight(rng));
    }
    offsets.push_back(static_cast<std::uint32_t>(pair_expert.size()));
  }
  actsparse::routing_table r;
  r.assign(experts, offsets, pair_expert, pair_weight);
  return r;
}

// `tokens` lists of k distinct experts out of `allowed`, each increasing.
expert_lists random_lists(std::size_t tokens, std::vector<std::uint32_t> allowed, std::size_t k, std::mt19937& rng) {
  expert_lists lists;
  for (std::size_t t = 0; t < tokens; ++t) {
    std::shuffle(allowed.begin(), allowed.end(), rng);
    std::vector<std::uint32_t> l(allowed.begin(), allowed.begin() + static_cast<std::ptrdiff_t>(k));
    std::sort(l.begin(), l.end());
    lists.push_back(std::move(l));
  }
  return lists;
}

// The expert-major side as moe_route writes it (one canary past each list).
struct device_routing {
  std::vector<unsigned int> expert_offsets;
  std::vector<unsigned int> expert_pairs;
  std::vector<unsigned int> expert_tokens;
  std::vector<unsigned int> pair_position;
};

device_routing route_on_device(const actsparse::routing_table& r, bool with_position = true) {
  const gpu::kernel_config c{gpu::kernel_op::moe_route, dtype::f32, activation::silu, 64, 1};
  const auto experts = static_cast<unsigned int>(r.experts());
  const auto pairs = static_cast<unsigned int>(r.pairs());
  const auto tokens = static_cast<unsigned int>(r.tokens());
  std::vector<unsigned int> counts(experts, 999U);
  device_routing d{std::vector<unsigned int>(experts + 2, canary), std::vector<unsigned int>(pairs + 1, canary),
                   std::vector<unsigned int>(pairs + 1, canary), std::vector<unsigned int>(pairs + 1, canary)};
  const std::size_t grid = cuda::grid_blocks(c, experts, 0);
  CHECK(grid == cuda::grid_blocks(c, experts, 1));
  emulate_launch(grid, 64,
                 [&] { emulated_44::actsparse_moe_count_t64(r.pair_expert().data(), pairs, experts, counts.data()); });
  emulate_launch(grid, 64, [&] {
    emulated_44::actsparse_moe_scatter_t64(r.token_offsets().data(), r.pair_expert().data(), tokens, pairs, experts,
                                           counts.data(), d.expert_offsets.data(), d.expert_pairs.data(),
                                           d.expert_tokens.data(), with_position ? d.pair_position.data() : nullptr);
  });
  CHECK(d.expert_offsets[experts + 1] == canary);  // nothing written past the lists
  CHECK(d.expert_pairs[pairs] == canary);
  CHECK(d.expert_tokens[pairs] == canary);
  CHECK(d.pair_position[pairs] == canary);
  d.expert_offsets.pop_back();
  d.expert_pairs.pop_back();
  d.expert_tokens.pop_back();
  d.pair_position.pop_back();
  return d;
}

template <class T>
bool same_list(const std::vector<T>& got, std::span<const T> want) {
  return std::equal(got.begin(), got.end(), want.begin(), want.end());
}

}  // namespace

TEST_CASE("cuda emulated: moe_route gives routing_table::assign's expert-major lists, moe_pad gives pad()'s") {
  std::mt19937 rng(70);
  std::vector<std::uint32_t> forty(40);
  for (std::uint32_t i = 0; i < 40; ++i) forty[i] = i;
  const std::pair<std::size_t, expert_lists> cases[] = {
      // Expert 3 without a token, a token without an expert, 1 to 3 experts a token.
      {5, {{0, 2}, {1}, {}, {0, 1, 4}, {2, 4}, {0, 1, 2}, {4}}},
      // Expert 2 takes every token, the others none.
      {4, expert_lists(9, {2})},
      // 135 pairs (5 chunks of 32 for each warp), the last expert without a token.
      {7, random_lists(45, {0, 1, 2, 3, 4, 5}, 3, rng)},
      // 40 experts: 20 blocks, and offsets summed over more than 32 experts.
      {40, random_lists(20, forty, 4, rng)},
      // No pair at all, and no token at all.
      {3, {{}, {}}},
      {3, {}},
  };
  for (const auto& [experts, lists] : cases) {
    CAPTURE(experts);
    CAPTURE(lists.size());
    const actsparse::routing_table r = make_routing(experts, lists, 71);
    const device_routing d = route_on_device(r);
    CHECK(same_list(d.expert_offsets, r.expert_offsets()));
    CHECK(same_list(d.expert_pairs, r.expert_pairs()));
    CHECK(same_list(d.expert_tokens, r.expert_tokens()));
    for (std::size_t q = 0; q < r.pairs(); ++q) CHECK(d.pair_position[r.expert_pairs()[q]] == q);  // the inverse
    const device_routing without = route_on_device(r, false);  // no pair_position: the rest the same
    CHECK(without.expert_offsets == d.expert_offsets);
    CHECK(without.expert_pairs == d.expert_pairs);
    CHECK(without.expert_tokens == d.expert_tokens);
    CHECK(std::all_of(without.pair_position.begin(), without.pair_position.end(),
                      [](unsigned int v) { return v == canary; }));

    const gpu::kernel_config c{gpu::kernel_op::moe_pad, dtype::f32, activation::silu, 64, 1};
    for (const unsigned block : {1U, 3U, 16U}) {
      CAPTURE(block);
      const actsparse::padded_routing want = actsparse::pad(r, block);
      const std::size_t most = r.pairs() + std::min(r.experts(), r.pairs()) * (block - 1);
      std::vector<unsigned int> sorted(most + 1, canary);
      std::vector<unsigned int> block_experts(most / block + 1, canary);
      unsigned int post = canary;
      emulate_launch(cuda::grid_blocks(c, experts), 64, [&] {
        emulated_45::actsparse_moe_pad_t64(d.expert_offsets.data(), d.expert_pairs.data(),
                                           static_cast<unsigned int>(experts), block, sorted.data(),
                                           block_experts.data(), &post);
      });
      REQUIRE(post == want.pairs_post_padded());
      CHECK(std::equal(want.sorted_pair_ids.begin(), want.sorted_pair_ids.end(), sorted.begin()));
      CHECK(std::equal(want.block_experts.begin(), want.block_experts.end(), block_experts.begin()));
      CHECK(std::all_of(sorted.begin() + post, sorted.end(), [](unsigned int v) { return v == canary; }));
      CHECK(std::all_of(block_experts.begin() + static_cast<std::ptrdiff_t>(want.block_experts.size()),
                        block_experts.end(), [](unsigned int v) { return v == canary; }));
    }
  }
}

namespace {

// One projection of E experts, stacked: expert e's rows x cols matrix starts e·expert_stride
// bytes in, and is followed by one row of 0xff bytes (NaN in every dtype) that a kernel must
// not read.
struct stacked_matrix {
  matrix m;
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::size_t expert_stride = 0;

  [[nodiscard]] const unsigned char* expert(std::size_t e) const { return m.bytes.data() + e * expert_stride; }
  [[nodiscard]] float value(std::size_t e, std::size_t r, std::size_t c) const {
    return m.values[(e * (rows + 1) + r) * cols + c];
  }
  [[nodiscard]] Eigen::MatrixXd eigen(std::size_t e) const {
    Eigen::MatrixXd out(static_cast<Eigen::Index>(rows), static_cast<Eigen::Index>(cols));
    for (std::size_t r = 0; r < rows; ++r) {
      for (std::size_t c = 0; c < cols; ++c)
        out(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c)) = value(e, r, c);
    }
    return out;
  }
  [[nodiscard]] actsparse::stacked_view view(std::size_t experts) const {
    return {actsparse::weight_view(m.bytes.data(), m.view.type, rows, cols, m.stride), experts, expert_stride};
  }
};

stacked_matrix make_stacked(dtype t, std::size_t experts, std::size_t rows, std::size_t cols, unsigned seed) {
  stacked_matrix s{make_matrix(t, experts * (rows + 1), cols, seed), rows, cols, 0};
  s.expert_stride = (rows + 1) * s.m.stride;
  for (std::size_t e = 0; e < experts; ++e)
    std::memset(s.m.bytes.data() + e * s.expert_stride + rows * s.m.stride, 0xff, s.m.stride);
  return s;
}

using moe_gated_fn = decltype(&emulated_47::actsparse_moe_gated_silu_f32_t64_r2);
using moe_down_fn = decltype(&emulated_48::actsparse_moe_down_f32_t32);

struct moe_kernels {
  gpu::kernel_config gated_config;
  moe_gated_fn gated;
  gpu::kernel_config down_config;
  moe_down_fn down;
  gemv_fn gemv;  // by_dtype's, rows_per_warp 2: the bits of every dot product
};

// Phase 1, phase 2 and the combine on a small MoE layer: 4 experts (expert 1 without a token),
// 6 tokens (the last one without an expert), 2 experts for each of the others; strided x and y.
// Each kernel's result against the same operations on the host (bit for bit), and y against
// the reference backend's gated FFN of each (token, expert) combined by the same fma chain:
// both within the double-precision oracle's bound (test_reference_support.hpp).
void check_moe_chain(const moe_kernels& k) {
  constexpr std::size_t experts = 4;
  constexpr std::size_t d_model = 64;
  constexpr std::size_t d_ff = 40;  // not a multiple of the 4 or 3 rows a block covers
  constexpr std::size_t x_stride = d_model + 3;
  constexpr std::size_t y_stride = d_model + 5;
  const dtype t = k.gated_config.weight;
  const activation act = k.gated_config.act;
  CAPTURE(actsparse::name(t));
  CAPTURE(actsparse::name(act));
  std::mt19937 rng(80);
  expert_lists lists = random_lists(5, {0, 2, 3}, 2, rng);
  lists.emplace_back();
  const actsparse::routing_table r = make_routing(experts, lists, 81);
  const std::size_t tokens = r.tokens();
  const auto pairs = static_cast<unsigned int>(r.pairs());
  const device_routing d = route_on_device(r);
  REQUIRE(same_list(d.expert_offsets, r.expert_offsets()));
  REQUIRE(same_list(d.expert_tokens, r.expert_tokens()));

  const stacked_matrix gate = make_stacked(t, experts, d_ff, d_model, 82);
  const stacked_matrix up = make_stacked(t, experts, d_ff, d_model, 83);
  const stacked_matrix down_t = make_stacked(t, experts, d_ff, d_model, 84);  // W_downᵀ, d_ff x d_model
  const std::vector<float> x = random_vector(tokens * x_stride, 85);
  auto expert_of = [&](std::size_t q) { return r.pair_expert()[r.expert_pairs()[q]]; };

  // Phase 1: h[q, :] = act(Gate_e x_t) * (Up_e x_t), gemv's bits.
  std::vector<float> h(pairs * d_ff + 1, -5.0F);
  emulate_launch(pairs, cuda::grid_blocks(k.gated_config, d_ff), k.gated_config.threads_per_block, [&] {
    k.gated(gate.m.bytes.data(), gate.m.stride, gate.expert_stride, up.m.bytes.data(), up.m.stride, up.expert_stride,
            x.data(), x_stride, d_model, d_ff, d.expert_offsets.data(), experts, d.expert_tokens.data(), pairs,
            h.data());
  });
  const gpu::kernel_config gemv{gpu::kernel_op::gemv, t, activation::silu, 64, 2};
  for (std::size_t q = 0; q < pairs; ++q) {
    const float* xt = x.data() + r.expert_tokens()[q] * x_stride;
    std::vector<float> g(d_ff);
    std::vector<float> u(d_ff);
    emulate_launch(cuda::grid_blocks(gemv, d_ff), 64, [&] {
      k.gemv(gate.expert(expert_of(q)), gate.m.stride, xt, d_ff, d_model, g.data());
      k.gemv(up.expert(expert_of(q)), up.m.stride, xt, d_ff, d_model, u.data());
    });
    for (std::size_t j = 0; j < d_ff; ++j) CHECK(h[q * d_ff + j] == actsparse::apply(act, g[j]) * u[j]);
  }
  CHECK(h[pairs * d_ff] == -5.0F);

  // Phase 2: f[q, :] = row_axpy's chain over all rows of DownT_e with h[q, :].
  std::vector<float> f(pairs * d_model + 1, -6.0F);
  emulate_launch(pairs, cuda::grid_blocks(k.down_config, d_model), k.down_config.threads_per_block, [&] {
    k.down(down_t.m.bytes.data(), down_t.m.stride, down_t.expert_stride, d.expert_offsets.data(), experts, h.data(),
           pairs, d_ff, d_model, f.data());
  });
  for (std::size_t q = 0; q < pairs; ++q) {
    for (std::size_t c = 0; c < d_model; ++c) {
      float acc = 0.0F;
      for (std::size_t j = 0; j < d_ff; ++j) acc = std::fma(h[q * d_ff + j], down_t.value(expert_of(q), j, c), acc);
      CHECK(f[q * d_model + c] == acc);
    }
  }
  CHECK(f[pairs * d_model] == -6.0F);

  // Combine: y[t, :] = the fma chain over t's pairs in token-major order, from +0.
  std::vector<float> y(tokens * y_stride, -9.0F);
  const gpu::kernel_config combine{gpu::kernel_op::moe_combine, dtype::f32, activation::silu, 32, 1};
  emulate_launch(tokens, cuda::grid_blocks(combine, d_model), 32, [&] {
    emulated_46::actsparse_moe_combine_t32(f.data(), d_model, r.token_offsets().data(), r.pair_weight().data(),
                                           d.pair_position.data(), static_cast<unsigned int>(tokens), y.data(),
                                           y_stride);
  });
  for (std::size_t tok = 0; tok < tokens; ++tok) {
    for (std::size_t c = 0; c < d_model; ++c) {
      float acc = 0.0F;
      for (std::uint32_t p = r.token_offsets()[tok]; p < r.token_offsets()[tok + 1]; ++p)
        acc = std::fma(r.pair_weight()[p], f[d.pair_position[p] * d_model + c], acc);
      CHECK(y[tok * y_stride + c] == acc);
    }
    for (std::size_t c = d_model; c < y_stride; ++c) CHECK(y[tok * y_stride + c] == -9.0F);  // the stride's gap
  }
  CHECK(std::signbit(y[(tokens - 1) * y_stride]) == false);  // a token without experts: +0
  CHECK(y[(tokens - 1) * y_stride] == 0.0F);

  // The reference backend's gated FFN of each pair, combined in token-major order, and the
  // double-precision oracle (the same combine of ffn_oracle's values, the bounds propagated).
  const actsparse::moe_experts layer{act, gate.view(experts), up.view(experts), actsparse::stacked_view{},
                                     down_t.view(experts)};
  for (std::size_t tok = 0; tok < tokens; ++tok) {
    CAPTURE(tok);
    const std::span<const float> xt(x.data() + tok * x_stride, d_model);
    std::vector<float> want(d_model, 0.0F);
    constexpr auto n = static_cast<Eigen::Index>(d_model);
    reference_test::oracle exact{Eigen::VectorXd::Zero(n), Eigen::VectorXd::Zero(n)};
    Eigen::VectorXd magnitude = Eigen::VectorXd::Zero(n);
    const std::uint32_t b = r.token_offsets()[tok];
    const std::uint32_t e = r.token_offsets()[tok + 1];
    for (std::uint32_t p = b; p < e; ++p) {
      const std::uint32_t ex = r.pair_expert()[p];
      const float w = r.pair_weight()[p];
      const double wd = w;
      std::vector<float> fp(d_model);
      REQUIRE(actsparse::reference_backend{}.run_with_scratch(
          actsparse::gated_ffn_args{layer.expert(ex), xt, fp, actsparse::subset::everything()}));
      for (std::size_t c = 0; c < d_model; ++c) want[c] = std::fma(w, fp[c], want[c]);
      const reference_test::oracle o = reference_test::ffn_oracle(
          act, gate.eigen(ex), up.eigen(ex), down_t.eigen(ex).transpose(), xt, actsparse::subset::everything());
      exact.value += wd * o.value;
      exact.bound += std::abs(wd) * o.bound;
      magnitude += std::abs(wd) * (o.value.cwiseAbs() + o.bound);
    }
    exact.bound += reference_test::dot_factor(e - b) * magnitude;
    const std::span<const float> got(y.data() + tok * y_stride, d_model);
    reference_test::check_within(got, exact);
    reference_test::check_within(want, exact);
    for (std::size_t c = 0; c < d_model; ++c) {  // the CPU oracle: both within the bound of the exact value
      CHECK(std::abs(static_cast<double>(got[c]) - want[c]) <= 2.0 * exact.bound(static_cast<Eigen::Index>(c)));
    }
  }
}

}  // namespace

TEST_CASE("cuda emulated: the MoE expert FFN (moe_gated, moe_down, moe_combine) against the reference backend") {
  using op = gpu::kernel_op;
  check_moe_chain({{op::moe_gated, dtype::f32, activation::silu, 64, 2},
                   emulated_47::actsparse_moe_gated_silu_f32_t64_r2,
                   {op::moe_down, dtype::f32, activation::silu, 32, 1},
                   emulated_48::actsparse_moe_down_f32_t32,
                   by_dtype[0].gemv});
  check_moe_chain({{op::moe_gated, dtype::q4_0, activation::silu, 64, 2},
                   emulated_49::actsparse_moe_gated_silu_q4_0_t64_r2,
                   {op::moe_down, dtype::q4_0, activation::silu, 32, 1},
                   emulated_50::actsparse_moe_down_q4_0_t32,
                   by_dtype[4].gemv});
  // gelu, one row per warp, three warps per block; f16 with two warps per column block.
  check_moe_chain({{op::moe_gated, dtype::f16, activation::gelu, 96, 1},
                   emulated_51::actsparse_moe_gated_gelu_f16_t96,
                   {op::moe_down, dtype::f16, activation::silu, 64, 1},
                   emulated_52::actsparse_moe_down_f16_t64,
                   by_dtype[1].gemv});
}

TEST_CASE("cuda emulated: the emulation itself: positions, barriers, early returns, shuffles, ballots, throws") {
  // 2 x 3 blocks of 96 threads (3 warps). Threads 70 .. 95 return at once: they drop out of
  // __syncthreads, and the others still meet there twice around a "shared" array.
  constexpr unsigned int threads = 96;
  constexpr unsigned int live = 70;
  std::vector<unsigned int> out(6 * threads, 0);
  std::vector<unsigned int> warp_sum(6 * threads, 0);
  std::vector<unsigned int> ballot(6 * threads, 0);
  emulate_launch(2, 3, threads, [&] {
    static unsigned int shared[threads];  // __shared__
    const unsigned int tid = threadIdx.x;
    const unsigned int block = blockIdx.y * gridDim.x + blockIdx.x;
    if (blockDim.x != threads || gridDim.x != 2 || gridDim.y != 3 || tid >= live) return;
    if (tid < 64) {  // the two full warps: a butterfly sum and a ballot
      unsigned int v = tid + block;
      for (int m = 16; m > 0; m >>= 1) v += __shfl_xor_sync(0xffffffffu, v, m);
      warp_sum[block * threads + tid] = v;
      ballot[block * threads + tid] = __ballot_sync(0xffffffffu, tid % 3 == 0);
    }
    shared[tid] = tid + 1000 * block;
    __syncthreads();
    const unsigned int next = shared[(tid + 1) % live];
    __syncthreads();
    shared[tid] = 0;
    out[block * threads + tid] = threadIdx.x == tid ? next : 0;
  });
  for (unsigned int b = 0; b < 6; ++b) {
    for (unsigned int t = 0; t < threads; ++t) {
      const unsigned int warp = t / 32;
      CHECK(out[b * threads + t] == (t < live ? (t + 1) % live + 1000 * b : 0));
      CHECK(warp_sum[b * threads + t] == (warp < 2 ? 32 * (32 * warp + b) + 496 : 0));
      CHECK(ballot[b * threads + t] == (warp < 2 ? (warp == 0 ? 0x49249249u : 0x92492492u) : 0));
    }
  }
  // An exception ends its thread as a return would; the launch rethrows it after the block.
  unsigned int passed = 0;
  CHECK_THROWS_AS(emulate_launch(3, 64,
                                 [&] {
                                   if (blockIdx.x == 1 && threadIdx.x == 5) throw std::runtime_error("kernel");
                                   __syncthreads();
                                   ++passed;
                                 }),
                  std::runtime_error);
  CHECK(passed == 64 + 63);
}
