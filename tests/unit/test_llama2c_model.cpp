// The llama2.c forward pass (examples/llama2c/model.hpp) on the real stories260K model:
// greedy decoding from BOS gives the documented tokens, decode equals prefill, and a
// keep-all sparse policy equals dense bit for bit; a KV cache in tiered stores (f32: the plain
// cache's logits; compressed: exact bytes, error growing as the bits shrink); the model with its
// FFN weights quantized to q8_0 / q4_0 (core's quantizer's bytes, W_downᵀ rounded once; logits
// close to f32; the reference and CPU backends agree on its FFNs); the FFN gate under ReLU.
#include "llama2c/checkpoint.hpp"
#include "llama2c/model.hpp"

#include <actsparse/backends/reference/backend.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>
#include <actsparse/scorers/magnitude.hpp>
#include <actsparse/scorers/relu_exact.hpp>
#include <actsparse/selectors/threshold.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

namespace {

const llama2c::checkpoint& stories() {
  static const llama2c::checkpoint c = llama2c::checkpoint::load(std::string(ACTSPARSE_DATA_DIR) + "/stories260K.bin");
  return c;
}

int argmax(std::span<const float> v) { return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin()); }

// A neuron-sparse FFN policy (any scorer × selector) on the CPU backend, as dense_policy.
template <class Scorer, class Selector>
class sparse_policy : public llama2c::policy {
 public:
  sparse_policy(Scorer sc, Selector se) : op_{sc, se, actsparse::score_source::gate_activation, {}} {}
  void ffn(std::size_t, const actsparse::ffn_layer& w, std::span<const float> x, std::span<float> y) override {
    check(op_(w, x, y, kept_, scratch_, ex_), "neuron-sparse FFN");
  }

 private:
  actsparse::neuron_sparse_ffn<Scorer, Selector, actsparse::cpu_backend> op_;
  actsparse::selection kept_;
  actsparse::ffn_scratch scratch_;
};

}  // namespace

TEST_CASE("llama2c model: greedy decoding from BOS gives the documented tokens") {
  const llama2c::model m(stories());
  llama2c::dense_policy dense;
  auto cache = m.new_cache();
  std::vector<float> logits(m.vocab());
  const std::vector<int> want = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426};
  std::vector<int> got = {1};
  while (got.size() < want.size()) {
    m.decode(got.back(), cache, logits, dense);
    got.push_back(argmax(logits));
  }
  CHECK(got == want);
}

