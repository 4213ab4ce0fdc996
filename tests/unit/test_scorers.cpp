#include <actsparse/core/activation.hpp>
#include <actsparse/core/dtype.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/core/views.hpp>
#include <actsparse/scorers/magnitude.hpp>
#include <actsparse/scorers/relu_exact.hpp>
#include <actsparse/scorers/router_softmax.hpp>
#include <actsparse/scorers/silu_magnitude.hpp>
#include <actsparse/scorers/token_l2.hpp>
#include <actsparse/scorers/weight_aware.hpp>
#include <actsparse/scorers/weight_aware_gate.hpp>

#include "activation_oracle.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <vector>

using namespace actsparse;

namespace {

constexpr std::array<dtype, 5> all_dtypes{dtype::f32, dtype::bf16, dtype::f16, dtype::q8_0, dtype::q4_0};

std::vector<float> random_values(std::size_t n, unsigned seed, float scale = 1.0F) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0F, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// |got - want| within a relative tolerance of want (absolute near 0).
bool close(double got, double want, double rel = 1e-6) {
  return std::fabs(got - want) <= rel * std::max(1e-30, std::fabs(want)) + 1e-30;
}

// A weight matrix of storage type T quantized from `values` (rows × cols, row-major), with
// `pad` spare elements at the end of every row so that the row stride is not the packed one.
template <class T>
struct test_weights {
  std::vector<T> storage;
  weight_view view;
  std::vector<float> dequantized;  // rows × cols, row-major: the matrix the scorer really sees

  test_weights(const std::vector<float>& values, std::size_t rows, std::size_t cols, std::size_t pad = 1) {
    const std::size_t per_row = cols / dtype_traits<T>::block_values + pad;
    storage.resize(rows * per_row);
    dequantized.resize(rows * cols);
    for (std::size_t i = 0; i < rows; ++i) {
      quantize_row(values.data() + i * cols, storage.data() + i * per_row, cols);
      dequantize_row(storage.data() + i * per_row, dequantized.data() + i * cols, cols);
    }
    view = weight_view(storage.data(), dtype_traits<T>::type, rows, cols, per_row * sizeof(T));
  }
};

std::vector<double> oracle_column_norms(const std::vector<float>& m, std::size_t rows, std::size_t cols) {
  std::vector<double> n(cols, 0.0);
  for (std::size_t j = 0; j < cols; ++j) {
    for (std::size_t i = 0; i < rows; ++i) n[j] += static_cast<double>(m[i * cols + j]) * m[i * cols + j];
    n[j] = std::sqrt(n[j]);
  }
  return n;
}

std::vector<double> oracle_row_norms(const std::vector<float>& m, std::size_t rows, std::size_t cols) {
  std::vector<double> n(rows, 0.0);
  for (std::size_t i = 0; i < rows; ++i) {
    for (std::size_t j = 0; j < cols; ++j) n[i] += static_cast<double>(m[i * cols + j]) * m[i * cols + j];
    n[i] = std::sqrt(n[i]);
  }
  return n;
}

}  // namespace

TEST_CASE("scorers: magnitude is |x| and checks the output size") {
  for (unsigned seed : {1U, 2U, 3U}) {
    const auto x = random_values(257, seed);
    std::vector<float> out(magnitude{}.score_count(x));
    REQUIRE(out.size() == x.size());
    magnitude{}.score(x, out);
    for (std::size_t j = 0; j < x.size(); ++j) CHECK(out[j] == std::fabs(static_cast<double>(x[j])));
  }
  std::vector<float> x(4, 1.0F);
  std::vector<float> out(3);
  CHECK_THROWS_WITH_AS(magnitude{}.score(x, out),
                       doctest::Contains("magnitude::score: argument 'out' is a span of 3 floats; expected 4 floats"),
                       error);
}

TEST_CASE("scorers: weight_aware column norms match the dequantized matrix for every dtype") {
  constexpr std::size_t rows = 37;
  constexpr std::size_t cols = 96;
  const auto values = random_values(rows * cols, 11, 0.5F);
  const auto x = random_values(cols, 12, 2.0F);
  for (dtype t : all_dtypes) {
    CAPTURE(name(t));
    visit_dtype(t, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const test_weights<T> w(values, rows, cols);
      const auto oracle = oracle_column_norms(w.dequantized, rows, cols);
      const auto s = weight_aware::from_weights(w.view);
      REQUIRE(s.column_norms().size() == cols);
      for (std::size_t j = 0; j < cols; ++j) CHECK(close(s.column_norms()[j], oracle[j]));
      std::vector<float> out(s.score_count(x));
      REQUIRE(out.size() == cols);
      s.score(x, out);
      for (std::size_t j = 0; j < cols; ++j) CHECK(close(out[j], std::fabs(static_cast<double>(x[j])) * oracle[j]));
    });
  }
}

