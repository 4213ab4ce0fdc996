#pragma once
// The routing table of one MoE call: which experts each token runs, with which weights, listed
// both token-major (the combine order) and grouped by expert (what the expert GEMMs read), plus
// the layouts engines' kernels take:
//   routing_table           owns the pairs both ways; assign() builds it from per-token lists
//   padded_routing          vLLM's fused-MoE inputs: pair ids grouped by expert, each expert's
//                           run padded to a block size (sorted_token_ids, expert_ids,
//                           num_tokens_post_padded)
//   ggml_ids                llama.cpp's ggml_mul_mat_id ids tensor [n_tokens][n_expert_used]
//   check_routing           the O(pairs + experts) validation of a routing_view

#include <actsparse/core/error.hpp>
#include <actsparse/core/op_args.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace actsparse {

namespace detail {

inline std::string at_index(std::string_view name, std::size_t i) {
  std::string s(name);
  s += '[';
  s += std::to_string(i);
  s += ']';
  return s;
}

}  // namespace detail

// Every rule of routing_view's contract, walked in O(tokens + experts + pairs): offsets start
// at 0, never decrease and end at the pair count; each token's experts strictly increasing and
// < experts; weights finite; the expert-major lists a permutation of the pairs that groups them
// by expert with tokens increasing, expert_tokens naming each pair's token. An error names the
// first entry that breaks a rule.
inline void check_routing(const routing_view& r, std::string_view where) {
  using detail::at_index;
  using detail::fail;
  const std::size_t pairs = r.pair_expert.size();
  detail::require(r.experts >= 1, where, "routing.experts", r.experts, "at least one expert");
  detail::require(pairs <= std::numeric_limits<std::uint32_t>::max(), where, "routing.pairs()", pairs,
                  "at most 2^32 - 1 pairs (32-bit pair ids)");
  if (r.token_offsets.size() != r.tokens + 1) {
    fail(where, "routing.token_offsets.size()", r.token_offsets.size(), std::to_string(r.tokens + 1) + " (tokens + 1)");
  }
  if (r.expert_offsets.size() != r.experts + 1) {
    fail(where, "routing.expert_offsets.size()", r.expert_offsets.size(),
         std::to_string(r.experts + 1) + " (experts + 1)");
  }
  if (r.pair_weight.size() != pairs) {
    fail(where, "routing.pair_weight.size()", r.pair_weight.size(), std::to_string(pairs) + " (one weight per pair)");
  }
  if (r.expert_pairs.size() != pairs) {
    fail(where, "routing.expert_pairs.size()", r.expert_pairs.size(), std::to_string(pairs) + " (every pair once)");
  }
  if (r.expert_tokens.size() != pairs) {
    fail(where, "routing.expert_tokens.size()", r.expert_tokens.size(),
         std::to_string(pairs) + " (one token per pair)");
  }
  if (r.token_offsets[0] != 0) fail(where, "routing.token_offsets[0]", r.token_offsets[0], "0");
  if (r.token_offsets[r.tokens] != pairs) {
    fail(where, at_index("routing.token_offsets", r.tokens), r.token_offsets[r.tokens],
         std::to_string(pairs) + " (the pair count)");
  }
  for (std::size_t t = 0; t < r.tokens; ++t) {
    const std::uint32_t b = r.token_offsets[t];
    const std::uint32_t e = r.token_offsets[t + 1];
    if (e < b) {
      fail(where, at_index("routing.token_offsets", t + 1), e,
           "a value >= token_offsets[" + std::to_string(t) + "] = " + std::to_string(b) + " (offsets never decrease)");
    }
    for (std::uint32_t p = b; p < e; ++p) {
      const std::uint32_t x = r.pair_expert[p];
      if (x >= r.experts) {
        fail(where, at_index("routing.pair_expert", p), x,
             "an expert < " + std::to_string(r.experts) + " (token " + std::to_string(t) + ")");
      }
      if (p > b && x <= r.pair_expert[p - 1]) {
        fail(where, at_index("routing.pair_expert", p), x,
             "an expert > " + std::to_string(r.pair_expert[p - 1]) + " (token " + std::to_string(t) +
                 "'s experts strictly increasing: no expert twice)");
      }
      if (!std::isfinite(r.pair_weight[p])) {
        fail(where, at_index("routing.pair_weight", p), r.pair_weight[p], "a finite weight");
      }
    }
  }
  if (r.expert_offsets[0] != 0) fail(where, "routing.expert_offsets[0]", r.expert_offsets[0], "0");
  if (r.expert_offsets[r.experts] != pairs) {
    fail(where, at_index("routing.expert_offsets", r.experts), r.expert_offsets[r.experts],
         std::to_string(pairs) + " (the pair count)");
  }
  // Token of each token-major pair, to check the expert-major side against.
  std::vector<std::uint32_t> token_of(pairs);
  for (std::size_t t = 0; t < r.tokens; ++t) {
    for (std::uint32_t p = r.token_offsets[t]; p < r.token_offsets[t + 1]; ++p)
      token_of[p] = static_cast<std::uint32_t>(t);
  }
  std::vector<std::uint8_t> seen(pairs, 0);
  for (std::size_t x = 0; x < r.experts; ++x) {
    const std::uint32_t b = r.expert_offsets[x];
    const std::uint32_t e = r.expert_offsets[x + 1];
    if (e < b || e > pairs) {
      fail(where, at_index("routing.expert_offsets", x + 1), e,
           "a value in [expert_offsets[" + std::to_string(x) + "] = " + std::to_string(b) + ", " +
               std::to_string(pairs) + "] (offsets never decrease)");
    }
    for (std::uint32_t q = b; q < e; ++q) {
      const std::uint32_t p = r.expert_pairs[q];
      if (p >= pairs || seen[p] != 0 || r.pair_expert[p] != x) {
        fail(where, at_index("routing.expert_pairs", q), p,
             "a pair of expert " + std::to_string(x) + " not listed before (< " + std::to_string(pairs) +
                 ", each pair once, grouped by expert)");
      }
      seen[p] = 1;
      if (r.expert_tokens[q] != token_of[p]) {
        fail(where, at_index("routing.expert_tokens", q), r.expert_tokens[q],
             std::to_string(token_of[p]) + " (the token of pair " + std::to_string(p) + ")");
      }
      if (q > b && r.expert_tokens[q] <= r.expert_tokens[q - 1]) {
        fail(where, at_index("routing.expert_tokens", q), r.expert_tokens[q],
             "a token > " + std::to_string(r.expert_tokens[q - 1]) + " (an expert's tokens strictly increasing)");
      }
    }
  }
}

