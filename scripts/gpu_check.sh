#!/usr/bin/env bash
# The CUDA backend on a real GPU (docs/GPU.md): configures a Release build with the CUDA tests
# and the benchmark, runs the backend tests on the GPU against the reference (printing the
# largest error per kernel and dtype), then bench/bench_cuda at the Llama-2-7B FFN shapes.
# Results go to gpu-results/. Without a GPU (or a CUDA driver) it says "no CUDA device:
# <reason>" and exits 0.
#   scripts/gpu_check.sh            build, test, bench
#   BENCH_FILTER=REGEX scripts/gpu_check.sh   only the matching benchmark rows
# Needs: g++ (C++20), cmake >= 3.25, doctest, Eigen 3, Google Benchmark; libnvrtc (CUDA 12 or
# 13) and libcuda at run time (both opened with dlopen; no CUDA toolkit is needed to build).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

BUILD=${BUILD:-build/gpu}
OUT=${OUT:-gpu-results}
JOBS=${JOBS:-$(nproc)}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

echo "== configure ($BUILD, Release)"
cmake -S . -B "$BUILD" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="${CXX:-g++}" \
  -DACTSPARSE_BUILD_TESTS=ON -DACTSPARSE_BUILD_BENCH=ON -DACTSPARSE_BUILD_EXAMPLES=OFF >/dev/null
echo "== build (actsparse_cuda_gpu_tests, bench_cuda)"
cmake --build "$BUILD" -j "$JOBS" --target actsparse_cuda_gpu_tests bench_cuda >/dev/null

mkdir -p "$OUT"
echo "== backend tests on the GPU (against the oracle and the reference backend)"
set +e
"$BUILD/tests/actsparse_cuda_gpu_tests" --no-intro=true 2>&1 | tee "$OUT/gpu_tests.txt"
tests_rc=${PIPESTATUS[0]}
set -e
if grep -q "CUDA-SKIP: no CUDA device" "$OUT/gpu_tests.txt"; then
  grep -m1 -o "no CUDA device: .*" "$OUT/gpu_tests.txt"
  "$BUILD/bench/bench_cuda" --benchmark_filter='gemv_11008x4096/f16$' >/dev/null 2>&1 || true
  exit 0
fi

echo "== bench_cuda (d_model 4096, d_ff 11008)"
"$BUILD/bench/bench_cuda" --benchmark_filter="${BENCH_FILTER:-.}" --benchmark_out="$OUT/bench_cuda.json" \
  --benchmark_out_format=json --benchmark_counters_tabular=true | tee "$OUT/bench_cuda.txt"
echo "== wrote $OUT/gpu_tests.txt, $OUT/bench_cuda.txt, $OUT/bench_cuda.json"
exit "$tests_rc"
