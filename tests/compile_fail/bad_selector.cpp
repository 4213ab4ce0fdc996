// expect: actsparse: this type is not a selector
#include <actsparse/core/concepts.hpp>

// select() takes the wrong arguments: not a selector.
struct not_a_selector {
  int select(int) const { return 0; }
};

template <class S>
void use_selector(const S&) {
  ACTSPARSE_REQUIRE_SELECTOR(S);
}

int main() { use_selector(not_a_selector{}); }
