// The one translation unit of the project's own programs that defines the CPU backend's
// kernels (every Highway target): compiled once (the top-level CMakeLists.txt's
// actsparse_cpu_kernels) and linked into the test program, the model demo, the calibration tool
// and the benchmarks. An engine does the same in one .cpp of its own (examples/ffn_layer.cpp).
#define ACTSPARSE_CPU_IMPLEMENTATION
#include <actsparse/backends/cpu/implementation.hpp>
