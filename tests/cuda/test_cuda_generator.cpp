// The CUDA kernel generator without NVRTC: names, determinism, launch shapes, rejected configs.
#include <actsparse/backends/cuda/generator.hpp>

#include <doctest/doctest.h>

#include <string>

namespace cuda = actsparse::cuda;
using actsparse::activation;
using actsparse::dtype;

namespace {

constexpr dtype all_dtypes[] = {dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0};
constexpr cuda::kernel_op all_ops[] = {cuda::kernel_op::gemv, cuda::kernel_op::gather_gemv, cuda::kernel_op::row_axpy,
                                       cuda::kernel_op::gate_select};

std::string message_of(const cuda::kernel_config& c) {
  try {
    (void)cuda::generate_cuda(c);
  } catch (const actsparse::error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("cuda: kernel names are derived from the config") {
  CHECK(cuda::kernel_names({cuda::kernel_op::gemv, dtype::q4_0}) ==
        std::vector<std::string>{"actsparse_gemv_q4_0_t256"});
  CHECK(cuda::kernel_names({cuda::kernel_op::gather_gemv, dtype::bf16, activation::silu, 128, 2}) ==
        std::vector<std::string>{"actsparse_gather_gemv_bf16_t128_r2"});
  CHECK(cuda::kernel_names({cuda::kernel_op::row_axpy, dtype::q8_0, activation::silu, 64, 1}) ==
        std::vector<std::string>{"actsparse_row_axpy_q8_0_t64"});
  CHECK(cuda::kernel_names({cuda::kernel_op::gate_select, dtype::f16, activation::gelu, 256, 4}) ==
        std::vector<std::string>{"actsparse_gate_gelu_f16_t256_r4", "actsparse_compact_t256"});
}

TEST_CASE("cuda: generation is deterministic and defines every named kernel") {
  for (const auto op : all_ops) {
    for (const auto t : all_dtypes) {
      for (const auto a : {activation::silu, activation::gelu, activation::relu}) {
        const cuda::kernel_config c{op, t, a, 128, op == cuda::kernel_op::row_axpy ? 1U : 2U};
        const std::string s = cuda::generate_cuda(c);
        CHECK(s == cuda::generate_cuda(c));
        CHECK(s.find('$') == std::string::npos);  // every placeholder was filled
        CHECK(s.find("actsparse_decode_" + std::string(actsparse::name(t)) + "(") != std::string::npos);
        for (const auto& n : cuda::kernel_names(c))
          CHECK(s.find("extern \"C\" __global__ void __launch_bounds__(128) " + n + "(") != std::string::npos);
        // No float atomics anywhere: results do not depend on scheduling.
        CHECK(s.find("atomic") == std::string::npos);
      }
    }
  }
  for (const auto op : {cuda::kernel_op::token_gather, cuda::kernel_op::token_scatter_add, cuda::kernel_op::top_k}) {
    const cuda::kernel_config c{op, dtype::f32, activation::silu, 128, 1};
    const std::string s = cuda::generate_cuda(c);
    CHECK(s == cuda::generate_cuda(c));
    CHECK(s.find('$') == std::string::npos);
    CHECK(s.find("extern \"C\" __global__ void __launch_bounds__(128) " + cuda::kernel_names(c)[0] + "(") !=
          std::string::npos);
  }
  CHECK(cuda::kernel_names({cuda::kernel_op::token_gather, dtype::f32}) ==
        std::vector<std::string>{"actsparse_token_gather_t256"});
  CHECK(cuda::grid_blocks({cuda::kernel_op::token_scatter_add, dtype::f32}, 7) == 7);
  CHECK(cuda::grid_blocks({cuda::kernel_op::top_k, dtype::f32}, 11008) == 1);
  CHECK(cuda::kernel_names({cuda::kernel_op::top_k, dtype::f32, activation::silu, 1024}) ==
        std::vector<std::string>{"actsparse_top_k_t1024"});
  // Different configs give different text.
  CHECK(cuda::generate_cuda({cuda::kernel_op::gemv, dtype::f32}) !=
        cuda::generate_cuda({cuda::kernel_op::gemv, dtype::f32, activation::silu, 128}));
}

TEST_CASE("cuda: launch shapes") {
  const cuda::kernel_config gemv{cuda::kernel_op::gemv, dtype::q4_0, activation::silu, 256, 2};
  CHECK(cuda::rows_per_block(gemv) == 16);
  CHECK(cuda::grid_blocks(gemv, 4096) == 256);
  CHECK(cuda::grid_blocks(gemv, 4097) == 257);
  CHECK(cuda::grid_blocks(gemv, 0) == 0);
  const cuda::kernel_config axpy{cuda::kernel_op::row_axpy, dtype::q8_0, activation::silu, 128, 1};
  CHECK(cuda::grid_blocks(axpy, 4096) == 1);  // 128 threads x 32 columns
  CHECK(cuda::grid_blocks(axpy, 4096 + 32) == 2);
  const cuda::kernel_config axpy_f32{cuda::kernel_op::row_axpy, dtype::f32, activation::silu, 128, 1};
  CHECK(cuda::grid_blocks(axpy_f32, 4096) == 32);
}

TEST_CASE("cuda: invalid configs are rejected with what was expected") {
  cuda::kernel_config c{cuda::kernel_op::gemv, dtype::f32, activation::silu, 100, 1};
  CHECK_THROWS_AS((void)cuda::generate_cuda(c), actsparse::error);
  CHECK(message_of(c).find("threads_per_block") != std::string::npos);
  CHECK(message_of(c).find("a multiple of 32") != std::string::npos);
  c.threads_per_block = 2048;
  CHECK(message_of(c).find("[32, 1024]") != std::string::npos);
  c.threads_per_block = 0;
  CHECK_THROWS_AS((void)cuda::kernel_names(c), actsparse::error);
  c.threads_per_block = 256;
  c.rows_per_warp = 3;
  CHECK(message_of(c).find("rows_per_warp") != std::string::npos);
  c.rows_per_warp = 0;
  CHECK_THROWS_AS((void)cuda::rows_per_block(c), actsparse::error);
  c = {cuda::kernel_op::row_axpy, dtype::f32, activation::silu, 256, 2};
  CHECK(message_of(c).find("1 for row_axpy") != std::string::npos);
  c = {static_cast<cuda::kernel_op>(9), dtype::f32};
  CHECK(message_of(c).find("'op'") != std::string::npos);
  c = {cuda::kernel_op::gemv, static_cast<dtype>(9)};
  CHECK(message_of(c).find("'weight'") != std::string::npos);
  c = {cuda::kernel_op::gate_select, dtype::f32, static_cast<activation>(9)};
  CHECK(message_of(c).find("silu, gelu or relu") != std::string::npos);
  CHECK_THROWS_AS((void)cuda::grid_blocks(c, 10), actsparse::error);
  c = {cuda::kernel_op::top_k, dtype::bf16};
  CHECK(message_of(c).find("'weight'") != std::string::npos);
  c = {cuda::kernel_op::token_gather, dtype::q4_0};
  CHECK(message_of(c).find("f32 for the token ops") != std::string::npos);
  c = {cuda::kernel_op::token_scatter_add, dtype::f32, activation::silu, 256, 2};
  CHECK(message_of(c).find("one block per token") != std::string::npos);
}
