#pragma once
// Non-owning strided row views. A view is (pointer, rows, cols, row stride in bytes):
// exactly ggml's (data, ne1, ne0, nb1) and torch's (data_ptr, size(0), size(1),
// stride(0) * element_size), so an engine's tensors map onto them without copies.
// `cols` always counts values; for the block types a row holds cols / 32 blocks.

#include <actsparse/core/dtype.hpp>
#include <actsparse/core/error.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

namespace actsparse {

template <class T>
struct matrix_view {
  using element_type = T;
  using storage_type = std::remove_const_t<T>;
  using byte_type = std::conditional_t<std::is_const_v<T>, const std::byte, std::byte>;

  T* data = nullptr;
  std::size_t rows = 0;
  std::size_t cols = 0;        // values per row
  std::size_t row_stride = 0;  // bytes between the starts of consecutive rows

  // A dense row-major view (row stride = the bytes of one row).
  static constexpr matrix_view packed(T* data, std::size_t rows, std::size_t cols) noexcept {
    return {data, rows, cols, row_bytes(dtype_traits<storage_type>::type, cols)};
  }

  [[nodiscard]] T* row(std::size_t i) const noexcept {
    return reinterpret_cast<T*>(reinterpret_cast<byte_type*>(data) + i * row_stride);
  }
  [[nodiscard]] constexpr std::size_t row_elements() const noexcept {
    return cols / dtype_traits<storage_type>::block_values;
  }
  [[nodiscard]] bool empty() const noexcept { return rows == 0 || cols == 0; }

  operator matrix_view<const T>() const noexcept  // NOLINT(google-explicit-constructor): like T* -> const T*
      requires(!std::is_const_v<T>) {
    return {data, rows, cols, row_stride};
  }
};

// A weight matrix whose dtype is known only at run time (an engine's tensor).
struct weight_view {
  const void* data = nullptr;
  dtype type = dtype::f32;
  std::size_t rows = 0;
  std::size_t cols = 0;        // values per row
  std::size_t row_stride = 0;  // bytes

  weight_view() = default;
  weight_view(const void* data_, dtype type_, std::size_t rows_, std::size_t cols_, std::size_t row_stride_) noexcept
      : data(data_), type(type_), rows(rows_), cols(cols_), row_stride(row_stride_) {}
  template <weight_storage T>
  weight_view(matrix_view<const T> v) noexcept  // NOLINT(google-explicit-constructor)
      : data(v.data), type(dtype_traits<T>::type), rows(v.rows), cols(v.cols), row_stride(v.row_stride) {}
  template <weight_storage T>
  weight_view(matrix_view<T> v) noexcept  // NOLINT(google-explicit-constructor)
      : weight_view(matrix_view<const T>(v)) {}

  // A default-constructed view: no matrix given (optional weights, such as down_t).
  [[nodiscard]] constexpr bool absent() const noexcept { return data == nullptr && rows == 0 && cols == 0; }

