//===- shared_qk.h - Dense attention with shared QK (CPU) -------*- C++ -*-===//
//
// The dense fallback of LSH attention: keys are the normalised queries,
// k_j = q_j / max(|q_j|, 1e-6), and the generated variant carries the self
// score. These wrappers normalise into a workspace, run the flash kernels
// with it as K, and fold dK back into dQ through the normalisation:
// dq_j += (dk_j - k_j (k_j·dk_j)) / |q_j| (dk_j / 1e-6 below the floor).
//
//   template <int BLOCK_Q, int BLOCK_KV, int HEAD_DIM, class Variant>
//   int attnc::cpu::shared_qk_fwd(const AttnFwdArgs &a); // a.k is ignored
//   int attnc::cpu::shared_qk_bwd(const AttnBwdArgs &a); // a.k, a.dk ignored
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CPU_SHARED_QK_H
#define ATTNC_CPU_SHARED_QK_H

#include "flash_bwd.h"
#include "flash_fwd.h"

#include "attnc/common/shared_qk.h"

namespace attnc {
namespace cpu ATTNC_CPU_NAMESPACE_ATTR {

namespace detail {

inline float rowNorm(const float *x, int D) {
  float s = 0.0f;
  for (int d = 0; d < D; ++d)
    s += x[d] * x[d];
  return std::sqrt(s);
}

/// keys[r] = q[r] / max(|q[r]|, 1e-6) for `rows` rows of D floats.
inline void normaliseRows(const float *q, float *keys, long long rows, int D) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
  for (long long r = 0; r < rows; ++r) {
    const float *x = q + r * D;
    float *k = keys + r * D;
    const float inv = 1.0f / std::max(rowNorm(x, D), kSharedQkNormFloor);
    for (int d = 0; d < D; ++d)
      k[d] = x[d] * inv;
  }
}

/// dq[r] += the gradient reaching q[r] through its normalised key.
inline void addNormalisationGrad(const float *q, const float *keys, const float *dk, float *dq,
                                 long long rows, int D) {
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
  for (long long r = 0; r < rows; ++r) {
    const float *k = keys + r * D, *g = dk + r * D;
    float *out = dq + r * D;
    const float n = rowNorm(q + r * D, D);
    float kg = 0.0f;
    for (int d = 0; d < D; ++d)
      kg += k[d] * g[d];
    for (int d = 0; d < D; ++d)
      out[d] += sharedqk::queryGradFromKey(g[d], k[d], kg, n);
  }
}

} // namespace detail

template <int BLOCK_Q, int BLOCK_KV, int HEAD_DIM, class Variant>
int shared_qk_fwd(const AttnFwdArgs &a) {
  if (!a.q)
    return kErrNullPointer;
  if (a.B <= 0 || a.H <= 0 || a.Nq <= 0 || a.Nk != a.Nq)
    return kErrBadSize;
  const long long rows = static_cast<long long>(a.B) * a.H * a.Nq;
  AlignedBuffer keys(static_cast<std::size_t>(rows) * HEAD_DIM);
  if (!keys.ok())
    return kErrAlloc;
  detail::normaliseRows(static_cast<const float *>(a.q), keys.data(), rows, HEAD_DIM);
  AttnFwdArgs f = a;
  f.k = keys.data();
  return flash_fwd<BLOCK_Q, BLOCK_KV, HEAD_DIM, Variant>(f);
}

template <int BLOCK_Q, int BLOCK_KV, int HEAD_DIM, class Variant>
int shared_qk_bwd(const AttnBwdArgs &a) {
  if (!a.q || !a.dq)
    return kErrNullPointer;
  if (a.B <= 0 || a.H <= 0 || a.Nq <= 0 || a.Nk != a.Nq)
    return kErrBadSize;
  const long long rows = static_cast<long long>(a.B) * a.H * a.Nq;
  const std::size_t n = static_cast<std::size_t>(rows) * HEAD_DIM;
  AlignedBuffer keys(n), dk(n);
  if (!keys.ok() || !dk.ok())
    return kErrAlloc;
  const float *q = static_cast<const float *>(a.q);
  detail::normaliseRows(q, keys.data(), rows, HEAD_DIM);
  AttnBwdArgs g = a;
  g.k = keys.data();
  g.dk = dk.data();
  if (int e = flash_bwd<BLOCK_Q, BLOCK_KV, HEAD_DIM, Variant>(g))
    return e;
  detail::addNormalisationGrad(q, keys.data(), dk.data(), static_cast<float *>(a.dq), rows,
                               HEAD_DIM);
  return kOk;
}

} // namespace ATTNC_CPU_NAMESPACE_ATTR
} // namespace attnc

#endif // ATTNC_CPU_SHARED_QK_H
