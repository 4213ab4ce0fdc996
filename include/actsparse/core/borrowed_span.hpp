#pragma once
// A std::span that an argument struct holds: it views the caller's memory, so it must never
// be built from a temporary container (the container dies at the end of the statement and the
// span would dangle). Building one from an rvalue std::vector (or any range that owns its
// elements) fails to compile with a message that says so; lvalue containers, spans, pointer +
// count and other borrowed ranges are accepted as std::span accepts them.

#include <cstddef>
#include <ranges>
#include <span>
#include <type_traits>

namespace actsparse {

template <class T>
class borrowed_span : public std::span<T> {
 public:
  constexpr borrowed_span() noexcept = default;
  constexpr borrowed_span(T* data, std::size_t size) noexcept : std::span<T>(data, size) {}
  // Implicit as std::span's; the constraint keeps the copy and move constructors in charge.
  template <class R>
  requires(!std::is_same_v<std::remove_cvref_t<R>, borrowed_span> && std::is_constructible_v<std::span<T>, R&>)
      // NOLINTNEXTLINE(google-explicit-constructor,bugprone-forwarding-reference-overload)
      constexpr borrowed_span(R&& range) noexcept
      : std::span<T>(range) {
    static_assert(std::is_lvalue_reference_v<R> || std::ranges::borrowed_range<R>,
                  "actsparse: this argument would view a temporary container, destroyed at the end of the "
                  "statement (the span would dangle); pass a container that outlives the call, or a std::span");
  }
};

}  // namespace actsparse

template <class T>
inline constexpr bool std::ranges::enable_borrowed_range<actsparse::borrowed_span<T>> = true;
