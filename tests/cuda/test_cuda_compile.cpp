// Every op x dtype (x activation) in a few configs: the generated source compiles with NVRTC
// for compute_80 and compute_90, ptxas assembles the PTX for sm_80 and sm_90, and no kernel
// spills. No GPU is needed; none of these kernels has run on one here.
#include "cuda_test_support.hpp"

#include <actsparse/backends/cuda/driver.hpp>
#include <actsparse/backends/cuda/generator.hpp>
#include <actsparse/backends/cuda/nvrtc.hpp>

#include <doctest/doctest.h>

#include <cstdio>
#include <string>
#include <vector>

namespace cuda = actsparse::cuda;
namespace gpu = actsparse::gpu;
using actsparse::activation;
using actsparse::dtype;
using namespace actsparse_cuda_test;

namespace {

void check_configs(const std::vector<gpu::kernel_config>& configs) {
  for (const auto& c : configs) {
    const std::string source = cuda::generate_cuda(c);
    for (const auto& [arch, sm] : {std::pair{"compute_80", "sm_80"}, std::pair{"compute_90", "sm_90"}}) {
      CAPTURE(source);
      std::string ptx;
      REQUIRE_NOTHROW(ptx = cuda::compile_to_ptx(source, arch));
      for (const auto& n : cuda::kernel_names(c)) CHECK(ptx.find(".entry " + n + "(") != std::string::npos);
      const ptxas_result r = run_ptxas(ptx, sm);
      CAPTURE(r.output);
      REQUIRE(r.exit_code == 0);
      for (const auto& n : cuda::kernel_names(c)) {
        CAPTURE(n);
        REQUIRE(r.kernels.contains(n));
        const kernel_resources k = r.kernels.at(n);
        std::printf("%-40s %s registers %3d spill stores %d loads %d\n", n.c_str(), sm, k.registers, k.spill_stores,
                    k.spill_loads);
        CHECK(k.registers > 0);
        CHECK(k.spill_stores == 0);
        CHECK(k.spill_loads == 0);
      }
    }
  }
}

void check_compiles(gpu::kernel_op op, dtype t) {
  if (skip_without_nvrtc() || skip_without_ptxas()) return;
  std::vector<gpu::kernel_config> configs;
  const bool axpy = op == gpu::kernel_op::row_axpy || op == gpu::kernel_op::token_gather ||
                    op == gpu::kernel_op::token_scatter_add || op == gpu::kernel_op::top_k ||
                    op == gpu::kernel_op::row_axpy_split || op == gpu::kernel_op::gather_values ||
                    op == gpu::kernel_op::gated_hidden || op == gpu::kernel_op::cumulative_mass;  // rows_per_warp 1
  const bool act = op == gpu::kernel_op::gate_select || op == gpu::kernel_op::gated_hidden;
  for (const auto a : {activation::silu, activation::gelu, activation::relu}) {
    if (a != activation::silu && !act) continue;
    configs.push_back({op, t, a, 128, 1});
    configs.push_back({op, t, a, 256, axpy ? 1U : 2U});
  }
  if (!axpy) configs.push_back({op, t, activation::silu, 512, 4});
  if (op == gpu::kernel_op::cumulative_mass) configs.push_back({op, t, activation::silu, 1024, 1});
  check_configs(configs);
}

// gated_gather: every activation in one shape, the silu one in three (rows_per_warp 1, 2, 4).
void check_gated_gather(dtype t) {
  if (skip_without_nvrtc() || skip_without_ptxas()) return;
  const gpu::kernel_op op = gpu::kernel_op::gated_gather;
  check_configs({{op, t, activation::silu, 128, 1},
                 {op, t, activation::silu, 256, 2},
                 {op, t, activation::silu, 512, 4},
                 {op, t, activation::gelu, 256, 2},
                 {op, t, activation::relu, 256, 2}});
}

// batched_gemv: a few (rows_per_warp, tokens_per_pass) pairs. 32 accumulators a lane (R 4,
// B 8) only for the one-value dtypes: the block dtypes take 254-255 registers there (no spill
// on sm_80 / sm_90 with CUDA 13, but slow to assemble).
void check_batched_gemv(dtype t) {
  if (skip_without_nvrtc() || skip_without_ptxas()) return;
  const gpu::kernel_op op = gpu::kernel_op::batched_gemv;
  std::vector<gpu::kernel_config> configs = {
      {op, t, activation::silu, 128, 1, 8}, {op, t, activation::silu, 256, 2, 4}, {op, t, activation::silu, 512, 4, 2}};
  if (actsparse::block_values(t) == 1) configs.push_back({op, t, activation::silu, 256, 4, 8});
  check_configs(configs);
}

// moe_gated: every activation on every dtype, rows_per_warp 1, 2 and 4.
void check_moe_gated(dtype t) {
  if (skip_without_nvrtc() || skip_without_ptxas()) return;
  const gpu::kernel_op op = gpu::kernel_op::moe_gated;
  check_configs({{op, t, activation::silu, 128, 1},
                 {op, t, activation::gelu, 256, 2},
                 {op, t, activation::relu, 512, 4},
                 {op, t, activation::silu, 256, 2}});
}

}  // namespace

