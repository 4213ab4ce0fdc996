#pragma once
// Reads a llama2.c checkpoint (legacy "version 0" format: 7 int32 then float32 arrays) and
// exposes its weights as actsparse views. Malformed files give an actsparse::error.

#include <actsparse/core/error.hpp>
#include <actsparse/core/views.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace llama2c {

struct config {
  std::int32_t dim = 0;
  std::int32_t hidden_dim = 0;
  std::int32_t n_layers = 0;
  std::int32_t n_heads = 0;
  std::int32_t n_kv_heads = 0;
  std::int32_t vocab_size = 0;  // negative in the file: the classifier is not shared
  std::int32_t seq_len = 0;
  bool shared_classifier = true;
};

class checkpoint {
 public:
  static checkpoint from_bytes(const std::vector<char>& bytes, const std::string& origin) {
    constexpr std::string_view where = "llama2c::checkpoint";
    constexpr std::size_t header = 7 * sizeof(std::int32_t);
    if (bytes.size() < header) {
      actsparse::detail::fail(where, origin, std::to_string(bytes.size()) + " bytes long",
                              "at least a 28-byte header of 7 int32");
    }
    checkpoint c;
    std::int32_t h[7];
    std::memcpy(h, bytes.data(), header);
    c.cfg_ = {h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[5] > 0};
    c.cfg_.vocab_size = h[5] < 0 ? -h[5] : h[5];
    const char* names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
    const std::int32_t limits[7] = {1 << 16, 1 << 18, 1024, 1024, 1024, 1 << 20, 1 << 20};
    for (int i = 0; i < 7; ++i) {
      const std::int32_t v = i == 5 ? c.cfg_.vocab_size : h[i];
      if (v <= 0 || v > limits[i]) {
        actsparse::detail::fail(where, names[i], v, "between 1 and " + std::to_string(limits[i]));
      }
    }
    if (c.cfg_.dim % c.cfg_.n_heads != 0) {
      actsparse::detail::fail(where, "n_heads", c.cfg_.n_heads, "a divisor of dim = " + std::to_string(c.cfg_.dim));
    }
    if (c.cfg_.n_heads % c.cfg_.n_kv_heads != 0) {
      actsparse::detail::fail(where, "n_kv_heads", c.cfg_.n_kv_heads,
                              "a divisor of n_heads = " + std::to_string(c.cfg_.n_heads));
    }
    const std::size_t floats = c.count_floats();
    if (bytes.size() != header + 4 * floats) {
      actsparse::detail::fail(where, origin, std::to_string(bytes.size()) + " bytes long",
                              std::to_string(header + 4 * floats) + " bytes (28 + 4 x " + std::to_string(floats) +
                                  " floats for this header)");
    }
    c.data_.resize(floats);
    std::memcpy(c.data_.data(), bytes.data() + header, 4 * floats);
    return c;
  }

  static checkpoint load(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) actsparse::detail::fail("llama2c::checkpoint", "path", path, "a readable llama2.c checkpoint file");
    std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return from_bytes(bytes, path);
  }

  [[nodiscard]] const config& cfg() const noexcept { return cfg_; }
  [[nodiscard]] std::size_t kv_dim() const noexcept {
    return static_cast<std::size_t>(cfg_.dim) * cfg_.n_kv_heads / cfg_.n_heads;
  }

  // Per-layer matrices, [out × in] row-major (y = W·x).
  [[nodiscard]] actsparse::matrix_view<const float> token_embedding() const { return mat(off_.emb, vocab(), dim()); }
  [[nodiscard]] std::span<const float> rms_att(std::size_t l) const { return vec(off_.rms_att + l * dim(), dim()); }
  [[nodiscard]] actsparse::matrix_view<const float> wq(std::size_t l) const {
    return mat(off_.wq + l * dim() * dim(), dim(), dim());
  }
  [[nodiscard]] actsparse::matrix_view<const float> wk(std::size_t l) const {
    return mat(off_.wk + l * kv_dim() * dim(), kv_dim(), dim());
  }
  [[nodiscard]] actsparse::matrix_view<const float> wv(std::size_t l) const {
    return mat(off_.wv + l * kv_dim() * dim(), kv_dim(), dim());
  }
  [[nodiscard]] actsparse::matrix_view<const float> wo(std::size_t l) const {
    return mat(off_.wo + l * dim() * dim(), dim(), dim());
  }
  [[nodiscard]] std::span<const float> rms_ffn(std::size_t l) const { return vec(off_.rms_ffn + l * dim(), dim()); }
  [[nodiscard]] actsparse::matrix_view<const float> w1(std::size_t l) const {
    return mat(off_.w1 + l * hid() * dim(), hid(), dim());
  }
  [[nodiscard]] actsparse::matrix_view<const float> w2(std::size_t l) const {
    return mat(off_.w2 + l * dim() * hid(), dim(), hid());
  }
  [[nodiscard]] actsparse::matrix_view<const float> w3(std::size_t l) const {
    return mat(off_.w3 + l * hid() * dim(), hid(), dim());
  }
  [[nodiscard]] std::span<const float> rms_final() const { return vec(off_.rms_final, dim()); }
  [[nodiscard]] actsparse::matrix_view<const float> classifier() const {
    return cfg_.shared_classifier ? token_embedding() : mat(off_.wcls, vocab(), dim());
  }

 private:
  std::size_t dim() const { return static_cast<std::size_t>(cfg_.dim); }
  std::size_t hid() const { return static_cast<std::size_t>(cfg_.hidden_dim); }
  std::size_t vocab() const { return static_cast<std::size_t>(cfg_.vocab_size); }
  std::size_t layers() const { return static_cast<std::size_t>(cfg_.n_layers); }

  std::size_t count_floats() {
    const std::size_t head = dim() / static_cast<std::size_t>(cfg_.n_heads);
    std::size_t at = 0;
    auto take = [&at](std::size_t n) {
      const std::size_t o = at;
      at += n;
      return o;
    };
    off_.emb = take(vocab() * dim());
    off_.rms_att = take(layers() * dim());
    off_.wq = take(layers() * dim() * dim());
    off_.wk = take(layers() * kv_dim() * dim());
    off_.wv = take(layers() * kv_dim() * dim());
    off_.wo = take(layers() * dim() * dim());
    off_.rms_ffn = take(layers() * dim());
    off_.w1 = take(layers() * hid() * dim());
    off_.w2 = take(layers() * dim() * hid());
    off_.w3 = take(layers() * hid() * dim());
    off_.rms_final = take(dim());
    take(static_cast<std::size_t>(cfg_.seq_len) * head);  // freq_cis_real, freq_cis_imag (recomputed)
    off_.wcls = cfg_.shared_classifier ? 0 : take(vocab() * dim());
    return at;
  }
  actsparse::matrix_view<const float> mat(std::size_t off, std::size_t rows, std::size_t cols) const {
    return actsparse::matrix_view<const float>::packed(data_.data() + off, rows, cols);
  }
  std::span<const float> vec(std::size_t off, std::size_t n) const { return {data_.data() + off, n}; }

  struct offsets {
    std::size_t emb, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, wcls;
  };
  config cfg_;
  offsets off_{};
  std::vector<float> data_;
};

}  // namespace llama2c
