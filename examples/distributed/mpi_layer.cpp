// A 7B-shaped FFN layer under tensor parallelism over MPI ranks, with Open MPI as the engine's
// collective (docs/DISTRIBUTED.md):
//   mpirun -np 4 build/dev/examples/mpi_layer [--d-model 4096] [--d-ff 11008] [--tokens 4]
// Every rank holds its slice of d_ff (W_gate / W_up rows, W_downᵀ rows, bf16, generated from a
// hash of (matrix, row, column) so a rank builds only its own slice), runs neuron_sparse_ffn on
// it with a sharded_selector (top_k 20% and cumulative_mass 0.8, and keep-all as dense), the
// summaries of the selection rounds through MPI_Allgather, the partial ys through MPI_Allgather
// and sum_in_rank_order. Rank 0 also builds the whole layer and checks, token by token, that the
// ranks kept exactly the unsharded op's neurons and that the summed y matches its y. Then an
// expert-parallel MoE layer (distributed/expert_parallel.hpp) is checked the same way.
// MoE: 8 experts of 1024 x 2816 (bf16), 16 tokens per rank, top-2.
// Prints per rank the bytes exchanged, the rounds, and the time in the collective against the
// whole step; exits 1 (on every rank) when a check fails.
#include <actsparse/backends/cpu/backend.hpp>
#include <actsparse/distributed/expert_parallel.hpp>
#include <actsparse/distributed/sharded_ffn.hpp>
#include <actsparse/ops/moe_ffn.hpp>
#include <actsparse/ops/neuron_sparse_ffn.hpp>
#include <actsparse/scorers/magnitude.hpp>
#include <actsparse/selectors/cumulative_mass.hpp>
#include <actsparse/selectors/top_k.hpp>

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

using namespace actsparse;

namespace {

// A weight in [-scale, scale) from (matrix, row, column): the same on every rank.
float weight_at(std::uint64_t matrix, std::uint64_t row, std::uint64_t col, float scale) {
  std::uint64_t z = (matrix << 58) ^ (row << 29) ^ col ^ 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  z ^= z >> 31;
  return scale * (static_cast<float>(z >> 40) / static_cast<float>(1U << 23) - 1.0F);
}

struct bf16_matrix {
  std::vector<bf16> values;
  std::size_t rows = 0;
  std::size_t cols = 0;
  [[nodiscard]] weight_view view() const { return {values.data(), dtype::bf16, rows, cols, cols * sizeof(bf16)}; }
};

// Rows [begin, begin + rows) of matrix `id` with `cols` columns.
bf16_matrix make_rows(std::uint64_t id, std::size_t begin, std::size_t rows, std::size_t cols, float scale) {
  bf16_matrix m{std::vector<bf16>(rows * cols), rows, cols};
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t c = 0; c < cols; ++c) m.values[r * cols + c] = to_bf16(weight_at(id, begin + r, c, scale));
  }
  return m;
}

struct layer_part {
  bf16_matrix gate, up, down_t;
  [[nodiscard]] ffn_layer layer() const { return {activation::silu, gate.view(), up.view(), {}, down_t.view()}; }
};

layer_part make_part(std::size_t begin, std::size_t count, std::size_t d_model) {
  const float s = 1.0F / std::sqrt(static_cast<float>(d_model));
  return {make_rows(1, begin, count, d_model, s), make_rows(2, begin, count, d_model, s),
          make_rows(3, begin, count, d_model, s)};
}

struct options {
  std::size_t d_model = 4096;
  std::size_t d_ff = 11008;
  std::size_t tokens = 4;
  std::size_t moe_d_model = 1024;
  std::size_t moe_d_ff = 2816;
  std::size_t moe_tokens = 16;
};

options parse(int argc, char** argv, int rank) {
  options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    const auto value = [&]() -> std::size_t {
      if (i + 1 >= argc) {
        if (rank == 0) std::fprintf(stderr, "mpi_layer: %s needs a value\n", argv[i]);
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      char* end = nullptr;
      const unsigned long long v = std::strtoull(argv[++i], &end, 10);
      if (end == argv[i] || *end != '\0' || v == 0) {
        if (rank == 0) std::fprintf(stderr, "mpi_layer: %s takes a positive integer, not '%s'\n", argv[i - 1], argv[i]);
        MPI_Abort(MPI_COMM_WORLD, 2);
      }
      return static_cast<std::size_t>(v);
    };
    if (a == "--d-model") {
      o.d_model = value();
    } else if (a == "--d-ff") {
      o.d_ff = value();
    } else if (a == "--tokens") {
      o.tokens = value();
    } else {
      if (rank == 0) std::fprintf(stderr, "mpi_layer: unknown option '%s' (--d-model, --d-ff, --tokens)\n", argv[i]);
      MPI_Abort(MPI_COMM_WORLD, 2);
    }
  }
  return o;
}

