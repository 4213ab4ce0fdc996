// The syntax check must reject this: a device pointer passed to a parameter without the
// device address space (an error in MSL, and with stub/metal_stdlib's address spaces).
#include <metal_stdlib>
using namespace metal;
inline float first(const float* p) { return p[0]; }
kernel void copy_first(device const float* x [[buffer(0)]], device float* y [[buffer(1)]]) { y[0] = first(x); }
