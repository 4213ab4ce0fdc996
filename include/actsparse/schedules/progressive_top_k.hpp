#pragma once
// MoE expert counts by depth, written the way people write them in configs and papers:
// "0-15:6,16-39:5,40-60:4" (layers 0..15 route each token to 6 experts, ...). The text is
// parsed strictly: a typo in a schedule silently changes a model, so every mistake is an
// error that points at the character where it is.

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace actsparse {

// Layers first..last (inclusive) use k experts per token.
struct layer_range_k {
  std::size_t first = 0;
  std::size_t last = 0;
  std::size_t k = 1;

  friend constexpr bool operator==(const layer_range_k&, const layer_range_k&) noexcept = default;
};

class progressive_top_k {
 public:
  using value_type = std::size_t;

  progressive_top_k() = default;  // covers no layer

  // Ranges in order, the first starting at layer 0, each starting right after the previous
  // one, k >= 1. Throws naming the first range that breaks a rule.
  explicit progressive_top_k(std::vector<layer_range_k> ranges) : ranges_(std::move(ranges)) {
    constexpr std::string_view where = "progressive_top_k";
    std::size_t next = 0;
    for (std::size_t i = 0; i < ranges_.size(); ++i) {
      const layer_range_k& r = ranges_[i];
      const std::string at = "ranges[" + std::to_string(i) + "]";
      if (r.first != next) {
        detail::fail(where, at, describe(r),
                     "a range starting at layer " + std::to_string(next) +
                         (r.first > next ? " (a gap leaves layers without k)" : " (ranges overlap)"));
      }
      if (r.last < r.first) detail::fail(where, at, describe(r), "last >= first");
      if (r.last == std::numeric_limits<std::size_t>::max()) detail::fail(where, at, describe(r), "a smaller last");
      if (r.k == 0) detail::fail(where, at, describe(r), "k >= 1");
      next = r.last + 1;
    }
  }

  // Parses "first-last:k" or "layer:k" ranges separated by ','. ASCII spaces are allowed
  // around every number and punctuation mark; nothing else is (no tabs, signs or newlines).
  [[nodiscard]] static progressive_top_k parse(std::string_view text);

  // The canonical text: no spaces, a one-layer range as "layer:k". parse(to_string()) == *this.
  [[nodiscard]] std::string to_string() const {
    std::string s;
    for (const layer_range_k& r : ranges_) {
      if (!s.empty()) s += ',';
      s += std::to_string(r.first);
      if (r.last != r.first) s += '-' + std::to_string(r.last);
      s += ':' + std::to_string(r.k);
    }
    return s;
  }

  // k for one layer; throws for a layer past the last range.
  [[nodiscard]] std::size_t at(std::size_t layer) const {
    if (layer >= num_layers()) {
      detail::fail("progressive_top_k::at", "layer", layer,
                   "a layer below " + std::to_string(num_layers()) + " (the schedule covers " +
                       std::to_string(num_layers()) + " layers" +
                       (ranges_.empty() ? std::string() : ": 0-" + std::to_string(num_layers() - 1)) + ")");
    }
    const auto it = std::lower_bound(ranges_.begin(), ranges_.end(), layer,
                                     [](const layer_range_k& r, std::size_t l) { return r.last < l; });
    return it->k;
  }

  [[nodiscard]] std::size_t num_layers() const noexcept { return ranges_.empty() ? 0 : ranges_.back().last + 1; }
  [[nodiscard]] std::span<const layer_range_k> ranges() const noexcept { return ranges_; }

  friend bool operator==(const progressive_top_k&, const progressive_top_k&) = default;

 private:
  static std::string describe(const layer_range_k& r) {
    return std::to_string(r.first) + "-" + std::to_string(r.last) + ":" + std::to_string(r.k);
  }

  std::vector<layer_range_k> ranges_;
};

ACTSPARSE_REQUIRE_LAYER_SCHEDULE(progressive_top_k);

namespace detail {

// A cursor over the schedule text that reports errors at an offset.
class progressive_parser {
 public:
  explicit progressive_parser(std::string_view text) noexcept : text_(text) {}

  [[noreturn]] void fail_at(std::size_t pos, std::string_view expected) const {
    std::string value = "\"" + std::string(text_) + "\", at offset " + std::to_string(pos);
    if (pos < text_.size()) {
      value += " near \"" + std::string(text_.substr(pos, 12)) + (text_.size() - pos > 12 ? "...\"" : "\"");
    } else {
      value += " (the end of the text)";
    }
    throw error("progressive_top_k::parse", "text", value, expected);
  }

  void skip_spaces() noexcept {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }
  [[nodiscard]] bool at_end() const noexcept { return pos_ == text_.size(); }
  [[nodiscard]] std::size_t pos() const noexcept { return pos_; }
  [[nodiscard]] bool accept(char c) noexcept {
    if (pos_ < text_.size() && text_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }

  // A decimal number (digits only); `what` names it in errors.
  std::size_t number(std::string_view what) {
    skip_spaces();
    const std::size_t start = pos_;
    if (at_end() || text_[pos_] < '0' || text_[pos_] > '9') fail_at(start, std::string(what) + " (decimal digits)");
    std::size_t value = 0;
    constexpr std::size_t max = std::numeric_limits<std::size_t>::max();
    for (; pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9'; ++pos_) {
      const auto digit = static_cast<std::size_t>(text_[pos_] - '0');
      if (value > (max - digit) / 10) {
        fail_at(start, std::string(what) + " <= " + std::to_string(max) + " (the number overflows)");
      }
      value = value * 10 + digit;
    }
    skip_spaces();
    return value;
  }

 private:
  std::string_view text_;
  std::size_t pos_ = 0;
};

}  // namespace detail

inline progressive_top_k progressive_top_k::parse(std::string_view text) {
  detail::progressive_parser p(text);
  p.skip_spaces();
  if (p.at_end()) p.fail_at(p.pos(), "at least one range 'first-last:k' or 'layer:k'");
  std::vector<layer_range_k> ranges;
  std::size_t next = 0;  // the layer the next range must start at
  for (;;) {
    p.skip_spaces();
    const std::size_t first_pos = p.pos();
    layer_range_k r;
    r.first = p.number("a layer number");
    r.last = r.first;
    std::size_t last_pos = first_pos;
    const bool is_range = p.accept('-');
    if (is_range) {
      p.skip_spaces();
      last_pos = p.pos();
      r.last = p.number("the last layer of the range");
      if (r.last < r.first) {
        p.fail_at(last_pos, "a last layer >= the first (" + std::to_string(r.first) + "-" + std::to_string(r.last) +
                                " is reversed)");
      }
    }
    if (!p.accept(':')) p.fail_at(p.pos(), is_range ? "':' after a range" : "'-' or ':' after a layer number");
    p.skip_spaces();
    const std::size_t k_pos = p.pos();
    r.k = p.number("k (experts per token)");
    if (r.k == 0) p.fail_at(k_pos, "k >= 1 (a layer must use at least one expert)");
    if (r.first > next) {
      const std::string missing =
          r.first - 1 == next ? "layer " + std::to_string(next) + " has no k"
                              : "layers " + std::to_string(next) + "-" + std::to_string(r.first - 1) + " have no k";
      p.fail_at(first_pos, next == 0 ? "the first range to start at layer 0 (gap before layer " +
                                           std::to_string(r.first) + ": " + missing + ")"
                                     : "a range starting at layer " + std::to_string(next) + " (gap: " + missing + ")");
    }
    if (r.first < next) {
      p.fail_at(first_pos, "a range starting at layer " + std::to_string(next) + " (overlap: layer " +
                               std::to_string(r.first) + " is already in a range)");
    }
    if (r.last == std::numeric_limits<std::size_t>::max()) {
      p.fail_at(last_pos, "a last layer below " + std::to_string(std::numeric_limits<std::size_t>::max()));
    }
    next = r.last + 1;
    ranges.push_back(r);
    if (p.at_end()) break;
    const std::size_t comma_pos = p.pos();
    if (!p.accept(',')) p.fail_at(comma_pos, "',' and another range, or the end of the text (trailing garbage)");
    p.skip_spaces();
    if (p.at_end()) p.fail_at(comma_pos, "another range after ',' (trailing comma)");
  }
  return progressive_top_k(std::move(ranges));
}

}  // namespace actsparse
