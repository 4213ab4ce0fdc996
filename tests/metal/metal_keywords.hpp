// MSL's keywords and attributes as C++, for generated kernels compiled into the emulation
// test (metal_emulation.hpp). Included right before the generated kernels and undone by
// metal_keywords_undef.hpp right after, so nothing else sees these macros. Address spaces
// become nothing (`constant` becomes const: MSL's constant memory is read-only);
// `threadgroup` variables become function statics, shared by the threads of the group that
// runs (the emulation runs one group at a time); the attributes become the empty `[[]]`.
// No include guard: it is meant to be included once per block of generated code.

#define kernel
#define device
#define constant const
#define thread
#define threadgroup static
#define buffer(n)
#define thread_position_in_grid
#define thread_index_in_threadgroup
#define threadgroup_position_in_grid
#define threadgroups_per_grid
#define thread_index_in_simdgroup
#define simdgroup_index_in_threadgroup
