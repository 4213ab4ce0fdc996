#pragma once
// The model demo's --synthetic decode: a random-weight Llama-shaped stack at a realistic size
// (7b: d_model 4096, d_ff 11008, 32 heads; 3b: 2048, 11008, 16 heads; tiny, for tests: 256,
// 704, 4), weights in any CPU dtype, running real decode steps: RMSNorm, q/k/v/o GEMVs,
// attention over a KV cache of `context` positions (per head a GEMV over the cached keys and a
// row axpy over the cached values), and the FFN through the same operators (dense_ffn, or
// neuron_sparse_ffn with magnitude of act(gate) and top_k at activity a, on the CPU backend's
// thread pool). It measures tokens/s and the time in the FFN and outside it, so the
// end-to-end gain is measured, not only the FFN's.

#include "llama2c/model.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/backends/cpu/layouts.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>
#include <actsparse/ops/run.hpp>
#include <actsparse/scorers/magnitude.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace model_demo {

struct synthetic_options {
  std::string shape = "7b";
  actsparse::dtype type = actsparse::dtype::bf16;
  std::size_t layers = 4;
  std::size_t tokens = 16;
  std::size_t context = 256;
  std::size_t threads = std::max(1U, std::thread::hardware_concurrency());
  bool interleave = false;  // interleaved copies of the matrices read whole (q8_0 / q4_0)
  std::string json = "demo-results/synthetic.json";
};

struct synthetic_shape {
  std::size_t d_model = 4096;
  std::size_t d_ff = 11008;
  std::size_t heads = 32;
};

inline synthetic_shape shape_of(const std::string& shape) {
  if (shape == "7b") return {4096, 11008, 32};
  if (shape == "3b") return {2048, 11008, 16};
  if (shape == "tiny") return {256, 704, 4};  // for tests: the same code path in milliseconds
  actsparse::detail::fail("model_demo", "--synthetic", shape, "7b, 3b or tiny");
}

// One measured activity: a = 1 is dense.
struct synthetic_row {
  std::string policy;
  double activity = 1.0;
  double tokens_per_s = 0.0;
  double ms_per_token = 0.0;
  double ffn_ms = 0.0;
  double other_ms = 0.0;
};

struct synthetic_result {
  synthetic_shape shape;
  std::vector<synthetic_row> rows;  // dense first
};

// Owned weights of any dtype, from random values in [-scale, scale].
struct owned_matrix {
  std::vector<std::byte> bytes;
  actsparse::weight_view view;
};

template <class T>
owned_matrix random_matrix_as(std::size_t rows, std::size_t cols, float scale, std::uint64_t seed) {
  owned_matrix m;
  const std::size_t stride = actsparse::row_bytes(actsparse::dtype_traits<T>::type, cols);
  m.bytes.resize(rows * stride);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> row(cols);
  for (std::size_t r = 0; r < rows; ++r) {
    for (float& v : row) v = u(rng);
    actsparse::quantize_row(row.data(), reinterpret_cast<T*>(m.bytes.data() + r * stride), cols);
  }
  m.view = actsparse::weight_view(m.bytes.data(), actsparse::dtype_traits<T>::type, rows, cols, stride);
  return m;
}

inline owned_matrix random_matrix(actsparse::dtype t, std::size_t rows, std::size_t cols, float scale,
                                  std::uint64_t seed) {
  using actsparse::dtype;
  switch (t) {
    case dtype::f32:
      return random_matrix_as<float>(rows, cols, scale, seed);
    case dtype::f16:
      return random_matrix_as<actsparse::f16>(rows, cols, scale, seed);
    case dtype::bf16:
      return random_matrix_as<actsparse::bf16>(rows, cols, scale, seed);
    case dtype::q8_0:
      return random_matrix_as<actsparse::block_q8_0>(rows, cols, scale, seed);
    case dtype::q4_0:
      return random_matrix_as<actsparse::block_q4_0>(rows, cols, scale, seed);
  }
  actsparse::detail::fail("model_demo --synthetic", "dtype", static_cast<int>(t), "f32, f16, bf16, q8_0 or q4_0");
}

