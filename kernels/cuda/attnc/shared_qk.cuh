//===- shared_qk.cuh - Dense attention with shared QK (CUDA) ----*- C++ -*-===//
//
// The dense fallback of LSH attention runs the flash kernels with K = the
// normalised queries, k_j = q_j / max(|q_j|, 1e-6) (the generated variant
// carries the self score). Two small kernels go around them, one warp per
// row, fp32 arithmetic:
//
//   shared_qk_normalise<D, WARPS, T>(SharedQkArgs)  // out = keys, before the flash kernels
//   shared_qk_fold_dk<D, WARPS, T>(SharedQkArgs)
//       // after the backward: out = dq += (dk - k (k·dk)) / |q| (dk / 1e-6 below)
//
// Launch: grid ceil(rows / WARPS), WARPS * 32 threads.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_SHARED_QK_CUH
#define ATTNC_CUDA_SHARED_QK_CUH

#include "attnc/common.cuh"
#include "attnc/common/shared_qk.h"

namespace attnc {

template <int D, class T> ATTNC_HD float sharedQkRowNorm(const T *x, int lane) {
  float s = 0.0f;
  for (int d = lane; d < D; d += 32) {
    const float v = Elem<T>::toFloat(x[d]);
    s += v * v;
  }
  return sqrtf(warpSum(s));
}

template <int D, int WARPS, class T> ATTNC_HD void shared_qk_normalise(const SharedQkArgs &a) {
  const T *q = static_cast<const T *>(a.q);
  T *keys = static_cast<T *>(a.out);
  const long long rows = a.rows;
  const long long r = static_cast<long long>(blockIdx.x) * WARPS + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows)
    return;
  const T *x = q + r * D;
  const float inv = 1.0f / fmaxf(sharedQkRowNorm<D>(x, lane), kSharedQkNormFloor);
  for (int d = lane; d < D; d += 32)
    keys[r * D + d] = Elem<T>::fromFloat(Elem<T>::toFloat(x[d]) * inv);
}

template <int D, int WARPS, class T> ATTNC_HD void shared_qk_fold_dk(const SharedQkArgs &a) {
  const T *q = static_cast<const T *>(a.q), *dk = static_cast<const T *>(a.dk);
  T *dq = static_cast<T *>(a.out);
  const long long rows = a.rows;
  const long long r = static_cast<long long>(blockIdx.x) * WARPS + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (r >= rows)
    return;
  const T *x = q + r * D, *g = dk + r * D;
  const float n = sharedQkRowNorm<D>(x, lane);
  const float inv = 1.0f / fmaxf(n, kSharedQkNormFloor);
  // k = q / max(n, floor) is recomputed here in fp32 rather than read back
  // in T: the projection below needs it more precisely than fp16 keeps it.
  float kg = 0.0f;
  for (int d = lane; d < D; d += 32)
    kg += Elem<T>::toFloat(x[d]) * inv * Elem<T>::toFloat(g[d]);
  kg = warpSum(kg);
  for (int d = lane; d < D; d += 32) {
    const float k = Elem<T>::toFloat(x[d]) * inv, gd = Elem<T>::toFloat(g[d]);
    dq[r * D + d] = Elem<T>::fromFloat(Elem<T>::toFloat(dq[r * D + d]) +
                                       sharedqk::queryGradFromKey(gd, k, kg, n));
  }
}

} // namespace attnc

#endif // ATTNC_CUDA_SHARED_QK_CUH
