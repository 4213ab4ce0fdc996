#pragma once
// Sorted unique u32 row indices, and the contiguous spans a kernel actually reads.

#include <actsparse/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

namespace actsparse {

// Sorted, unique u32 indices (rows of a weight matrix, tokens, experts).
class index_set {
 public:
  index_set() = default;

  // Takes indices that are already sorted and unique; checks that they are.
  static index_set from_sorted(std::vector<std::uint32_t> indices) {
    for (std::size_t i = 1; i < indices.size(); ++i) {
      if (indices[i - 1] >= indices[i]) {
        std::string got = "[";  // appends, not an operator+ chain: GCC 12 -O3 warns falsely (-Wrestrict)
        got.append(std::to_string(i - 1)).append("] = ").append(std::to_string(indices[i - 1]));
        got.append(" followed by [").append(std::to_string(i)).append("] = ").append(std::to_string(indices[i]));
        detail::fail_described("index_set::from_sorted", "indices", std::move(got),
                               "strictly increasing indices (sorted, no duplicates)");
      }
    }
    index_set s;
    s.indices_ = std::move(indices);
    return s;
  }

  // Sorts and removes duplicates.
  static index_set from_unsorted(std::vector<std::uint32_t> indices) {
    std::sort(indices.begin(), indices.end());
    indices.erase(std::unique(indices.begin(), indices.end()), indices.end());
    index_set s;
    s.indices_ = std::move(indices);
    return s;
  }

  // 0, 1, ..., n-1.
  static index_set all(std::size_t n) {
    detail::require(n <= std::numeric_limits<std::uint32_t>::max(), "index_set::all", "n", n,
                    "n <= 2^32 - 1 (indices are u32)");
    std::vector<std::uint32_t> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint32_t>(i);
    index_set s;
    s.indices_ = std::move(v);
    return s;
  }

  [[nodiscard]] std::span<const std::uint32_t> indices() const noexcept { return indices_; }
  [[nodiscard]] std::size_t size() const noexcept { return indices_.size(); }
  [[nodiscard]] bool empty() const noexcept { return indices_.empty(); }
  [[nodiscard]] bool contains(std::uint32_t i) const noexcept {
    return std::binary_search(indices_.begin(), indices_.end(), i);
  }
  [[nodiscard]] auto begin() const noexcept { return indices_.begin(); }
  [[nodiscard]] auto end() const noexcept { return indices_.end(); }
  std::uint32_t operator[](std::size_t i) const noexcept { return indices_[i]; }
  friend bool operator==(const index_set&, const index_set&) = default;

 private:
  std::vector<std::uint32_t> indices_;
};

// A contiguous range of rows [begin, end).
struct index_span {
  std::uint32_t begin = 0;
  std::uint32_t end = 0;
  [[nodiscard]] constexpr std::uint32_t size() const noexcept { return end - begin; }
  friend constexpr bool operator==(index_span, index_span) = default;
};

// Disjoint ascending spans.
class span_list {
 public:
  [[nodiscard]] std::span<const index_span> spans() const noexcept { return spans_; }
  [[nodiscard]] std::size_t size() const noexcept { return spans_.size(); }
  [[nodiscard]] bool empty() const noexcept { return spans_.empty(); }
  [[nodiscard]] auto begin() const noexcept { return spans_.begin(); }
  [[nodiscard]] auto end() const noexcept { return spans_.end(); }
  const index_span& operator[](std::size_t i) const noexcept { return spans_[i]; }

  // Rows the spans cover, gaps that were merged in included: the rows a kernel reads.
  [[nodiscard]] std::size_t rows_read() const noexcept {
    std::size_t n = 0;
    for (const auto& s : spans_) n += s.size();
    return n;
  }

  void clear() noexcept { spans_.clear(); }
  // Appends a span after the last one (callers keep them ascending and disjoint).
  void push_back(index_span s) { spans_.push_back(s); }
  friend bool operator==(const span_list&, const span_list&) = default;

 private:
  std::vector<index_span> spans_;
};

// Merges sorted unique indices into spans, joining two neighbours when the rows between
// them number at most max_gap: reading a short gap is cheaper than issuing a new request.
// max_gap = 0 joins only touching indices. Writes into `out` (its memory is reused).
inline void coalesce(std::span<const std::uint32_t> sorted_indices, std::uint32_t max_gap, span_list& out) {
  out.clear();
  if (sorted_indices.empty()) return;
  index_span cur{sorted_indices[0], sorted_indices[0] + 1};
  for (std::size_t i = 1; i < sorted_indices.size(); ++i) {
    const std::uint32_t idx = sorted_indices[i];
    if (idx < cur.end) {
      std::string got = "index ";
      got.append(std::to_string(idx)).append(" at position ").append(std::to_string(i));
      got.append(" after ").append(std::to_string(cur.end - 1));
      detail::fail_described("coalesce", "sorted_indices", std::move(got), "strictly increasing indices");
    }
    if (idx - cur.end <= max_gap) {
      cur.end = idx + 1;
    } else {
      out.push_back(cur);
      cur = {idx, idx + 1};
    }
  }
  out.push_back(cur);
}

[[nodiscard]] inline span_list coalesce(const index_set& set, std::uint32_t max_gap) {
  span_list out;
  coalesce(set.indices(), max_gap, out);
  return out;
}

}  // namespace actsparse