TEST_CASE("scorers: weight_aware normalize divides the norms by their mean") {
  constexpr std::size_t rows = 20;
  constexpr std::size_t cols = 64;
  // Two "layers" whose weights differ in scale by 1000 get norms on the same scale.
  const auto small = random_values(rows * cols, 21, 0.001F);
  const auto large = random_values(rows * cols, 21, 1.0F);
  const test_weights<float> ws(small, rows, cols);
  const test_weights<float> wl(large, rows, cols);
  const auto plain = weight_aware::from_weights(wl.view);
  const auto ns = weight_aware::from_weights(ws.view, {.normalize = true});
  const auto nl = weight_aware::from_weights(wl.view, {.normalize = true});
  const auto oracle = oracle_column_norms(wl.dequantized, rows, cols);
  double mean = 0.0;
  for (double v : oracle) mean += v / cols;
  double sum = 0.0;
  for (std::size_t j = 0; j < cols; ++j) {
    CHECK(close(nl.column_norms()[j], oracle[j] / mean));
    CHECK(close(ns.column_norms()[j], nl.column_norms()[j], 1e-5));  // same shape, scale divided out
    CHECK(close(plain.column_norms()[j], oracle[j]));
    sum += nl.column_norms()[j];
  }
  CHECK(close(sum / cols, 1.0, 1e-6));
  // An all-zero matrix has no scale to share: its norms stay 0 instead of becoming NaN.
  const std::vector<float> zeros(rows * cols, 0.0F);
  const auto z = weight_aware::from_weights(test_weights<float>(zeros, rows, cols).view, {.normalize = true});
  for (float v : z.column_norms()) CHECK(v == 0.0F);
}

TEST_CASE("scorers: weight_aware rejects wrong sizes and bad weights") {
  const auto values = random_values(std::size_t{8} * 64, 31);
  const test_weights<float> w(values, 8, 64);
  const auto s = weight_aware::from_weights(w.view);
  std::vector<float> x(63, 1.0F);
  std::vector<float> out(64);
  CHECK_THROWS_WITH_AS(s.score(x, out), doctest::Contains("argument 'x' is a span of 63 values; expected 64 values"),
                       error);
  x.resize(64);
  out.resize(65);
  CHECK_THROWS_WITH_AS(s.score(x, out), doctest::Contains("argument 'out' is a span of 65 floats"), error);
  std::vector<block_q4_0> q(4);
  CHECK_THROWS_WITH_AS((void)weight_aware::from_weights(weight_view(q.data(), dtype::q4_0, 2, 40, 36)),
                       doctest::Contains("multiple of 32"), error);
  auto bad = values;
  bad[3 * 64 + 5] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH_AS((void)weight_aware::from_weights(test_weights<float>(bad, 8, 64).view),
                       doctest::Contains("column 5 with a non-finite norm"), error);
  CHECK_THROWS_WITH_AS((void)weight_aware::from_norms({1.0F, -2.0F}), doctest::Contains("[1] = -2"), error);
  CHECK(weight_aware::from_norms({1.0F, 2.0F}).column_norms().size() == 2);
}

TEST_CASE("scorers: weight_aware_gate is |act(g)| times the up-row and down-column norms") {
  constexpr std::size_t d_model = 64;
  constexpr std::size_t d_ff = 96;
  const auto up = random_values(d_ff * d_model, 41, 0.2F);
  const auto down = random_values(d_model * d_ff, 42, 0.3F);
  const auto g = random_values(d_ff, 43, 3.0F);
  for (dtype t : all_dtypes) {
    CAPTURE(name(t));
    visit_dtype(t, [&](auto tag) {
      using T = typename decltype(tag)::type;
      const test_weights<T> wu(up, d_ff, d_model);
      const test_weights<T> wd(down, d_model, d_ff, 3);
      const auto un = oracle_row_norms(wu.dequantized, d_ff, d_model);
      const auto dn = oracle_column_norms(wd.dequantized, d_model, d_ff);
      const auto s = weight_aware_gate::from_weights(wu.view, wd.view);
      REQUIRE(s.neuron_norms().size() == d_ff);
      for (std::size_t j = 0; j < d_ff; ++j) CHECK(close(s.neuron_norms()[j], un[j] * dn[j]));
      for (activation a : {activation::silu, activation::gelu, activation::relu}) {
        CAPTURE(name(a));
        std::vector<float> out(s.score_count({g, a}));
        REQUIRE(out.size() == d_ff);
        s.score({g, a}, out);
        for (std::size_t j = 0; j < d_ff; ++j) {
          // float gelu loses relative precision where 1 + tanh(..) cancels: allow 1e-6 absolute.
          const double act = std::fabs(test_oracle::activate(a, g[j]));
          CHECK(std::fabs(out[j] - act * un[j] * dn[j]) <= (1e-5 * act + 1e-6) * un[j] * dn[j]);
        }
      }
    });
  }
  // Mixed dtypes (a q4_0 up matrix with an f16 down matrix) work too.
  const test_weights<block_q4_0> wu(up, d_ff, d_model);
  const test_weights<f16> wd(down, d_model, d_ff);
  const auto s = weight_aware_gate::from_weights(wu.view, wd.view, {.normalize = true});
  double sum = 0.0;
  for (float v : s.neuron_norms()) sum += v;
  CHECK(close(sum / d_ff, 1.0, 1e-6));
}

