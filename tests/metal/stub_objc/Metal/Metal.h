// A stand-in for the part of Apple's <Metal/Metal.h> (and Foundation) that
// include/actsparse/backends/metal/runtime.hpp uses, written from Apple's documentation, so
// that clang can parse the wrapper as Objective-C++ on Linux (runtime_syntax.mm). It checks
// the wrapper's C++ and Objective-C syntax and its calls against these declarations; it is
// not Apple's header, and nothing here is compiled against the real SDK or run.
#pragma once
#define nil nullptr
typedef unsigned long NSUInteger;
typedef signed char BOOL;
#define YES ((BOOL)1)
#define NO ((BOOL)0)
@interface NSObject
+ (instancetype)new;
@end
@interface NSString : NSObject
+ (instancetype)stringWithUTF8String:(const char*)s;
@property(readonly) const char* UTF8String;
@end
@interface NSError : NSObject
@property(readonly, copy) NSString* localizedDescription;
@end
typedef struct {
  NSUInteger width, height, depth;
} MTLSize;
static inline MTLSize MTLSizeMake(NSUInteger w, NSUInteger h, NSUInteger d) {
  MTLSize s = {w, h, d};
  return s;
}
@interface MTLCompileOptions : NSObject
@property BOOL fastMathEnabled __attribute__((deprecated));
@end
@protocol MTLFunction
@end
@protocol MTLBuffer
@end
@protocol MTLComputePipelineState
@property(readonly) NSUInteger threadExecutionWidth;
@property(readonly) NSUInteger maxTotalThreadsPerThreadgroup;
@end
@protocol MTLLibrary
- (id<MTLFunction>)newFunctionWithName:(NSString*)name;
@end
@protocol MTLDevice
- (id<MTLLibrary>)newLibraryWithSource:(NSString*)source options:(MTLCompileOptions*)options error:(NSError**)error;
- (id<MTLComputePipelineState>)newComputePipelineStateWithFunction:(id<MTLFunction>)f error:(NSError**)error;
@end
@protocol MTLComputeCommandEncoder
- (void)setComputePipelineState:(id<MTLComputePipelineState>)state;
- (void)setBuffer:(id<MTLBuffer>)buffer offset:(NSUInteger)offset atIndex:(NSUInteger)index;
- (void)setBytes:(const void*)bytes length:(NSUInteger)length atIndex:(NSUInteger)index;
- (void)dispatchThreadgroups:(MTLSize)groups threadsPerThreadgroup:(MTLSize)threads;
@end
