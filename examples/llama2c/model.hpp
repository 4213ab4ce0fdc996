#pragma once
// The Llama forward pass of a llama2.c checkpoint (format and reference behaviour:
// data/README.md): prefill of a whole sequence and batch-1 decode with a KV cache. Every
// projection and every FFN goes through a `policy`, so the same forward pass runs dense or
// through any actsparse operator:
//   policy::linear       y = W·x for one of the seven projections (q, k, v, o, gate, up, down)
//   policy::ffn          the FFN of one token (decode, and prefill unless ffn_prefill is overridden)
//   policy::ffn_prefill  the FFN of every token of a prefill (token-sparse policies override it)
// The defaults run the CPU backend (Highway SIMD) densely: a program that includes this file
// defines the CPU kernels in one translation unit (ACTSPARSE_CPU_IMPLEMENTATION, see
// actsparse/backends/cpu/implementation.hpp). The model keeps W_downᵀ of every layer
// (cpu::transpose at load), which the CPU backend's neuron-sparse FFN reads. A step of decode and a row of prefill run
// the same operations on the same values in the same order, so their logits are equal bit
// for bit (the tests check it within 1e-4 as the contract, and bit for bit as the fact).
//
// The KV cache is plain f32 arrays (new_cache(): the default and the oracle) or tiered stores
// (new_cache(configs): one actsparse::tiered_store for K and one for V per layer, each row a
// position's kv_dim values). With stores, a layer runs row by row: the row's K and V go into
// the stores (which may demote, compress or drop older rows by their policy), then its
// attention runs on the CPU backend's attention over the rows as the stores hold them (f32,
// f16, INT8, INT4; dropped rows skipped), exactly what a decode step at that position would
// see. An importance store also receives each position's attention probability, summed over
// heads (heavy hitters).
//
// A model built with an FFN dtype of q8_0 or q4_0 runs its FFNs on quantized weights: W_gate and
// W_up quantized row by row, and W_downᵀ (the f32 W_down transposed, then quantized once: no
// second rounding) by core's quantize_row (ggml's reference quantizers, the same bytes as
// ggml's). W_down itself is absent from its ffn_layer (its rows of d_ff = 172 values are not
// whole blocks of 32): the CPU backend runs the down projection over W_downᵀ, dense and sparse.
// Attention, the embedding and the classifier stay f32.

#include "checkpoint.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/backends/cpu/repack.hpp>
#include <actsparse/core/dtype.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/op_args.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/managers/tiered_store.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>
#include <actsparse/ops/run.hpp>

#include <array>
#include <cmath>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace llama2c {

enum class projection { q, k, v, o, gate, up, down };
inline constexpr std::array<std::string_view, 7> projection_names{"q", "k", "v", "o", "gate", "up", "down"};

// Rows of a row-major [rows × cols] f32 buffer.
struct rows_buffer {
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::vector<float> data;
  rows_buffer() = default;
  rows_buffer(std::size_t r, std::size_t c) : rows(r), cols(c), data(r * c, 0.0F) {}
  [[nodiscard]] std::span<float> row(std::size_t r) { return {data.data() + r * cols, cols}; }
  [[nodiscard]] std::span<const float> row(std::size_t r) const { return {data.data() + r * cols, cols}; }
  [[nodiscard]] actsparse::matrix_view<float> view() {
    return actsparse::matrix_view<float>::packed(data.data(), rows, cols);
  }
  [[nodiscard]] actsparse::matrix_view<const float> view() const {
    return actsparse::matrix_view<const float>::packed(data.data(), rows, cols);
  }
};

// How the forward pass computes its projections and FFNs. The defaults are dense, on the
// CPU backend.
class policy {
 public:
  policy() = default;
  policy(const policy&) = delete;
  policy& operator=(const policy&) = delete;
  virtual ~policy() = default;

  // y = W·x for projection p of `layer` (the FFN's three only through the default ffn()).
  virtual void linear(std::size_t layer, projection p, const actsparse::weight_view& w, std::span<const float> x,
                      std::span<float> y) {
    (void)layer;
    (void)p;
    check(actsparse::run(backend_, actsparse::gemv_args{w, x, y, actsparse::subset::everything()}, workspace_, ex_),
          "gemv");
  }

