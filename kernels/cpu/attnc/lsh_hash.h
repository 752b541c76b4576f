//===- lsh_hash.h - LSH attention on the CPU: hash and sort ----------*- C++ -*-===//
//
// Phases 1-3 of lsh.h, shared by the forward and the backward (which
// recomputes them from the same rotations): key denominators, buckets by
// argmax over [q·R; -q·R], and the stable counting sort by bucket.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CPU_LSH_HASH_H
#define ATTNC_CPU_LSH_HASH_H

#include "lsh_common.h"

namespace attnc {
namespace cpu ATTNC_CPU_NAMESPACE_ATTR {

namespace lsh_detail {
/// Phase 1: den = max(|q|, 1e-6) of every row. Inside a parallel region.
template <int D> inline void normPhase(const Common &c, const float *q) {
  const long long rows = static_cast<long long>(c.B) * c.H * c.N;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
  for (long long r = 0; r < rows; ++r) {
    const float *src = q + std::size_t(r) * D;
    const float n = std::sqrt(dotN<D>(src, src));
    c.den.data()[r] = n > kSharedQkNormFloor ? n : kSharedQkNormFloor;
  }
}

/// argmax over [y; -y] (2·n values), the first index on ties: the maximum
/// first (lane-split, branch-free), then the first index that attains it.
inline int argmaxPlusMinus(const float *ATTNC_RESTRICT y, int n) {
  float lane[kLanes];
  for (int l = 0; l < kLanes; ++l)
    lane[l] = y[0];
  const int n1 = n / kLanes * kLanes;
  for (int k = 0; k < n1; k += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float a = y[k + l] > -y[k + l] ? y[k + l] : -y[k + l];
      lane[l] = a > lane[l] ? a : lane[l];
    }
  float mx = y[0];
  for (int l = 0; l < kLanes; ++l)
    mx = lane[l] > mx ? lane[l] : mx;
  for (int k = n1; k < n; ++k) {
    const float a = y[k] > -y[k] ? y[k] : -y[k];
    mx = a > mx ? a : mx;
  }
  for (int k = 0; k < n; ++k)
    if (y[k] == mx)
      return k;
  for (int k = 0; k < n; ++k)
    if (-y[k] == mx)
      return n + k;
  return 0; // NaN inputs
}

/// Phase 2: buckets, one task per (b, h, r, block of kHashRows rows).
template <int D> inline void hashPhase(const Common &c, const float *q, const float *rotations) {
  const int N = c.N, R = c.R, NB2 = c.NB / 2;
  const int nBlk = ceilDiv(N, kHashRows);
  const long long tasks = static_cast<long long>(c.B) * c.H * R * nBlk;
  float *ATTNC_RESTRICT Y = c.threadWs(); // [kHashRows][NB2]
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
  for (long long t = 0; t < tasks; ++t) {
    const int blk = static_cast<int>(t % nBlk);
    const long long bhr = t / nBlk; // (b·H + h)·R + r
    const int r = static_cast<int>(bhr % R);
    const long long bh = bhr / R;
    const int row0 = blk * kHashRows;
    const int rows = std::min(kHashRows, N - row0);
    const float *qb = q + (std::size_t(bh) * N + row0) * D;
    const float *rot = rotations + std::size_t(r) * D * NB2;
    gemm<false>(rows, NB2, D, qb, D, 1, rot, NB2, Y, NB2); // y = q·R_r, d in order
    int *bk = c.buckets.data() + std::size_t(bhr) * N + row0;
    for (int i = 0; i < rows; ++i)
      bk[i] = argmaxPlusMinus(Y + std::size_t(i) * NB2, NB2);
  }
}

/// Phase 3: stable counting sort per (b, h, r).
inline void sortPhase(const Common &c) {
  const int N = c.N, NB = c.NB, Npad = c.Npad;
  const long long tasks = static_cast<long long>(c.B) * c.H * c.R;
  int *ATTNC_RESTRICT hist = c.threadIws(); // [NB]
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
  for (long long t = 0; t < tasks; ++t) {
    const int *bk = c.buckets.data() + std::size_t(t) * N;
    int *perm = c.perm.data() + std::size_t(t) * Npad;
    for (int k = 0; k < NB; ++k)
      hist[k] = 0;
    for (int n = 0; n < N; ++n)
      ++hist[bk[n]];
    int off = 0;
    for (int k = 0; k < NB; ++k) {
      const int cnt = hist[k];
      hist[k] = off;
      off += cnt;
    }
    for (int n = 0; n < N; ++n)
      perm[hist[bk[n]]++] = n;
    for (int s = N; s < Npad; ++s)
      perm[s] = -1;
  }
}

} // namespace lsh_detail

} // namespace ATTNC_CPU_NAMESPACE_ATTR
} // namespace attnc

#endif // ATTNC_CPU_LSH_HASH_H
