#include "all_headers.hpp"

int odr_b() { return actsparse::to_f16(1.5F).bits; }
