#pragma once
// One value per layer, typically produced by calibration (a threshold, a mass, a k per layer)
// and saved next to the model. The text form is one "layer value" line per layer so that a
// person can read, diff and edit it; the parser is strict because a silently missing layer
// would run with a wrong value.

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
#include <vector>

namespace actsparse {

// The value types the text form supports.
template <class T>
concept per_layer_text_value = std::same_as<T, float> || std::same_as<T, double> || std::same_as<T, std::size_t>;

template <class T>
class per_layer_table {
  static_assert(!std::is_same_v<T, bool>,
                "per_layer_table<bool>: std::vector<bool> has no references; use "
                "per_layer_table<std::uint8_t> for per-layer flags");

 public:
  using value_type = T;

  per_layer_table() = default;
  explicit per_layer_table(std::vector<T> values) : values_(std::move(values)) {}

  // The value of one layer; throws for a layer past the end.
  [[nodiscard]] const T& at(std::size_t layer) const {
    if (layer >= values_.size()) {
      detail::fail("per_layer_table::at", "layer", layer,
                   "a layer below " + std::to_string(values_.size()) + " (the table has " +
                       std::to_string(values_.size()) + " layers)");
    }
    return values_[layer];
  }

  [[nodiscard]] std::size_t size() const noexcept { return values_.size(); }
  [[nodiscard]] bool empty() const noexcept { return values_.empty(); }
  [[nodiscard]] std::span<const T> values() const noexcept { return values_; }

  // Text: one "layer value" line per layer, in any order; blank lines and '#' comments (to the
  // end of the line) are ignored; spaces, tabs and a '\r' before '\n' separate tokens. Every
  // layer from 0 to the largest must appear exactly once. Values are decimal (float / double:
  // as std::from_chars reads them, no leading '+', in range, "inf" / "-inf" allowed (a
  // threshold of -inf keeps everything), NaN not; size_t: digits only).
  [[nodiscard]] static per_layer_table parse(std::string_view text) requires per_layer_text_value<T> {
    return parse_impl(text, "per_layer_table::parse", "text", "");
  }

  // The text form, exact: floats are printed with the fewest digits that read back the same value.
  [[nodiscard]] std::string to_string() const requires per_layer_text_value<T> {
    std::string s = "# layer value\n";
    for (std::size_t i = 0; i < values_.size(); ++i) {
      char buf[64];
      const auto r = std::to_chars(buf, buf + sizeof buf, values_[i]);
      s.append(std::to_string(i)).append(" ").append(buf, r.ptr).append("\n");
    }
    return s;
  }

  [[nodiscard]] static per_layer_table load(const std::filesystem::path& path) requires per_layer_text_value<T> {
    std::ifstream in(path, std::ios::binary);
    if (!in) detail::fail("per_layer_table::load", "path", path.string(), "a readable file");
    const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    if (in.bad()) detail::fail("per_layer_table::load", "path", path.string(), "a readable file (reading failed)");
    return parse_impl(text, "per_layer_table::load", "path", "\"" + path.string() + "\" ");
  }

  void save(const std::filesystem::path& path) const requires per_layer_text_value<T> {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    const std::string text = to_string();
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    out.close();
    if (!out) detail::fail("per_layer_table::save", "path", path.string(), "a writable file");
  }

  friend bool operator==(const per_layer_table&, const per_layer_table&) = default;

 private:
  struct entry {
    std::size_t layer;
    T value;
    std::size_t line;
  };

  static per_layer_table parse_impl(std::string_view text, std::string_view where, std::string_view argument,
                                    const std::string& source) {
    const auto bad = [&](std::size_t line, std::string_view content, std::string_view expected) {
      throw error(where, argument, source + "line " + std::to_string(line) + ": \"" + std::string(content) + "\"",
                  expected);
    };
    std::vector<entry> entries;
    std::size_t line_no = 0;
    while (!text.empty()) {
      ++line_no;
      const std::size_t eol = text.find('\n');
      std::string_view line = text.substr(0, eol);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
      const std::string_view content = line.substr(0, line.find('#'));
      std::string_view tokens[3];
      std::size_t count = 0;
      for (std::size_t i = 0; i < content.size();) {
        if (is_space(content[i])) {
          ++i;
          continue;
        }
        std::size_t j = i;
        while (j < content.size() && !is_space(content[j])) ++j;
        if (count == 3) break;
        tokens[count++] = content.substr(i, j - i);
        i = j;
      }
      if (count == 0) continue;  // blank or comment
      if (count != 2) bad(line_no, line, "two tokens, \"layer value\"");
      entry e{0, T{}, line_no};
      if (!read(tokens[0], e.layer)) bad(line_no, line, "a layer number (decimal digits) as the first token");
      if (!read(tokens[1], e.value)) {
        bad(line_no, line,
            std::is_floating_point_v<T> ? "a decimal number or +-inf (not NaN) as the value"
                                        : "a non-negative integer (decimal digits) as the value");
      }
      entries.push_back(e);
    }
    // Sorting (stable: equal layers keep their line order) turns both checks into one pass.
    std::stable_sort(entries.begin(), entries.end(), [](const entry& a, const entry& b) { return a.layer < b.layer; });
    std::vector<T> values;
    values.reserve(entries.size());
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const entry& e = entries[i];
      if (i > 0 && e.layer == entries[i - 1].layer) {
        throw error(where, argument,
                    source + "line " + std::to_string(e.line) + ": layer " + std::to_string(e.layer) +
                        " again (first given on line " + std::to_string(entries[i - 1].line) + ")",
                    "each layer exactly once (a duplicate layer)");
      }
      if (e.layer != i) {
        const entry& top = entries.back();
        throw error(where, argument,
                    source + "a table without layer " + std::to_string(i) + " (layers go up to " +
                        std::to_string(top.layer) + ", given on line " + std::to_string(top.line) + ")",
                    "one line for every layer from 0 to the largest (a missing layer)");
      }
      values.push_back(e.value);
    }
    return per_layer_table(std::move(values));
  }

  static constexpr bool is_space(char c) noexcept { return c == ' ' || c == '\t' || c == '\r'; }

  template <class V>
  static bool read(std::string_view token, V& out) noexcept {
    const char* end = token.data() + token.size();
    const auto r = std::from_chars(token.data(), end, out);
    if (r.ec != std::errc() || r.ptr != end) return false;
    if constexpr (std::is_floating_point_v<V>) return !std::isnan(out);
    return true;
  }

  std::vector<T> values_;
};

ACTSPARSE_REQUIRE_LAYER_SCHEDULE(per_layer_table<float>);
ACTSPARSE_REQUIRE_LAYER_SCHEDULE(per_layer_table<double>);
ACTSPARSE_REQUIRE_LAYER_SCHEDULE(per_layer_table<std::size_t>);

}  // namespace actsparse
