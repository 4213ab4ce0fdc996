// The cuda_backend without a GPU. (a) With no driver: context creation says "no CUDA device"
// and why, and can_implement answers not_handled with that reason. (b) On the fake driver
// (fake_driver.hpp: host memory, the generated kernels run under the CPU emulation, looked up
// by name): every operation and the ops-layer operators against the double-precision oracle
// (the bounds the reference backend meets) and the reference backend, every dtype, odd
// shapes; a subset listing every index equals dense bit for bit; argument order, grids,
// split-K and workspace layout are exercised as the driver would see them.
//
// Built with ACTSPARSE_CUDA_REAL_DEVICE (actsparse_cuda_gpu_tests, scripts/gpu_check.sh), the
// same cases run on the real driver and GPU with the default kernel shapes and larger sizes;
// without a device each prints "CUDA-SKIP: no CUDA device: <reason>".
#include "fake_driver.hpp"
#include "fake_tuning.hpp"
#include "test_reference_support.hpp"

#include <actsparse/backends/cuda/backend.hpp>
#include <actsparse/backends/cuda/context.hpp>
#include <actsparse/backends/cuda/driver.hpp>
#include <actsparse/backends/reference.hpp>
#include <actsparse/core/select_args.hpp>
#include <actsparse/ops/input_sparse_linear.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>
#include <actsparse/ops/run.hpp>
#include <actsparse/ops/token_sparse_ffn.hpp>
#include <actsparse/scorers/magnitude.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>
#include <actsparse/selectors/threshold.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace cuda = actsparse::cuda;
namespace gpu = actsparse::gpu;
using namespace reference_test;
using actsparse_cuda_test::fake_driver;
using actsparse_cuda_test::fake_stats;
using actsparse_cuda_test::fake_tuned_backend;

namespace {

// The generated source itself as the module "image" (the fake driver looks for the kernel's
// name in it): NVRTC takes ~0.5 s per config on a loaded 2-core machine, and compiling every
// op x dtype is the cuda-compile tests' job. With real_nvrtc (and NVRTC installed) the image
// is NVRTC's PTX for the fake device's compute_90.
cuda::context fake_context(std::string cache_dir = {}, bool real_nvrtc = false) {
  cuda::context_options o;
  o.cache_dir = std::move(cache_dir);
  if (!real_nvrtc || !cuda::nvrtc_info().available) {
    o.compile = [](const std::string& source, const std::string&) { return source; };
  }
  return cuda::context::create(std::move(o));
}

#ifdef ACTSPARSE_CUDA_REAL_DEVICE
constexpr bool real_device = true;
#else
constexpr bool real_device = false;
#endif

// The device a test runs on: the fake driver with the small kernel shapes, or (GPU check) the
// real one with the defaults. False when there is none (the test then returns).
struct test_device {
  std::optional<cuda::scoped_driver> guard;
  std::optional<cuda::context> ctx;
  cuda_backend backend;

  test_device() {
    if (!real_device) {
      guard.emplace(fake_driver());
      ctx.emplace(fake_context());
      backend = fake_tuned_backend();
      return;
    }
    const cuda::probe_result p = cuda::context::probe();
    if (!p.available) {
      std::printf("CUDA-SKIP: %s\n", p.reason.c_str());
      return;
    }
    ctx.emplace(cuda::context::create());
    backend = cuda_backend::for_device(*ctx);
  }
  explicit operator bool() const noexcept { return ctx.has_value(); }
};

// Larger shapes on a real GPU: many blocks, many splits.
template <class Shapes>
Shapes with_large(Shapes shapes, typename Shapes::value_type large) {
  if (real_device) shapes.push_back(large);
  return shapes;
}

// A copy of host data in managed memory (host memory on the fake driver).
template <class T>
cuda::buffer to_device(cuda::context& ctx, std::span<const T> host) {
  cuda::buffer b(ctx, std::max<std::size_t>(host.size_bytes(), 4));
  if constexpr (std::is_same_v<T, std::uint32_t>) b.advise_read_mostly(ctx);  // index lists
  ctx.copy_to_device(b.data(), host.data(), host.size_bytes());
  ctx.synchronize();
  return b;
}

struct device_weights {
  cuda::buffer memory;
  weight_view view;
};
device_weights to_device(cuda::context& ctx, const test_weights& w) {
  device_weights d{to_device<std::byte>(ctx, w.storage), w.view};
  d.view.data = d.memory.data();
  return d;
}

template <class T>
std::span<const T> cview(const cuda::buffer& b, std::size_t n) {
  return {static_cast<const T*>(b.data()), n};
}
template <class T>
std::span<T> mview(const cuda::buffer& b, std::size_t n) {
  return {static_cast<T*>(b.data()), n};
}

// Runs op on the backend with a workspace of exactly workspace_size(args) bytes (0xFF filled).
template <class Backend, class Args>
actsparse::status run(const Backend& b, const Args& args, typename Backend::executor_type& ex) {
  REQUIRE(b.can_implement(args).handled());
  const std::size_t need = b.workspace_size(args);
  std::vector<std::uint32_t> ws((need + 3) / 4, 0xFFFFFFFFU);
  return b.run(args, std::as_writable_bytes(std::span(ws)).first(need), ex);
}
template <class Args>
actsparse::status run_cuda(const cuda_backend& b, const Args& args, cuda::context& ctx) {
  REQUIRE(b.can_implement(args).handled());
  const std::size_t need = b.workspace_size(args);
  cuda::buffer ws(ctx, need, cuda::memory_kind::device);
  return b.run(args, ws.bytes(), ctx);
}

// The largest |a − b| seen per (kernel, dtype): printed at the end of a test case.
std::map<std::string, double>& max_errors() {
  static std::map<std::string, double> m;
  return m;
}
void note(const std::string& what, dtype t, std::span<const float> got, std::span<const float> want) {
  double e = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) e = std::max(e, std::abs(double(got[i]) - double(want[i])));
  double& m = max_errors()[what + " " + std::string(actsparse::name(t))];
  m = std::max(m, e);
}
void print_errors(const char* title) {
  std::printf("%s: max |cuda - reference|\n", title);
  for (const auto& [k, v] : max_errors()) std::printf("  %-32s %.3g\n", k.c_str(), v);
  max_errors().clear();
}

