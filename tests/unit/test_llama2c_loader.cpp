// llama2c::checkpoint and llama2c::tokenizer: the shipped files load with their documented
// header and decode the documented text; every malformed input is an actsparse::error that
// names the problem (mutated copies of the real bytes, and tiny checkpoints built here).

#include "llama2c/checkpoint.hpp"
#include "llama2c/model.hpp"
#include "llama2c/tokenizer.hpp"

#include <actsparse/core/error.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <utility>
#include <vector>

using actsparse::error;
using llama2c::checkpoint;
using llama2c::tokenizer;

namespace {

std::vector<char> read_data(const std::string& name) {
  std::ifstream f(std::string(ACTSPARSE_DATA_DIR) + "/" + name, std::ios::binary);
  REQUIRE(f);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

void put_i32(std::vector<char>& b, std::size_t at, std::int32_t v) { std::memcpy(b.data() + at, &v, sizeof v); }

// A header dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len.
using header = std::array<std::int32_t, 7>;

// The float count of a checkpoint, written out here independently of the loader.
std::size_t floats_for(const header& h) {
  const std::size_t dim = h[0], hid = h[1], layers = h[2], heads = h[3], kv = h[4];
  const std::size_t vocab = h[5] < 0 ? -static_cast<std::int64_t>(h[5]) : h[5], seq = h[6];
  const std::size_t kv_dim = dim * kv / heads;
  std::size_t n = vocab * dim + layers * (2 * dim + 2 * dim * dim + 2 * kv_dim * dim + 3 * hid * dim) + dim;
  n += seq * (dim / heads);
  if (h[5] < 0) n += vocab * dim;
  return n;
}

// A checkpoint with this header, of the size the header asks for; float i has value i.
std::vector<char> make_checkpoint(const header& h) {
  std::vector<char> b(28 + 4 * floats_for(h));
  for (std::size_t i = 0; i < 7; ++i) put_i32(b, 4 * i, h[i]);
  for (std::size_t i = 0; i < floats_for(h); ++i) {
    const auto v = static_cast<float>(i);
    std::memcpy(b.data() + 28 + 4 * i, &v, 4);
  }
  return b;
}

std::vector<char> with_header(std::vector<char> b, std::size_t field, std::int32_t value) {
  put_i32(b, 4 * field, value);
  return b;
}

std::vector<char> make_tokenizer(std::int32_t max_len, const std::vector<std::pair<std::string, float>>& tokens) {
  std::vector<char> b(4);
  put_i32(b, 0, max_len);
  for (const auto& [text, score] : tokens) {
    const std::size_t at = b.size();
    b.resize(at + 8);
    std::memcpy(b.data() + at, &score, 4);
    put_i32(b, at + 4, static_cast<std::int32_t>(text.size()));
    b.insert(b.end(), text.begin(), text.end());
  }
  return b;
}

}  // namespace

TEST_CASE("llama2c checkpoint: stories260K loads with its documented header") {
  const checkpoint c = checkpoint::load(std::string(ACTSPARSE_DATA_DIR) + "/stories260K.bin");
  const llama2c::config& k = c.cfg();
  CHECK(k.dim == 64);
  CHECK(k.hidden_dim == 172);
  CHECK(k.n_layers == 5);
  CHECK(k.n_heads == 8);
  CHECK(k.n_kv_heads == 4);
  CHECK(k.vocab_size == 512);
  CHECK(k.seq_len == 512);
  CHECK(k.shared_classifier);
  CHECK(c.kv_dim() == 32);
  CHECK(c.head_size() == 8);
  CHECK(c.token_embedding().rows == 512);
  CHECK(c.wk(4).rows == 32);
  CHECK(c.w2(4).cols == 172);
  CHECK(c.classifier().data == c.token_embedding().data);
  // from_bytes on the same bytes gives the same weights.
  const checkpoint d = checkpoint::from_bytes(read_data("stories260K.bin"));
  CHECK(d.rms_final()[63] == c.rms_final()[63]);
  CHECK_THROWS_WITH_AS((void)c.wq(5), doctest::Contains("'layer' is 5; expected below n_layers = 5"), error);
  CHECK_THROWS_WITH_AS((void)checkpoint::load("/nonexistent/x.bin"), doctest::Contains("'path'"), error);
}

TEST_CASE("llama2c checkpoint: tiny checkpoints built in memory, shared and unshared classifier") {
  const header h{8, 12, 2, 2, 1, 16, 4};
  const checkpoint c = checkpoint::from_bytes(make_checkpoint(h), "tiny");
  CHECK(c.kv_dim() == 4);
  CHECK(c.token_embedding().row(0)[1] == 1.0F);
  CHECK(c.rms_att(0)[0] == 16.0F * 8.0F);                                    // right after the 16 x 8 embedding
  CHECK(c.rms_final()[0] == static_cast<float>(floats_for(h) - 8 - 4 * 4));  // before the RoPE tables
  header u = h;
  u[5] = -16;  // unshared classifier: the last vocab x dim floats
  const checkpoint v = checkpoint::from_bytes(make_checkpoint(u), "tiny");
  CHECK_FALSE(v.cfg().shared_classifier);
  CHECK(v.cfg().vocab_size == 16);
  CHECK(v.classifier().row(15)[7] == static_cast<float>(floats_for(u) - 1));
}

TEST_CASE("llama2c checkpoint: truncated files and sizes that disagree with the header") {
  const std::vector<char> real = read_data("stories260K.bin");
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{27}}) {
    CHECK_THROWS_WITH_AS((void)checkpoint::from_bytes(std::span(real.data(), n)),
                         doctest::Contains("bytes long (truncated header)"), error);
  }
  CHECK_THROWS_WITH_AS((void)checkpoint::from_bytes(std::span(real.data(), 28)), doctest::Contains("truncated"), error);
  CHECK_THROWS_WITH_AS((void)checkpoint::from_bytes(std::span(real.data(), real.size() - 4), "f.bin"),
                       doctest::Contains("'f.bin' is 1056536 bytes long (truncated: the file size disagrees"), error);
  CHECK_THROWS_WITH_AS((void)checkpoint::from_bytes(std::span(real.data(), real.size() - 1)),
                       doctest::Contains("expected 1056540 bytes"), error);
  std::vector<char> longer = real;
  longer.resize(real.size() + 4);
  CHECK_THROWS_WITH_AS((void)checkpoint::from_bytes(longer), doctest::Contains("trailing bytes"), error);
  // A header that asks for more layers (or a smaller vocabulary) than the file holds.
  CHECK_THROWS_WITH_AS((void)checkpoint::from_bytes(with_header(real, 2, 6)),
                       doctest::Contains("disagrees with the header"), error);
  CHECK_THROWS_WITH_AS((void)checkpoint::from_bytes(with_header(real, 5, 256)),
                       doctest::Contains("disagrees with the header"), error);
  CHECK_THROWS_WITH_AS((void)checkpoint::from_bytes(with_header(real, 5, -512)),  // no classifier in the file
                       doctest::Contains("truncated"), error);
}

