#pragma once
// A low-rank predictor of the gate pre-activation, as a neuron-sparse op reads it:
// g̃ = U (A x), A [rank x d_model], U [d_ff x rank], any dtype a backend's GEMV reads. The op
// runs the two GEMVs, scores g̃ as if it were g, selects, and reads W_gate only for the kept rows
// (Deja Vu style: the gate is not read whole). low_rank_gate.hpp fits the factors (Eigen SVD).

#include <actsparse/core/dtype.hpp>
#include <actsparse/core/views.hpp>

#include <cstddef>

namespace actsparse {

struct gate_factors {
  weight_view a;  // [rank x d_model]
  weight_view u;  // [d_ff x rank]

  [[nodiscard]] std::size_t rank() const noexcept { return a.rows; }
  // The bytes one prediction reads (both factors, in their dtypes).
  [[nodiscard]] std::size_t bytes() const noexcept {
    return a.rows * row_bytes(a.type, a.cols) + u.rows * row_bytes(u.type, u.cols);
  }
};

}  // namespace actsparse
