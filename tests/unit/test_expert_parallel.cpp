// Expert parallelism (distributed/expert_parallel.hpp): P ranks simulated in one thread, the two
// all-to-alls done by copying blocks between the ranks' buffers. Every source rank's combined
// output must equal single-process moe_ffn over all experts for its tokens, bit for bit, on the
// reference and CPU backends, for every dtype, placement (a rank with no expert included),
// shared expert or not, and tokens with no expert.

#include "moe_test_support.hpp"
#include "quantized_matrix.hpp"

#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/backends/reference.hpp>
#include <actsparse/core/routing.hpp>
#include <actsparse/distributed/expert_parallel.hpp>
#include <actsparse/ops/moe_ffn.hpp>
#include <actsparse/ops/moe_router.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

using namespace actsparse;
using moe_test::moe_weights;
using moe_test::random_vector;
using moe_test::same_bits;

namespace {

bool any_nonzero(std::span<const float> a) {
  return std::any_of(a.begin(), a.end(), [](float v) { return v != 0.0F; });
}

matrix_view<const float> rows_of(const std::vector<float>& v, std::size_t d) {
  return matrix_view<const float>::packed(v.data(), v.size() / d, d);
}
matrix_view<float> rows_of(std::vector<float>& v, std::size_t d) {
  return matrix_view<float>::packed(v.data(), v.size() / d, d);
}

// One source rank's tokens: its routing and its input rows.
struct rank_tokens {
  routing_table table;
  std::vector<float> input;
};

// Every phase of every rank, with the exchanges as copies. sends / recvs are kept for the
// byte-count checks.
struct ep_world {
  std::vector<ep_send> sends;
  std::vector<ep_recv> recvs;
  std::vector<std::vector<float>> returned;
  std::vector<std::vector<float>> outputs;
};

template <class Backend>
ep_world run_expert_parallel(const Backend& backend, typename Backend::executor_type& ex, const moe_experts& all,
                             const expert_placement& placement, const std::vector<rank_tokens>& ranks,
                             const ffn_layer& shared) {
  const std::size_t P = placement.ranks;
  const std::size_t d = all.d_model();
  REQUIRE(ranks.size() == P);
  ep_world w;
  w.sends.resize(P);
  w.recvs.resize(P);
  ep_scratch scratch;
  // Phase 1 at every source.
  for (std::size_t s = 0; s < P; ++s)
    ep_dispatch(placement, ranks[s].table.view(), rows_of(ranks[s].input, d), w.sends[s]);
  // Exchange 1: counts, then rows and ids (source s's block for r lands at r's offsets[s]).
  for (std::size_t r = 0; r < P; ++r) {
    std::vector<std::size_t> counts(P);
    for (std::size_t s = 0; s < P; ++s) counts[s] = w.sends[s].counts[r];
    w.recvs[r].resize(counts, d);
    for (std::size_t s = 0; s < P; ++s) {
      const std::span<const float> rows = w.sends[s].rows_to(r);
      const std::span<const std::uint32_t> ids = w.sends[s].ids_to(r);
      std::copy(rows.begin(), rows.end(),
                w.recvs[r].rows.begin() + static_cast<std::ptrdiff_t>(w.recvs[r].offsets[s] * d));
      std::copy(ids.begin(), ids.end(),
                w.recvs[r].expert_ids.begin() + static_cast<std::ptrdiff_t>(w.recvs[r].offsets[s]));
    }
  }
  // Phase 2 at every owner.
  for (std::size_t r = 0; r < P; ++r) {
    ep_recv& rv = w.recvs[r];
    REQUIRE(ep_compute(backend, owned_experts(all, placement, r), rv.rows_view(), rv.expert_ids, rv.out_view(), scratch,
                       ex));
  }
  // Exchange 2: each owner's block for source s back to s's send offsets for that owner.
  w.returned.resize(P);
  for (std::size_t s = 0; s < P; ++s) {
    w.returned[s].assign(w.sends[s].slots() * d, -7.0F);
    for (std::size_t r = 0; r < P; ++r) {
      const ep_recv& rv = w.recvs[r];
      REQUIRE(rv.counts[s] == w.sends[s].counts[r]);
      const auto from = rv.out.begin() + static_cast<std::ptrdiff_t>(rv.offsets[s] * d);
      std::copy(from, from + static_cast<std::ptrdiff_t>(rv.counts[s] * d),
                w.returned[s].begin() + static_cast<std::ptrdiff_t>(w.sends[s].offsets[r] * d));
    }
  }
  // Phase 3 at every source.
  w.outputs.resize(P);
  for (std::size_t s = 0; s < P; ++s) {
    w.outputs[s].assign(ranks[s].table.tokens() * d, -3.0F);
    REQUIRE(ep_combine(backend, ranks[s].table.view(), rows_of(ranks[s].input, d), rows_of(w.returned[s], d),
                       rows_of(w.outputs[s], d), scratch, ex, shared));
  }
  return w;
}

// Single-process moe_ffn_args over all experts for one rank's tokens (what moe_ffn runs).
template <class Backend>
std::vector<float> single_process(const Backend& backend, typename Backend::executor_type& ex, const moe_experts& all,
                                  const rank_tokens& rank, const ffn_layer& shared) {
  const std::size_t d = all.d_model();
  std::vector<float> y(rank.table.tokens() * d, -5.0F);
  std::vector<std::byte> ws;
  REQUIRE(run(backend, moe_ffn_args{all, rank.table.view(), rows_of(rank.input, d), rows_of(y, d), shared}, ws, ex));
  return y;
}

// Bit equality where the backend promises it: always on the reference, on the CPU with a
// fused multiply-add (test_moe's condition); otherwise within f32 rounding.
void check_equal(const std::vector<float>& got, const std::vector<float>& want, bool exact) {
  if (exact) {
    CHECK(same_bits(got, want));
    return;
  }
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == doctest::Approx(want[i]).epsilon(1e-4));
}