  template <weight_storage T>
  [[nodiscard]] matrix_view<const T> as() const noexcept {
    return {static_cast<const T*>(data), rows, cols, row_stride};
  }
};

// Checks that a weight view is usable: blocks whole, stride covers a row, data present, and
// data and row stride multiples of the element's alignment (4 bytes for f32, 2 for f16 / bf16
// and the ggml blocks, whose f16 scale comes first): the kernels read elements in place.
inline void validate(const weight_view& w, std::string_view where, std::string_view argument) {
  const dtype_info t = info(w.type);
  if (t.block_bytes == 0) {
    detail::fail_described(where, argument, "a dtype value of " + std::to_string(static_cast<int>(w.type)),
                           "one of the dtype enum's values (f32, bf16, f16, q8_0, q4_0)");
  }
  if (w.cols % t.block_values != 0) {
    detail::fail_described(where, argument, std::to_string(w.cols) + " values per row of " + std::string(t.name),
                           "a multiple of " + std::to_string(t.block_values) + " values per row for " +
                               std::string(t.name) + " weights (whole blocks)");
  }
  if (w.rows > 1 && w.row_stride < row_bytes(w.type, w.cols)) {
    detail::fail_described(where, argument, "a row stride of " + std::to_string(w.row_stride) + " bytes",
                           "at least " + std::to_string(row_bytes(w.type, w.cols)) + " bytes (one row of " +
                               std::to_string(w.cols) + " " + std::string(t.name) + " values)");
  }
  if (w.rows > 1 && w.row_stride % t.alignment != 0) {
    detail::fail_described(where, argument, "a row stride of " + std::to_string(w.row_stride) + " bytes",
                           "a multiple of " + std::to_string(t.alignment) + " bytes (the alignment of one " +
                               std::string(t.name) + " element: every row must start aligned)");
  }
  if (w.data == nullptr && w.rows != 0 && w.cols != 0) {
    detail::fail_described(where, argument, "a null data pointer", "memory for a non-empty matrix");
  }
  if (reinterpret_cast<std::uintptr_t>(w.data) % t.alignment != 0) {
    detail::fail_described(where, argument,
                           "data at an address that is not a multiple of " + std::to_string(t.alignment),
                           "an address aligned to " + std::to_string(t.alignment) + " bytes (the alignment of " +
                               std::string(t.name) + " elements)");
  }
}

template <class T>
void validate(const matrix_view<T>& m, std::string_view where, std::string_view argument) {
  validate(weight_view(matrix_view<const std::remove_const_t<T>>(m)), where, argument);
}

namespace detail {
// A caller's buffer `out` that a load-time layout is written into: at least `need` bytes (as
// `size_call` computes them) at an address aligned to `align`; a clear error otherwise.
inline void check_output_buffer(std::string_view where, std::span<const std::byte> out, std::size_t need,
                                std::size_t align, std::string_view size_call) {
  if (out.size() < need) {
    fail_described(where, "out", "a buffer of " + std::to_string(out.size()) + " bytes",
                   "at least " + std::to_string(need) + " bytes (" + std::string(size_call) + ")");
  }
  if (reinterpret_cast<std::uintptr_t>(out.data()) % align != 0) {
    fail_described(where, "out", "a buffer at an address that is not a multiple of " + std::to_string(align),
                   "an address aligned to " + std::to_string(align) + " bytes");
  }
}
}  // namespace detail

// ggml's type ids (enum ggml_type in ggml.h; stable: ggml never renumbers them) of the dtypes
// this library reads. A ggml tensor's `type` converts to int, so dtype_of_ggml(t->type).
namespace ggml_type_id {
inline constexpr int f32 = 0;
inline constexpr int f16 = 1;
inline constexpr int q4_0 = 2;
inline constexpr int q8_0 = 8;
inline constexpr int bf16 = 30;
}  // namespace ggml_type_id

namespace detail {
// ggml's name of a type id it has and this library does not read (for the error), or "".
[[nodiscard]] constexpr std::string_view ggml_type_name(int type) noexcept {
  constexpr std::array<std::string_view, 40> names = {
      "F32",     "F16",   "Q4_0",   "Q4_1",  "Q4_2 (removed)", "Q4_3 (removed)", "Q5_0",     "Q5_1",    "Q8_0",
      "Q8_1",    "Q2_K",  "Q3_K",   "Q4_K",  "Q5_K",           "Q6_K",           "Q8_K",     "IQ2_XXS", "IQ2_XS",
      "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S",          "IQ4_XS",         "I8",       "I16",     "I32",
      "I64",     "F64",   "IQ1_M",  "BF16",  "Q4_0_4_4",       "Q4_0_4_8",       "Q4_0_8_8", "TQ1_0",   "TQ2_0",
      "",        "",      "",       "MXFP4"};
  return type >= 0 && static_cast<std::size_t>(type) < names.size() ? names[static_cast<std::size_t>(type)]
                                                                    : std::string_view();
}

// Each dtype with its ggml type id, in the order the error message lists them.
inline constexpr std::array<std::pair<dtype, int>, 5> ggml_type_ids{{{dtype::f32, ggml_type_id::f32},
                                                                     {dtype::f16, ggml_type_id::f16},
                                                                     {dtype::bf16, ggml_type_id::bf16},
                                                                     {dtype::q8_0, ggml_type_id::q8_0},
                                                                     {dtype::q4_0, ggml_type_id::q4_0}}};
}  // namespace detail

// The ggml type id of a dtype (the inverse of dtype_of_ggml).
[[nodiscard]] constexpr int ggml_type_of(dtype t) noexcept {
  for (const auto& [type, id] : detail::ggml_type_ids) {
    if (type == t) return id;
  }
  return -1;
}

// The dtype of a ggml type id; any other id is an error that names the ggml type and the ones
// this library reads (f32, f16, bf16, q8_0, q4_0).
[[nodiscard]] inline dtype dtype_of_ggml(int ggml_type) {
  for (const auto& [type, id] : detail::ggml_type_ids) {
    if (id == ggml_type) return type;
  }
  const std::string_view known = detail::ggml_type_name(ggml_type);
  detail::fail_described("dtype_of_ggml", "ggml_type",
                         "ggml type id " + std::to_string(ggml_type) +
                             (known.empty() ? std::string(" (not a ggml type this library knows)")
                                            : " (GGML_TYPE_" + std::string(known) + ")"),
                         "one of the types this library reads: F32 (0), F16 (1), BF16 (30), Q8_0 (8), Q4_0 (2)");
}

// ggml: ne0 values per row (innermost), ne1 rows, nb1 bytes between rows.
[[nodiscard]] inline weight_view from_ggml(const void* data, dtype type, std::int64_t ne0, std::int64_t ne1,
                                           std::size_t nb1) {
  detail::require(ne0 >= 0, "from_ggml", "ne0", ne0, "ne0 >= 0");
  detail::require(ne1 >= 0, "from_ggml", "ne1", ne1, "ne1 >= 0");
  const weight_view w(data, type, static_cast<std::size_t>(ne1), static_cast<std::size_t>(ne0), nb1);
  validate(w, "from_ggml", "tensor");
  return w;
}

// The same with ggml's own type id (a tensor's `type`): from_ggml(t->data, t->type, t->ne[0],
// t->ne[1], t->nb[1]). Ids of types this library does not read are errors (dtype_of_ggml).
[[nodiscard]] inline weight_view from_ggml(const void* data, int ggml_type, std::int64_t ne0, std::int64_t ne1,
                                           std::size_t nb1) {
  return from_ggml(data, dtype_of_ggml(ggml_type), ne0, ne1, nb1);
}

// torch: a 2-D tensor with sizes (rows, cols) and strides in elements (stride0, 1).
template <class T>
[[nodiscard]] matrix_view<T> from_torch(T* data, std::int64_t rows, std::int64_t cols, std::int64_t stride0,
                                        std::int64_t stride1 = 1) {
  detail::require(rows >= 0, "from_torch", "size(0)", rows, "size(0) >= 0");
  detail::require(cols >= 0, "from_torch", "size(1)", cols, "size(1) >= 0");
  detail::require(stride1 == 1, "from_torch", "stride(1)", stride1, "1 (rows must be contiguous)");
  detail::require(stride0 >= cols, "from_torch", "stride(0)", stride0, "stride(0) >= size(1)");
  const matrix_view<T> m{data, static_cast<std::size_t>(rows), static_cast<std::size_t>(cols),
                         static_cast<std::size_t>(stride0) * sizeof(std::remove_const_t<T>)};
  validate(m, "from_torch", "tensor");
  return m;
}

}  // namespace actsparse
