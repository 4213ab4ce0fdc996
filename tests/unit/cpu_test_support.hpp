#pragma once
// Shared by the CPU backend's tests: run a check once per Highway target.

#include <doctest/doctest.h>
#include <hwy/targets.h>

#include <cstdint>
#include <string>

namespace cpu_test {

// Runs f once for every Highway target this CPU supports and this program compiled, each
// time with dynamic dispatch forced to that target, then once more with the default.
template <class F>
void for_each_target(F&& f) {
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string target_name = hwy::TargetName(target);
    INFO("target ", target_name);
    f();
  }
  // SupportedAndGeneratedTargets() is computed in this translation unit, which does not
  // build AVX3_DL; the implementation unit does. One more pass with the default dispatch
  // runs the best target the implementation compiled (AVX3_DL on a CPU with VNNI).
  hwy::SetSupportedTargetsForTest(0);
  INFO("target: the default dispatch");
  f();
}

}  // namespace cpu_test
