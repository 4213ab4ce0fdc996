#pragma once
// Reads a llama2.c tokenizer (int32 max_token_length, then per token: float32 score,
// int32 byte length, the bytes) and encodes / decodes text by llama2.c's rules.
// Malformed bytes give an actsparse::error naming the problem; never a crash.

#include "checkpoint.hpp"  // detail::read_file

#include <actsparse/core/error.hpp>

#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace llama2c {

class tokenizer {
 public:
  static constexpr std::string_view where = "llama2c::tokenizer";
  static constexpr int unk_id = 0;
  static constexpr int bos_id = 1;
  static constexpr int eos_id = 2;
  static constexpr std::size_t max_vocab = std::size_t{1} << 20;  // as llama2c::checkpoint
  static constexpr std::int32_t max_length_limit = 1 << 16;       // bytes in one token

  // Parses a whole tokenizer held in memory. vocab_size (from the checkpoint) must match the
  // number of tokens in the bytes exactly. `origin` names the source in error messages.
  static tokenizer from_bytes(std::span<const char> bytes, std::size_t vocab_size, std::string_view origin = "bytes") {
    if (vocab_size == 0 || vocab_size > max_vocab) {
      actsparse::detail::fail(where, "vocab_size", vocab_size, "between 1 and " + std::to_string(max_vocab));
    }
    std::size_t at = 0;
    auto need = [&](std::size_t n, const std::string& what) {
      if (bytes.size() - at < n) {
        actsparse::detail::fail_described(
            where, origin, std::to_string(bytes.size()) + " bytes long (truncated in " + what + ")",
            "4 bytes of max_token_length, then for each of vocab_size = " + std::to_string(vocab_size) +
                " tokens: a float32 score, an int32 byte length and that many bytes");
      }
    };
    auto read_i32 = [&]() {
      std::int32_t v;
      std::memcpy(&v, bytes.data() + at, sizeof v);
      at += sizeof v;
      return v;
    };
    tokenizer t;
    need(4, "the header");
    t.max_token_length_ = read_i32();
    if (t.max_token_length_ <= 0 || t.max_token_length_ > max_length_limit) {
      actsparse::detail::fail(where, "max_token_length", t.max_token_length_,
                              "between 1 and " + std::to_string(max_length_limit));
    }
    // Every token takes at least 8 bytes: reject a short file before allocating for vocab_size tokens.
    if ((bytes.size() - at) / 8 < vocab_size) {
      need(8 * vocab_size, "the token table: fewer than vocab_size tokens");
    }
    t.pieces_.reserve(vocab_size);
    t.scores_.reserve(vocab_size);
    for (std::size_t i = 0; i < vocab_size; ++i) {
      const std::string token = "token " + std::to_string(i);
      need(8, token);
      float score;
      std::memcpy(&score, bytes.data() + at, sizeof score);
      at += sizeof score;
      const std::int32_t len = read_i32();
      if (len < 0 || len > t.max_token_length_) {
        actsparse::detail::fail(where, "length of " + token, len,
                                "between 0 and max_token_length = " + std::to_string(t.max_token_length_));
      }
      need(static_cast<std::size_t>(len), token);
      t.pieces_.emplace_back(bytes.data() + at, static_cast<std::size_t>(len));
      t.scores_.push_back(score);
      at += static_cast<std::size_t>(len);
    }
    if (at != bytes.size()) {
      actsparse::detail::fail_described(where, origin,
                                        std::to_string(bytes.size()) + " bytes long (" +
                                            std::to_string(bytes.size() - at) + " trailing bytes after token " +
                                            std::to_string(vocab_size - 1) + ")",
                                        "exactly vocab_size = " + std::to_string(vocab_size) + " tokens (" +
                                            std::to_string(at) + " bytes); a tokenizer for a larger vocabulary?");
    }
    t.ids_.reserve(vocab_size);
    for (std::size_t i = 0; i < vocab_size; ++i) t.ids_.emplace(t.pieces_[i], static_cast<int>(i));  // first wins
    return t;
  }

  static tokenizer load(const std::string& path, std::size_t vocab_size) {
    return from_bytes(detail::read_file(path, where, "a readable llama2.c tokenizer file"), vocab_size, path);
  }

  [[nodiscard]] std::size_t vocab_size() const noexcept { return pieces_.size(); }
  [[nodiscard]] int max_token_length() const noexcept { return max_token_length_; }
  [[nodiscard]] std::string_view piece(int token) const { return pieces_[check(token)]; }
  [[nodiscard]] float score(int token) const { return scores_[check(token)]; }