  // y = W_down (act(W_gate x) ⊙ W_up x) for one token. The default computes it through
  // linear() (so a policy that sparsifies the projections sparsifies the FFN too).
  virtual void ffn(std::size_t layer, const actsparse::ffn_layer& w, std::span<const float> x, std::span<float> y) {
    const std::size_t d_ff = w.d_ff();
    gate_.resize(d_ff);
    up_.resize(d_ff);
    linear(layer, projection::gate, w.gate, x, gate_);
    linear(layer, projection::up, w.up, x, up_);
    for (std::size_t j = 0; j < d_ff; ++j) gate_[j] = actsparse::apply(w.act, gate_[j]) * up_[j];
    if (w.down.absent()) {
      actsparse::detail::fail("llama2c::policy::ffn", "W_down", "absent (a quantized model holds W_down^T only)",
                              "a policy whose ffn() runs an FFN op (the default runs W_down through linear())");
    }
    linear(layer, projection::down, w.down, gate_, y);
  }

  // residual[t] += FFN(input[t]) for every token t of a prefill; attention_out[t] is the
  // token's attention output (what token-sparse policies score tokens by).
  virtual void ffn_prefill(std::size_t layer, const actsparse::ffn_layer& w, const rows_buffer& attention_out,
                           const rows_buffer& input, rows_buffer& residual) {
    (void)attention_out;
    out_.resize(residual.cols);
    for (std::size_t t = 0; t < input.rows; ++t) {
      ffn(layer, w, input.row(t), out_);
      const std::span<float> r = residual.row(t);
      for (std::size_t i = 0; i < r.size(); ++i) r[i] += out_[i];
    }
  }

 protected:
  static void check(const actsparse::status& s, std::string_view what) {
    if (!s) actsparse::detail::fail("llama2c::policy", what, s.reason, "a backend that handles it");
  }

  actsparse::cpu_backend backend_{};
  actsparse::cpu::executor ex_{};  // the calling thread

 private:
  std::vector<std::byte> workspace_;
  std::vector<float> gate_, up_, out_;
};

// A dense FFN policy through the CPU backend's fused FFN (the baseline of the demo).
class dense_policy : public policy {
 public:
  void ffn(std::size_t, const actsparse::ffn_layer& w, std::span<const float> x, std::span<float> y) override {
    check(actsparse::dense_ffn(backend_, w, x, y, scratch_, ex_), "dense FFN");
  }

 private:
  actsparse::ffn_scratch scratch_;
};

// x / sqrt(mean(x²) + 1e-5) · weight, in f32 with a fixed order.
inline void rmsnorm(std::span<const float> x, std::span<const float> weight, std::span<float> out) {
  float ss = 0.0F;
  for (const float v : x) ss += v * v;
  const float inv = 1.0F / std::sqrt(ss / static_cast<float>(x.size()) + 1e-5F);
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = weight[i] * (inv * x[i]);
}

