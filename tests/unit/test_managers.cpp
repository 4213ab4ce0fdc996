#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/managers/fifo_int8_store.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

using namespace actsparse;

namespace {

std::vector<float> random_row(std::size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0F, scale);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<float> retrieved(const fifo_int8_store& s, std::uint64_t pos) {
  std::vector<float> out(s.row_size());
  s.retrieve(pos, out);
  return out;
}

// The scale the store uses for a row: max |x| / 127.
float row_scale(const std::vector<float>& x) {
  float amax = 0.0F;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  return amax / 127.0F;
}

}  // namespace

TEST_CASE("managers: fifo_int8_store keeps new rows exact and compresses the oldest first") {
  std::mt19937 rng(1);
  fifo_int8_store s({.row_size = 16, .full_capacity = 2});
  std::vector<std::vector<float>> rows;
  for (std::uint64_t p = 0; p < 5; ++p) {
    rows.push_back(random_row(16, rng, 1.0F));
    s.store(p, rows.back());
  }
  // Stored 0..4 with room for 2: 0, 1, 2 were compressed in that order, 3 and 4 are exact.
  CHECK(s.tier_of(0) == tier::compressed);
  CHECK(s.tier_of(1) == tier::compressed);
  CHECK(s.tier_of(2) == tier::compressed);
  CHECK(s.tier_of(3) == tier::full);
  CHECK(s.tier_of(4) == tier::full);
  CHECK(s.tier_of(5) == tier::absent);
  CHECK(retrieved(s, 3) == rows[3]);
  CHECK(retrieved(s, 4) == rows[4]);
  CHECK(s.size() == 5);
  CHECK(s.full_rows() == 2);
  CHECK(s.compressed_rows() == 3);

  // Demotion order follows insertion, not position: store 9 then 7; 3 is the oldest exact row.
  s.store(9, rows[0]);
  CHECK(s.tier_of(3) == tier::compressed);
  CHECK(s.tier_of(4) == tier::full);
  s.store(7, rows[1]);
  CHECK(s.tier_of(4) == tier::compressed);
  CHECK(s.tier_of(9) == tier::full);
  CHECK(s.tier_of(7) == tier::full);
}

TEST_CASE("managers: fifo_int8_store int8 round trip is within half a step") {
  std::mt19937 rng(2);
  fifo_int8_store s({.row_size = 257, .full_capacity = 0});  // everything is compressed at once
  for (float magnitude : {1e-30F, 1e-3F, 1.0F, 37.0F, 1e20F}) {
    for (int trial = 0; trial < 20; ++trial) {
      const auto x = random_row(257, rng, magnitude);
      s.store(0, x);
      REQUIRE(s.tier_of(0) == tier::compressed);
      const auto y = retrieved(s, 0);
      const float scale = row_scale(x);
      for (std::size_t i = 0; i < x.size(); ++i) {
        // scale / 2 from rounding to the grid, plus the float rounding of q * scale.
        const double bound = scale / 2.0 * (1.0 + 1e-6) + std::fabs(static_cast<double>(y[i])) * 0x1p-24;
        CHECK(std::fabs(static_cast<double>(x[i]) - y[i]) <= bound);
      }
      // The largest magnitude maps to ±127 steps exactly.
      const auto big =
          std::max_element(x.begin(), x.end(), [](float a, float b) { return std::fabs(a) < std::fabs(b); });
      CHECK(std::fabs(y[static_cast<std::size_t>(big - x.begin())]) == 127.0F * scale);
    }
  }
  // An all-zero row has scale 0 and comes back as zeros.
  const std::vector<float> zeros(257, 0.0F);
  s.store(1, zeros);
  CHECK(retrieved(s, 1) == zeros);
}

TEST_CASE("managers: fifo_int8_store counts the bytes of the payloads it holds") {
  fifo_int8_store s({.row_size = 10, .full_capacity = 3});
  CHECK(s.bytes_held() == 0);
  const std::vector<float> row(10, 0.5F);
  s.store(0, row);
  CHECK(s.bytes_held() == 40);
  s.store(1, row);
  s.store(2, row);
  CHECK(s.bytes_held() == 120);
  s.store(3, row);  // 0 is compressed: 10 int8 values + a 4-byte scale
  CHECK(s.bytes_held() == 3 * 40 + 14);
  s.store(0, row);  // replacing keeps one row per position; 1 is compressed now
  CHECK(s.size() == 4);
  CHECK(s.bytes_held() == 3 * 40 + 14);
  s.demote(2);
  CHECK(s.bytes_held() == 2 * 40 + 2 * 14);
  CHECK(s.erase(2));
  CHECK_FALSE(s.erase(2));
  CHECK(s.bytes_held() == 2 * 40 + 14);
  CHECK(s.tier_of(2) == tier::absent);
}

