// The tiered store and its row codecs (managers/tiered_store.hpp, managers/row_codec.hpp). A
// binary of its own, so that the ThreadSanitizer preset (tsan) builds only this.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <actsparse/core/error.hpp>
#include <actsparse/managers/tiered_store.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <thread>
#include <vector>

using namespace actsparse;

namespace {

constexpr row_format all_formats[] = {row_format::f32,      row_format::f16,      row_format::int8,
                                      row_format::int8_g32, row_format::int4_g32, row_format::int4_g32_min};
constexpr row_format compressed_formats[] = {row_format::int8, row_format::int8_g32, row_format::int4_g32,
                                             row_format::int4_g32_min};

std::vector<float> random_row(std::size_t n, std::uint64_t seed, float scale = 1.0F) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0F, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// |x − x'| <= scale / 2 for every value, up to the f32 rounding of x' (one ulp of the larger).
void check_bound(row_format f, std::span<const float> x, const std::vector<std::byte>& enc) {
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float back = decode_value(f, enc.data(), i);
    if (f == row_format::f32) {
      REQUIRE(back == x[i]);
      continue;
    }
    if (f == row_format::f16) {
      REQUIRE(back == to_f32(to_f16(x[i])));
      continue;
    }
    const float s = row_scale(f, enc.data(), i);
    const float slack = 2.0F * std::numeric_limits<float>::epsilon() * std::max(std::fabs(x[i]), std::fabs(back)) +
                        std::numeric_limits<float>::denorm_min();
    INFO(name(f), " i ", i, " x ", x[i], " back ", back, " scale ", s);
    REQUIRE(std::fabs(x[i] - back) <= s / 2.0F + slack);
  }
}

std::vector<float> get(const tiered_store& s, std::uint64_t pos) {
  std::vector<float> out(s.row_size());
  s.retrieve(pos, out);
  return out;
}

tiered_store_config small(eviction policy, std::size_t full, std::size_t compressed) {
  tiered_store_config c;
  c.row_size = 64;
  c.full_capacity = full;
  c.compressed_capacity = compressed;
  c.policy = policy;
  return c;
}

}  // namespace

TEST_CASE("row codecs: every value within scale / 2 of its row (f32 exact, f16 rounded), all formats") {
  for (const row_format f : all_formats) {
    for (std::uint64_t seed = 0; seed < 200; ++seed) {
      std::vector<float> x = random_row(96, seed, seed % 3 == 0 ? 1e-3F : (seed % 3 == 1 ? 1.0F : 300.0F));
      if (seed % 5 == 0) x[7] = 40.0F * (seed % 2 == 0 ? 1.0F : -1.0F);    // an outlier in the first group
      if (seed % 7 == 0) std::fill(x.begin() + 32, x.begin() + 64, 0.0F);  // an all-zero group
      if (seed % 11 == 0) std::fill(x.begin() + 64, x.end(), 2.5F);        // a constant group
      std::vector<std::byte> enc(row_bytes(f, x.size()));
      encode_row(f, x, enc.data());
      check_bound(f, x, enc);
      std::vector<float> out(x.size());
      decode_row(f, enc.data(), out);
      for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(out[i] == decode_value(f, enc.data(), i));
    }
  }
  // The case q4_0's own rule gets wrong: a value as large as the group's maximum, opposite sign.
  std::vector<float> x(32, 0.0F);
  x[0] = -1.0F;
  x[1] = 1.0F;
  std::vector<std::byte> enc(row_bytes(row_format::int4_g32, 32));
  encode_row(row_format::int4_g32, x, enc.data());
  check_bound(row_format::int4_g32, x, enc);
  CHECK(row_bytes(row_format::int8_g32, 64) == 68);
  CHECK(row_bytes(row_format::int4_g32, 64) == 36);
  CHECK(row_bytes(row_format::int4_g32_min, 64) == 40);
  CHECK(row_bytes(row_format::int8, 64) == 68);
}