class model {
 public:
  // ffn_type: the FFN weights' dtype, f32 (the checkpoint's own) or q8_0 / q4_0 (quantized at
  // load, see the top of this file; dim must then be a multiple of 32). act: the FFN gate's
  // activation, which a llama2.c checkpoint does not record: SiLU (llama2.c's), or ReLU for a
  // ReLU-fied checkpoint (data/stories260K_relu.bin, scripts/relufy.py).
  explicit model(const checkpoint& c, actsparse::dtype ffn_type = actsparse::dtype::f32,
                 actsparse::activation act = actsparse::activation::silu)
      : ckpt_(&c), cfg_(c.cfg()), ffn_type_(ffn_type) {
    dim_ = static_cast<std::size_t>(cfg_.dim);
    hidden_ = static_cast<std::size_t>(cfg_.hidden_dim);
    layers_ = static_cast<std::size_t>(cfg_.n_layers);
    heads_ = static_cast<std::size_t>(cfg_.n_heads);
    kv_heads_ = static_cast<std::size_t>(cfg_.n_kv_heads);
    head_size_ = dim_ / heads_;
    kv_dim_ = c.kv_dim();
    vocab_ = static_cast<std::size_t>(cfg_.vocab_size);
    seq_len_ = static_cast<std::size_t>(cfg_.seq_len);
    if (head_size_ % 2 != 0) {
      actsparse::detail::fail("llama2c::model", "head size", head_size_, "an even head size (RoPE rotates pairs)");
    }
    if (ffn_type != actsparse::dtype::f32 && ffn_type != actsparse::dtype::q8_0 && ffn_type != actsparse::dtype::q4_0) {
      actsparse::detail::fail("llama2c::model", "FFN dtype", actsparse::name(ffn_type), "f32, q8_0 or q4_0");
    }
    if (ffn_type != actsparse::dtype::f32 && dim_ % 32 != 0) {
      actsparse::detail::fail("llama2c::model", "dim", dim_,
                              "a multiple of 32 for " + std::string(actsparse::name(ffn_type)) +
                                  " FFN weights (rows of W_gate, W_up and W_down^T in whole blocks)");
    }
    for (std::size_t l = 0; l < layers_; ++l) down_t_.push_back(actsparse::cpu::transpose(c.w2(l)));
    for (std::size_t l = 0; l < layers_; ++l) {
      // llama2.c: h = silu(w1·x) ⊙ (w3·x), y = w2·h: gate = w1, up = w3, down = w2.
      if (ffn_type == actsparse::dtype::f32) {
        ffn_.push_back(actsparse::ffn_layer{act, c.w1(l), c.w3(l), c.w2(l), down_t_[l].view});
        continue;
      }
      for (const actsparse::matrix_view<const float> w : {c.w1(l), c.w3(l), down_t_[l].view.as<float>()}) {
        quantized_.push_back(quantized(w, ffn_type));
      }
      const std::size_t q = quantized_.size() - 3;
      ffn_.push_back(actsparse::ffn_layer{act, quantized_[q].view, quantized_[q + 1].view, actsparse::weight_view{},
                                          quantized_[q + 2].view});
    }
  }

  // w [rows × cols] f32 quantized row by row (core's quantize_row: ggml's reference quantizers).
  [[nodiscard]] static actsparse::cpu::owned_weights quantized(actsparse::matrix_view<const float> w,
                                                               actsparse::dtype type) {
    const std::size_t row = actsparse::row_bytes(type, w.cols);
    actsparse::cpu::owned_weights q;
    q.bytes.resize(w.rows * row);
    for (std::size_t r = 0; r < w.rows; ++r) {
      std::byte* const out = q.bytes.data() + r * row;
      if (type == actsparse::dtype::q8_0) {
        actsparse::quantize_row(w.row(r), reinterpret_cast<actsparse::block_q8_0*>(out), w.cols);
      } else {
        actsparse::quantize_row(w.row(r), reinterpret_cast<actsparse::block_q4_0*>(out), w.cols);
      }
    }
    q.view = actsparse::weight_view(q.bytes.data(), type, w.rows, w.cols, row);
    return q;
  }

  model(const model&) = delete;  // ffn_ points into down_t_ and quantized_
  model& operator=(const model&) = delete;

