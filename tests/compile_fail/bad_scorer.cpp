// expect: actsparse: this type is not an importance_scorer
#include <actsparse/core/concepts.hpp>

#include <span>

// Has score() but no input_type and no score_count(): not an importance_scorer.
struct not_a_scorer {
  void score(std::span<const float>, std::span<float>) const {}
};

template <class S>
void use_scorer(const S&) {
  ACTSPARSE_REQUIRE_IMPORTANCE_SCORER(S);
}

int main() { use_scorer(not_a_scorer{}); }