TEST_CASE("scorers: weight_aware_gate bounds each neuron's contribution to the output") {
  constexpr std::size_t d_model = 32;
  constexpr std::size_t d_ff = 48;
  const auto gate = random_values(d_ff * d_model, 51);
  const auto up = random_values(d_ff * d_model, 52);
  const auto down = random_values(d_model * d_ff, 53);
  const auto x = random_values(d_model, 54);
  const test_weights<float> wu(up, d_ff, d_model);
  const test_weights<float> wd(down, d_model, d_ff);
  const auto s = weight_aware_gate::from_weights(wu.view, wd.view);
  std::vector<float> g(d_ff);
  double x_norm = 0.0;
  for (float v : x) x_norm += static_cast<double>(v) * v;
  x_norm = std::sqrt(x_norm);
  for (std::size_t j = 0; j < d_ff; ++j) {
    double acc = 0.0;
    for (std::size_t i = 0; i < d_model; ++i) acc += static_cast<double>(gate[j * d_model + i]) * x[i];
    g[j] = static_cast<float>(acc);
  }
  std::vector<float> score(d_ff);
  s.score({g, activation::silu}, score);
  for (std::size_t j = 0; j < d_ff; ++j) {
    double u = 0.0;
    for (std::size_t i = 0; i < d_model; ++i) u += static_cast<double>(up[j * d_model + i]) * x[i];
    double contribution = 0.0;  // ‖h_j · u_j · W_down[:, j]‖
    for (std::size_t i = 0; i < d_model; ++i) {
      const double c = test_oracle::activate(activation::silu, g[j]) * u * down[i * d_ff + j];
      contribution += c * c;
    }
    CHECK(std::sqrt(contribution) <= score[j] * x_norm * (1.0 + 1e-5));
  }
}

TEST_CASE("scorers: weight_aware_gate rejects mismatched shapes and a wrong gate size") {
  const auto v = random_values(std::size_t{64} * 96, 61);
  const test_weights<float> up(v, 96, 64);       // d_ff 96, d_model 64
  const test_weights<float> down_ff(v, 64, 64);  // d_ff 64: wrong
  const test_weights<float> down_model(v, 32, 96);
  CHECK_THROWS_WITH_AS((void)weight_aware_gate::from_weights(up.view, down_ff.view),
                       doctest::Contains("argument 'w_down' is a matrix of 64 x 64 f32; expected 96 columns (d_ff"),
                       error);
  CHECK_THROWS_WITH_AS((void)weight_aware_gate::from_weights(up.view, down_model.view),
                       doctest::Contains("expected 64 rows (d_model"), error);
  const test_weights<float> down(v, 64, 96);
  const auto s = weight_aware_gate::from_weights(up.view, down.view);
  std::vector<float> g(95);
  std::vector<float> out(96);
  CHECK_THROWS_WITH_AS(s.score({g, activation::relu}, out),
                       doctest::Contains("argument 'g' is a span of 95 values; expected 96 values"), error);
}

TEST_CASE("scorers: token_l2 is the L2 norm of each row of a strided matrix") {
  constexpr std::size_t tokens = 19;
  constexpr std::size_t d = 70;
  constexpr std::size_t stride = 75;  // floats between rows
  const auto buf = random_values(tokens * stride, 71, 3.0F);
  const auto m = from_torch(buf.data(), tokens, d, stride);
  std::vector<float> out(token_l2{}.score_count(m));
  REQUIRE(out.size() == tokens);
  token_l2{}.score(m, out);
  for (std::size_t t = 0; t < tokens; ++t) {
    double sum = 0.0;
    for (std::size_t i = 0; i < d; ++i) sum += static_cast<double>(buf[t * stride + i]) * buf[t * stride + i];
    CHECK(close(out[t], std::sqrt(sum)));
  }
  out.resize(tokens + 1);
  CHECK_THROWS_WITH_AS(token_l2{}.score(m, out), doctest::Contains("argument 'out' is a span of 20 floats"), error);
  const matrix_view<const float> bad{buf.data(), 2, d, 8};
  CHECK_THROWS_WITH_AS(token_l2{}.score(bad, std::span<float>(out.data(), 2)), doctest::Contains("attn_out"), error);
}

