#pragma once
// Argument checks shared by the scorers. They build a message only on failure, so the
// hot path (score()) stays free of allocation.

#include <actsparse/core/error.hpp>

#include <cstddef>
#include <string>
#include <string_view>

namespace actsparse::detail {

// out.size() must equal score_count(input).
inline void require_score_count(std::string_view where, std::size_t out_size, std::size_t expected) {
  if (out_size == expected) return;
  throw error(where, "out", "a span of " + std::to_string(out_size) + " floats",
              std::to_string(expected) + " floats (score_count(input): one score per candidate)");
}

// An input vector must have exactly `expected` values (`what` says where that number comes from).
inline void require_input_size(std::string_view where, std::string_view argument, std::size_t size,
                               std::size_t expected, std::string_view what) {
  if (size == expected) return;
  throw error(where, argument, "a span of " + std::to_string(size) + " values",
              std::to_string(expected) + " values (" + std::string(what) + ")");
}

}  // namespace actsparse::detail
