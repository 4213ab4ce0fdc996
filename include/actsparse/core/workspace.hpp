#pragma once
// The caller's workspace, as backends take it: checked once per call (size and address, each
// with its own message), and cut into aligned regions by a bump layout that workspace_size and
// run both compute from the same plan.

#include <actsparse/core/error.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace actsparse {

// Regions of a workspace, laid out front to back: take(n, align) returns the offset of n bytes
// at a multiple of `align` from the start; `bytes` is the total. Offsets are relative to the
// workspace's start, so the start must be aligned to the largest `align` taken.
struct workspace_layout {
  std::size_t bytes = 0;

  std::size_t take(std::size_t n, std::size_t align) noexcept {
    bytes = (bytes + align - 1) / align * align;
    const std::size_t at = bytes;
    bytes += n;
    return at;
  }
};

namespace detail {

// The workspace's start, after checking that it holds `bytes` and that its address is a
// multiple of `alignment` (two errors: a short workspace and a misaligned one are different
// mistakes). A call that needs no scratch accepts any workspace.
[[nodiscard]] inline std::byte* checked_workspace(std::span<std::byte> workspace, std::size_t bytes,
                                                  std::size_t alignment, std::string_view where) {
  if (bytes == 0) return workspace.data();
  if (workspace.size() < bytes) {
    fail(where, "workspace.size()", workspace.size(),
         "at least " + std::to_string(bytes) + " bytes (workspace_size(args) for these arguments)");
  }
  if (reinterpret_cast<std::uintptr_t>(workspace.data()) % alignment != 0) {
    fail(where, "workspace.data()", static_cast<const void*>(workspace.data()),
         "an address that is a multiple of " + std::to_string(alignment) +
             " bytes (std::vector<std::byte> and operator new give at least 16)");
  }
  return workspace.data();
}

}  // namespace detail
}  // namespace actsparse