TEST_CASE("llama2c model: incremental decode equals prefill (within 1e-4, in fact bit for bit)") {
  const llama2c::model m(stories());
  const std::vector<int> tokens = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 7, 99};
  for (const bool base_policy : {false, true}) {  // the fused dense FFN, and the FFN through linear()
    llama2c::policy plain;
    llama2c::dense_policy fused;
    llama2c::policy& p = base_policy ? plain : fused;
    auto pc = m.new_cache();
    std::vector<float> prefill(tokens.size() * m.vocab());
    m.prefill(tokens, pc, prefill, p);
    auto dc = m.new_cache();
    std::vector<float> step(m.vocab());
    float worst = 0.0F;
    bool same = true;
    for (std::size_t t = 0; t < tokens.size(); ++t) {
      m.decode(tokens[t], dc, step, p);
      for (std::size_t i = 0; i < m.vocab(); ++i) {
        worst = std::max(worst, std::fabs(step[i] - prefill[t * m.vocab() + i]));
        same = same && std::memcmp(&step[i], &prefill[t * m.vocab() + i], sizeof(float)) == 0;
      }
    }
    CHECK(worst <= 1e-4F);
    CHECK(same);
    CHECK(pc.length == tokens.size());
    CHECK(dc.length == tokens.size());
    // Prefill in two pieces equals one prefill.
    auto split = m.new_cache();
    std::vector<float> a(5 * m.vocab());
    std::vector<float> b((tokens.size() - 5) * m.vocab());
    m.prefill(std::span<const int>(tokens).first(5), split, a, p);
    m.prefill(std::span<const int>(tokens).subspan(5), split, b, p);
    CHECK(std::memcmp(a.data(), prefill.data(), a.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(b.data(), prefill.data() + a.size(), b.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("llama2c model: a keep-all sparse policy gives the dense logits and tokens bit for bit") {
  const llama2c::model m(stories());
  llama2c::dense_policy dense;
  sparse_policy keep_all(actsparse::magnitude{}, actsparse::top_k::by_ratio(1.0));
  sparse_policy half(actsparse::magnitude{}, actsparse::top_k::by_ratio(0.5));
  std::vector<int> tokens = {1};
  for (int i = 0; i < 40; ++i) tokens.push_back((i * 37 + 11) % 512);
  std::vector<float> want(tokens.size() * m.vocab());
  std::vector<float> got(want.size());
  auto c1 = m.new_cache();
  auto c2 = m.new_cache();
  m.prefill(tokens, c1, want, dense);
  m.prefill(tokens, c2, got, keep_all);
  CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) == 0);
  auto c3 = m.new_cache();
  m.prefill(tokens, c3, got, half);  // a real sparse policy changes the logits
  CHECK(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) != 0);
}

TEST_CASE("llama2c model: a ReLU gate is applied, and exact gating on it gives the dense logits") {
  // The bundled weights under ReLU (a ReLU-fied checkpoint has this model's shape): not the SiLU
  // model's logits; exact gating (relu_exact, threshold 0: the neurons with g > 0, the only ones
  // with h != 0) reads about half the rows and leaves the logits as dense computes them.
  const llama2c::model silu(stories());
  const llama2c::model relu(stories(), actsparse::dtype::f32, actsparse::activation::relu);
  CHECK(relu.ffn(0).act == actsparse::activation::relu);
  llama2c::dense_policy dense;
  sparse_policy exact(actsparse::relu_exact{}, actsparse::threshold{0.0F});
  std::vector<int> tokens = {1};
  for (int i = 0; i < 40; ++i) tokens.push_back((i * 37 + 11) % 512);
  std::vector<float> base(tokens.size() * relu.vocab());
  std::vector<float> want(base.size());
  std::vector<float> got(base.size());
  auto c0 = silu.new_cache();
  auto c1 = relu.new_cache();
  auto c2 = relu.new_cache();
  silu.prefill(tokens, c0, base, dense);
  relu.prefill(tokens, c1, want, dense);
  relu.prefill(tokens, c2, got, exact);
  double differ = 0.0;
  double worst = 0.0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    differ = std::max(differ, static_cast<double>(std::fabs(base[i] - want[i])));
    worst = std::max(worst, static_cast<double>(std::fabs(got[i] - want[i])));
  }
  CHECK(differ > 0.1);
  CHECK(worst <= 1e-5);
}

TEST_CASE("llama2c model: bad tokens, a full cache and wrong logit sizes are errors") {
  const llama2c::model m(stories());
  llama2c::dense_policy dense;
  auto cache = m.new_cache();
  std::vector<float> logits(m.vocab());
  CHECK_THROWS_AS(m.decode(-1, cache, logits, dense), actsparse::error);
  CHECK_THROWS_AS(m.decode(512, cache, logits, dense), actsparse::error);
  std::vector<float> short_logits(3);
  CHECK_THROWS_AS(m.decode(1, cache, short_logits, dense), actsparse::error);
  CHECK_THROWS_AS(m.prefill({}, cache, logits, dense), actsparse::error);
  cache.length = m.seq_len();
  CHECK_THROWS_AS(m.decode(1, cache, logits, dense), actsparse::error);
}

