#pragma once
// Helpers of the cuda-compile tests: NVRTC availability (a test prints "CUDA-SKIP: why" and
// returns when a tool is missing; CTest reports it as skipped), and ptxas run on PTX with -v.

#include <actsparse/backends/cuda/nvrtc.hpp>

#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <string_view>

#ifndef ACTSPARSE_PTXAS
#define ACTSPARSE_PTXAS ""
#endif

namespace actsparse_cuda_test {

inline bool skip_without_nvrtc() {
  const auto info = actsparse::cuda::nvrtc_info();
  if (info.available) return false;
  std::printf("CUDA-SKIP: %s\n", info.reason.c_str());
  return true;
}

// ptxas from CMake's find_program, else PATH, else /usr/local/cuda/bin; empty when none.
inline std::string ptxas_path() {
  namespace fs = std::filesystem;
  if (std::string_view(ACTSPARSE_PTXAS).size() > 0 && fs::exists(ACTSPARSE_PTXAS)) return ACTSPARSE_PTXAS;
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    std::stringstream dirs(path);
    for (std::string dir; std::getline(dirs, dir, ':');) {
      if (!dir.empty() && fs::exists(fs::path(dir) / "ptxas")) return (fs::path(dir) / "ptxas").string();
    }
  }
  if (fs::exists("/usr/local/cuda/bin/ptxas")) return "/usr/local/cuda/bin/ptxas";
  return {};
}

inline bool skip_without_ptxas() {
  if (!ptxas_path().empty()) return false;
  std::printf("CUDA-SKIP: ptxas not found (CMake, PATH, /usr/local/cuda/bin)\n");
  return true;
}

struct kernel_resources {
  int registers = -1;
  int spill_stores = -1;  // bytes
  int spill_loads = -1;
};

struct ptxas_result {
  int exit_code = -1;
  std::string output;
  std::map<std::string, kernel_resources> kernels;
};

// Assembles `ptx` for `sm` ("sm_80") with ptxas -v and reads each function's registers and spills.
inline ptxas_result run_ptxas(const std::string& ptx, std::string_view sm) {
  namespace fs = std::filesystem;
  static int serial = 0;
  const fs::path dir = fs::temp_directory_path();
  const std::string stem = "actsparse_cuda_" + std::to_string(::getpid()) + "_" + std::to_string(serial++);
  const fs::path ptx_file = dir / (stem + ".ptx");
  const fs::path cubin_file = dir / (stem + ".cubin");
  std::ofstream(ptx_file) << ptx;

  ptxas_result r;
  const std::string cmd = "'" + ptxas_path() + "' -arch=" + std::string(sm) + " -v '" + ptx_file.string() + "' -o '" +
                          cubin_file.string() + "' 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buffer{};
  for (std::size_t n; (n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0;) r.output.append(buffer.data(), n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::error_code ignored;
  fs::remove(ptx_file, ignored);
  fs::remove(cubin_file, ignored);

  // "ptxas info    : Function properties for NAME" then "N bytes stack frame, S bytes spill stores,
  // L bytes spill loads"; "ptxas info    : Compiling entry function 'NAME'" then "Used R registers".
  std::stringstream lines(r.output);
  std::string current;
  for (std::string line; std::getline(lines, line);) {
    if (const auto at = line.find("Function properties for "); at != std::string::npos) {
      current = line.substr(at + 24);
    } else if (const auto at2 = line.find("Compiling entry function '"); at2 != std::string::npos) {
      const auto begin = at2 + 26;
      current = line.substr(begin, line.find('\'', begin) - begin);
    } else if (const auto s = line.find(" bytes spill stores"); s != std::string::npos && !current.empty()) {
      const auto comma = line.rfind(',', s);
      r.kernels[current].spill_stores = std::atoi(line.c_str() + comma + 1);
      const auto l = line.find(" bytes spill loads");
      const auto comma2 = line.rfind(',', l);
      r.kernels[current].spill_loads = std::atoi(line.c_str() + comma2 + 1);
    } else if (const auto u = line.find("Used "); u != std::string::npos && !current.empty()) {
      r.kernels[current].registers = std::atoi(line.c_str() + u + 5);
    }
  }
  return r;
}

}  // namespace actsparse_cuda_test
