// Per-target kernel (Highway) for the gated FFN's activation over a vector: v[i] = act(v[i])
// for SiLU, GELU (tanh form) and ReLU. The scalar std::exp / std::tanh of core/activation.hpp
// run serially between the gate GEMV and the selector, a visible share of a decode step
// (docs/PERFORMANCE.md). Here both are rewritten on one vector exp (Highway's contrib Exp, at
// most 1 ulp) as a logistic:
//   sigmoid(z) = 1 / (1 + t) for z >= 0, t / (1 + t) for z < 0, with t = exp(-|z|) in (0, 1]
// (no overflow anywhere, so no range cases), silu(g) = g·sigmoid(g), and, since 1 + tanh(z)
// = 2·sigmoid(2z), gelu(g) = g·sigmoid(2·sqrt(2/pi)·(g + 0.044715·g³)). The result is within a
// few ulp of the scalar functions (GELU closer to the exact value than the scalar 1 + tanh,
// which cancels for negative z); NaN stays NaN, silu(±inf) is NaN / inf as in the scalar code.
// Every value goes through the same vector code, the tail through a padded vector, so a
// value's bits depend only on the value and the target: not on its position or the length.
// Included by gemv-inl.h inside its toggle guard, so foreach_target.h compiles it per target.
// No #pragma once: the toggle guard below lets foreach_target.h re-include this file.

#if defined(ACTSPARSE_CPU_ACTIVATION_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef ACTSPARSE_CPU_ACTIVATION_INL_H_
#undef ACTSPARSE_CPU_ACTIVATION_INL_H_
#else
#define ACTSPARSE_CPU_ACTIVATION_INL_H_
#endif

#include <actsparse/core/activation.hpp>

#include <cstddef>

#include <hwy/contrib/math/math-inl.h>
#include <hwy/highway.h>

HWY_BEFORE_NAMESPACE();
namespace actsparse::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// 1 / (1 + exp(-z)) without overflow (see the file comment).
template <class DF, class V = hn::Vec<DF>>
HWY_INLINE V logistic(DF df, V z) {
  const V one = hn::Set(df, 1.0F);
  // A NaN lane goes in as 0: Highway's scalar Exp converts its argument to int, which is
  // undefined for NaN. The caller's product with g (NaN there) makes the result NaN again.
  const V t = hn::Exp(df, hn::Neg(hn::IfThenZeroElse(hn::IsNaN(z), hn::Abs(z))));
  const V numerator = hn::IfThenElse(hn::Lt(z, hn::Zero(df)), t, one);
  return hn::Div(numerator, hn::Add(one, t));
}

template <activation A, class DF, class V = hn::Vec<DF>>
HWY_INLINE V activate_vector(DF df, V g) {
  if constexpr (A == activation::silu) {
    return hn::Mul(g, logistic(df, g));
  } else if constexpr (A == activation::gelu) {
    // inner = fma(0.044715·g·g, g, g) as the scalar gelu; z = 2·sqrt(2/pi)·inner.
    const V inner = hn::MulAdd(hn::Mul(hn::Mul(hn::Set(df, 0.044715F), g), g), g, g);
    return hn::Mul(g, logistic(df, hn::Mul(hn::Set(df, 2.0F * 0.7978845608028654F), inner)));
  } else {
    return hn::IfThenElseZero(hn::Gt(g, hn::Zero(df)), g);  // as the scalar relu: NaN -> 0
  }
}

template <activation A>
HWY_INLINE void activate_all(float* HWY_RESTRICT v, std::size_t n) {
  const hn::ScalableTag<float> df;
  const std::size_t lanes = hn::Lanes(df);
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(activate_vector<A>(df, hn::LoadU(df, v + i)), df, v + i);
  if (i < n) {  // the tail through one padded vector: the same code, so the same bits
    HWY_ALIGN float tail[HWY_MAX_BYTES / sizeof(float)] = {};
    for (std::size_t k = i; k < n; ++k) tail[k - i] = v[k];
    hn::Store(activate_vector<A>(df, hn::Load(df, tail)), df, tail);
    for (std::size_t k = i; k < n; ++k) v[k] = tail[k - i];
  }
}

// The entry point each target exports: v[i] = act(v[i]) for i < n.
inline void activate(activation a, float* v, std::size_t n) {
  switch (a) {
    case activation::silu:
      return activate_all<activation::silu>(v, n);
    case activation::gelu:
      return activate_all<activation::gelu>(v, n);
    case activation::relu:
      return activate_all<activation::relu>(v, n);
  }
}

}  // namespace actsparse::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // toggle guard