// P ranks of 5..8 tokens each, top-2 routing from random logits through the library's router.
std::vector<rank_tokens> routed_ranks(std::size_t P, std::size_t n_experts, std::size_t d_model, std::mt19937& rng,
                                      std::vector<std::vector<float>>* logits_out = nullptr) {
  std::vector<rank_tokens> ranks(P);
  std::uniform_int_distribution<std::size_t> count(5, 8);
  moe_routing policy;
  policy.native_k = std::min<std::size_t>(2, n_experts);
  moe_route_scratch rs;
  for (std::size_t s = 0; s < P; ++s) {
    const std::size_t tokens = count(rng);
    ranks[s].input = random_vector(tokens * d_model, rng);
    const std::vector<float> logits = random_vector(tokens * n_experts, rng);
    route(policy, 0, matrix_view<const float>::packed(logits.data(), tokens, n_experts), ranks[s].table, rs);
    if (logits_out != nullptr) logits_out->push_back(logits);
  }
  return ranks;
}

}  // namespace

TEST_CASE("expert_parallel: placement blocks are contiguous, balanced, owner inverts first, and bad ones are errors") {
  for (std::size_t E = 1; E <= 20; ++E) {
    for (std::size_t P = 1; P <= 25; ++P) {
      const expert_placement pl{E, P};
      INFO("experts ", E, " ranks ", P);
      CHECK(pl.first(0) == 0);
      CHECK(pl.first(P) == E);
      std::size_t total = 0;
      for (std::size_t r = 0; r < P; ++r) {
        CHECK(pl.first(r + 1) >= pl.first(r));
        CHECK(pl.count(r) == pl.first(r + 1) - pl.first(r));
        CHECK(pl.count(r) >= E / P);
        CHECK(pl.count(r) <= (E + P - 1) / P);
        CHECK(pl.first(r) == r * E / P);
        total += pl.count(r);
      }
      CHECK(total == E);
      for (std::size_t e = 0; e < E; ++e) {
        std::size_t want = P;
        for (std::size_t r = 0; r < P; ++r) {
          if (pl.first(r) <= e && e < pl.first(r + 1)) want = r;
        }
        CHECK(pl.owner(e) == want);
      }
    }
  }
  const expert_placement p83{8, 3};
  CHECK(std::vector<std::size_t>{p83.count(0), p83.count(1), p83.count(2)} == std::vector<std::size_t>{2, 3, 3});
  const expert_placement p34{3, 4};
  CHECK(std::vector<std::size_t>{p34.count(0), p34.count(1), p34.count(2), p34.count(3)} ==
        std::vector<std::size_t>{0, 1, 1, 1});
  CHECK(p34.owner(0) == 1);
  CHECK(p34.owner(2) == 3);

  const expert_placement no_experts{0, 2};
  const expert_placement no_ranks{4, 0};
  CHECK_THROWS_WITH_AS((void)no_experts.first(0), doctest::Contains("at least one expert"), error);
  CHECK_THROWS_WITH_AS((void)no_ranks.owner(0), doctest::Contains("at least one rank"), error);
  CHECK_THROWS_WITH_AS((void)p83.owner(8), doctest::Contains("an expert < experts = 8"), error);
  CHECK_THROWS_WITH_AS((void)p83.count(3), doctest::Contains("a rank < ranks = 3"), error);
  CHECK_THROWS_WITH_AS((void)p83.first(4), doctest::Contains("a rank <= ranks = 3"), error);
}

