#pragma once
// Host side of the Metal backend, in Objective-C++: compiles generate_metal's source with
// newLibraryWithSource (fast math off: it could reassociate the kernels' sums), keeps one
// compute pipeline per kernel name, and encodes a dispatch with its buffers and scalars.
// Include it from an Objective-C++ file (.mm) built with ARC (-fobjc-arc); elsewhere
// (Linux, plain C++ on Apple) it declares nothing.
//
// NOT BUILT OR RUN BY THIS PROJECT'S TESTS: they run on Linux, where neither Metal nor an
// Objective-C++ Metal SDK exists. What was checked instead is the generated source (clang
// syntax check with a stub <metal_stdlib>, and every kernel run on the CPU under an
// emulation; docs/METAL.md). So this wrapper is kept to the few Metal calls it needs.
//
// Usage: runtime rt(MTLCreateSystemDefaultDevice()); rt.prepare(config); then for each name of
// kernel_names(config), in order, on one serial compute encoder:
//   rt.encode(encoder, name, {argument::of(w), argument::value(row_stride), ...},
//             threadgroups(config, n), config.threads_per_block);
// Arguments in the order of the kernel's signature (generator.hpp); a value() argument is
// copied by setBytes during encode(), so a temporary of the right type is fine
// (row_stride and the other strides are std::uint64_t; counts std::uint32_t; threshold float).

#include <actsparse/backends/metal/generator.hpp>

#if defined(__APPLE__) && defined(__OBJC__)

#import <Metal/Metal.h>

#if !__has_feature(objc_arc)
#error "actsparse/backends/metal/runtime.hpp needs ARC (-fobjc-arc): it keeps Metal objects in C++ members"
#endif

#include <actsparse/core/error.hpp>

#include <cstddef>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace actsparse::metal {

// One kernel argument: a buffer (at a byte offset) or a small value set with setBytes.
struct argument {
  id<MTLBuffer> buffer = nil;
  NSUInteger offset = 0;
  const void* bytes = nullptr;
  std::size_t size = 0;

  static argument of(id<MTLBuffer> b, NSUInteger offset = 0) { return {b, offset, nullptr, 0}; }
  template <class T>
  static argument value(const T& v) {
    return {nil, 0, &v, sizeof(T)};
  }
};

class runtime {
 public:
  explicit runtime(id<MTLDevice> device) : device_(device) {}

  // Compiles generate_metal(c) and makes a pipeline for each of its kernels not made yet.
  void prepare(const gpu::kernel_config& c) {
    const std::vector<std::string> names = metal::kernel_names(c);  // validates c
    bool all_made = true;
    for (const auto& n : names) all_made = all_made && pipelines_.count(n) != 0;
    if (all_made) return;

    MTLCompileOptions* options = [MTLCompileOptions new];
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
    options.fastMathEnabled = NO;  // deprecated in macOS 15 / iOS 18 for mathMode; still honoured
#pragma clang diagnostic pop
    NSError* error = nil;
    const std::string source = generate_metal(c);
    id<MTLLibrary> library =
        [device_ newLibraryWithSource:[NSString stringWithUTF8String:source.c_str()] options:options error:&error];
    if (library == nil) fail("source", error, "Metal source that compiles (a generator bug: please report it)");
    for (const auto& n : names) {
      if (pipelines_.count(n) != 0) continue;
      id<MTLFunction> function = [library newFunctionWithName:[NSString stringWithUTF8String:n.c_str()]];
      if (function == nil) fail("kernel", nil, "a kernel the generated library defines");
      id<MTLComputePipelineState> pipeline = [device_ newComputePipelineStateWithFunction:function error:&error];
      if (pipeline == nil) fail("pipeline", error, "a pipeline state for the kernel");
      // The kernels' reductions and ballots assume 32-wide simdgroups (every Apple GPU).
      if (pipeline.threadExecutionWidth != simd_width)
        fail("device", nil, "a GPU with 32-wide simdgroups (threadExecutionWidth 32, as every Apple GPU)");
      if (pipeline.maxTotalThreadsPerThreadgroup < c.threads_per_block)
        fail("threads_per_block", nil, "at most the pipeline's maxTotalThreadsPerThreadgroup");
      pipelines_[n] = pipeline;
    }
  }

  [[nodiscard]] id<MTLComputePipelineState> pipeline(const std::string& name) const {
    const auto it = pipelines_.find(name);
    if (it == pipelines_.end()) fail("name", nil, "the name of a kernel that prepare() has made");
    return it->second;
  }

  // Encodes kernel `name` on `groups` threadgroups of `threads` threads (nothing when groups is 0).
  void encode(id<MTLComputeCommandEncoder> encoder, const std::string& name, std::initializer_list<argument> args,
              std::size_t groups, unsigned threads) const {
    id<MTLComputePipelineState> p = pipeline(name);
    if (groups == 0) return;
    [encoder setComputePipelineState:p];
    NSUInteger index = 0;
    for (const argument& a : args) {
      if (a.buffer != nil) {
        [encoder setBuffer:a.buffer offset:a.offset atIndex:index];
      } else {
        [encoder setBytes:a.bytes length:a.size atIndex:index];
      }
      ++index;
    }
    [encoder dispatchThreadgroups:MTLSizeMake(groups, 1, 1) threadsPerThreadgroup:MTLSizeMake(threads, 1, 1)];
  }

 private:
  [[noreturn]] static void fail(std::string_view argument, NSError* error, std::string_view expected) {
    std::string what = error != nil ? std::string([[error localizedDescription] UTF8String]) : std::string("refused");
    actsparse::detail::fail_described("metal::runtime", argument, std::move(what), expected);
  }

  id<MTLDevice> device_;
  std::map<std::string, id<MTLComputePipelineState>> pipelines_;
};

}  // namespace actsparse::metal

#endif  // __APPLE__ && __OBJC__
