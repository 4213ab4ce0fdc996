#pragma once
// The CUDA driver API, opened with dlopen("libcuda.so.1"): a table of function pointers
// (cuda::driver_api) that the backend calls through. No CUDA header or library is needed
// to build, and a program without a driver runs and reports why.
//
// The table is injectable: cuda::install_driver(&table) makes every later call go through
// another table (the tests install a fake one whose "device" is host memory and whose
// kernels run under a CPU emulation), and install_driver(nullptr) goes back to libcuda.
// Install before creating a cuda::context; a context keeps the table it was created with.
//
// Every CUresult is checked with cuda::check(rc, "cuCall"): a failure throws
// cuda::driver_error naming the call and the driver's message. The few prototypes used are
// declared here (the ABI-stable C API; the _v2 symbols where the driver exports them).

#include <actsparse/backends/cuda/nvrtc.hpp>

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace actsparse::cuda {

// The driver's handle types, as cuda.h declares them (opaque pointers, ints).
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;  // NOLINT(google-runtime-int): the driver's type
struct CUctx_st;
struct CUmod_st;
struct CUfunc_st;
struct CUstream_st;
struct CUevent_st;
using CUcontext = CUctx_st*;
using CUmodule = CUmod_st*;
using CUfunction = CUfunc_st*;
using CUstream = CUstream_st*;
using CUevent = CUevent_st*;

// The values of cuda.h this library uses.
namespace driver_constants {
inline constexpr CUresult success = 0;
inline constexpr CUresult error_unsupported_ptx_version = 222;
inline constexpr int attribute_multiprocessor_count = 16;
inline constexpr int attribute_memory_clock_rate_khz = 36;
inline constexpr int attribute_global_memory_bus_width_bits = 37;
inline constexpr int attribute_l2_cache_size = 38;
inline constexpr int attribute_compute_capability_major = 75;
inline constexpr int attribute_compute_capability_minor = 76;
inline constexpr int attribute_pageable_memory_access = 88;
inline constexpr unsigned mem_attach_global = 1;
inline constexpr unsigned stream_non_blocking = 1;
inline constexpr unsigned event_default = 0;
inline constexpr int mem_advise_set_read_mostly = 1;
}  // namespace driver_constants

// A driver call failed.
class driver_error : public std::runtime_error {
 public:
  driver_error(std::string call, CUresult code, const std::string& message)
      : std::runtime_error("actsparse::cuda: " + call + " failed: " + message + " (CUresult " + std::to_string(code) +
                           ")"),
        call_(std::move(call)),
        code_(code) {}
  [[nodiscard]] const std::string& call() const noexcept { return call_; }
  [[nodiscard]] CUresult code() const noexcept { return code_; }

 private:
  std::string call_;
  CUresult code_;
};

// The driver functions the backend uses. `available` is false (and `reason` says why) when
// the library or one of its functions is missing; the pointers are then null.
struct driver_api {
  bool available = false;
  std::string library;  // "libcuda.so.1", or a fake's name
  std::string reason;   // why it is not available

  CUresult (*init)(unsigned flags) = nullptr;                                              // cuInit
  CUresult (*driver_get_version)(int* version) = nullptr;                                  // cuDriverGetVersion
  CUresult (*device_get_count)(int* count) = nullptr;                                      // cuDeviceGetCount
  CUresult (*device_get)(CUdevice* device, int ordinal) = nullptr;                         // cuDeviceGet
  CUresult (*device_get_name)(char* name, int length, CUdevice device) = nullptr;          // cuDeviceGetName
  CUresult (*device_get_attribute)(int* value, int attribute, CUdevice device) = nullptr;  // cuDeviceGetAttribute
  CUresult (*device_total_mem)(std::size_t* bytes, CUdevice device) = nullptr;             // cuDeviceTotalMem_v2
  CUresult (*primary_ctx_retain)(CUcontext* context, CUdevice device) = nullptr;           // cuDevicePrimaryCtxRetain
  CUresult (*primary_ctx_release)(CUdevice device) = nullptr;                   // cuDevicePrimaryCtxRelease_v2
  CUresult (*ctx_set_current)(CUcontext context) = nullptr;                     // cuCtxSetCurrent
  CUresult (*module_load_data)(CUmodule* module, const void* image) = nullptr;  // cuModuleLoadData
  CUresult (*module_unload)(CUmodule module) = nullptr;                         // cuModuleUnload
  CUresult (*module_get_function)(CUfunction* f, CUmodule module, const char* name) = nullptr;  // cuModuleGetFunction
  CUresult (*launch_kernel)(CUfunction f, unsigned grid_x, unsigned grid_y, unsigned grid_z, unsigned block_x,
                            unsigned block_y, unsigned block_z, unsigned shared_bytes, CUstream stream, void** params,
                            void** extra) = nullptr;                                             // cuLaunchKernel
  CUresult (*mem_alloc)(CUdeviceptr* ptr, std::size_t bytes) = nullptr;                          // cuMemAlloc_v2
  CUresult (*mem_alloc_managed)(CUdeviceptr* ptr, std::size_t bytes, unsigned flags) = nullptr;  // cuMemAllocManaged
  CUresult (*mem_free)(CUdeviceptr ptr) = nullptr;                                               // cuMemFree_v2
  CUresult (*mem_advise)(CUdeviceptr ptr, std::size_t bytes, int advice, CUdevice device) = nullptr;  // cuMemAdvise
  CUresult (*memcpy_htod_async)(CUdeviceptr dst, const void* src, std::size_t bytes,
                                CUstream stream) = nullptr;  // cuMemcpyHtoDAsync_v2
  CUresult (*memcpy_dtoh_async)(void* dst, CUdeviceptr src, std::size_t bytes,
                                CUstream stream) = nullptr;  // cuMemcpyDtoHAsync_v2
  CUresult (*memcpy_dtod_async)(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes,
                                CUstream stream) = nullptr;  // cuMemcpyDtoDAsync_v2
  CUresult (*memset_d32_async)(CUdeviceptr dst, unsigned value, std::size_t count,
                               CUstream stream) = nullptr;                          // cuMemsetD32Async
  CUresult (*stream_create)(CUstream* stream, unsigned flags) = nullptr;            // cuStreamCreate
  CUresult (*stream_destroy)(CUstream stream) = nullptr;                            // cuStreamDestroy_v2
  CUresult (*stream_synchronize)(CUstream stream) = nullptr;                        // cuStreamSynchronize
  CUresult (*event_create)(CUevent* event, unsigned flags) = nullptr;               // cuEventCreate
  CUresult (*event_record)(CUevent event, CUstream stream) = nullptr;               // cuEventRecord
  CUresult (*event_synchronize)(CUevent event) = nullptr;                           // cuEventSynchronize
  CUresult (*event_elapsed_time)(float* ms, CUevent start, CUevent end) = nullptr;  // cuEventElapsedTime
  CUresult (*event_destroy)(CUevent event) = nullptr;                               // cuEventDestroy_v2
  CUresult (*get_error_name)(CUresult rc, const char** text) = nullptr;             // cuGetErrorName
  CUresult (*get_error_string)(CUresult rc, const char** text) = nullptr;           // cuGetErrorString
};

namespace detail {

template <class F>
bool resolve_driver(void* handle, const char* symbol, F& f) {
  f = reinterpret_cast<F>(dlsym(handle, symbol));
  return f != nullptr;
}

// libcuda stays loaded once opened: unloading a CUDA driver in a running process is unsafe.
inline driver_api load_driver() {
  driver_api d;
  void* handle = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    d.reason = "no CUDA driver (libcuda.so.1 not found)";
    return d;
  }
  d.library = "libcuda.so.1";
  struct symbol {
    const char* name;
    bool ok;
  };
  const symbol symbols[] = {
      {"cuInit", resolve_driver(handle, "cuInit", d.init)},
      {"cuDriverGetVersion", resolve_driver(handle, "cuDriverGetVersion", d.driver_get_version)},
      {"cuDeviceGetCount", resolve_driver(handle, "cuDeviceGetCount", d.device_get_count)},
      {"cuDeviceGet", resolve_driver(handle, "cuDeviceGet", d.device_get)},
      {"cuDeviceGetName", resolve_driver(handle, "cuDeviceGetName", d.device_get_name)},
      {"cuDeviceGetAttribute", resolve_driver(handle, "cuDeviceGetAttribute", d.device_get_attribute)},
      {"cuDeviceTotalMem_v2", resolve_driver(handle, "cuDeviceTotalMem_v2", d.device_total_mem)},
      {"cuDevicePrimaryCtxRetain", resolve_driver(handle, "cuDevicePrimaryCtxRetain", d.primary_ctx_retain)},
      {"cuDevicePrimaryCtxRelease_v2", resolve_driver(handle, "cuDevicePrimaryCtxRelease_v2", d.primary_ctx_release)},
      {"cuCtxSetCurrent", resolve_driver(handle, "cuCtxSetCurrent", d.ctx_set_current)},
      {"cuModuleLoadData", resolve_driver(handle, "cuModuleLoadData", d.module_load_data)},
      {"cuModuleUnload", resolve_driver(handle, "cuModuleUnload", d.module_unload)},
      {"cuModuleGetFunction", resolve_driver(handle, "cuModuleGetFunction", d.module_get_function)},
      {"cuLaunchKernel", resolve_driver(handle, "cuLaunchKernel", d.launch_kernel)},
      {"cuMemAlloc_v2", resolve_driver(handle, "cuMemAlloc_v2", d.mem_alloc)},
      {"cuMemAllocManaged", resolve_driver(handle, "cuMemAllocManaged", d.mem_alloc_managed)},
      {"cuMemFree_v2", resolve_driver(handle, "cuMemFree_v2", d.mem_free)},
      {"cuMemAdvise", resolve_driver(handle, "cuMemAdvise", d.mem_advise)},
      {"cuMemcpyHtoDAsync_v2", resolve_driver(handle, "cuMemcpyHtoDAsync_v2", d.memcpy_htod_async)},
      {"cuMemcpyDtoHAsync_v2", resolve_driver(handle, "cuMemcpyDtoHAsync_v2", d.memcpy_dtoh_async)},
      {"cuMemcpyDtoDAsync_v2", resolve_driver(handle, "cuMemcpyDtoDAsync_v2", d.memcpy_dtod_async)},
      {"cuMemsetD32Async", resolve_driver(handle, "cuMemsetD32Async", d.memset_d32_async)},
      {"cuStreamCreate", resolve_driver(handle, "cuStreamCreate", d.stream_create)},
      {"cuStreamDestroy_v2", resolve_driver(handle, "cuStreamDestroy_v2", d.stream_destroy)},
      {"cuStreamSynchronize", resolve_driver(handle, "cuStreamSynchronize", d.stream_synchronize)},
      {"cuEventCreate", resolve_driver(handle, "cuEventCreate", d.event_create)},
      {"cuEventRecord", resolve_driver(handle, "cuEventRecord", d.event_record)},
      {"cuEventSynchronize", resolve_driver(handle, "cuEventSynchronize", d.event_synchronize)},
      {"cuEventElapsedTime", resolve_driver(handle, "cuEventElapsedTime", d.event_elapsed_time)},
      {"cuEventDestroy_v2", resolve_driver(handle, "cuEventDestroy_v2", d.event_destroy)},
      {"cuGetErrorName", resolve_driver(handle, "cuGetErrorName", d.get_error_name)},
      {"cuGetErrorString", resolve_driver(handle, "cuGetErrorString", d.get_error_string)},
  };
  for (const symbol& s : symbols) {
    if (!s.ok) {
      d.reason = std::string("libcuda.so.1 lacks ") + s.name + " (driver too old?)";
      return d;
    }
  }
  d.available = true;
  return d;
}

inline const driver_api*& installed_driver() {
  static const driver_api* installed = nullptr;
  return installed;
}

}  // namespace detail

