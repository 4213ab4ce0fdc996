#pragma once
// The schedule of an op that runs its own selector on every layer (the default of
// neuron_sparse_ffn and input_sparse_linear).

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/layer_setting.hpp>

#include <cstddef>

namespace actsparse {

struct uniform_schedule {
  using value_type = same_selector;
  [[nodiscard]] constexpr value_type at(std::size_t /*layer*/) const noexcept { return {}; }
  friend constexpr bool operator==(const uniform_schedule&, const uniform_schedule&) noexcept = default;
};

ACTSPARSE_REQUIRE_LAYER_SCHEDULE(uniform_schedule);

}  // namespace actsparse
