//===- lsh_hash.cuh - LSH attention: hash and sort ---------------------------===//
//
// lsh_hash, lsh_sort_offsets, lsh_sort_scatter: key normalisation, buckets
// by argmax over [q·R; -q·R] and the stable counting sort by bucket, per
// (b, h, round), over many blocks; the forward and the backward both start
// from them.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_LSH_HASH_CUH
#define ATTNC_CUDA_LSH_HASH_CUH

#include "attnc/lsh_common.cuh"

namespace attnc {

//===-- Hash and sort -----------------------------------------------------===//
//
// Three kernels, so that the hash and the sort fill the GPU whatever B * H *
// rounds is (lshHashTileGrid: tiles of NT positions x (bh * R + r) rows):
//
//   lsh_hash          a block per tile of NT positions of one (b, h, round):
//                     keys (r == 0), each position's bucket (one thread per
//                     position, the arithmetic of the file comment of lsh.cuh),
//                     and the tile's count of each bucket into sort_counts
//                     [row][bucket][tile];
//   lsh_sort_offsets  a block per (b, h, round): the exclusive prefix sum of
//                     its counts in (bucket, tile) order, in place: where the
//                     tile's first position of each bucket goes; pad slots
//                     of perm get -1;
//   lsh_sort_scatter  a block per tile: each position to its bucket's offset
//                     plus the positions of that bucket before it in the tile
//                     (warps in order, __match_any_sync within a warp).
//
// Positions of a bucket therefore land in position order: the sort is
// stable, and the same on every run (integer arithmetic only).

/// Whether the hash kernels handle num_buckets (the compiler rejects the
/// others; the kernels then write an all-pad permutation).
ATTNC_HD bool lshBucketsSupported(int nb) {
  return nb >= 2 && nb % 2 == 0 && nb <= tile::kLshMaxBuckets;
}

template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS, class T,
          class Variant>
__device__ void lsh_hash(const AttnLshArgs &a) {
  using Tr = LshTraits<CHUNK, D, BQ, BKV, WARPS>;
  constexpr int NT = Tr::kThreads;
  ATTNC_LSH_SHARED(LshHashSmem, sm);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int N = a.N, NB = a.num_buckets, half = NB / 2, tiles = tile::lshHashTiles(N, NT);
  const tile::GridBlock blk = tile::gridBlock(blockIdx.x, tiles);
  const int row = blk.row, bh = row / a.rounds, r = row - bh * a.rounds;
  const int j0 = blk.tile * NT, j1 = imin(N, j0 + NT);
  const T *q = static_cast<const T *>(a.q) + size_t(bh) * N * D;
  int *buckets = a.buckets + size_t(row) * N;

  if (r == 0) { // keys, a warp per position
    float *keys = a.keys + size_t(bh) * N * D;
    for (int j = j0 + warp; j < j1; j += WARPS) {
      const float inv = 1.f / fmaxf(lshRowNorm<D>(q + size_t(j) * D, lane), kSharedQkNormFloor);
      for (int d = lane; d < D; d += 32)
        keys[size_t(j) * D + d] = lshLoad(q + size_t(j) * D + d) * inv;
    }
  }

  if (!lshBucketsSupported(NB)) { // nothing attends (lsh_sort_offsets)
    if (j0 + tid < j1)
      buckets[j0 + tid] = -1;
    return;
  }

  for (int k = tid; k < NB; k += NT)
    sm.hist[k] = 0;
  __syncthreads();

  // This thread's position's bucket, 8 rotation columns at a time.
  const int j = j0 + tid;
  if (j < j1) {
    const float *rot = a.rotations + size_t(r) * D * half;
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
    atomicAdd(&sm.hist[bk], 1); // integer: the counts do not depend on order
  }
  __syncthreads();
  int *counts = a.sort_counts + size_t(row) * NB * tiles + blk.tile;
  for (int k = tid; k < NB; k += NT)
    counts[size_t(k) * tiles] = sm.hist[k];
}

template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS, class T,
          class Variant>
__device__ void lsh_sort_offsets(const AttnLshArgs &a) {
  using Tr = LshTraits<CHUNK, D, BQ, BKV, WARPS>;
  constexpr int NT = Tr::kThreads;
  ATTNC_LSH_SHARED(LshScanSmem, sm);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const tile::GridBlock blk = tile::gridBlock(blockIdx.x, a.rounds);
  const int row = blk.row * a.rounds + blk.tile; // bh * R + r
  const int N = a.N, NB = a.num_buckets, tiles = tile::lshHashTiles(N, NT);
  const int Npad = tile::lshPaddedLength(N, CHUNK);
  int *perm = a.perm + size_t(row) * Npad;
  if (!lshBucketsSupported(NB)) {
    for (int t = tid; t < Npad; t += NT)
      perm[t] = -1;
    return;
  }
  for (int t = N + tid; t < Npad; t += NT)
    perm[t] = -1;

  // Each thread a contiguous segment of the (bucket, tile) counts: its sum,
  // the block's exclusive scan of the sums, then the segment rewritten.
  int *counts = a.sort_counts + size_t(row) * NB * tiles;
  const int total = NB * tiles, seg = (total + NT - 1) / NT;
  const int lo = imin(total, tid * seg), hi = imin(total, lo + seg);
  int sum = 0;
  for (int x = lo; x < hi; ++x)
    sum += counts[x];
  int incl = sum; // inclusive scan within the warp
#pragma unroll
  for (int off = 1; off < 32; off *= 2) {
    const int y = __shfl_up_sync(kFullMask, incl, off);
    if (lane >= off)
      incl += y;
  }
  if (lane == 31)
    sm.warpSums[warp] = incl;
  __syncthreads();
  int before = 0; // the sums of the warps before this one
  for (int w = 0; w < warp; ++w)
    before += sm.warpSums[w];
  int run = before + incl - sum;
  for (int x = lo; x < hi; ++x) {
    const int c = counts[x];
    counts[x] = run;
    run += c;
  }
}

template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS, class T,
          class Variant>
__device__ void lsh_sort_scatter(const AttnLshArgs &a) {
  using Tr = LshTraits<CHUNK, D, BQ, BKV, WARPS>;
  constexpr int NT = Tr::kThreads;
  ATTNC_LSH_SHARED(LshHashSmem, sm);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int N = a.N, NB = a.num_buckets, tiles = tile::lshHashTiles(N, NT);
  if (!lshBucketsSupported(NB))
    return;
  const tile::GridBlock blk = tile::gridBlock(blockIdx.x, tiles);
  const int row = blk.row;
  const int Npad = tile::lshPaddedLength(N, CHUNK);
  const int *buckets = a.buckets + size_t(row) * N;
  int *perm = a.perm + size_t(row) * Npad;
  const int *offsets = a.sort_counts + size_t(row) * NB * tiles + blk.tile;
  for (int k = tid; k < NB; k += NT)
    sm.hist[k] = offsets[size_t(k) * tiles];
  __syncthreads();

  // Warps in order; within a warp, lanes with the same bucket find each
  // other and take offset + their rank, and the lowest advances it.
  const int j = blk.tile * NT + tid;
  const bool valid = j < N;
  const int bk = valid ? buckets[j] : -1;
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

} // namespace attnc

#endif // ATTNC_CUDA_LSH_HASH_CUH
