// Writes generated CUDA kernels for the host emulation test (tests/cuda/test_cuda_emulation.cpp):
// each config's source in its own namespace, with extern "C" dropped (so helpers and kernels
// of different configs do not collide) and the one inline-PTX primitive (f16 -> f32, cvt)
// replaced by a call that the emulation header defines.
#include <actsparse/backends/cuda/generator.hpp>

#include <fstream>
#include <iostream>
#include <string>

namespace cuda = actsparse::cuda;
using actsparse::activation;
using actsparse::dtype;

namespace {

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: emit_kernels OUTPUT\n";
    return 2;
  }
  std::ofstream out(argv[1]);
  int n = 0;
  auto emit = [&](const cuda::kernel_config& c) {
    std::string s = cuda::generate_cuda(c);
    s = replace_all(s, "extern \"C\" ", "");
    for (const char* hint : {"#pragma unroll\n", "#pragma unroll 1\n", "#pragma unroll 2\n"})
      s = replace_all(s, hint, "");  // a hint only; g++ warns on it
    s = replace_all(s, "asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h));", "f = emulated_half_to_float(h);");
    out << "namespace emulated_" << n++ << " {\n" << s << "}\n";
  };
  for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0}) {
    emit({cuda::kernel_op::gemv, t, activation::silu, 64, 2});
    emit({cuda::kernel_op::gather_gemv, t, activation::silu, 64, 1});
    emit({cuda::kernel_op::row_axpy, t, activation::silu, 32, 1});
  }
  emit({cuda::kernel_op::gate_select, dtype::q4_0, activation::silu, 64, 2});
  emit({cuda::kernel_op::gate_select, dtype::f16, activation::gelu, 96, 1});
  emit({cuda::kernel_op::token_gather, dtype::f32, activation::silu, 64, 1});
  emit({cuda::kernel_op::token_scatter_add, dtype::f32, activation::silu, 64, 1});
  emit({cuda::kernel_op::top_k, dtype::f32, activation::silu, 64, 1});
  for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0}) {  // 20 .. 34
    emit({cuda::kernel_op::row_axpy_split, t, activation::silu, 32, 1});
    emit({cuda::kernel_op::gated_gather, t, activation::silu, 64, 2});
    emit({cuda::kernel_op::batched_gemv, t, activation::silu, 64, 2, 4});
  }
  emit({cuda::kernel_op::gated_gather, dtype::f16, activation::gelu, 96, 1});
  emit({cuda::kernel_op::gated_hidden, dtype::f32, activation::silu, 64, 1});
  emit({cuda::kernel_op::gated_hidden, dtype::f32, activation::gelu, 64, 1});
  emit({cuda::kernel_op::gated_hidden, dtype::f32, activation::relu, 64, 1});
  emit({cuda::kernel_op::gather_values, dtype::f32, activation::silu, 32, 1});  // 39
  emit({cuda::kernel_op::cumulative_mass, dtype::f32, activation::silu, 64, 1});
  emit({cuda::kernel_op::cumulative_mass, dtype::f32, activation::silu, 96, 1});
  emit({cuda::kernel_op::batched_gemv, dtype::q8_0, activation::silu, 32, 1, 8});
  emit({cuda::kernel_op::batched_gemv, dtype::bf16, activation::silu, 96, 4, 1});  // 43
  return out ? 0 : 1;
}
