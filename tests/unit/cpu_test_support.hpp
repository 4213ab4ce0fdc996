#pragma once
// Shared by the CPU backend's tests: run a check once per Highway target.

#include <doctest/doctest.h>
#include <hwy/targets.h>

#include <cstdint>
#include <string>

namespace cpu_test {

// Runs f once for every Highway target this CPU supports and this program compiled, each
// time with dynamic dispatch forced to that target; restores the default afterwards.
template <class F>
void for_each_target(F&& f) {
  for (const std::int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string target_name = hwy::TargetName(target);
    INFO("target ", target_name);
    f();
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace cpu_test