TEST_CASE("scorers: relu_exact is max(g, 0), zero exactly for inactive neurons, and keeps NaN") {
  const auto g = random_values(301, 81);
  std::vector<float> out(relu_exact{}.score_count(g));
  relu_exact{}.score(g, out);
  for (std::size_t j = 0; j < g.size(); ++j) {
    CHECK(out[j] == std::max(0.0, static_cast<double>(g[j])));
    CHECK((out[j] != 0.0F) == (g[j] > 0.0F));
  }
  const std::vector<float> special{-0.0F, std::numeric_limits<float>::quiet_NaN(), -1.0F,
                                   std::numeric_limits<float>::infinity()};
  std::vector<float> s(4);
  relu_exact{}.score(special, s);
  CHECK(s[0] == 0.0F);
  CHECK(std::isnan(s[1]));
  CHECK(s[2] == 0.0F);
  CHECK(std::isinf(s[3]));
  CHECK_THROWS_AS(relu_exact{}.score(special, std::span<float>(s.data(), 3)), error);
}

TEST_CASE("scorers: silu_magnitude is |silu(g)|") {
  for (unsigned seed : {91U, 92U}) {
    const auto g = random_values(513, seed, 4.0F);
    std::vector<float> out(silu_magnitude{}.score_count(g));
    silu_magnitude{}.score(g, out);
    for (std::size_t j = 0; j < g.size(); ++j)
      CHECK(close(out[j], std::fabs(test_oracle::activate(activation::silu, g[j])), 1e-6));
  }
  std::vector<float> g(3);
  std::vector<float> out(2);
  CHECK_THROWS_WITH_AS(silu_magnitude{}.score(g, out), doctest::Contains("silu_magnitude::score"), error);
}

TEST_CASE("scorers: router_softmax gives probabilities, stable for large logits") {
  for (unsigned seed : {101U, 102U, 103U}) {
    const auto logits = random_values(64, seed, 5.0F);
    std::vector<float> p(router_softmax{}.score_count(logits));
    router_softmax{}.score(logits, p);
    double max = logits[0];
    for (float l : logits) max = std::max(max, static_cast<double>(l));
    double denom = 0.0;
    for (float l : logits) denom += std::exp(l - max);
    double sum = 0.0;
    for (std::size_t e = 0; e < logits.size(); ++e) {
      CHECK(close(p[e], std::exp(logits[e] - max) / denom, 1e-6));
      sum += p[e];
    }
    CHECK(close(sum, 1.0, 1e-6));
  }
  // exp(1000) overflows; the shifted form does not.
  const std::vector<float> big{1000.0F, 1000.0F, 999.0F, -1000.0F};
  std::vector<float> p(4);
  router_softmax{}.score(big, p);
  const double e1 = std::exp(-1.0);
  CHECK(close(p[0], 1.0 / (2.0 + e1), 1e-6));
  CHECK(close(p[1], 1.0 / (2.0 + e1), 1e-6));
  CHECK(close(p[2], e1 / (2.0 + e1), 1e-6));
  CHECK(p[3] == 0.0F);
  const std::vector<float> one{-3.0F};
  std::vector<float> p1(1);
  router_softmax{}.score(one, p1);
  CHECK(p1[0] == 1.0F);
}

TEST_CASE("scorers: router_softmax rejects empty and non-finite logits") {
  std::vector<float> out(4);
  CHECK_THROWS_WITH_AS(router_softmax{}.score(std::span<const float>(), std::span<float>()),
                       doctest::Contains("argument 'logits' is an empty span"), error);
  const std::vector<float> bad{0.0F, 1.0F, std::numeric_limits<float>::infinity(),
                               std::numeric_limits<float>::quiet_NaN()};
  CHECK_THROWS_WITH_AS(router_softmax{}.score(bad, out), doctest::Contains("argument 'logits' is [2] = inf"), error);
  CHECK_THROWS_WITH_AS(router_softmax{}.score(bad, std::span<float>(out.data(), 3)),
                       doctest::Contains("argument 'out' is a span of 3 floats"), error);
}
