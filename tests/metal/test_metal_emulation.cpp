// The generated Metal kernels, compiled as C++ and run on the CPU (metal_emulation.hpp: a
// std::thread per Metal thread, barriers for threadgroup_barrier and the simdgroup
// functions), against the reference backend on random odd shapes for every dtype:
// - bit for bit where the order of operations is the same: row_axpy (reference::
//   transposed_linear's fma chain), the activations, compaction, token gather / scatter-add,
//   top_k (the top_k selector's indices); and the GEMV dots against a host model of the
//   kernels' order (lanes take elements round robin, then a 5-step xor butterfly);
// - within a stated bound where it is not: a GEMV dot against reference::dense_gemv (one fma
//   chain over all columns) within (cols + L + 5)·2⁻²⁴·Σ|W[r,c]·x[c]|, L = the terms of one
//   lane, the sum of the two orders' standard error bounds.
// The kernels are generated at build time (emit_kernels.cpp). Not a GPU run: the memory
// model, the GPU's exp / tanh and the hardware's scheduling are not exercised.
#include "mass_selection_cases.hpp"
#include "metal_emulation.hpp"
#include "quantized_matrix.hpp"
#include "token_kernel_cases.hpp"

#include <actsparse/backends/metal/generator.hpp>
#include <actsparse/backends/reference.hpp>
#include <actsparse/core/activation.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

// The generated kernels, MSL keywords mapped to C++ only around them (in this order).
// clang-format off
#include "metal_keywords.hpp"
#include "emulated_metal_kernels.inc"  // generated: emit_kernels.cpp
#include "metal_keywords_undef.hpp"
// clang-format on

namespace msl = actsparse::metal;  // "metal" is MSL's own namespace here (metal_emulation.hpp)
namespace gpu = actsparse::gpu;
using actsparse::activation;
using actsparse::dtype;
using metal_emulation::dispatch;
using metal_emulation::emulated_thread;