// The engine's collective as the library takes it, timed and counted.
struct mpi_gather {
  MPI_Comm comm = MPI_COMM_WORLD;
  double seconds = 0.0;
  std::size_t calls = 0;
  std::size_t bytes_sent = 0;
  std::size_t bytes_received = 0;
  void operator()(std::span<const std::byte> mine, std::span<std::byte> all) {
    const auto t0 = std::chrono::steady_clock::now();
    MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, all.data(), static_cast<int>(mine.size()),
                  MPI_BYTE, comm);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    ++calls;
    bytes_sent += mine.size();
    bytes_received += all.size();
  }
};

double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double e = 0.0;
  double n = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    e += (got[i] - want[i]) * static_cast<double>(got[i] - want[i]);
    n += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(e / (n > 0.0 ? n : 1.0));
}

// One policy on every token: sharded on the ranks, unsharded on rank 0; returns whether it held.
template <class Policy>
bool run_policy(const char* label, const Policy& policy, const options& o, const neuron_shard& shard,
                const layer_part& part, const layer_part* whole, int rank, int ranks) {
  mpi_gather selection_gather;
  sharded_selection state;
  const neuron_sparse_ffn op{magnitude{},
                             sharded_selector<Policy, mpi_gather>{policy, shard, &selection_gather, &state},
                             score_source::gate_activation, cpu_backend{}};
  const neuron_sparse_ffn whole_op{magnitude{}, policy, score_source::gate_activation, cpu_backend{}};
  cpu::executor ex;
  ffn_scratch s;
  selection kept;
  std::vector<float> partial(o.d_model);
  std::vector<float> partials(static_cast<std::size_t>(ranks) * o.d_model);
  std::vector<float> y(o.d_model);
  mpi_gather output_gather;
  std::vector<std::vector<float>> xs(o.tokens);
  std::vector<std::vector<float>> ys(o.tokens);
  std::vector<std::vector<std::uint32_t>> kept_sets(o.tokens);
  double step_seconds = 0.0;
  std::size_t kept_total = 0;
  std::size_t rounds = 0;
  for (std::size_t t = 0; t < o.tokens; ++t) {  // the timed steps
    std::vector<float>& x = xs[t];
    x.resize(o.d_model);
    for (std::size_t c = 0; c < o.d_model; ++c) x[c] = weight_at(9, t, c, 1.0F);
    const auto t0 = std::chrono::steady_clock::now();
    if (!op(part.layer(), x, partial, kept, s, ex)) {
      std::fprintf(stderr, "rank %d: the CPU backend declined the FFN\n", rank);
      return false;
    }
    output_gather(std::as_bytes(std::span<const float>(partial)), std::as_writable_bytes(std::span<float>(partials)));
    sum_in_rank_order(partials, static_cast<std::size_t>(ranks), y);
    step_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rounds += state.rounds();
    kept_total += state.global_kept();
    ys[t] = y;
    for (const std::uint32_t i : kept.indices) kept_sets[t].push_back(static_cast<std::uint32_t>(shard.begin + i));
  }
  // The checks, after the timed steps: the kept neurons gathered on rank 0, which runs the whole layer.
  bool ok = true;
  double worst_error = 0.0;
  for (std::size_t t = 0; t < o.tokens; ++t) {
    const std::vector<std::uint32_t>& global = kept_sets[t];
    int count = static_cast<int>(global.size());
    std::vector<int> counts(static_cast<std::size_t>(ranks));
    MPI_Gather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
    std::vector<int> offsets(static_cast<std::size_t>(ranks), 0);
    for (int r = 1; r < ranks; ++r) offsets[r] = offsets[r - 1] + counts[r - 1];
    std::vector<std::uint32_t> all_kept(rank == 0 ? static_cast<std::size_t>(offsets.back() + counts.back()) : 0);
    MPI_Gatherv(global.data(), count, MPI_UINT32_T, all_kept.data(), counts.data(), offsets.data(), MPI_UINT32_T, 0,
                MPI_COMM_WORLD);
    if (rank == 0) {
      std::vector<float> want(o.d_model);
      selection want_kept;
      ffn_scratch ws;
      if (!whole_op(whole->layer(), xs[t], want, want_kept, ws, ex)) return false;
      const double err = relative_error(ys[t], want);
      worst_error = std::max(worst_error, err);
      if (all_kept != want_kept.indices || err > 1e-5) {
        std::fprintf(stderr, "%s token %zu: kept %zu neurons (unsharded %zu, %s), relative error %.3g\n", label, t,
                     all_kept.size(), want_kept.indices.size(),
                     all_kept == want_kept.indices ? "the same set" : "a different set", err);
        ok = false;
      }
    }
  }
  const double tokens = static_cast<double>(o.tokens);
  std::printf(
      "rank %d %-10s kept %6.0f of %zu  rounds %4.1f  selection bytes sent %5.0f received %6.0f per step  "
      "(activation %zu)  collective %.3f of %.2f ms per step\n",
      rank, label, static_cast<double>(kept_total) / tokens, o.d_ff, static_cast<double>(rounds) / tokens,
      static_cast<double>(selection_gather.bytes_sent) / tokens,
      static_cast<double>(selection_gather.bytes_received) / tokens, o.d_model * sizeof(float),
      1e3 * selection_gather.seconds / tokens, 1e3 * step_seconds / tokens);
  if (rank == 0)
    std::printf("rank 0 %-10s largest relative error of y against one process: %.3g\n", label, worst_error);
  std::fflush(stdout);
  return ok;
}