// The pairs of one MoE call, owned. Build it with assign(); it keeps its capacity, so a decode
// loop that reuses one table allocates nothing after the first call.
class routing_table {
 public:
  // Token t runs experts[offsets[t] .. offsets[t+1]) with weights[...] (strictly increasing
  // experts < n_experts, finite weights). offsets: tokens + 1 entries from 0; the pair lists
  // are copied and the expert-major side built by a stable counting sort (tokens ascending
  // within each expert). O(tokens + n_experts + pairs); throws naming the first bad entry.
  void assign(std::size_t n_experts, std::span<const std::uint32_t> offsets, std::span<const std::uint32_t> experts,
              std::span<const float> weights) {
    constexpr std::string_view where = "routing_table::assign";
    detail::require(!offsets.empty(), where, "offsets.size()", offsets.size(), "tokens + 1 >= 1 entries");
    tokens_ = offsets.size() - 1;
    experts_ = n_experts;
    token_offsets_.assign(offsets.begin(), offsets.end());
    pair_expert_.assign(experts.begin(), experts.end());
    pair_weight_.assign(weights.begin(), weights.end());
    detail::require(n_experts >= 1, where, "n_experts", n_experts, "at least one expert");
    detail::require(weights.size() == experts.size(), where, "weights.size()", weights.size(),
                    std::to_string(experts.size()) + " (one weight per pair)");
    if (offsets.back() != experts.size() || offsets.front() != 0) {
      detail::fail(where, "offsets", std::to_string(offsets.front()) + " .. " + std::to_string(offsets.back()),
                   "0 .. " + std::to_string(experts.size()) + " (from 0 to the pair count)");
    }
    build_expert_major(where);
  }

  [[nodiscard]] std::size_t tokens() const noexcept { return tokens_; }
  [[nodiscard]] std::size_t experts() const noexcept { return experts_; }
  [[nodiscard]] std::size_t pairs() const noexcept { return pair_expert_.size(); }
  // Experts with at least one token.
  [[nodiscard]] std::size_t active_experts() const noexcept {
    std::size_t n = 0;
    for (std::size_t e = 0; e < experts_; ++e) n += expert_offsets_[e + 1] > expert_offsets_[e] ? 1 : 0;
    return n;
  }
  [[nodiscard]] std::size_t tokens_of(std::size_t expert) const noexcept {
    return expert_offsets_[expert + 1] - expert_offsets_[expert];
  }

  [[nodiscard]] std::span<const std::uint32_t> token_offsets() const noexcept { return token_offsets_; }
  [[nodiscard]] std::span<const std::uint32_t> pair_expert() const noexcept { return pair_expert_; }
  [[nodiscard]] std::span<const float> pair_weight() const noexcept { return pair_weight_; }
  [[nodiscard]] std::span<const std::uint32_t> expert_offsets() const noexcept { return expert_offsets_; }
  [[nodiscard]] std::span<const std::uint32_t> expert_pairs() const noexcept { return expert_pairs_; }
  [[nodiscard]] std::span<const std::uint32_t> expert_tokens() const noexcept { return expert_tokens_; }

  [[nodiscard]] routing_view view() const noexcept {
    return {tokens_,      experts_,        token_offsets_, pair_expert_,
            pair_weight_, expert_offsets_, expert_pairs_,  expert_tokens_};
  }