TEST_CASE("expert_parallel: dispatch groups the pairs by owner rank in expert-major order with local expert ids") {
  // 5 tokens, 8 experts over 3 ranks (experts 0-1, 2-4, 5-7); token 3 runs no expert.
  const std::vector<std::uint32_t> offsets{0, 2, 4, 7, 7, 8};
  const std::vector<std::uint32_t> experts{1, 5, 0, 2, 2, 4, 7, 1};
  const std::vector<float> weights{0.5F, 0.25F, 0.125F, 0.75F, 0.3F, 0.2F, 0.1F, 1.0F};
  routing_table t;
  t.assign(8, offsets, experts, weights);
  const std::size_t d = 4;
  std::vector<float> input(5 * d);
  for (std::size_t i = 0; i < input.size(); ++i) input[i] = static_cast<float>(i);  // row t holds 4t..4t+3
  const expert_placement pl{8, 3};
  ep_send send;
  ep_dispatch(pl, t.view(), rows_of(input, d), send);
  CHECK(send.counts == std::vector<std::size_t>{3, 3, 2});
  CHECK(send.offsets == std::vector<std::size_t>{0, 3, 6, 8});
  CHECK(send.ranks() == 3);
  CHECK(send.slots() == 8);
  // Slots: rank 0 = expert 0 (token 1), expert 1 (tokens 0, 4); rank 1 = expert 2 (tokens 1, 2),
  // expert 4 (token 2); rank 2 = expert 5 (token 0), expert 7 (token 2).
  const std::vector<std::size_t> token{1, 0, 4, 1, 2, 2, 0, 2};
  CHECK(send.expert_ids == std::vector<std::uint32_t>{0, 1, 1, 0, 0, 2, 0, 2});
  CHECK(send.slot_pairs == std::vector<std::uint32_t>{2, 0, 7, 3, 4, 5, 1, 6});
  for (std::size_t q = 0; q < send.slots(); ++q) {
    INFO("slot ", q);
    CHECK(std::equal(send.rows.begin() + static_cast<std::ptrdiff_t>(q * d),
                     send.rows.begin() + static_cast<std::ptrdiff_t>((q + 1) * d),
                     input.begin() + static_cast<std::ptrdiff_t>(token[q] * d)));
    // The slot's pair is of that token and its global expert is first(owner) + local id.
    const std::uint32_t p = send.slot_pairs[q];
    CHECK(p >= t.token_offsets()[token[q]]);
    CHECK(p < t.token_offsets()[token[q] + 1]);
    const std::size_t owner = q < 3 ? 0 : q < 6 ? 1 : 2;
    CHECK(t.pair_expert()[p] == pl.first(owner) + send.expert_ids[q]);
  }
  CHECK(std::vector<float>(send.rows_to(2).begin(), send.rows_to(2).end()) ==
        std::vector<float>{0, 1, 2, 3, 8, 9, 10, 11});
  CHECK(std::vector<std::uint32_t>(send.ids_to(1).begin(), send.ids_to(1).end()) ==
        std::vector<std::uint32_t>{0, 0, 2});

  // Reused for a placement with idle ranks: 8 experts over 10 ranks.
  ep_dispatch(expert_placement{8, 10}, t.view(), rows_of(input, d), send);
  CHECK(send.counts == std::vector<std::size_t>{0, 1, 2, 2, 0, 0, 1, 1, 0, 1});
  CHECK(send.offsets.back() == 8);
  CHECK(std::all_of(send.expert_ids.begin(), send.expert_ids.end(), [](std::uint32_t id) { return id == 0; }));
}

