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
    s = replace_all(s, "#pragma unroll\n", "");  // a hint only; g++ warns on it
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
  return out ? 0 : 1;
}