TEST_CASE("row codecs: bad rows are errors that name the problem") {
  std::vector<float> x(40, 1.0F);
  std::vector<std::byte> enc(400);
  CHECK_THROWS_WITH_AS(encode_row(row_format::int8_g32, x, enc.data()), doctest::Contains("a multiple of 32"), error);
  x.resize(32);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH_AS(encode_row(row_format::int8, x, enc.data()), doctest::Contains("finite values"), error);
  x[3] = 1e6F;
  CHECK_THROWS_WITH_AS(encode_row(row_format::f16, x, enc.data()), doctest::Contains("f16's range"), error);
  CHECK_THROWS_WITH_AS(encode_row(row_format::int4_g32, x, enc.data()), doctest::Contains("fits an f16"), error);
  const std::vector<float> none;
  CHECK_THROWS_WITH_AS(encode_row(row_format::f32, none, enc.data()), doctest::Contains("at least 1 value"), error);
}

TEST_CASE("tiered_store: the full tier round trip is exact, compressed rows keep the bound, bytes are exact") {
  for (const row_format cf : compressed_formats) {
    tiered_store_config c = small(eviction::fifo, 4, 16);
    c.compressed_format = cf;
    tiered_store s(c);
    for (std::uint64_t p = 0; p < 10; ++p) s.store(p, random_row(64, p));
    CHECK(s.full_rows() == 4);
    CHECK(s.compressed_rows() == 6);
    CHECK(s.bytes_held() == 4 * row_bytes(row_format::f32, 64) + 6 * row_bytes(cf, 64));
    CHECK(s.bytes_reserved() == 4 * row_bytes(row_format::f32, 64) + 16 * row_bytes(cf, 64));
    for (std::uint64_t p = 0; p < 10; ++p) {
      const std::vector<float> x = random_row(64, p);
      if (p >= 6) {
        CHECK(s.tier_of(p) == tier::full);
        CHECK(get(s, p) == x);
      } else {
        CHECK(s.tier_of(p) == tier::compressed);
        std::vector<std::byte> enc(row_bytes(cf, 64));
        encode_row(cf, x, enc.data());
        const row_ref r = s.view(p);
        CHECK(r.format == cf);
        CHECK(std::equal(enc.begin(), enc.end(), r.data));  // exactly the codec's bytes
        check_bound(cf, x, enc);
      }
    }
  }
  tiered_store_config c = small(eviction::fifo, 2, 2);
  c.full_format = row_format::f16;
  tiered_store h(c);
  const std::vector<float> x = random_row(64, 9);
  h.store(3, x);
  const std::vector<float> back = get(h, 3);
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(back[i] == to_f32(to_f16(x[i])));
  CHECK(h.bytes_held() == 128);
}

TEST_CASE("tiered_store: fifo demotes the oldest, lru the least recently used, importance the least important") {
  SUBCASE("fifo") {
    tiered_store s(small(eviction::fifo, 3, 8));
    for (std::uint64_t p = 0; p < 3; ++p) s.store(p, random_row(64, p));
    (void)get(s, 0);  // reading does not make a row younger under fifo
    s.store(3, random_row(64, 3));
    CHECK(s.tier_of(0) == tier::compressed);
    CHECK(s.tier_of(1) == tier::full);
  }
  SUBCASE("lru") {
    tiered_store s(small(eviction::lru, 3, 8));
    for (std::uint64_t p = 0; p < 3; ++p) s.store(p, random_row(64, p));
    (void)get(s, 0);  // 0 is now the most recently used
    s.store(3, random_row(64, 3));
    CHECK(s.tier_of(0) == tier::full);
    CHECK(s.tier_of(1) == tier::compressed);
    (void)s.view(2);
    s.store(4, random_row(64, 4));  // uses: 0 read, 3 stored, 2 read: 0 is now the least recent
    CHECK(s.tier_of(0) == tier::compressed);
    CHECK(s.tier_of(3) == tier::full);
  }
  SUBCASE("importance, with recent and sink positions pinned") {
    tiered_store_config c = small(eviction::importance, 4, 8);
    c.recent_n = 1;
    c.sink_n = 1;
    tiered_store s(c);
    for (std::uint64_t p = 0; p < 4; ++p) s.store(p, random_row(64, p));
    s.add_importance(1, 0.5F);
    s.add_importance(2, 0.25F);
    s.store(4, random_row(64, 4));  // 0 pinned (sink), 4 pinned (recent): 3 has the least importance
    CHECK(s.tier_of(3) == tier::compressed);
    s.store(5, random_row(64, 5));  // 4 is no longer recent and has importance 0
    CHECK(s.tier_of(4) == tier::compressed);
    CHECK(s.tier_of(0) == tier::full);
    CHECK(s.importance(1) == 0.5F);
    s.add_importance(3, 2.0F);  // a compressed row gains importance; promote brings it back
    s.promote(3);
    CHECK(s.tier_of(3) == tier::full);
    CHECK(s.tier_of(2) == tier::compressed);  // the least important unpinned full row
    CHECK(s.importance(3) == 2.0F);
  }
  SUBCASE("sinks only: a full tier of pinned rows sends new rows to the compressed tier") {
    tiered_store_config c = small(eviction::fifo, 2, 8);
    c.sink_n = 2;
    tiered_store s(c);
    for (std::uint64_t p = 0; p < 5; ++p) s.store(p, random_row(64, p));
    CHECK(s.tier_of(0) == tier::full);
    CHECK(s.tier_of(1) == tier::full);
    for (std::uint64_t p = 2; p < 5; ++p) CHECK(s.tier_of(p) == tier::compressed);
  }
}