TEST_CASE(
    "expert_parallel: every source rank's output equals single-process moe_ffn bit for bit (router top-2, every dtype, "
    "1 to 4 ranks)") {
  std::mt19937 rng(23);
  const std::size_t d_model = 64, d_ff = 64;
  const bool cpu_exact = cpu::detail::fused_multiply_add();
  INFO("cpu fused multiply-add: ", cpu_exact);
  for (const dtype type : {dtype::f32, dtype::f16, dtype::bf16, dtype::q8_0, dtype::q4_0}) {
    for (const std::array<std::size_t, 2>& config :
         std::vector<std::array<std::size_t, 2>>{{8, 1}, {8, 2}, {8, 3}, {8, 4}, {3, 4}}) {
      const std::size_t E = config[0];
      const std::size_t P = config[1];
      const moe_weights w(type, E, d_model, d_ff, rng);
      const moe_experts all = w.experts(true);
      const expert_placement pl{E, P};
      std::vector<std::vector<float>> logits;
      const std::vector<rank_tokens> ranks = routed_ranks(P, E, d_model, rng, &logits);
      for (const bool with_shared : {false, true}) {
        INFO(name(type), " experts ", E, " ranks ", P, with_shared ? " shared" : "");
        const ffn_layer shared = with_shared ? w.shared() : ffn_layer{};
        // Reference backend.
        inline_executor rex;
        const ep_world ref = run_expert_parallel(reference_backend{}, rex, all, pl, ranks, shared);
        for (std::size_t s = 0; s < P; ++s) {
          INFO("reference, source rank ", s);
          const std::vector<float> want = single_process(reference_backend{}, rex, all, ranks[s], shared);
          CHECK(any_nonzero(want));
          check_equal(ref.outputs[s], want, true);
        }
        // CPU backend, 1 and 2 threads, against moe_ffn<cpu_backend> routing the same logits.
        cpu::thread_pool pool(2);
        for (const std::size_t threads : {1U, 2U}) {
          cpu::executor ex = threads == 1 ? cpu::executor{} : cpu::executor(pool);
          const ep_world got = run_expert_parallel(cpu_backend{}, ex, all, pl, ranks, shared);
          moe_ffn<cpu_backend> layer;
          layer.routing.native_k = std::min<std::size_t>(2, E);
          moe_scratch ms;
          for (std::size_t s = 0; s < P; ++s) {
            INFO("cpu threads ", threads, ", source rank ", s);
            const std::size_t tokens = ranks[s].table.tokens();
            std::vector<float> want(tokens * d_model);
            REQUIRE(layer(0, all, matrix_view<const float>::packed(logits[s].data(), tokens, E),
                          rows_of(ranks[s].input, d_model), rows_of(want, d_model), ms, ex, shared));
            REQUIRE(std::equal(ms.table.pair_expert().begin(), ms.table.pair_expert().end(),
                               ranks[s].table.pair_expert().begin(), ranks[s].table.pair_expert().end()));
            check_equal(got.outputs[s], want, cpu_exact);
          }
        }
      }
    }
  }
}

