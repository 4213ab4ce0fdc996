#pragma once
// Copies of weight matrices in layouts only the CPU backend reads, built once at load time,
// and the table through which the backend finds them. Two layouts, both lossless (the model's
// own q8_0 / q4_0 blocks rearranged, no rounding):
//   interleaved     rows interleaved 16 at a time, which the dense integer GEMV reads faster
//                   than the row-major blocks: for matrices read whole (W_gate under exact
//                   gating, the attention projections); a row gather still reads the
//                   row-major blocks.
//   column blocks   W_down's 32-neuron block columns, each neuron's quants contiguous: a
//                   sparse down projection reads the kept neurons and their columns' scales,
//                   the dense one every neuron; W_down then needs no other layout (no down_t).
// The engine passes its ordinary views in every argument struct; a cpu_backend whose `layouts`
// holds a copy of a matrix reads the copy wherever the layout serves the read.

#include <actsparse/core/dtype.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/views.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace actsparse::cpu {

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

// A matrix in the interleaved layout (this backend's own view): dtype, the bytes, and the
// shape of the row-major matrix it was built from.
struct interleaved_view {
  dtype type = dtype::q4_0;
  const void* data = nullptr;
  std::size_t rows = 0;
  std::size_t cols = 0;  // values per row
};

// The interleaved copy of a matrix (owns its bytes; moving it keeps them) and its view.
struct interleaved_weights {
  std::vector<std::byte> bytes;
  interleaved_view view;
  weight_view source;  // the row-major matrix it was built from (not owned)
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

// Writes the interleaved layout of a q8_0 / q4_0 matrix (any row stride; cols a multiple of
// 32, at least one row) into `out`, a buffer of the engine's of at least
// interleaved_bytes(w.type, w.rows, w.cols) bytes: the engine places the copy in its own
// (backend) memory and keeps it alive while the view is used. Returns the view of it.
[[nodiscard]] inline interleaved_view interleave_rows_into(const weight_view& w, std::span<std::byte> out) {
  constexpr std::string_view where = "cpu::interleave_rows";
  validate(w, where, "w");
  if (w.type != dtype::q4_0 && w.type != dtype::q8_0) {
    ::actsparse::detail::fail(where, "w.type", name(w.type), "q8_0 or q4_0 (the dtypes with an interleaved layout)");
  }
  ::actsparse::detail::require(w.rows > 0 && w.cols > 0, where, "w.rows * w.cols", w.rows * w.cols,
                               "a non-empty matrix (at least one row of one block)");
  const std::size_t need = interleaved_bytes(w.type, w.rows, w.cols);
  ::actsparse::detail::check_output_buffer(where, out, need, alignof(f16), "interleaved_bytes(w.type, w.rows, w.cols)");
  const std::size_t blocks = w.cols / qk4_0;
  const std::size_t block = block_bytes(w.type);
  const std::size_t group_block = interleave_group_rows * block;
  std::fill_n(out.data(), need, std::byte{0});  // rows past the last hold scale 0
  const auto* src = static_cast<const std::byte*>(w.data);
  for (std::size_t i = 0; i < w.rows; ++i) {
    const std::size_t g = i / interleave_group_rows;
    const std::size_t r = i % interleave_group_rows;
    for (std::size_t b = 0; b < blocks; ++b) {
      const std::byte* blk = src + i * w.row_stride + b * block;  // d, then the quants
      std::byte* const at = out.data() + (g * blocks + b) * group_block;
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
  return interleaved_view{w.type, out.data(), w.rows, w.cols};
}

// Builds the interleaved copy of a q8_0 / q4_0 matrix in a vector it owns (interleave_rows_into
// writes the same bytes into the engine's buffer). Keep the result alive while its view is
// used (moving it keeps the bytes); weight_layouts below keeps it for the backend.
[[nodiscard]] inline interleaved_weights interleave_rows(const weight_view& w) {
  interleaved_weights out;
  if (w.type == dtype::q4_0 || w.type == dtype::q8_0) out.bytes.resize(interleaved_bytes(w.type, w.rows, w.cols));
  out.view = interleave_rows_into(w, out.bytes);
  out.source = w;
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

// ---- W_down held once, losslessly, for a sparse down projection ------------------------------
// The column-block layout of a q8_0 / q4_0 matrix W [rows × cols] (for W_down: rows d_model,
// cols d_ff; both multiples of 32). Block column b (W's block b of every row: the 32 neurons
// 32b .. 32b + 31) starts at byte b·column_bytes() and holds
//   the rows' f16 scales d(i, b), i < rows (2·rows bytes), then
//   per neuron k < 32 its quants down the rows: q8_0 one int8 per row (rows bytes); q4_0 per
//   32 rows c, 16 bytes, byte m holding the stored nibble (q + 8) of row 32c + m low and of
//   row 32c + 16 + m high, a q4_0 block's byte order (rows / 2 bytes).
// The model's own scales and quants rearranged: every weight d(i, b)·q(i, j) exactly as in W,
// in the same number of bytes (no second rounding, unlike transpose, whose q8_0 / q4_0 Wᵀ is
// requantized). A sparse down projection reads each kept neuron's quants and the scales of
// every block column holding a kept neuron: y_i = Σ_b d(i, b)·Σ_{kept j in b} h_j·q(i, j).
struct column_blocks_view {
  dtype type = dtype::q4_0;
  const void* data = nullptr;
  std::size_t rows = 0;  // W's rows (d_model)
  std::size_t cols = 0;  // W's columns (d_ff): neurons

  // Bytes of one neuron's quants, and of one block column (scales and 32 neurons).
  [[nodiscard]] constexpr std::size_t quant_bytes() const noexcept { return type == dtype::q8_0 ? rows : rows / 2; }
  [[nodiscard]] constexpr std::size_t column_bytes() const noexcept {
    return rows * sizeof(f16) + qk4_0 * quant_bytes();
  }
  [[nodiscard]] const f16* scales(std::size_t b) const noexcept {
    return reinterpret_cast<const f16*>(static_cast<const std::byte*>(data) + b * column_bytes());
  }
  [[nodiscard]] const std::uint8_t* quants(std::size_t j) const noexcept {
    return reinterpret_cast<const std::uint8_t*>(static_cast<const std::byte*>(data) + j / qk4_0 * column_bytes() +
                                                 rows * sizeof(f16) + j % qk4_0 * quant_bytes());
  }
};

// The column-block copy of a matrix (owns its bytes) and its view.
struct column_blocks_weights {
  std::vector<std::byte> bytes;
  column_blocks_view view;
  weight_view source;  // the row-major matrix it was built from (not owned)
};

namespace detail {
inline void check_column_blocks(const weight_view& w, std::string_view where) {
  validate(w, where, "w");
  if (w.type != dtype::q4_0 && w.type != dtype::q8_0) {
    ::actsparse::detail::fail(where, "w.type", name(w.type), "q8_0 or q4_0 (the dtypes with a column-block layout)");
  }
  ::actsparse::detail::require(w.rows > 0 && w.rows % qk4_0 == 0, where, "w.rows", w.rows,
                               "a positive multiple of 32 (q4_0 packs the quants of 32 rows in 16 bytes)");
}
}  // namespace detail

// Bytes of the column-block layout of w (the bytes of its blocks). The errors of
// column_blocks_into.
[[nodiscard]] inline std::size_t column_blocks_bytes(const weight_view& w) {
  detail::check_column_blocks(w, "cpu::column_blocks_bytes");
  return w.rows * row_bytes(w.type, w.cols);
}

// Writes the column-block layout of a q8_0 / q4_0 matrix (any row stride; rows and cols
// multiples of 32) into `out`, a buffer of the engine's of at least column_blocks_bytes(w)
// bytes, aligned for f16. Returns its view.
[[nodiscard]] inline column_blocks_view column_blocks_into(const weight_view& w, std::span<std::byte> out) {
  constexpr std::string_view where = "cpu::column_blocks_into";
  detail::check_column_blocks(w, where);
  const std::size_t need = w.rows * row_bytes(w.type, w.cols);
  ::actsparse::detail::check_output_buffer(where, out, need, alignof(f16), "column_blocks_bytes(w)");
  const column_blocks_view view{w.type, out.data(), w.rows, w.cols};
  const std::size_t block = block_bytes(w.type);
  const auto* src = static_cast<const std::byte*>(w.data);
  std::fill_n(out.data(), need, std::byte{0});
  for (std::size_t i = 0; i < w.rows; ++i) {
    for (std::size_t b = 0; b < w.cols / qk4_0; ++b) {
      const std::byte* blk = src + i * w.row_stride + b * block;  // d, then the quants
      std::byte* const column = out.data() + b * view.column_bytes();
      std::memcpy(column + i * sizeof(f16), blk, sizeof(f16));
      for (std::size_t v = 0; v < qk4_0; ++v) {
        std::byte* const q = column + w.rows * sizeof(f16) + v * view.quant_bytes();
        if (w.type == dtype::q8_0) {
          q[i] = blk[sizeof(f16) + v];
        } else {  // value v's nibble, to row i's place: byte (i / 32)·16 + i % 16, high half past 16
          const auto byte = static_cast<unsigned>(blk[sizeof(f16) + v % (qk4_0 / 2)]);
          const unsigned n = v < qk4_0 / 2 ? byte & 0x0fU : byte >> 4;
          q[i / qk4_0 * (qk4_0 / 2) + i % (qk4_0 / 2)] |= static_cast<std::byte>(i % qk4_0 < qk4_0 / 2 ? n : n << 4);
        }
      }
    }
  }
  return view;
}

// The column-block copy in a vector it owns (column_blocks_into writes the same bytes into the
// engine's buffer).
[[nodiscard]] inline column_blocks_weights column_blocks(const weight_view& w) {
  column_blocks_weights out;
  out.bytes.resize(column_blocks_bytes(w));
  out.view = column_blocks_into(w, out.bytes);
  out.source = w;
  return out;
}

// Row `row` of W read back from its column-block layout into ggml blocks (w.cols / 32 of them,
// row_bytes(w.type, w.cols) bytes at `out`): the inverse, for checks and for engines that keep
// only this layout.
inline void column_blocks_row(const column_blocks_view& w, std::size_t row, std::byte* out) {
  const std::size_t block = block_bytes(w.type);
  for (std::size_t b = 0; b < w.cols / qk4_0; ++b) {
    std::byte* const blk = out + b * block;
    std::memcpy(blk, w.scales(b) + row, sizeof(f16));
    if (w.type == dtype::q4_0) std::memset(blk + sizeof(f16), 0, qk4_0 / 2);
    for (std::size_t v = 0; v < qk4_0; ++v) {
      const std::uint8_t* q = w.quants(b * qk4_0 + v);
      if (w.type == dtype::q8_0) {
        blk[sizeof(f16) + v] = static_cast<std::byte>(q[row]);
      } else {
        const unsigned byte = q[row / qk4_0 * (qk4_0 / 2) + row % (qk4_0 / 2)];
        const unsigned n = row % qk4_0 < qk4_0 / 2 ? byte & 0x0fU : byte >> 4;
        blk[sizeof(f16) + v % (qk4_0 / 2)] |= static_cast<std::byte>(v < qk4_0 / 2 ? n : n << 4);
      }
    }
  }
}

// The interleaved copies a cpu_backend may read, found by the view of their source matrix
// (its data pointer, dtype, shape and stride must match exactly). Build it once at load time;
// lookups are O(log n) and allocate nothing. Not thread-safe to add to while a backend reads
// it; reads from any number of threads are safe.
class weight_layouts {
 public:
  // Builds the interleaved copy of w (q8_0 / q4_0; see interleave_rows) and keeps it; returns
  // its view. A second add of the same matrix is a clear error.
  interleaved_view add_interleaved(const weight_view& w) { return add(interleave_rows(w)); }
  // Uses a copy the engine wrote into its own memory (interleave_rows_into) without owning it:
  // the engine keeps those bytes alive and unchanged while the backend reads them. `copy` must
  // be the layout of `source` (same dtype and shape; a clear error otherwise).
  interleaved_view add_borrowed(const weight_view& source, const interleaved_view& copy) {
    return add(borrowed<interleaved_weights>(source, copy, "an interleaved", "interleave_rows_into"));
  }
  // Keeps a copy built elsewhere (interleave_rows).
  interleaved_view add(interleaved_weights copy) { return insert(copies_, std::move(copy), "interleaved"); }

  // Builds the column-block copy of w (q8_0 / q4_0 W_down; see column_blocks) and keeps it. A
  // matrix has at most one column-block copy (a clear error otherwise).
  column_blocks_view add_column_blocks(const weight_view& w) { return add(::actsparse::cpu::column_blocks(w)); }
  // Uses a column-block copy the engine wrote into its own memory (column_blocks_into), as above.
  column_blocks_view add_borrowed(const weight_view& source, const column_blocks_view& copy) {
    return add(borrowed<column_blocks_weights>(source, copy, "a column-block", "column_blocks_into"));
  }
  column_blocks_view add(column_blocks_weights copy) { return insert(columns_, std::move(copy), "column-block"); }

  // The column-block copy of exactly this matrix, or null.
  [[nodiscard]] const column_blocks_view* column_blocks(const weight_view& w) const noexcept {
    const auto at = std::lower_bound(columns_.begin(), columns_.end(), w.data, before<column_blocks_weights>);
    return at != columns_.end() && same_source(at->source, w) ? &at->view : nullptr;
  }

  // The interleaved copy of exactly this matrix, or null.
  [[nodiscard]] const interleaved_view* interleaved(const weight_view& w) const noexcept {
    const auto at = std::lower_bound(copies_.begin(), copies_.end(), w.data, before<interleaved_weights>);
    return at != copies_.end() && same_source(at->source, w) ? &at->view : nullptr;
  }

  [[nodiscard]] std::size_t size() const noexcept { return copies_.size() + columns_.size(); }
  // Bytes of the copies it owns (borrowed ones are the engine's).
  [[nodiscard]] std::size_t bytes() const noexcept {
    std::size_t n = 0;
    for (const auto& c : copies_) n += c.bytes.size();
    for (const auto& c : columns_) n += c.bytes.size();
    return n;
  }

 private:
  template <class Copy>
  static bool before(const Copy& c, const void* p) noexcept {
    return std::less<const void*>{}(c.source.data, p);
  }
  // A copy of `source` in the engine's memory, checked to be its layout (dtype and shape).
  template <class Owned, class View>
  static Owned borrowed(const weight_view& source, const View& copy, std::string_view kind, std::string_view how) {
    if (copy.type != source.type || copy.rows != source.rows || copy.cols != source.cols || copy.data == nullptr) {
      ::actsparse::detail::fail_described(
          "cpu::weight_layouts::add_borrowed", "copy",
          std::string(kind) + " " + std::string(name(copy.type)) + " copy of " + std::to_string(copy.rows) + " x " +
              std::to_string(copy.cols) + (copy.data == nullptr ? " with no data" : ""),
          "the layout of the source matrix: " + std::string(name(source.type)) + " " + std::to_string(source.rows) +
              " x " + std::to_string(source.cols) + " (" + std::string(how) + "(source, buffer))");
    }
    Owned out;
    out.view = copy;
    out.source = source;
    return out;
  }
  // Keeps `copy` in `into` (sorted by source address); one copy of each kind per matrix.
  template <class Owned>
  static decltype(Owned::view) insert(std::vector<Owned>& into, Owned copy, std::string_view kind) {
    const auto at = std::lower_bound(into.begin(), into.end(), copy.source.data, before<Owned>);
    if (at != into.end() && at->source.data == copy.source.data) {
      ::actsparse::detail::fail_described("cpu::weight_layouts::add", "copy",
                                          "a second " + std::string(kind) + " copy of the matrix at the same address",
                                          "one " + std::string(kind) + " copy per matrix");
    }
    return into.insert(at, std::move(copy))->view;
  }
  static bool same_source(const weight_view& s, const weight_view& w) noexcept {
    return s.data == w.data && s.type == w.type && s.rows == w.rows && s.cols == w.cols && s.row_stride == w.row_stride;
  }
  std::vector<interleaved_weights> copies_;     // sorted by source address
  std::vector<column_blocks_weights> columns_;  // likewise
};

}  // namespace actsparse::cpu
