//===- Activations.h - The FFN activations and their derivatives -*- C++ -*-===//
//
// One definition of gelu (tanh form), relu and silu and their derivatives
// for the CPU step (model_step.h, with its vectorisable expf_fast) and the
// CUDA step (model_step.cuh, with expf): each passes its exp. No includes,
// so NVRTC, the host compiler and the SIMT emulator all read it.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_ABI_ACTIVATIONS_H
#define ATTNC_ABI_ACTIVATIONS_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ATTNC_ACTIVATION_FN __device__ __forceinline__
#elif defined(__GNUC__)
#define ATTNC_ACTIVATION_FN inline __attribute__((always_inline))
#else
#define ATTNC_ACTIVATION_FN inline
#endif

namespace attnc {
namespace act {

/// tanh(u) = 1 − 2 / (e^{2u} + 1): branch-free, so row loops vectorise.
template <class Exp> ATTNC_ACTIVATION_FN float tanhVia(float u, Exp exp) {
  return 1.0f - 2.0f / (exp(2.0f * u) + 1.0f);
}

/// `kind`: 0 gelu (tanh form), 1 relu, 2 silu (Attn_Activation's order).
template <class Exp> ATTNC_ACTIVATION_FN float apply(int kind, float x, Exp exp) {
  if (kind == 1)
    return x > 0 ? x : 0.0f;
  if (kind == 2)
    return x / (1.0f + exp(-x));
  const float c = 0.7978845608028654f, a = 0.044715f;
  return 0.5f * x * (1.0f + tanhVia(c * (x + a * x * x * x), exp));
}

/// d apply(kind, x) / dx.
template <class Exp> ATTNC_ACTIVATION_FN float derivative(int kind, float x, Exp exp) {
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
