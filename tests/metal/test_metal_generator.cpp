// The Metal kernel generator without a Metal compiler: names, determinism, address spaces
// in the text, launch shapes, rejected configs, and the kernel bodies shared with CUDA.
#include <actsparse/backends/cuda/generator.hpp>  // to compare with; the Metal generator does not include it
#include <actsparse/backends/metal/generator.hpp>

#include <doctest/doctest.h>

#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace metal = actsparse::metal;
namespace gpu = actsparse::gpu;
using actsparse::activation;
using actsparse::dtype;

namespace {

constexpr dtype all_dtypes[] = {dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0};
constexpr gpu::kernel_op weight_ops[] = {gpu::kernel_op::gemv, gpu::kernel_op::gather_gemv, gpu::kernel_op::row_axpy,
                                         gpu::kernel_op::gate_select, gpu::kernel_op::row_axpy_split};
constexpr gpu::kernel_op f32_ops[] = {gpu::kernel_op::token_gather, gpu::kernel_op::token_scatter_add,
                                      gpu::kernel_op::top_k, gpu::kernel_op::cumulative_mass};

std::vector<gpu::kernel_config> every_config() {
  std::vector<gpu::kernel_config> out;
  for (const auto op : weight_ops) {
    for (const auto t : all_dtypes) {
      for (const auto a : {activation::silu, activation::gelu, activation::relu}) {
        for (const unsigned threads : {32U, 128U, 1024U}) {
          for (const unsigned r : {1U, 2U, 4U, 8U}) {
            if ((op == gpu::kernel_op::row_axpy || op == gpu::kernel_op::row_axpy_split) && r > 1) continue;
            out.push_back({op, t, a, threads, r});
          }
        }
      }
    }
  }
  for (const auto op : f32_ops)
    for (const unsigned threads : {32U, 128U, 1024U}) out.push_back({op, dtype::f32, activation::silu, threads, 1});
  return out;
}

std::string message_of(const gpu::kernel_config& c) {
  try {
    (void)metal::generate_metal(c);
  } catch (const actsparse::error& e) {
    return e.what();
  }
  return "no error";
}

// MSL has no generic address space: every pointer type names one. Finds each "T*" of the
// scalar types the kernels use and checks that the declaration it belongs to (back to the
// last '(', ',', ';', '{' or line start) names device, constant, threadgroup or thread, or
// the neutral dialect's GPU_GLOBAL, GPU_THREAD or GPU_SHARED (which the prelude defines as
// device, thread and threadgroup: checked below).
std::vector<std::string> pointers_without_address_space(const std::string& s) {
  std::vector<std::string> bad;
  for (const std::string_view type : {"unsigned char*", "ushort*", "uint*", "float*"}) {
    for (std::size_t at = s.find(type); at != std::string::npos; at = s.find(type, at + 1)) {
      std::size_t begin = s.find_last_of("(,;{\n", at);
      begin = begin == std::string::npos ? 0 : begin + 1;
      const std::string decl = s.substr(begin, at + type.size() - begin);
      bool spaced = false;
      for (const std::string_view space :
           {"device ", "constant ", "threadgroup ", "thread ", "GPU_GLOBAL ", "GPU_THREAD ", "GPU_SHARED "})
        spaced = spaced || decl.find(space) != std::string::npos;
      if (!spaced) bad.push_back(decl);
    }
  }
  return bad;
}

}  // namespace

TEST_CASE("metal: kernel names are the CUDA generator's") {
  for (const auto& c : every_config()) CHECK(metal::kernel_names(c) == actsparse::cuda::kernel_names(c));
  // One config type for both generators, outside either backend.
  static_assert(std::is_same_v<decltype(metal::kernel_names), decltype(actsparse::cuda::kernel_names)>);
  CHECK(metal::kernel_names({gpu::kernel_op::gate_select, dtype::f16, activation::gelu, 256, 4}) ==
        std::vector<std::string>{"actsparse_gate_gelu_f16_t256_r4", "actsparse_compact_t256"});
  CHECK(metal::kernel_names({gpu::kernel_op::top_k, dtype::f32}) == std::vector<std::string>{"actsparse_top_k_t256"});
  CHECK(metal::kernel_names({gpu::kernel_op::row_axpy_split, dtype::q4_0, activation::silu, 128, 1}) ==
        std::vector<std::string>{"actsparse_row_axpy_partial_q4_0_t128", "actsparse_reduce_partials_t128"});
  CHECK(metal::kernel_names({gpu::kernel_op::cumulative_mass, dtype::f32, activation::silu, 64, 1}) ==
        std::vector<std::string>{"actsparse_cumulative_mass_t64"});
}