std::vector<float> reference_gemv(const weight_view& w, std::span<const float> x, const subset& rows) {
  std::vector<float> y(rows.count(w.rows));
  inline_executor ex;
  REQUIRE(run(reference_backend{}, gemv_args{w, x, y, rows}, ex));
  return y;
}

// Row lengths (cols) and counts (rows) to test: odd ones for the scalar types.
std::vector<std::array<std::size_t, 2>> gemv_shapes(dtype t) {
  if (block_values(t) == 1) return {{13, 7}, {37, 33}, {5, 70}};
  return {{13, 32}, {37, 96}};
}

}  // namespace

TEST_CASE("cuda backend: without a CUDA driver, 'no CUDA device' and the reason, not_handled") {
  if (cuda::driver().available) {
    std::printf("CUDA-SKIP: a CUDA driver is installed here (%s); this test is for machines without one\n",
                cuda::driver().library.c_str());
    return;
  }
  const cuda::probe_result p = cuda::context::probe();
  CHECK_FALSE(p.available);
  CHECK(p.reason == "no CUDA device: no CUDA driver (libcuda.so.1 not found)");
  CHECK_THROWS_WITH_AS((void)cuda::context::create(), "no CUDA device: no CUDA driver (libcuda.so.1 not found)",
                       cuda::unavailable);
  std::vector<float> x(32);
  std::vector<float> y(4);
  std::vector<float> w(4 * 32);
  const gemv_args a{matrix_view<const float>::packed(w.data(), 4, 32), x, y, subset::everything()};
  const status s = cuda_backend{}.can_implement(a);
  CHECK_FALSE(s.handled());
  CHECK(s.reason == "no CUDA driver (libcuda.so.1 not found)");
}