  [[nodiscard]] const config& cfg() const noexcept { return cfg_; }
  [[nodiscard]] std::size_t dim() const noexcept { return dim_; }
  [[nodiscard]] std::size_t vocab() const noexcept { return vocab_; }
  [[nodiscard]] std::size_t layers() const noexcept { return layers_; }
  [[nodiscard]] std::size_t seq_len() const noexcept { return seq_len_; }
  [[nodiscard]] const actsparse::ffn_layer& ffn(std::size_t l) const { return ffn_.at(l); }
  // The FFN weights' dtype (f32, q8_0 or q4_0).
  [[nodiscard]] actsparse::dtype ffn_type() const noexcept { return ffn_type_; }
  // Bytes of the FFN matrices the layers' views hold (gate, up, W_down where given, W_downᵀ),
  // and the model's own FFN bytes in that dtype (gate, up and down once): their ratio is what
  // the layout costs in memory (f32: W_down and its transpose, 4/3; quantized: W_downᵀ only, 1).
  [[nodiscard]] std::size_t ffn_resident_bytes() const noexcept {
    std::size_t n = 0;
    for (const actsparse::ffn_layer& f : ffn_) {
      for (const actsparse::weight_view* w : {&f.gate, &f.up, &f.down, &f.down_t}) {
        if (!w->absent()) n += w->rows * actsparse::row_bytes(w->type, w->cols);
      }
    }
    return n;
  }
  [[nodiscard]] std::size_t ffn_model_bytes() const noexcept {
    std::size_t n = 0;
    for (const actsparse::ffn_layer& f : ffn_) n += 3 * f.gate.rows * actsparse::row_bytes(f.gate.type, f.gate.cols);
    return n;
  }
  [[nodiscard]] const checkpoint& weights() const noexcept { return *ckpt_; }

  // Keys and values of every layer for positions [0, length).
  struct kv_cache {
    std::vector<float> k, v;  // [layers × seq_len × kv_dim]; empty with stores
    std::size_t length = 0;   // positions filled
    // Tiered stores, one per layer for K and for V (new_cache(configs)); empty for the plain cache.
    std::vector<actsparse::tiered_store> k_store, v_store;
    [[nodiscard]] bool tiered() const noexcept { return !k_store.empty(); }
    // Bytes the cache holds: the plain arrays' filled rows, or every store's bytes_held().
    [[nodiscard]] std::size_t bytes_held() const noexcept {
      if (!tiered()) return length * position_bytes;
      std::size_t b = 0;
      for (std::size_t l = 0; l < k_store.size(); ++l) b += k_store[l].bytes_held() + v_store[l].bytes_held();
      return b;
    }
    std::size_t position_bytes = 0;  // plain arrays: bytes of one position's K and V in every layer
    // Scratch of the tiered attention (grows once).
    std::vector<actsparse::row_ref> k_rows, v_rows;
    std::vector<float> mass;
    std::vector<std::byte> workspace;
  };
  // The largest KV cache new_cache() allocates (keys and values together): a checkpoint within
  // every header limit may still ask for more than a demo machine holds (seq_len 2^20 with a
  // few layers is 8 GiB), which should be a clear error, not std::bad_alloc.
  static constexpr std::size_t max_cache_bytes = std::size_t{2} << 30;  // 2 GiB

  [[nodiscard]] kv_cache new_cache() const {
    const std::size_t values = layers_ * seq_len_ * kv_dim_;  // within the header limits: no overflow
    if (values > max_cache_bytes / (2 * sizeof(float))) {
      actsparse::detail::fail("llama2c::model::new_cache", "KV cache bytes (2 x layers x seq_len x kv_dim x 4)",
                              2 * values * sizeof(float),
                              "at most model::max_cache_bytes = " + std::to_string(max_cache_bytes) +
                                  " (a checkpoint with a shorter seq_len)");
    }
    kv_cache c;
    c.k.assign(layers_ * seq_len_ * kv_dim_, 0.0F);
    c.v.assign(layers_ * seq_len_ * kv_dim_, 0.0F);
    c.position_bytes = layers_ * 2 * kv_dim_ * sizeof(float);
    return c;
  }

  // A KV cache in tiered stores: k[l] and v[l] configure layer l's K store and V store (row_size
  // kv_dim each). A store too small for the sequence it is given throws at the store() that
  // overflows it (see tiered_store_config::drop).
  [[nodiscard]] kv_cache new_cache(std::span<const actsparse::tiered_store_config> k,
                                   std::span<const actsparse::tiered_store_config> v) const {
    constexpr std::string_view where = "llama2c::model::new_cache";
    kv_cache c;
    for (const auto& [configs, stores] : {std::pair{k, &c.k_store}, std::pair{v, &c.v_store}}) {
      if (configs.size() != layers_) {
        actsparse::detail::fail(where, "configurations", configs.size(),
                                "one store configuration per layer (" + std::to_string(layers_) + ")");
      }
      for (const actsparse::tiered_store_config& s : configs) {
        if (s.row_size != kv_dim_) {
          actsparse::detail::fail(where, "row_size", s.row_size, "kv_dim = " + std::to_string(kv_dim_));
        }
        stores->emplace_back(s);
      }
    }
    return c;
  }
  // K and V stores configured alike.
  [[nodiscard]] kv_cache new_cache(std::span<const actsparse::tiered_store_config> per_layer) const {
    return new_cache(per_layer, per_layer);
  }

