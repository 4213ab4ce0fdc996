// Writes generated Metal kernels for the tests (no Metal compiler here):
//   emit_kernels emulation OUTPUT   the configs of test_metal_emulation.cpp, each in its own
//                                   namespace: the prelude and the kernels without
//                                   `#include <metal_stdlib>` (the emulation header stands in
//                                   for it), to compile as C++
//   emit_kernels source OP DT DIR   the syntax check's configs of op OP and weight dtype DT
//                                   (names as kernel_op's and dtype's), one .metal file
//                                   each; prints the files' paths, one per line
#include <actsparse/backends/metal/generator.hpp>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

namespace metal = actsparse::metal;
namespace gpu = actsparse::gpu;
using actsparse::activation;
using actsparse::dtype;

namespace {

constexpr dtype all_dtypes[] = {dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0};
constexpr gpu::kernel_op all_ops[] = {
    gpu::kernel_op::gemv,        gpu::kernel_op::gather_gemv,    gpu::kernel_op::row_axpy,
    gpu::kernel_op::gate_select, gpu::kernel_op::token_gather,   gpu::kernel_op::token_scatter_add,
    gpu::kernel_op::top_k,       gpu::kernel_op::row_axpy_split, gpu::kernel_op::cumulative_mass};

// The configs of the emulation test, in the order test_metal_emulation.cpp names them
// (emulated_<n>): per dtype gemv, gather_gemv, row_axpy, gate_select; then the f32 ops;
// then row_axpy_split per dtype and cumulative_mass with 1 and 3 simdgroups.
std::vector<gpu::kernel_config> emulation_configs() {
  std::vector<gpu::kernel_config> out;
  const unsigned gemv_rows[] = {1, 2, 4, 8, 2};
  const activation acts[] = {activation::silu, activation::gelu, activation::relu, activation::silu, activation::gelu};
  for (std::size_t i = 0; i < std::size(all_dtypes); ++i) {
    const dtype t = all_dtypes[i];
    out.push_back({gpu::kernel_op::gemv, t, activation::silu, 64, gemv_rows[i]});
    out.push_back({gpu::kernel_op::gather_gemv, t, activation::silu, 96, 1});
    out.push_back({gpu::kernel_op::row_axpy, t, activation::silu, 32, 1});
    out.push_back({gpu::kernel_op::gate_select, t, acts[i], 64, i % 2 == 0 ? 2U : 1U});
  }
  out.push_back({gpu::kernel_op::token_gather, dtype::f32, activation::silu, 64, 1});
  out.push_back({gpu::kernel_op::token_scatter_add, dtype::f32, activation::silu, 64, 1});
  out.push_back({gpu::kernel_op::top_k, dtype::f32, activation::silu, 64, 1});
  for (const dtype t : all_dtypes) out.push_back({gpu::kernel_op::row_axpy_split, t, activation::silu, 32, 1});
  out.push_back({gpu::kernel_op::cumulative_mass, dtype::f32, activation::silu, 32, 1});
  out.push_back({gpu::kernel_op::cumulative_mass, dtype::f32, activation::silu, 96, 1});
  return out;
}

// The syntax check's configs of one op and dtype: the smallest and largest threadgroups,
// rows_per_simdgroup 1, 4 and 8 and (gate_select) every activation.
std::vector<gpu::kernel_config> source_configs(gpu::kernel_op op, dtype t) {
  if (op == gpu::kernel_op::gate_select)
    return {{op, t, activation::silu, 256, 1}, {op, t, activation::gelu, 32, 8}, {op, t, activation::relu, 1024, 4}};
  if (op == gpu::kernel_op::gemv || op == gpu::kernel_op::gather_gemv)
    return {{op, t, activation::silu, 32, 1}, {op, t, activation::silu, 256, 4}, {op, t, activation::silu, 1024, 8}};
  return {{op, t, activation::silu, 32, 1}, {op, t, activation::silu, 1024, 1}};
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.size() == 2 && args[0] == "emulation") {
    std::ofstream out(args[1]);
    int n = 0;
    for (const auto& c : emulation_configs()) {
      out << "namespace emulated_" << n << " {\n"
          << metal::prelude << metal::kernel_source(c) << "}  // namespace emulated_" << n << "\n";
      ++n;
    }
    return out ? 0 : 1;
  }
  if (args.size() == 4 && args[0] == "source") {
    for (const auto op : all_ops) {
      for (const dtype t : all_dtypes) {
        if (gpu::name(op) != args[1] || actsparse::name(t) != args[2]) continue;
        for (const auto& c : source_configs(op, t)) {
          const std::filesystem::path file = std::filesystem::path(args[3]) / (metal::kernel_names(c)[0] + ".metal");
          std::ofstream(file) << metal::generate_metal(c);  // generate_metal rejects what Metal does not take
          std::cout << file.string() << "\n";
        }
        return 0;
      }
    }
    std::cerr << "emit_kernels: unknown op '" << args[1] << "' or dtype '" << args[2] << "'\n";
    return 2;
  }
  std::cerr << "usage: emit_kernels emulation OUTPUT | emit_kernels source OP DTYPE DIR\n";
  return 2;
}
