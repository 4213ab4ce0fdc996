#pragma once
// A fake CUDA driver for the backend tests without a GPU (fake_driver.cpp): "device memory" is
// host memory (filled with 0xFF bytes, NaN as floats, so a kernel that reads what nothing
// wrote shows it), cuModuleLoadData keeps the image, cuModuleGetFunction finds the kernel by
// name among the generated kernels compiled as C++ (emit_backend_kernels.cpp) and checks the
// image defines it, and cuLaunchKernel runs it under the SIMT emulation (simt_emulation.hpp)
// with the parameters unpacked by the kernel's own types. Install it with
// cuda::scoped_driver guard(fake_driver()).

#include <actsparse/backends/cuda/driver.hpp>

#include <cstddef>
#include <map>
#include <string>

namespace actsparse_cuda_test {

struct fake_driver_stats {
  std::size_t launches = 0;
  std::size_t live_allocations = 0;
  std::size_t modules_loaded = 0;
  std::size_t modules_live = 0;
  std::map<std::string, std::size_t> launches_by_kernel;
};

[[nodiscard]] const actsparse::cuda::driver_api& fake_driver();
[[nodiscard]] fake_driver_stats& fake_stats();

// The devices cuDeviceGetCount reports (1 by default).
void fake_set_device_count(int n);
// The next call of the driver function `symbol` (e.g. "cuMemAlloc_v2") returns rc instead.
void fake_fail_next(const std::string& symbol, actsparse::cuda::CUresult rc);
// Whether a kernel of that name is in the emulation table.
[[nodiscard]] bool fake_has_kernel(const std::string& name);

}  // namespace actsparse_cuda_test