namespace {

// Every layer's K and V in stores of one configuration.
std::vector<actsparse::tiered_store_config> every_layer(const llama2c::model& m, actsparse::tiered_store_config c) {
  c.row_size = m.kv_dim();
  return std::vector<actsparse::tiered_store_config>(m.layers(), c);
}

std::vector<int> some_tokens(std::size_t n) {
  std::vector<int> t = {1};
  while (t.size() < n) t.push_back(static_cast<int>((t.size() * 37 + 11) % 512));
  return t;
}

float largest_difference(const std::vector<float>& a, const std::vector<float>& b) {
  float worst = 0.0F;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
  return worst;
}

// Every position's logits through the plain f32 cache (the oracle); its bytes checked.
std::vector<float> plain_logits(const llama2c::model& m, const std::vector<int>& tokens) {
  llama2c::dense_policy dense;
  std::vector<float> logits(tokens.size() * m.vocab());
  auto cache = m.new_cache();
  m.prefill(tokens, cache, logits, dense);
  CHECK(cache.bytes_held() == m.f32_cache_bytes(tokens.size()));
  return logits;
}

}  // namespace

TEST_CASE("llama2c model: a KV cache in f32 tiered stores gives the plain cache's logits, decode equals prefill") {
  using actsparse::row_format;
  const llama2c::model m(stories());
  llama2c::dense_policy dense;
  const std::vector<int> tokens = some_tokens(48);
  const std::vector<float> plain = plain_logits(m, tokens);

  const auto f32 = every_layer(m, {.full_capacity = 64, .compressed_capacity = 0, .full_format = row_format::f32});
  auto sc = m.new_cache(f32);
  std::vector<float> stored(plain.size());
  m.prefill(tokens, sc, stored, dense);
  CHECK(largest_difference(plain, stored) <= 1e-4F);  // the CPU attention sums in another order
  CHECK(sc.bytes_held() == m.f32_cache_bytes(tokens.size()));

  auto dc = m.new_cache(f32);  // decode on stores runs the same rows in the same order
  std::vector<float> step(m.vocab());
  bool same = true;
  for (std::size_t t = 0; t < tokens.size(); ++t) {
    m.decode(tokens[t], dc, step, dense);
    same = same && std::memcmp(step.data(), stored.data() + t * m.vocab(), step.size() * sizeof(float)) == 0;
  }
  CHECK(same);
}

TEST_CASE("llama2c model: compressed KV stores hold their exact bytes, and cost accuracy in order f16 < int8 < int4") {
  using actsparse::row_format;
  const llama2c::model m(stories());
  llama2c::dense_policy dense;
  const std::vector<int> tokens = some_tokens(64);
  const std::vector<float> plain = plain_logits(m, tokens);
  const std::size_t n = tokens.size();
  const std::size_t rows = 2 * m.layers() * n;
  auto run = [&](const std::vector<actsparse::tiered_store_config>& c, std::size_t want_bytes) {
    auto cache = m.new_cache(c);
    std::vector<float> got(plain.size());
    m.prefill(tokens, cache, got, dense);
    CHECK(cache.bytes_held() == want_bytes);
    return largest_difference(plain, got);
  };
  const float f16 = run(every_layer(m, {.full_capacity = n, .full_format = row_format::f16}), rows * 2 * m.kv_dim());
  const float int8 = run(every_layer(m, {.full_capacity = 0, .compressed_capacity = n}), rows * 34);
  const float int4 =
      run(every_layer(m, {.full_capacity = 0, .compressed_capacity = n, .compressed_format = row_format::int4_g32}),
          rows * 18);
  CAPTURE(f16);
  CAPTURE(int8);
  CAPTURE(int4);
  CHECK(f16 > 0.0F);
  CHECK(f16 < int8);
  CHECK(int8 < int4);
  CHECK(std::isfinite(int4));

  // Recent 16 full, a compressed tier of 16, the rest dropped: the bytes of what is left.
  const auto dropping = every_layer(m, {.full_capacity = 16,
                                        .compressed_capacity = 16,
                                        .compressed_format = row_format::int4_g32,
                                        .policy = actsparse::eviction::importance,
                                        .recent_n = 12,
                                        .sink_n = 2,
                                        .drop = true});
  auto cache = m.new_cache(dropping);
  std::vector<float> got(plain.size());
  m.prefill(tokens, cache, got, dense);
  CHECK(cache.bytes_held() == 2 * m.layers() * (16 * 4 * m.kv_dim() + 16 * 18));
  CHECK(cache.k_store[0].dropped_rows() == n - 32);
  CHECK(cache.k_store[0].tier_of(0) == actsparse::tier::full);  // a sink
  CHECK(largest_difference(plain, got) > 0.0F);
}

