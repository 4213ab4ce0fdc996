#pragma once
// Metal kernel generator: a gpu::kernel_config in, Metal Shading Language source out, for
// run-time compilation with newLibraryWithSource (runtime.hpp). The kernels are the shared
// description's (backends/gpu/generator.hpp), the same bodies the CUDA generator emits: the
// same names, the same arguments in the same order (argument i is [[buffer(i)]]; scalars are
// `constant T&`, set with setBytes), the same launch shapes (a CUDA block is a threadgroup, a
// warp a simdgroup; row_axpy_split's partial grid (x, splits) dispatched flattened, x · splits
// threadgroups) and the same order of every floating-point operation. This file writes only
// MSL's prelude (the neutral dialect's macros and primitives) and MSL signatures (thread
// positions as [[attribute]] arguments). One difference the dialect makes: MSL has no double,
// so cumulative_mass sums in float pairs (hi + lo, exact two-sums) where CUDA sums in double,
// in the same order (docs/POLICIES.md, "Device selection", says where the kept sets can
// differ). The same config always gives the same text.
//
// Ops: gemv, gather_gemv, row_axpy, gate_select, token_gather, token_scatter_add, top_k,
// row_axpy_split and cumulative_mass. The fused gated_gather, gated_hidden, gather_values and
// batched_gemv are CUDA only (their bodies are neutral too, but no Metal test runs them yet):
// they are rejected with an error that names the op.
//
// Assumptions, checked by the host wrapper where it can:
// - The simdgroup is 32 threads wide (every Apple GPU; the reductions are xor butterflies
//   over 5 steps and ballots are read as 32 bits). runtime.hpp refuses a pipeline whose
//   threadExecutionWidth is not 32 (some AMD and Intel Macs).
// - A GPU family and MSL version with SIMD-group functions (simd_shuffle_xor, simd_ballot;
//   Apple's feature tables give the minimum, not verified here). No simd_sum: its order of
//   additions is unspecified, the butterfly's is fixed. bf16 is decoded from its ushort
//   bits, so no `bfloat` (MSL 3.1) is needed.
// - Compiled without fast math (runtime.hpp turns it off): fast math may reassociate the sums
//   and would change the bits. exp and tanh are metal::precise's, which are not bit-exact
//   with the host libm; every other operation is a single IEEE rounding as on the CPU.
// - The kernels of one op run in order on one serial compute encoder (the default), so the
//   compaction kernel sees all of the gate kernel's block counts and the reduction all of
//   the partial sums.
// - cumulative_mass needs IEEE float addition without flush-to-zero of subnormal results for
//   its two-sums to be exact near 0 (not verified on Apple GPUs); row_axpy and row_axpy_split
//   read a nil idx buffer as a null pointer (idx[k] = k, as CUDA's nullptr; not verified
//   either: bind an index list to be safe).

#include <actsparse/backends/gpu/generator.hpp>

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace actsparse::metal {

// The width the kernels are written for (Apple GPUs' simdgroups).
inline constexpr unsigned simd_width = 32;

namespace detail {
inline constexpr std::uint32_t metal_ops =
    gpu::op_bit(gpu::kernel_op::gemv) | gpu::op_bit(gpu::kernel_op::gather_gemv) |
    gpu::op_bit(gpu::kernel_op::row_axpy) | gpu::op_bit(gpu::kernel_op::gate_select) |
    gpu::op_bit(gpu::kernel_op::token_gather) | gpu::op_bit(gpu::kernel_op::token_scatter_add) |
    gpu::op_bit(gpu::kernel_op::top_k) | gpu::op_bit(gpu::kernel_op::row_axpy_split) |
    gpu::op_bit(gpu::kernel_op::cumulative_mass);
}  // namespace detail

// Metal generates the ops above and sums cumulative_mass in float pairs (MSL has no double).
inline constexpr gpu::dialect dialect{"metal::generate_metal", "Metal",           "simdgroup",
                                      "threadgroup",           detail::metal_ops, gpu::mass_sum::f32_pair};

// The neutral dialect in MSL (backends/gpu/kernel_source.hpp), after #include <metal_stdlib>.
// No unrolling hints (the kernels were checked without them); the 2-D grid of row_axpy_split
// is dispatched flattened (the host wrapper dispatches 1-D grids).
inline constexpr std::string_view prelude = R"(using namespace metal;
#define GPU_FN inline
#define GPU_GLOBAL device
#define GPU_THREAD thread
#define GPU_SHARED threadgroup
#define GPU_CONSTANT constant
#define GPU_U64 ulong
#define GPU_BARRIER() metal::threadgroup_barrier(metal::mem_flags::mem_threadgroup)
#define GPU_SHFL_XOR(v, m) metal::simd_shuffle_xor((v), (ushort)(m))
#define GPU_BALLOT(p) ((uint)(ulong)metal::simd_ballot(p))
#define GPU_POPC(v) metal::popcount(v)
#define GPU_FMA(a, b, c) metal::fma((a), (b), (c))
#define GPU_FABS(v) metal::fabs(v)
#define GPU_EXP(v) metal::precise::exp(v)
#define GPU_TANH(v) metal::precise::tanh(v)
#define GPU_UNROLL
#define GPU_UNROLL_N(n)
#define GPU_GROUP_2D(width, col, row) const uint row = group / (width), col = group - row * (width)
GPU_FN ushort actsparse_load_u16(device const unsigned char* p) { return *(device const ushort*)p; }
GPU_FN float actsparse_load_f32(device const unsigned char* p) { return *(device const float*)p; }
GPU_FN float actsparse_half_to_float(ushort h) { return (float)as_type<half>(h); }
GPU_FN float actsparse_bits_to_float(uint b) { return as_type<float>(b); }
GPU_FN uint actsparse_float_to_bits(float f) { return as_type<uint>(f); }
)";

