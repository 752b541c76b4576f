//===- lsh_hash.cuh - LSH attention: hash and sort ---------------------------===//
//
// lsh_hash: key normalisation, buckets by argmax over [q·R; -q·R] and the
// stable counting sort by bucket, per (b, h, round); the forward and the
// backward both start from it.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_LSH_HASH_CUH
#define ATTNC_CUDA_LSH_HASH_CUH

#include "attnc/lsh_common.cuh"

namespace attnc {

//===-- Hash and sort -----------------------------------------------------===//

template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS, class T,
          class Variant>
__device__ void lsh_hash(const AttnLshArgs &a) {
  using Tr = LshTraits<CHUNK, D, BQ, BKV, WARPS>;
  constexpr int NT = Tr::kThreads;
  ATTNC_LSH_SHARED(LshHashSmem, sm);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const tile::GridBlock blk = tile::gridBlock(blockIdx.x, a.rounds);
  const int r = blk.tile, bh = blk.row;
  const int N = a.N, NB = a.num_buckets, half = NB / 2;
  const int Npad = tile::lshPaddedLength(N, CHUNK);
  const T *q = static_cast<const T *>(a.q) + size_t(bh) * N * D;
  int *buckets = a.buckets + (size_t(bh) * a.rounds + r) * N;
  int *perm = a.perm + (size_t(bh) * a.rounds + r) * Npad;

  if (r == 0) { // keys, a warp per position
    float *keys = a.keys + size_t(bh) * N * D;
    for (int j = warp; j < N; j += WARPS) {
      const float inv = 1.f / fmaxf(lshRowNorm<D>(q + size_t(j) * D, lane), kSharedQkNormFloor);
      for (int d = lane; d < D; d += 32)
        keys[size_t(j) * D + d] = lshLoad(q + size_t(j) * D + d) * inv;
    }
  }

  if (NB < 2 || NB % 2 != 0 || NB > tile::kLshMaxBuckets) {
    // Unsupported bucket count (the compiler rejects it): nothing attends.
    for (int j = tid; j < N; j += NT)
      buckets[j] = -1;
    for (int t = tid; t < Npad; t += NT)
      perm[t] = -1;
    return;
  }

  for (int k = tid; k < NB; k += NT)
    sm.hist[k] = 0;
  __syncthreads();

  // Buckets, 8 rotation columns at a time.
  const float *rot = a.rotations + size_t(r) * D * half;
  for (int j = tid; j < N; j += NT) {
    const T *x = q + size_t(j) * D;
    float bestPos = negInf(), bestNeg = negInf();
    int argPos = 0, argNeg = 0;
    for (int k0 = 0; k0 < half; k0 += 8) {
      float y[8];
#pragma unroll
      for (int u = 0; u < 8; ++u)
        y[u] = 0.f;
      for (int d = 0; d < D; ++d) {
        const float xd = lshLoad(x + d);
        const float *rd = rot + size_t(d) * half + k0;
#pragma unroll
        for (int u = 0; u < 8; ++u)
          if (k0 + u < half)
            y[u] = fmaf(xd, rd[u], y[u]);
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        if (k0 + u < half) {
          if (y[u] > bestPos) {
            bestPos = y[u];
            argPos = k0 + u;
          }
          if (-y[u] > bestNeg) {
            bestNeg = -y[u];
            argNeg = k0 + u;
          }
        }
      }
    }
    // [y; -y]: the positive half comes first, so it wins ties.
    const int bk = bestPos >= bestNeg ? argPos : half + argNeg;
    buckets[j] = bk;
    atomicAdd(&sm.hist[bk], 1);
  }
  __syncthreads();

  // Exclusive offsets: warp 0, a contiguous segment per lane.
  if (warp == 0) {
    const int seg = (NB + 31) / 32, lo = imin(NB, lane * seg), hi = imin(NB, lo + seg);
    int sum = 0;
    for (int k = lo; k < hi; ++k)
      sum += sm.hist[k];
    int incl = sum;
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
      const int y = __shfl_up_sync(kFullMask, incl, off);
      if (lane >= off)
        incl += y;
    }
    int run = incl - sum;
    for (int k = lo; k < hi; ++k) {
      const int c = sm.hist[k];
      sm.hist[k] = run;
      run += c;
    }
  }
  __syncthreads();

  // Stable scatter: tiles of NT positions in order, warps in order.
  for (int base = 0; base < N; base += NT) {
    const int j = base + tid;
    const bool valid = j < N;
    const int bk = valid ? buckets[j] : -1; // written by this thread
    const unsigned peers = __match_any_sync(kFullMask, bk);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    for (int w = 0; w < WARPS; ++w) {
      int slot = 0;
      if (warp == w && valid)
        slot = sm.hist[bk] + rank;
      __syncwarp();
      if (warp == w && valid) {
        perm[slot] = j;
        if (rank == 0)
          sm.hist[bk] += __popc(peers);
      }
      __syncthreads();
    }
  }
  for (int t = N + tid; t < Npad; t += NT)
    perm[t] = -1;
}

} // namespace attnc

#endif // ATTNC_CUDA_LSH_HASH_CUH
