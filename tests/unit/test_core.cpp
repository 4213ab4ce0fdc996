#include <actsparse/core/dtype.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/core/index_set.hpp>
#include <actsparse/core/quantize.hpp>
#include <actsparse/core/views.hpp>

#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace actsparse;

TEST_CASE("f16 conversion rounds to nearest even and keeps specials") {
  CHECK(to_f16(1.0F).bits == 0x3c00);
  CHECK(to_f16(-2.0F).bits == 0xc000);
  CHECK(to_f16(65504.0F).bits == 0x7bff);
  CHECK(to_f16(65520.0F).bits == 0x7c00);         // rounds up to inf
  CHECK(to_f16(0x1p-24F).bits == 0x0001);         // smallest subnormal
  CHECK(to_f16(0x1p-25F).bits == 0x0000);         // halfway to 0: ties to even
  CHECK(to_f16(1.0F + 0x1p-11F).bits == 0x3c00);  // halfway between 1 and next: even is 1
  CHECK(to_f16(1.0F + 3 * 0x1p-11F).bits == 0x3c02);
  CHECK(to_f16(std::numeric_limits<float>::infinity()).bits == 0x7c00);
  CHECK(std::isnan(to_f32(to_f16(std::numeric_limits<float>::quiet_NaN()))));
  // Every finite half converts to f32 and back unchanged.
  for (std::uint32_t b = 0; b < 0x10000; ++b) {
    const f16 h{static_cast<std::uint16_t>(b)};
    const float f = to_f32(h);
    if (std::isnan(f)) continue;
    REQUIRE(to_f16(f).bits == h.bits);
  }
}

