// The one translation unit of the test program that defines the CPU backend's kernels.
#define ACTSPARSE_CPU_IMPLEMENTATION
#include <actsparse/backends/cpu/implementation.hpp>
