// Writes the kernels of the fake-driver tests (tests/cuda/fake_tuning.hpp: every config the
// tuned cuda_backend launches) for the CPU emulation, and a table from each kernel's name to a
// trampoline that unpacks cuLaunchKernel's parameter array (void** params) by the kernel's own
// parameter types, read from the generated source. Each config's source gets its own
// namespace, with extern "C" dropped and the one inline-PTX primitive replaced (as
// emit_kernels.cpp does).
#include <actsparse/backends/cuda/generator.hpp>

#include <fstream>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "../cuda/fake_tuning.hpp"

namespace cuda = actsparse::cuda;

namespace {

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \n\t");
  const auto e = s.find_last_not_of(" \n\t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// Every "#pragma unroll[ N]" line removed: a hint only, and g++ warns on it.
std::string drop_unroll_hints(const std::string& s) {
  std::string out;
  std::size_t at = 0;
  while (at < s.size()) {
    std::size_t end = s.find('\n', at);
    end = end == std::string::npos ? s.size() : end + 1;
    const std::string line = s.substr(at, end - at);
    if (trim(line).rfind("#pragma unroll", 0) != 0) out += line;
    at = end;
  }
  return out;
}

// The parameter types of kernel `name` in `source`: "TYPE NAME, ..." with __restrict__ dropped.
std::vector<std::string> parameter_types(const std::string& source, const std::string& name) {
  const std::size_t open = source.find(" " + name + "(");
  if (open == std::string::npos) return {};
  const std::size_t begin = open + name.size() + 2;
  const std::size_t end = source.find(')', begin);
  std::vector<std::string> types;
  std::string list = replace_all(source.substr(begin, end - begin), "__restrict__", "");
  std::size_t at = 0;
  while (at <= list.size()) {
    std::size_t comma = list.find(',', at);
    if (comma == std::string::npos) comma = list.size();
    const std::string p = trim(list.substr(at, comma - at));
    const std::size_t last = p.find_last_of(" *");
    types.push_back(trim(p.substr(0, last + 1)));
    at = comma + 1;
  }
  return types;
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
  for (const cuda::kernel_config& c : actsparse_cuda_test::fake_tuned_configs()) {
    const std::string source = cuda::generate_cuda(c);
    std::string s = replace_all(source, "extern \"C\" ", "");
    s = drop_unroll_hints(s);
    s = replace_all(s, "asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h));", "f = emulated_half_to_float(h);");
    const std::string ns = "backend_emulated_" + std::to_string(n++);
    out << "namespace " << ns << " {\n" << s << "}\n";
    for (const std::string& name : cuda::kernel_names(c)) {
      if (!seen.insert(name).second) continue;  // shared kernels (reduce_partials, compact): the first copy
      const std::vector<std::string> types = parameter_types(source, name);
      if (types.empty()) {
        std::cerr << "emit_backend_kernels: no parameter list for " << name << "\n";
        return 1;
      }
      table += "    {\"" + name + "\", [](void** p) { " + ns + "::" + name + "(";
      for (std::size_t i = 0; i < types.size(); ++i) {
        table += (i > 0 ? ", " : "") + std::string("fake_param<") + types[i] + ">(p[" + std::to_string(i) + "])";
      }
      table += "); }},\n";
    }
  }
  table += "};\n";
  out << table;
  return out ? 0 : 1;
}