TEST_CASE("llama2c model: KV store configurations of the wrong count or row size are errors") {
  const llama2c::model m(stories());
  auto c = every_layer(m, {.full_capacity = 8});
  CHECK_THROWS_AS((void)m.new_cache(std::span(c).first(1)), actsparse::error);
  c[2].row_size = 64;
  CHECK_THROWS_AS((void)m.new_cache(c), actsparse::error);
  // A store without room for the sequence (and no drop tier) is an error at the store that overflows.
  auto small = m.new_cache(every_layer(m, {.full_capacity = 4, .compressed_capacity = 4}));
  llama2c::dense_policy dense;
  std::vector<float> logits(m.vocab());
  for (int t = 0; t < 8; ++t) m.decode(1, small, logits, dense);
  CHECK_THROWS_AS(m.decode(1, small, logits, dense), actsparse::error);
}

namespace {

// row_bytes(t, cols) bytes: one f32 row quantized by core's quantize_row.
std::vector<std::byte> quantized_row(const float* x, std::size_t cols, actsparse::dtype t) {
  std::vector<std::byte> out(actsparse::row_bytes(t, cols));
  if (t == actsparse::dtype::q8_0) {
    actsparse::quantize_row(x, reinterpret_cast<actsparse::block_q8_0*>(out.data()), cols);
  } else {
    actsparse::quantize_row(x, reinterpret_cast<actsparse::block_q4_0*>(out.data()), cols);
  }
  return out;
}

bool row_equals(const actsparse::weight_view& w, std::size_t r, const std::vector<std::byte>& want) {
  return std::memcmp(static_cast<const std::byte*>(w.data) + r * w.row_stride, want.data(), want.size()) == 0;
}

// ||a - b||_2 / ||b||_2.
double relative_l2(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0.0;
  double n = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    n += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(d / n);
}

}  // namespace

TEST_CASE("llama2c model: q8_0 and q4_0 FFN weights are core's quantizer's bytes, W_down^T quantized once from f32") {
  const llama2c::checkpoint& c = stories();
  for (const actsparse::dtype t : {actsparse::dtype::q8_0, actsparse::dtype::q4_0}) {
    CAPTURE(actsparse::name(t));
    const llama2c::model m(c, t);
    CHECK(m.ffn_type() == t);
    for (std::size_t l = 0; l < m.layers(); ++l) {
      const actsparse::ffn_layer& f = m.ffn(l);
      CHECK(f.down.absent());  // rows of d_ff = 172 values are not whole blocks: only W_downᵀ is held
      const auto w1 = c.w1(l);
      const auto w3 = c.w3(l);
      const auto w2 = c.w2(l);  // [dim × hidden]
      REQUIRE(f.gate.type == t);
      REQUIRE(f.up.type == t);
      REQUIRE(f.down_t.type == t);
      REQUIRE(f.down_t.rows == w2.cols);
      REQUIRE(f.down_t.cols == w2.rows);
      bool same = true;
      for (std::size_t r = 0; r < w1.rows; ++r) {
        same = same && row_equals(f.gate, r, quantized_row(w1.row(r), w1.cols, t));
        same = same && row_equals(f.up, r, quantized_row(w3.row(r), w3.cols, t));
      }
      std::vector<float> column(w2.rows);
      for (std::size_t j = 0; j < w2.cols; ++j) {  // row j of W_downᵀ: column j of the checkpoint's f32 W_down
        for (std::size_t i = 0; i < w2.rows; ++i) column[i] = w2.row(i)[j];
        same = same && row_equals(f.down_t, j, quantized_row(column.data(), column.size(), t));
      }
      CHECK(same);
    }
  }
}

