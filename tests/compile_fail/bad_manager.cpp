// expect: actsparse: this type is not an activation_manager
#include <actsparse/core/concepts.hpp>

// Stores rows but cannot promote, demote or report its bytes.
struct not_a_manager {
  std::size_t row_size() const { return 0; }
  void store(std::uint64_t, std::span<const float>) {}
};

template <class M>
void use_manager(const M&) {
  ACTSPARSE_REQUIRE_ACTIVATION_MANAGER(M);
}

int main() { use_manager(not_a_manager{}); }
