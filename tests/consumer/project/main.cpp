// A consumer program: an engine's own buffer, a selector, the reference backend.
#include <actsparse/backends/reference.hpp>
#include <actsparse/scorers/magnitude.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <cstdio>
#include <vector>

int main() {
  std::vector<float> x = {0.1F, -3.0F, 0.5F, 2.0F, 0.0F, -0.2F};
  std::vector<float> scores(x.size());
  const actsparse::magnitude scorer{};
  scorer.score(std::span<const float>(x), scores);
  const auto sel = actsparse::top_k::by_count(2).select(scores);
  std::printf("kept %zu of %zu: %u %u\n", sel.size(), sel.universe, sel.indices[0], sel.indices[1]);
  return (sel.size() == 2 && sel.indices[0] == 1 && sel.indices[1] == 3) ? 0 : 1;
}