TEST_CASE("llama2c model: the q8_0 and q4_0 models' dense logits are close to f32 (rel. L2 0.03 and 0.15)") {
  const llama2c::model f32(stories());
  const std::vector<int> tokens = some_tokens(64);
  const std::vector<float> want = plain_logits(f32, tokens);
  // Measured (AVX2): q8_0 0.0050, q4_0 0.057 (relative L2 of all 64 positions' logits); the
  // bounds leave room for other SIMD targets' summation orders, not for a wrong block.
  for (const auto& [t, bound] : {std::pair{actsparse::dtype::q8_0, 0.03}, std::pair{actsparse::dtype::q4_0, 0.15}}) {
    CAPTURE(actsparse::name(t));
    const llama2c::model m(stories(), t);
    const std::vector<float> got = plain_logits(m, tokens);
    const double e = relative_l2(got, want);
    MESSAGE(actsparse::name(t), " logits, relative L2 against f32: ", e);
    CHECK(e <= bound);
    CHECK(e > 0.0);  // the weights really are quantized
    // A keep-all sparse policy equals the quantized dense model bit for bit (both over W_downᵀ).
    sparse_policy keep_all(actsparse::magnitude{}, actsparse::top_k::by_ratio(1.0));
    std::vector<float> all(got.size());
    auto cache = m.new_cache();
    m.prefill(tokens, cache, all, keep_all);
    CHECK(std::memcmp(all.data(), got.data(), all.size() * sizeof(float)) == 0);
  }
  // q8_0 is the closer of the two.
  const llama2c::model q8(stories(), actsparse::dtype::q8_0);
  const llama2c::model q4(stories(), actsparse::dtype::q4_0);
  CHECK(relative_l2(plain_logits(q8, tokens), want) < relative_l2(plain_logits(q4, tokens), want));
}

TEST_CASE("llama2c model: the reference and CPU backends agree on the quantized FFNs, dense and sparse") {
  std::vector<float> x(64);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37F * static_cast<float>(i) + 0.1F);
  std::vector<std::uint32_t> half;
  for (std::uint32_t j = 0; j < 172; j += 2) half.push_back(j);
  for (const actsparse::dtype t : {actsparse::dtype::q8_0, actsparse::dtype::q4_0}) {
    CAPTURE(actsparse::name(t));
    const llama2c::model m(stories(), t);
    double worst = 0.0;
    for (std::size_t l = 0; l < m.layers(); ++l) {
      for (const bool sparse : {false, true}) {
        const actsparse::subset neurons = sparse ? actsparse::subset::only(half) : actsparse::subset::everything();
        std::vector<float> want(64);
        std::vector<float> got(64);
        REQUIRE(actsparse::reference_backend{}.run_with_scratch(actsparse::gated_ffn_args{m.ffn(l), x, want, neurons}));
        std::vector<std::byte> workspace;
        actsparse::cpu::executor ex;
        REQUIRE(actsparse::run(actsparse::cpu_backend{}, actsparse::gated_ffn_args{m.ffn(l), x, got, neurons},
                               workspace, ex));
        // The CPU backend rounds x to int8 blocks for q8_0 / q4_0 weights (as ggml does); the
        // reference does not: a few per mille apart (measured (AVX2): 0.0055 at most).
        worst = std::max(worst, relative_l2(got, want));
      }
    }
    MESSAGE(actsparse::name(t), " FFNs, CPU against reference, largest relative L2: ", worst);
    CHECK(worst <= 0.02);
    CHECK(worst > 0.0);  // ran, and on quantized x
  }
}

TEST_CASE("llama2c model: an FFN dtype other than f32, q8_0 or q4_0 is an error, and so is W_down through linear()") {
  CHECK_THROWS_WITH_AS(llama2c::model(stories(), actsparse::dtype::f16), doctest::Contains("f32, q8_0 or q4_0"),
                       actsparse::error);
  CHECK_THROWS_WITH_AS(llama2c::model(stories(), actsparse::dtype::bf16), doctest::Contains("FFN dtype"),
                       actsparse::error);
  // The default policy::ffn runs W_down through linear(): a quantized model does not hold it.
  const llama2c::model m(stories(), actsparse::dtype::q8_0);
  llama2c::policy plain;
  auto cache = m.new_cache();
  std::vector<float> logits(m.vocab());
  CHECK_THROWS_WITH_AS(m.decode(1, cache, logits, plain), doctest::Contains("W_down"), actsparse::error);
}
