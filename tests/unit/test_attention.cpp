// Decode attention over KV rows of any row_format (attention_args): the reference against a
// plain double computation, the CPU backend against the reference on every target, its bits
// for any thread count, and the argument checks.
#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/backends/reference.hpp>
#include <actsparse/managers/row_codec.hpp>
#include <actsparse/ops/run.hpp>
#include "cpu_test_support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <random>
#include <vector>

using namespace actsparse;

namespace {

constexpr row_format formats[] = {row_format::f32,      row_format::f16,      row_format::int8,
                                  row_format::int8_g32, row_format::int4_g32, row_format::int4_g32_min};

// A cache of `positions` K and V rows of d values, each row in a format drawn from `allowed`
// (or absent with probability `absent`), plus the decoded values for an independent check.
struct cache {
  std::size_t d = 0;
  std::vector<std::vector<std::byte>> bytes;
  std::vector<row_ref> k, v;
  std::vector<std::vector<float>> kd, vd;  // decoded rows ([] when absent)

  cache(std::size_t positions, std::size_t d_, std::span<const row_format> allowed, double absent, std::uint32_t seed)
      : d(d_) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist(0.0F, 1.0F);
    std::uniform_real_distribution<double> u(0.0, 1.0);
    bytes.reserve(2 * positions);
    for (std::size_t p = 0; p < positions; ++p) {
      const bool gone = u(rng) < absent;
      for (int kv = 0; kv < 2; ++kv) {
        std::vector<float> x(d);
        for (float& e : x) e = dist(rng) * (kv == 0 ? 1.5F : 1.0F);
        const row_format f = allowed[rng() % allowed.size()];
        std::vector<std::byte> b(row_bytes(f, d));
        encode_row(f, x, b.data());
        bytes.push_back(std::move(b));
        std::vector<float> dec(d);
        decode_row(f, bytes.back().data(), dec);
        (kv == 0 ? k : v).push_back(row_ref{f, gone ? nullptr : bytes.back().data()});
        (kv == 0 ? kd : vd).push_back(gone ? std::vector<float>{} : dec);
      }
    }
  }
};

std::vector<float> random_q(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0F, 1.0F);
  std::vector<float> q(n);
  for (float& e : q) e = dist(rng);
  return q;
}

struct shape {
  std::size_t heads, kv_heads, hd;
};

attention_args args_of(const cache& c, const shape& s, const std::vector<float>& q, std::vector<float>& out,
                       std::vector<float>& mass) {
  return attention_args{q, c.k, c.v, s.heads, s.kv_heads, s.hd, 1.0F / std::sqrt(static_cast<float>(s.hd)), out, mass};
}

}  // namespace

TEST_CASE("attention: the reference equals a plain double softmax over the decoded rows") {
  const shape s{4, 2, 32};
  const cache c(50, s.kv_heads * s.hd, formats, 0.1, 1);
  const std::vector<float> q = random_q(s.heads * s.hd, 2);
  std::vector<float> out(s.heads * s.hd);
  std::vector<float> mass(50);
  REQUIRE(reference_backend{}.run_with_scratch(args_of(c, s, q, out, mass)));
  std::vector<double> want_mass(50, 0.0);
  for (std::size_t h = 0; h < s.heads; ++h) {
    const std::size_t g = h / 2;
    std::vector<double> sc(50, 0.0);
    double top = -1e300;
    for (std::size_t p = 0; p < 50; ++p) {
      if (c.kd[p].empty()) continue;
      double dot = 0.0;
      for (std::size_t i = 0; i < s.hd; ++i) dot += double{q[h * s.hd + i]} * c.kd[p][g * s.hd + i];
      sc[p] = static_cast<float>(dot * double{1.0F / std::sqrt(32.0F)});
      top = std::max(top, sc[p]);
    }
    double total = 0.0;
    for (std::size_t p = 0; p < 50; ++p) total += c.kd[p].empty() ? 0.0 : std::exp(sc[p] - top);
    for (std::size_t i = 0; i < s.hd; ++i) {
      double acc = 0.0;
      for (std::size_t p = 0; p < 50; ++p) {
        if (!c.kd[p].empty()) acc += std::exp(sc[p] - top) / total * c.vd[p][g * s.hd + i];
      }
      CHECK(out[h * s.hd + i] == doctest::Approx(acc).epsilon(1e-6));
    }
    for (std::size_t p = 0; p < 50; ++p) want_mass[p] += c.kd[p].empty() ? 0.0 : std::exp(sc[p] - top) / total;
  }
  for (std::size_t p = 0; p < 50; ++p) CHECK(mass[p] == doctest::Approx(want_mass[p]).epsilon(1e-5));
}