TEST_CASE("llama2c checkpoint: zero, negative and absurd dimensions") {
  const std::vector<char> real = read_data("stories260K.bin");
  const char* names[7] = {"dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len"};
  for (std::size_t i = 0; i < 7; ++i) {
    CAPTURE(names[i]);
    for (std::int32_t v :
         {0, -1, std::numeric_limits<std::int32_t>::min(), std::numeric_limits<std::int32_t>::max(), 1 << 21}) {
      CAPTURE(v);
      if (i == 5 && v == -1) continue;  // vocab -1: a valid unshared classifier of 1 token (size mismatch below)
      const std::string want = "'" + std::string(names[i]) + "' is " + std::to_string(v) + "; expected between 1 and";
      CHECK_THROWS_WITH_AS((void)checkpoint::from_bytes(with_header(real, i, v)), doctest::Contains(want.c_str()),
                           error);
    }
  }
  // Every dimension at its limit: no overflow, no allocation, just a size mismatch.
  std::vector<char> big = real;
  const header at_limit{1 << 16, 1 << 18, 1024, 1024, 1024, -(1 << 20), 1 << 20};
  for (std::size_t i = 0; i < 7; ++i) put_i32(big, 4 * i, at_limit[i]);
  CHECK_THROWS_WITH_AS((void)checkpoint::from_bytes(big), doctest::Contains("disagrees with the header"), error);
}

