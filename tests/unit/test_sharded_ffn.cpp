// The neuron-sparse FFN under tensor parallelism (distributed/sharded_ffn.hpp): threads as
// ranks, each running neuron_sparse_ffn on its slice with a sharded_selector; the kept set is
// the whole layer's, the partials summed in rank order give the whole layer's y.
#include "cpu_test_support.hpp"
#include "rank_harness.hpp"
#include "test_reference_support.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/backends/cpu/repack.hpp>
#include <actsparse/backends/reference.hpp>
#include <actsparse/distributed/sharded_ffn.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>
#include <actsparse/scorers/magnitude.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace actsparse;
using namespace reference_test;

namespace {

struct layer_weights {
  test_weights gate, up, down;
  cpu::owned_weights down_t;
  ffn_layer layer(bool with_down_t) const {
    return ffn_layer{activation::silu, gate.view, up.view, with_down_t ? weight_view{} : down.view,
                     with_down_t ? down_t.view : weight_view{}};
  }
};

layer_weights make_layer(dtype t, std::size_t d_model, std::size_t d_ff, std::mt19937& rng) {
  layer_weights w{make_weights(t, d_ff, d_model, rng, 2),
                  make_weights(t, d_ff, d_model, rng, 2),
                  make_weights(t, d_model, d_ff, rng, 2),
                  {}};
  w.down_t = cpu::transpose(w.down.view);
  return w;
}

struct sharded_run {
  std::vector<std::uint32_t> kept;  // global
  std::vector<float> y;             // the partials summed in rank order
  std::size_t rounds = 0;
};

// Every rank runs the op on its slice; the partial ys are all-gathered and summed in rank order.
template <class Backend, class Policy>
sharded_run run_sharded(const ffn_layer& whole, const Policy& policy, score_source source, std::span<const float> x,
                        std::size_t ranks, std::size_t threads_per_rank) {
  const std::size_t d_model = whole.d_model();
  rank_test::thread_group group(ranks);
  std::vector<std::vector<std::uint32_t>> kept(ranks);
  std::vector<std::vector<float>> y(ranks, std::vector<float>(d_model));
  std::vector<std::size_t> rounds(ranks);
  const auto errors = group.run([&](std::size_t r) {
    const neuron_shard shard = neuron_shard::even(whole.d_ff(), r, ranks, 32);
    auto gather = [&](std::span<const std::byte> mine, std::span<std::byte> all) { group.gather(r, mine, all); };
    sharded_selection state;
    const neuron_sparse_ffn op{magnitude{}, sharded_selector<Policy, decltype(gather)>{policy, shard, &gather, &state},
                               source, Backend{}};
    selection local;
    ffn_scratch s;
    std::vector<float> partial(d_model);
    if constexpr (std::is_same_v<Backend, cpu_backend>) {
      cpu::thread_pool pool(threads_per_rank);
      cpu::executor ex(pool);
      REQUIRE(op(shard_of(whole, shard), x, partial, local, s, ex));
    } else {
      inline_executor ex;
      REQUIRE(op(shard_of(whole, shard), x, partial, local, s, ex));
    }
    std::vector<float> all(ranks * d_model);
    group.gather(r, std::as_bytes(std::span<const float>(partial)), std::as_writable_bytes(std::span<float>(all)));
    sum_in_rank_order(all, ranks, y[r]);
    for (const std::uint32_t i : local.indices) kept[r].push_back(static_cast<std::uint32_t>(shard.begin + i));
    rounds[r] = state.rounds();
  });
  for (const auto& e : errors) REQUIRE_FALSE(e);
  sharded_run out;
  for (std::size_t r = 0; r < ranks; ++r) {
    out.kept.insert(out.kept.end(), kept[r].begin(), kept[r].end());
    CHECK(std::memcmp(y[r].data(), y[0].data(), d_model * sizeof(float)) == 0);  // every rank: the same y
    CHECK(rounds[r] == rounds[0]);
  }
  out.y = y[0];
  out.rounds = rounds[0];
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

void check_close(const std::vector<float>& got, const std::vector<float>& want, double tolerance) {
  double err = 0.0;
  double norm = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    err += (got[i] - want[i]) * static_cast<double>(got[i] - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  CHECK(std::sqrt(err) <= tolerance * std::sqrt(norm) + 1e-30);
}

}  // namespace

namespace {

// The whole layer with and without shards on one backend: the CPU backend over W_downᵀ (its
// sparse path reads W_downᵀ rows), the reference backend over W_down's column slices.
template <class Backend, class Executor>
void check_shard_counts(const ffn_layer& whole, std::span<const float> x, score_source source, Executor& ex) {
  const neuron_sparse_ffn op{magnitude{}, top_k::by_count(64), source, Backend{}};
  const neuron_sparse_ffn mass_op{magnitude{}, cumulative_mass{0.7}, source, Backend{}};
  std::vector<float> y(whole.d_model());
  std::vector<float> y_mass(whole.d_model());
  selection kept;
  selection kept_mass;
  ffn_scratch s;
  const status st = op(whole, x, y, kept, s, ex);
  REQUIRE_MESSAGE(st, std::string(st.reason));
  REQUIRE(mass_op(whole, x, y_mass, kept_mass, s, ex));
  for (const std::size_t ranks : {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{4}}) {
    INFO("ranks " << ranks);
    const sharded_run got = run_sharded<Backend>(whole, top_k::by_count(64), source, x, ranks, 1);
    CHECK(got.kept == kept.indices);
    check_close(got.y, y, 1e-5);
    if (ranks == 1) {
      CHECK(same_bits(got.y, y));  // one rank is the unsharded op
    }
    if constexpr (std::is_same_v<Backend, cpu_backend>) {  // the same bits for any thread count within the ranks
      CHECK(same_bits(run_sharded<Backend>(whole, top_k::by_count(64), source, x, ranks, 2).y, got.y));
    }
    const sharded_run mass = run_sharded<Backend>(whole, cumulative_mass{0.7}, source, x, ranks, 1);
    CHECK(mass.kept == kept_mass.indices);
    check_close(mass.y, y_mass, 1e-5);
  }
}

}  // namespace

TEST_CASE("sharded FFN: every shard count keeps the whole layer's set, its partials sum to the whole y") {
  std::mt19937 rng(230);
  for (const dtype t : {dtype::f32, dtype::bf16, dtype::q4_0}) {
    const layer_weights w = make_layer(t, 64, 256, rng);
    const std::vector<float> x = random_vector(64, rng);
    for (const score_source source : {score_source::gate_activation, score_source::gate_preactivation}) {
      INFO(name(t) << " source " << name(source));
      cpu::executor ex;
      check_shard_counts<cpu_backend>(w.layer(true), x, source, ex);
      inline_executor iex;
      check_shard_counts<reference_backend>(w.layer(false), x, source, iex);
    }
  }
}

TEST_CASE("sharded FFN: keep-all slices sum to the dense layer, on the CPU and the reference backend") {
  std::mt19937 rng(231);
  const layer_weights w = make_layer(dtype::f16, 64, 192, rng);
  const ffn_layer whole = w.layer(true);
  const std::vector<float> x = random_vector(64, rng);
  std::vector<float> dense(64);
  ffn_scratch s;
  cpu::executor ex;
  REQUIRE(dense_ffn(cpu_backend{}, whole, x, dense, s, ex));
  const sharded_run got = run_sharded<cpu_backend>(whole, top_k::by_count(192), score_source::gate_activation, x, 3, 1);
  CHECK(got.kept.size() == 192);
  check_close(got.y, dense, 1e-5);
  std::vector<float> ref_dense(64);
  inline_executor iex;
  REQUIRE(dense_ffn(reference_backend{}, whole, x, ref_dense, s, iex));
  const sharded_run ref =
      run_sharded<reference_backend>(whole, top_k::by_ratio(0.25), score_source::gate_activation, x, 2, 1);
  const neuron_sparse_ffn ref_op{magnitude{}, top_k::by_ratio(0.25), score_source::gate_activation,
                                 reference_backend{}};
  std::vector<float> ref_y(64);
  selection ref_kept;
  REQUIRE(ref_op(whole, x, ref_y, ref_kept, s, iex));
  CHECK(ref.kept == ref_kept.indices);
  check_close(ref.y, ref_y, 1e-5);
}

TEST_CASE("sharded FFN: slices of a layer and their errors") {
  std::mt19937 rng(232);
  const layer_weights w = make_layer(dtype::q4_0, 64, 256, rng);
  const ffn_layer whole = w.layer(false);
  const ffn_layer part = shard_of(whole, neuron_shard{64, 96, 256, 1, 3});
  CHECK(part.d_ff() == 96);
  CHECK(part.d_model() == 64);
  CHECK(part.down.cols == 96);
  CHECK(part.down.row_stride == whole.down.row_stride);
  CHECK(static_cast<const std::byte*>(part.gate.data) ==
        static_cast<const std::byte*>(whole.gate.data) + 64 * whole.gate.row_stride);
  CHECK_THROWS_WITH_AS((void)shard_of(whole, neuron_shard{16, 96, 256, 1, 3}),
                       doctest::Contains("q4_0 blocks are not split"), actsparse::error);
  CHECK_THROWS_WITH_AS((void)shard_of(whole, neuron_shard{0, 96, 300, 0, 3}), doctest::Contains("d_ff = 256"),
                       actsparse::error);
  CHECK_THROWS_WITH_AS((void)rows_of(whole.gate, 200, 100), doctest::Contains("rows of [0, 256)"), actsparse::error);
  std::vector<float> y(3);
  CHECK_THROWS_WITH_AS(sum_in_rank_order(std::vector<float>(5), 2, y), doctest::Contains("ranks x y.size()"),
                       actsparse::error);
  const std::vector<float> partials = {1.0F, 2.0F, 3.0F, 1e8F, -1e8F, 0.5F};
  std::vector<float> two(2);
  sum_in_rank_order(partials, 3, two);
  CHECK(two[0] == (1.0F + 3.0F) + -1e8F);
  CHECK(two[1] == (2.0F + 1e8F) + 0.5F);
  auto no_gather = [](std::span<const std::byte>, std::span<std::byte>) {};
  const sharded_selector<top_k, decltype(no_gather)> unset{top_k::by_count(1), neuron_shard{0, 4, 4, 0, 1}, nullptr,
                                                           nullptr};
  selection out;
  CHECK_THROWS_WITH_AS(unset.select(std::vector<float>(4, 1.0F), out), doctest::Contains("all-gather"),
                       actsparse::error);
}
