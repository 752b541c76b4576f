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

/// Row `row`'s (bh * R + r) counts, then offsets, in sort_counts:
/// [bucket][tile] with `tiles` tiles of positions.
ATTNC_HD int *lshSortCountsOf(const AttnLshArgs &a, int row, int tiles) {
  return a.sort_counts + size_t(row) * a.num_buckets * tiles;
}

/// Whether the hash kernels handle num_buckets (the compiler rejects the
/// others; the kernels then write an all-pad permutation).
ATTNC_HD bool lshBucketsSupported(int nb) {
  return nb >= 2 && nb % 2 == 0 && nb <= tile::kLshMaxBuckets;
}

/// The running first maximum of a position's scores over the columns a
/// thread has seen, in increasing order: strict >, so the first index wins
/// ties; kNoColumn until a score beats -inf.
constexpr int kNoColumn = 0x7fffffff;
ATTNC_HD void lshArgmaxStep(float y, int k, float &best, int &arg) {
  if (y > best)
    best = y, arg = k;
}
/// Folds in another lane's running maximum: the larger score, or on equal
/// scores the smaller column, is the one the sequential scan finds first.
ATTNC_HD void lshArgmaxMerge(float y, int k, float &best, int &arg) {
  if (y > best || (y == best && k < arg))
    best = y, arg = k;
}

template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS, class T,
          class Variant>
__device__ void lsh_hash(const AttnLshArgs &a) {
  using Tr = LshTraits<CHUNK, D, BQ, BKV, WARPS>;
  constexpr int NT = Tr::kThreads;
  using Smem = LshHashBlockSmem<NT>;
  static_assert(sizeof(Smem) == tile::lshHashBlockSmemBytes(NT), "hash smem");
  // Register blocking: 8 lanes share TM positions and split the chunk's KC
  // columns, TN each (lane cg takes columns cg, cg + 8, ...).
  constexpr int DC = tile::kLshHashDepth, KC = tile::kLshHashCols, CG = 8;
  constexpr int PG = NT / CG, TM = NT / PG, TN = KC / CG;
  static_assert(NT % CG == 0 && KC % CG == 0, "whole lane groups");
  ATTNC_LSH_SHARED(Smem, sm);
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

  // y_jk = sum_d q_jd R_r[d][k] for the tile's positions, KC columns at a
  // time: each accumulator takes fmaf(q_jd, R_r[d][k], acc) from 0 in order
  // d = 0..D-1, as the file comment of lsh.cuh specifies, with q and the
  // rotations staged DC rows at a time in shared memory (fp32).
  const float *rot = a.rotations + size_t(r) * D * half;
  const int pg = tid / CG, cg = tid % CG;
  float bestPos[TM], bestNeg[TM];
  int argPos[TM], argNeg[TM];
#pragma unroll
  for (int m = 0; m < TM; ++m)
    bestPos[m] = bestNeg[m] = negInf(), argPos[m] = argNeg[m] = kNoColumn;
#pragma unroll 1
  for (int k0 = 0; k0 < half; k0 += KC) {
    float y[TM][TN];
#pragma unroll
    for (int m = 0; m < TM; ++m)
#pragma unroll
      for (int n = 0; n < TN; ++n)
        y[m][n] = 0.f;
#pragma unroll 1
    for (int d0 = 0; d0 < D; d0 += DC) {
      __syncthreads(); // the previous chunks are consumed
                       // Unrolled (fixed trip counts), so the dot products' loop is the
                       // innermost one, which attnc perf counts.
#pragma unroll
      for (int i = 0; i < DC; ++i) {
        const int e = tid + i * NT, p = e / DC, d = d0 + e % DC, j = j0 + p;
        sm.q[e] = j < j1 && d < D ? lshLoad(q + size_t(j) * D + d) : 0.f;
      }
#pragma unroll
      for (int i = 0; i < (DC * KC + NT - 1) / NT; ++i) {
        const int e = tid + i * NT, d = d0 + e / KC, k = k0 + e % KC;
        if (e < DC * KC)
          sm.rot[e] = d < D && k < half ? rot[size_t(d) * half + k] : 0.f;
      }
      __syncthreads();
#pragma unroll
      for (int dd = 0; dd < DC; ++dd) {
        if (D % DC != 0 && d0 + dd >= D)
          break;
        float xq[TM], xr[TN];
#pragma unroll
        for (int m = 0; m < TM; ++m)
          xq[m] = sm.q[(pg + PG * m) * DC + dd];
#pragma unroll
        for (int n = 0; n < TN; ++n)
          xr[n] = sm.rot[dd * KC + cg + CG * n];
#pragma unroll
        for (int m = 0; m < TM; ++m)
#pragma unroll
          for (int n = 0; n < TN; ++n)
            y[m][n] = fmaf(xq[m], xr[n], y[m][n]);
      }
    }
    // This lane's columns of the chunk, in increasing order.
#pragma unroll
    for (int n = 0; n < TN; ++n) {
      const int k = k0 + cg + CG * n;
      if (k < half) {
#pragma unroll
        for (int m = 0; m < TM; ++m) {
          lshArgmaxStep(y[m][n], k, bestPos[m], argPos[m]);
          lshArgmaxStep(-y[m][n], k, bestNeg[m], argNeg[m]);
        }
      }
    }
  }
  // The 8 lanes of a position group, merged (xor butterflies: every lane
  // gets the same result, whatever the order of the merges).
#pragma unroll
  for (int m = 0; m < TM; ++m) {
#pragma unroll
    for (int off = 1; off < CG; off <<= 1) {
      const float vp = __shfl_xor_sync(kFullMask, bestPos[m], off);
      const int ip = __shfl_xor_sync(kFullMask, argPos[m], off);
      const float vn = __shfl_xor_sync(kFullMask, bestNeg[m], off);
      const int in = __shfl_xor_sync(kFullMask, argNeg[m], off);
      lshArgmaxMerge(vp, ip, bestPos[m], argPos[m]);
      lshArgmaxMerge(vn, in, bestNeg[m], argNeg[m]);
    }
  }
  __syncthreads(); // the histogram is zeroed
  if (cg == 0) {
#pragma unroll
    for (int m = 0; m < TM; ++m) {
      const int j = j0 + pg + PG * m;
      if (j < j1) {
        // No score beat -inf: the sequential scan's column 0.
        const int ap = argPos[m] == kNoColumn ? 0 : argPos[m];
        const int an = argNeg[m] == kNoColumn ? 0 : argNeg[m];
        // [y; -y]: the positive half comes first, so it wins ties.
        const int bk = bestPos[m] >= bestNeg[m] ? ap : half + an;
        buckets[j] = bk;
        atomicAdd(&sm.hist[bk], 1); // integer: the counts do not depend on order
      }
    }
  }
  __syncthreads();
  int *counts = lshSortCountsOf(a, row, tiles) + blk.tile;
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
  int *counts = lshSortCountsOf(a, row, tiles);
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
  const int *offsets = lshSortCountsOf(a, row, tiles) + blk.tile;
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