 private:
  void build_expert_major(std::string_view where) {
    const std::size_t pairs = pair_expert_.size();
    expert_offsets_.assign(experts_ + 1, 0);
    for (const std::uint32_t e : pair_expert_) {
      if (e < experts_) ++expert_offsets_[e + 1];
    }
    for (std::size_t e = 0; e < experts_; ++e) expert_offsets_[e + 1] += expert_offsets_[e];
    expert_pairs_.resize(pairs);
    expert_tokens_.resize(pairs);
    cursor_.assign(expert_offsets_.begin(), expert_offsets_.end() - 1);
    for (std::size_t t = 0; t < tokens_; ++t) {
      const std::uint32_t b = token_offsets_[t];
      const std::uint32_t e = token_offsets_[t + 1];
      if (e < b || e > pairs) break;  // check_routing names it below
      for (std::uint32_t p = b; p < e; ++p) {
        const std::uint32_t x = pair_expert_[p];
        if (x >= experts_) break;
        const std::uint32_t q = cursor_[x]++;
        expert_pairs_[q] = p;
        expert_tokens_[q] = static_cast<std::uint32_t>(t);
      }
    }
    check_routing(view(), where);
  }

  std::size_t tokens_ = 0;
  std::size_t experts_ = 0;
  std::vector<std::uint32_t> token_offsets_;
  std::vector<std::uint32_t> pair_expert_;
  std::vector<float> pair_weight_;
  std::vector<std::uint32_t> expert_offsets_;
  std::vector<std::uint32_t> expert_pairs_;
  std::vector<std::uint32_t> expert_tokens_;
  std::vector<std::uint32_t> cursor_;
};

// vLLM's fused-MoE layout: the pairs grouped by expert (as expert_pairs), each expert's run
// padded with `sentinel` up to a multiple of `block`, experts with no pair left out.
//   sorted_pair_ids  pair ids (token-major positions; with a fixed k per token that is vLLM's
//                    token * top_k + slot), sentinel = pairs() in the padding
//   block_experts    the expert of each block of `block` entries (vLLM's expert_ids)
//   pairs_post_padded  sorted_pair_ids.size() (num_tokens_post_padded)
struct padded_routing {
  std::size_t block = 0;
  std::uint32_t sentinel = 0;
  std::vector<std::uint32_t> sorted_pair_ids;
  std::vector<std::uint32_t> block_experts;
  [[nodiscard]] std::size_t pairs_post_padded() const noexcept { return sorted_pair_ids.size(); }
};

// block >= 1. O(pairs + experts + padding).
[[nodiscard]] inline padded_routing pad(const routing_table& r, std::size_t block) {
  detail::require(block >= 1, "pad", "block", block, "a block size >= 1 (the GEMM's rows per block, e.g. 16 or 64)");
  padded_routing out;
  out.block = block;
  out.sentinel = static_cast<std::uint32_t>(r.pairs());
  for (std::size_t e = 0; e < r.experts(); ++e) {
    const std::size_t n = r.tokens_of(e);
    if (n == 0) continue;
    const std::size_t blocks = (n + block - 1) / block;
    const std::span<const std::uint32_t> ids = r.expert_pairs().subspan(r.expert_offsets()[e], n);
    out.sorted_pair_ids.insert(out.sorted_pair_ids.end(), ids.begin(), ids.end());
    out.sorted_pair_ids.resize(out.sorted_pair_ids.size() + blocks * block - n, out.sentinel);
    out.block_experts.resize(out.block_experts.size() + blocks, static_cast<std::uint32_t>(e));
  }
  return out;
}

// llama.cpp's ggml_mul_mat_id ids: [tokens][n_used] int32 (ne0 = n_used, row-major here), token
// t's experts in its combine order, slots past its own count set to `fill` (-1: the convention
// of engines that cut the experts per token at run time, such as ik_llama.cpp's smart expert
// reduction; mainline ggml needs a valid expert in every slot, so pass a weight-0 expert there).
// n_used must be at least every token's expert count.
[[nodiscard]] inline std::vector<std::int32_t> ggml_ids(const routing_table& r, std::size_t n_used,
                                                        std::int32_t fill = -1) {
  std::vector<std::int32_t> ids(r.tokens() * n_used, fill);
  for (std::size_t t = 0; t < r.tokens(); ++t) {
    const std::uint32_t b = r.token_offsets()[t];
    const std::uint32_t e = r.token_offsets()[t + 1];
    detail::require(e - b <= n_used, "ggml_ids", "n_used", n_used,
                    "at least " + std::to_string(e - b) + " (token " + std::to_string(t) + "'s expert count)");
    for (std::uint32_t p = b; p < e; ++p) ids[t * n_used + (p - b)] = static_cast<std::int32_t>(r.pair_expert()[p]);
  }
  return ids;
}

}  // namespace actsparse
