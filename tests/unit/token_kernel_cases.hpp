#pragma once
// The token gather / scatter-add check shared by the CUDA and Metal emulation tests: tokens
// 1, 4 and 9 of 10 rows of `src` (row stride `stride`, d values used) are gathered into 3
// rows of stride 80, then added back into a copy of src. `gather(src, tokens, dst)` and
// `scatter_add(dst, tokens, x)` launch the emulated kernels with (stride, 3, d, 80).

#include <doctest/doctest.h>

#include <vector>

namespace actsparse_test {

inline constexpr unsigned token_dst_stride = 80;

template <class Index, class Gather, class ScatterAdd>
void check_token_gather_scatter(const std::vector<float>& src, unsigned stride, unsigned d, Gather&& gather,
                                ScatterAdd&& scatter_add) {
  REQUIRE(src.size() == 10 * stride);
  REQUIRE(d <= stride);
  REQUIRE(d <= token_dst_stride);
  const std::vector<Index> tokens = {1, 4, 9};
  std::vector<float> dst(3 * token_dst_stride, -1.0F);
  gather(src.data(), tokens.data(), dst.data());
  for (unsigned k = 0; k < 3; ++k) {
    for (unsigned i = 0; i < d; ++i) CHECK(dst[k * token_dst_stride + i] == src[tokens[k] * stride + i]);
    for (unsigned i = d; i < token_dst_stride; ++i) CHECK(dst[k * token_dst_stride + i] == -1.0F);
  }
  std::vector<float> x = src;
  scatter_add(dst.data(), tokens.data(), x.data());
  for (unsigned t = 0; t < 10; ++t) {
    const bool kept = t == 1 || t == 4 || t == 9;
    for (unsigned i = 0; i < stride; ++i) {
      const float expected = kept && i < d ? src[t * stride + i] + src[t * stride + i] : src[t * stride + i];
      CHECK(x[t * stride + i] == expected);
    }
  }
}

}  // namespace actsparse_test