TEST_CASE(
    "attention: cpu matches the reference for every row format, mixed caches, absent rows, GQA and MHA, "
    "every target") {
  const shape shapes[] = {{4, 4, 32}, {8, 2, 64}, {4, 1, 16}, {8, 4, 8}, {2, 2, 128}, {16, 2, 32}};
  std::uint32_t seed = 10;
  for (const shape& s : shapes) {
    for (const std::size_t positions : {0U, 1U, 77U, 300U, 530U}) {
      for (int mix = 0; mix < 7; ++mix) {  // each format alone, then all of them mixed
        const std::span<const row_format> allowed =
            mix < 6 ? std::span<const row_format>(formats + mix, 1) : std::span<const row_format>(formats);
        const std::size_t d = s.kv_heads * s.hd;
        if (d % 32 != 0 && std::any_of(allowed.begin(), allowed.end(), grouped)) continue;
        INFO("heads ", s.heads, " kv ", s.kv_heads, " hd ", s.hd, " positions ", positions, " mix ", mix);
        const cache c(positions, d, allowed, mix == 6 ? 0.2 : 0.0, ++seed);
        const std::vector<float> q = random_q(s.heads * s.hd, ++seed);
        std::vector<float> want(s.heads * s.hd);
        std::vector<float> want_mass(positions);
        REQUIRE(reference_backend{}.run_with_scratch(args_of(c, s, q, want, want_mass)));
        float scale = 0.0F;
        for (const float v : want) scale = std::max(scale, std::fabs(v));
        cpu_test::for_each_target([&] {
          std::vector<float> got(s.heads * s.hd, -1.0F);
          std::vector<float> mass(positions, -1.0F);
          std::vector<std::byte> ws;
          cpu::executor ex;
          REQUIRE(run(cpu_backend{}, args_of(c, s, q, got, mass), ws, ex));
          float worst = 0.0F;  // one check per call: the largest error
          for (std::size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::fabs(got[i] - want[i]));
          CHECK(worst <= 2e-5F * scale + 1e-6F);
          float worst_mass = 0.0F;
          for (std::size_t p = 0; p < positions; ++p) {
            worst_mass = std::max(worst_mass, std::fabs(mass[p] - want_mass[p]));
          }
          CHECK(worst_mass <= 1e-5F);
        });
      }
    }
  }
}

TEST_CASE("attention: cpu gives the same bits for 1, 2 and 3 threads") {
  const shape s{8, 2, 64};
  const cache c(700, s.kv_heads * s.hd, formats, 0.05, 99);
  const std::vector<float> q = random_q(s.heads * s.hd, 98);
  std::vector<float> one(s.heads * s.hd);
  std::vector<float> one_mass(700);
  std::vector<std::byte> ws;
  cpu::executor ex;
  REQUIRE(run(cpu_backend{}, args_of(c, s, q, one, one_mass), ws, ex));
  double total = 0.0;
  for (const float m : one_mass) total += m;
  CHECK(total == doctest::Approx(8.0).epsilon(1e-5));  // each head's softmax sums to 1
  for (const std::size_t threads : {2U, 3U}) {
    cpu::thread_pool pool(threads);
    cpu::executor pex(pool);
    std::vector<float> got(s.heads * s.hd);
    std::vector<float> mass(700);
    REQUIRE(run(cpu_backend{}, args_of(c, s, q, got, mass), ws, pex));
    CHECK(std::equal(got.begin(), got.end(), one.begin()));
    CHECK(std::equal(mass.begin(), mass.end(), one_mass.begin()));
  }
}

TEST_CASE("attention: bad shapes are errors that name the problem") {
  const cache c(4, 64, formats, 0.0, 5);
  std::vector<float> q = random_q(3 * 32, 6);
  std::vector<float> out(3 * 32);
  std::vector<float> mass;
  std::vector<std::byte> ws;
  cpu::executor ex;
  attention_args a{q, c.k, c.v, 3, 2, 32, 0.2F, out, mass};
  CHECK_THROWS_WITH_AS((void)run(cpu_backend{}, a, ws, ex), doctest::Contains("a multiple of n_kv_heads"), error);
  a.n_heads = 4;
  CHECK_THROWS_WITH_AS((void)run(cpu_backend{}, a, ws, ex), doctest::Contains("n_heads x head_dim"), error);
  std::vector<float> q4 = random_q(4 * 32, 7);
  std::vector<float> out4(4 * 32);
  a.q = q4;
  a.output = out4;
  std::vector<row_ref> fewer(c.v.begin(), c.v.begin() + 3);
  a.v_rows = fewer;
  CHECK_THROWS_WITH_AS((void)run(cpu_backend{}, a, ws, ex), doctest::Contains("one V row per K row"), error);
  a.v_rows = c.v;
  std::vector<float> short_mass(3);
  a.position_mass = short_mass;
  CHECK_THROWS_WITH_AS((void)run(cpu_backend{}, a, ws, ex), doctest::Contains("one value per position"), error);
  a.position_mass = {};
  a.scale = std::nanf("");
  CHECK_THROWS_WITH_AS((void)run(cpu_backend{}, a, ws, ex), doctest::Contains("finite"), error);
  a.scale = 0.2F;
  q4[5] = std::nanf("");
  CHECK_THROWS_WITH_AS((void)reference_backend{}.run_with_scratch(a), doctest::Contains("finite values"), error);
}