TEST_CASE(
    "expert_parallel: hand-built routing with tokens of no expert, a rank of no token, every expert on one token and "
    "W_down untransposed") {
  std::mt19937 rng(29);
  const std::size_t d_model = 64, d_ff = 96, E = 8;
  const bool cpu_exact = cpu::detail::fused_multiply_add();
  for (const dtype type : {dtype::f32, dtype::q4_0}) {
    const moe_weights w(type, E, d_model, d_ff, rng);
    for (const bool transposed : {true, false}) {
      const moe_experts all = w.experts(transposed);
      for (const std::size_t P : {1U, 2U, 3U, 4U, 11U}) {
        // Rank 0: tokens 1 and 3 run no expert, token 2 every expert. Rank 1 (when there): no
        // token. Other ranks: random 0..3 experts per token.
        std::vector<rank_tokens> ranks(P);
        for (std::size_t s = 0; s < P; ++s) {
          std::vector<std::uint32_t> offsets{0};
          std::vector<std::uint32_t> experts;
          std::vector<float> weights;
          std::size_t tokens = 0;
          if (s == 0) {
            tokens = 4;
            const std::vector<std::vector<std::uint32_t>> lists{{3, 6}, {}, {0, 1, 2, 3, 4, 5, 6, 7}, {}};
            for (const auto& l : lists) {
              for (const std::uint32_t e : l) {
                experts.push_back(e);
                weights.push_back(0.1F + 0.1F * static_cast<float>(e));
              }
              offsets.push_back(static_cast<std::uint32_t>(experts.size()));
            }
          } else if (s != 1) {
            tokens = 6;
            std::uniform_int_distribution<std::size_t> k(0, 3);
            std::uniform_real_distribution<float> wd(-1.0F, 1.0F);
            std::vector<std::uint32_t> ids(E);
            std::iota(ids.begin(), ids.end(), 0U);
            for (std::size_t t = 0; t < tokens; ++t) {
              std::shuffle(ids.begin(), ids.end(), rng);
              std::vector<std::uint32_t> pick(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k(rng)));
              std::sort(pick.begin(), pick.end());
              for (const std::uint32_t e : pick) {
                experts.push_back(e);
                weights.push_back(wd(rng));
              }
              offsets.push_back(static_cast<std::uint32_t>(experts.size()));
            }
          }
          if (tokens == 0) offsets = {0};
          ranks[s].table.assign(E, offsets, experts, weights);
          ranks[s].input = random_vector(tokens * d_model, rng);
        }
        const expert_placement pl{E, P};
        for (const bool with_shared : {false, true}) {
          INFO(name(type), transposed ? " down_t" : " down", " ranks ", P, with_shared ? " shared" : "");
          const ffn_layer shared = with_shared ? w.shared() : ffn_layer{};
          inline_executor rex;
          const ep_world ref = run_expert_parallel(reference_backend{}, rex, all, pl, ranks, shared);
          cpu::executor ex;
          const ep_world got = run_expert_parallel(cpu_backend{}, ex, all, pl, ranks, shared);
          for (std::size_t s = 0; s < P; ++s) {
            INFO("source rank ", s);
            check_equal(ref.outputs[s], single_process(reference_backend{}, rex, all, ranks[s], shared), true);
            check_equal(got.outputs[s], single_process(cpu_backend{}, ex, all, ranks[s], shared), cpu_exact);
          }
          // Rank 0's tokens with no expert: zeros, or the shared expert's output alone.
          for (const std::size_t t : {1U, 3U}) {
            const std::span<const float> y(ref.outputs[0].data() + t * d_model, d_model);
            CHECK(any_nonzero(y) == with_shared);
          }
          CHECK(any_nonzero(ref.outputs[0]));
        }
      }
    }
  }
}

