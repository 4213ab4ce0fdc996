#pragma once
// Row and column L2 norms of a weight matrix in any dtype, for the weight-aware scorers.
// Rows are dequantized one at a time (one row of scratch) and squares are summed in double
// in a fixed order (row 0 first), so the norms do not depend on the platform or the caller.

#include <actsparse/core/dtype.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/core/views.hpp>

#include <cmath>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace actsparse::detail {

// Calls f(i, row_values) for every row i of w, with the row dequantized to f32.
template <class F>
void for_each_dequantized_row(const weight_view& w, F&& f) {
  std::vector<float> row(w.cols);
  visit_dtype(w.type, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto m = w.as<T>();
    for (std::size_t i = 0; i < m.rows; ++i) {
      dequantize_row(m.row(i), row.data(), m.cols);
      f(i, static_cast<const std::vector<float>&>(row));
    }
  });
}

// ‖w[i, :]‖₂ for every row i (w.rows values).
[[nodiscard]] inline std::vector<double> row_norms(const weight_view& w, std::string_view where,
                                                   std::string_view argument) {
  validate(w, where, argument);
  std::vector<double> norms(w.rows, 0.0);
  for_each_dequantized_row(w, [&](std::size_t i, const std::vector<float>& row) {
    double sum = 0.0;
    for (float v : row) sum += static_cast<double>(v) * static_cast<double>(v);
    norms[i] = std::sqrt(sum);
  });
  return norms;
}

// ‖w[:, j]‖₂ for every column j (w.cols values).
[[nodiscard]] inline std::vector<double> column_norms(const weight_view& w, std::string_view where,
                                                      std::string_view argument) {
  validate(w, where, argument);
  std::vector<double> sums(w.cols, 0.0);
  for_each_dequantized_row(w, [&](std::size_t, const std::vector<float>& row) {
    for (std::size_t j = 0; j < row.size(); ++j) sums[j] += static_cast<double>(row[j]) * static_cast<double>(row[j]);
  });
  for (double& s : sums) s = std::sqrt(s);
  return sums;
}

// Rejects a NaN or infinite norm: it would poison every score that uses it. Checked on the
// double sums (NaN / inf weights) and again after the narrowing to float (overflow).
template <class T>
void require_finite_norms(const std::vector<T>& norms, std::string_view where, std::string_view argument,
                          std::string_view what) {
  for (std::size_t j = 0; j < norms.size(); ++j) {
    if (!std::isfinite(norms[j])) {
      throw error(where, argument, std::string(what) + " " + std::to_string(j) + " with a non-finite norm",
                  "finite weights (no NaN or infinity, no overflow of the sum of squares)");
    }
  }
}

// Divides by the mean so that scores of different layers share a scale. An all-zero set
// stays all zero (there is no scale to share; selectors see all-zero scores and fall back).
inline void divide_by_mean(std::vector<double>& norms) {
  if (norms.empty()) return;
  double sum = 0.0;
  for (double v : norms) sum += v;
  const double mean = sum / static_cast<double>(norms.size());
  if (mean == 0.0) return;
  for (double& v : norms) v /= mean;
}

[[nodiscard]] inline std::vector<float> to_float(const std::vector<double>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = static_cast<float>(v[i]);
  return out;
}

// Norms given directly (from a calibration file, say) must be finite and non-negative.
inline void require_valid_norms(const std::vector<float>& norms, std::string_view where) {
  for (std::size_t j = 0; j < norms.size(); ++j) {
    if (!(std::isfinite(norms[j]) && norms[j] >= 0.0F)) {
      throw error(where, "norms", "[" + std::to_string(j) + "] = " + to_text(norms[j]), "finite, non-negative norms");
    }
  }
}

}  // namespace actsparse::detail
