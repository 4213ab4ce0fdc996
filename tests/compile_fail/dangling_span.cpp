// expect: this argument would view a temporary container
#include <actsparse/core/op_args.hpp>

#include <cstdint>
#include <vector>

std::vector<std::uint32_t> kept_rows() { return {1, 3}; }

int main() {
  // A subset over a temporary vector: the vector dies at the end of the statement.
  const actsparse::subset s = actsparse::subset::only(kept_rows());
  return static_cast<int>(s.indices.size());
}
