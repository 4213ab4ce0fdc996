#pragma once
// Load-time repacking for the CPU backend: Wt = Wᵀ in the same dtype, so that the
// input-sparse linear (TEAL) and the down projection of a sparse FFN read one contiguous
// row per kept input channel (for q8_0 / q4_0 the transpose is requantized: lossy, see
// transpose); and q8_0 / q4_0 rows interleaved 16 at a time for the dense integer GEMV
// (interleave_rows: lossless).

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

// Wᵀ of a q8_0 / q4_0 matrix W [rows × cols] (both multiples of 32): W is dequantized (core's
// dequantize), transposed, and every row of Wᵀ (one column of W) is requantized with core's
// quantize_row (ggml's reference quantizer), 32 rows of Wᵀ at a time.
template <class B>
[[nodiscard]] owned_weights transpose_requantized(const weight_view& w) {
  constexpr std::size_t bv = dtype_traits<B>::block_values;
  const std::size_t out_bytes = row_bytes(w.type, w.rows);  // one row of Wᵀ
  owned_weights t;
  t.bytes.resize(w.cols * out_bytes);
  t.view = weight_view(t.bytes.data(), w.type, w.cols, w.rows, out_bytes);
  const matrix_view<const B> src = w.as<B>();
  std::vector<float> columns(bv * w.rows);  // 32 rows of Wᵀ in f32
  float block[bv];
  for (std::size_t cb = 0; cb < w.cols / bv; ++cb) {
    for (std::size_t i = 0; i < w.rows; ++i) {
      dequantize(src.row(i)[cb], std::span<float, bv>(block, bv));
      for (std::size_t v = 0; v < bv; ++v) columns[v * w.rows + i] = block[v];
    }
    for (std::size_t v = 0; v < bv; ++v) {
      quantize_row(columns.data() + v * w.rows, reinterpret_cast<B*>(t.bytes.data() + (cb * bv + v) * out_bytes),
                   w.rows);
    }
  }
  return t;
}

