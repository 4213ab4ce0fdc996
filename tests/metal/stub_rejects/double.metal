// The syntax check must reject this: MSL has no double (the CUDA kernels' double sums are
// float pairs in the Metal kernels), so the stub makes the keyword an unknown type.
#include <metal_stdlib>
using namespace metal;
kernel void sum(device float* y [[buffer(0)]], uint i [[thread_position_in_grid]]) {
  double acc = (double)y[i];
  y[i] = (float)(acc + acc);
}
