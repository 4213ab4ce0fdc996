#pragma once
// The kernel shapes of the cuda_backend that the fake-driver tests run (small blocks, many
// rows per warp: the CPU emulation runs each CUDA thread as a fiber), and every
// kernel_config that backend launches. emit_backend_kernels.cpp generates exactly these
// configs for the emulation, so a config the backend uses but the list lacks fails at
// cuModuleGetFunction with its name.

#include <actsparse/backends/cuda/backend.hpp>
#include <actsparse/backends/gpu/generator.hpp>

#include <vector>

namespace actsparse_cuda_test {

inline actsparse::cuda_backend fake_tuned_backend() {
  actsparse::cuda_backend b;
  b.threads_per_block = 32;
  b.rows_per_warp = 8;
  b.axpy_threads = 32;
  b.tokens_per_pass = 2;
  b.elementwise_threads = 32;
  b.select_threads = 64;  // two warps: the cross-warp sums of the single-block kernels
  b.rows_per_split = 0;   // automatic: with 4 parallel blocks and 8 rows at least, small shapes split too
  b.parallel_blocks = 4;
  b.min_rows_per_split = 8;
  return b;
}

inline std::vector<actsparse::gpu::kernel_config> fake_tuned_configs() {
  namespace gpu = actsparse::gpu;
  using actsparse::activation;
  using actsparse::dtype;
  const actsparse::cuda_backend b = fake_tuned_backend();
  std::vector<gpu::kernel_config> c;
  const activation acts[] = {activation::silu, activation::gelu, activation::relu};
  for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0}) {
    c.push_back({gpu::kernel_op::gemv, t, activation::silu, b.threads_per_block, b.rows_per_warp});
    c.push_back({gpu::kernel_op::gather_gemv, t, activation::silu, b.threads_per_block, b.rows_per_warp});
    c.push_back({gpu::kernel_op::row_axpy, t, activation::silu, b.axpy_threads, 1});
    c.push_back({gpu::kernel_op::row_axpy_split, t, activation::silu, b.axpy_threads, 1});
    gpu::kernel_config batched{gpu::kernel_op::batched_gemv, t, activation::silu, b.threads_per_block, b.rows_per_warp};
    batched.tokens_per_pass = b.tokens_per_pass;
    c.push_back(batched);
    for (const activation a : acts) {
      c.push_back({gpu::kernel_op::gated_gather, t, a, b.threads_per_block, b.rows_per_warp});
      c.push_back({gpu::kernel_op::gate_select, t, a, b.threads_per_block, b.rows_per_warp});
    }
  }
  for (const activation a : acts) c.push_back({gpu::kernel_op::gated_hidden, dtype::f32, a, b.elementwise_threads, 1});
  for (const auto op : {gpu::kernel_op::gather_values, gpu::kernel_op::token_gather, gpu::kernel_op::token_scatter_add})
    c.push_back({op, dtype::f32, activation::silu, b.elementwise_threads, 1});
  for (const auto op : {gpu::kernel_op::top_k, gpu::kernel_op::cumulative_mass})
    c.push_back({op, dtype::f32, activation::silu, b.select_threads, 1});
  return c;
}

}  // namespace actsparse_cuda_test