// Wᵀ of W [rows × cols], same dtype, packed rows: Wt [cols × rows].
//   f32 / f16 / bf16: exact, value for value.
//   q8_0 / q4_0: a block holds 32 consecutive values of a row, so Wᵀ cannot reuse W's blocks:
//     W is dequantized, transposed and requantized row by row with the reference quantizer
//     (ggml's). This is LOSSY: each value of Wt differs from W's by up to about half a
//     quantization step of its new block for q8_0 (|Δ| <= 0.57·d, d the block scale of Wt)
//     and up to one step for q4_0 (|Δ| <= 1.01·|d|: ggml's q4_0 clamps the top nibble), so
//     a linear over Wt approximates, not equals, the one over W. W.rows must be a multiple
//     of 32 (the rows of Wᵀ are quantized in 32-value blocks).
[[nodiscard]] inline owned_weights transpose(const weight_view& w) {
  constexpr std::string_view where = "cpu::transpose";
  validate(w, where, "w");
  if (block_values(w.type) != 1) {
    if (w.rows % qk8_0 != 0) {
      detail::fail_described(where, "w.rows", std::to_string(w.rows) + " rows of " + std::string(name(w.type)),
                             "a multiple of 32 rows: the rows of the transpose, W's columns, are requantized in "
                             "blocks of 32 values");
    }
    if (w.type == dtype::q8_0) return transpose_requantized<block_q8_0>(w);
    return transpose_requantized<block_q4_0>(w);
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

// --- q8_0 / q4_0 rows interleaved 16 at a time (weight_view::interleaved) -------------------
// The layout the CPU backend's dense integer GEMV reads: per group of 16 rows g and block b,
// at byte (g·blocks + b)·16·sizeof(block), the 16 rows' f16 scales (32 bytes, row order),
// then chunks of 64 bytes in which bytes 4i .. 4i + 3 belong to row i:
//   q4_0: 4 chunks; chunk c, byte 4i + k holds the nibble of value 8c + k of row i's block in
//         its low half and that of value 8c + 4 + k in its high half;
//   q8_0: 8 chunks; chunk c, byte 4i + k holds value 4c + k (int8, as stored).
// One 64-byte load then gives, per 32-bit lane i, four consecutive values of row i (q4_0: and
// the next four in the high halves): one VNNI dot product (vpdpbusd) covers 4 values of 16 rows
// against 4 values of x broadcast, and the 16 scales convert in one instruction. Rows past the
// last (to a multiple of 16) hold scale 0. The same bytes as the source, rearranged (lossless),
// so it costs memory equal to the source's blocks. Row gathers cannot use it: a single row's
// bytes are spread over its group's bytes of every block.
inline constexpr std::size_t interleave_group_rows = 16;

// Bytes of a q8_0 / q4_0 matrix of rows × cols interleaved.
[[nodiscard]] constexpr std::size_t interleaved_bytes(dtype t, std::size_t rows, std::size_t cols) noexcept {
  return (rows + interleave_group_rows - 1) / interleave_group_rows * interleave_group_rows * row_bytes(t, cols);
}

// The interleaved copy, and the source view with weight_view::interleaved pointing at it.
struct interleaved_weights {
  std::vector<std::byte> bytes;
  weight_view view;
};

// Offset of value v's byte of row r in its group's block (after the 32 bytes of scales), and
// for q4_0 whether it is the high nibble.
struct interleaved_place {
  std::size_t offset;
  bool high;
};
[[nodiscard]] constexpr interleaved_place interleaved_place_of(dtype t, std::size_t r, std::size_t v) noexcept {
  if (t == dtype::q8_0) return {2 * interleave_group_rows + 64 * (v / 4) + 4 * r + v % 4, false};
  return {2 * interleave_group_rows + 64 * (v / 8) + 4 * r + v % 4, v % 8 >= 4};
}

// Builds the interleaved copy of a q8_0 / q4_0 matrix (any row stride; cols a multiple of
// 32, at least one row). Keep the result alive while its view is used (moving it keeps the
// bytes).
[[nodiscard]] inline interleaved_weights interleave_rows(const weight_view& w) {
  constexpr std::string_view where = "cpu::interleave_rows";
  validate(w, where, "w");
  if (w.type != dtype::q4_0 && w.type != dtype::q8_0) {
    detail::fail(where, "w.type", name(w.type), "q8_0 or q4_0 (the dtypes with an interleaved layout)");
  }
  detail::require(w.rows > 0 && w.cols > 0, where, "w.rows * w.cols", w.rows * w.cols,
                  "a non-empty matrix (at least one row of one block)");
  const std::size_t blocks = w.cols / qk4_0;
  const std::size_t block = block_bytes(w.type);
  const std::size_t group_block = interleave_group_rows * block;
  interleaved_weights out;
  out.bytes.assign(interleaved_bytes(w.type, w.rows, w.cols), std::byte{0});
  const auto* src = static_cast<const std::byte*>(w.data);
  for (std::size_t i = 0; i < w.rows; ++i) {
    const std::size_t g = i / interleave_group_rows;
    const std::size_t r = i % interleave_group_rows;
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::byte* blk = src + i * w.row_stride + b * block;  // d, then the quants
      std::byte* const at = out.bytes.data() + (g * blocks + b) * group_block;
      std::memcpy(at + r * sizeof(f16), blk, sizeof(f16));
      for (std::size_t v = 0; v < qk4_0; ++v) {
        const interleaved_place to = interleaved_place_of(w.type, r, v);
        if (w.type == dtype::q8_0) {
          at[to.offset] = blk[sizeof(f16) + v];
        } else {  // value v's stored nibble (q + 8)
          const auto byte = static_cast<unsigned>(blk[sizeof(f16) + v % (qk4_0 / 2)]);
          const unsigned n = v < qk4_0 / 2 ? byte & 0x0fU : byte >> 4;
          at[to.offset] |= static_cast<std::byte>(to.high ? n << 4 : n);
        }
      }
    }
  }
  out.view = w;
  out.view.interleaved = out.bytes.data();
  return out;
}

// Row `row` of an interleaved q8_0 / q4_0 matrix of `cols` values read back into ggml blocks
// (cols / 32 of them, row_bytes(t, cols) bytes at `out`): the inverse of interleave_rows, for
// checks and for engines that keep only the interleaved copy.
inline void deinterleave_row(dtype t, const void* interleaved, std::size_t cols, std::size_t row, std::byte* out) {
  const std::size_t blocks = cols / qk4_0;
  const std::size_t block = block_bytes(t);
  const std::size_t g = row / interleave_group_rows;
  const std::size_t r = row % interleave_group_rows;
  const auto* base = static_cast<const std::byte*>(interleaved);
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::byte* at = base + (g * blocks + b) * interleave_group_rows * block;
    std::byte* const blk = out + b * block;
    std::memcpy(blk, at + r * sizeof(f16), sizeof(f16));
    if (t == dtype::q4_0) std::memset(blk + sizeof(f16), 0, qk4_0 / 2);
    for (std::size_t v = 0; v < qk4_0; ++v) {
      const interleaved_place from = interleaved_place_of(t, r, v);
      if (t == dtype::q8_0) {
        blk[sizeof(f16) + v] = at[from.offset];
      } else {
        const auto byte = static_cast<unsigned>(at[from.offset]);
        const unsigned n = from.high ? byte >> 4 : byte & 0x0fU;
        blk[sizeof(f16) + v % (qk4_0 / 2)] |= static_cast<std::byte>(v < qk4_0 / 2 ? n : n << 4);
      }
    }
  }
}

}  // namespace actsparse::cpu
