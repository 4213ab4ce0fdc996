#pragma once
// The model demo's KV rows: the model's KV cache in actsparse::tiered_store (one store for K and
// one for V per layer, examples/llama2c/model.hpp) under each setting of the table below, over
// the evaluation sequences continued to --kv-length tokens (512, the model's whole context). The
// FFN runs dense, so a row's KL, top-1 and perplexity are the cost of the KV setting alone; its
// memory_fraction is the bytes the stores hold after each sequence (rows, scales, minimums)
// over an f32 cache of the same positions.

#include "harness.hpp"
#include "llama2c/model.hpp"
#include "policies.hpp"

#include <actsparse/managers/tiered_store.hpp>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace model_demo {

struct kv_setting {
  std::string name;                    // holds "kv"
  std::string description;             // what the stores do, for the table's notes
  std::vector<tiered_store_config> k;  // per layer
  std::vector<tiered_store_config> v;  // per layer
};

// The settings, for a model of `layers` layers and sequences of `length` positions: uniform
// formats, FIFO (the newest rows full), heavy hitters (importance: the attention probability
// each position received, with the first positions and the newest pinned), per-layer widths,
// and a drop tier.
inline std::vector<kv_setting> kv_table(std::size_t layers, std::size_t row_size, std::size_t length) {
  const auto all = [&](tiered_store_config c) {
    c.row_size = row_size;
    if (c.compressed_capacity == 0 && !c.drop) c.compressed_capacity = length;
    return std::vector<tiered_store_config>(layers, c);
  };
  const tiered_store_config full{.full_capacity = length, .full_format = row_format::f16};
  const auto compressed = [&](row_format f) {
    return tiered_store_config{.full_capacity = 0, .compressed_capacity = length, .compressed_format = f};
  };
  const auto recent = [&](std::size_t n, row_format f) {
    return tiered_store_config{
        .full_capacity = n, .full_format = row_format::f16, .compressed_format = f, .recent_n = n};
  };
  const auto heavy = [&](std::size_t n, std::size_t recent_n, std::size_t sink_n, row_format f) {
    return tiered_store_config{.full_capacity = n,
                               .full_format = row_format::f16,
                               .compressed_format = f,
                               .policy = eviction::importance,
                               .recent_n = recent_n,
                               .sink_n = sink_n};
  };
  std::vector<kv_setting> t;
  const auto add = [&t](std::string name, std::string what, const std::vector<tiered_store_config>& k,
                        const std::vector<tiered_store_config>& v) {
    t.push_back({std::move(name), std::move(what), k, v});
  };
  const auto same = [&](std::string name, std::string what, const std::vector<tiered_store_config>& both) {
    add(std::move(name), std::move(what), both, both);
  };
  const auto dropping = [&](eviction e, std::size_t n, std::size_t cap, row_format f) {
    tiered_store_config c{.full_capacity = n,
                          .compressed_capacity = cap,
                          .full_format = row_format::f16,
                          .compressed_format = f,
                          .policy = e,
                          .recent_n = n - 4,
                          .sink_n = 4,
                          .drop = true};
    return all(c);
  };
  const std::string k8v4 = "K int8_g32, V int4_g32";
  same("kv f16", "every row f16", all(full));
  same("kv int8", "every row int8_g32 (q8_0 blocks)", all(compressed(row_format::int8_g32)));
  same("kv int4", "every row int4_g32 (q4_0 blocks)", all(compressed(row_format::int4_g32)));
  same("kv int4+min", "every row int4_g32_min (a scale and a minimum per 32)",
       all(compressed(row_format::int4_g32_min)));
  add("kv k int8 v int4", "every K row int8_g32, every V row int4_g32", all(compressed(row_format::int8_g32)),
      all(compressed(row_format::int4_g32)));
  same("kv fifo 64 f16 + int8", "the newest 64 rows f16, older int8_g32", all(recent(64, row_format::int8_g32)));
  same("kv fifo 64 f16 + int4", "the newest 64 rows f16, older int4_g32", all(recent(64, row_format::int4_g32)));
  add("kv fifo 64 f16 + k int8 v int4", "the newest 64 rows f16, older " + k8v4, all(recent(64, row_format::int8_g32)),
      all(recent(64, row_format::int4_g32)));
  same("kv heavy 64 f16 + int4",
       "64 rows f16: the first 4, the newest 28 and the 32 heaviest hitters (attention received); the rest int4_g32",
       all(heavy(64, 28, 4, row_format::int4_g32)));
  std::vector<tiered_store_config> widths = all(recent(64, row_format::int4_g32));
  widths.front().compressed_format = row_format::int8_g32;
  widths.back().compressed_format = row_format::int8_g32;
  same("kv fifo 64 f16 + int8 ends, int4 middle",
       "the newest 64 rows f16; older int8_g32 in the first and last layers, int4_g32 in the others", widths);
  for (const std::size_t n : {32, 16}) {
    const std::size_t cap = n == 32 ? length * 25 / 32 : length / 2;  // 400 and 256 of 512
    const std::string tail = " f16 + k int8 v int4, drop to " + std::to_string(cap);
    const std::string rows = std::to_string(n) + " rows f16 (the first 4 and the newest " + std::to_string(n - 4) +
                             "), " + std::to_string(cap) + " compressed (" + k8v4 + "), ";
    add("kv heavy " + std::to_string(n) + tail, rows + "the least attended beyond that dropped",
        dropping(eviction::importance, n, cap, row_format::int8_g32),
        dropping(eviction::importance, n, cap, row_format::int4_g32));
    add("kv fifo " + std::to_string(n) + tail, rows + "the oldest beyond that dropped (a sliding window)",
        dropping(eviction::fifo, n, cap, row_format::int8_g32), dropping(eviction::fifo, n, cap, row_format::int4_g32));
  }
  return t;
}

// One KV row: the setting over the continued evaluation set, the FFN dense.
inline row evaluate_kv(const model& m, const options& o, const std::vector<std::vector<int>>& eval,
                       const std::vector<std::vector<double>>& dense_lp, const kv_setting& s) {
  std::vector<std::unique_ptr<dense_demo_policy>> p;
  for (std::size_t w = 0; w < std::min(o.workers, eval.size()); ++w) p.push_back(std::make_unique<dense_demo_policy>());
  const cache_maker make = [&s](const model& mm) { return mm.new_cache(s.k, s.v); };
  row r;
  r.policy = s.name;
  r.family = "kv";
  r.scorer = s.k.front().policy == eviction::importance ? "attention mass" : "-";
  r.q = evaluate(m, eval, dense_lp, p, make);
  r.memory_fraction = r.q.memory;
  r.tokens_per_s = decode_speed(m, *p.front(), o.decode_tokens, make);
  return r;
}

}  // namespace model_demo
