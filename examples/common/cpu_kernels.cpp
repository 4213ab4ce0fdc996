// The one translation unit of the model demo and the calibration tool that defines the CPU
// backend's kernels (every Highway target): compiled once and linked into both programs.
#define ACTSPARSE_CPU_IMPLEMENTATION
#include <actsparse/backends/cpu/implementation.hpp>