TEST_CASE("metal: generation is deterministic and every kernel is a Metal kernel with address spaces") {
  const std::vector<gpu::kernel_config> configs = every_config();
  CHECK(configs.size() == 5 * 5 * 3 * 3 * 4 - 2 * 5 * 3 * 3 * 3 + 4 * 3);
  for (const auto& c : configs) {
    CAPTURE(gpu::name(c.op));
    CAPTURE(actsparse::name(c.weight));
    CAPTURE(c.threads_per_block);
    CAPTURE(c.rows_per_warp);
    const std::string s = metal::generate_metal(c);
    CHECK(s == metal::generate_metal(c));     // the same config, the same text
    CHECK(s.find('$') == std::string::npos);  // every placeholder was filled
    CHECK(s.find("#include <metal_stdlib>\n") != std::string::npos);
    for (const auto& n : metal::kernel_names(c)) CHECK(s.find("kernel void " + n + "(\n") != std::string::npos);
    if (!gpu::find(c.op)->reads_f32) {
      CHECK(s.find("actsparse_decode_" + std::string(actsparse::name(c.weight)) +
                   "(GPU_GLOBAL const unsigned char* row, unsigned int e, GPU_THREAD float* w)") != std::string::npos);
    }
    CHECK(pointers_without_address_space(s) == std::vector<std::string>{});
    // No atomics (results do not depend on scheduling), no CUDA left, no bfloat (MSL 3.1).
    CHECK(s.find("atomic") == std::string::npos);
    CHECK(s.find("__") == std::string::npos);
    CHECK(s.find("bfloat") == std::string::npos);
    CHECK(s.find("double") == std::string::npos);  // MSL has no double
  }
  CHECK(metal::generate_metal({gpu::kernel_op::gemv, dtype::f32}) !=
        metal::generate_metal({gpu::kernel_op::gemv, dtype::f32, activation::silu, 128}));
  CHECK(metal::generate_metal({gpu::kernel_op::gemv, dtype::f32}) !=
        actsparse::cuda::generate_cuda({gpu::kernel_op::gemv, dtype::f32}));
}

TEST_CASE("metal: the prelude maps the neutral address spaces to MSL's") {
  for (const std::string_view line : {"#define GPU_GLOBAL device\n", "#define GPU_THREAD thread\n",
                                      "#define GPU_SHARED threadgroup\n", "#define GPU_CONSTANT constant\n"})
    CHECK(metal::prelude.find(line) != std::string_view::npos);
  // No C math names redefined: the activations call GPU_EXP / GPU_TANH.
  CHECK(metal::prelude.find("#define expf") == std::string_view::npos);
}

TEST_CASE("metal: every kernel body is the one the CUDA generator emits (written once)") {
  for (const auto& c : every_config()) {
    CAPTURE(gpu::name(c.op));
    CAPTURE(actsparse::name(c.weight));
    const gpu::kernel_set m = gpu::describe(c, metal::dialect);
    const gpu::kernel_set k = gpu::describe(c, actsparse::cuda::dialect);
    const std::string metal_source = metal::generate_metal(c);
    const std::string cuda_source = actsparse::cuda::generate_cuda(c);
    REQUIRE(m.kernels.size() == k.kernels.size());
    for (std::size_t i = 0; i < m.kernels.size(); ++i) {
      CHECK(m.kernels[i].name == k.kernels[i].name);
      CHECK(m.kernels[i].body == k.kernels[i].body);
      CHECK(metal_source.find(m.kernels[i].body) != std::string::npos);
      CHECK(cuda_source.find(m.kernels[i].body) != std::string::npos);
    }
    // The device functions too, but for cumulative_mass's accumulator (double in CUDA).
    if (c.op != gpu::kernel_op::cumulative_mass) CHECK(m.functions == k.functions);
  }
}

TEST_CASE("metal: the address-space scan finds a pointer without one") {
  CHECK(pointers_without_address_space("inline float f(device const float* a, const float* b) {") ==
        std::vector<std::string>{" const float*"});
  CHECK(pointers_without_address_space("  threadgroup uint* p;\n  thread float* q;").empty());
}

