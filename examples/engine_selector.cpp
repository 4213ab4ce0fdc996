// The README's example: an engine calls a scorer and a selector on its own buffer.
// (Kept in sync with README.md by hand; built by CMake so that it always compiles.)
#include <actsparse/scorers/silu_magnitude.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>

#include <cstdio>
#include <vector>

// gate: the engine's d_ff gate pre-activations for this token (its own memory).
void choose_neurons(const float* gate, std::size_t d_ff, actsparse::selection& kept) {
  thread_local std::vector<float> scores;  // grows once, then reused
  scores.resize(d_ff);
  actsparse::silu_magnitude{}.score(std::span<const float>(gate, d_ff), scores);
  actsparse::cumulative_mass{.mass = 0.9, .recent_n = 0, .min_keep = 32}.select(scores, kept);
  // kept.indices: sorted unique u32 neuron ids; kept.dense_fallback says if it gave up.
}

int main() {
  std::vector<float> gate(11008);
  for (std::size_t j = 0; j < gate.size(); ++j) gate[j] = static_cast<float>((j * 7919) % 1000) / 250.0F - 2.0F;
  actsparse::selection kept;
  choose_neurons(gate.data(), gate.size(), kept);
  std::printf("kept %zu of %zu neurons (%.1f%%), covering %.3f of the score mass\n", kept.size(), kept.universe,
              100.0 * kept.kept_fraction(), kept.covered_mass / kept.total_mass);
  return 0;
}
