#pragma once
// The reference backend: scalar kernels and reference_backend, the oracle of every other backend.

#include <actsparse/backends/reference/backend.hpp>
#include <actsparse/backends/reference/kernels.hpp>
