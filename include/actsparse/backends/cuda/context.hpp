#pragma once
// A CUDA device ready to run generated kernels: cuda::context holds the device, its primary
// context, one stream and the module cache (generated source → PTX with NVRTC for the
// device's architecture → cuModuleLoadData, cached in memory by (kernel names, arch) and,
// optionally, PTX on disk). cuda::buffer is device or managed memory owned RAII.
//
// context::create() throws cuda::unavailable("no CUDA device: <reason>") where there is no
// driver or no device; context::probe() says the same without throwing. Both go through
// the driver table of driver.hpp, so a test can install a fake one.
//
// On-disk PTX cache: context_options::cache_dir, or, when that is empty, the environment
// variable ACTSPARSE_CUDA_CACHE_DIR; neither set: memory only. One file per (source, arch),
// named by a hash of both, so a generator change never reads stale PTX.

#include <actsparse/backends/cuda/driver.hpp>
#include <actsparse/backends/cuda/generator.hpp>
#include <actsparse/backends/cuda/nvrtc.hpp>
#include <actsparse/core/error.hpp>

#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <memory>
#include <mutex>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace actsparse::cuda {

struct context_options {
  int device = 0;
  std::string cache_dir;  // on-disk PTX cache; empty: $ACTSPARSE_CUDA_CACHE_DIR, or none
  // source, arch ("compute_90") -> PTX. Empty: compile_to_ptx (NVRTC). Tests may replace it.
  std::function<std::string(const std::string&, const std::string&)> compile;
};

struct device_info {
  int ordinal = 0;
  std::string name;
  int major = 0;  // compute capability
  int minor = 0;
  int multiprocessors = 0;
  std::size_t memory_bytes = 0;
  std::size_t l2_bytes = 0;
  int memory_clock_khz = 0;
  int bus_width_bits = 0;
  bool pageable_memory_access = false;  // the device reads ordinary host memory (HMM / ATS)
  int driver_version = 0;               // cuDriverGetVersion: 1000 * major + 10 * minor
  std::string arch;                     // the virtual architecture kernels are compiled for

  // Nominal memory bandwidth in GB/s: memory clock × bus width × 2 (double data rate).
  [[nodiscard]] double nominal_gbps() const noexcept {
    return 2.0 * memory_clock_khz * 1e3 * (bus_width_bits / 8.0) / 1e9;
  }
};

struct probe_result {
  bool available = false;
  std::string reason;  // "no CUDA device: ..." when not available
};

struct module_cache_stats {
  std::size_t modules = 0;
  std::size_t hits = 0;
  std::size_t compiles = 0;   // PTX made by the compiler
  std::size_t disk_hits = 0;  // PTX read from the cache directory
};

namespace detail {

// The newest virtual architecture NVRTC supports that the device runs: compute_XY with
// XY <= the device's capability; the device's own when NVRTC cannot say.
inline std::string choose_arch(int major, int minor) {
  const int device_cc = major * 10 + minor;
  int best = 0;
  const nvrtc_status nv = nvrtc_info();
  if (nv.available) {
    if (void* h = dlopen(nv.library.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD); h != nullptr) {
      using count_fn = int (*)(int*);
      using list_fn = int (*)(int*);
      auto count = reinterpret_cast<count_fn>(dlsym(h, "nvrtcGetNumSupportedArchs"));
      auto list = reinterpret_cast<list_fn>(dlsym(h, "nvrtcGetSupportedArchs"));
      int n = 0;
      if (count != nullptr && list != nullptr && count(&n) == 0 && n > 0) {
        std::vector<int> archs(static_cast<std::size_t>(n));
        if (list(archs.data()) == 0) {
          for (const int a : archs) {
            if (a <= device_cc && a > best) best = a;
          }
        }
      }
    }
  }
  return "compute_" + std::to_string(best > 0 ? best : device_cc);
}

// PTX with its ".version X.Y" line replaced (an older driver rejects a newer PTX ISA
// version even when the kernel uses nothing new).
inline std::string with_ptx_version(const std::string& ptx, std::string_view version) {
  const std::size_t at = ptx.find(".version ");
  if (at == std::string::npos) return ptx;
  const std::size_t end = ptx.find('\n', at);
  std::string s = ptx.substr(0, at);
  s.append(".version ").append(version).append(ptx.substr(end == std::string::npos ? ptx.size() : end));
  return s;
}

inline std::string hex(std::uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(v));  // NOLINT(google-runtime-int)
  return text;
}

}  // namespace detail

