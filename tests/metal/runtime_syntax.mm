// Parsed (clang -fsyntax-only -x objective-c++ -fobjc-arc -D__APPLE__) against
// stub_objc/Metal/Metal.h: the Metal wrapper's code is valid Objective-C++ and a gemv
// dispatch through it type-checks. Not built against Apple's SDK, not run.
#include <actsparse/backends/metal/runtime.hpp>

#include <cstdint>

void encode_gemv(id<MTLDevice> device, id<MTLComputeCommandEncoder> encoder, id<MTLBuffer> w, id<MTLBuffer> x,
                 id<MTLBuffer> y) {
  namespace metal = actsparse::metal;
  using metal::argument;
  const actsparse::gpu::kernel_config c{actsparse::gpu::kernel_op::gemv, actsparse::dtype::q4_0};
  metal::runtime rt(device);
  rt.prepare(c);
  const std::uint32_t rows = 10;
  const std::uint32_t cols = 128;
  rt.encode(encoder, metal::kernel_names(c)[0],
            {argument::of(w), argument::value(std::uint64_t{18 * cols / 32}), argument::of(x), argument::value(rows),
             argument::value(cols), argument::of(y)},
            metal::threadgroups(c, rows), c.threads_per_block);
}
