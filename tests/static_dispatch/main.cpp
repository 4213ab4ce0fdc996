// The CPU backend built with static dispatch (one ISA per binary, as ggml builds): only
// the compile-time target exists. Checks it against the reference backend.
#define ACTSPARSE_CPU_IMPLEMENTATION
#define ACTSPARSE_CPU_STATIC_DISPATCH
#include <actsparse/backends/cpu/implementation.hpp>
#include <actsparse/backends/reference.hpp>

#include <cmath>
#include <cstdio>
#include <vector>

int main() {
  using namespace actsparse;
  const std::size_t rows = 70;
  const std::size_t cols = 45;
  std::vector<float> w(rows * cols);
  std::vector<float> x(cols);
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = std::sin(static_cast<float>(i) * 0.37F);
  for (std::size_t i = 0; i < cols; ++i) x[i] = std::cos(static_cast<float>(i) * 0.11F);
  const auto view = matrix_view<const float>::packed(w.data(), rows, cols);
  std::vector<float> got(rows);
  std::vector<float> want(rows);
  std::vector<float> workspace(cols);
  cpu::executor cpu_ex;
  inline_executor ex;
  if (!cpu_backend{}.run(gemv_args{view, x, got, subset::everything()}, {}, cpu_ex)) return 1;
  if (!reference_backend{}.run(gemv_args{view, x, want, subset::everything()},
                               std::as_writable_bytes(std::span<float>(workspace)), ex)) {
    return 1;
  }
  double worst = 0.0;
  for (std::size_t i = 0; i < rows; ++i) worst = std::fmax(worst, std::fabs(got[i] - want[i]));
  std::printf("static dispatch (%s): max |cpu - reference| = %g\n", hwy::TargetName(HWY_STATIC_TARGET), worst);
  return worst <= 1e-4 ? 0 : 1;
}
