#pragma once
// A two-tier store of activation rows (one row of d values per token position): the newest
// rows stay in f32, older ones are kept as INT8 with one scale per row, 4x smaller. FIFO is
// the simplest eviction order that matches decode, where older positions are read less.

#include <actsparse/core/concepts.hpp>
#include <actsparse/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace actsparse {

struct fifo_int8_store_config {
  std::size_t row_size = 0;       // values per row (>= 1)
  std::size_t full_capacity = 0;  // rows the f32 tier holds before the oldest is compressed

  friend constexpr bool operator==(const fifo_int8_store_config&, const fifo_int8_store_config&) noexcept = default;
};

// Quantization: scale = max|x| / 127 (0 for an all-zero row), q = round(x / scale) (halves away
// from zero, the division done in double) clamped to [-127, 127]; x' = q * scale, so
// |x - x'| <= scale / 2 up to float rounding of q * scale.
class fifo_int8_store {
 public:
  using config_type = fifo_int8_store_config;

  explicit fifo_int8_store(fifo_int8_store_config config) : config_(config) {
    detail::require(config.row_size > 0, "fifo_int8_store", "config.row_size", config.row_size,
                    "at least 1 value per row");
  }

  [[nodiscard]] std::size_t row_size() const noexcept { return config_.row_size; }
  [[nodiscard]] std::size_t full_capacity() const noexcept { return config_.full_capacity; }

  // Puts the row in the f32 tier as the newest row (replacing what `pos` held), then
  // compresses the oldest f32 rows while the tier holds more than full_capacity rows.
  void store(std::uint64_t pos, std::span<const float> row) {
    constexpr std::string_view where = "fifo_int8_store::store";
    require_row_size(where, "row", row.size());
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (!std::isfinite(row[i])) {
        throw error(where, "row", "[" + std::to_string(i) + "] = " + detail::to_text(row[i]),
                    "finite values (the first non-finite one is shown)");
      }
    }
    row_entry& e = rows_[pos];
    if (e.in_full) {
      fifo_.erase(e.seq);
      e.in_full = false;
    }
    e.full.assign(row.begin(), row.end());
    release(e.q);
    e.scale = 0.0F;
    make_newest(pos, e);
    enforce_capacity();
  }

  // Writes the row to out (dequantized if it is compressed).
  void retrieve(std::uint64_t pos, std::span<float> out) const {
    constexpr std::string_view where = "fifo_int8_store::retrieve";
    require_row_size(where, "out", out.size());
    const row_entry& e = find(where, pos);
    if (e.in_full) {
      std::copy(e.full.begin(), e.full.end(), out.begin());
    } else {
      for (std::size_t i = 0; i < e.q.size(); ++i) out[i] = static_cast<float>(e.q[i]) * e.scale;
    }
  }

  // Moves a compressed row back to the f32 tier as the newest row. Its values are the
  // dequantized ones (the round trip is lossy). A row already in f32 is left as it is (FIFO,
  // not LRU: reading a row does not make it younger). With full_capacity 0 the row is
  // compressed again at once.
  void promote(std::uint64_t pos) {
    row_entry& e = find("fifo_int8_store::promote", pos);
    if (e.in_full) return;
    e.full.resize(config_.row_size);
    for (std::size_t i = 0; i < e.q.size(); ++i) e.full[i] = static_cast<float>(e.q[i]) * e.scale;
    release(e.q);
    e.scale = 0.0F;
    make_newest(pos, e);
    enforce_capacity();
  }

  // Compresses a row now (a compressed row is left as it is).
  void demote(std::uint64_t pos) {
    row_entry& e = find("fifo_int8_store::demote", pos);
    if (e.in_full) compress(e);
  }

  [[nodiscard]] tier tier_of(std::uint64_t pos) const noexcept {
    const auto it = rows_.find(pos);
    if (it == rows_.end()) return tier::absent;
    return it->second.in_full ? tier::full : tier::compressed;
  }

  // Removes a row; returns whether it was there.
  bool erase(std::uint64_t pos) {
    const auto it = rows_.find(pos);
    if (it == rows_.end()) return false;
    if (it->second.in_full) fifo_.erase(it->second.seq);
    rows_.erase(it);
    return true;
  }

  [[nodiscard]] std::size_t size() const noexcept { return rows_.size(); }
  [[nodiscard]] std::size_t full_rows() const noexcept { return fifo_.size(); }
  [[nodiscard]] std::size_t compressed_rows() const noexcept { return rows_.size() - fifo_.size(); }

  // The row payloads held: row_size * 4 bytes per f32 row, row_size + 4 (int8 values and the
  // f32 scale) per compressed row. Bookkeeping (the maps, positions, ages) is not counted.
  [[nodiscard]] std::size_t bytes_held() const noexcept {
    return full_rows() * config_.row_size * sizeof(float) +
           compressed_rows() * (config_.row_size * sizeof(std::int8_t) + sizeof(float));
  }

 private:
  struct row_entry {
    bool in_full = false;
    std::uint64_t seq = 0;       // age in the f32 tier (larger = newer); valid when in_full
    std::vector<float> full;     // the f32 row, when in_full
    std::vector<std::int8_t> q;  // the int8 row, when compressed
    float scale = 0.0F;
  };

  void require_row_size(std::string_view where, std::string_view argument, std::size_t size) const {
    if (size == config_.row_size) return;
    throw error(where, argument, "a span of " + std::to_string(size) + " floats",
                std::to_string(config_.row_size) + " floats (row_size)");
  }

  template <class Self>
  static auto& find_in(Self& self, std::string_view where, std::uint64_t pos) {
    const auto it = self.rows_.find(pos);
    if (it == self.rows_.end()) {
      detail::fail(where, "pos", pos, "a position that was stored (and not erased)");
    }
    return it->second;
  }
  row_entry& find(std::string_view where, std::uint64_t pos) { return find_in(*this, where, pos); }
  const row_entry& find(std::string_view where, std::uint64_t pos) const { return find_in(*this, where, pos); }

  void make_newest(std::uint64_t pos, row_entry& e) {
    e.in_full = true;
    e.seq = next_seq_++;
    fifo_.emplace(e.seq, pos);
  }

  void enforce_capacity() {
    while (fifo_.size() > config_.full_capacity) compress(rows_.at(fifo_.begin()->second));
  }

  void compress(row_entry& e) {
    float amax = 0.0F;
    for (float v : e.full) amax = std::max(amax, std::fabs(v));
    const float scale = amax / 127.0F;
    e.q.resize(e.full.size());
    for (std::size_t i = 0; i < e.full.size(); ++i) {
      // scale can underflow to 0 for a row of tiny subnormals: store zeros rather than divide.
      const double r = scale > 0.0F ? std::round(static_cast<double>(e.full[i]) / static_cast<double>(scale)) : 0.0;
      e.q[i] = static_cast<std::int8_t>(std::clamp(r, -127.0, 127.0));
    }
    e.scale = scale;
    release(e.full);
    fifo_.erase(e.seq);
    e.in_full = false;
    e.seq = 0;
  }

  // Gives a tier's buffer back, so bytes_held() is what the process really holds.
  template <class V>
  static void release(std::vector<V>& v) {
    std::vector<V>().swap(v);
  }

  fifo_int8_store_config config_;
  std::unordered_map<std::uint64_t, row_entry> rows_;
  std::map<std::uint64_t, std::uint64_t> fifo_;  // seq -> pos, oldest first
  std::uint64_t next_seq_ = 0;
};

ACTSPARSE_REQUIRE_ACTIVATION_MANAGER(fifo_int8_store);

}  // namespace actsparse
