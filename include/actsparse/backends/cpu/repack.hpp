#pragma once
// Load-time repacking for the CPU backend: Wt = Wᵀ in the same dtype, so that the
// input-sparse linear (TEAL) and the down projection of a sparse FFN read one contiguous
// row per kept input channel.

#include <actsparse/core/dtype.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/views.hpp>

#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

namespace actsparse::cpu {

// A weight matrix that owns its bytes (rows packed).
struct owned_weights {
  std::vector<std::byte> bytes;
  weight_view view;
};

// Wᵀ of an f32 / f16 / bf16 matrix, same dtype, packed rows. (The block types transpose
// block-wise; not built yet: a clear error.)
[[nodiscard]] inline owned_weights transpose(const weight_view& w) {
  constexpr std::string_view where = "cpu::transpose";
  validate(w, where, "w");
  if (block_values(w.type) != 1) {
    detail::fail_described(where, "w", std::string("a ") + std::string(name(w.type)) + " matrix",
                           "f32, f16 or bf16 weights (q8_0 / q4_0 transposition is not built yet)");
  }
  const std::size_t e = block_bytes(w.type);
  owned_weights t;
  t.bytes.resize(w.rows * w.cols * e);
  t.view = weight_view(t.bytes.data(), w.type, w.cols, w.rows, w.rows * e);
  const auto* src = static_cast<const std::byte*>(w.data);
  for (std::size_t i = 0; i < w.rows; ++i) {
    for (std::size_t j = 0; j < w.cols; ++j)
      std::memcpy(t.bytes.data() + (j * w.rows + i) * e, src + i * w.row_stride + j * e, e);
  }
  return t;
}

}  // namespace actsparse::cpu
