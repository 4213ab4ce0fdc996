// expect: actsparse: this type is not a layer_schedule
#include <actsparse/core/concepts.hpp>

// at() exists but there is no value_type.
struct not_a_schedule {
  int at(std::size_t) const { return 0; }
};

template <class S>
void use_schedule(const S&) {
  ACTSPARSE_REQUIRE_LAYER_SCHEDULE(S);
}

int main() { use_schedule(not_a_schedule{}); }
