#pragma once
// The tiered activation store: rows of d values by position (a KV cache's K or V rows of one
// layer), in a full tier (f32 or f16) of full_capacity rows and a compressed tier (int8,
// int8_g32, int4_g32, int4_g32_min: managers/row_codec.hpp) of compressed_capacity rows;
// optionally a drop tier, where a row no longer exists.
//
// Placement. store(pos, row) puts the row in the full tier. While the full tier holds more
// than full_capacity rows, its least valuable row that is not pinned moves to the compressed
// tier (encoded from its full form). While the compressed tier holds more than
// compressed_capacity rows, its least valuable row is dropped (drop = true) or store throws
// (drop = false: the caller sized the store too small). Value, by policy:
//   fifo        insertion order (the oldest row goes first)
//   lru         the last use: store, promote and every read (retrieve, view) count as a use
//   importance  the importance accumulated by add_importance (e.g. the attention probability
//               a position received: heavy hitters); ties go to the older row
// Pinned rows never leave the full tier: the recent_n newest stored positions and the
// positions below sink_n (the first positions, which absorb attention). full_capacity must
// hold them all: recent_n + sink_n <= full_capacity.
// promote(pos) moves a compressed row back to the full tier (dequantized: it cannot be more
// precise than its compressed form) as a new row; demote(pos) compresses a full row now.
// A dropped or never stored position is absent: tier_of says tier::absent, retrieve and view
// throw; attention callers skip absent positions (their mask), as docs/POLICIES.md says.
//
// Memory. Rows live in two slabs allocated at construction (capacity × row bytes each) and
// a fixed open-addressing table from position to slot: storing and evicting any number of
// rows allocates nothing. bytes_held() counts the rows held (payload and scales, exact);
// bytes_reserved() the slabs.
//
// Concurrency. The standard library's rule: const member functions may run at once from any
// number of threads; a non-const one needs the store to itself. The LRU clock and use stamps
// that reads update are atomics, so reads stay const and race-free. A KV cache keeps one store
// per layer (and per K / V): one writer thread per layer, many readers.

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>
#include <actsparse/managers/row_codec.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace actsparse {

enum class eviction : std::uint8_t { fifo, lru, importance };

[[nodiscard]] constexpr std::string_view name(eviction e) noexcept {
  switch (e) {
    case eviction::fifo:
      return "fifo";
    case eviction::lru:
      return "lru";
    case eviction::importance:
      return "importance";
  }
  return "?";
}

struct tiered_store_config {
  std::size_t row_size = 0;                             // values per row (a multiple of 32 for the group formats)
  std::size_t full_capacity = 0;                        // rows of the full tier
  std::size_t compressed_capacity = 0;                  // rows of the compressed tier
  row_format full_format = row_format::f32;             // f32 or f16
  row_format compressed_format = row_format::int8_g32;  // int8, int8_g32, int4_g32 or int4_g32_min
  eviction policy = eviction::fifo;
  std::size_t recent_n = 0;  // the newest rows that stay full
  std::size_t sink_n = 0;    // positions below this stay full
  bool drop = false;         // a full compressed tier drops its least valuable row (else store throws)

  friend constexpr bool operator==(const tiered_store_config&, const tiered_store_config&) noexcept = default;
};

class tiered_store {
 public:
  using config_type = tiered_store_config;

  explicit tiered_store(const tiered_store_config& c) : c_(c) {
    constexpr std::string_view where = "tiered_store";
    if (!full_precision(c.full_format)) {
      detail::fail(where, "config.full_format", std::string(name(c.full_format)), "f32 or f16");
    }
    if (full_precision(c.compressed_format)) {
      detail::fail(where, "config.compressed_format", std::string(name(c.compressed_format)),
                   "int8, int8_g32, int4_g32 or int4_g32_min");
    }
    check_row_format(c.full_format, c.row_size, where);
    check_row_format(c.compressed_format, c.row_size, where);
    detail::require(c.recent_n + c.sink_n <= c.full_capacity, where, "config.recent_n + config.sink_n",
                    c.recent_n + c.sink_n, "at most config.full_capacity (pinned rows stay in the full tier)");
    constexpr std::size_t most = std::size_t{1} << 30;
    detail::require(c.full_capacity + c.compressed_capacity >= 1, where, "config.full_capacity", c.full_capacity,
                    "room for at least one row in some tier");
    detail::require(c.full_capacity < most && c.compressed_capacity < most, where, "capacity",
                    c.full_capacity + c.compressed_capacity, "below 2^30 rows per tier");
    tiers_[0].init(c.full_capacity, row_bytes(c.full_format, c.row_size));
    tiers_[1].init(c.compressed_capacity, row_bytes(c.compressed_format, c.row_size));
    std::size_t n = 16;
    while (n < 2 * (c.full_capacity + c.compressed_capacity)) n *= 2;
    table_.assign(n, entry{});
    scratch_.resize(c.row_size);
  }

