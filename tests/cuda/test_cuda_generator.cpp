// The CUDA kernel generator without NVRTC: names, determinism, launch shapes, rejected configs,
// and the dtype sizes taken from core's table.
#include <actsparse/backends/cuda/generator.hpp>

#include <doctest/doctest.h>

#include <iterator>
#include <string>
#include <vector>

namespace cuda = actsparse::cuda;
namespace gpu = actsparse::gpu;
using actsparse::activation;
using actsparse::dtype;

namespace {

constexpr dtype all_dtypes[] = {dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0};
constexpr gpu::kernel_op all_ops[] = {gpu::kernel_op::gemv, gpu::kernel_op::gather_gemv, gpu::kernel_op::row_axpy,
                                      gpu::kernel_op::gate_select};

std::string message_of(const gpu::kernel_config& c) {
  try {
    (void)cuda::generate_cuda(c);
  } catch (const actsparse::error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

TEST_CASE("cuda: kernel names are derived from the config") {
  CHECK(cuda::kernel_names({gpu::kernel_op::gemv, dtype::q4_0}) ==
        std::vector<std::string>{"actsparse_gemv_q4_0_t256"});
  CHECK(cuda::kernel_names({gpu::kernel_op::gather_gemv, dtype::bf16, activation::silu, 128, 2}) ==
        std::vector<std::string>{"actsparse_gather_gemv_bf16_t128_r2"});
  CHECK(cuda::kernel_names({gpu::kernel_op::row_axpy, dtype::q8_0, activation::silu, 64, 1}) ==
        std::vector<std::string>{"actsparse_row_axpy_q8_0_t64"});
  CHECK(cuda::kernel_names({gpu::kernel_op::gate_select, dtype::f16, activation::gelu, 256, 4}) ==
        std::vector<std::string>{"actsparse_gate_gelu_f16_t256_r4", "actsparse_compact_t256"});
}

TEST_CASE("cuda: generation is deterministic and defines every named kernel") {
  for (const auto op : all_ops) {
    for (const auto t : all_dtypes) {
      for (const auto a : {activation::silu, activation::gelu, activation::relu}) {
        const gpu::kernel_config c{op, t, a, 128, op == gpu::kernel_op::row_axpy ? 1U : 2U};
        const std::string s = cuda::generate_cuda(c);
        CHECK(s == cuda::generate_cuda(c));
        CHECK(s.find('$') == std::string::npos);  // every placeholder was filled
        CHECK(s.find("actsparse_decode_" + std::string(actsparse::name(t)) + "(") != std::string::npos);
        for (const auto& n : cuda::kernel_names(c))
          CHECK(s.find("GPU_KERNEL void __launch_bounds__(128) " + n + "(") != std::string::npos);
        // No float atomics anywhere: results do not depend on scheduling.
        CHECK(s.find("atomic") == std::string::npos);
      }
    }
  }
  for (const auto op : {gpu::kernel_op::token_gather, gpu::kernel_op::token_scatter_add, gpu::kernel_op::top_k}) {
    const gpu::kernel_config c{op, dtype::f32, activation::silu, 128, 1};
    const std::string s = cuda::generate_cuda(c);
    CHECK(s == cuda::generate_cuda(c));
    CHECK(s.find('$') == std::string::npos);
    CHECK(s.find("GPU_KERNEL void __launch_bounds__(128) " + cuda::kernel_names(c)[0] + "(") != std::string::npos);
  }
  CHECK(cuda::kernel_names({gpu::kernel_op::token_gather, dtype::f32}) ==
        std::vector<std::string>{"actsparse_token_gather_t256"});
  CHECK(cuda::grid_blocks({gpu::kernel_op::token_scatter_add, dtype::f32}, 7) == 7);
  CHECK(cuda::grid_blocks({gpu::kernel_op::top_k, dtype::f32}, 11008) == 1);
  CHECK(cuda::kernel_names({gpu::kernel_op::top_k, dtype::f32, activation::silu, 1024}) ==
        std::vector<std::string>{"actsparse_top_k_t1024"});
  // Different configs give different text.
  CHECK(cuda::generate_cuda({gpu::kernel_op::gemv, dtype::f32}) !=
        cuda::generate_cuda({gpu::kernel_op::gemv, dtype::f32, activation::silu, 128}));
}

TEST_CASE("cuda: launch shapes") {
  const gpu::kernel_config gemv{gpu::kernel_op::gemv, dtype::q4_0, activation::silu, 256, 2};
  CHECK(cuda::rows_per_block(gemv) == 16);
  CHECK(cuda::grid_blocks(gemv, 4096) == 256);
  CHECK(cuda::grid_blocks(gemv, 4097) == 257);
  CHECK(cuda::grid_blocks(gemv, 0) == 0);
  const gpu::kernel_config axpy{gpu::kernel_op::row_axpy, dtype::q8_0, activation::silu, 128, 1};
  CHECK(cuda::grid_blocks(axpy, 4096) == 1);  // 128 threads x 32 columns
  CHECK(cuda::grid_blocks(axpy, 4096 + 32) == 2);
  const gpu::kernel_config axpy_f32{gpu::kernel_op::row_axpy, dtype::f32, activation::silu, 128, 1};
  CHECK(cuda::grid_blocks(axpy_f32, 4096) == 32);
}

TEST_CASE("cuda: invalid configs are rejected with what was expected") {
  gpu::kernel_config c{gpu::kernel_op::gemv, dtype::f32, activation::silu, 100, 1};
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
  c = {gpu::kernel_op::row_axpy, dtype::f32, activation::silu, 256, 2};
  CHECK(message_of(c).find("1 for row_axpy") != std::string::npos);
  c = {static_cast<gpu::kernel_op>(99), dtype::f32};
  CHECK(message_of(c).find("'op'") != std::string::npos);
  c = {gpu::kernel_op::gemv, static_cast<dtype>(9)};
  CHECK(message_of(c).find("'weight'") != std::string::npos);
  c = {gpu::kernel_op::gate_select, dtype::f32, static_cast<activation>(9)};
  CHECK(message_of(c).find("silu, gelu or relu") != std::string::npos);
  CHECK_THROWS_AS((void)cuda::grid_blocks(c, 10), actsparse::error);
  c = {gpu::kernel_op::top_k, dtype::bf16};
  CHECK(message_of(c).find("'weight'") != std::string::npos);
  c = {gpu::kernel_op::token_gather, dtype::q4_0};
  CHECK(message_of(c).find("f32 for token_gather (it reads f32 activations or scores)") != std::string::npos);
  c = {gpu::kernel_op::token_scatter_add, dtype::f32, activation::silu, 256, 2};
  CHECK(message_of(c).find("one block per token") != std::string::npos);
}

TEST_CASE("cuda: the split, gated, batched and selection ops: names, text, launch shapes") {
  using op = gpu::kernel_op;
  CHECK(cuda::kernel_names({op::row_axpy_split, dtype::q4_0, activation::silu, 128, 1}) ==
        std::vector<std::string>{"actsparse_row_axpy_partial_q4_0_t128", "actsparse_reduce_partials_t128"});
  CHECK(cuda::kernel_names({op::gather_values, dtype::f32}) ==
        std::vector<std::string>{"actsparse_gather_values_t256"});
  CHECK(cuda::kernel_names({op::gated_gather, dtype::bf16, activation::gelu, 128, 2}) ==
        std::vector<std::string>{"actsparse_gated_gather_gelu_bf16_t128_r2"});
  CHECK(cuda::kernel_names({op::gated_gather, dtype::q8_0, activation::silu, 64, 1}) ==
        std::vector<std::string>{"actsparse_gated_gather_silu_q8_0_t64"});
  CHECK(cuda::kernel_names({op::gated_hidden, dtype::f32, activation::relu, 512, 1}) ==
        std::vector<std::string>{"actsparse_gated_hidden_relu_t512"});
  CHECK(cuda::kernel_names({op::batched_gemv, dtype::f16, activation::silu, 256, 2, 4}) ==
        std::vector<std::string>{"actsparse_batched_gemv_f16_t256_r2_b4"});
  CHECK(cuda::kernel_names({op::batched_gemv, dtype::f32, activation::silu, 256, 1, 1}) ==
        std::vector<std::string>{"actsparse_batched_gemv_f32_t256_b1"});
  CHECK(cuda::kernel_names({op::cumulative_mass, dtype::f32, activation::silu, 1024}) ==
        std::vector<std::string>{"actsparse_cumulative_mass_t1024"});

  for (const auto t : all_dtypes) {
    for (const auto a : {activation::silu, activation::gelu, activation::relu}) {
      for (const gpu::kernel_config c :
           {gpu::kernel_config{op::row_axpy_split, t, a, 128, 1}, gpu::kernel_config{op::gated_gather, t, a, 128, 4},
            gpu::kernel_config{op::batched_gemv, t, a, 128, 2, 8}}) {
        CAPTURE(gpu::name(c.op));
        const std::string s = cuda::generate_cuda(c);
        CHECK(s == cuda::generate_cuda(c));
        CHECK(s.find('$') == std::string::npos);
        CHECK(s.find("actsparse_decode_" + std::string(actsparse::name(t)) + "(") != std::string::npos);
        for (const auto& n : cuda::kernel_names(c))
          CHECK(s.find("GPU_KERNEL void __launch_bounds__(128) " + n + "(") != std::string::npos);
        CHECK(s.find("atomic") == std::string::npos);
      }
    }
  }
  for (const gpu::kernel_config c : {gpu::kernel_config{op::gather_values, dtype::f32, activation::silu, 128},
                                     {op::gated_hidden, dtype::f32, activation::gelu, 128},
                                     {op::cumulative_mass, dtype::f32, activation::silu, 128}}) {
    const std::string s = cuda::generate_cuda(c);
    CHECK(s == cuda::generate_cuda(c));
    CHECK(s.find('$') == std::string::npos);
    CHECK(s.find("GPU_KERNEL void __launch_bounds__(128) " + cuda::kernel_names(c)[0] + "(") != std::string::npos);
    CHECK(s.find("atomic") == std::string::npos);
  }
  // The activation and tokens_per_pass are part of the text where they matter.
  CHECK(cuda::generate_cuda({op::gated_gather, dtype::f16, activation::silu}) !=
        cuda::generate_cuda({op::gated_gather, dtype::f16, activation::gelu}));
  CHECK(cuda::generate_cuda({op::batched_gemv, dtype::f16, activation::silu, 256, 1, 2}) !=
        cuda::generate_cuda({op::batched_gemv, dtype::f16, activation::silu, 256, 1, 4}));

  // Launch shapes: the partial kernel covers storage elements, the reduction columns.
  const gpu::kernel_config split{op::row_axpy_split, dtype::q8_0, activation::silu, 128, 1};
  CHECK(cuda::grid_blocks(split, 4096) == 1);  // 128 threads x 32 columns
  CHECK(cuda::grid_blocks(split, 4096, 0) == 1);
  CHECK(cuda::grid_blocks(split, 4096, 1) == 32);
  CHECK_THROWS_AS((void)cuda::grid_blocks(split, 4096, 2), actsparse::error);
  CHECK(gpu::split_count(0, 64) == 0);
  CHECK(gpu::split_count(64, 64) == 1);
  CHECK(gpu::split_count(65, 64) == 2);
  CHECK_THROWS_AS((void)gpu::split_count(10, 0), actsparse::error);
  CHECK(cuda::grid_blocks({op::gather_values, dtype::f32, activation::silu, 128}, 129) == 2);
  CHECK(cuda::grid_blocks({op::gated_hidden, dtype::f32, activation::silu, 128}, 128) == 1);
  CHECK(cuda::grid_blocks({op::gated_gather, dtype::q4_0, activation::silu, 256, 2}, 17) == 2);  // 16 rows a block
  CHECK(cuda::grid_blocks({op::batched_gemv, dtype::q4_0, activation::silu, 256, 4, 8}, 4096) == 128);
  CHECK(cuda::rows_per_block({op::batched_gemv, dtype::q4_0, activation::silu, 256, 4, 8}) == 32);
  CHECK(cuda::grid_blocks({op::cumulative_mass, dtype::f32}, 11008) == 1);
}

TEST_CASE("cuda: invalid configs of the split, gated, batched and selection ops are rejected") {
  using op = gpu::kernel_op;
  gpu::kernel_config c{op::row_axpy_split, dtype::f32, activation::silu, 256, 2};
  CHECK(message_of(c).find("1 for row_axpy_split") != std::string::npos);
  c = {op::gather_values, dtype::f16};
  CHECK(message_of(c).find("'weight'") != std::string::npos);
  CHECK(message_of(c).find("gather_values") != std::string::npos);
  c = {op::gated_hidden, dtype::f32, activation::silu, 256, 2};
  CHECK(message_of(c).find("'rows_per_warp'") != std::string::npos);
  c = {op::cumulative_mass, dtype::q8_0};
  CHECK(message_of(c).find("cumulative_mass") != std::string::npos);
  c = {op::gated_gather, dtype::f32, static_cast<activation>(7)};
  CHECK(message_of(c).find("silu, gelu or relu") != std::string::npos);
  c = {op::gated_gather, dtype::f32, activation::silu, 256, 3};
  CHECK(message_of(c).find("1, 2, 4 or 8") != std::string::npos);
  c = {op::batched_gemv, dtype::f32, activation::silu, 256, 1, 3};
  CHECK(message_of(c).find("'tokens_per_pass'") != std::string::npos);
  CHECK(message_of(c).find("1, 2, 4 or 8 for batched_gemv") != std::string::npos);
  c.tokens_per_pass = 0;
  CHECK_THROWS_AS((void)cuda::kernel_names(c), actsparse::error);
  c.tokens_per_pass = 16;
  CHECK_THROWS_AS((void)cuda::grid_blocks(c, 10), actsparse::error);
  c = {op::gemv, dtype::f32, activation::silu, 256, 1, 2};  // tokens_per_pass is batched_gemv's alone
  CHECK(message_of(c).find("only batched_gemv") != std::string::npos);
  c = {op::cumulative_mass, dtype::f32, activation::silu, 48};
  CHECK(message_of(c).find("a multiple of 32") != std::string::npos);
  c = {static_cast<op>(std::size(gpu::ops)), dtype::f32};
  CHECK(message_of(c).find("cumulative_mass") != std::string::npos);  // the list of ops names the new ones
  CHECK(message_of(c).find("moe_combine") != std::string::npos);
}

TEST_CASE("cuda: the MoE ops: names, text, launch shapes, rejected configs") {
  using op = gpu::kernel_op;
  CHECK(cuda::kernel_names({op::moe_route, dtype::f32, activation::silu, 128}) ==
        std::vector<std::string>{"actsparse_moe_count_t128", "actsparse_moe_scatter_t128"});
  CHECK(cuda::kernel_names({op::moe_pad, dtype::f32}) == std::vector<std::string>{"actsparse_moe_pad_t256"});
  CHECK(cuda::kernel_names({op::moe_gated, dtype::q4_0, activation::gelu, 256, 2}) ==
        std::vector<std::string>{"actsparse_moe_gated_gelu_q4_0_t256_r2"});
  CHECK(cuda::kernel_names({op::moe_down, dtype::bf16, activation::silu, 64}) ==
        std::vector<std::string>{"actsparse_moe_down_bf16_t64"});
  CHECK(cuda::kernel_names({op::moe_combine, dtype::f32, activation::relu, 512}) ==
        std::vector<std::string>{"actsparse_moe_combine_t512"});

  std::vector<gpu::kernel_config> configs = {{op::moe_route, dtype::f32, activation::silu, 128},
                                             {op::moe_pad, dtype::f32, activation::silu, 128},
                                             {op::moe_combine, dtype::f32, activation::silu, 128}};
  for (const auto t : all_dtypes) {
    configs.push_back({op::moe_gated, t, activation::gelu, 128, 4});
    configs.push_back({op::moe_down, t, activation::silu, 128, 1});
  }
  for (const gpu::kernel_config& c : configs) {
    CAPTURE(gpu::name(c.op));
    CAPTURE(actsparse::name(c.weight));
    const std::string s = cuda::generate_cuda(c);
    CHECK(s == cuda::generate_cuda(c));
    CHECK(s.find('$') == std::string::npos);
    for (const auto& n : cuda::kernel_names(c))
      CHECK(s.find("GPU_KERNEL void __launch_bounds__(128) " + n + "(") != std::string::npos);
    CHECK(s.find("atomic") == std::string::npos);
    const bool weights = c.op == op::moe_gated || c.op == op::moe_down;
    CHECK((s.find("actsparse_decode_" + std::string(actsparse::name(c.weight)) + "(") != std::string::npos) == weights);
  }
  CHECK(cuda::generate_cuda({op::moe_gated, dtype::f16, activation::silu}) !=
        cuda::generate_cuda({op::moe_gated, dtype::f16, activation::gelu}));

  // Launch shapes: a warp per expert; the 2-D kernels' second dimension.
  CHECK(cuda::grid_blocks({op::moe_route, dtype::f32, activation::silu, 256}, 64, 0) == 8);
  CHECK(cuda::grid_blocks({op::moe_route, dtype::f32, activation::silu, 256}, 65, 1) == 9);
  CHECK_THROWS_AS((void)cuda::grid_blocks({op::moe_route, dtype::f32}, 64, 2), actsparse::error);
  CHECK(cuda::grid_blocks({op::moe_pad, dtype::f32, activation::silu, 64}, 5) == 3);
  CHECK(cuda::grid_blocks({op::moe_gated, dtype::q4_0, activation::silu, 256, 2}, 17) == 2);  // 16 rows a block
  CHECK(cuda::grid_blocks({op::moe_down, dtype::q8_0, activation::silu, 128}, 4096) == 1);    // 128 x 32 columns
  CHECK(cuda::grid_blocks({op::moe_down, dtype::f32, activation::silu, 128}, 4096) == 32);
  CHECK(cuda::grid_blocks({op::moe_combine, dtype::f32, activation::silu, 128}, 129) == 2);

  gpu::kernel_config c{op::moe_route, dtype::q4_0};
  CHECK(message_of(c).find("f32 for moe_route") != std::string::npos);
  c = {op::moe_route, dtype::f32, activation::silu, 256, 2};
  CHECK(message_of(c).find("1 for moe_route (one warp per expert)") != std::string::npos);
  c = {op::moe_pad, dtype::f32, activation::silu, 256, 4};
  CHECK(message_of(c).find("1 for moe_pad") != std::string::npos);
  c = {op::moe_down, dtype::f16, activation::silu, 256, 2};
  CHECK(message_of(c).find("1 for moe_down") != std::string::npos);
  c = {op::moe_combine, dtype::bf16};
  CHECK(message_of(c).find("f32 for moe_combine") != std::string::npos);
  c = {op::moe_gated, dtype::f32, static_cast<activation>(7)};
  CHECK(message_of(c).find("silu, gelu or relu") != std::string::npos);
  c = {op::moe_gated, dtype::f32, activation::silu, 256, 3};
  CHECK(message_of(c).find("1, 2, 4 or 8") != std::string::npos);
  c = {op::moe_gated, dtype::f32, activation::silu, 256, 1, 2};
  CHECK(message_of(c).find("only batched_gemv") != std::string::npos);
}

TEST_CASE("cuda: the prelude gives the kernels C linkage, and the decoders' sizes come from core's dtype table") {
  CHECK(cuda::prelude.find("#define GPU_KERNEL extern \"C\" __global__\n") != std::string_view::npos);
  for (const auto t : all_dtypes) {
    CAPTURE(actsparse::name(t));
    const std::string s = cuda::generate_cuda({gpu::kernel_op::gemv, t});
    const std::string dt(actsparse::name(t));
    CHECK(s.find("actsparse_" + dt + "_bytes = " + std::to_string(actsparse::block_bytes(t)) + "u;") !=
          std::string::npos);
    if (actsparse::block_values(t) > 1) {
      CHECK(s.find("actsparse_" + dt + "_values = " + std::to_string(actsparse::block_values(t)) + "u;") !=
            std::string::npos);
    }
    CHECK(gpu::supports(t));
  }
  // No block size written into a decoder by hand.
  for (const auto t : all_dtypes) {
    const std::string_view d = gpu::decoder_source(t);
    CHECK(d.find("34u") == std::string_view::npos);
    CHECK(d.find("18u") == std::string_view::npos);
  }
  CHECK_FALSE(gpu::supports(static_cast<dtype>(9)));
  CHECK(gpu::decoder_source(static_cast<dtype>(9)).empty());
}
