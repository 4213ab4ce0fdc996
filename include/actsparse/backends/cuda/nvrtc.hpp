#pragma once
// Run-time compilation of generated CUDA source to PTX with NVRTC. libnvrtc is opened with
// dlopen, so this header needs neither the CUDA toolkit to build nor a GPU to run: without
// libnvrtc, nvrtc_info() says why and compile_to_ptx() throws cuda::unavailable. The few NVRTC
// prototypes used are declared here (ABI-stable C API). The driver (libcuda) is driver.hpp's.
// Programs that use it link the dynamic loader (${CMAKE_DL_LIBS}; part of libc since glibc 2.34).

#include <actsparse/core/error.hpp>

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace actsparse::cuda {

// The CUDA library that an operation needs is not installed.
class unavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct nvrtc_status {
  bool available = false;
  std::string library;  // the name that dlopen accepted
  int major = 0;        // nvrtcVersion
  int minor = 0;
  std::string reason;  // why it is not available
};

namespace detail {

struct nvrtc_program_impl;
using nvrtc_program = nvrtc_program_impl*;

struct nvrtc_api {
  using create_fn = int (*)(nvrtc_program*, const char*, const char*, int, const char* const*, const char* const*);
  using compile_fn = int (*)(nvrtc_program, int, const char* const*);
  using size_fn = int (*)(nvrtc_program, std::size_t*);
  using text_fn = int (*)(nvrtc_program, char*);
  using destroy_fn = int (*)(nvrtc_program*);
  using version_fn = int (*)(int*, int*);
  using error_string_fn = const char* (*)(int);

  nvrtc_status status;
  create_fn create = nullptr;
  compile_fn compile = nullptr;
  size_fn log_size = nullptr;
  text_fn log = nullptr;
  size_fn ptx_size = nullptr;
  text_fn ptx = nullptr;
  destroy_fn destroy = nullptr;
  error_string_fn error_string = nullptr;

  template <class F>
  static bool resolve(void* handle, const char* symbol, F& f) {
    f = reinterpret_cast<F>(dlsym(handle, symbol));
    return f != nullptr;
  }

  // Opened once and never closed: the compiled programs' PTX outlives no handle.
  static const nvrtc_api& get() {
    static const nvrtc_api api = load();
    return api;
  }

  static nvrtc_api load() {
    nvrtc_api a;
    void* handle = nullptr;
    for (const char* lib : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"}) {
      handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
      if (handle != nullptr) {
        a.status.library = lib;
        break;
      }
    }
    if (handle == nullptr) {
      a.status.reason = "NVRTC not found (tried libnvrtc.so.13, libnvrtc.so.12, libnvrtc.so)";
      return a;
    }
    version_fn version = nullptr;
    const bool ok = resolve(handle, "nvrtcCreateProgram", a.create) &&
                    resolve(handle, "nvrtcCompileProgram", a.compile) &&
                    resolve(handle, "nvrtcGetProgramLogSize", a.log_size) &&
                    resolve(handle, "nvrtcGetProgramLog", a.log) && resolve(handle, "nvrtcGetPTXSize", a.ptx_size) &&
                    resolve(handle, "nvrtcGetPTX", a.ptx) && resolve(handle, "nvrtcDestroyProgram", a.destroy) &&
                    resolve(handle, "nvrtcVersion", version) && resolve(handle, "nvrtcGetErrorString", a.error_string);
    if (!ok) {
      a.status.reason = a.status.library + " lacks an NVRTC function this header uses";
      return a;
    }
    if (version(&a.status.major, &a.status.minor) != 0) {
      a.status.reason = a.status.library + ": nvrtcVersion failed";
      return a;
    }
    a.status.available = true;
    return a;
  }
};

// FNV-1a, 64 bits.
[[nodiscard]] inline std::uint64_t fnv1a(std::string_view text, std::uint64_t h = 0xcbf29ce484222325ULL) noexcept {
  for (const char ch : text) {
    h ^= static_cast<unsigned char>(ch);
    h *= 0x100000001b3ULL;
  }
  return h;
}

struct ptx_cache {
  struct entry {
    std::string key;  // the whole key: a hash collision compiles again instead of returning other PTX
    std::string ptx;
  };
  std::mutex mutex;
  std::unordered_map<std::uint64_t, entry> entries;
  std::size_t hits = 0;
  std::size_t misses = 0;

  static ptx_cache& get() {
    static ptx_cache cache;
    return cache;
  }
};

}  // namespace detail

[[nodiscard]] inline nvrtc_status nvrtc_info() { return detail::nvrtc_api::get().status; }

struct ptx_cache_stats {
  std::size_t entries = 0;
  std::size_t hits = 0;
  std::size_t misses = 0;
};

[[nodiscard]] inline ptx_cache_stats ptx_cache_info() {
  auto& cache = detail::ptx_cache::get();
  const std::scoped_lock lock(cache.mutex);
  return {cache.entries.size(), cache.hits, cache.misses};
}

inline void clear_ptx_cache() {
  auto& cache = detail::ptx_cache::get();
  const std::scoped_lock lock(cache.mutex);
  cache.entries.clear();
  cache.hits = 0;
  cache.misses = 0;
}

// PTX for `source` compiled for `arch` (a virtual architecture, "compute_80", "compute_90").
// --fmad=false by default: only the explicit fmaf() calls of the generated kernels fuse, as
// core's reference math does. Results are cached in memory by (source, arch, options).
// Throws actsparse::error with NVRTC's log when the source does not compile, and
// cuda::unavailable when NVRTC cannot be loaded.
[[nodiscard]] inline std::string compile_to_ptx(std::string_view source, std::string_view arch = "compute_80",
                                                const std::vector<std::string>& options = {"--fmad=false"}) {
  constexpr std::string_view where = "cuda::compile_to_ptx";
  actsparse::detail::require(arch.starts_with("compute_") && arch.size() > 8, where, "arch", arch,
                             "a virtual architecture such as \"compute_80\" or \"compute_90\"");

  std::string key(source);
  key.append(1, '\0').append(arch);
  for (const auto& o : options) key.append(1, '\0').append(o);
  const std::uint64_t hash = detail::fnv1a(key);
  auto& cache = detail::ptx_cache::get();
  {
    const std::scoped_lock lock(cache.mutex);
    const auto it = cache.entries.find(hash);
    if (it != cache.entries.end() && it->second.key == key) {
      ++cache.hits;
      return it->second.ptx;
    }
    ++cache.misses;
  }

  const auto& api = detail::nvrtc_api::get();
  if (!api.status.available) throw unavailable("actsparse::" + std::string(where) + ": " + api.status.reason);

  const std::string src(source);
  detail::nvrtc_program program = nullptr;
  int rc = api.create(&program, src.c_str(), "actsparse_generated.cu", 0, nullptr, nullptr);
  if (rc != 0) {
    actsparse::detail::fail_described(where, "source",
                                      std::string("not accepted by nvrtcCreateProgram: ") + api.error_string(rc),
                                      "CUDA C++ source text");
  }
  std::vector<std::string> all = {"--gpu-architecture=" + std::string(arch)};
  all.insert(all.end(), options.begin(), options.end());
  std::vector<const char*> argv;
  argv.reserve(all.size());
  for (const auto& o : all) argv.push_back(o.c_str());
  rc = api.compile(program, static_cast<int>(argv.size()), argv.data());

  std::string result;
  bool compiled = rc == 0;
  std::size_t size = 0;
  if (compiled && api.ptx_size(program, &size) == 0 && size > 0) {
    result.resize(size);
    compiled = api.ptx(program, result.data()) == 0;
    if (!result.empty() && result.back() == '\0') result.pop_back();
  } else {
    compiled = false;
    std::string message = std::string(api.error_string(rc)) + "; log:\n";
    if (api.log_size(program, &size) == 0 && size > 0) {
      std::string log(size, '\0');
      if (api.log(program, log.data()) == 0) message.append(log.c_str());
    }
    result = std::move(message);
  }
  api.destroy(&program);
  if (!compiled)
    actsparse::detail::fail_described(where, "source", "rejected by NVRTC: " + result, "CUDA C++ that NVRTC compiles");

  const std::scoped_lock lock(cache.mutex);
  cache.entries.insert_or_assign(hash, detail::ptx_cache::entry{std::move(key), result});
  return result;
}

}  // namespace actsparse::cuda