TEST_CASE("cuda: gemv f32 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::gemv, dtype::f32);
}
TEST_CASE("cuda: gemv f16 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::gemv, dtype::f16);
}
TEST_CASE("cuda: gemv bf16 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::gemv, dtype::bf16);
}
TEST_CASE("cuda: gemv q8_0 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::gemv, dtype::q8_0);
}
TEST_CASE("cuda: gemv q4_0 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::gemv, dtype::q4_0);
}
TEST_CASE("cuda: gather_gemv f32 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::gather_gemv, dtype::f32);
}
TEST_CASE("cuda: gather_gemv f16 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::gather_gemv, dtype::f16);
}
TEST_CASE("cuda: gather_gemv bf16 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::gather_gemv, dtype::bf16);
}
TEST_CASE("cuda: gather_gemv q8_0 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::gather_gemv, dtype::q8_0);
}
TEST_CASE("cuda: gather_gemv q4_0 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::gather_gemv, dtype::q4_0);
}
TEST_CASE("cuda: row_axpy f32 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::row_axpy, dtype::f32);
}
TEST_CASE("cuda: row_axpy f16 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::row_axpy, dtype::f16);
}
TEST_CASE("cuda: row_axpy bf16 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::row_axpy, dtype::bf16);
}
TEST_CASE("cuda: row_axpy q8_0 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::row_axpy, dtype::q8_0);
}
TEST_CASE("cuda: row_axpy q4_0 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::row_axpy, dtype::q4_0);
}
TEST_CASE("cuda: gate_select f32 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::gate_select, dtype::f32);
}
TEST_CASE("cuda: gate_select f16 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::gate_select, dtype::f16);
}
TEST_CASE("cuda: gate_select bf16 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::gate_select, dtype::bf16);
}
TEST_CASE("cuda: gate_select q8_0 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::gate_select, dtype::q8_0);
}
TEST_CASE("cuda: gate_select q4_0 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::gate_select, dtype::q4_0);
}

TEST_CASE("cuda: token_gather compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::token_gather, dtype::f32);
}
TEST_CASE("cuda: token_scatter_add compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::token_scatter_add, dtype::f32);
}

TEST_CASE("cuda: top_k compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::top_k, dtype::f32);
}

