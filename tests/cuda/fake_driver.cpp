// The fake CUDA driver of fake_driver.hpp and the emulated kernels it launches. This is the
// only translation unit that includes simt_emulation.hpp with the backend's kernels (its
// macros redefine CUDA keywords).
#include "fake_driver.hpp"

#include "simt_emulation.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>
#include <unordered_map>

namespace {

template <class T>
T fake_param(void* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

struct fake_kernel_entry {
  const char* name;
  void (*call)(void** params);
};

}  // namespace

#include "backend_kernels.inc"  // generated: tests/cuda_emulation/emit_backend_kernels.cpp

namespace actsparse_cuda_test {
namespace {

namespace cuda = actsparse::cuda;
using cuda::CUresult;

constexpr CUresult ok = 0;
constexpr CUresult invalid_value = 1;
constexpr CUresult not_found = 500;

struct fake_state {
  int device_count = 1;
  std::string fail_symbol;
  CUresult fail_rc = 0;
  fake_driver_stats stats;
  std::unordered_map<void*, std::size_t> allocations;
};

fake_state& state() {
  static fake_state s;
  return s;
}

// A failure injected for `symbol`, once.
bool injected(std::string_view symbol, CUresult& rc) {
  fake_state& s = state();
  if (s.fail_symbol != symbol) return false;
  s.fail_symbol.clear();
  rc = s.fail_rc;
  return true;
}

#define FAKE_INJECT(symbol)                \
  do {                                     \
    CUresult rc_ = 0;                      \
    if (injected(symbol, rc_)) return rc_; \
  } while (false)

struct fake_module {
  std::string image;
};

struct fake_function {
  std::string name;
  void (*call)(void**);
};

std::unordered_map<std::string, fake_function>& functions() {
  static std::unordered_map<std::string, fake_function> f = [] {
    std::unordered_map<std::string, fake_function> m;
    for (const auto& e : fake_kernel_table) m.emplace(e.name, fake_function{e.name, e.call});
    return m;
  }();
  return f;
}

CUresult fake_init(unsigned /*flags*/) {
  FAKE_INJECT("cuInit");
  return ok;
}
CUresult fake_driver_version(int* v) {
  *v = 13000;
  return ok;
}
CUresult fake_device_count(int* n) {
  FAKE_INJECT("cuDeviceGetCount");
  *n = state().device_count;
  return ok;
}
CUresult fake_device_get(cuda::CUdevice* d, int ordinal) {
  if (ordinal < 0 || ordinal >= state().device_count) return invalid_value;
  *d = ordinal;
  return ok;
}
CUresult fake_device_name(char* name, int length, cuda::CUdevice /*d*/) {
  std::snprintf(name, static_cast<std::size_t>(length), "%s", "actsparse fake device (CPU emulation)");
  return ok;
}
CUresult fake_device_attribute(int* v, int attribute, cuda::CUdevice /*d*/) {
  namespace k = cuda::driver_constants;
  switch (attribute) {
    case k::attribute_compute_capability_major:
      *v = 9;
      break;
    case k::attribute_compute_capability_minor:
      *v = 0;
      break;
    case k::attribute_multiprocessor_count:
      *v = 2;
      break;
    case k::attribute_memory_clock_rate_khz:
      *v = 1000000;
      break;
    case k::attribute_global_memory_bus_width_bits:
      *v = 64;
      break;
    case k::attribute_l2_cache_size:
      *v = 1 << 20;
      break;
    case k::attribute_pageable_memory_access:
      *v = 1;  // host memory is all there is
      break;
    default:
      return invalid_value;
  }
  return ok;
}
CUresult fake_total_mem(std::size_t* bytes, cuda::CUdevice /*d*/) {
  *bytes = std::size_t{1} << 30;
  return ok;
}
CUresult fake_ctx_retain(cuda::CUcontext* c, cuda::CUdevice /*d*/) {
  FAKE_INJECT("cuDevicePrimaryCtxRetain");
  *c = reinterpret_cast<cuda::CUcontext>(&state());
  return ok;
}
CUresult fake_ctx_release(cuda::CUdevice /*d*/) { return ok; }
CUresult fake_ctx_set_current(cuda::CUcontext /*c*/) { return ok; }
CUresult fake_module_load(cuda::CUmodule* m, const void* image) {
  FAKE_INJECT("cuModuleLoadData");
  *m = reinterpret_cast<cuda::CUmodule>(new fake_module{static_cast<const char*>(image)});
  ++state().stats.modules_loaded;
  ++state().stats.modules_live;
  return ok;
}
CUresult fake_module_unload(cuda::CUmodule m) {
  delete reinterpret_cast<fake_module*>(m);
  --state().stats.modules_live;
  return ok;
}
CUresult fake_module_function(cuda::CUfunction* f, cuda::CUmodule m, const char* name) {
  const auto* module = reinterpret_cast<const fake_module*>(m);
  // The image (PTX, or source from a fake compiler) must define the kernel asked for.
  if (module->image.find(std::string(name) + "(") == std::string::npos) return not_found;
  const auto it = functions().find(name);
  if (it == functions().end()) return not_found;
  *f = reinterpret_cast<cuda::CUfunction>(&it->second);
  return ok;
}
CUresult fake_launch(cuda::CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                     unsigned shared, cuda::CUstream /*stream*/, void** params, void** extra) {
  FAKE_INJECT("cuLaunchKernel");
  if (gx == 0 || gy == 0 || gz != 1 || by != 1 || bz != 1 || bx == 0 || bx > 1024 || bx % 32 != 0 || shared != 0 ||
      extra != nullptr || params == nullptr) {
    return invalid_value;
  }
  const auto* fn = reinterpret_cast<const fake_function*>(f);
  ++state().stats.launches;
  ++state().stats.launches_by_kernel[fn->name];
  emulate_launch(gx, gy, bx, [&] { fn->call(params); });
  return ok;
}
CUresult fake_alloc(cuda::CUdeviceptr* p, std::size_t bytes) {
  FAKE_INJECT("cuMemAlloc_v2");
  const std::size_t rounded = (bytes + 255) / 256 * 256;
  void* m = std::aligned_alloc(256, rounded);
  if (m == nullptr) return 2;  // CUDA_ERROR_OUT_OF_MEMORY
  std::memset(m, 0xFF, rounded);
  state().allocations.emplace(m, bytes);
  ++state().stats.live_allocations;
  *p = reinterpret_cast<cuda::CUdeviceptr>(m);
  return ok;
}
CUresult fake_alloc_managed(cuda::CUdeviceptr* p, std::size_t bytes, unsigned /*flags*/) {
  FAKE_INJECT("cuMemAllocManaged");
  return fake_alloc(p, bytes);
}
CUresult fake_free(cuda::CUdeviceptr p) {
  void* m = reinterpret_cast<void*>(p);
  if (state().allocations.erase(m) == 0) return invalid_value;
  std::free(m);
  --state().stats.live_allocations;
  return ok;
}
CUresult fake_advise(cuda::CUdeviceptr p, std::size_t /*bytes*/, int advice, cuda::CUdevice /*d*/) {
  if (!state().allocations.contains(reinterpret_cast<void*>(p)) || advice != 1) return invalid_value;
  return ok;
}
CUresult fake_htod(cuda::CUdeviceptr dst, const void* src, std::size_t bytes, cuda::CUstream /*s*/) {
  std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
  return ok;
}
CUresult fake_dtoh(void* dst, cuda::CUdeviceptr src, std::size_t bytes, cuda::CUstream /*s*/) {
  std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
  return ok;
}
CUresult fake_dtod(cuda::CUdeviceptr dst, cuda::CUdeviceptr src, std::size_t bytes, cuda::CUstream /*s*/) {
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  return ok;
}
CUresult fake_memset32(cuda::CUdeviceptr dst, unsigned value, std::size_t count, cuda::CUstream /*s*/) {
  auto* p = reinterpret_cast<unsigned*>(dst);
  for (std::size_t i = 0; i < count; ++i) p[i] = value;
  return ok;
}
CUresult fake_stream_create(cuda::CUstream* s, unsigned /*flags*/) {
  *s = reinterpret_cast<cuda::CUstream>(new int(0));
  return ok;
}
CUresult fake_stream_destroy(cuda::CUstream s) {
  delete reinterpret_cast<int*>(s);
  return ok;
}
CUresult fake_stream_sync(cuda::CUstream /*s*/) {
  FAKE_INJECT("cuStreamSynchronize");
  return ok;
}
using fake_clock = std::chrono::steady_clock;
CUresult fake_event_create(cuda::CUevent* e, unsigned /*flags*/) {
  *e = reinterpret_cast<cuda::CUevent>(new fake_clock::time_point());
  return ok;
}
CUresult fake_event_record(cuda::CUevent e, cuda::CUstream /*s*/) {
  *reinterpret_cast<fake_clock::time_point*>(e) = fake_clock::now();
  return ok;
}
CUresult fake_event_sync(cuda::CUevent /*e*/) { return ok; }
CUresult fake_event_elapsed(float* ms, cuda::CUevent start, cuda::CUevent end) {
  const auto a = *reinterpret_cast<fake_clock::time_point*>(start);
  const auto b = *reinterpret_cast<fake_clock::time_point*>(end);
  *ms = std::chrono::duration<float, std::milli>(b - a).count();
  return ok;
}
CUresult fake_event_destroy(cuda::CUevent e) {
  delete reinterpret_cast<fake_clock::time_point*>(e);
  return ok;
}
CUresult fake_error_name(CUresult rc, const char** text) {
  switch (rc) {
    case 1:
      *text = "CUDA_ERROR_INVALID_VALUE";
      return ok;
    case 2:
      *text = "CUDA_ERROR_OUT_OF_MEMORY";
      return ok;
    case 500:
      *text = "CUDA_ERROR_NOT_FOUND";
      return ok;
    default:
      *text = nullptr;
      return invalid_value;
  }
}
CUresult fake_error_string(CUresult rc, const char** text) {
  *text = rc == 2 ? "out of memory" : rc == 500 ? "named symbol not found" : "fake driver error";
  return ok;
}

cuda::driver_api make_fake() {
  cuda::driver_api d;
  d.available = true;
  d.library = "fake";
  d.init = fake_init;
  d.driver_get_version = fake_driver_version;
  d.device_get_count = fake_device_count;
  d.device_get = fake_device_get;
  d.device_get_name = fake_device_name;
  d.device_get_attribute = fake_device_attribute;
  d.device_total_mem = fake_total_mem;
  d.primary_ctx_retain = fake_ctx_retain;
  d.primary_ctx_release = fake_ctx_release;
  d.ctx_set_current = fake_ctx_set_current;
  d.module_load_data = fake_module_load;
  d.module_unload = fake_module_unload;
  d.module_get_function = fake_module_function;
  d.launch_kernel = fake_launch;
  d.mem_alloc = fake_alloc;
  d.mem_alloc_managed = fake_alloc_managed;
  d.mem_free = fake_free;
  d.mem_advise = fake_advise;
  d.memcpy_htod_async = fake_htod;
  d.memcpy_dtoh_async = fake_dtoh;
  d.memcpy_dtod_async = fake_dtod;
  d.memset_d32_async = fake_memset32;
  d.stream_create = fake_stream_create;
  d.stream_destroy = fake_stream_destroy;
  d.stream_synchronize = fake_stream_sync;
  d.event_create = fake_event_create;
  d.event_record = fake_event_record;
  d.event_synchronize = fake_event_sync;
  d.event_elapsed_time = fake_event_elapsed;
  d.event_destroy = fake_event_destroy;
  d.get_error_name = fake_error_name;
  d.get_error_string = fake_error_string;
  return d;
}

}  // namespace

const cuda::driver_api& fake_driver() {
  static const cuda::driver_api d = make_fake();
  return d;
}

fake_driver_stats& fake_stats() { return state().stats; }

void fake_set_device_count(int n) { state().device_count = n; }

void fake_fail_next(const std::string& symbol, CUresult rc) {
  state().fail_symbol = symbol;
  state().fail_rc = rc;
}

bool fake_has_kernel(const std::string& name) { return functions().contains(name); }

}  // namespace actsparse_cuda_test