// The MSL type of a kernel argument (before its name and [[buffer(i)]]).
[[nodiscard]] constexpr std::string_view param_type(gpu::param_kind k) noexcept {
  switch (k) {
    case gpu::param_kind::bytes:
      return "device const unsigned char*";
    case gpu::param_kind::in_f32:
      return "device const float*";
    case gpu::param_kind::out_f32:
      return "device float*";
    case gpu::param_kind::in_u32:
      return "device const uint*";
    case gpu::param_kind::out_u32:
      return "device uint*";
    case gpu::param_kind::u32:
      return "constant uint&";
    case gpu::param_kind::u64:
      return "constant ulong&";
    case gpu::param_kind::f32:
      return "constant float&";
  }
  return "?";
}

namespace detail {

// "kernel void name(args [[buffer(i)]], positions [[attribute]]) {".
[[nodiscard]] inline std::string signature(const gpu::kernel_body& k) {
  std::vector<std::string> args;
  for (std::size_t i = 0; i < k.params.size(); ++i) {
    args.push_back(std::string(param_type(k.params[i].kind)) + " " + std::string(k.params[i].name) + " [[buffer(" +
                   std::to_string(i) + ")]]");
  }
  namespace pos = gpu::position;
  if ((k.positions & pos::gid) != 0) args.emplace_back("uint gid [[thread_position_in_grid]]");
  if ((k.positions & pos::tid) != 0) args.emplace_back("uint tid [[thread_index_in_threadgroup]]");
  if ((k.positions & (pos::group | pos::grid_2d)) != 0)
    args.emplace_back("uint group [[threadgroup_position_in_grid]]");
  if ((k.positions & pos::groups) != 0) args.emplace_back("uint groups [[threadgroups_per_grid]]");
  if ((k.positions & pos::lane) != 0) args.emplace_back("uint lane [[thread_index_in_simdgroup]]");
  if ((k.positions & pos::warp) != 0) args.emplace_back("uint warp [[simdgroup_index_in_threadgroup]]");
  std::string s = "kernel void " + k.name + "(\n    ";
  std::size_t line = 4;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i] + (i + 1 < args.size() ? "," : "");
    if (line + a.size() > 116 && line > 4) {
      s += "\n    ";
      line = 4;
    } else if (i > 0) {
      s += " ";
      ++line;
    }
    s += a;
    line += a.size();
  }
  return s + ") {\n";
}

}  // namespace detail

// The names of the kernels generate_metal(c) defines, in dispatch order (the CUDA generator's
// names: one name per config on every backend).
[[nodiscard]] inline std::vector<std::string> kernel_names(const gpu::kernel_config& c) {
  return gpu::kernel_names(c, dialect);
}

// Rows of the matrix (gemv, gate_select) or of the index list (gather_gemv) that one
// threadgroup covers; for gate_select it is also the compaction kernel's rows_per_block.
[[nodiscard]] inline unsigned rows_per_threadgroup(const gpu::kernel_config& c) {
  return gpu::rows_per_block(c, dialect);
}

// Threadgroups to dispatch kernel_names(c)[kernel] (each of threads_per_block threads) for
// n = rows (gemv, gate_select), count (gather_gemv), tokens (the token ops) or cols (row_axpy,
// both kernels of row_axpy_split); 1 for top_k and cumulative_mass. row_axpy_split's partial
// kernel (kernel 0) is dispatched on threadgroups(c, cols, 0) · splits threadgroups (CUDA's
// grid x times grid y, flattened), splits = gpu::split_count(count, rows_per_split); when
// splits is 0 only the reduction runs.
[[nodiscard]] inline std::size_t threadgroups(const gpu::kernel_config& c, std::size_t n, std::size_t kernel = 0) {
  return gpu::grid_blocks(c, n, kernel, dialect);
}

// The kernels of c after the prelude: what generate_metal appends to #include <metal_stdlib>
// and the prelude (the CPU emulation of the tests compiles prelude + kernel_source as C++).
[[nodiscard]] inline std::string kernel_source(const gpu::kernel_config& c) {
  const gpu::kernel_set set = gpu::describe(c, dialect);
  std::string s = set.functions;
  for (const gpu::kernel_body& k : set.kernels) s += detail::signature(k) + k.body + "}\n";
  return s;
}

[[nodiscard]] inline std::string generate_metal(const gpu::kernel_config& c) {
  std::string s = "// Generated by actsparse::metal::generate_metal: " + gpu::config_line(c, dialect) + "\n";
  s += "#include <metal_stdlib>\n";
  s.append(prelude);
  s += kernel_source(c);
  return s;
}

}  // namespace actsparse::metal
