// Two translation units include every public header: a non-inline definition in a header
// would be a duplicate symbol when they are linked together.
#include "all_headers.hpp"

#include <cstdio>

int odr_b();

int main() {
  const actsparse::f16 h = actsparse::to_f16(1.5F);
  const int b = odr_b();
  std::printf("odr: %d %d\n", static_cast<int>(h.bits), b);
  return (h.bits == 0x3e00 && b == 0x3e00) ? 0 : 1;
}
