// Per-target selection passes (core/selection_passes.hpp) that the CPU backend installs for
// the selectors: AVX-512 versions on AVX3 targets and better (x86/selection_avx512-inl.h);
// every other target installs none, so the selectors keep their portable passes there.
// Included by kernels-inl.h inside its toggle guard, so foreach_target.h compiles it per target.
// No #pragma once: the toggle guard below lets foreach_target.h re-include this file.

#if defined(ACTSPARSE_CPU_SELECTION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ACTSPARSE_CPU_SELECTION_INL_H_
#undef ACTSPARSE_CPU_SELECTION_INL_H_
#else
#define ACTSPARSE_CPU_SELECTION_INL_H_
#endif

#include <actsparse/core/mass_lanes.hpp>
#include <actsparse/core/selection_passes.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

#include <hwy/highway.h>

#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
#include <immintrin.h>

#include <actsparse/backends/cpu/x86/selection_avx512-inl.h>
#else
HWY_BEFORE_NAMESPACE();
namespace actsparse::cpu::HWY_NAMESPACE {
inline const selection_passes* selection_table() { return nullptr; }
}  // namespace actsparse::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();
#endif

#endif  // toggle guard
