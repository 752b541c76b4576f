//===- Activations.h - The FFN activations and their derivatives -*- C++ -*-===//
//
// One definition of gelu (tanh form), relu and silu and their derivatives
// for the CPU step (model_step.h, with its vectorisable expf_fast) and the
// CUDA step (model_step.cuh, with expf): each passes its exp. No host
// headers, so NVRTC, the host compiler and the SIMT emulator all read it.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_ABI_ACTIVATIONS_H
#define ATTNC_ABI_ACTIVATIONS_H

#include "attnc/abi/Qualifiers.h"

namespace attnc {
namespace act {

/// The one encoding of the FFN activation: the front end's AST, the model
/// config, the tuning keys and the kernels' `kind` argument (an int in the
/// generated code) all use it; the dialect's Attn_Activation attribute has
/// the same values (static_asserts in driver/ModelConfigOf.cpp).
enum class Kind : int { Gelu = 0, Relu = 1, Silu = 2 };

#if !defined(__CUDACC_RTC__)
/// The spec's and the JSON files' name of `k`.
inline const char *kindName(Kind k) {
  return k == Kind::Relu ? "relu" : k == Kind::Silu ? "silu" : "gelu";
}
#endif

/// tanh(u) = 1 − 2 / (e^{2u} + 1): branch-free, so row loops vectorise.
template <class Exp> ATTNC_FORCE_INLINE float tanhVia(float u, Exp exp) {
  return 1.0f - 2.0f / (exp(2.0f * u) + 1.0f);
}

/// `kind`: a Kind as an int (gelu is the tanh form).
template <class Exp> ATTNC_FORCE_INLINE float apply(int kind, float x, Exp exp) {
  if (kind == 1)
    return x > 0 ? x : 0.0f;
  if (kind == 2)
    return x / (1.0f + exp(-x));
  const float c = 0.7978845608028654f, a = 0.044715f;
  return 0.5f * x * (1.0f + tanhVia(c * (x + a * x * x * x), exp));
}

/// d apply(kind, x) / dx.
template <class Exp> ATTNC_FORCE_INLINE float derivative(int kind, float x, Exp exp) {
  if (kind == 1)
    return x > 0 ? 1.0f : 0.0f;
  if (kind == 2) {
    const float s = 1.0f / (1.0f + exp(-x));
    return s * (1.0f + x * (1.0f - s));
  }
  const float c = 0.7978845608028654f, a = 0.044715f;
  const float t = tanhVia(c * (x + a * x * x * x), exp);
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * c * (1.0f + 3.0f * a * x * x);
}

} // namespace act
} // namespace attnc

#endif // ATTNC_ABI_ACTIVATIONS_H