  // Bytes of an f32 cache holding `positions` positions (K and V of every layer).
  [[nodiscard]] std::size_t f32_cache_bytes(std::size_t positions) const noexcept {
    return positions * layers_ * 2 * kv_dim_ * sizeof(float);
  }
  [[nodiscard]] std::size_t kv_dim() const noexcept { return kv_dim_; }

  // One decode step: the token at position cache.length; writes its logits (vocab) and
  // appends its keys and values to the cache.
  void decode(int token, kv_cache& cache, std::span<float> logits, policy& p) const {
    check_token(token, "decode");
    const std::size_t pos = cache.length;
    if (pos >= seq_len_) {
      actsparse::detail::fail("llama2c::model::decode", "position", pos,
                              "a position < seq_len = " + std::to_string(seq_len_) + " (the KV cache is full)");
    }
    check_logits(logits, 1, "decode");
    rows_buffer x(1, dim_);
    embed(token, x.row(0));
    for (std::size_t l = 0; l < layers_; ++l) layer(l, pos, x, cache, p);
    cache.length = pos + 1;
    classify(x.row(0), logits);
  }

  // Prefill of tokens at positions [cache.length, cache.length + n): writes the logits of
  // every position (logits: n × vocab, row-major) and appends to the cache.
  void prefill(std::span<const int> tokens, kv_cache& cache, std::span<float> logits, policy& p) const {
    const std::size_t n = tokens.size();
    if (n == 0) actsparse::detail::fail("llama2c::model::prefill", "tokens", "empty", "at least one token");
    if (cache.length + n > seq_len_) {
      actsparse::detail::fail("llama2c::model::prefill", "positions", cache.length + n,
                              "at most seq_len = " + std::to_string(seq_len_));
    }
    check_logits(logits, n, "prefill");
    for (const int t : tokens) check_token(t, "prefill");
    const std::size_t start = cache.length;
    rows_buffer x(n, dim_);
    for (std::size_t t = 0; t < n; ++t) embed(tokens[t], x.row(t));
    for (std::size_t l = 0; l < layers_; ++l) layer(l, start, x, cache, p);
    cache.length = start + n;
    for (std::size_t t = 0; t < n; ++t) classify(x.row(t), logits.subspan(t * vocab_, vocab_));
  }

