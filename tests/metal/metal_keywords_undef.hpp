// Undoes metal_keywords.hpp and the macros the generated source defines (its prelude).
#undef kernel
#undef device
#undef constant
#undef thread
#undef threadgroup
#undef buffer
#undef thread_position_in_grid
#undef thread_index_in_threadgroup
#undef threadgroup_position_in_grid
#undef threadgroups_per_grid
#undef thread_index_in_simdgroup
#undef simdgroup_index_in_threadgroup
#undef ACTSPARSE_CUDA_FN
#undef expf
#undef tanhf
#undef fmaf