class context {
 public:
  // Whether a context can be created (the driver loads, cuInit succeeds, a device exists);
  // never throws.
  [[nodiscard]] static probe_result probe(int device = 0) {
    const device_report r = device_count();
    if (r.count == 0) return {false, "no CUDA device: " + r.reason};
    if (device < 0 || device >= r.count)
      return {false, "no CUDA device: device " + std::to_string(device) + " asked, the driver sees " +
                         std::to_string(r.count)};
    return {true, {}};
  }

  // A context on options.device; throws cuda::unavailable("no CUDA device: ...") when there
  // is none, cuda::driver_error when a driver call fails.
  [[nodiscard]] static context create(context_options options = {}) {
    const probe_result p = probe(options.device);
    if (!p.available) throw unavailable(p.reason);
    return context(std::move(options));
  }

  context(context&&) noexcept = default;
  context& operator=(context&&) noexcept = default;
  context(const context&) = delete;
  context& operator=(const context&) = delete;
  ~context() = default;

  [[nodiscard]] const driver_api& api() const noexcept { return *state_->api; }
  [[nodiscard]] const device_info& info() const noexcept { return state_->info; }
  [[nodiscard]] CUstream stream() const noexcept { return state_->stream; }

  // Makes the primary context current on the calling thread (each run does this first).
  void make_current() const { check(api(), api().ctx_set_current(state_->ctx), "cuCtxSetCurrent"); }
  void synchronize() const { check(api(), api().stream_synchronize(state_->stream), "cuStreamSynchronize"); }

  // The kernels of a config, in kernel_names() order: compiled and loaded on first use.
  [[nodiscard]] const std::vector<CUfunction>& functions(const gpu::kernel_config& c) {
    const std::vector<std::string> names = kernel_names(c);
    std::string key;
    for (const auto& n : names) key.append(n).append(1, ' ');
    state& s = *state_;
    const std::scoped_lock lock(s.mutex);
    if (const auto it = s.modules.find(key); it != s.modules.end()) {
      ++s.stats.hits;
      return it->second.functions;
    }
    const std::string ptx = ptx_for(generate_cuda(c));
    loaded l;
    l.module = load(ptx);
    for (const auto& n : names) {
      CUfunction f = nullptr;
      if (const CUresult rc = api().module_get_function(&f, l.module, n.c_str()); rc != driver_constants::success) {
        (void)api().module_unload(l.module);
        check(api(), rc, "cuModuleGetFunction(" + n + ")");
      }
      l.functions.push_back(f);
    }
    ++s.stats.modules;
    return s.modules.emplace(key, std::move(l)).first->second.functions;
  }

  [[nodiscard]] module_cache_stats cache_stats() const {
    const std::scoped_lock lock(state_->mutex);
    return state_->stats;
  }

  // Enqueues f on the stream: grid_x × grid_y blocks of `threads`; args are the kernel's
  // parameters by value, in order, of exactly the kernel's types (pointers, unsigned int,
  // unsigned long long, float). An empty grid launches nothing.
  template <class... Args>
  void launch(CUfunction f, std::size_t grid_x, std::size_t grid_y, unsigned threads, const Args&... args) const {
    if (grid_x == 0 || grid_y == 0) return;
    void* params[] = {const_cast<void*>(static_cast<const void*>(&args))...};  // NOLINT: the driver's signature
    check(api(),
          api().launch_kernel(f, narrow(grid_x, "grid x"), narrow(grid_y, "grid y"), 1, threads, 1, 1, 0,
                              state_->stream, params, nullptr),
          "cuLaunchKernel");
  }