TEST_CASE("bf16 conversion rounds to nearest even") {
  CHECK(to_bf16(1.0F).bits == 0x3f80);
  CHECK(to_bf16(std::bit_cast<float>(0x3f808000U)).bits == 0x3f80);  // tie, even stays
  CHECK(to_bf16(std::bit_cast<float>(0x3f818000U)).bits == 0x3f82);  // tie, odd rounds up
  CHECK(to_bf16(std::bit_cast<float>(0x3f808001U)).bits == 0x3f81);
  CHECK(std::isnan(to_f32(to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(to_f32(bf16{0x4049}) == 3.140625F);
}

TEST_CASE("q8_0 reproduces ggml on a hand-computed block") {
  std::array<float, 32> x{};
  for (std::size_t i = 0; i < 32; ++i) x[i] = static_cast<float>(i) - 16.0F;  // -16 .. 15
  const block_q8_0 b = quantize_q8_0(x);
  // amax = 16, d = 16/127 = 0.125984..., f16(d) = 0x3008 (0.1259765625).
  CHECK(b.d.bits == 0x3008);
  // q = round(x * 127/16): -16 -> -127, -1 -> -8 (7.9375), 1 -> 8, 15 -> 119 (119.0625).
  CHECK(b.qs[0] == -127);
  CHECK(b.qs[15] == -8);
  CHECK(b.qs[16] == 0);
  CHECK(b.qs[17] == 8);
  CHECK(b.qs[31] == 119);
  std::array<float, 32> y{};
  dequantize(b, y);
  CHECK(y[0] == -127 * 0.1259765625F);
  CHECK(y[31] == 119 * 0.1259765625F);
}

TEST_CASE("q4_0 reproduces ggml on a hand-computed block") {
  std::array<float, 32> x{};
  for (std::size_t i = 0; i < 32; ++i) x[i] = static_cast<float>(i) - 16.0F;  // -16 .. 15
  const block_q4_0 b = quantize_q4_0(x);
  // max-magnitude value is -16: d = -16 / -8 = 2, id = 0.5; q = min(15, (int)(x/2 + 8.5)).
  CHECK(b.d.bits == 0x4000);
  // x[0] = -16 -> 0; x[16] = 0 -> 8: qs[0] = 0 | 8 << 4.
  CHECK(b.qs[0] == 0x80);
  // x[15] = -1 -> (int)8.0 = 8; x[31] = 15 -> min(15, (int)16.0) = 15: qs[15] = 8 | 15 << 4.
  CHECK(b.qs[15] == 0xF8);
  // x[1] = -15 -> (int)1.0 = 1; x[17] = 1 -> (int)9.0 = 9.
  CHECK(b.qs[1] == 0x91);
  std::array<float, 32> y{};
  dequantize(b, y);
  CHECK(y[0] == -16.0F);
  CHECK(y[16] == 0.0F);
  CHECK(y[31] == 14.0F);
  CHECK(y[15] == 0.0F);
}

TEST_CASE("quantize_row rejects a row length that is not a multiple of 32") {
  std::vector<float> x(40, 1.0F);
  std::vector<block_q4_0> q(2);
  CHECK_THROWS_WITH_AS(quantize_row(x.data(), q.data(), 40), doctest::Contains("multiple of the block size"), error);
}

TEST_CASE("coalesce merges spans whose gap is at most max_gap") {
  const auto set = index_set::from_sorted({1, 2, 3, 6, 8, 20});
  const auto s0 = coalesce(set, 0);
  REQUIRE(s0.size() == 4);
  CHECK(s0[0] == index_span{1, 4});
  CHECK(s0[1] == index_span{6, 7});
  CHECK(s0[3] == index_span{20, 21});
  const auto s2 = coalesce(set, 2);  // gaps: 3->6 is 2 rows (4,5), 6->8 is 1 row
  REQUIRE(s2.size() == 2);
  CHECK(s2[0] == index_span{1, 9});
  CHECK(s2.rows_read() == 9);
  CHECK(coalesce(index_set{}, 4).empty());
}

TEST_CASE("index_set validates its input") {
  CHECK_THROWS_WITH_AS(index_set::from_sorted({3, 3}), doctest::Contains("strictly increasing"), error);
  CHECK_THROWS_AS(index_set::from_sorted({4, 1}), error);
  CHECK(index_set::from_unsorted({5, 1, 5, 3}) == index_set::from_sorted({1, 3, 5}));
}

TEST_CASE("views map ggml and torch strides without copies") {
  std::vector<float> buf(6 * 8);
  const auto t = from_torch(buf.data(), 6, 5, 8);
  CHECK(t.row_stride == 32);
  CHECK(t.row(2) == buf.data() + 16);
  const weight_view g = from_ggml(buf.data(), dtype::f32, 5, 6, 32);
  CHECK(g.rows == 6);
  CHECK(g.cols == 5);
  CHECK_THROWS_WITH_AS(validate(weight_view(buf.data(), dtype::q4_0, 2, 40, 1000), "test", "w"),
                       doctest::Contains("multiple of 32"), error);
  CHECK_THROWS_WITH_AS(validate(weight_view(buf.data(), dtype::f32, 2, 40, 100), "test", "w"),
                       doctest::Contains("at least 160 bytes"), error);
  CHECK_THROWS_AS((void)from_torch(buf.data(), 6, 5, 4), error);
}

TEST_CASE("ggml type ids map to dtypes and back, other ggml types are errors that name them") {
  // The ids of enum ggml_type (ggml.h).
  CHECK(dtype_of_ggml(0) == dtype::f32);
  CHECK(dtype_of_ggml(1) == dtype::f16);
  CHECK(dtype_of_ggml(2) == dtype::q4_0);
  CHECK(dtype_of_ggml(8) == dtype::q8_0);
  CHECK(dtype_of_ggml(30) == dtype::bf16);
  for (const dtype t : {dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0}) {
    CHECK(dtype_of_ggml(ggml_type_of(t)) == t);
  }
  CHECK_THROWS_WITH_AS((void)dtype_of_ggml(12), doctest::Contains("GGML_TYPE_Q4_K"), error);
  CHECK_THROWS_WITH_AS((void)dtype_of_ggml(3), doctest::Contains("GGML_TYPE_Q4_1"), error);
  CHECK_THROWS_WITH_AS((void)dtype_of_ggml(-1), doctest::Contains("not a ggml type"), error);
  CHECK_THROWS_WITH_AS((void)dtype_of_ggml(1000), doctest::Contains("Q8_0 (8)"), error);

  std::vector<block_q4_0> blocks(3 * 2);
  const weight_view q = from_ggml(blocks.data(), ggml_type_id::q4_0, 64, 3, 2 * sizeof(block_q4_0));
  CHECK(q.type == dtype::q4_0);
  CHECK(q.rows == 3);
  CHECK(q.cols == 64);
  CHECK_THROWS_WITH_AS((void)from_ggml(blocks.data(), 14, 256, 1, 210), doctest::Contains("GGML_TYPE_Q6_K"), error);
}

TEST_CASE("errors name the argument, the value and the expectation") {
  try {
    detail::require(false, "top_k", "k", 12, "k <= n (n = 10)");
    FAIL("no throw");
  } catch (const error& e) {
    CHECK(std::string(e.what()) == "actsparse::top_k: argument 'k' is 12; expected k <= n (n = 10)");
    CHECK(e.argument() == "k");
    CHECK(e.value() == "12");
  }
}
