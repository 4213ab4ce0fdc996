// The syntax check must reject this: a function the stub does not declare (the stub declares
// only what the generated kernels use, so a new call must be added to it on purpose).
#include <metal_stdlib>
using namespace metal;
kernel void sum(device float* y [[buffer(0)]], uint lane [[thread_index_in_simdgroup]]) {
  y[lane] = simd_sum(y[lane]);
}