TEST_CASE("llama2c checkpoint: head layout (heads divide dim, kv heads divide heads, even head size)") {
  const std::vector<char> real = read_data("stories260K.bin");
  CHECK_THROWS_WITH_AS((void)checkpoint::from_bytes(with_header(real, 3, 7)),
                       doctest::Contains("'n_heads' is 7; expected a divisor of dim = 64"), error);
  CHECK_THROWS_WITH_AS((void)checkpoint::from_bytes(with_header(real, 4, 3)),
                       doctest::Contains("'n_kv_heads' is 3; expected a divisor of n_heads = 8"), error);
  CHECK_THROWS_WITH_AS((void)checkpoint::from_bytes(with_header(real, 4, 16)),  // more kv heads than heads
                       doctest::Contains("'n_kv_heads' is 16"), error);
  CHECK_THROWS_WITH_AS((void)checkpoint::from_bytes(with_header(real, 3, 64)),
                       doctest::Contains("'head_size' is 1; expected even"), error);
  // Odd head size in an otherwise well-formed file (the size matches its header).
  CHECK_THROWS_WITH_AS((void)checkpoint::from_bytes(make_checkpoint({6, 8, 1, 2, 1, 8, 4})),
                       doctest::Contains("'head_size' is 3; expected even (RoPE"), error);
  CHECK_NOTHROW((void)checkpoint::from_bytes(make_checkpoint({6, 8, 1, 3, 1, 8, 4})));
}

TEST_CASE("llama2c tokenizer: tok512 loads and decodes the documented greedy tokens") {
  const tokenizer t = tokenizer::load(std::string(ACTSPARSE_DATA_DIR) + "/tok512.bin", 512);
  CHECK(t.vocab_size() == 512);
  CHECK(t.max_token_length() == 7);
  CHECK(t.piece(403) == " Once");
  CHECK(t.score(261) == -2.0F);
  const std::vector<int> ids{1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426};
  CHECK(t.decode(ids) == "Once upon a time, there was a little girl named Lily.");
  CHECK(t.decode(1, 403) == "Once");     // after BOS: the leading space goes
  CHECK(t.decode(403, 407) == " upon");  // elsewhere it stays
  CHECK(t.decode(1, 13) == "\n");        // <0x0A>: a raw byte
  CHECK(t.decode(5, 0x41 + 3) == "A");
  CHECK(t.decode(5, 258) == std::string(1, '\xFF'));
  CHECK(t.decode(7, 1) == "\n<s>\n");  // one token: its piece as it is
  CHECK_THROWS_WITH_AS((void)t.decode(1, 512), doctest::Contains("'token' is 512"), error);
  CHECK_THROWS_WITH_AS((void)t.decode(1, -1), doctest::Contains("'token' is -1"), error);
  CHECK_THROWS_WITH_AS((void)tokenizer::load("/nonexistent/tok.bin", 512), doctest::Contains("'path'"), error);
}

TEST_CASE("llama2c tokenizer: encode is llama2.c's BPE and round-trips through decode") {
  const tokenizer t = tokenizer::from_bytes(read_data("tok512.bin"), 512);
  CHECK(t.encode("Once upon a time", true, false) == std::vector<int>{1, 403, 407, 261, 378});
  CHECK(t.encode("Once upon a time", false, true) == std::vector<int>{403, 407, 261, 378, 2});
  CHECK(t.encode("", true, true) == std::vector<int>{1, 2});
  CHECK(t.encode("", false, false).empty());
  for (const std::string text : {"Once upon a time", "Lily saw a big, red ball.\nThe end!", "h\xC3\xA9llo w\xC3\xB6rld",
                                 "snow \xE2\x98\x83 \xF0\x9F\x98\x80", "  two  spaces", "\x80\xBF stray bytes \xFF"}) {
    CAPTURE(text);
    CHECK(t.decode(t.encode(text, true, true)) == text);
  }
  // Without BOS the dummy-prefix space stays.
  CHECK(t.decode(t.encode("Once", false, false)) == " Once");
}

TEST_CASE("llama2c tokenizer: merges by highest score, byte fallback in a tiny vocabulary") {
  const std::vector<std::pair<std::string, float>> vocab{{"<unk>", 0}, {"<s>", 0},  {"</s>", 0}, {" ", 0},
                                                         {"a", 0},     {"b", 0},    {"c", 0},    {"ab", 1},
                                                         {"bc", 2},    {" a", 0.5F}};
  const tokenizer t = tokenizer::from_bytes(make_tokenizer(5, vocab), vocab.size());
  // " a b c": bc (2) beats ab (1) and " a" (0.5); then " a" merges.
  CHECK(t.encode("abc", false, false) == std::vector<int>{9, 8});
  // A byte with no token (b + 3 beyond the vocabulary) is <unk>.
  CHECK(t.encode("z", false, false) == std::vector<int>{3, 0});
}