  [[nodiscard]] const tiered_store_config& config() const noexcept { return c_; }
  [[nodiscard]] std::size_t row_size() const noexcept { return c_.row_size; }

  // Puts the row in the full tier (replacing what pos held), then evicts as the header says.
  void store(std::uint64_t pos, std::span<const float> row) {
    constexpr std::string_view where = "tiered_store::store";
    require_row(where, "row", row.size());
    detail::check_finite_row(row, where);
    if (full_precision(c_.full_format) && c_.full_format == row_format::f16) {
      for (std::size_t i = 0; i < row.size(); ++i) {
        if (std::isinf(to_f32(to_f16(row[i])))) {
          detail::fail(where, "row", detail::indexed_value(i, row[i]),
                       "values within f16's range (|x| <= 65504) for an f16 full tier");
        }
      }
    }
    erase(pos);
    newest_ = std::max(newest_, pos + 1);
    // Straight to the compressed tier: no full tier, or a full one whose rows are all pinned
    // (sink_n rows and recent_n = 0: the new row is the only one that may leave).
    if (c_.full_capacity == 0 || (tiers_[0].free.empty() && victim(0) == npos)) {
      place(pos, 1, row, 0.0F);
      return;
    }
    place(pos, 0, row, 0.0F);
  }

  // Writes the row to out (decoded when compressed). Throws for an absent position.
  void retrieve(std::uint64_t pos, std::span<float> out) const {
    constexpr std::string_view where = "tiered_store::retrieve";
    require_row(where, "out", out.size());
    const row_ref r = view_at(where, pos);
    decode_row(r.format, r.data, out);
  }

  // The row's bytes in place and their format (valid until the next non-const call).
  [[nodiscard]] row_ref view(std::uint64_t pos) const { return view_at("tiered_store::view", pos); }

  // Adds to the row's importance (the importance policy ranks by the sum). Absent: ignored.
  void add_importance(std::uint64_t pos, float amount) {
    detail::require(std::isfinite(amount) && amount >= 0.0F, "tiered_store::add_importance", "amount", amount,
                    "a finite, non-negative amount");
    const std::size_t e = find(pos);
    if (e == npos) return;
    slot_state& s = tiers_[table_[e].tier].state[table_[e].slot];
    s.importance += amount;
  }
  [[nodiscard]] float importance(std::uint64_t pos) const noexcept {
    const std::size_t e = find(pos);
    return e == npos ? 0.0F : tiers_[table_[e].tier].state[table_[e].slot].importance;
  }

  // A compressed row back to the full tier as a new row (dequantized). A full row: a use.
  void promote(std::uint64_t pos) {
    constexpr std::string_view where = "tiered_store::promote";
    const std::size_t e = find(pos);
    if (e == npos) detail::fail(where, "pos", std::to_string(pos), "a position the store holds");
    if (table_[e].tier == 0) {
      touch(tiers_[0], table_[e].slot);
      return;
    }
    if (c_.full_capacity == 0) return;  // nowhere to go
    tier_slabs& t = tiers_[1];
    const std::uint32_t slot = table_[e].slot;
    const float imp = t.state[slot].importance;
    decode_row(c_.compressed_format, t.row(slot), scratch_);
    release(e);
    place(pos, 0, scratch_, imp);
  }

  // Compresses a full row now (a compressed row is left as it is). Pinned rows may be demoted
  // by hand; they stay compressed until promoted.
  void demote(std::uint64_t pos) {
    constexpr std::string_view where = "tiered_store::demote";
    const std::size_t e = find(pos);
    if (e == npos) detail::fail(where, "pos", std::to_string(pos), "a position the store holds");
    if (table_[e].tier == 0) move_down(e);
  }

  [[nodiscard]] tier tier_of(std::uint64_t pos) const noexcept {
    const std::size_t e = find(pos);
    if (e == npos) return tier::absent;
    return table_[e].tier == 0 ? tier::full : tier::compressed;
  }

  // Removes a row; returns whether it was held.
  bool erase(std::uint64_t pos) {
    const std::size_t e = find(pos);
    if (e == npos) return false;
    release(e);
    return true;
  }

  // Forgets every row (the slabs stay allocated).
  void clear() noexcept {
    for (entry& e : table_) e = entry{};
    for (tier_slabs& t : tiers_) t.reset();
    held_ = 0;
    newest_ = 0;
    dropped_ = 0;
  }

  [[nodiscard]] std::size_t size() const noexcept { return held_; }
  [[nodiscard]] std::size_t full_rows() const noexcept { return tiers_[0].used; }
  [[nodiscard]] std::size_t compressed_rows() const noexcept { return tiers_[1].used; }
  [[nodiscard]] std::size_t dropped_rows() const noexcept { return dropped_; }

