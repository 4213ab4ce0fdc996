#pragma once
// The CPU backend's decode attention (attention_args) over KV rows of any row_format, in
// phases with ex.sync() between them. Positions go in chunks of attention_chunk (a constant,
// not the thread count, so the bits do not depend on the threads):
//   1  tasks (chunk c): every head's scores over the chunk's K rows, their chunk maximum m and
//      weights w = exp(s − m) with sum l, and acc = Σ_p w_p · V_p[g]: each K and V row of the
//      chunk is read once, whole, decoded in registers (attention-inl.h)
//   2  tasks (head h): M = max_c m_c, L = Σ_c l_c · e^(m_c − M), o = (Σ_c acc_c · e^(m_c − M)) / L,
//      chunks in order
//   3  (position_mass given) tasks (chunk): mass_p = Σ_h w_p,h · e^(m_c,h − M_h) / L_h, heads in order

#include <actsparse/backends/cpu/dispatch.hpp>
#include <actsparse/backends/cpu/executor.hpp>
#include <actsparse/backends/cpu/plan.hpp>
#include <actsparse/core/op_args.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>

namespace actsparse::cpu {

// Positions per phase-1 task.
inline constexpr std::size_t attention_chunk = 256;

// The workspace of one call: offsets in floats.
struct attention_plan {
  std::size_t positions = 0;
  std::size_t chunks = 0;
  std::size_t scores_at = 0;  // [chunks][n_heads][attention_chunk]
  std::size_t weights_at = 0;
  std::size_t m_at = 0;  // [chunks][n_heads]
  std::size_t l_at = 0;
  std::size_t acc_at = 0;  // [chunks][n_heads][head_dim]
  std::size_t top_at = 0;  // [n_heads]: M, then L
  std::size_t bytes = 0;
};

[[nodiscard]] inline attention_plan make_plan(const attention_args& a) noexcept {
  attention_plan p;
  p.positions = a.k_rows.size();
  p.chunks = std::max<std::size_t>((p.positions + attention_chunk - 1) / attention_chunk, 1);
  const std::size_t per_chunk = a.n_heads * attention_chunk;
  const auto align = [](std::size_t floats) { return (floats + 15) / 16 * 16; };  // 64-byte runs
  std::size_t at = 0;
  p.scores_at = at;
  at += align(p.chunks * per_chunk);
  p.weights_at = at;
  at += align(p.chunks * per_chunk);
  p.m_at = at;
  at += align(p.chunks * a.n_heads);
  p.l_at = at;
  at += align(p.chunks * a.n_heads);
  p.acc_at = at;
  at += align(p.chunks * a.n_heads * a.head_dim);
  p.top_at = at;
  at += align(2 * a.n_heads);
  p.bytes = at * sizeof(float);
  return p;
}

class attention_run {
 public:
  attention_run(const attention_args& a, const attention_plan& p, std::byte* ws) noexcept
      : a_(a), p_(p), f_(reinterpret_cast<float*>(ws)) {}

  void operator()(executor& ex) const {
    ex.parallel_for(p_.chunks, [&](std::size_t c) { chunk(c); });
    ex.sync();
    ex.parallel_for(a_.n_heads, [&](std::size_t h) { head(h); });
    if (a_.position_mass.empty()) return;
    ex.sync();
    ex.parallel_for(p_.chunks, [&](std::size_t c) { mass(c); });
  }

 private:
  // Phase 1: every head over chunk c.
  void chunk(std::size_t c) const {
    const std::size_t hd = a_.head_dim;
    const std::size_t p0 = c * attention_chunk;
    const std::size_t n = std::min(attention_chunk, p_.positions - std::min(p0, p_.positions));
    const std::size_t at = c * a_.n_heads * attention_chunk;
    float* const s = f_ + p_.scores_at + at;
    float* const w = f_ + p_.weights_at + at;
    detail::attention_scores(a_.k_rows.data() + p0, n, hd, a_.n_kv_heads, a_.q.data(), a_.n_heads, a_.scale, s,
                             attention_chunk);
    detail::attention_softmax_part(s, n, a_.n_heads, attention_chunk, w, f_ + p_.m_at + c * a_.n_heads,
                                   f_ + p_.l_at + c * a_.n_heads);
    detail::attention_values(a_.v_rows.data() + p0, n, hd, a_.n_kv_heads, w, attention_chunk, a_.n_heads,
                             f_ + p_.acc_at + c * a_.n_heads * hd);
  }

  // Phase 2: head h's chunks combined in order.
  void head(std::size_t h) const {
    const std::size_t hd = a_.head_dim;
    const float neg_inf = -std::numeric_limits<float>::infinity();
    float top = neg_inf;
    for (std::size_t c = 0; c < p_.chunks; ++c) top = std::max(top, f_[p_.m_at + c * a_.n_heads + h]);
    float* const o = a_.output.data() + h * hd;
    std::fill(o, o + hd, 0.0F);
    float total = 0.0F;
    if (top != neg_inf) {
      for (std::size_t c = 0; c < p_.chunks; ++c) {
        const float m = f_[p_.m_at + c * a_.n_heads + h];
        if (m == neg_inf) continue;
        const float e = std::exp(m - top);
        total += f_[p_.l_at + c * a_.n_heads + h] * e;
        const float* acc = f_ + p_.acc_at + (c * a_.n_heads + h) * hd;
        for (std::size_t i = 0; i < hd; ++i) o[i] = std::fma(acc[i], e, o[i]);
      }
      const float inv = 1.0F / total;
      for (std::size_t i = 0; i < hd; ++i) o[i] *= inv;
    }
    f_[p_.top_at + h] = top;
    f_[p_.top_at + a_.n_heads + h] = total;
  }

  // Phase 3: the softmax mass each position of chunk c received, summed over the heads.
  void mass(std::size_t c) const {
    const std::size_t p0 = c * attention_chunk;
    const std::size_t n = std::min(attention_chunk, p_.positions - p0);
    float* const out = a_.position_mass.data() + p0;
    std::fill(out, out + n, 0.0F);
    for (std::size_t h = 0; h < a_.n_heads; ++h) {
      const float m = f_[p_.m_at + c * a_.n_heads + h];
      const float total = f_[p_.top_at + a_.n_heads + h];
      if (m == -std::numeric_limits<float>::infinity() || total == 0.0F) continue;
      const float k = std::exp(m - f_[p_.top_at + h]) / total;
      const float* w = f_ + p_.weights_at + (c * a_.n_heads + h) * attention_chunk;
      for (std::size_t p = 0; p < n; ++p) out[p] = std::fma(w[p], k, out[p]);
    }
  }

  const attention_args& a_;
  const attention_plan& p_;
  float* f_;
};

}  // namespace actsparse::cpu