TEST_CASE("expert_parallel: phase 2 rows are each expert's dense FFN and a permuted combine is caught") {
  std::mt19937 rng(31);
  const std::size_t d_model = 64, d_ff = 64, E = 8, P = 3;
  const moe_weights w(dtype::f32, E, d_model, d_ff, rng);
  const moe_experts all = w.experts(true);
  const expert_placement pl{E, P};
  const std::vector<rank_tokens> ranks = routed_ranks(P, E, d_model, rng);
  inline_executor rex;
  const ep_world world = run_expert_parallel(reference_backend{}, rex, all, pl, ranks, w.shared());

  // Every returned row is the gated FFN of its token and global expert (the reference's bits).
  for (std::size_t s = 0; s < P; ++s) {
    const ep_send& send = world.sends[s];
    const routing_table& t = ranks[s].table;
    for (std::size_t q = 0; q < send.slots(); ++q) {
      const std::uint32_t p = send.slot_pairs[q];
      const std::size_t tok =
          static_cast<std::size_t>(std::upper_bound(t.token_offsets().begin(), t.token_offsets().end(), p) -
                                   t.token_offsets().begin()) -
          1;
      std::vector<float> f(d_model);
      REQUIRE(reference_backend{}.run_with_scratch(gated_ffn_args{
          all.expert(t.pair_expert()[p]), std::span<const float>(ranks[s].input.data() + tok * d_model, d_model), f,
          subset::everything()}));
      CHECK(same_bits(std::span<const float>(world.returned[s].data() + q * d_model, d_model), f));
    }
  }

  // Swapping the returned rows of one token's two pairs (different weights) changes its bits;
  // so does combining its pairs in the reverse order.
  const std::size_t s = 0;
  const routing_table& t = ranks[s].table;
  const std::vector<float> want = single_process(reference_backend{}, rex, all, ranks[s], w.shared());
  REQUIRE(same_bits(world.outputs[s], want));
  std::vector<std::uint32_t> slot_of(t.pairs());
  for (std::size_t q = 0; q < t.pairs(); ++q) slot_of[world.sends[s].slot_pairs[q]] = static_cast<std::uint32_t>(q);
  std::vector<float> swapped = world.returned[s];
  const std::uint32_t a = slot_of[t.token_offsets()[0]];
  const std::uint32_t b = slot_of[t.token_offsets()[0] + 1];
  std::swap_ranges(swapped.begin() + static_cast<std::ptrdiff_t>(a * d_model),
                   swapped.begin() + static_cast<std::ptrdiff_t>((a + 1) * d_model),
                   swapped.begin() + static_cast<std::ptrdiff_t>(b * d_model));
  std::vector<float> out(want.size());
  ep_scratch scratch;
  REQUIRE(ep_combine(reference_backend{}, t.view(), rows_of(ranks[s].input, d_model), rows_of(swapped, d_model),
                     rows_of(out, d_model), scratch, rex, w.shared()));
  CHECK_FALSE(same_bits(std::span<const float>(out.data(), d_model), std::span<const float>(want.data(), d_model)));
  CHECK(same_bits(std::span<const float>(out.data() + d_model, out.size() - d_model),
                  std::span<const float>(want.data() + d_model, want.size() - d_model)));
  // Reverse-order chain for token 0 (pairs last to first, then the shared expert): other bits.
  std::vector<float> rows;
  std::vector<float> coef;
  for (std::uint32_t p = t.token_offsets()[1]; p-- > t.token_offsets()[0];) {
    rows.insert(rows.end(), world.returned[s].begin() + static_cast<std::ptrdiff_t>(slot_of[p] * d_model),
                world.returned[s].begin() + static_cast<std::ptrdiff_t>((slot_of[p] + 1) * d_model));
    coef.push_back(t.pair_weight()[p]);
  }
  std::vector<float> sh(d_model);
  REQUIRE(reference_backend{}.run_with_scratch(
      gated_ffn_args{w.shared(), std::span<const float>(ranks[s].input.data(), d_model), sh, subset::everything()}));
  rows.insert(rows.end(), sh.begin(), sh.end());
  coef.push_back(1.0F);
  std::vector<float> reversed(d_model);
  REQUIRE(reference_backend{}.run_with_scratch(
      transposed_linear_args{weight_view(rows.data(), dtype::f32, coef.size(), d_model, d_model * sizeof(float)), coef,
                             reversed, subset::everything()}));
  CHECK_FALSE(same_bits(reversed, std::span<const float>(want.data(), d_model)));
}

TEST_CASE("expert_parallel: bytes each rank sends and receives in each exchange") {
  // Hand-computed: rank 1 of 3, d_model 8 (a row 32 bytes, with its id 36).
  const std::vector<std::size_t> send{2, 5, 1};
  const std::vector<std::size_t> recv{3, 5, 4};
  const std::size_t row = 32;
  const std::size_t row_id = 36;
  const ep_bytes b = exchange_bytes(send, recv, 1, 8);
  CHECK(b.dispatch.sent == 2 * ep_count_bytes + (2 + 1) * row_id);
  CHECK(b.dispatch.received == 2 * ep_count_bytes + (3 + 4) * row_id);
  CHECK(b.dispatch.local == ep_count_bytes + 5 * row_id);
  CHECK(b.combine.sent == (3 + 4) * row);
  CHECK(b.combine.received == (2 + 1) * row);
  CHECK(b.combine.local == 5 * row);
  const ep_bytes one = exchange_bytes(std::vector<std::size_t>{7}, std::vector<std::size_t>{7}, 0, 8);
  CHECK(one.dispatch.sent == 0);
  CHECK(one.dispatch.received == 0);
  CHECK(one.combine.sent == 0);
  CHECK(one.dispatch.local == ep_count_bytes + 7 * row_id);

  // A simulated world: what the ranks send in total is what they receive, in each exchange, and
  // each rank's rows are its pairs.
  std::mt19937 rng(37);
  const std::size_t d_model = 32, E = 8, P = 4;
  const moe_weights w(dtype::f32, E, d_model, 32, rng);
  const std::vector<rank_tokens> ranks = routed_ranks(P, E, d_model, rng);
  inline_executor rex;
  const ep_world world =
      run_expert_parallel(reference_backend{}, rex, w.experts(true), expert_placement{E, P}, ranks, {});
  std::size_t sent = 0, received = 0, back = 0, returned = 0;
  for (std::size_t r = 0; r < P; ++r) {
    const ep_bytes br = exchange_bytes(world.sends[r].counts, world.recvs[r].counts, r, d_model);
    sent += br.dispatch.sent;
    received += br.dispatch.received;
    back += br.combine.sent;
    returned += br.combine.received;
    CHECK(br.dispatch.sent + br.dispatch.local - (P - 1) * ep_count_bytes - ep_count_bytes ==
          ranks[r].table.pairs() * (d_model * 4 + 4));
    CHECK(br.combine.received + br.combine.local == ranks[r].table.pairs() * d_model * 4);
  }
  CHECK(sent == received);
  CHECK(back == returned);
  CHECK(sent > 0);

  CHECK_THROWS_WITH_AS((void)exchange_bytes(send, std::vector<std::size_t>{1, 2}, 0, 8),
                       doctest::Contains("recv_counts"), error);
  CHECK_THROWS_WITH_AS((void)exchange_bytes(send, recv, 3, 8), doctest::Contains("a rank < 3"), error);
  CHECK_THROWS_WITH_AS((void)exchange_bytes({}, {}, 0, 8), doctest::Contains("send_counts"), error);
}