  // Bytes of the rows held: payload and scales, per tier and in all.
  [[nodiscard]] std::size_t full_bytes() const noexcept { return tiers_[0].used * tiers_[0].bytes; }
  [[nodiscard]] std::size_t compressed_bytes() const noexcept { return tiers_[1].used * tiers_[1].bytes; }
  [[nodiscard]] std::size_t bytes_held() const noexcept { return full_bytes() + compressed_bytes(); }
  // Bytes of the two slabs (what the store allocated for rows).
  [[nodiscard]] std::size_t bytes_reserved() const noexcept {
    return tiers_[0].capacity * tiers_[0].bytes + tiers_[1].capacity * tiers_[1].bytes;
  }

 private:
  static constexpr std::size_t npos = std::numeric_limits<std::size_t>::max();
  static constexpr std::uint64_t empty_key = std::numeric_limits<std::uint64_t>::max();

  struct entry {
    std::uint64_t pos = empty_key;
    std::uint32_t slot = 0;
    std::uint8_t tier = 0;  // 0 full, 1 compressed
  };
  struct slot_state {
    std::uint64_t pos = 0;
    std::uint64_t seq = 0;  // insertion order
    float importance = 0.0F;
  };
  struct tier_slabs {
    std::size_t capacity = 0;
    std::size_t bytes = 0;
    std::size_t used = 0;
    std::unique_ptr<std::byte[]> data;
    std::vector<std::uint32_t> free;  // a stack of free slots
    std::vector<slot_state> state;
    std::unique_ptr<std::atomic<std::uint64_t>[]> last_use;
    std::vector<std::uint8_t> live;

    void init(std::size_t cap, std::size_t row_bytes_) {
      capacity = cap;
      bytes = row_bytes_;
      data = std::make_unique<std::byte[]>(cap * row_bytes_ + 1);
      state.assign(cap, slot_state{});
      last_use = std::make_unique<std::atomic<std::uint64_t>[]>(cap + 1);
      live.assign(cap, 0);
      reset();
    }
    void reset() {
      used = 0;
      free.resize(capacity);
      for (std::size_t i = 0; i < capacity; ++i) free[i] = static_cast<std::uint32_t>(capacity - 1 - i);
      std::fill(live.begin(), live.end(), std::uint8_t{0});
    }
    [[nodiscard]] std::byte* row(std::size_t slot) const noexcept { return data.get() + slot * bytes; }
  };

  [[nodiscard]] row_format format_of(std::uint8_t t) const noexcept {
    return t == 0 ? c_.full_format : c_.compressed_format;
  }

  void require_row(std::string_view where, std::string_view what, std::size_t n) const {
    detail::require(n == c_.row_size, where, std::string(what) + ".size()", n,
                    "config.row_size = " + std::to_string(c_.row_size));
  }

  [[nodiscard]] static std::size_t hash(std::uint64_t pos) noexcept {
    std::uint64_t h = pos * 0x9E3779B97F4A7C15ULL;
    return static_cast<std::size_t>(h ^ (h >> 29));
  }
  [[nodiscard]] std::size_t find(std::uint64_t pos) const noexcept {
    if (pos == empty_key) return npos;
    const std::size_t mask = table_.size() - 1;
    for (std::size_t i = hash(pos) & mask;; i = (i + 1) & mask) {
      if (table_[i].pos == pos) return i;
      if (table_[i].pos == empty_key) return npos;
    }
  }
  // Removes table entry i by backward shift (no tombstones: the table never fills with them).
  void remove_entry(std::size_t i) noexcept {
    const std::size_t mask = table_.size() - 1;
    std::size_t hole = i;
    for (std::size_t j = (i + 1) & mask; table_[j].pos != empty_key; j = (j + 1) & mask) {
      const std::size_t home = hash(table_[j].pos) & mask;
      // j's entry may move into the hole when its home is not in (hole, j] (cyclically).
      const bool stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
      if (!stays) {
        table_[hole] = table_[j];
        hole = j;
      }
    }
    table_[hole] = entry{};
  }