// The driver every new context uses: the installed table, else libcuda (opened on first use).
[[nodiscard]] inline const driver_api& driver() {
  if (const driver_api* d = detail::installed_driver(); d != nullptr) return *d;
  static const driver_api real = detail::load_driver();
  return real;
}

// Makes `table` the driver (it must outlive every context created with it); nullptr goes
// back to libcuda. Not thread-safe: install before any thread uses the backend.
inline void install_driver(const driver_api* table) noexcept { detail::installed_driver() = table; }

// Installs a table for a scope (tests), then restores the previous one.
class scoped_driver {
 public:
  explicit scoped_driver(const driver_api& table) noexcept : previous_(detail::installed_driver()) {
    install_driver(&table);
  }
  ~scoped_driver() { install_driver(previous_); }
  scoped_driver(const scoped_driver&) = delete;
  scoped_driver& operator=(const scoped_driver&) = delete;

 private:
  const driver_api* previous_;
};

// "CUDA_ERROR_X: the driver's sentence", or the number when the driver has no text for it.
[[nodiscard]] inline std::string driver_message(const driver_api& d, CUresult rc) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.get_error_name != nullptr) (void)d.get_error_name(rc, &name);
  if (d.get_error_string != nullptr) (void)d.get_error_string(rc, &text);
  std::string s = name != nullptr ? name : "CUresult " + std::to_string(rc);
  if (text != nullptr) s.append(": ").append(text);
  return s;
}

// Throws driver_error naming `call` when rc is not CUDA_SUCCESS.
inline void check(const driver_api& d, CUresult rc, std::string_view call) {
  if (rc != driver_constants::success) throw driver_error(std::string(call), rc, driver_message(d, rc));
}

struct device_report {
  int count = 0;
  std::string reason;  // why count is 0
};

// The number of CUDA devices the driver (driver(): libcuda, opened once, or the installed
// table) sees; 0 and the reason when there is no driver or no device. Does not throw.
[[nodiscard]] inline device_report device_count() {
  const driver_api& d = driver();
  if (!d.available) return {0, d.reason};
  if (const CUresult rc = d.init(0); rc != driver_constants::success)
    return {0, "cuInit failed: " + driver_message(d, rc)};
  int n = 0;
  if (const CUresult rc = d.device_get_count(&n); rc != driver_constants::success)
    return {0, "cuDeviceGetCount failed: " + driver_message(d, rc)};
  if (n == 0) return {0, "the CUDA driver reports no device"};
  return {n, {}};
}

}  // namespace actsparse::cuda
