#pragma once
// Load-time transposition for the CPU backend: Wt = Wᵀ in the same dtype, so that the
// input-sparse linear (TEAL) and the down projection of a sparse FFN read one contiguous
// row per kept input channel (for q8_0 / q4_0 the transpose is requantized: lossy, see
// transpose). The interleaved layout of the dense integer GEMV is in layouts.hpp.

#include <actsparse/core/dtype.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/core/views.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace actsparse::cpu {

// A weight matrix that owns its bytes (rows packed).
struct owned_weights {
  std::vector<std::byte> bytes;
  weight_view view;
};

// Wᵀ of a q8_0 / q4_0 matrix W [rows × cols] (both multiples of 32) into `out` (packed rows of
// Wᵀ): W is dequantized (core's dequantize), transposed, and every row of Wᵀ (one column of W)
// is requantized with core's quantize_row (ggml's reference quantizer), 32 rows of Wᵀ at a time.
template <class B>
void transpose_requantized(const weight_view& w, std::byte* out) {
  constexpr std::size_t bv = dtype_traits<B>::block_values;
  const std::size_t out_bytes = row_bytes(w.type, w.rows);  // one row of Wᵀ
  const matrix_view<const B> src = w.as<B>();
  std::vector<float> columns(bv * w.rows);  // 32 rows of Wᵀ in f32
  float block[bv];
  for (std::size_t cb = 0; cb < w.cols / bv; ++cb) {
    for (std::size_t i = 0; i < w.rows; ++i) {
      dequantize(src.row(i)[cb], std::span<float, bv>(block, bv));
      for (std::size_t v = 0; v < bv; ++v) columns[v * w.rows + i] = block[v];
    }
    for (std::size_t v = 0; v < bv; ++v) {
      quantize_row(columns.data() + v * w.rows, reinterpret_cast<B*>(out + (cb * bv + v) * out_bytes), w.rows);
    }
  }
}

namespace detail {
inline void check_transposable(const weight_view& w, std::string_view where) {
  validate(w, where, "w");
  if (block_values(w.type) != 1 && w.rows % qk8_0 != 0) {
    ::actsparse::detail::fail_described(where, "w.rows",
                                        std::to_string(w.rows) + " rows of " + std::string(name(w.type)),
                                        "a multiple of 32 rows: the rows of the transpose, W's columns, are "
                                        "requantized in blocks of 32 values");
  }
}
}  // namespace detail

// Bytes of Wᵀ of w (packed rows; what transpose allocates and transpose_into writes). The same
// errors as transpose.
[[nodiscard]] inline std::size_t transposed_bytes(const weight_view& w) {
  detail::check_transposable(w, "cpu::transposed_bytes");
  return w.cols * row_bytes(w.type, w.rows);
}

// Wᵀ of W [rows × cols] written into `out`, a buffer of the engine's (at least
// transposed_bytes(w) bytes, aligned for the dtype): the view of it, Wt [cols × rows], packed
// rows. The same values and errors as transpose (below), whose vector this fills.
[[nodiscard]] inline weight_view transpose_into(const weight_view& w, std::span<std::byte> out) {
  constexpr std::string_view where = "cpu::transpose_into";
  detail::check_transposable(w, where);
  ::actsparse::detail::check_output_buffer(where, out, w.cols * row_bytes(w.type, w.rows), alignment(w.type),
                                           "transposed_bytes(w)");
  const weight_view t(out.data(), w.type, w.cols, w.rows, row_bytes(w.type, w.rows));
  if (w.type == dtype::q8_0) {
    transpose_requantized<block_q8_0>(w, out.data());
  } else if (w.type == dtype::q4_0) {
    transpose_requantized<block_q4_0>(w, out.data());
  } else {
    const std::size_t e = block_bytes(w.type);
    const auto* src = static_cast<const std::byte*>(w.data);
    for (std::size_t i = 0; i < w.rows; ++i) {
      for (std::size_t j = 0; j < w.cols; ++j)
        std::memcpy(out.data() + (j * w.rows + i) * e, src + i * w.row_stride + j * e, e);
    }
  }
  return t;
}

// Wᵀ of W [rows × cols], same dtype, packed rows: Wt [cols × rows], in a vector it owns
// (transpose_into writes the same bytes into the engine's own buffer).
//   f32 / f16 / bf16: exact, value for value.
//   q8_0 / q4_0: a block holds 32 consecutive values of a row, so Wᵀ cannot reuse W's blocks:
//     W is dequantized, transposed and requantized row by row with the reference quantizer
//     (ggml's). This is LOSSY: each value of Wt differs from W's by up to about half a
//     quantization step of its new block for q8_0 (|Δ| <= 0.57·d, d the block scale of Wt)
//     and up to one step for q4_0 (|Δ| <= 1.01·|d|: ggml's q4_0 clamps the top nibble), so
//     a linear over Wt approximates, not equals, the one over W. W.rows must be a multiple
//     of 32 (the rows of Wᵀ are quantized in 32-value blocks).
[[nodiscard]] inline owned_weights transpose(const weight_view& w) {
  owned_weights t;
  t.bytes.resize(transposed_bytes(w));
  t.view = transpose_into(w, t.bytes);
  return t;
}

}  // namespace actsparse::cpu