TEST_CASE("expert_parallel: mismatched shapes, expert ids, counts and placements are clear errors") {
  std::mt19937 rng(41);
  const std::size_t d_model = 32, E = 4;
  const moe_weights w(dtype::f32, E, d_model, 32, rng);
  const moe_experts all = w.experts(true);
  routing_table t;
  t.assign(E, std::vector<std::uint32_t>{0, 2, 3}, std::vector<std::uint32_t>{0, 3, 1},
           std::vector<float>{0.5F, 0.5F, 1.0F});
  const std::vector<float> input = random_vector(2 * d_model, rng);
  ep_send send;
  ep_scratch scratch;
  inline_executor ex;
  const reference_backend ref;

  // Dispatch: a placement of another expert count, bad placements, input rows, NaN weights.
  CHECK_THROWS_WITH_AS(ep_dispatch(expert_placement{5, 2}, t.view(), rows_of(input, d_model), send),
                       doctest::Contains("placement.experts"), error);
  CHECK_THROWS_WITH_AS(ep_dispatch(expert_placement{4, 0}, t.view(), rows_of(input, d_model), send),
                       doctest::Contains("at least one rank"), error);
  CHECK_THROWS_WITH_AS(
      ep_dispatch(expert_placement{4, 2}, t.view(), matrix_view<const float>::packed(input.data(), 1, d_model), send),
      doctest::Contains("input.rows"), error);
  routing_view nan_view = t.view();
  const std::vector<float> nan_weights{0.5F, std::nanf(""), 1.0F};
  nan_view.pair_weight = nan_weights;
  CHECK_THROWS_WITH_AS(ep_dispatch(expert_placement{4, 2}, nan_view, rows_of(input, d_model), send),
                       doctest::Contains("a finite weight"), error);
  CHECK_THROWS_WITH_AS(ep_combine(ref, nan_view, rows_of(input, d_model), rows_of(input, d_model),
                                  matrix_view<float>::packed(nullptr, 0, d_model), scratch, ex),
                       doctest::Contains("a finite weight"), error);

  // owned_experts: the placement must be of this layer's experts, the rank inside it.
  CHECK_THROWS_WITH_AS((void)owned_experts(all, expert_placement{8, 2}, 0), doctest::Contains("experts.count()"),
                       error);
  CHECK_THROWS_WITH_AS((void)owned_experts(all, expert_placement{4, 2}, 2), doctest::Contains("rank"), error);
  const moe_experts none = owned_experts(all, expert_placement{4, 8}, 0);
  CHECK(none.count() == 0);
  const moe_experts last = owned_experts(all, expert_placement{4, 3}, 2);
  CHECK(last.count() == 2);
  CHECK(last.gate.first.data == all.gate.expert(2).data);

  // Compute: ids out of range, counts not matching, rows to a rank with no expert, widths.
  const moe_experts local = owned_experts(all, expert_placement{4, 2}, 1);  // experts 2, 3
  std::vector<float> rows = random_vector(3 * d_model, rng);
  std::vector<float> out(3 * d_model);
  const std::vector<std::uint32_t> ids{0, 1, 1};
  REQUIRE(ep_compute(ref, local, rows_of(rows, d_model), ids, rows_of(out, d_model), scratch, ex));
  CHECK_THROWS_WITH_AS(ep_compute(ref, local, rows_of(rows, d_model), std::vector<std::uint32_t>{0, 2, 1},
                                  rows_of(out, d_model), scratch, ex),
                       doctest::Contains("expert_ids[1]"), error);
  CHECK_THROWS_WITH_AS(ep_compute(ref, local, rows_of(rows, d_model), std::vector<std::uint32_t>{0, 1},
                                  rows_of(out, d_model), scratch, ex),
                       doctest::Contains("expert_ids.size()"), error);
  CHECK_THROWS_WITH_AS(ep_compute(ref, local, rows_of(rows, d_model), ids,
                                  matrix_view<float>::packed(out.data(), 2, d_model), scratch, ex),
                       doctest::Contains("out.rows"), error);
  CHECK_THROWS_WITH_AS(ep_compute(ref, none, rows_of(rows, d_model), ids, rows_of(out, d_model), scratch, ex),
                       doctest::Contains("owns no expert"), error);
  CHECK_THROWS_WITH_AS(ep_compute(ref, local, matrix_view<const float>::packed(rows.data(), 3, 16), ids,
                                  rows_of(out, d_model), scratch, ex),
                       doctest::Contains("rows.cols"), error);
  REQUIRE(ep_compute(ref, none, matrix_view<const float>::packed(nullptr, 0, d_model), {},
                     matrix_view<float>::packed(nullptr, 0, d_model), scratch, ex));

  // Combine: returned rows not one per pair, output or input rows not one per token, widths.
  std::vector<float> y(2 * d_model);
  std::vector<float> back = random_vector(3 * d_model, rng);
  REQUIRE(ep_combine(ref, t.view(), rows_of(input, d_model), rows_of(back, d_model), rows_of(y, d_model), scratch, ex,
                     w.shared()));
  CHECK_THROWS_WITH_AS(
      ep_combine(ref, t.view(), rows_of(input, d_model), matrix_view<const float>::packed(back.data(), 2, d_model),
                 rows_of(y, d_model), scratch, ex),
      doctest::Contains("returned.rows"), error);
  CHECK_THROWS_WITH_AS(ep_combine(ref, t.view(), rows_of(input, d_model), rows_of(back, d_model),
                                  matrix_view<float>::packed(y.data(), 1, d_model), scratch, ex),
                       doctest::Contains("output.rows"), error);
  CHECK_THROWS_WITH_AS(ep_combine(ref, t.view(), matrix_view<const float>::packed(input.data(), 1, d_model),
                                  rows_of(back, d_model), rows_of(y, d_model), scratch, ex),
                       doctest::Contains("input.rows"), error);
  CHECK_THROWS_WITH_AS(
      ep_combine(ref, t.view(), rows_of(input, d_model), matrix_view<const float>::packed(back.data(), 3, 16),
                 rows_of(y, d_model), scratch, ex),
      doctest::Contains("returned.cols"), error);
  const std::size_t wide = 64;
  std::vector<float> wide_in(2 * wide);
  std::vector<float> wide_back(3 * wide);
  std::vector<float> wide_y(2 * wide);
  CHECK_THROWS_WITH_AS(ep_combine(ref, t.view(), rows_of(wide_in, wide), rows_of(wide_back, wide),
                                  rows_of(wide_y, wide), scratch, ex, w.shared()),
                       doctest::Contains("shared.gate.cols"), error);

  // ep_recv sizes its buffers from the counts received.
  ep_recv rv;
  rv.resize(std::vector<std::size_t>{2, 0, 3}, 4);
  CHECK(rv.offsets == std::vector<std::size_t>{0, 2, 2, 5});
  CHECK(rv.size() == 5);
  CHECK(rv.rows.size() == 20);
  CHECK(rv.out_view().rows == 5);
  CHECK_THROWS_WITH_AS((void)send.rows_to(9), doctest::Contains("a rank <"), error);
}