TEST_CASE("managers: fifo_int8_store promote and demote") {
  std::mt19937 rng(3);
  fifo_int8_store s({.row_size = 8, .full_capacity = 2});
  const auto a = random_row(8, rng, 2.0F);
  const auto b = random_row(8, rng, 2.0F);
  const auto c = random_row(8, rng, 2.0F);
  s.store(10, a);
  s.store(11, b);
  s.demote(10);  // compress now, although the tier has room
  CHECK(s.tier_of(10) == tier::compressed);
  CHECK(s.full_rows() == 1);
  const auto a_lossy = retrieved(s, 10);
  CHECK(a_lossy != a);
  s.demote(10);  // already compressed: nothing changes
  CHECK(retrieved(s, 10) == a_lossy);

  // Promote brings back the dequantized values (the round trip is lossy) as the newest row.
  s.promote(10);
  CHECK(s.tier_of(10) == tier::full);
  CHECK(retrieved(s, 10) == a_lossy);
  s.store(12, c);  // 11 is now the oldest exact row
  CHECK(s.tier_of(11) == tier::compressed);
  CHECK(s.tier_of(10) == tier::full);
  CHECK(s.tier_of(12) == tier::full);

  // Promoting a full row does not make it younger (FIFO, not LRU).
  s.promote(10);
  s.promote(11);  // 11 comes back as the newest: 10 is the oldest and is compressed
  CHECK(s.tier_of(10) == tier::compressed);
  CHECK(s.tier_of(11) == tier::full);
  CHECK(s.tier_of(12) == tier::full);

  // Storing over a compressed position makes it an exact, newest row again; 12 (stored before
  // 11 was promoted) is now the oldest exact row and is compressed.
  s.store(10, a);
  CHECK(s.tier_of(10) == tier::full);
  CHECK(retrieved(s, 10) == a);
  CHECK(s.tier_of(11) == tier::full);
  CHECK(s.tier_of(12) == tier::compressed);

  // With no f32 room, a promoted row is compressed again at once.
  fifo_int8_store z({.row_size = 8, .full_capacity = 0});
  z.store(1, a);
  z.promote(1);
  CHECK(z.tier_of(1) == tier::compressed);
}

TEST_CASE("managers: fifo_int8_store rejects bad rows and unknown positions") {
  fifo_int8_store s({.row_size = 4, .full_capacity = 1});
  const std::vector<float> row{1.0F, 2.0F, 3.0F, 4.0F};
  const std::vector<float> short_row{1.0F, 2.0F, 3.0F};
  CHECK_THROWS_WITH_AS(s.store(0, short_row),
                       doctest::Contains("fifo_int8_store::store: argument 'row' is a span of 3 floats; expected 4 "
                                         "floats (row_size)"),
                       error);
  std::vector<float> nan_row = row;
  nan_row[2] = std::numeric_limits<float>::quiet_NaN();
  CHECK_THROWS_WITH_AS(s.store(0, nan_row), doctest::Contains("argument 'row' is [2] = nan; expected finite values"),
                       error);
  nan_row[2] = -std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(s.store(0, nan_row), error);
  CHECK(s.tier_of(0) == tier::absent);  // a rejected row leaves nothing behind
  CHECK(s.size() == 0);
  s.store(0, row);
  std::vector<float> out(5);
  CHECK_THROWS_WITH_AS(s.retrieve(0, out), doctest::Contains("argument 'out' is a span of 5 floats"), error);
  out.resize(4);
  CHECK_THROWS_WITH_AS(s.retrieve(42, out), doctest::Contains("fifo_int8_store::retrieve: argument 'pos' is 42"),
                       error);
  CHECK_THROWS_WITH_AS(s.promote(42), doctest::Contains("fifo_int8_store::promote: argument 'pos' is 42"), error);
  CHECK_THROWS_WITH_AS(s.demote(42), doctest::Contains("fifo_int8_store::demote: argument 'pos' is 42"), error);
  CHECK_THROWS_WITH_AS(fifo_int8_store({.row_size = 0, .full_capacity = 4}),
                       doctest::Contains("argument 'config.row_size' is 0"), error);
}

TEST_CASE("managers: fifo_int8_store models activation_manager and copies by value") {
  static_assert(activation_manager<fifo_int8_store>);
  fifo_int8_store s({.row_size = 2, .full_capacity = 1});
  s.store(0, std::vector<float>{1.0F, -1.0F});
  fifo_int8_store copy = s;
  copy.store(1, std::vector<float>{2.0F, 2.0F});
  CHECK(s.tier_of(0) == tier::full);
  CHECK(copy.tier_of(0) == tier::compressed);
  CHECK(s.tier_of(1) == tier::absent);
}