 private:
  // One layer over the rows of x, at positions [start, start + x.rows): attention for every
  // row (each sees the cache up to itself), then the FFN of every row through the policy.
  void layer(std::size_t l, std::size_t start, rows_buffer& x, kv_cache& cache, policy& p) const {
    if (cache.tiered()) {
      tiered_layer(l, start, x, cache, p);
      return;
    }
    const checkpoint& c = *ckpt_;
    const std::size_t n = x.rows;
    rows_buffer attn_out(n, dim_);
    rows_buffer ffn_in(n, dim_);
    std::vector<float> xb(dim_), q(dim_), att(dim_), scores(seq_len_);
    float* const kc = cache.k.data() + l * seq_len_ * kv_dim_;
    float* const vc = cache.v.data() + l * seq_len_ * kv_dim_;
    for (std::size_t t = 0; t < n; ++t) {  // keys and values of every row first
      const std::size_t pos = start + t;
      rmsnorm(x.row(t), c.rms_att(l), xb);
      const std::span<float> k(kc + pos * kv_dim_, kv_dim_);
      const std::span<float> v(vc + pos * kv_dim_, kv_dim_);
      p.linear(l, projection::k, c.wk(l), xb, k);
      p.linear(l, projection::v, c.wv(l), xb, v);
      rope(k, pos);
    }
    const float scale = 1.0F / std::sqrt(static_cast<float>(head_size_));
    const std::size_t group = heads_ / kv_heads_;
    for (std::size_t t = 0; t < n; ++t) {
      const std::size_t pos = start + t;
      rmsnorm(x.row(t), c.rms_att(l), xb);
      p.linear(l, projection::q, c.wq(l), xb, q);
      rope(q, pos);
      for (std::size_t h = 0; h < heads_; ++h) {
        const float* qh = q.data() + h * head_size_;
        const std::size_t kvh = h / group;
        float max = -INFINITY;
        for (std::size_t s = 0; s <= pos; ++s) {
          const float* ks = kc + s * kv_dim_ + kvh * head_size_;
          float dot = 0.0F;
          for (std::size_t i = 0; i < head_size_; ++i) dot += qh[i] * ks[i];
          scores[s] = dot * scale;
          max = scores[s] > max ? scores[s] : max;
        }
        float sum = 0.0F;
        for (std::size_t s = 0; s <= pos; ++s) {
          scores[s] = std::exp(scores[s] - max);
          sum += scores[s];
        }
        float* out = att.data() + h * head_size_;
        for (std::size_t i = 0; i < head_size_; ++i) out[i] = 0.0F;
        for (std::size_t s = 0; s <= pos; ++s) {
          const float a = scores[s] / sum;
          const float* vs = vc + s * kv_dim_ + kvh * head_size_;
          for (std::size_t i = 0; i < head_size_; ++i) out[i] += a * vs[i];
        }
      }
      attention_output(l, t, att, x, attn_out, ffn_in, p);
    }
    p.ffn_prefill(l, ffn_[l], attn_out, ffn_in, x);
  }

  // Row t after its attention: the output projection, the residual, the FFN's RMS norm.
  void attention_output(std::size_t l, std::size_t t, std::span<const float> att, rows_buffer& x, rows_buffer& attn_out,
                        rows_buffer& ffn_in, policy& p) const {
    const checkpoint& c = *ckpt_;
    p.linear(l, projection::o, c.wo(l), att, attn_out.row(t));
    const std::span<float> r = x.row(t);
    const std::span<const float> ao = attn_out.row(t);
    for (std::size_t i = 0; i < dim_; ++i) r[i] += ao[i];
    rmsnorm(r, c.rms_ffn(l), ffn_in.row(t));
  }

  // layer() on tiered stores: row by row, the row's K and V stored before its attention.
  void tiered_layer(std::size_t l, std::size_t start, rows_buffer& x, kv_cache& cache, policy& p) const {
    const checkpoint& c = *ckpt_;
    const std::size_t n = x.rows;
    rows_buffer attn_out(n, dim_);
    rows_buffer ffn_in(n, dim_);
    std::vector<float> xb(dim_), q(dim_), att(dim_), k(kv_dim_), v(kv_dim_);
    actsparse::tiered_store& ks = cache.k_store[l];
    actsparse::tiered_store& vs = cache.v_store[l];
    for (std::size_t t = 0; t < n; ++t) {
      const std::size_t pos = start + t;
      rmsnorm(x.row(t), c.rms_att(l), xb);
      p.linear(l, projection::k, c.wk(l), xb, k);
      p.linear(l, projection::v, c.wv(l), xb, v);
      rope(k, pos);
      ks.store(pos, k);
      vs.store(pos, v);
      p.linear(l, projection::q, c.wq(l), xb, q);
      rope(q, pos);
      const std::size_t positions = pos + 1;
      cache.k_rows.assign(positions, actsparse::row_ref{});
      cache.v_rows.assign(positions, actsparse::row_ref{});
      for (std::size_t s = 0; s < positions; ++s) {  // absent rows stay {nullptr}: skipped
        if (ks.tier_of(s) != actsparse::tier::absent) cache.k_rows[s] = ks.view(s);
        if (vs.tier_of(s) != actsparse::tier::absent) cache.v_rows[s] = vs.view(s);
      }
      const bool heavy = ks.config().policy == actsparse::eviction::importance ||
                         vs.config().policy == actsparse::eviction::importance;
      cache.mass.resize(positions);
      const actsparse::attention_args a{
          q,
          cache.k_rows,
          cache.v_rows,
          heads_,
          kv_heads_,
          head_size_,
          1.0F / std::sqrt(static_cast<float>(head_size_)),
          att,
          heavy ? actsparse::borrowed_span<float>(cache.mass) : actsparse::borrowed_span<float>{}};
      actsparse::cpu::executor ex;
      const auto st = actsparse::run(actsparse::cpu_backend{}, a, cache.workspace, ex);
      if (!st) actsparse::detail::fail("llama2c::model", "attention", st.reason, "the CPU attention to run");
      if (heavy) {
        for (std::size_t s = 0; s < positions; ++s) {
          ks.add_importance(s, cache.mass[s]);
          vs.add_importance(s, cache.mass[s]);
        }
      }
      attention_output(l, t, att, x, attn_out, ffn_in, p);
    }
    p.ffn_prefill(l, ffn_[l], attn_out, ffn_in, x);
  }