// Expert parallel: E experts of d_model x d_ff_expert (bf16, W_downᵀ) over the ranks, each rank
// routing `tokens` tokens of its own top-2; the two all-to-alls through MPI_Alltoallv. Every
// rank checks its output against single-process moe_ffn_args over all experts, bit for bit.
bool run_moe(const options& o, int rank, int ranks) {
  const std::size_t experts = 8;
  const std::size_t d = o.moe_d_model;
  const std::size_t d_ff = o.moe_d_ff;
  const std::size_t tokens = o.moe_tokens;
  const float s = 1.0F / std::sqrt(static_cast<float>(d));
  // All experts stacked (every rank builds them to check; it computes with its own block only).
  const bf16_matrix gate = make_rows(11, 0, experts * d_ff, d, s);
  const bf16_matrix up = make_rows(12, 0, experts * d_ff, d, s);
  const bf16_matrix down_t = make_rows(13, 0, experts * d_ff, d, s);
  const std::size_t stride = d_ff * d * sizeof(bf16);
  moe_experts all;
  all.gate = {weight_view(gate.values.data(), dtype::bf16, d_ff, d, d * sizeof(bf16)), experts, stride};
  all.up = {weight_view(up.values.data(), dtype::bf16, d_ff, d, d * sizeof(bf16)), experts, stride};
  all.down_t = {weight_view(down_t.values.data(), dtype::bf16, d_ff, d, d * sizeof(bf16)), experts, stride};
  const expert_placement placement{experts, static_cast<std::size_t>(ranks)};
  const moe_experts mine = owned_experts(all, placement, static_cast<std::size_t>(rank));

  // This rank's tokens and their routing (softmax top-2 of hashed logits).
  std::vector<float> input(tokens * d);
  std::vector<float> logits(tokens * experts);
  for (std::size_t t = 0; t < tokens; ++t) {
    for (std::size_t c = 0; c < d; ++c) input[t * d + c] = weight_at(20 + static_cast<std::uint64_t>(rank), t, c, 1.0F);
    for (std::size_t e = 0; e < experts; ++e) {
      logits[t * experts + e] = weight_at(40 + static_cast<std::uint64_t>(rank), t, e, 2.0F);
    }
  }
  moe_routing policy;
  policy.native_k = 2;
  routing_table table;
  moe_route_scratch route_scratch;
  route(policy, 0, matrix_view<const float>::packed(logits.data(), tokens, experts), table, route_scratch);

  cpu::executor ex;
  const cpu_backend cpu;
  const auto t0 = std::chrono::steady_clock::now();
  ep_send send;
  ep_dispatch(placement, table.view(), matrix_view<const float>::packed(input.data(), tokens, d), send);
  // Exchange 1: the counts, then rows and expert ids (counts in elements for MPI).
  const auto P = static_cast<std::size_t>(ranks);
  std::vector<std::uint64_t> send_counts(send.counts.begin(), send.counts.end());
  std::vector<std::uint64_t> recv_counts(P);
  MPI_Alltoall(send_counts.data(), 1, MPI_UINT64_T, recv_counts.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD);
  ep_recv recv;
  recv.resize(std::vector<std::size_t>(recv_counts.begin(), recv_counts.end()), d);
  std::vector<int> sc(P), sd(P), rc(P), rd(P), sci(P), sdi(P), rci(P), rdi(P);
  for (std::size_t r = 0; r < P; ++r) {
    sc[r] = static_cast<int>(send.counts[r] * d);
    sd[r] = static_cast<int>(send.offsets[r] * d);
    rc[r] = static_cast<int>(recv.counts[r] * d);
    rd[r] = static_cast<int>(recv.offsets[r] * d);
    sci[r] = static_cast<int>(send.counts[r]);
    sdi[r] = static_cast<int>(send.offsets[r]);
    rci[r] = static_cast<int>(recv.counts[r]);
    rdi[r] = static_cast<int>(recv.offsets[r]);
  }
  MPI_Alltoallv(send.rows.data(), sc.data(), sd.data(), MPI_FLOAT, recv.rows.data(), rc.data(), rd.data(), MPI_FLOAT,
                MPI_COMM_WORLD);
  MPI_Alltoallv(send.expert_ids.data(), sci.data(), sdi.data(), MPI_UINT32_T, recv.expert_ids.data(), rci.data(),
                rdi.data(), MPI_UINT32_T, MPI_COMM_WORLD);
  ep_scratch scratch;
  if (!ep_compute(cpu, mine, recv.rows_view(), recv.expert_ids, recv.out_view(), scratch, ex)) return false;
  // Exchange 2: the outputs back, the reverse of exchange 1 (into send.rows, which is free now).
  MPI_Alltoallv(recv.out.data(), rc.data(), rd.data(), MPI_FLOAT, send.rows.data(), sc.data(), sd.data(), MPI_FLOAT,
                MPI_COMM_WORLD);
  std::vector<float> output(tokens * d);
  if (!ep_combine(cpu, table.view(), matrix_view<const float>::packed(input.data(), tokens, d), send.rows_view(),
                  matrix_view<float>::packed(output.data(), tokens, d), scratch, ex)) {
    return false;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // One process, all experts, the same tokens.
  std::vector<float> want(tokens * d);
  std::vector<std::byte> workspace;
  if (!run(cpu,
           moe_ffn_args{all,
                        table.view(),
                        matrix_view<const float>::packed(input.data(), tokens, d),
                        matrix_view<float>::packed(want.data(), tokens, d),
                        {}},
           workspace, ex)) {
    return false;
  }
  const bool same = std::memcmp(output.data(), want.data(), output.size() * sizeof(float)) == 0;
  const ep_bytes b = exchange_bytes(send.counts, recv.counts, static_cast<std::size_t>(rank), d);
  std::printf(
      "rank %d moe        %zu tokens, %zu pairs, experts %zu-%zu here: dispatch sent %zu received %zu bytes, "
      "combine sent %zu received %zu; %.2f ms; %s one process bit for bit\n",
      rank, tokens, table.pairs(), placement.first(static_cast<std::size_t>(rank)),
      placement.first(static_cast<std::size_t>(rank) + 1) - 1, b.dispatch.sent, b.dispatch.received, b.combine.sent,
      b.combine.received, 1e3 * seconds, same ? "equals" : "DIFFERS FROM");
  std::fflush(stdout);
  return same;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const options o = parse(argc, argv, rank);
  int ok = 1;
  try {
    const neuron_shard shard =
        neuron_shard::even(o.d_ff, static_cast<std::size_t>(rank), static_cast<std::size_t>(ranks), 32);
    const layer_part part = make_part(shard.begin, shard.size, o.d_model);
    layer_part whole;
    if (rank == 0) whole = make_part(0, o.d_ff, o.d_model);
    MPI_Barrier(MPI_COMM_WORLD);  // the steps are timed from here
    if (rank == 0) {
      std::printf("mpi_layer: %d ranks, FFN %zu x %zu bf16, %zu tokens; rank 0 checks against one process\n", ranks,
                  o.d_model, o.d_ff, o.tokens);
    }
    ok &= run_policy("dense", top_k::by_count(o.d_ff), o, shard, part, &whole, rank, ranks) ? 1 : 0;
    ok &= run_policy("top_k_0.2", top_k::by_ratio(0.2), o, shard, part, &whole, rank, ranks) ? 1 : 0;
    ok &= run_policy("mass_0.8", cumulative_mass{0.8}, o, shard, part, &whole, rank, ranks) ? 1 : 0;
    ok &= run_moe(o, rank, ranks) ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    ok = 0;
  }
  int all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0) std::printf("mpi_layer: %s\n", all_ok != 0 ? "PASS" : "FAIL");
  MPI_Finalize();
  return all_ok != 0 ? 0 : 1;
}