TEST_CASE("tiered_store: promote gives the dequantized row, demote compresses, erase forgets") {
  tiered_store_config c = small(eviction::fifo, 2, 4);
  c.compressed_format = row_format::int4_g32;
  tiered_store s(c);
  const std::vector<float> x = random_row(64, 1);
  s.store(7, x);
  s.demote(7);
  CHECK(s.tier_of(7) == tier::compressed);
  const std::vector<float> compressed = get(s, 7);
  s.promote(7);
  CHECK(s.tier_of(7) == tier::full);
  CHECK(get(s, 7) == compressed);  // no more precise than its compressed form
  CHECK(s.erase(7));
  CHECK_FALSE(s.erase(7));
  CHECK(s.tier_of(7) == tier::absent);
  CHECK(s.size() == 0);
  CHECK(s.bytes_held() == 0);
  CHECK_THROWS_WITH_AS((void)get(s, 7), doctest::Contains("a position the store holds"), error);
  CHECK_THROWS_WITH_AS(s.promote(7), doctest::Contains("a position the store holds"), error);
}

TEST_CASE(
    "tiered_store: a drop tier forgets the least valuable compressed rows, and without one a full store is an "
    "error that changes nothing") {
  tiered_store_config c = small(eviction::fifo, 2, 3);
  c.drop = true;
  tiered_store s(c);
  for (std::uint64_t p = 0; p < 8; ++p) s.store(p, random_row(64, p));
  CHECK(s.size() == 5);
  CHECK(s.dropped_rows() == 3);
  for (std::uint64_t p = 0; p < 3; ++p) CHECK(s.tier_of(p) == tier::absent);
  CHECK_THROWS_WITH_AS((void)s.view(0), doctest::Contains("dropped"), error);

  c.drop = false;
  tiered_store t(c);
  for (std::uint64_t p = 0; p < 5; ++p) t.store(p, random_row(64, p));
  CHECK_THROWS_WITH_AS(t.store(5, random_row(64, 5)), doctest::Contains("drop = true"), error);
  CHECK(t.size() == 5);
  for (std::uint64_t p = 0; p < 5; ++p) CHECK(t.tier_of(p) != tier::absent);
  CHECK(get(t, 4) == random_row(64, 4));
}

TEST_CASE("tiered_store: bad configurations and rows are errors that name the problem") {
  tiered_store_config c = small(eviction::fifo, 2, 2);
  c.row_size = 40;
  CHECK_THROWS_WITH_AS(tiered_store{c}, doctest::Contains("a multiple of 32"), error);
  c = small(eviction::fifo, 2, 2);
  c.full_format = row_format::int8;
  CHECK_THROWS_WITH_AS(tiered_store{c}, doctest::Contains("f32 or f16"), error);
  c = small(eviction::fifo, 2, 2);
  c.compressed_format = row_format::f16;
  CHECK_THROWS_WITH_AS(tiered_store{c}, doctest::Contains("int8, int8_g32"), error);
  c = small(eviction::fifo, 2, 2);
  c.recent_n = 2;
  c.sink_n = 1;
  CHECK_THROWS_WITH_AS(tiered_store{c}, doctest::Contains("pinned rows"), error);
  tiered_store s(small(eviction::importance, 2, 2));
  CHECK_THROWS_WITH_AS(s.store(0, random_row(63, 0)), doctest::Contains("config.row_size = 64"), error);
  std::vector<float> bad = random_row(64, 0);
  bad[5] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_WITH_AS(s.store(0, bad), doctest::Contains("finite values"), error);
  CHECK_THROWS_WITH_AS(s.add_importance(0, -1.0F), doctest::Contains("non-negative"), error);
}

