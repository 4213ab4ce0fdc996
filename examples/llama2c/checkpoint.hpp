#pragma once
// Reads a llama2.c checkpoint (legacy "version 0" format: 7 int32 then float32 arrays) and
// exposes its weights as actsparse views. Malformed bytes (truncated, a bad header, a size
// that disagrees with the header) give an actsparse::error naming the problem; never a crash.

#include <actsparse/core/error.hpp>
#include <actsparse/core/views.hpp>

#include <bit>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace llama2c {

static_assert(std::endian::native == std::endian::little, "llama2.c files are little-endian; this reader copies bytes");

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

namespace detail {

// Reads a whole file; an unreadable path is an actsparse::error.
inline std::vector<char> read_file(const std::string& path, std::string_view where, std::string_view what) {
  std::ifstream f(path, std::ios::binary);
  if (!f) actsparse::detail::fail(where, "path", path, what);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace detail

class checkpoint {
 public:
  static constexpr std::string_view where = "llama2c::checkpoint";
  static constexpr std::size_t header_bytes = 7 * sizeof(std::int32_t);

  // Parses a whole checkpoint held in memory (a file's bytes, a fuzzer's input). `origin`
  // names the source in error messages.
  static checkpoint from_bytes(std::span<const char> bytes, std::string_view origin = "bytes") {
    if (bytes.size() < header_bytes) {
      actsparse::detail::fail_described(where, origin, std::to_string(bytes.size()) + " bytes long (truncated header)",
                                        "at least a 28-byte header of 7 int32");
    }
    checkpoint c;
    std::int32_t h[7];
    std::memcpy(h, bytes.data(), header_bytes);
    // A negative vocab_size means an unshared classifier (INT32_MIN has no positive value: 0, rejected below).
    const std::int32_t vocab = h[5] == std::numeric_limits<std::int32_t>::min() ? 0 : (h[5] < 0 ? -h[5] : h[5]);
    c.cfg_ = {h[0], h[1], h[2], h[3], h[4], vocab, h[6], h[5] > 0};
    const char* names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
    const std::int32_t limits[7] = {1 << 16, 1 << 18, 1024, 1024, 1024, 1 << 20, 1 << 20};
    for (int i = 0; i < 7; ++i) {
      const std::int32_t v = i == 5 ? vocab : h[i];
      if (v <= 0 || v > limits[i]) {
        actsparse::detail::fail(where, names[i], h[i],
                                "between 1 and " + std::to_string(limits[i]) +
                                    (i == 5 ? " in absolute value (negative: an unshared classifier)" : ""));
      }
    }
    if (c.cfg_.dim % c.cfg_.n_heads != 0) {
      actsparse::detail::fail(where, "n_heads", c.cfg_.n_heads, "a divisor of dim = " + std::to_string(c.cfg_.dim));
    }
    if (c.cfg_.n_heads % c.cfg_.n_kv_heads != 0) {
      actsparse::detail::fail(where, "n_kv_heads", c.cfg_.n_kv_heads,
                              "a divisor of n_heads = " + std::to_string(c.cfg_.n_heads));
    }
    if ((c.cfg_.dim / c.cfg_.n_heads) % 2 != 0) {
      actsparse::detail::fail(where, "head_size", c.cfg_.dim / c.cfg_.n_heads,
                              "even (RoPE rotates pairs); head_size = dim / n_heads with dim = " +
                                  std::to_string(c.cfg_.dim) + ", n_heads = " + std::to_string(c.cfg_.n_heads));
    }
    const std::size_t floats = c.count_floats();  // checked arithmetic: throws rather than wraps
    const std::size_t expected = add(header_bytes, mul(sizeof(float), floats));
    if (bytes.size() != expected) {
      actsparse::detail::fail_described(
          where, origin,
          std::to_string(bytes.size()) + " bytes long (" + (bytes.size() < expected ? "truncated" : "trailing bytes") +
              ": the file size disagrees with the header)",
          std::to_string(expected) + " bytes (28 + 4 x " + std::to_string(floats) + " floats for this header)");
    }
    c.data_.resize(floats);
    std::memcpy(c.data_.data(), bytes.data() + header_bytes, sizeof(float) * floats);
    return c;
  }

  static checkpoint load(const std::string& path) {
    return from_bytes(detail::read_file(path, where, "a readable llama2.c checkpoint file"), path);
  }

  [[nodiscard]] const config& cfg() const noexcept { return cfg_; }
  [[nodiscard]] std::size_t kv_dim() const noexcept {
    return static_cast<std::size_t>(cfg_.dim) * cfg_.n_kv_heads / cfg_.n_heads;
  }
  [[nodiscard]] std::size_t head_size() const noexcept { return dim() / static_cast<std::size_t>(cfg_.n_heads); }

  // Per-layer matrices, [out × in] row-major (y = W·x). A layer index l >= n_layers is an actsparse::error.
  [[nodiscard]] actsparse::matrix_view<const float> token_embedding() const { return mat(off_.emb, vocab(), dim()); }
  [[nodiscard]] std::span<const float> rms_att(std::size_t l) const {
    return vec(off_.rms_att + layer(l) * dim(), dim());
  }
  [[nodiscard]] actsparse::matrix_view<const float> wq(std::size_t l) const {
    return mat(off_.wq + layer(l) * dim() * dim(), dim(), dim());
  }
  [[nodiscard]] actsparse::matrix_view<const float> wk(std::size_t l) const {
    return mat(off_.wk + layer(l) * kv_dim() * dim(), kv_dim(), dim());
  }
  [[nodiscard]] actsparse::matrix_view<const float> wv(std::size_t l) const {
    return mat(off_.wv + layer(l) * kv_dim() * dim(), kv_dim(), dim());
  }
  [[nodiscard]] actsparse::matrix_view<const float> wo(std::size_t l) const {
    return mat(off_.wo + layer(l) * dim() * dim(), dim(), dim());
  }
  [[nodiscard]] std::span<const float> rms_ffn(std::size_t l) const {
    return vec(off_.rms_ffn + layer(l) * dim(), dim());
  }
  [[nodiscard]] actsparse::matrix_view<const float> w1(std::size_t l) const {
    return mat(off_.w1 + layer(l) * hid() * dim(), hid(), dim());
  }
  [[nodiscard]] actsparse::matrix_view<const float> w2(std::size_t l) const {
    return mat(off_.w2 + layer(l) * dim() * hid(), dim(), hid());
  }
  [[nodiscard]] actsparse::matrix_view<const float> w3(std::size_t l) const {
    return mat(off_.w3 + layer(l) * hid() * dim(), hid(), dim());
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
  std::size_t layer(std::size_t l) const {
    if (l >= layers()) {
      actsparse::detail::fail(where, "layer", l, "below n_layers = " + std::to_string(cfg_.n_layers));
    }
    return l;
  }

  // Overflow-checked size arithmetic (the header limits keep real sizes far below; a
  // narrower size_t, or looser limits, must fail loudly rather than wrap).
  static std::size_t mul(std::size_t a, std::size_t b) {
    if (a != 0 && b > std::numeric_limits<std::size_t>::max() / a) overflow();
    return a * b;
  }
  static std::size_t add(std::size_t a, std::size_t b) {
    if (b > std::numeric_limits<std::size_t>::max() - a) overflow();
    return a + b;
  }
  [[noreturn]] static void overflow() {
    actsparse::detail::fail_described(where, "header", "dimensions whose weight count overflows size_t",
                                      "a header whose weights fit in memory");
  }

  std::size_t count_floats() {
    std::size_t at = 0;
    auto take = [&at](std::size_t n) {
      const std::size_t o = at;
      at = add(at, n);
      return o;
    };
    const std::size_t per_layer_dd = mul(layers(), mul(dim(), dim()));
    const std::size_t per_layer_kd = mul(layers(), mul(kv_dim(), dim()));
    const std::size_t per_layer_hd = mul(layers(), mul(hid(), dim()));
    off_.emb = take(mul(vocab(), dim()));
    off_.rms_att = take(mul(layers(), dim()));
    off_.wq = take(per_layer_dd);
    off_.wk = take(per_layer_kd);
    off_.wv = take(per_layer_kd);
    off_.wo = take(per_layer_dd);
    off_.rms_ffn = take(mul(layers(), dim()));
    off_.w1 = take(per_layer_hd);
    off_.w2 = take(per_layer_hd);
    off_.w3 = take(per_layer_hd);
    off_.rms_final = take(dim());
    take(mul(static_cast<std::size_t>(cfg_.seq_len), head_size()));  // freq_cis_real, freq_cis_imag (recomputed)
    off_.wcls = cfg_.shared_classifier ? 0 : take(mul(vocab(), dim()));
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