  void touch(const tier_slabs& t, std::uint32_t slot) const noexcept {
    t.last_use[slot].store(clock_->fetch_add(1, std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  [[nodiscard]] row_ref view_at(std::string_view where, std::uint64_t pos) const {
    const std::size_t e = find(pos);
    if (e == npos) {
      detail::fail(where, "pos", std::to_string(pos),
                   "a position the store holds (it was never stored, erased or dropped)");
    }
    const tier_slabs& t = tiers_[table_[e].tier];
    if (c_.policy == eviction::lru) touch(t, table_[e].slot);
    return row_ref{format_of(table_[e].tier), t.row(table_[e].slot)};
  }

  // Puts pos in tier t (0 full, 1 compressed) encoded from row.
  void place(std::uint64_t pos, std::uint8_t t, std::span<const float> row, float importance) {
    tier_slabs& s = tiers_[t];
    if (s.free.empty()) make_room(t);
    const std::uint32_t slot = s.free.back();
    s.free.pop_back();
    ++s.used;
    encode_row(format_of(t), row, s.row(slot));
    s.state[slot] = slot_state{pos, seq_++, importance};
    s.live[slot] = 1;
    touch(s, slot);
    const std::size_t mask = table_.size() - 1;
    std::size_t i = hash(pos) & mask;
    while (table_[i].pos != empty_key) i = (i + 1) & mask;
    table_[i] = entry{pos, slot, t};
    ++held_;
  }
  void release(std::size_t e) noexcept {
    tier_slabs& s = tiers_[table_[e].tier];
    const std::uint32_t slot = table_[e].slot;
    s.live[slot] = 0;
    s.free.push_back(slot);
    --s.used;
    --held_;
    remove_entry(e);
  }

  [[nodiscard]] bool pinned(const slot_state& s) const noexcept {
    return s.pos < c_.sink_n || s.pos + c_.recent_n >= newest_;
  }
  // Whether a is a better victim than b (less valuable).
  [[nodiscard]] bool less_valuable(const tier_slabs& t, std::uint32_t a, std::uint32_t b) const noexcept {
    const slot_state& x = t.state[a];
    const slot_state& y = t.state[b];
    switch (c_.policy) {
      case eviction::fifo:
        return x.seq < y.seq;
      case eviction::lru: {
        const std::uint64_t ua = t.last_use[a].load(std::memory_order_relaxed);
        const std::uint64_t ub = t.last_use[b].load(std::memory_order_relaxed);
        return ua != ub ? ua < ub : x.seq < y.seq;
      }
      case eviction::importance:
        return x.importance != y.importance ? x.importance < y.importance : x.seq < y.seq;
    }
    return false;
  }
  // The least valuable row of tier t that may leave it (pinned rows stay in the full tier).
  [[nodiscard]] std::size_t victim(std::uint8_t t) const noexcept {
    const tier_slabs& s = tiers_[t];
    std::size_t best = npos;
    for (std::uint32_t i = 0; i < s.capacity; ++i) {
      if (s.live[i] == 0 || (t == 0 && pinned(s.state[i]))) continue;
      if (best == npos || less_valuable(s, i, static_cast<std::uint32_t>(best))) best = i;
    }
    return best;
  }

  // A free slot in tier t: the full tier demotes its victim, the compressed tier drops its own.
  void make_room(std::uint8_t t) {
    const std::size_t v = victim(t);
    if (v == npos) {
      detail::fail("tiered_store::store", "full tier", "every row pinned",
                   "a full_capacity above recent_n + sink_n rows");
    }
    const std::size_t e = find(tiers_[t].state[v].pos);
    if (t == 0) {
      move_down(e);
      return;
    }
    if (!c_.drop) {
      detail::fail("tiered_store::store", "compressed tier",
                   "full (" + std::to_string(c_.compressed_capacity) + " rows)",
                   "a larger compressed_capacity, or drop = true to drop its least valuable row");
    }
    release(e);
    ++dropped_;
  }

  // Full row of entry e to the compressed tier (with its order and importance). Checks first,
  // so that an error leaves the store as it was.
  void move_down(std::size_t e) {
    if (tiers_[1].free.empty() && !c_.drop) {
      detail::fail("tiered_store::store", "compressed tier",
                   "full (" + std::to_string(c_.compressed_capacity) + " rows)",
                   "a larger compressed_capacity, or drop = true to drop its least valuable row");
    }
    tier_slabs& f = tiers_[0];
    const std::uint32_t slot = table_[e].slot;
    const slot_state st = f.state[slot];
    decode_row(c_.full_format, f.row(slot), scratch_);
    release(e);
    if (c_.compressed_capacity == 0) {  // drop = true: rows leaving the full tier are gone
      ++dropped_;
      return;
    }
    place(st.pos, 1, scratch_, st.importance);
    tiers_[1].state[table_[find(st.pos)].slot].seq = st.seq;
  }

  tiered_store_config c_;
  tier_slabs tiers_[2];
  std::vector<entry> table_;
  std::vector<float> scratch_;
  std::size_t held_ = 0;
  std::size_t dropped_ = 0;
  std::uint64_t newest_ = 0;  // one past the largest position stored
  std::uint64_t seq_ = 0;
  std::unique_ptr<std::atomic<std::uint64_t>> clock_ = std::make_unique<std::atomic<std::uint64_t>>(0);
};

static_assert(activation_manager<tiered_store>);

}  // namespace actsparse
