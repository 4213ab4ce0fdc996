#pragma once
// The f32 value of every f16 bit pattern, shared by the CPU backend's block kernels of every
// target (a target-independent table, built once).

#include <actsparse/core/dtype.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace actsparse::cpu {

// f32 value of every f16 bit pattern (256 KiB), built on first use (thread-safe). The block
// kernels read a block's scale from it as a memory operand: cheaper, measured, than a
// broadcast and a vector f16 conversion per block (F16C's vcvtph2ps occupies a vector port
// that the dequantization needs), and the same bits (the conversion is exact).
inline const float* f16_to_f32_table() {
  static const std::vector<float> table = [] {
    std::vector<float> t(std::size_t{1} << 16);
    for (std::size_t i = 0; i < t.size(); ++i) t[i] = to_f32(f16{static_cast<std::uint16_t>(i)});
    return t;
  }();
  return table.data();
}

}  // namespace actsparse::cpu