TEST_CASE("cuda: row_axpy_split f32 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::row_axpy_split, dtype::f32);
}
TEST_CASE("cuda: row_axpy_split f16 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::row_axpy_split, dtype::f16);
}
TEST_CASE("cuda: row_axpy_split bf16 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::row_axpy_split, dtype::bf16);
}
TEST_CASE("cuda: row_axpy_split q8_0 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::row_axpy_split, dtype::q8_0);
}
TEST_CASE("cuda: row_axpy_split q4_0 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::row_axpy_split, dtype::q4_0);
}
TEST_CASE("cuda: gated_gather f32 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") { check_gated_gather(dtype::f32); }
TEST_CASE("cuda: gated_gather f16 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") { check_gated_gather(dtype::f16); }
TEST_CASE("cuda: gated_gather bf16 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_gated_gather(dtype::bf16);
}
TEST_CASE("cuda: gated_gather q8_0 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_gated_gather(dtype::q8_0);
}
TEST_CASE("cuda: gated_gather q4_0 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_gated_gather(dtype::q4_0);
}
TEST_CASE("cuda: batched_gemv f32 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") { check_batched_gemv(dtype::f32); }
TEST_CASE("cuda: batched_gemv f16 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") { check_batched_gemv(dtype::f16); }
TEST_CASE("cuda: batched_gemv bf16 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_batched_gemv(dtype::bf16);
}
TEST_CASE("cuda: batched_gemv q8_0 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_batched_gemv(dtype::q8_0);
}
TEST_CASE("cuda: batched_gemv q4_0 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_batched_gemv(dtype::q4_0);
}
TEST_CASE("cuda: gather_values compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::gather_values, dtype::f32);
}
TEST_CASE("cuda: gated_hidden compiles for every activation (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::gated_hidden, dtype::f32);
}
TEST_CASE("cuda: cumulative_mass compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  check_compiles(gpu::kernel_op::cumulative_mass, dtype::f32);
}
TEST_CASE("cuda: moe_gated f32 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") { check_moe_gated(dtype::f32); }
TEST_CASE("cuda: moe_gated f16 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") { check_moe_gated(dtype::f16); }
TEST_CASE("cuda: moe_gated bf16 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") { check_moe_gated(dtype::bf16); }
TEST_CASE("cuda: moe_gated q8_0 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") { check_moe_gated(dtype::q8_0); }
TEST_CASE("cuda: moe_gated q4_0 compiles (NVRTC, ptxas sm_80 / sm_90, no spills)") { check_moe_gated(dtype::q4_0); }
TEST_CASE("cuda: moe_down compiles for every dtype (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  if (skip_without_nvrtc() || skip_without_ptxas()) return;
  std::vector<gpu::kernel_config> configs;
  for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0}) {
    configs.push_back({gpu::kernel_op::moe_down, t, activation::silu, 128, 1});
    configs.push_back({gpu::kernel_op::moe_down, t, activation::silu, 256, 1});
  }
  check_configs(configs);
}
TEST_CASE("cuda: moe_route, moe_pad and moe_combine compile (NVRTC, ptxas sm_80 / sm_90, no spills)") {
  if (skip_without_nvrtc() || skip_without_ptxas()) return;
  std::vector<gpu::kernel_config> configs;
  for (const auto op : {gpu::kernel_op::moe_route, gpu::kernel_op::moe_pad, gpu::kernel_op::moe_combine}) {
    for (const unsigned threads : {128U, 256U, 1024U})
      configs.push_back({op, dtype::f32, activation::silu, threads, 1});
  }
  check_configs(configs);
}

TEST_CASE("cuda: NVRTC reports a compile error with its log, caches PTX, rejects a bad arch") {
  if (skip_without_nvrtc()) return;
  const auto info = cuda::nvrtc_info();
  CHECK(info.major >= 12);
  CHECK_THROWS_AS((void)cuda::compile_to_ptx("extern \"C\" __global__ void k() { undefined_name(); }"),
                  actsparse::error);
  try {
    (void)cuda::compile_to_ptx("extern \"C\" __global__ void k() { undefined_name(); }");
  } catch (const actsparse::error& e) {
    CHECK(std::string(e.what()).find("undefined_name") != std::string::npos);  // the log is in the message
  }
  CHECK_THROWS_AS((void)cuda::compile_to_ptx("", "sm_80"), actsparse::error);

  cuda::clear_ptx_cache();
  const std::string source = cuda::generate_cuda({gpu::kernel_op::gemv, dtype::f32});
  const std::string a = cuda::compile_to_ptx(source, "compute_80");
  const std::string b = cuda::compile_to_ptx(source, "compute_80");
  CHECK(a == b);
  auto stats = cuda::ptx_cache_info();
  CHECK(stats.entries == 1);
  CHECK(stats.hits == 1);
  CHECK(stats.misses == 1);
  (void)cuda::compile_to_ptx(source, "compute_90");                   // another arch: another entry
  (void)cuda::compile_to_ptx(source, "compute_80", {"--fmad=true"});  // other options: another entry
  stats = cuda::ptx_cache_info();
  CHECK(stats.entries == 3);
  CHECK(stats.misses == 3);
}

TEST_CASE("cuda: device_count (driver.hpp, libcuda opened once) reports no device cleanly when there is none") {
  const cuda::device_report r = cuda::device_count();
  CHECK(r.count >= 0);
  if (r.count == 0) {
    CHECK(!r.reason.empty());
    std::printf("device_count: 0 (%s)\n", r.reason.c_str());
  }
}