namespace {

using u8 = unsigned char;
using uint = unsigned int;
using ulong = unsigned long;
using gemv_fn = void (*)(const u8*, const ulong&, const float*, const uint&, const uint&, float*, uint, uint, uint);
using gather_fn = void (*)(const u8*, const ulong&, const float*, const uint&, const uint*, const uint&, float*, uint,
                           uint, uint);
using axpy_fn = void (*)(const u8*, const ulong&, const uint*, const float*, const uint&, const uint&, float*, uint);
using gate_fn = void (*)(const u8*, const ulong&, const float*, const uint&, const uint&, const float&, float*, uint*,
                         uint, uint, uint, uint);
using compact_fn = void (*)(const float*, const uint&, const uint&, const float&, const uint*, uint*, uint*, uint, uint,
                            uint, uint, uint);

struct dtype_kernels {
  dtype t;
  gpu::kernel_config gemv_config;
  gemv_fn gemv;
  gather_fn gather;
  axpy_fn axpy;
  gpu::kernel_config gate_config;
  gate_fn gate;
  compact_fn compact;
};

constexpr gpu::kernel_op gemv_op = gpu::kernel_op::gemv;
constexpr gpu::kernel_op gate_op = gpu::kernel_op::gate_select;

// The configs of emit_kernels.cpp (emulation_configs), in its order.
const dtype_kernels by_dtype[] = {
    {dtype::f32,
     {gemv_op, dtype::f32, activation::silu, 64, 1},
     emulated_0::actsparse_gemv_f32_t64,
     emulated_1::actsparse_gather_gemv_f32_t96,
     emulated_2::actsparse_row_axpy_f32_t32,
     {gate_op, dtype::f32, activation::silu, 64, 2},
     emulated_3::actsparse_gate_silu_f32_t64_r2,
     emulated_3::actsparse_compact_t64},
    {dtype::f16,
     {gemv_op, dtype::f16, activation::silu, 64, 2},
     emulated_4::actsparse_gemv_f16_t64_r2,
     emulated_5::actsparse_gather_gemv_f16_t96,
     emulated_6::actsparse_row_axpy_f16_t32,
     {gate_op, dtype::f16, activation::gelu, 64, 1},
     emulated_7::actsparse_gate_gelu_f16_t64,
     emulated_7::actsparse_compact_t64},
    {dtype::bf16,
     {gemv_op, dtype::bf16, activation::silu, 64, 4},
     emulated_8::actsparse_gemv_bf16_t64_r4,
     emulated_9::actsparse_gather_gemv_bf16_t96,
     emulated_10::actsparse_row_axpy_bf16_t32,
     {gate_op, dtype::bf16, activation::relu, 64, 2},
     emulated_11::actsparse_gate_relu_bf16_t64_r2,
     emulated_11::actsparse_compact_t64},
    {dtype::q8_0,
     {gemv_op, dtype::q8_0, activation::silu, 64, 8},
     emulated_12::actsparse_gemv_q8_0_t64_r8,
     emulated_13::actsparse_gather_gemv_q8_0_t96,
     emulated_14::actsparse_row_axpy_q8_0_t32,
     {gate_op, dtype::q8_0, activation::silu, 64, 1},
     emulated_15::actsparse_gate_silu_q8_0_t64,
     emulated_15::actsparse_compact_t64},
    {dtype::q4_0,
     {gemv_op, dtype::q4_0, activation::silu, 64, 2},
     emulated_16::actsparse_gemv_q4_0_t64_r2,
     emulated_17::actsparse_gather_gemv_q4_0_t96,
     emulated_18::actsparse_row_axpy_q4_0_t32,
     {gate_op, dtype::q4_0, activation::gelu, 64, 2},
     emulated_19::actsparse_gate_gelu_q4_0_t64_r2,
     emulated_19::actsparse_compact_t64},
};

using matrix = actsparse_test::quantized_matrix;

matrix make_matrix(dtype t, std::size_t rows, std::size_t cols, std::mt19937& rng) {
  return actsparse_test::make_quantized_matrix(t, rows, cols, rng);
}

std::vector<float> random_vector(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0F, 1.0F);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Random odd shapes: rows in [1, 75]; cols odd in [1, 99] for f32 / f16 / bf16 (the first
// shape 75, above two rounds of 32 lanes), 32·[1, 5] for the block types.
struct shape {
  std::size_t rows;
  std::size_t cols;
};
std::vector<shape> random_shapes(dtype t, std::mt19937& rng) {
  std::uniform_int_distribution<std::size_t> rows(1, 75);
  std::uniform_int_distribution<std::size_t> half_cols(0, 49);
  std::uniform_int_distribution<std::size_t> blocks(1, 5);
  const bool blocked = actsparse::block_values(t) == 32;
  std::vector<shape> out = {{37, blocked ? std::size_t{96} : std::size_t{75}}};
  for (int i = 0; i < 2; ++i) out.push_back({rows(rng), blocked ? 32 * blocks(rng) : 2 * half_cols(rng) + 1});
  return out;
}

// W[r, :]·x in the kernels' order: lane l takes storage elements l, l + 32, ... (each one
// value or a 32-value block, values in order) into one fma chain; then v[l] += v[l ^ o]
// for o = 16, 8, 4, 2, 1.
float simd_order_dot(const matrix& m, std::size_t r, std::size_t cols, std::size_t bv, const std::vector<float>& x) {
  std::array<float, 32> lane{};
  const std::size_t n = cols / bv;
  for (std::size_t l = 0; l < 32; ++l) {
    float acc = 0.0F;
    for (std::size_t e = l; e < n; e += 32)
      for (std::size_t i = 0; i < bv; ++i) acc = std::fma(m.values[r * cols + e * bv + i], x[e * bv + i], acc);
    lane[l] = acc;
  }
  for (std::size_t o = 16; o > 0; o /= 2) {
    std::array<float, 32> next{};
    for (std::size_t l = 0; l < 32; ++l) next[l] = lane[l] + lane[l ^ o];
    lane = next;
  }
  return lane[0];
}

// |got - reference| within the two summation orders' error bounds (see the file comment).
void check_within_bound(const matrix& m, std::size_t r, std::size_t cols, std::size_t bv, const std::vector<float>& x,
                        float got, float reference) {
  double magnitude = 0;
  for (std::size_t c = 0; c < cols; ++c) magnitude += std::abs(static_cast<double>(m.values[r * cols + c]) * x[c]);
  const std::size_t lane_terms = (cols / bv + 31) / 32 * bv;
  const double bound = static_cast<double>(cols + lane_terms + 5) * std::ldexp(1.0, -24) * magnitude;
  CHECK(std::abs(static_cast<double>(got) - reference) <= bound);
}

}  // namespace

TEST_CASE("metal emulated: gemv and gather_gemv match the reference for every dtype on random odd shapes") {
  for (const auto& k : by_dtype) {
    CAPTURE(actsparse::name(k.t));
    std::mt19937 rng(100 + static_cast<unsigned>(k.t));
    const std::size_t bv = actsparse::block_values(k.t);
    for (const auto [rows, cols] : random_shapes(k.t, rng)) {
      CAPTURE(rows);
      CAPTURE(cols);
      const matrix m = make_matrix(k.t, rows, cols, rng);
      const std::vector<float> x = random_vector(cols, rng);
      std::vector<float> reference(rows);
      std::vector<float> scratch(cols);
      actsparse::reference::dense_gemv(m.view, x, reference, scratch);

      const unsigned threads = k.gemv_config.threads_per_block;
      std::vector<float> y(rows, -1.0F);
      auto run_gemv = [&](std::vector<float>& out) {
        dispatch(msl::threadgroups(k.gemv_config, rows), threads, [&](const emulated_thread& t) {
          k.gemv(m.bytes.data(), m.stride, x.data(), static_cast<uint>(rows), static_cast<uint>(cols), out.data(),
                 t.threadgroup_position_in_grid, t.thread_index_in_simdgroup, t.simdgroup_index_in_threadgroup);
        });
      };
      run_gemv(y);
      for (std::size_t r = 0; r < rows; ++r) {
        CAPTURE(r);
        CHECK(y[r] == simd_order_dot(m, r, cols, bv, x));  // the kernels' order: the same bits
        check_within_bound(m, r, cols, bv, x, y[r], reference[r]);
      }
      std::vector<float> again(rows);
      run_gemv(again);
      CHECK(std::memcmp(y.data(), again.data(), rows * sizeof(float)) == 0);  // the same bits every run

      // Repeated, unordered rows, more of them than the matrix has; and none at all.
      std::uniform_int_distribution<uint> row_of(0, static_cast<uint>(rows - 1));
      for (const std::size_t count : {2 * rows + 1, std::size_t{0}}) {
        std::vector<uint> idx(count);
        for (auto& i : idx) i = row_of(rng);
        std::vector<float> yg(count + 1, -1.0F);
        const gpu::kernel_config gather{gpu::kernel_op::gather_gemv, k.t, activation::silu, 96, 1};
        dispatch(msl::threadgroups(gather, count), 96, [&](const emulated_thread& t) {
          k.gather(m.bytes.data(), m.stride, x.data(), static_cast<uint>(cols), idx.data(), static_cast<uint>(count),
                   yg.data(), t.threadgroup_position_in_grid, t.thread_index_in_simdgroup,
                   t.simdgroup_index_in_threadgroup);
        });
        // The same row, the same bits, whatever the threadgroup size and rows per simdgroup.
        for (std::size_t i = 0; i < count; ++i) CHECK(yg[i] == y[idx[i]]);
        CHECK(yg[count] == -1.0F);  // nothing written past count
      }
    }
  }
}

TEST_CASE("metal emulated: row_axpy is reference::transposed_linear bit for bit, every dtype") {
  for (const auto& k : by_dtype) {
    CAPTURE(actsparse::name(k.t));
    std::mt19937 rng(200 + static_cast<unsigned>(k.t));
    for (const auto [rows, cols] : random_shapes(k.t, rng)) {
      CAPTURE(rows);
      CAPTURE(cols);
      const matrix wt = make_matrix(k.t, rows, cols, rng);  // the transposed matrix: rows are inputs
      std::vector<uint> kept;
      std::bernoulli_distribution keep(0.4);
      for (uint j = 0; j < rows; ++j)
        if (keep(rng)) kept.push_back(j);
      for (const bool none : {false, true}) {
        if (none) kept.clear();
        const std::vector<float> coef = random_vector(kept.size(), rng);
        std::vector<float> x_full(rows, 0.0F);  // the reference reads x[j] of the kept j
        for (std::size_t i = 0; i < kept.size(); ++i) x_full[kept[i]] = coef[i];
        std::vector<float> expected(cols);
        std::vector<float> scratch(cols);
        actsparse::reference::transposed_linear(wt.view, actsparse::subset::only(kept), x_full, expected, scratch);

        const gpu::kernel_config axpy{gpu::kernel_op::row_axpy, k.t, activation::silu, 32, 1};
        std::vector<float> y(cols + 1, -1.0F);
        dispatch(msl::threadgroups(axpy, cols), 32, [&](const emulated_thread& t) {
          k.axpy(wt.bytes.data(), wt.stride, kept.data(), coef.data(), static_cast<uint>(kept.size()),
                 static_cast<uint>(cols), y.data(), t.thread_position_in_grid);
        });
        for (std::size_t c = 0; c < cols; ++c) CHECK(y[c] == expected[c]);  // the same fma chain: the same bits
        CHECK(y[cols] == -1.0F);
      }
    }
  }
}

namespace {

void check_gate(const dtype_kernels& k, std::size_t rows, std::size_t cols, std::mt19937& rng) {
  const gpu::kernel_config& c = k.gate_config;
  const std::size_t bv = actsparse::block_values(c.weight);
  const matrix m = make_matrix(c.weight, rows, cols, rng);
  const std::vector<float> x = random_vector(cols, rng);
  const float threshold = 0.5F * std::sqrt(static_cast<float>(cols));  // about half of the rows pass
  const std::size_t groups = msl::threadgroups(c, rows);
  const unsigned rpt = msl::rows_per_threadgroup(c);
  std::vector<float> h(rows, -9.0F);
  std::vector<uint> block_counts(groups, 999U);
  std::vector<uint> idx(rows, 0xFFFFFFFFU);
  uint count = 12345;
  dispatch(groups, c.threads_per_block, [&](const emulated_thread& t) {
    k.gate(m.bytes.data(), m.stride, x.data(), static_cast<uint>(rows), static_cast<uint>(cols), threshold, h.data(),
           block_counts.data(), t.thread_index_in_threadgroup, t.threadgroup_position_in_grid,
           t.thread_index_in_simdgroup, t.simdgroup_index_in_threadgroup);
  });
  dispatch(groups, c.threads_per_block, [&](const emulated_thread& t) {
    k.compact(h.data(), static_cast<uint>(rows), rpt, threshold, block_counts.data(), idx.data(), &count,
              t.thread_index_in_threadgroup, t.threadgroup_position_in_grid, t.threadgroups_per_grid,
              t.thread_index_in_simdgroup, t.simdgroup_index_in_threadgroup);
  });
  std::vector<float> reference(rows);
  std::vector<float> scratch(cols);
  actsparse::reference::dense_gemv(m.view, x, reference, scratch);
  std::vector<uint> expected;
  for (std::size_t j = 0; j < rows; ++j) {
    CAPTURE(j);
    const float g = simd_order_dot(m, j, cols, bv, x);
    check_within_bound(m, j, cols, bv, x, g, reference[j]);
    CHECK(h[j] == actsparse::apply(c.act, g));  // device_math.hpp's activation is core's, bit for bit
    if (std::abs(h[j]) > threshold) expected.push_back(static_cast<uint>(j));
  }
  for (std::size_t b = 0; b < groups; ++b) {
    const auto in_block = std::count_if(expected.begin(), expected.end(), [&](uint j) { return j / rpt == b; });
    CHECK(block_counts[b] == static_cast<uint>(in_block));
  }
  REQUIRE(count == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) CHECK(idx[i] == expected[i]);
  for (std::size_t i = expected.size(); i < rows; ++i) CHECK(idx[i] == 0xFFFFFFFFU);  // nothing written past count
}

}  // namespace

TEST_CASE("metal emulated: gate + activation + threshold, then compaction, every dtype and activation") {
  for (const auto& k : by_dtype) {
    CAPTURE(actsparse::name(k.t));
    CAPTURE(actsparse::name(k.gate_config.act));
    std::mt19937 rng(300 + static_cast<unsigned>(k.t));
    const std::size_t bv = actsparse::block_values(k.t);
    check_gate(k, 131, bv == 32 ? 64 : 41, rng);  // several threadgroups, odd
    check_gate(k, 1, bv == 32 ? 32 : 3, rng);
  }
}

TEST_CASE("metal emulated: compaction with threadgroups of many simdgroups and many chunks") {
  // rows_per_block is an argument of the compaction kernel: 150 rows per threadgroup of 64
  // threads takes 3 chunks per threadgroup, with kept rows in both simdgroups of every chunk.
  constexpr unsigned rows = 400;
  constexpr unsigned rpb = 150;
  constexpr unsigned groups = (rows + rpb - 1) / rpb;
  std::mt19937 rng(31);
  const std::vector<float> h = random_vector(rows, rng);
  const float threshold = 0.6F;
  std::vector<uint> block_counts(groups, 0);
  std::vector<uint> expected;
  for (unsigned j = 0; j < rows; ++j) {
    if (std::abs(h[j]) > threshold) {
      expected.push_back(j);
      ++block_counts[j / rpb];
    }
  }
  std::vector<uint> idx(rows, 0xFFFFFFFFU);
  uint count = 12345;
  dispatch(groups, 64, [&](const emulated_thread& t) {
    emulated_3::actsparse_compact_t64(h.data(), rows, rpb, threshold, block_counts.data(), idx.data(), &count,
                                      t.thread_index_in_threadgroup, t.threadgroup_position_in_grid,
                                      t.threadgroups_per_grid, t.thread_index_in_simdgroup,
                                      t.simdgroup_index_in_threadgroup);
  });
  REQUIRE(count == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) CHECK(idx[i] == expected[i]);
}

TEST_CASE("metal emulated: token gather and scatter-add") {
  constexpr unsigned d = 71;  // more than one pass of 64 threads, odd
  constexpr unsigned stride = 75;
  constexpr unsigned dst_stride = actsparse_test::token_dst_stride;
  std::mt19937 rng(12);
  actsparse_test::check_token_gather_scatter<uint>(
      random_vector(10 * stride, rng), stride, d,
      [&](const float* src, const uint* tokens, float* dst) {
        dispatch(3, 64, [&](const emulated_thread& t) {
          emulated_20::actsparse_token_gather_t64(src, stride, tokens, 3, d, dst, dst_stride,
                                                  t.thread_index_in_threadgroup, t.threadgroup_position_in_grid);
        });
      },
      [&](const float* dst, const uint* tokens, float* x) {
        dispatch(3, 64, [&](const emulated_thread& t) {
          emulated_21::actsparse_token_scatter_add_t64(dst, dst_stride, tokens, 3, d, x, stride,
                                                       t.thread_index_in_threadgroup, t.threadgroup_position_in_grid);
        });
      });
}

TEST_CASE("metal emulated: top_k gives the top_k selector's indices, ties to the lower index") {
  std::mt19937 rng(21);
  std::uniform_int_distribution<int> level(-6, 6);
  std::vector<float> scores(301);
  for (auto& s : scores) s = static_cast<float>(level(rng)) * 0.25F;  // many ties
  scores[10] = -0.0F;
  for (const unsigned k : {0U, 1U, 17U, 150U, 300U, 301U, 302U}) {
    CAPTURE(k);
    actsparse::selection expected;  // k above n: the kernel keeps nothing (the selector rejects it)
    if (k <= scores.size()) actsparse::top_k::by_count(k).select(scores, expected);
    std::vector<uint> idx(301, 0xFFFFFFFFU);
    uint count = 12345;
    dispatch(1, 64, [&](const emulated_thread& t) {
      emulated_22::actsparse_top_k_t64(scores.data(), 301, k, idx.data(), &count, t.thread_index_in_threadgroup,
                                       t.thread_index_in_simdgroup, t.simdgroup_index_in_threadgroup);
    });
    REQUIRE(count == expected.indices.size());
    for (std::size_t i = 0; i < count; ++i) CHECK(idx[i] == expected.indices[i]);
  }
}

namespace {

using partial_fn = void (*)(const u8*, const ulong&, const uint*, const float*, const uint&, const uint&, const uint&,
                            float*, uint, uint);
using reduce_fn = void (*)(const float*, const uint&, const uint&, float*, uint);

struct split_kernels {
  dtype t;
  partial_fn partial;
  reduce_fn reduce;
};

// The row_axpy_split configs of emit_kernels.cpp (emulated_23 .. 27), in its order.
const split_kernels split_by_dtype[] = {
    {dtype::f32, emulated_23::actsparse_row_axpy_partial_f32_t32, emulated_23::actsparse_reduce_partials_t32},
    {dtype::f16, emulated_24::actsparse_row_axpy_partial_f16_t32, emulated_24::actsparse_reduce_partials_t32},
    {dtype::bf16, emulated_25::actsparse_row_axpy_partial_bf16_t32, emulated_25::actsparse_reduce_partials_t32},
    {dtype::q8_0, emulated_26::actsparse_row_axpy_partial_q8_0_t32, emulated_26::actsparse_reduce_partials_t32},
    {dtype::q4_0, emulated_27::actsparse_row_axpy_partial_q4_0_t32, emulated_27::actsparse_reduce_partials_t32},
};

}  // namespace

TEST_CASE("metal emulated: row_axpy_split = per-split fma chains, then their sum in split order, every dtype") {
  for (std::size_t d = 0; d < std::size(split_by_dtype); ++d) {
    const split_kernels& k = split_by_dtype[d];
    REQUIRE(by_dtype[d].t == k.t);
    CAPTURE(actsparse::name(k.t));
    std::mt19937 rng(300 + static_cast<unsigned>(k.t));
    const gpu::kernel_config c{gpu::kernel_op::row_axpy_split, k.t, activation::silu, 32, 1};
    for (const auto [rows, cols] : random_shapes(k.t, rng)) {
      CAPTURE(rows);
      CAPTURE(cols);
      const matrix wt = make_matrix(k.t, rows, cols, rng);
      std::vector<uint> kept;
      std::bernoulli_distribution keep(0.6);
      for (uint j = 0; j < rows; ++j)
        if (keep(rng)) kept.push_back(j);
      const auto n_kept = static_cast<uint>(kept.size());
      struct run {
        const uint* idx;
        uint count;
        uint rows_per_split;
      };
      // A ragged last split, one row per split, nullptr idx over every row (ragged), one split
      // (row_axpy's bits), and no kept row.
      for (const run r : {run{kept.data(), n_kept, 4}, run{kept.data(), n_kept, 1}, run{nullptr, uint(rows), 5},
                          run{kept.data(), n_kept, 1000}, run{kept.data(), 0, 3}}) {
        CAPTURE(r.count);
        CAPTURE(r.rows_per_split);
        const std::vector<float> coef = random_vector(r.count, rng);
        const auto splits = static_cast<uint>(gpu::split_count(r.count, r.rows_per_split));
        std::vector<float> partial(std::size_t{splits} * cols + 1, -3.0F);
        std::vector<float> y(cols + 1, -1.0F);
        dispatch(msl::threadgroups(c, cols, 0) * splits, 32, [&](const emulated_thread& t) {
          k.partial(wt.bytes.data(), wt.stride, r.idx, coef.data(), r.count, static_cast<uint>(cols), r.rows_per_split,
                    partial.data(), t.thread_index_in_threadgroup, t.threadgroup_position_in_grid);
        });
        dispatch(msl::threadgroups(c, cols, 1), 32, [&](const emulated_thread& t) {
          k.reduce(partial.data(), splits, static_cast<uint>(cols), y.data(), t.thread_position_in_grid);
        });
        for (std::size_t col = 0; col < cols; ++col) {
          float expected = 0.0F;
          for (std::size_t s = 0; s < splits; ++s) {
            float acc = 0.0F;
            const std::size_t end = std::min<std::size_t>(r.count, (s + 1) * r.rows_per_split);
            for (std::size_t j = s * r.rows_per_split; j < end; ++j) {
              const std::size_t row = r.idx != nullptr ? r.idx[j] : j;
              acc = std::fma(coef[j], wt.values[row * cols + col], acc);
            }
            CHECK(partial[s * cols + col] == acc);
            expected += acc;
          }
          CHECK(y[col] == expected);
        }
        CHECK(partial[std::size_t{splits} * cols] == -3.0F);  // nothing written past the splits
        CHECK(y[cols] == -1.0F);
        if (splits == 1 && r.idx != nullptr) {  // one split: row_axpy's bits, i.e. reference::transposed_linear's
          std::vector<float> x_full(rows, 0.0F);
          for (std::size_t i = 0; i < r.count; ++i) x_full[r.idx[i]] = coef[i];
          std::vector<float> expected(cols);
          std::vector<float> scratch(cols);
          actsparse::reference::transposed_linear(wt.view, actsparse::subset::only(kept), x_full, expected, scratch);
          for (std::size_t col = 0; col < cols; ++col) CHECK(y[col] == expected[col]);
        }
      }
    }
  }
}

namespace {

using mass_fn = void (*)(const float*, const uint&, const float&, const uint&, uint*, uint*, uint, uint, uint);

std::vector<uint> device_mass(mass_fn kernel, unsigned threads, const std::vector<float>& scores, float mass,
                              unsigned min_keep) {
  const auto n = static_cast<uint>(scores.size());
  return actsparse_test::kept_list(n, [&](uint* idx, uint* count) {
    dispatch(1, threads, [&](const emulated_thread& t) {
      kernel(scores.data(), n, mass, min_keep, idx, count, t.thread_index_in_threadgroup, t.thread_index_in_simdgroup,
             t.simdgroup_index_in_threadgroup);
    });
  });
}

}  // namespace

TEST_CASE("metal emulated: cumulative_mass keeps the cumulative_mass selector's set") {
  actsparse_test::run_mass_cases([](const std::vector<float>& scores, float mass, unsigned min_keep) {
    return device_mass(emulated_28::actsparse_cumulative_mass_t32, 32, scores, mass, min_keep);
  });
}

TEST_CASE("metal emulated: cumulative_mass with three simdgroups") {
  // Three simdgroups (not a power of two) on a few cases: emulated passes are slow.
  actsparse_test::run_mass_cases_few([](const std::vector<float>& scores, float mass, unsigned min_keep) {
    return device_mass(emulated_29::actsparse_cumulative_mass_t96, 96, scores, mass, min_keep);
  });
}
