// The generated kernels run on the CPU (simt_emulation.hpp: one std::thread per CUDA thread,
// barriers for __syncthreads and the warp primitives) against the reference math: indexing,
// block partitions, shuffles, ballots and the order of the compacted lists. The kernels are
// generated at build time (cuda_emulation/emit_kernels.cpp). Not a GPU run: memory model,
// timing and the hardware's f16 conversion are not exercised.
#include "mass_selection_cases.hpp"
#include "quantized_matrix.hpp"
#include "simt_emulation.hpp"
#include "token_kernel_cases.hpp"

#include <actsparse/backends/cuda/generator.hpp>
#include <actsparse/core/activation.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
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