// A copy in fresh memory (layers share values, never bytes: each layer is read from DRAM).
inline owned_matrix copy_of(const owned_matrix& m) {
  owned_matrix c;
  c.bytes = m.bytes;
  c.view = m.view;
  c.view.data = c.bytes.data();
  return c;
}

struct synthetic_layer {
  owned_matrix wq, wk, wv, wo, gate, up, down_t;
  std::vector<float> k_cache, v_cache;  // [context × d_model]
};

// Builds the stack and decodes o.tokens tokens per activity (after one untimed dense pass);
// progress on stderr.
inline synthetic_result run_synthetic(const synthetic_options& o) {
  using namespace actsparse;
  constexpr std::string_view where = "model_demo --synthetic";
  if (o.interleave && o.type != dtype::q8_0 && o.type != dtype::q4_0) {
    detail::fail(where, "--interleave with --dtype", name(o.type),
                 "--dtype q8_0 or q4_0 (the dtypes with interleaved copies)");
  }
  const synthetic_shape shape = shape_of(o.shape);
  const std::size_t d_model = shape.d_model;
  const std::size_t d_ff = shape.d_ff;
  const std::size_t heads = shape.heads;
  const std::size_t head_size = d_model / heads;
  std::fprintf(stderr, "building %zu random %s layers of the %s shape (d_model %zu, d_ff %zu)...\n", o.layers,
               std::string(name(o.type)).c_str(), o.shape.c_str(), d_model, d_ff);
  synthetic_layer first;
  const float sm = 1.0F / std::sqrt(static_cast<float>(d_model));
  first.wq = random_matrix(o.type, d_model, d_model, sm, 1);
  first.wk = random_matrix(o.type, d_model, d_model, sm, 2);
  first.wv = random_matrix(o.type, d_model, d_model, sm, 3);
  first.wo = random_matrix(o.type, d_model, d_model, sm, 4);
  first.gate = random_matrix(o.type, d_ff, d_model, sm, 5);
  first.up = random_matrix(o.type, d_ff, d_model, sm, 6);
  first.down_t = random_matrix(o.type, d_ff, d_model, 1.0F / std::sqrt(static_cast<float>(d_ff)), 7);
  std::vector<synthetic_layer> layers;
  cpu::weight_layouts layouts;  // --interleave: the copies, found by the views the calls pass
  for (std::size_t l = 0; l < o.layers; ++l) {
    synthetic_layer s;
    for (auto [dst, src] : {std::pair{&s.wq, &first.wq},
                            {&s.wk, &first.wk},
                            {&s.wv, &first.wv},
                            {&s.wo, &first.wo},
                            {&s.gate, &first.gate},
                            {&s.up, &first.up},
                            {&s.down_t, &first.down_t}}) {
      *dst = copy_of(*src);
    }
    std::mt19937_64 rng(100 + l);
    std::uniform_real_distribution<float> u(-1.0F, 1.0F);
    s.k_cache.resize(o.context * d_model);
    s.v_cache.resize(o.context * d_model);
    for (float& v : s.k_cache) v = u(rng);
    for (float& v : s.v_cache) v = u(rng);
    if (o.interleave) {  // every matrix a decode step reads whole (down_t is read by kept rows)
      for (const owned_matrix* m : {&s.wq, &s.wk, &s.wv, &s.wo, &s.gate, &s.up}) (void)layouts.add_interleaved(m->view);
    }
    layers.push_back(std::move(s));
  }
  first = {};

  cpu::thread_pool pool(o.threads);
  cpu::executor ex(pool);
  cpu_backend cpu;
  cpu.layouts = &layouts;
  std::vector<std::byte> workspace;
  const auto gemv = [&](const weight_view& w, std::span<const float> x, std::span<float> y) {
    if (!run(cpu, gemv_args{w, x, y, subset::everything()}, workspace, ex)) {
      detail::fail(where, "gemv", name(w.type), "a dtype the CPU backend handles");
    }
  };

  synthetic_result result{shape, {}};
  std::vector<float> x(d_model), xb(d_model), q(d_model), k(d_model), v(d_model), att(d_model), o_out(d_model),
      ffn_out(d_model), scores(o.context);
  const std::vector<float> ones(d_model, 1.0F);
  bool warm = false;  // a first dense pass, not reported, brings the whole stack through once
  for (const double a : {1.0, 1.0, 0.8, 0.6, 0.4, 0.2, 0.1, 0.05}) {
    const bool dense = a >= 1.0;
    const neuron_sparse_ffn<magnitude, top_k, cpu_backend> op{magnitude{}, top_k::by_ratio(a),
                                                              score_source::gate_activation, cpu};
    ffn_scratch scratch;
    selection kept;
    double ffn_s = 0.0;
    double total_s = 0.0;
    std::mt19937_64 rng(9);
    std::uniform_real_distribution<float> u(-1.0F, 1.0F);
    for (std::size_t step = 0; step < o.tokens + 1; ++step) {  // the first step warms up, untimed
      for (float& e : x) e = u(rng);
      double step_ffn = 0.0;
      const auto start = std::chrono::steady_clock::now();
      for (synthetic_layer& L : layers) {
        llama2c::rmsnorm(x, ones, xb);
        gemv(L.wq.view, xb, q);
        gemv(L.wk.view, xb, k);
        gemv(L.wv.view, xb, v);
        const std::size_t pos = step % o.context;  // the new token overwrites a cache slot
        std::copy(k.begin(), k.end(), L.k_cache.begin() + static_cast<std::ptrdiff_t>(pos * d_model));
        std::copy(v.begin(), v.end(), L.v_cache.begin() + static_cast<std::ptrdiff_t>(pos * d_model));
        // Per head: scores = K_h·q_h (a GEMV over the cache rows of this head), softmax,
        // att_h = Σ_s p_s V_h[s, :] (a row axpy over the cache): the CPU backend's kernels.
        const float scale = 1.0F / std::sqrt(static_cast<float>(head_size));
        const std::size_t cache_stride = d_model * sizeof(float);
        for (std::size_t h = 0; h < heads; ++h) {
          const weight_view kh(L.k_cache.data() + h * head_size, dtype::f32, o.context, head_size, cache_stride);
          const weight_view vh(L.v_cache.data() + h * head_size, dtype::f32, o.context, head_size, cache_stride);
          gemv(kh, std::span<const float>(q).subspan(h * head_size, head_size), scores);
          float max = -INFINITY;
          for (float& e : scores) max = std::max(max, e *= scale);
          float sum = 0.0F;
          for (float& e : scores) sum += e = std::exp(e - max);
          for (float& e : scores) e /= sum;
          const transposed_linear_args pv{vh, scores, std::span<float>(att).subspan(h * head_size, head_size),
                                          subset::everything()};
          if (!run(cpu, pv, workspace, ex)) detail::fail(where, "attention", "", "");
        }
        gemv(L.wo.view, att, o_out);
        for (std::size_t i = 0; i < d_model; ++i) x[i] += o_out[i];
        llama2c::rmsnorm(x, ones, xb);
        const ffn_layer w{activation::silu, L.gate.view, L.up.view, weight_view{}, L.down_t.view};
        const auto f0 = std::chrono::steady_clock::now();
        const status st = dense ? dense_ffn(cpu, w, xb, ffn_out, scratch, ex) : op(w, xb, ffn_out, kept, scratch, ex);
        step_ffn += std::chrono::duration<double>(std::chrono::steady_clock::now() - f0).count();
        if (!st) detail::fail(where, "FFN", st.reason, "the CPU backend to run it");
        for (std::size_t i = 0; i < d_model; ++i) x[i] += ffn_out[i] * 1e-3F;  // keep x bounded
      }
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (step > 0) {
        total_s += t;
        ffn_s += step_ffn;
      }
    }
    if (!warm) {
      warm = true;
      continue;
    }
    const double n = static_cast<double>(o.tokens);
    char label[48];
    std::snprintf(label, sizeof label, dense ? "dense" : "top_k a=%.2f", a);
    result.rows.push_back({label, a, n / total_s, 1e3 * total_s / n, 1e3 * ffn_s / n, 1e3 * (total_s - ffn_s) / n});
    std::fprintf(stderr, "  %s: %.2f tokens/s\n", label, n / total_s);
  }
  return result;
}

}  // namespace model_demo
