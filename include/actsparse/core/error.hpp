#pragma once
// One error type for every bad input: it names the argument, the value that was
// passed and what was expected, so a user can fix the call from the message alone.

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace actsparse {

class error : public std::invalid_argument {
 public:
  error(std::string_view where, std::string_view argument, std::string value, std::string_view expected)
      : std::invalid_argument(format(where, argument, value, expected)),
        where_(where),
        argument_(argument),
        value_(std::move(value)),
        expected_(expected) {}

  [[nodiscard]] const std::string& where() const noexcept { return where_; }
  [[nodiscard]] const std::string& argument() const noexcept { return argument_; }
  [[nodiscard]] const std::string& value() const noexcept { return value_; }
  [[nodiscard]] const std::string& expected() const noexcept { return expected_; }

 private:
  static std::string format(std::string_view where, std::string_view argument, const std::string& value,
                            std::string_view expected) {
    std::string s = "actsparse::";
    s.append(where).append(": argument '").append(argument).append("' is ").append(value);
    s.append("; expected ").append(expected);
    return s;
  }

  std::string where_;
  std::string argument_;
  std::string value_;
  std::string expected_;
};

namespace detail {

// Renders any streamable value for an error message.
template <class T>
std::string to_text(const T& value) {
  if constexpr (std::is_convertible_v<const T&, std::string_view>) {
    std::string s(1, '"');  // built by appends: GCC 12 warns falsely (-Wrestrict) on operator+ chains
    s.append(std::string_view(value));
    s.push_back('"');
    return s;
  } else {
    std::ostringstream os;
    os.precision(9);
    os << value;
    return os.str();
  }
}

template <class T>
[[noreturn]] void fail(std::string_view where, std::string_view argument, const T& value, std::string_view expected) {
  throw error(where, argument, to_text(value), expected);
}

// For a value that is already a description ("a null data pointer"): not quoted.
[[noreturn]] inline void fail_described(std::string_view where, std::string_view argument, std::string description,
                                        std::string_view expected) {
  throw error(where, argument, std::move(description), expected);
}

template <class T>
void require(bool ok, std::string_view where, std::string_view argument, const T& value, std::string_view expected) {
  if (!ok) fail(where, argument, value, expected);
}

}  // namespace detail
}  // namespace actsparse
