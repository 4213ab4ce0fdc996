#pragma once
// CUDA kernel generator: a gpu::kernel_config in, CUDA C++ source text out, for run-time
// compilation with NVRTC (nvrtc.hpp). The kernels, their arguments, grids and guarantees are
// the shared description's (backends/gpu/generator.hpp); this file writes only CUDA's prelude
// (the neutral dialect's macros and primitives in CUDA C++) and CUDA signatures
// (GPU_KERNEL = extern "C" __global__, __launch_bounds__, __restrict__ pointers, the thread
// positions from threadIdx / blockIdx). The same config always gives the same text.

#include <actsparse/backends/gpu/generator.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace actsparse::cuda {

// CUDA generates every op of the description, and sums cumulative_mass in double.
inline constexpr gpu::dialect dialect{"cuda::generate_cuda", "CUDA", "warp", "block", gpu::all_ops, gpu::mass_sum::f64};

// The neutral dialect in CUDA C++ (backends/gpu/kernel_source.hpp), for NVRTC: C linkage for
// the kernels, unrolling hints, and f16 -> f32 by one PTX cvt (no cuda_fp16.h).
inline constexpr std::string_view prelude = R"(#define GPU_KERNEL extern "C" __global__
#define GPU_FN __device__ __forceinline__
#define GPU_GLOBAL
#define GPU_THREAD
#define GPU_SHARED __shared__
#define GPU_CONSTANT constexpr
#define GPU_U64 unsigned long long
#define GPU_BARRIER() __syncthreads()
#define GPU_SHFL_XOR(v, m) __shfl_xor_sync(0xffffffffu, (v), (m))
#define GPU_BALLOT(p) __ballot_sync(0xffffffffu, (p))
#define GPU_POPC(v) ((unsigned int)__popc(v))
#define GPU_FMA(a, b, c) fmaf((a), (b), (c))
#define GPU_FABS(v) fabsf(v)
#define GPU_EXP(v) expf(v)
#define GPU_TANH(v) tanhf(v)
#define GPU_PRAGMA(x) _Pragma(#x)
#define GPU_UNROLL GPU_PRAGMA(unroll)
#define GPU_UNROLL_N(n) GPU_PRAGMA(unroll n)
#define GPU_GROUP_2D(width, col, row) const unsigned int col = blockIdx.x, row = blockIdx.y
GPU_FN unsigned short actsparse_load_u16(const unsigned char* p) { return *(const unsigned short*)p; }
GPU_FN float actsparse_load_f32(const unsigned char* p) { return *(const float*)p; }
GPU_FN float actsparse_half_to_float(unsigned short h) {
  float f;
  asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
  return f;
}
GPU_FN float actsparse_bits_to_float(unsigned int b) { return __uint_as_float(b); }
GPU_FN unsigned int actsparse_float_to_bits(float f) { return __float_as_uint(f); }
)";

// The CUDA type of a kernel argument.
[[nodiscard]] constexpr std::string_view param_type(gpu::param_kind k) noexcept {
  switch (k) {
    case gpu::param_kind::bytes:
      return "const unsigned char* __restrict__";
    case gpu::param_kind::in_f32:
      return "const float* __restrict__";
    case gpu::param_kind::out_f32:
      return "float* __restrict__";
    case gpu::param_kind::in_u32:
      return "const unsigned int* __restrict__";
    case gpu::param_kind::out_u32:
      return "unsigned int* __restrict__";
    case gpu::param_kind::u32:
      return "unsigned int";
    case gpu::param_kind::u64:
      return "unsigned long long";
    case gpu::param_kind::f32:
      return "float";
  }
  return "?";
}

namespace detail {

// "GPU_KERNEL void __launch_bounds__(T) name(args) {" and the thread positions the body reads.
[[nodiscard]] inline std::string signature(const gpu::kernel_body& k, unsigned threads) {
  std::string s = "GPU_KERNEL void __launch_bounds__(" + std::to_string(threads) + ") " + k.name + "(\n    ";
  std::size_t line = 4;
  for (std::size_t i = 0; i < k.params.size(); ++i) {
    std::string p = std::string(param_type(k.params[i].kind)) + " " + std::string(k.params[i].name);
    if (i + 1 < k.params.size()) p += ",";
    if (line + p.size() > 116 && line > 4) {
      s += "\n    ";
      line = 4;
    } else if (i > 0) {
      s += " ";
      ++line;
    }
    s += p;
    line += p.size();
  }
  s += ") {\n";
  namespace pos = gpu::position;
  if ((k.positions & pos::gid) != 0)
    s += "  const unsigned int gid = blockIdx.x * " + std::to_string(threads) + "u + threadIdx.x;\n";
  if ((k.positions & pos::tid) != 0) s += "  const unsigned int tid = threadIdx.x;\n";
  if ((k.positions & pos::group) != 0) s += "  const unsigned int group = blockIdx.x;\n";
  if ((k.positions & pos::groups) != 0) s += "  const unsigned int groups = gridDim.x;\n";
  if ((k.positions & pos::lane) != 0) s += "  const unsigned int lane = threadIdx.x & 31u;\n";
  if ((k.positions & pos::warp) != 0) s += "  const unsigned int warp = threadIdx.x >> 5;\n";
  return s;
}

}  // namespace detail

// The names of the extern "C" kernels generate_cuda(c) defines, in launch order.
[[nodiscard]] inline std::vector<std::string> kernel_names(const gpu::kernel_config& c) {
  return gpu::kernel_names(c, dialect);
}
// Rows that one block covers (gpu::rows_per_block).
[[nodiscard]] inline unsigned rows_per_block(const gpu::kernel_config& c) { return gpu::rows_per_block(c, dialect); }
// Blocks to launch kernel_names(c)[kernel] on (gpu::grid_blocks).
[[nodiscard]] inline std::size_t grid_blocks(const gpu::kernel_config& c, std::size_t n, std::size_t kernel = 0) {
  return gpu::grid_blocks(c, n, kernel, dialect);
}

// The kernels of c without the prelude: for a program that defines the prelude's macros and
// primitives itself (the CPU emulation of the tests does: C++ linkage, host primitives).
[[nodiscard]] inline std::string kernel_source(const gpu::kernel_config& c) {
  const gpu::kernel_set set = gpu::describe(c, dialect);
  std::string s = set.functions;
  for (const gpu::kernel_body& k : set.kernels) s += detail::signature(k, c.threads_per_block) + k.body + "}\n";
  return s;
}

// The whole source NVRTC compiles: a line naming the config, the prelude, the kernels.
[[nodiscard]] inline std::string generate_cuda(const gpu::kernel_config& c) {
  std::string s = "// Generated by actsparse::cuda::generate_cuda: " + gpu::config_line(c, dialect) + "\n";
  s.append(prelude);
  s += kernel_source(c);
  return s;
}

}  // namespace actsparse::cuda
