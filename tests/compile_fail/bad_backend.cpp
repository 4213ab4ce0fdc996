// expect: actsparse: this type is not a backend for this operation
#include <actsparse/core/concepts.hpp>
#include <actsparse/core/op_args.hpp>

// Has the traits but no run() for gated_ffn_args.
struct not_a_backend {
  using executor_type = actsparse::inline_executor;
  static constexpr std::string_view name = "nothing";
  using memory_space = actsparse::host_memory;
};

template <class B>
void use_backend(const B&) {
  ACTSPARSE_REQUIRE_BACKEND_FOR(B, actsparse::gated_ffn_args);
}

int main() { use_backend(not_a_backend{}); }