  // Asynchronous copies and fills on the stream.
  void copy_to_device(void* dst, const void* src, std::size_t bytes) const {
    if (bytes == 0) return;
    check(api(), api().memcpy_htod_async(ptr(dst), src, bytes, state_->stream), "cuMemcpyHtoDAsync_v2");
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) const {
    if (bytes == 0) return;
    check(api(), api().memcpy_dtoh_async(dst, ptr(src), bytes, state_->stream), "cuMemcpyDtoHAsync_v2");
  }
  void copy_on_device(void* dst, const void* src, std::size_t bytes) const {
    if (bytes == 0) return;
    check(api(), api().memcpy_dtod_async(ptr(dst), ptr(src), bytes, state_->stream), "cuMemcpyDtoDAsync_v2");
  }
  void fill_u32(void* dst, std::uint32_t value, std::size_t count) const {
    if (count == 0) return;
    check(api(), api().memset_d32_async(ptr(dst), value, count, state_->stream), "cuMemsetD32Async");
  }

  static CUdeviceptr ptr(const void* p) noexcept { return reinterpret_cast<CUdeviceptr>(p); }
  static unsigned narrow(std::size_t v, std::string_view what) {
    if (v > std::numeric_limits<unsigned>::max()) {
      actsparse::detail::fail("cuda::launch", what, v, "a count below 2^32 (the kernels index with 32-bit unsigned)");
    }
    return static_cast<unsigned>(v);
  }

 private:
  struct loaded {
    CUmodule module = nullptr;
    std::vector<CUfunction> functions;
  };
  struct state {
    const driver_api* api = nullptr;
    context_options options;
    device_info info;
    CUdevice device = 0;
    CUcontext ctx = nullptr;
    CUstream stream = nullptr;
    mutable std::mutex mutex;
    std::unordered_map<std::string, loaded> modules;
    module_cache_stats stats;

    state() = default;
    state(const state&) = delete;
    state& operator=(const state&) = delete;
    ~state() {
      if (api == nullptr || ctx == nullptr) return;
      // Errors here are not thrown (a destructor); the primary context is released last.
      (void)api->ctx_set_current(ctx);
      if (stream != nullptr) (void)api->stream_destroy(stream);
      for (auto& [key, l] : modules) (void)api->module_unload(l.module);
      (void)api->primary_ctx_release(device);
    }
  };

  explicit context(context_options options) : state_(std::make_unique<state>()) {
    state& s = *state_;
    s.api = &driver();
    const driver_api& d = *s.api;
    s.options = std::move(options);
    check(d, d.device_get(&s.device, s.options.device), "cuDeviceGet");
    device_info& i = s.info;
    i.ordinal = s.options.device;
    char name[256] = {};
    check(d, d.device_get_name(name, static_cast<int>(sizeof name) - 1, s.device), "cuDeviceGetName");
    i.name = name;
    const auto attribute = [&](int a, const char* what) {
      int v = 0;
      check(d, d.device_get_attribute(&v, a, s.device), std::string("cuDeviceGetAttribute(") + what + ")");
      return v;
    };
    i.major = attribute(driver_constants::attribute_compute_capability_major, "compute capability major");
    i.minor = attribute(driver_constants::attribute_compute_capability_minor, "compute capability minor");
    i.multiprocessors = attribute(driver_constants::attribute_multiprocessor_count, "multiprocessor count");
    i.l2_bytes = static_cast<std::size_t>(attribute(driver_constants::attribute_l2_cache_size, "L2 cache size"));
    i.memory_clock_khz = attribute(driver_constants::attribute_memory_clock_rate_khz, "memory clock rate");
    i.bus_width_bits = attribute(driver_constants::attribute_global_memory_bus_width_bits, "memory bus width");
    i.pageable_memory_access =
        attribute(driver_constants::attribute_pageable_memory_access, "pageable memory access") != 0;
    check(d, d.device_total_mem(&i.memory_bytes, s.device), "cuDeviceTotalMem_v2");
    check(d, d.driver_get_version(&i.driver_version), "cuDriverGetVersion");
    i.arch = detail::choose_arch(i.major, i.minor);
    check(d, d.primary_ctx_retain(&s.ctx, s.device), "cuDevicePrimaryCtxRetain");
    make_current();
    check(d, d.stream_create(&s.stream, driver_constants::stream_non_blocking), "cuStreamCreate");
    if (s.options.cache_dir.empty()) {
      if (const char* env = std::getenv("ACTSPARSE_CUDA_CACHE_DIR"); env != nullptr) s.options.cache_dir = env;
    }
  }

