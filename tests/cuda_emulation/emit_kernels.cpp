// Writes generated CUDA kernels for the host emulation test (tests/cuda/test_cuda_emulation.cpp):
// each config's cuda::kernel_source (the kernels without the prelude, which simt_emulation.hpp
// defines for the host) in its own namespace, so that helpers and kernels of different configs
// do not collide.
#include <actsparse/backends/cuda/generator.hpp>

#include <fstream>
#include <iostream>
#include <string>

namespace cuda = actsparse::cuda;
namespace gpu = actsparse::gpu;
using actsparse::activation;
using actsparse::dtype;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: emit_kernels OUTPUT\n";
    return 2;
  }
  std::ofstream out(argv[1]);
  int n = 0;
  auto emit = [&](const gpu::kernel_config& c) {
    out << "namespace emulated_" << n++ << " {\n" << cuda::kernel_source(c) << "}\n";
  };
  for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0}) {
    emit({gpu::kernel_op::gemv, t, activation::silu, 64, 2});
    emit({gpu::kernel_op::gather_gemv, t, activation::silu, 64, 1});
    emit({gpu::kernel_op::row_axpy, t, activation::silu, 32, 1});
  }
  emit({gpu::kernel_op::gate_select, dtype::q4_0, activation::silu, 64, 2});
  emit({gpu::kernel_op::gate_select, dtype::f16, activation::gelu, 96, 1});
  emit({gpu::kernel_op::token_gather, dtype::f32, activation::silu, 64, 1});
  emit({gpu::kernel_op::token_scatter_add, dtype::f32, activation::silu, 64, 1});
  emit({gpu::kernel_op::top_k, dtype::f32, activation::silu, 64, 1});
  for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0}) {  // 20 .. 34
    emit({gpu::kernel_op::row_axpy_split, t, activation::silu, 32, 1});
    emit({gpu::kernel_op::gated_gather, t, activation::silu, 64, 2});
    emit({gpu::kernel_op::batched_gemv, t, activation::silu, 64, 2, 4});
  }
  emit({gpu::kernel_op::gated_gather, dtype::f16, activation::gelu, 96, 1});
  emit({gpu::kernel_op::gated_hidden, dtype::f32, activation::silu, 64, 1});
  emit({gpu::kernel_op::gated_hidden, dtype::f32, activation::gelu, 64, 1});
  emit({gpu::kernel_op::gated_hidden, dtype::f32, activation::relu, 64, 1});
  emit({gpu::kernel_op::gather_values, dtype::f32, activation::silu, 32, 1});  // 39
  emit({gpu::kernel_op::cumulative_mass, dtype::f32, activation::silu, 64, 1});
  emit({gpu::kernel_op::cumulative_mass, dtype::f32, activation::silu, 96, 1});
  emit({gpu::kernel_op::batched_gemv, dtype::q8_0, activation::silu, 32, 1, 8});
  emit({gpu::kernel_op::batched_gemv, dtype::bf16, activation::silu, 96, 4, 1});  // 43
  emit({gpu::kernel_op::moe_route, dtype::f32, activation::silu, 64, 1});         // 44
  emit({gpu::kernel_op::moe_pad, dtype::f32, activation::silu, 64, 1});
  emit({gpu::kernel_op::moe_combine, dtype::f32, activation::silu, 32, 1});
  for (const dtype t : {dtype::f32, dtype::q4_0}) {  // 47 .. 50
    emit({gpu::kernel_op::moe_gated, t, activation::silu, 64, 2});
    emit({gpu::kernel_op::moe_down, t, activation::silu, 32, 1});
  }
  emit({gpu::kernel_op::moe_gated, dtype::f16, activation::gelu, 96, 1});  // 51
  emit({gpu::kernel_op::moe_down, dtype::f16, activation::silu, 64, 1});
  return out ? 0 : 1;
}
