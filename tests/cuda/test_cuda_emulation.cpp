// The generated kernels run on the CPU (simt_emulation.hpp: one std::thread per CUDA thread,
// barriers for __syncthreads and the warp primitives) against the reference math: indexing,
// block partitions, shuffles, ballots and the order of the compacted lists. The kernels are
// generated at build time (cuda_emulation/emit_kernels.cpp). Not a GPU run: memory model,
// timing and the hardware's f16 conversion are not exercised.
#include "simt_emulation.hpp"

#include <actsparse/backends/cuda/generator.hpp>
#include <actsparse/core/activation.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "emulated_kernels.inc"  // generated: tests/cuda_emulation/emit_kernels.cpp

namespace cuda = actsparse::cuda;
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

// A rows x cols matrix stored as dtype t (row stride = the row's bytes), and its dequantized values.
struct matrix {
  std::vector<unsigned char> bytes;
  std::size_t stride = 0;
  std::vector<float> values;  // rows x cols, as the kernels see them
};

matrix make_matrix(dtype t, std::size_t rows, std::size_t cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0F, 1.0F);
  matrix m;
  m.stride = actsparse::row_bytes(t, cols);
  m.bytes.resize(rows * m.stride);
  m.values.resize(rows * cols);
  std::vector<float> row(cols);
  for (std::size_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = dist(rng);
    actsparse::visit_dtype(t, [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::vector<T> stored(cols / actsparse::dtype_traits<T>::block_values);
      actsparse::quantize_row(row.data(), stored.data(), cols);
      std::memcpy(m.bytes.data() + r * m.stride, stored.data(), m.stride);
      actsparse::dequantize_row(stored.data(), m.values.data() + r * cols, cols);
    });
  }
  return m;
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

    const cuda::kernel_config gemv{cuda::kernel_op::gemv, k.t, activation::silu, 64, 2};
    std::vector<float> y(rows, -1.0F);
    emulate_launch(cuda::grid_blocks(gemv, rows), 64,
                   [&] { k.gemv(m.bytes.data(), m.stride, x.data(), rows, cols, y.data()); });
    for (std::size_t r = 0; r < rows; ++r) check_dot(m, r, cols, x, y[r]);
    std::vector<float> again(rows);
    emulate_launch(cuda::grid_blocks(gemv, rows), 64,
                   [&] { k.gemv(m.bytes.data(), m.stride, x.data(), rows, cols, again.data()); });
    CHECK(std::memcmp(y.data(), again.data(), rows * sizeof(float)) == 0);  // the same bits every run

    const std::vector<unsigned int> idx = {36, 0, 5, 5, 17, 2, 30};
    const cuda::kernel_config gather{cuda::kernel_op::gather_gemv, k.t, activation::silu, 64, 1};
    std::vector<float> yg(idx.size(), -1.0F);
    emulate_launch(cuda::grid_blocks(gather, idx.size()), 64, [&] {
      k.gather(m.bytes.data(), m.stride, x.data(), cols, idx.data(), static_cast<unsigned int>(idx.size()), yg.data());
    });
    for (std::size_t i = 0; i < idx.size(); ++i) CHECK(yg[i] == y[idx[i]]);  // the same row, the same bits

    // row_axpy over the matrix as Wt (rows x cols): y = Σ coef[k]·Wt[idx[k], :], in order.
    const std::vector<unsigned int> kept = {1, 4, 9, 10, 36};
    const std::vector<float> coef = {0.5F, -2.0F, 1.25F, 3.0F, -0.75F};
    const cuda::kernel_config axpy{cuda::kernel_op::row_axpy, k.t, activation::silu, 32, 1};
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
void check_gate(Gate gate, Compact compact, const cuda::kernel_config& c, std::size_t rows, std::size_t cols) {
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
             {cuda::kernel_op::gate_select, dtype::q4_0, activation::silu, 64, 2}, 53, 64);
  check_gate(emulated_16::actsparse_gate_gelu_f16_t96, emulated_16::actsparse_compact_t96,
             {cuda::kernel_op::gate_select, dtype::f16, activation::gelu, 96, 1}, 200, 32);
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
  const std::vector<float> src = random_vector(10 * stride, 12);
  const std::vector<unsigned int> tokens = {1, 4, 9};
  std::vector<float> dst(3 * 80, -1.0F);
  emulate_launch(
      3, 64, [&] { emulated_17::actsparse_token_gather_t64(src.data(), stride, tokens.data(), 3, d, dst.data(), 80); });
  for (unsigned k = 0; k < 3; ++k) {
    for (unsigned i = 0; i < d; ++i) CHECK(dst[k * 80 + i] == src[tokens[k] * stride + i]);
    for (unsigned i = d; i < 80; ++i) CHECK(dst[k * 80 + i] == -1.0F);
  }
  std::vector<float> x = src;
  emulate_launch(3, 64, [&] {
    emulated_18::actsparse_token_scatter_add_t64(dst.data(), 80, tokens.data(), 3, d, x.data(), stride);
  });
  for (unsigned t = 0; t < 10; ++t) {
    const bool kept = t == 1 || t == 4 || t == 9;
    for (unsigned i = 0; i < stride; ++i) {
      const float expected = kept && i < d ? src[t * stride + i] + src[t * stride + i] : src[t * stride + i];
      CHECK(x[t * stride + i] == expected);
    }
  }
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