  // The text of `token` following `prev_token` (llama2.c): after BOS one leading space is
  // stripped; a piece "<0xHH>" is the raw byte HH. A token outside the vocabulary is an error.
  [[nodiscard]] std::string decode(int prev_token, int token) const {
    std::string_view p = piece(token);
    if (prev_token == bos_id && !p.empty() && p.front() == ' ') p.remove_prefix(1);
    if (p.size() == 6 && p.substr(0, 3) == "<0x" && p[5] == '>') {
      const int hi = hex(p[3]);
      const int lo = hex(p[4]);
      if (hi >= 0 && lo >= 0) return std::string(1, static_cast<char>(hi * 16 + lo));
    }
    return std::string(p);
  }

  // The text of a token sequence. BOS and EOS are sequence delimiters and add no text; each
  // other token is decoded after its predecessor (so the first word after BOS loses its space).
  [[nodiscard]] std::string decode(std::span<const int> tokens) const {
    std::string out;
    int prev = -1;
    for (const int t : tokens) {
      if (t != bos_id && t != eos_id) out += decode(prev, t);
      prev = t;
    }
    return out;
  }

  // llama2.c's encoder: optional BOS, a dummy-prefix " " token when text is non-empty, each
  // UTF-8 code point as its token (or its bytes as byte tokens, id = byte + 3), then
  // repeatedly merge the adjacent pair whose concatenation is the highest-scoring token
  // (the leftmost pair on ties); optional EOS.
  [[nodiscard]] std::vector<int> encode(std::string_view text, bool bos, bool eos) const {
    std::vector<int> out;
    if (bos) out.push_back(bos_id);
    if (!text.empty()) {
      const int space = lookup(" ");
      out.push_back(space >= 0 ? space : byte_token(' '));
    }
    const auto continuation = [](char c) { return (static_cast<unsigned char>(c) & 0xC0) == 0x80; };
    for (std::size_t i = 0; i < text.size();) {
      std::size_t n = 1;  // a code point: its first byte and up to 3 continuation bytes
      while (i + n < text.size() && n < 4 && continuation(text[i + n])) ++n;
      const std::string_view cp = text.substr(i, n);
      if (const int id = lookup(cp); id >= 0) {
        out.push_back(id);
      } else {
        for (const char c : cp) out.push_back(byte_token(static_cast<unsigned char>(c)));
      }
      i += n;
    }
    // The merges run over the text's tokens only: BOS is a control token, not text (llama2.c
    // also tries pairs with BOS; with tok512 that changes nothing: no token starts with "\n<s>\n").
    const std::size_t first = bos ? 1 : 0;
    std::string pair;
    for (;;) {
      int best_id = -1;
      std::size_t best_at = 0;
      float best_score = 0.0f;
      for (std::size_t i = first; i + 1 < out.size(); ++i) {
        pair.assign(pieces_[static_cast<std::size_t>(out[i])]);
        pair.append(pieces_[static_cast<std::size_t>(out[i + 1])]);
        const int id = lookup(pair);
        if (id >= 0 && (best_id < 0 || scores_[static_cast<std::size_t>(id)] > best_score)) {
          best_id = id;
          best_at = i;
          best_score = scores_[static_cast<std::size_t>(id)];
        }
      }
      if (best_id < 0) break;
      out[best_at] = best_id;
      out.erase(out.begin() + static_cast<std::ptrdiff_t>(best_at) + 1);
    }
    if (eos) out.push_back(eos_id);
    return out;
  }

 private:
  std::size_t check(int token) const {
    if (token < 0 || static_cast<std::size_t>(token) >= pieces_.size()) {
      actsparse::detail::fail(where, "token", token,
                              "between 0 and vocab_size - 1 = " + std::to_string(vocab_size() - 1));
    }
    return static_cast<std::size_t>(token);
  }
  int lookup(std::string_view s) const {
    const auto it = ids_.find(s);
    return it == ids_.end() ? -1 : it->second;
  }
  // Byte fallback: byte b is token b + 3 (after <unk>, <s>, </s>); <unk> if the vocabulary is too small.
  int byte_token(unsigned b) const {
    return static_cast<std::size_t>(b) + 3 < pieces_.size() ? static_cast<int>(b) + 3 : unk_id;
  }
  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  }

  struct text_hash {  // lets ids_.find take a string_view without building a string
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
  };

  tokenizer() = default;  // made by from_bytes / load only

  std::int32_t max_token_length_ = 0;
  std::vector<std::string> pieces_;
  std::vector<float> scores_;
  std::unordered_map<std::string, int, text_hash, std::equal_to<>> ids_;
};

}  // namespace llama2c