  // PTX of `source` for the device's arch: from the disk cache, or compiled (and stored there).
  std::string ptx_for(const std::string& source) {
    state& s = *state_;
    namespace fs = std::filesystem;
    fs::path file;
    if (!s.options.cache_dir.empty()) {
      file = fs::path(s.options.cache_dir) /
             ("actsparse-" + detail::hex(fnv1a(source + '\0' + s.info.arch)) + "-" + s.info.arch + ".ptx");
      std::ifstream in(file, std::ios::binary);
      if (in) {
        std::string ptx((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        if (!ptx.empty()) {
          ++s.stats.disk_hits;
          return ptx;
        }
      }
    }
    std::string ptx = s.options.compile ? s.options.compile(source, s.info.arch) : compile_to_ptx(source, s.info.arch);
    ++s.stats.compiles;
    if (!file.empty()) {  // best effort: a cache that cannot be written only costs a compile
      std::error_code ec;
      fs::create_directories(file.parent_path(), ec);
      const fs::path tmp = file.string() + ".tmp" + std::to_string(reinterpret_cast<std::uintptr_t>(this));
      {
        std::ofstream out(tmp, std::ios::binary);
        out << ptx;
      }
      fs::rename(tmp, file, ec);
      if (ec) fs::remove(tmp, ec);
    }
    return ptx;
  }

  // cuModuleLoadData; on CUDA_ERROR_UNSUPPORTED_PTX_VERSION (NVRTC newer than the driver)
  // again with older PTX ISA versions: the generated kernels use no recent PTX feature.
  CUmodule load(const std::string& ptx) {
    const driver_api& d = api();
    CUmodule m = nullptr;
    CUresult rc = d.module_load_data(&m, ptx.c_str());
    for (const char* v : {"8.5", "8.4", "8.3", "8.2", "8.1", "8.0", "7.8", "7.7"}) {
      if (rc != driver_constants::error_unsupported_ptx_version) break;
      const std::string older = detail::with_ptx_version(ptx, v);
      rc = d.module_load_data(&m, older.c_str());
    }
    check(d, rc, "cuModuleLoadData");
    return m;
  }

  static std::uint64_t fnv1a(std::string_view text) noexcept { return ::actsparse::cuda::detail::fnv1a(text); }

  std::unique_ptr<state> state_;
};

enum class memory_kind : std::uint8_t {
  device,  // cuMemAlloc: only kernels read it
  managed  // cuMemAllocManaged: kernels and the host (after the stream is synchronized)
};

// Device or managed memory of one context, freed with it; movable, not copyable.
class buffer {
 public:
  buffer() = default;
  buffer(const context& ctx, std::size_t bytes, memory_kind kind = memory_kind::managed)
      : api_(&ctx.api()), bytes_(bytes), kind_(kind) {
    if (bytes == 0) return;
    ctx.make_current();
    if (kind == memory_kind::managed) {
      check(*api_, api_->mem_alloc_managed(&ptr_, bytes, driver_constants::mem_attach_global), "cuMemAllocManaged");
    } else {
      check(*api_, api_->mem_alloc(&ptr_, bytes), "cuMemAlloc_v2");
    }
  }
  buffer(buffer&& o) noexcept
      : api_(std::exchange(o.api_, nullptr)),
        ptr_(std::exchange(o.ptr_, 0)),
        bytes_(std::exchange(o.bytes_, 0)),
        kind_(o.kind_) {}
  buffer& operator=(buffer&& o) noexcept {
    if (this != &o) {
      release();
      api_ = std::exchange(o.api_, nullptr);
      ptr_ = std::exchange(o.ptr_, 0);
      bytes_ = std::exchange(o.bytes_, 0);
      kind_ = o.kind_;
    }
    return *this;
  }
  buffer(const buffer&) = delete;
  buffer& operator=(const buffer&) = delete;
  ~buffer() { release(); }

  // Managed memory that the host and the device both read and rarely write (index lists:
  // the argument checks read them on the host, the kernels on the device): each side keeps a
  // read-only copy instead of migrating the pages back and forth (CU_MEM_ADVISE_SET_READ_MOSTLY).
  void advise_read_mostly(const context& ctx) const {
    if (ptr_ == 0 || kind_ != memory_kind::managed) return;
    CUdevice device = 0;
    check(*api_, api_->device_get(&device, ctx.info().ordinal), "cuDeviceGet");
    check(*api_, api_->mem_advise(ptr_, bytes_, driver_constants::mem_advise_set_read_mostly, device), "cuMemAdvise");
  }

  [[nodiscard]] void* data() const noexcept { return reinterpret_cast<void*>(ptr_); }  // NOLINT
  [[nodiscard]] std::size_t size() const noexcept { return bytes_; }
  [[nodiscard]] memory_kind kind() const noexcept { return kind_; }
  [[nodiscard]] std::span<std::byte> bytes() const noexcept { return {static_cast<std::byte*>(data()), bytes_}; }
  template <class T>
  [[nodiscard]] std::span<T> as() const noexcept {
    return {static_cast<T*>(data()), bytes_ / sizeof(T)};
  }

 private:
  void release() noexcept {
    if (api_ != nullptr && ptr_ != 0) (void)api_->mem_free(ptr_);
    ptr_ = 0;
  }
  const driver_api* api_ = nullptr;
  CUdeviceptr ptr_ = 0;
  std::size_t bytes_ = 0;
  memory_kind kind_ = memory_kind::managed;
};

// A pair of events timing work on the context's stream (benchmarks): start(), stop(), then
// milliseconds() waits for the stop event.
class event_timer {
 public:
  explicit event_timer(const context& ctx) : ctx_(&ctx) {
    check(ctx.api(), ctx.api().event_create(&start_, driver_constants::event_default), "cuEventCreate");
    check(ctx.api(), ctx.api().event_create(&stop_, driver_constants::event_default), "cuEventCreate");
  }
  event_timer(const event_timer&) = delete;
  event_timer& operator=(const event_timer&) = delete;
  ~event_timer() {
    (void)ctx_->api().event_destroy(start_);
    (void)ctx_->api().event_destroy(stop_);
  }
  void start() const { check(ctx_->api(), ctx_->api().event_record(start_, ctx_->stream()), "cuEventRecord"); }
  void stop() const { check(ctx_->api(), ctx_->api().event_record(stop_, ctx_->stream()), "cuEventRecord"); }
  [[nodiscard]] float milliseconds() const {
    check(ctx_->api(), ctx_->api().event_synchronize(stop_), "cuEventSynchronize");
    float ms = 0.0F;
    check(ctx_->api(), ctx_->api().event_elapsed_time(&ms, start_, stop_), "cuEventElapsedTime");
    return ms;
  }

 private:
  const context* ctx_;
  CUevent start_ = nullptr;
  CUevent stop_ = nullptr;
};

}  // namespace actsparse::cuda