TEST_CASE("metal: launch shapes are the CUDA generator's (a block is a threadgroup)") {
  const gpu::kernel_config gemv{gpu::kernel_op::gemv, dtype::q4_0, activation::silu, 256, 2};
  CHECK(metal::rows_per_threadgroup(gemv) == 16);
  CHECK(metal::threadgroups(gemv, 4096) == 256);
  CHECK(metal::threadgroups(gemv, 4097) == 257);
  CHECK(metal::threadgroups(gemv, 0) == 0);
  CHECK(metal::threadgroups({gpu::kernel_op::row_axpy, dtype::q8_0, activation::silu, 128, 1}, 4096 + 32) == 2);
  CHECK(metal::threadgroups({gpu::kernel_op::row_axpy, dtype::f32, activation::silu, 128, 1}, 4096) == 32);
  CHECK(metal::threadgroups({gpu::kernel_op::token_gather, dtype::f32}, 7) == 7);
  CHECK(metal::threadgroups({gpu::kernel_op::top_k, dtype::f32}, 11008) == 1);
  CHECK(metal::threadgroups({gpu::kernel_op::cumulative_mass, dtype::f32}, 11008) == 1);
  const gpu::kernel_config split{gpu::kernel_op::row_axpy_split, dtype::q8_0, activation::silu, 32, 1};
  CHECK(metal::threadgroups(split, 4096 + 32, 0) == 5);    // storage elements (32-value blocks) per thread
  CHECK(metal::threadgroups(split, 4096 + 32, 1) == 129);  // one column per thread
  CHECK_THROWS_AS((void)metal::threadgroups(split, 64, 2), actsparse::error);
  for (const auto& c : every_config()) {
    for (std::size_t k = 0; k < metal::kernel_names(c).size(); ++k)
      CHECK(metal::threadgroups(c, 1000, k) == actsparse::cuda::grid_blocks(c, 1000, k));
    if (c.op != gpu::kernel_op::row_axpy) CHECK(metal::rows_per_threadgroup(c) == actsparse::cuda::rows_per_block(c));
  }
}

TEST_CASE("metal: invalid configs and ops without a Metal kernel are rejected with what was expected") {
  gpu::kernel_config c{gpu::kernel_op::gemv, dtype::f32, activation::silu, 100, 1};
  CHECK_THROWS_AS((void)metal::generate_metal(c), actsparse::error);
  CHECK(message_of(c).find("metal::generate_metal") != std::string::npos);
  CHECK(message_of(c).find("a multiple of 32 (the simdgroup width)") != std::string::npos);
  c.threads_per_block = 2048;
  CHECK(message_of(c).find("[32, 1024]") != std::string::npos);
  c.threads_per_block = 0;
  CHECK_THROWS_AS((void)metal::kernel_names(c), actsparse::error);
  CHECK_THROWS_AS((void)metal::threadgroups(c, 1), actsparse::error);
  c.threads_per_block = 256;
  c.rows_per_warp = 3;
  CHECK(message_of(c).find("rows_per_warp") != std::string::npos);
  c.rows_per_warp = 0;
  CHECK_THROWS_AS((void)metal::rows_per_threadgroup(c), actsparse::error);
  c = {gpu::kernel_op::row_axpy, dtype::f32, activation::silu, 256, 2};
  CHECK(message_of(c).find("1 for row_axpy") != std::string::npos);
  c = {gpu::kernel_op::gemv, static_cast<dtype>(9)};
  CHECK(message_of(c).find("'weight'") != std::string::npos);
  c = {gpu::kernel_op::gate_select, dtype::f32, static_cast<activation>(9)};
  CHECK(message_of(c).find("silu, gelu or relu") != std::string::npos);
  c = {gpu::kernel_op::top_k, dtype::bf16};
  CHECK(message_of(c).find("f32 for top_k (it reads f32 activations or scores)") != std::string::npos);
  c = {gpu::kernel_op::token_scatter_add, dtype::f32, activation::silu, 256, 2};
  CHECK(message_of(c).find("one threadgroup per token") != std::string::npos);
  c = {gpu::kernel_op::row_axpy_split, dtype::f16, activation::silu, 256, 4};
  CHECK(message_of(c).find("1 for row_axpy_split") != std::string::npos);
  c = {gpu::kernel_op::cumulative_mass, dtype::f16};
  CHECK(message_of(c).find("f32 for cumulative_mass") != std::string::npos);
  c = {gpu::kernel_op::cumulative_mass, dtype::f32, activation::silu, 256, 2};
  CHECK(message_of(c).find("one threadgroup") != std::string::npos);
  // The CUDA ops without a Metal kernel, and an op no generator knows: a clear refusal.
  for (const int op : {8, 9, 10, 11, 200}) {
    c = {static_cast<gpu::kernel_op>(op), dtype::f32};
    CAPTURE(op);
    const std::string m = message_of(c);
    CHECK(m.find("'op'") != std::string::npos);
    CHECK(m.find("an op with a Metal kernel") != std::string::npos);
    CHECK_THROWS_AS((void)metal::kernel_names(c), actsparse::error);
  }
}