TEST_CASE("tiered_store: a million rows stored and evicted, nothing lost or mixed up, no growth") {
  tiered_store_config c;
  c.row_size = 32;
  c.full_capacity = 64;
  c.compressed_capacity = 512;
  c.compressed_format = row_format::int8_g32;
  c.recent_n = 16;
  c.sink_n = 4;
  c.drop = true;
  tiered_store s(c);
  const std::size_t reserved = s.bytes_reserved();
  constexpr std::uint64_t rows = 1'000'000;
  std::vector<float> out(32);
  for (std::uint64_t p = 0; p < rows; ++p) {
    std::vector<float> x(32);
    for (std::size_t i = 0; i < 32; ++i) x[i] = static_cast<float>((p * 31 + i * 7) % 1001) - 500.0F;
    s.store(p, x);
    if (p % 997 == 0) {  // a sample: the row just stored, a sink, an older compressed one
      s.retrieve(p, out);
      REQUIRE(out == x);
    }
  }
  CHECK(s.size() == 64 + 512);
  CHECK(s.bytes_reserved() == reserved);
  CHECK(s.dropped_rows() == rows - 576);
  for (std::uint64_t p : {0ULL, 1ULL, 2ULL, 3ULL}) CHECK(s.tier_of(p) == tier::full);  // sinks
  // Every held row is the row of its own position (within the bound when compressed).
  std::size_t held = 0;
  for (std::uint64_t p = rows - 700; p < rows; ++p) {
    if (s.tier_of(p) == tier::absent) continue;
    ++held;
    s.retrieve(p, out);
    for (std::size_t i = 0; i < 32; ++i) {
      const float want = static_cast<float>((p * 31 + i * 7) % 1001) - 500.0F;
      const float bound = s.tier_of(p) == tier::full ? 0.0F : row_scale(c.compressed_format, s.view(p).data, i) / 2.0F;
      REQUIRE(std::fabs(out[i] - want) <= bound + 1e-3F);
    }
  }
  CHECK(held == 576 - 4);  // all but the sinks are the newest positions
}

TEST_CASE("tiered_store: one writer per layer and many readers at once (run under ThreadSanitizer in tsan)") {
  constexpr std::size_t layers = 4;
  constexpr std::uint64_t steps = 300;
  std::vector<tiered_store> stores;
  for (std::size_t l = 0; l < layers; ++l) {
    tiered_store_config c = small(l % 2 == 0 ? eviction::lru : eviction::importance, 16, 64);
    c.recent_n = 4;
    c.drop = true;
    stores.emplace_back(c);
    for (std::uint64_t p = 0; p < 8; ++p) stores[l].store(p, random_row(64, p));
  }
  // Writers on layers 0 and 1 (one thread each) while four readers read layers 2 and 3 at once.
  std::atomic<std::size_t> checked{0};
  std::vector<std::thread> threads;
  for (std::size_t l = 0; l < 2; ++l) {
    threads.emplace_back([&, l] {
      for (std::uint64_t p = 8; p < steps; ++p) {
        stores[l].store(p, random_row(64, p * 10 + l));
        stores[l].add_importance(p - 1, 0.1F);
      }
    });
  }
  for (std::size_t r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      std::vector<float> out(64);
      for (std::uint64_t i = 0; i < steps; ++i) {
        const std::size_t l = 2 + (i + r) % 2;
        const std::uint64_t p = (i * 7 + r) % 8;
        stores[l].retrieve(p, out);  // lru stamps update: atomics
        if (stores[l].tier_of(p) == tier::full && out == random_row(64, p)) checked.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  CHECK(checked.load() == 4 * steps);
  for (std::size_t l = 0; l < 2; ++l) {
    CHECK(stores[l].size() == 16 + 64);
    CHECK(get(stores[l], steps - 1) == random_row(64, (steps - 1) * 10 + l));
  }
}