  // RoPE on the pairs (i, i+1) of every head: angle pos·10000^(-(i mod head_size)/head_size).
  void rope(std::span<float> v, std::size_t pos) const {
    for (std::size_t i = 0; i + 1 < v.size(); i += 2) {
      const std::size_t hi = i % head_size_;
      const float freq = 1.0F / std::pow(10000.0F, static_cast<float>(hi) / static_cast<float>(head_size_));
      const float angle = static_cast<float>(pos) * freq;
      const float cr = std::cos(angle);
      const float ci = std::sin(angle);
      const float a = v[i];
      const float b = v[i + 1];
      v[i] = a * cr - b * ci;
      v[i + 1] = a * ci + b * cr;
    }
  }

  void embed(int token, std::span<float> out) const {
    const auto emb = ckpt_->token_embedding();
    const float* row = emb.row(static_cast<std::size_t>(token));
    for (std::size_t i = 0; i < dim_; ++i) out[i] = row[i];
  }

  void classify(std::span<const float> x, std::span<float> logits) const {
    std::vector<float> xn(dim_);
    rmsnorm(x, ckpt_->rms_final(), xn);
    const auto w = ckpt_->classifier();
    const actsparse::cpu_backend cpu;
    actsparse::cpu::executor ex;
    const auto s = cpu.run(actsparse::gemv_args{w, xn, logits, actsparse::subset::everything()}, {}, ex);
    if (!s) actsparse::detail::fail("llama2c::model", "classifier", s.reason, "the CPU GEMV to run");
  }

  void check_token(int token, std::string_view where) const {
    if (token < 0 || static_cast<std::size_t>(token) >= vocab_) {
      actsparse::detail::fail("llama2c::model", std::string(where) + " token", token,
                              "a token id in [0, " + std::to_string(vocab_) + ")");
    }
  }
  void check_logits(std::span<float> logits, std::size_t n, std::string_view where) const {
    if (logits.size() != n * vocab_) {
      actsparse::detail::fail("llama2c::model", std::string(where) + " logits.size()", logits.size(),
                              std::to_string(n) + " x vocab = " + std::to_string(n * vocab_));
    }
  }

  const checkpoint* ckpt_;
  config cfg_;
  std::size_t dim_ = 0, hidden_ = 0, layers_ = 0, heads_ = 0, kv_heads_ = 0, head_size_ = 0, kv_dim_ = 0, vocab_ = 0,
              seq_len_ = 0;
  actsparse::dtype ffn_type_;
  std::vector<actsparse::cpu::owned_weights> down_t_;     // f32 W_downᵀ of every layer
  std::vector<actsparse::cpu::owned_weights> quantized_;  // q8_0 / q4_0: W_gate, W_up, W_downᵀ of every layer
  std::vector<actsparse::ffn_layer> ffn_;
};

}  // namespace llama2c
