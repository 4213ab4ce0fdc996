// Writes the kernels of the fake-driver tests (tests/cuda/fake_tuning.hpp: every config the
// tuned cuda_backend launches) for the CPU emulation, and a table from each kernel's name to a
// trampoline that unpacks cuLaunchKernel's parameter array (void** params) by the kernel's own
// parameter types (the description's parameter kinds, spelled as the CUDA signature spells
// them). Each config's cuda::kernel_source gets its own namespace (as emit_kernels.cpp does).
#include <actsparse/backends/cuda/generator.hpp>

#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <string_view>

#include "../cuda/fake_tuning.hpp"

namespace cuda = actsparse::cuda;
namespace gpu = actsparse::gpu;

namespace {

// The CUDA type without __restrict__ (a qualifier of the parameter, not of the type).
std::string unqualified(std::string_view type) {
  constexpr std::string_view restrict_qualifier = " __restrict__";
  std::string s(type);
  if (const std::size_t at = s.find(restrict_qualifier); at != std::string::npos)
    s.erase(at, restrict_qualifier.size());
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: emit_backend_kernels OUTPUT\n";
    return 2;
  }
  std::ofstream out(argv[1]);
  std::string table = "inline const fake_kernel_entry fake_kernel_table[] = {\n";
  std::set<std::string> seen;
  int n = 0;
  for (const gpu::kernel_config& c : actsparse_cuda_test::fake_tuned_configs()) {
    const std::string ns = "backend_emulated_" + std::to_string(n++);
    out << "namespace " << ns << " {\n" << cuda::kernel_source(c) << "}\n";
    for (const gpu::kernel_body& k : gpu::describe(c, cuda::dialect).kernels) {
      if (!seen.insert(k.name).second) continue;  // shared kernels (reduce_partials, compact): the first copy
      table += "    {\"" + k.name + "\", [](void** p) { " + ns + "::" + k.name + "(";
      for (std::size_t i = 0; i < k.params.size(); ++i) {
        table += (i > 0 ? ", " : "") + std::string("fake_param<") + unqualified(cuda::param_type(k.params[i].kind)) +
                 ">(p[" + std::to_string(i) + "])";
      }
      table += "); }},\n";
    }
  }
  table += "};\n";
  out << table;
  return out ? 0 : 1;
}