TEST_CASE("cuda backend (fake driver): context, device info, module cache, driver errors name the call") {
  if (real_device) return;  // fault injection and the fake's figures
  const cuda::scoped_driver guard(fake_driver());
  {
    actsparse_cuda_test::fake_set_device_count(0);
    const cuda::probe_result p = cuda::context::probe();
    CHECK(p.reason == "no CUDA device: the CUDA driver reports no device");
    CHECK_THROWS_AS((void)cuda::context::create(), cuda::unavailable);
    actsparse_cuda_test::fake_set_device_count(1);
    actsparse_cuda_test::fake_fail_next("cuInit", 1);
    CHECK(cuda::context::probe().reason ==
          "no CUDA device: cuInit failed: CUDA_ERROR_INVALID_VALUE: fake driver error");
  }
  const std::size_t live = fake_stats().live_allocations;
  {
    cuda::context ctx = fake_context({}, true);
    CHECK(ctx.info().name == "actsparse fake device (CPU emulation)");
    CHECK(ctx.info().major == 9);
    CHECK(ctx.info().multiprocessors == 2);
    CHECK(ctx.info().nominal_gbps() == doctest::Approx(16.0));  // 1 GHz × 8 bytes × 2
    if (cuda::nvrtc_info().available) CHECK(ctx.info().arch == "compute_90");
    CHECK(cuda_backend::for_device(ctx).parallel_blocks == 8);

    actsparse_cuda_test::fake_fail_next("cuMemAlloc_v2", 2);
    CHECK_THROWS_WITH_AS(cuda::buffer(ctx, 64, cuda::memory_kind::device),
                         "actsparse::cuda: cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY: out of memory (CUresult 2)",
                         cuda::driver_error);
    cuda::buffer b(ctx, 64);
    CHECK(fake_stats().live_allocations == live + 1);
    cuda::buffer moved = std::move(b);
    CHECK(moved.size() == 64);
    CHECK(b.data() == nullptr);  // NOLINT(bugprone-use-after-move): moved-from is empty

    // Compiled once per config, then from the in-memory cache.
    const cuda_backend tuned = fake_tuned_backend();
    const gpu::kernel_config c{gpu::kernel_op::gemv, dtype::f16, activation::silu, tuned.threads_per_block,
                               tuned.rows_per_warp};
    const auto& f1 = ctx.functions(c);
    const auto& f2 = ctx.functions(c);
    CHECK(f1 == f2);
    CHECK(ctx.cache_stats().modules == 1);
    CHECK(ctx.cache_stats().hits == 1);
    // A kernel the driver cannot find is an error naming the call and the kernel.
    const gpu::kernel_config unknown{gpu::kernel_op::gemv, dtype::f16, activation::silu, 1024, 8};
    CHECK_THROWS_WITH_AS((void)ctx.functions(unknown),
                         doctest::Contains("cuModuleGetFunction(actsparse_gemv_f16_t1024_r8) failed: "
                                           "CUDA_ERROR_NOT_FOUND"),
                         cuda::driver_error);
    actsparse_cuda_test::fake_fail_next("cuLaunchKernel", 1);
    std::vector<float> x(32, 1.0F);
    std::vector<float> y(4);
    std::vector<float> w(4 * 32, 1.0F);
    const gemv_args a{matrix_view<const float>::packed(w.data(), 4, 32), x, y, subset::everything()};
    CHECK_THROWS_WITH_AS((void)fake_tuned_backend().run(a, {}, ctx), doctest::Contains("cuLaunchKernel failed"),
                         cuda::driver_error);
  }
  CHECK(fake_stats().live_allocations == live);  // buffers freed
  CHECK(fake_stats().modules_live == 0);         // modules unloaded with the context

  // The on-disk PTX cache: a second context reads what the first compiled.
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("actsparse_ptx_cache_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const gpu::kernel_config c{gpu::kernel_op::gather_values, dtype::f32, activation::silu, 32, 1};
  {
    cuda::context ctx = fake_context(dir.string());
    (void)ctx.functions(c);
    CHECK(ctx.cache_stats().compiles == 1);
    CHECK(ctx.cache_stats().disk_hits == 0);
  }
  {
    cuda::context ctx = fake_context(dir.string());
    (void)ctx.functions(c);
    CHECK(ctx.cache_stats().compiles == 0);
    CHECK(ctx.cache_stats().disk_hits == 1);
  }
  CHECK(std::distance(fs::directory_iterator(dir), fs::directory_iterator{}) == 1);
  fs::remove_all(dir);
}

TEST_CASE("cuda backend (fake driver): gemv dense and gather, every dtype") {
  test_device dev;
  if (!dev) return;
  cuda::context& ctx = *dev.ctx;
  const cuda_backend& b = dev.backend;
  std::mt19937 rng(11);
  for (const dtype t : all_dtypes) {
    for (const auto& [rows, cols] : with_large(gemv_shapes(t), {2816, 1024})) {
      CAPTURE(actsparse::name(t));
      CAPTURE(rows);
      CAPTURE(cols);
      const test_weights w = make_weights(t, rows, cols, rng, 1);  // strided, padding 0xFF (NaN)
      const device_weights dw = to_device(ctx, w);
      const std::vector<float> xh = random_vector(cols, rng);
      const cuda::buffer x = to_device<float>(ctx, xh);
      cuda::buffer y(ctx, rows * 4);
      REQUIRE(run_cuda(b, gemv_args{dw.view, cview<float>(x, cols), mview<float>(y, rows), subset::everything()}, ctx));
      const std::span<const float> dense = cview<float>(y, rows);
      check_within(dense, gemv_oracle(w.values, xh, subset::everything()));
      note("gemv", t, dense, reference_gemv(w.view, xh, subset::everything()));

      const std::vector<std::uint32_t> kept = random_subset(rows, 0.5, rng);
      const cuda::buffer idx = to_device<std::uint32_t>(ctx, kept);
      const subset s = subset::only(cview<std::uint32_t>(idx, kept.size()));
      cuda::buffer yg(ctx, std::max<std::size_t>(kept.size(), 1) * 4);
      REQUIRE(run_cuda(b, gemv_args{dw.view, cview<float>(x, cols), mview<float>(yg, kept.size()), s}, ctx));
      for (std::size_t k = 0; k < kept.size(); ++k) CHECK(mview<float>(yg, kept.size())[k] == dense[kept[k]]);
      note("gather_gemv", t, cview<float>(yg, kept.size()), reference_gemv(w.view, xh, subset::only(kept)));
    }
  }
  print_errors("gemv");
}

TEST_CASE("cuda backend (fake driver): transposed linear dense, sparse, split-K, and linear_args") {
  test_device dev;
  if (!dev) return;
  cuda::context& ctx = *dev.ctx;
  std::mt19937 rng(12);
  cuda_backend fixed = dev.backend;
  fixed.rows_per_split = 5;  // many splits, the last one short
  for (const cuda_backend& b : {dev.backend, fixed}) {
    for (const dtype t : all_dtypes) {
      for (const auto& [in, out] : with_large(gemv_shapes(t), {2816, 1024})) {
        CAPTURE(actsparse::name(t));
        CAPTURE(in);
        CAPTURE(out);
        CAPTURE(b.rows_per_split);
        const test_weights wt = make_weights(t, in, out, rng);
        const device_weights dwt = to_device(ctx, wt);
        const Eigen::MatrixXd w = wt.values.transpose();
        const std::vector<float> xh = random_vector(in, rng);
        const cuda::buffer x = to_device<float>(ctx, xh);
        cuda::buffer y(ctx, out * 4);
        const auto yv = mview<float>(y, out);
        REQUIRE(run_cuda(b, transposed_linear_args{dwt.view, cview<float>(x, in), yv, subset::everything()}, ctx));
        check_within(yv, linear_oracle(w, xh, subset::everything()));
        const std::vector<float> dense(yv.begin(), yv.end());

        for (const double density : {0.0, 0.3, 1.0}) {
          CAPTURE(density);
          const std::vector<std::uint32_t> kept = density == 1.0 ? all_indices(in) : random_subset(in, density, rng);
          const cuda::buffer idx = to_device<std::uint32_t>(ctx, kept);
          const subset s = subset::only(cview<std::uint32_t>(idx, kept.size()));
          REQUIRE(run_cuda(b, transposed_linear_args{dwt.view, cview<float>(x, in), yv, s}, ctx));
          check_within(yv, linear_oracle(w, xh, subset::only(kept)));
          if (density == 1.0) CHECK(same_bits(yv, dense));  // keep-all is dense, bit for bit
          std::vector<float> want(out);
          inline_executor ex;
          REQUIRE(run(reference_backend{}, transposed_linear_args{wt.view, xh, want, subset::only(kept)}, ex));
          note(b.rows_per_split > 0 ? "row_axpy split 5" : "row_axpy auto", t, yv, want);
        }
      }
    }
  }
  // linear_args over W [out × in]: the dropped inputs zeroed, then a GEMV.
  const cuda_backend& b = dev.backend;
  for (const dtype t : all_dtypes) {
    const auto [out, in] = gemv_shapes(t).back();
    CAPTURE(actsparse::name(t));
    const test_weights w = make_weights(t, out, in, rng);
    const device_weights dw = to_device(ctx, w);
    const std::vector<float> xh = random_vector(in, rng);
    const cuda::buffer x = to_device<float>(ctx, xh);
    const std::vector<std::uint32_t> kept = random_subset(in, 0.4, rng);
    const cuda::buffer idx = to_device<std::uint32_t>(ctx, kept);
    cuda::buffer y(ctx, out * 4);
    const auto yv = mview<float>(y, out);
    REQUIRE(run_cuda(
        b, linear_args{dw.view, cview<float>(x, in), yv, subset::only(cview<std::uint32_t>(idx, kept.size()))}, ctx));
    check_within(yv, linear_oracle(w.values, xh, subset::only(kept)));
  }
  print_errors("transposed linear");
}

namespace {

struct ffn_case {
  test_weights gate, up, down, down_t;
  Eigen::MatrixXd down_of_t;  // down_t's values transposed: the W_down it stands for
};

ffn_case make_ffn(dtype t, std::size_t d_model, std::size_t d_ff, std::mt19937& rng) {
  ffn_case f{make_weights(t, d_ff, d_model, rng),
             make_weights(t, d_ff, d_model, rng),
             make_weights(t, d_model, d_ff, rng),
             make_weights(t, d_ff, d_model, rng),
             {}};
  f.down_of_t = f.down_t.values.transpose();
  return f;
}

}  // namespace

TEST_CASE("cuda backend (fake driver): gated FFN dense and neuron-sparse, with and without gate_act") {
  test_device dev;
  if (!dev) return;
  cuda::context& ctx = *dev.ctx;
  const cuda_backend& b = dev.backend;
  std::mt19937 rng(13);
  for (const dtype t : all_dtypes) {
    const std::vector<std::array<std::size_t, 2>> shapes =
        with_large(block_values(t) == 1 ? std::vector<std::array<std::size_t, 2>>{{7, 13}, {33, 41}}
                                        : std::vector<std::array<std::size_t, 2>>{{32, 64}, {64, 32}},
                   {1024, 2816});
    for (const auto& [d_model, d_ff] : shapes) {
      for (const activation act : all_activations) {
        if (act != activation::silu && (d_model != shapes[0][0] || t != dtype::f32)) continue;  // every act once
        CAPTURE(actsparse::name(t));
        CAPTURE(actsparse::name(act));
        CAPTURE(d_model);
        CAPTURE(d_ff);
        const ffn_case f = make_ffn(t, d_model, d_ff, rng);
        const device_weights gate = to_device(ctx, f.gate);
        const device_weights up = to_device(ctx, f.up);
        const device_weights down = to_device(ctx, f.down);
        const device_weights down_t = to_device(ctx, f.down_t);
        const std::vector<float> xh = random_vector(d_model, rng);
        const cuda::buffer x = to_device<float>(ctx, xh);
        const auto xv = cview<float>(x, d_model);
        cuda::buffer y(ctx, d_model * 4);
        const auto yv = mview<float>(y, d_model);
        const weight_view none{};

        // Dense with W_down only (phase 2 a GEMV), and with down_t only (a row axpy).
        REQUIRE(run_cuda(b, gated_ffn_args{{act, gate.view, up.view, down.view}, xv, yv, subset::everything()}, ctx));
        check_within(yv, ffn_oracle(act, f.gate.values, f.up.values, f.down.values, xh, subset::everything()));
        REQUIRE(run_cuda(b, gated_ffn_args{{act, gate.view, up.view, none, down_t.view}, xv, yv, subset::everything()},
                         ctx));
        check_within(yv, ffn_oracle(act, f.gate.values, f.up.values, f.down_of_t, xh, subset::everything()));
        const std::vector<float> dense(yv.begin(), yv.end());

        // gate_act computed first (as the ops layer does), on the device.
        cuda::buffer g(ctx, d_ff * 4);
        REQUIRE(run_cuda(b, gemv_args{gate.view, xv, mview<float>(g, d_ff), subset::everything()}, ctx));
        for (float& v : mview<float>(g, d_ff)) v = apply(act, v);
        for (const double density : {0.0, 0.4, 1.0}) {
          if (density == 0.0 && (t != dtype::f32 || act != activation::silu)) continue;  // empty: once
          CAPTURE(density);
          const std::vector<std::uint32_t> kept =
              density == 1.0 ? all_indices(d_ff) : random_subset(d_ff, density, rng);
          const cuda::buffer idx = to_device<std::uint32_t>(ctx, kept);
          const subset s = subset::only(cview<std::uint32_t>(idx, kept.size()));
          const auto oracle = ffn_oracle(act, f.gate.values, f.up.values, f.down_of_t, xh, subset::only(kept));
          REQUIRE(run_cuda(b, gated_ffn_args{{act, gate.view, up.view, none, down_t.view}, xv, yv, s}, ctx));
          check_within(yv, oracle);
          if (density == 1.0) CHECK(same_bits(yv, dense));
          std::vector<float> want(d_model);
          inline_executor ex;
          REQUIRE(run(reference_backend{},
                      gated_ffn_args{{act, f.gate.view, f.up.view, none, f.down_t.view}, xh, want, subset::only(kept)},
                      ex));
          note("gated_ffn sparse", t, yv, want);
          REQUIRE(run_cuda(
              b, gated_ffn_args{{act, gate.view, up.view, none, down_t.view}, xv, yv, s, cview<float>(g, d_ff)}, ctx));
          check_within(yv, oracle);
          if (density == 1.0) CHECK(same_bits(yv, dense));  // the gate's bits are the gemv's
          note("gated_ffn gate_act", t, yv, want);
        }
        // Sparse without down_t is not handled (it would read all of W_down).
        const std::vector<std::uint32_t> one{0};
        const gated_ffn_args no_t{{act, gate.view, up.view, down.view}, xv, yv, subset::only(one)};
        CHECK_FALSE(b.can_implement(no_t).handled());
        // The fused gate + up kernel decodes one dtype: a computed gate of another is not handled.
        if (t != dtype::f32) {
          const weight_view gate_f32(gate.view.data, dtype::f32, d_ff, d_model, d_model * 4);
          gated_ffn_args mixed{{act, gate_f32, up.view, none, down_t.view}, xv, yv, subset::everything()};
          CHECK(b.can_implement(mixed).reason ==
                "cuda: gate and up of different dtypes (the fused gate + up kernel "
                "decodes one)");
          mixed.gate_act = cview<float>(g, d_ff);
          CHECK(b.can_implement(mixed).handled());  // the gate is not read
        }
      }
    }
  }
  print_errors("gated FFN");
}

TEST_CASE("cuda backend (fake driver): token-sparse FFN, a kept token equals its decode FFN bit for bit") {
  test_device dev;
  if (!dev) return;
  cuda::context& ctx = *dev.ctx;
  const cuda_backend& b = dev.backend;
  std::mt19937 rng(14);
  constexpr std::size_t tokens = 5;
  for (const dtype t : all_dtypes) {
    const std::size_t d_model = block_values(t) == 1 ? 19 : 64;
    const std::size_t d_ff = block_values(t) == 1 ? 23 : 32;
    CAPTURE(actsparse::name(t));
    const ffn_case f = make_ffn(t, d_model, d_ff, rng);
    const device_weights gate = to_device(ctx, f.gate);
    const device_weights up = to_device(ctx, f.up);
    const device_weights down = to_device(ctx, f.down);
    const device_weights down_t = to_device(ctx, f.down_t);
    const std::size_t stride = d_model + 3;  // strided token rows
    const std::vector<float> input_h = random_vector(tokens * stride, rng);
    const std::vector<float> residual_h = random_vector(tokens * stride, rng);
    const cuda::buffer input = to_device<float>(ctx, input_h);
    const matrix_view<const float> in{static_cast<const float*>(input.data()), tokens, d_model, stride * 4};
    const weight_view none{};
    for (const bool use_down_t : {false, true}) {
      for (const bool all : {true, false}) {
        if (all == use_down_t && t != dtype::f32) continue;  // every combination for f32, two for the others
        CAPTURE(use_down_t);
        CAPTURE(all);
        const std::vector<std::uint32_t> kept = all ? all_indices(tokens) : std::vector<std::uint32_t>{0, 2, 3};
        const cuda::buffer idx = to_device<std::uint32_t>(ctx, kept);
        const subset s = all ? subset::everything() : subset::only(cview<std::uint32_t>(idx, kept.size()));
        cuda::buffer residual = to_device<float>(ctx, residual_h);
        const matrix_view<float> res{static_cast<float*>(residual.data()), tokens, d_model, stride * 4};
        const ffn_layer layer{activation::silu, gate.view, up.view, use_down_t ? none : down.view,
                              use_down_t ? down_t.view : none};
        const token_ffn_args a{layer, in, res, s};
        REQUIRE(run_cuda(b, a, ctx));
        const Eigen::MatrixXd& w_down = use_down_t ? f.down_of_t : f.down.values;
        for (std::size_t tok = 0; tok < tokens; ++tok) {
          CAPTURE(tok);
          const std::span<const float> got(res.row(tok), d_model);
          const std::span<const float> before(residual_h.data() + tok * stride, d_model);
          if (std::find(kept.begin(), kept.end(), tok) == kept.end()) {
            CHECK(same_bits(got, before));
            continue;
          }
          // The decode FFN of this token on the same backend, added to the residual.
          const cuda::buffer xt = to_device<float>(ctx, std::span(input_h).subspan(tok * stride, d_model));
          cuda::buffer y(ctx, d_model * 4);
          REQUIRE(run_cuda(
              b, gated_ffn_args{layer, cview<float>(xt, d_model), mview<float>(y, d_model), subset::everything()},
              ctx));
          std::vector<float> want(d_model);
          for (std::size_t c = 0; c < d_model; ++c) want[c] = before[c] + mview<float>(y, d_model)[c];
          CHECK(same_bits(got, want));
          oracle o = ffn_oracle(activation::silu, f.gate.values, f.up.values, w_down,
                                std::span(input_h).subspan(tok * stride, d_model), subset::everything());
          o.value += to_double(before);
          o.bound += u32 * (o.value.cwiseAbs() + o.bound);
          check_within(got, o);
        }
      }
    }
    // A neuron union (a decode batch) is not built for CUDA: declined, never ignored.
    const std::vector<std::uint32_t> some = {1, 4};
    const ffn_layer layer{activation::silu, gate.view, up.view, none, down_t.view};
    cuda::buffer residual = to_device<float>(ctx, residual_h);
    const matrix_view<float> res{static_cast<float*>(residual.data()), tokens, d_model, stride * 4};
    const token_ffn_args batch{layer, in, res, subset::everything(), subset::only(some)};
    CHECK_FALSE(b.can_implement(batch));
  }
}

TEST_CASE("cuda backend (fake driver): device selection (device_select_args) against the host selectors") {
  test_device dev;
  if (!dev) return;
  cuda::context& ctx = *dev.ctx;
  const cuda_backend& b = dev.backend;
  std::mt19937 rng(15);
  // Enqueued without synchronizing: the caller synchronizes before reading the count.
  const auto select = [&](const device_select_args& a) {
    REQUIRE(b.can_implement(a).handled());
    cuda::buffer ws(ctx, std::max<std::size_t>(b.workspace_size(a), 4), cuda::memory_kind::device);
    REQUIRE(b.run(a, ws.bytes().first(b.workspace_size(a)), ctx).handled());
    ctx.synchronize();
  };
  for (const dtype t : all_dtypes) {
    for (const activation act : all_activations) {
      if (act != activation::silu && t != dtype::f32) continue;  // every activation once
      CAPTURE(actsparse::name(t));
      CAPTURE(actsparse::name(act));
      const std::size_t rows = 77;
      const std::size_t cols = block_values(t) == 1 ? 9 : 32;
      const test_weights w = make_weights(t, rows, cols, rng);
      const device_weights dw = to_device(ctx, w);
      const std::vector<float> xh = random_vector(cols, rng);
      const cuda::buffer x = to_device<float>(ctx, xh);
      cuda::buffer h(ctx, rows * 4);
      cuda::buffer idx(ctx, rows * 4);
      cuda::buffer count(ctx, 4);
      const float thr = 0.2F;
      const device_select_args a{device_rule::threshold(thr),
                                 {},
                                 {dw.view, act, cview<float>(x, cols), mview<float>(h, rows)},
                                 mview<std::uint32_t>(idx, rows),
                                 mview<std::uint32_t>(count, 1)};
      select(a);
      // h is the gate GEMV's bits, activated as on the host; idx the threshold selector's set
      // over the magnitudes |h|.
      cuda::buffer gd(ctx, rows * 4);
      REQUIRE(
          run_cuda(b, gemv_args{dw.view, cview<float>(x, cols), mview<float>(gd, rows), subset::everything()}, ctx));
      std::vector<float> magnitudes(rows);
      for (std::size_t j = 0; j < rows; ++j) {
        CHECK(mview<float>(h, rows)[j] == apply(act, mview<float>(gd, rows)[j]));
        magnitudes[j] = std::abs(mview<float>(h, rows)[j]);
      }
      const selection want = threshold{thr}.select(magnitudes);
      const std::uint32_t n = mview<std::uint32_t>(count, 1)[0];
      REQUIRE(n == want.indices.size());
      CHECK(std::equal(want.indices.begin(), want.indices.end(), mview<std::uint32_t>(idx, n).begin()));
    }
  }
  // top_k and cumulative_mass against the selectors, on scores with ties.
  std::uniform_int_distribution<int> level(0, 12);
  std::vector<float> scores(150);
  for (float& s : scores) s = static_cast<float>(level(rng)) * 0.25F;
  const cuda::buffer sd = to_device<float>(ctx, scores);
  cuda::buffer idx(ctx, 150 * 4);
  cuda::buffer count(ctx, 4);
  const auto args = [&](device_rule rule) {
    return device_select_args{
        rule, cview<float>(sd, 150), {}, mview<std::uint32_t>(idx, 150), mview<std::uint32_t>(count, 1)};
  };
  for (const std::size_t k : {std::size_t{0}, std::size_t{40}, std::size_t{150}}) {
    CAPTURE(k);
    select(args(device_rule::top_k(k)));
    const selection want = top_k::by_count(k).select(scores);
    const std::uint32_t n = mview<std::uint32_t>(count, 1)[0];
    REQUIRE(n == want.indices.size());
    CHECK(std::equal(want.indices.begin(), want.indices.end(), mview<std::uint32_t>(idx, n).begin()));
  }
  for (const double mass : {0.3, 0.9}) {
    CAPTURE(mass);
    select(args(device_rule::cumulative_mass(static_cast<float>(mass), 5)));
    selection want;
    cumulative_mass{static_cast<float>(mass), 0, 5}.select(scores, want);
    const std::uint32_t n = mview<std::uint32_t>(count, 1)[0];
    REQUIRE(n == want.indices.size());
    CHECK(std::equal(want.indices.begin(), want.indices.end(), mview<std::uint32_t>(idx, n).begin()));
  }
  // What it does not run is not_handled, so an engine selects on the host instead; bad
  // parameters are the host selectors' errors.
  CHECK(b.can_implement(args(device_rule::threshold(0.5F))).reason ==
        "cuda: a threshold over given scores (the device threshold is fused with the gate GEMV: pass gate)");
  CHECK_THROWS_WITH_AS(b.run(args(device_rule::top_k(151)), {}, ctx), doctest::Contains("'rule.k'"), actsparse::error);
  CHECK_THROWS_WITH_AS(b.run(args(device_rule::cumulative_mass(0.0F)), {}, ctx), doctest::Contains("'rule.mass'"),
                       actsparse::error);
  CHECK_THROWS_AS(b.run(device_select_args{device_rule::top_k(1),
                                           cview<float>(sd, 150),
                                           {},
                                           mview<std::uint32_t>(idx, 149),
                                           mview<std::uint32_t>(count, 1)},
                        {}, ctx),
                  actsparse::error);
  // Through the protocol driver (actsparse::run), as an engine calls it.
  std::vector<std::byte> workspace;
  REQUIRE(actsparse::run(b, args(device_rule::top_k(7)), workspace, ctx).handled());
  ctx.synchronize();
  CHECK(mview<std::uint32_t>(count, 1)[0] == 7);
}

TEST_CASE("cuda backend (fake driver): the ops layer runs unchanged on the cuda backend") {
  test_device dev;
  if (!dev) return;
  cuda::context& ctx = *dev.ctx;
  const cuda_backend& b = dev.backend;
  if (real_device && !ctx.info().pageable_memory_access) {
    std::printf(
        "CUDA-SKIP: the ops layer's scratch is host memory (std::vector) and this device cannot read "
        "pageable host memory (no HMM / ATS)\n");
    return;
  }
  std::mt19937 rng(16);
  inline_executor ref_ex;
  for (const dtype t : all_dtypes) {
    CAPTURE(actsparse::name(t));
    const std::size_t d_model = block_values(t) == 1 ? 21 : 32;
    const std::size_t d_ff = block_values(t) == 1 ? 37 : 64;
    const ffn_case f = make_ffn(t, d_model, d_ff, rng);
    // Weights in managed memory; the ops layer's own scratch is host memory (std::vector),
    // which the fake device reads (a real one needs pageable memory access: docs/GPU.md).
    const device_weights gate = to_device(ctx, f.gate);
    const device_weights up = to_device(ctx, f.up);
    const device_weights down_t = to_device(ctx, f.down_t);
    const ffn_layer w_cuda{activation::silu, gate.view, up.view, {}, down_t.view};
    const ffn_layer w_ref{activation::silu, f.gate.view, f.up.view, {}, f.down_t.view};
    const std::vector<float> xh = random_vector(d_model, rng);
    const cuda::buffer x = to_device<float>(ctx, xh);

    // neuron_sparse_ffn: the same kept neurons as on the reference, y within the oracle's bound.
    const neuron_sparse_ffn op_cuda{magnitude{}, top_k::by_count(15), score_source::gate_activation, b};
    const neuron_sparse_ffn op_ref{magnitude{}, top_k::by_count(15), score_source::gate_activation,
                                   reference_backend{}};
    cuda::buffer y(ctx, d_model * 4);
    std::vector<float> y_ref(d_model);
    selection kept_cuda;
    selection kept_ref;
    ffn_scratch s_cuda;
    ffn_scratch s_ref;
    REQUIRE(op_cuda(w_cuda, cview<float>(x, d_model), mview<float>(y, d_model), kept_cuda, s_cuda, ctx));
    REQUIRE(op_ref(w_ref, xh, y_ref, kept_ref, s_ref, ref_ex));
    REQUIRE(kept_cuda.indices == kept_ref.indices);
    check_within(mview<float>(y, d_model), ffn_oracle(activation::silu, f.gate.values, f.up.values, f.down_of_t, xh,
                                                      subset::only(kept_ref.indices)));
    note("neuron_sparse_ffn", t, mview<float>(y, d_model), y_ref);

    // input_sparse_linear (linear_args) over W_up [d_ff × d_model].
    const input_sparse_linear lin_cuda{magnitude{}, threshold{0.4F}, b};
    const input_sparse_linear lin_ref{magnitude{}, threshold{0.4F}, reference_backend{}};
    cuda::buffer z(ctx, d_ff * 4);
    std::vector<float> z_ref(d_ff);
    linear_scratch ls_cuda;
    linear_scratch ls_ref;
    REQUIRE(lin_cuda(linear_layer{up.view}, cview<float>(x, d_model), mview<float>(z, d_ff), kept_cuda, ls_cuda, ctx));
    REQUIRE(lin_ref(linear_layer{f.up.view}, xh, z_ref, kept_ref, ls_ref, ref_ex));
    REQUIRE(kept_cuda.indices == kept_ref.indices);
    check_within(mview<float>(z, d_ff), linear_oracle(f.up.values, xh, subset::only(kept_ref.indices)));
    note("input_sparse_linear", t, mview<float>(z, d_ff), z_ref);

    // token_sparse_ffn: layer 1 of a schedule dense for layer 0 only, cumulative mass 0.6.
    constexpr std::size_t tokens = 6;
    const std::vector<float> attn = random_vector(tokens * d_model, rng);
    const std::vector<float> input_h = random_vector(tokens * d_model, rng);
    const std::vector<float> residual_h = random_vector(tokens * d_model, rng);
    const cuda::buffer input = to_device<float>(ctx, input_h);
    cuda::buffer residual = to_device<float>(ctx, residual_h);
    std::vector<float> residual_ref = residual_h;
    const depth_schedule schedule{1, depth_schedule::no_deep_tier, 0.6, 0.6, 1, 1};
    const token_sparse_ffn<cuda_backend> tok_cuda{schedule, {}, b};
    const token_sparse_ffn<reference_backend> tok_ref{schedule};
    token_scratch ts_cuda;
    token_scratch ts_ref;
    const auto attn_v = matrix_view<const float>::packed(attn.data(), tokens, d_model);
    REQUIRE(tok_cuda(
        1, w_cuda, attn_v, matrix_view<const float>::packed(static_cast<const float*>(input.data()), tokens, d_model),
        matrix_view<float>::packed(static_cast<float*>(residual.data()), tokens, d_model), kept_cuda, ts_cuda, ctx));
    REQUIRE(tok_ref(1, w_ref, attn_v, matrix_view<const float>::packed(input_h.data(), tokens, d_model),
                    matrix_view<float>::packed(residual_ref.data(), tokens, d_model), kept_ref, ts_ref, ref_ex));
    REQUIRE(kept_cuda.indices == kept_ref.indices);
    CHECK(kept_cuda.indices.size() < tokens);
    note("token_sparse_ffn", t, mview<float>(residual, tokens * d_model), residual_ref);
    for (std::size_t i = 0; i < tokens * d_model; ++i) {
      CHECK(std::abs(mview<float>(residual, tokens * d_model)[i] - residual_ref[i]) <=
            1e-4F * (1.0F + std::abs(residual_ref[i])));
    }
  }
  print_errors("ops layer");
}
