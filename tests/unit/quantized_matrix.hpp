#pragma once
// A random rows x cols weight matrix stored as a dtype (row stride = one row's bytes), with
// the values as a kernel sees them (dequantized), for the CUDA and Metal emulation tests.

#include <actsparse/core/dtype.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/core/views.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

namespace actsparse_test {

struct quantized_matrix {
  std::vector<unsigned char> bytes;  // at least one byte, so data() is never null
  std::size_t stride = 0;
  std::vector<float> values;  // rows x cols, as the kernels see them
  actsparse::weight_view view;
};

// Values from N(0, 1), quantized row by row with core's quantize_row.
inline quantized_matrix make_quantized_matrix(actsparse::dtype t, std::size_t rows, std::size_t cols,
                                              std::mt19937& rng) {
  std::normal_distribution<float> dist(0.0F, 1.0F);
  quantized_matrix m;
  m.stride = actsparse::row_bytes(t, cols);
  m.bytes.resize(std::max<std::size_t>(rows * m.stride, 1));
  m.values.resize(rows * cols);
  std::vector<float> row(cols);
  for (std::size_t r = 0; r < rows; ++r) {
    for (auto& v : row) v = dist(rng);
    actsparse::visit_dtype(t, [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::vector<T> stored(cols / actsparse::dtype_traits<T>::block_values);
      actsparse::quantize_row(row.data(), stored.data(), cols);
      std::memcpy(m.bytes.data() + r * m.stride, stored.data(), m.stride);
      actsparse::dequantize_row(stored.data(), m.values.data() + r * cols, cols);
    });
  }
  m.view = actsparse::weight_view(m.bytes.data(), t, rows, cols, m.stride);
  return m;
}

}  // namespace actsparse_test
