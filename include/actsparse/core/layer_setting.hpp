#pragma once
// How a layer schedule's value configures an op's selector for one layer. An op holds a base
// selector and a schedule; for layer l it runs layer_selector(base, schedule.at(l)):
//   - the value is the selector type itself (a table of selectors): it is used as it is;
//   - same_selector (uniform_schedule's value): the base selector, unchanged;
//   - anything else: configure(base, value) -> Selector, found by argument-dependent lookup.
//     A selector header defines configure for the values it accepts (threshold: a threshold t;
//     top_k: a count k; cumulative_mass: a mass), a schedule header for its own value types
//     (depth_schedule: layer_policy -> cumulative_mass).
// A value with a member `dense` that is true asks for the whole layer (no scoring, no
// selection): layer_is_dense(value).

#include <concepts>
#include <cstddef>

namespace actsparse {

// The value of a schedule that keeps the base selector on every layer.
struct same_selector {
  friend constexpr bool operator==(same_selector, same_selector) noexcept = default;
};

// Whether a schedule value configures a selector of type Selector.
template <class Value, class Selector>
concept configures = std::same_as<Value, Selector> || std::same_as<Value, same_selector> ||
    requires(const Selector& base, const Value& v) {
  { configure(base, v) } -> std::same_as<Selector>;
};

template <class Selector, class Value>
requires configures<Value, Selector>
[[nodiscard]] Selector layer_selector(const Selector& base, const Value& v) {
  if constexpr (std::same_as<Value, Selector>) {
    return v;
  } else if constexpr (std::same_as<Value, same_selector>) {
    return base;
  } else {
    return configure(base, v);
  }
}

template <class Value>
[[nodiscard]] constexpr bool layer_is_dense(const Value& v) noexcept {
  if constexpr (requires { static_cast<bool>(v.dense); }) {
    return static_cast<bool>(v.dense);
  } else {
    return false;
  }
}

}  // namespace actsparse

#define ACTSPARSE_REQUIRE_CONFIGURES(Value, Selector)                                                    \
  static_assert(::actsparse::configures<Value, Selector>,                                                \
                "actsparse: this schedule's value_type does not configure the selector. It must be the " \
                "selector itself, actsparse::same_selector, or a type for which "                        \
                "configure(const Selector&, const value_type&) -> Selector is declared.")
