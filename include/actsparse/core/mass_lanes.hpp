#pragma once
// The order of every mass in the library (the selectors' portable passes in partition.hpp
// and the faster versions a backend installs, core/selection_passes.hpp): one sum, in double, in a fixed order.
// Lane k (k = 0..7) adds, in ascending index order, the scores whose index is k mod 8, and
// the lanes are combined as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). Eight
// independent chains run about 4x faster than one (a double add's latency bounds a single
// chain: ~9 us for 11008 scores here), the result is reproducible, covered == total bit for
// bit when all is kept, and the sum of a set never decreases when a score >= 0 is added to it
// (each lane is a recursive sum into which a term >= 0 is inserted; rounding is monotone).

#include <cstddef>

namespace actsparse::detail {

inline constexpr std::size_t mass_lanes = 8;

// The lanes combined in the fixed order.
[[nodiscard]] inline double combine_lanes(const double (&l)[mass_lanes]) noexcept {
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

}  // namespace actsparse::detail