TEST_CASE("llama2c tokenizer: malformed files") {
  const std::vector<char> real = read_data("tok512.bin");
  // A vocabulary size that disagrees with the file.
  CHECK_THROWS_WITH_AS((void)tokenizer::from_bytes(real, 511), doctest::Contains("trailing bytes after token 510"),
                       error);
  CHECK_THROWS_WITH_AS((void)tokenizer::from_bytes(real, 513), doctest::Contains("truncated in token 512"), error);
  CHECK_THROWS_WITH_AS((void)tokenizer::from_bytes(real, 1 << 20),
                       doctest::Contains("truncated in the token table: fewer than vocab_size tokens"), error);
  CHECK_THROWS_WITH_AS((void)tokenizer::from_bytes(real, 0), doctest::Contains("'vocab_size' is 0"), error);
  CHECK_THROWS_WITH_AS((void)tokenizer::from_bytes(real, std::size_t{1} << 40), doctest::Contains("'vocab_size' is"),
                       error);
  // Truncation anywhere.
  CHECK_THROWS_WITH_AS((void)tokenizer::from_bytes(std::span(real.data(), 0), 512),
                       doctest::Contains("truncated in the header"), error);
  CHECK_THROWS_WITH_AS((void)tokenizer::from_bytes(std::span(real.data(), 3), 512),
                       doctest::Contains("truncated in the header"), error);
  CHECK_THROWS_WITH_AS((void)tokenizer::from_bytes(std::span(real.data(), real.size() - 1), 512),
                       doctest::Contains("truncated in token 511"), error);
  CHECK_THROWS_WITH_AS((void)tokenizer::from_bytes(std::span(real.data(), 10), 1), doctest::Contains("truncated"),
                       error);
  std::vector<char> longer = real;
  longer.push_back('x');
  CHECK_THROWS_WITH_AS((void)tokenizer::from_bytes(longer, 512), doctest::Contains("1 trailing bytes"), error);
  // max_token_length: zero, negative, absurd.
  for (std::int32_t v : {0, -7, std::numeric_limits<std::int32_t>::max()}) {
    std::vector<char> b = real;
    put_i32(b, 0, v);
    const std::string want = "'max_token_length' is " + std::to_string(v);
    CHECK_THROWS_WITH_AS((void)tokenizer::from_bytes(b, 512), doctest::Contains(want.c_str()), error);
  }
  // Token 0's byte length (at offset 8): negative, over max_token_length, absurd.
  for (std::int32_t v : {-1, -5, 8, 1 << 30, std::numeric_limits<std::int32_t>::min()}) {
    std::vector<char> b = real;
    put_i32(b, 8, v);
    const std::string want =
        "'length of token 0' is " + std::to_string(v) + "; expected between 0 and max_token_length = 7";
    CHECK_THROWS_WITH_AS((void)tokenizer::from_bytes(b, 512), doctest::Contains(want.c_str()), error);
  }
  // A length within max_token_length that runs past the end of the file.
  std::vector<char> tail = make_tokenizer(16, {{"<unk>", 0}});
  put_i32(tail, 8, 9);
  CHECK_THROWS_WITH_AS((void)tokenizer::from_bytes(tail, 1), doctest::Contains("truncated in token 0"), error);
}

TEST_CASE("llama2c model: a KV cache above the documented limit is a clear error, not bad_alloc") {
  // Every header field within its limit (seq_len 2^20, 128 layers): a 17 MB checkpoint whose
  // KV cache would take 2 x 128 x 2^20 x 4 floats = 4 GiB.
  const header h{8, 12, 128, 2, 1, 16, 1 << 20};
  const checkpoint c = checkpoint::from_bytes(make_checkpoint(h), "long context");
  const llama2c::model m(c);
  CHECK_THROWS_WITH_AS((void)m.new_cache(), doctest::Contains("expected at most model::max_cache_bytes"), error);
  // A shorter context fits.
  const header short_h{8, 12, 2, 2, 1, 16, 64};
  const checkpoint small = checkpoint::from_bytes(make_checkpoint(short_h), "short context");
  CHECK(llama2c::model(small).new_cache().k.size() == 2 * 64 * 4);
}
