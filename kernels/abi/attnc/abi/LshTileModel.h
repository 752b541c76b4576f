//===- LshTileModel.h - Tile shapes and shared memory of the LSH kernels --===//
//
// The numbers the compiler's tile pass, the CUDA LSH kernels
// (kernels/cuda/attnc/lsh.cuh) and the runtime agree on: the static
// shared memory of every LSH kernel, the shape constraints of their tiles,
// the default tile per (chunk, head dim) and the grids. constexpr only and
// no headers, so NVRTC and the host compiler both read it. See
// docs/kernels.md, "LSH kernels (Reformer)".
//
// The LSH kernels are SIMT and fp32 inside whatever T is: tiles are gathered
// by the sort permutation (rows are not contiguous in memory), converted to
// fp32 and kept in shared memory rows of D + 1 floats (an odd stride: the
// column-wise accesses of the dot products hit distinct banks). Sizes in
// bytes, LD = D + 1:
//
//   hash        4 * kLshMaxBuckets                  bucket histogram
//               + 4*NT*8 + 4*8*64                   q and rotation chunks
//   scatter     4 * kLshMaxBuckets                  bucket offsets
//   sort        4 * 32                              warp sums of the offsets scan
//   fwd         4 * (BQ*LD + BKV*LD                 Q; K, then V rows
//                    + BQ*(BKV+1) + BQ + BKV)       P tile; positions
//   bwd dQ      4 * (2*BQ*LD + 2*BKV*LD             Q, dO; K, V
//                    + BQ*(BKV+1) + 3*BQ + BKV)     G; round lse, delta, pos.
//   bwd dK/dV   4 * (2*BKV*LD + 2*BQ*LD             K, V; Q, dO
//                    + 2*BKV*(BQ+1) + 4*BQ + BKV)   P^T, G^T; round lse, round
//                                                   weight, delta, positions
//   combine, bwd preprocess, bwd combine: none
//
// Threads: WARPS * 32. The fwd and dQ kernels give each query row of the
// tile kThreads / BQ consecutive lanes (a power of two <= 32, so a row's
// softmax reductions are shuffles within one warp); dK/dV gives each key
// row kThreads / BKV lanes. Hence BQ and BKV must divide WARPS * 32 and be
// at least WARPS, and divide CHUNK (a tile never straddles two chunks).
// All kernels together use at most kLshSmemLimitBytes of static shared
// memory (no opt-in, every arch).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_ABI_LSHTILEMODEL_H
#define ATTNC_ABI_LSHTILEMODEL_H

#include "attnc/abi/TileModel.h" // the grid helpers

namespace attnc::tile {

/// Largest num_buckets the hash kernel handles (its histogram is in shared
/// memory). num_buckets must also be even and >= 2; the hash kernel writes
/// an all-pad permutation (every output 0, lse -inf) otherwise, so callers
/// must check.
constexpr int kLshMaxBuckets = 2048;
/// Static shared memory of one LSH kernel, in bytes.
constexpr int kLshSmemLimitBytes = 48 * 1024;
/// Positions per block of lsh_combine, lsh_bwd_preprocess, lsh_bwd_combine.
constexpr int kLshRowsPerBlock = 64;
/// A tile of the LSH kernels: BQ query slots and BKV key slots per tile,
/// WARPS warps per block (all seven kernels share it).
struct LshTile {
  int blockQ, blockKv, warps;
};

ATTNC_HOST_DEVICE constexpr int lshMax(int a, int b) { return a > b ? a : b; }
ATTNC_HOST_DEVICE constexpr int lshMin(int a, int b) { return a < b ? a : b; }

/// Sorted slots per (batch, head, round): N rounded up to whole chunks.
ATTNC_HOST_DEVICE constexpr int lshPaddedLength(int n, int chunk) {
  return (n + chunk - 1) / chunk * chunk;
}

/// lsh_hash's register-blocked dot products stage kLshHashDepth elements of
/// each position's q and of kLshHashCols rotation columns at a time.
constexpr int kLshHashDepth = 8, kLshHashCols = 64;
/// lsh_sort_scatter: the tile's offset of each bucket.
ATTNC_HOST_DEVICE constexpr int lshHashSmemBytes() { return 4 * kLshMaxBuckets; }
/// lsh_hash with `threads` threads (one position each): the histogram, a
/// q chunk [threads][kLshHashDepth] and a rotation chunk [kLshHashDepth]
/// [kLshHashCols], fp32.
ATTNC_HOST_DEVICE constexpr int lshHashBlockSmemBytes(int threads) {
  return 4 * kLshMaxBuckets + 4 * threads * kLshHashDepth + 4 * kLshHashDepth * kLshHashCols;
}
/// lsh_sort_offsets: one int per warp (at most 32).
ATTNC_HOST_DEVICE constexpr int lshScanSmemBytes() { return 4 * 32; }
ATTNC_HOST_DEVICE constexpr int lshFwdSmemBytes(int blockQ, int blockKv, int headDim) {
  return 4 * (blockQ * (headDim + 1) + blockKv * (headDim + 1) + blockQ * (blockKv + 1) + blockQ +
              blockKv);
}
ATTNC_HOST_DEVICE constexpr int lshBwdDqSmemBytes(int blockQ, int blockKv, int headDim) {
  return 4 * (2 * blockQ * (headDim + 1) + 2 * blockKv * (headDim + 1) + blockQ * (blockKv + 1) +
              3 * blockQ + blockKv);
}
ATTNC_HOST_DEVICE constexpr int lshBwdDkdvSmemBytes(int blockQ, int blockKv, int headDim) {
  return 4 * (2 * blockKv * (headDim + 1) + 2 * blockQ * (headDim + 1) +
              2 * blockKv * (blockQ + 1) + 4 * blockQ + blockKv);
}
/// The largest static shared memory of the seven kernels.
ATTNC_HOST_DEVICE constexpr int lshSmemBytes(const LshTile &t, int headDim) {
  return lshMax(
      lshMax(lshHashBlockSmemBytes(t.warps * 32), lshFwdSmemBytes(t.blockQ, t.blockKv, headDim)),
      lshMax(lshBwdDqSmemBytes(t.blockQ, t.blockKv, headDim),
             lshBwdDkdvSmemBytes(t.blockQ, t.blockKv, headDim)));
}

/// Shape constraints of the kernel templates (static_asserted there too).
ATTNC_HOST_DEVICE constexpr bool lshValidTile(const LshTile &t, int chunk, int headDim) {
  const int threads = t.warps * 32;
  return chunk >= 1 && headDim >= 1 && t.warps >= 1 && threads <= 1024 && t.blockQ >= 1 &&
         t.blockKv >= 1 && chunk % t.blockQ == 0 && chunk % t.blockKv == 0 &&
         threads % t.blockQ == 0 && threads % t.blockKv == 0 && threads / t.blockQ <= 32 &&
         threads / t.blockKv <= 32 && lshSmemBytes(t, headDim) <= kLshSmemLimitBytes;
}

/// The default tile for a chunk size and head dim: square tiles of the
/// largest power of two that divides the chunk, is at most 64 and fits
/// kLshSmemLimitBytes (the dK/dV kernel is the largest): 32 for D <= 64,
/// 16 for D <= 128 (D = 80, 96, 128), 8 for D = 256; 4 warps (fewer for
/// tiles under 4 rows, odd chunks end at 1 x 1 tiles with one warp).
/// Checked to compile without spills for sm_75/80/90 by
/// test/unit/kernels/CudaLshTest.cpp.
ATTNC_HOST_DEVICE constexpr LshTile lshDefaultTile(int chunk, int headDim) {
  for (int t = 64; t > 1; t /= 2) {
    const LshTile c{t, t, lshMin(4, t)};
    if (lshValidTile(c, chunk, headDim))
      return c;
  }
  return LshTile{1, 1, 1};
}

/// Grids of the kernels for B * H = bh and the given rounds: tiles x rows
/// flattened into x (TileModel.h's gridBlock; y is always 1), rows being
/// bh * rounds in the per-round kernels (lsh_fwd, lsh_bwd_dq,
/// lsh_bwd_dkdv) and bh in the others. Callers check x <= kMaxGridX.
struct LshGrid {
  long long x;
  int y;
};
ATTNC_HOST_DEVICE constexpr LshGrid lshFlatGrid(long long tiles, long long rows) {
  return {gridBlocks(tiles, rows), 1};
}
/// lsh_sort_offsets: one block per (b, h, round), the round fastest.
ATTNC_HOST_DEVICE constexpr LshGrid lshHashGrid(int bh, int rounds) {
  return lshFlatGrid(rounds, bh);
}
/// Tiles of positions of lsh_hash and lsh_sort_scatter: one position per
/// thread of the op's tile, so the hash and sort fill the GPU even where
/// B * H * rounds is small.
ATTNC_HOST_DEVICE constexpr int lshHashTiles(int n, int threads) { return gridTiles(n, threads); }
/// lsh_hash and lsh_sort_scatter: tiles x (bh * rounds) rows.
ATTNC_HOST_DEVICE constexpr LshGrid lshHashTileGrid(int n, int threads, int bh, int rounds) {
  return lshFlatGrid(lshHashTiles(n, threads), (long long)bh * rounds);
}
/// Ints of AttnLshArgs::sort_counts: [bh * rounds][buckets][hash tiles].
ATTNC_HOST_DEVICE constexpr long long lshSortCounts(int n, int threads, int buckets, int bh,
                                                    int rounds) {
  return (long long)bh * rounds * buckets * lshHashTiles(n, threads);
}
ATTNC_HOST_DEVICE constexpr LshGrid lshFwdGrid(const LshTile &t, int n, int chunk, int bh,
                                               int rounds) {
  return lshFlatGrid(gridTiles(lshPaddedLength(n, chunk), t.blockQ), (long long)bh * rounds);
}
ATTNC_HOST_DEVICE constexpr LshGrid lshBwdDqGrid(const LshTile &t, int n, int chunk, int bh,
                                                 int rounds) {
  return lshFlatGrid(gridTiles(lshPaddedLength(n, chunk), t.blockQ), (long long)bh * rounds);
}
ATTNC_HOST_DEVICE constexpr LshGrid lshBwdDkdvGrid(const LshTile &t, int n, int chunk, int bh,
                                                   int rounds) {
  return lshFlatGrid(gridTiles(lshPaddedLength(n, chunk), t.blockKv), (long long)bh * rounds);
}
/// lsh_combine, lsh_bwd_preprocess and lsh_bwd_combine.
ATTNC_HOST_DEVICE constexpr LshGrid lshRowGrid(int n, int bh) {
  return lshFlatGrid(gridTiles(n, kLshRowsPerBlock), bh);
}

//===-- The forward on tensor cores (lsh_fwd_mma) -------------------------===//
//
// fp16 and bf16 run the forward as warp matrix products (mma.cuh, the
// flash kernels' machinery): each warp owns 16 query slots (blockQ = 16 *
// warps), the key tile is blockKv slots, and Q, K and V rows are gathered
// by the permutation as T into padded rows (TileModel.h's rowBytes), with
// each key's 1 / max(|q_j|, floor) kept beside them:
//
//   mma fwd     BQ*row(D) + 2*BKV*row(D)            Q; K and V (same slots)
//               + 4*BKV + 4*(BQ + BKV)              key scales; positions
//
// Chunks that are not a multiple of 16 and fp32 keep the SIMT forward.

/// Static shared memory of lsh_fwd_mma.
ATTNC_HOST_DEVICE constexpr int lshMmaFwdSmemBytes(int blockQ, int blockKv, int headDim,
                                                   int elemBytes) {
  return (blockQ + 2 * blockKv) * rowBytes(headDim, elemBytes) + 4 * blockKv +
         4 * (blockQ + blockKv);
}

/// Shape constraints of lsh_fwd_mma (static_asserted there too): whole
/// m16 row tiles per warp, k16 steps, tiles within one chunk, S and O
/// within the forward's accumulator budget, and the 48 KiB of static
/// shared memory.
ATTNC_HOST_DEVICE constexpr bool lshMmaFwdValidTile(const LshTile &t, int chunk, int headDim,
                                                    int elemBytes) {
  return elemBytes == 2 && headDim % 16 == 0 && headDim > 0 && t.warps >= 1 &&
         t.blockQ == kRowsPerWarp * t.warps && t.blockKv % 16 == 0 && t.blockKv > 0 &&
         chunk % t.blockQ == 0 && chunk % t.blockKv == 0 &&
         (t.blockKv + headDim) / 2 <= accFloatBudget(elemBytes, false) &&
         lshMmaFwdSmemBytes(t.blockQ, t.blockKv, headDim, elemBytes) <= kLshSmemLimitBytes;
}

/// The tile of lsh_fwd_mma for a chunk, head dim and element size: the
/// largest query tile (64, 32, 16 slots) then key tile that divide the
/// chunk and fit; warps == 0 where there is none (fp32, chunks that are
/// not a multiple of 16): those keep lsh_fwd.
ATTNC_HOST_DEVICE constexpr LshTile lshMmaFwdTile(int chunk, int headDim, int elemBytes) {
  for (int bq = 64; bq >= 16; bq /= 2)
    for (int bkv = 64; bkv >= 16; bkv /= 2) {
      const LshTile t{bq, bkv, bq / kRowsPerWarp};
      if (lshMmaFwdValidTile(t, chunk, headDim, elemBytes))
        return t;
    }
  return LshTile{0, 0, 0};
}
ATTNC_HOST_DEVICE constexpr bool lshMmaFwd(int chunk, int headDim, int elemBytes) {
  return lshMmaFwdTile(chunk, headDim, elemBytes).warps > 0;
}
/// The tile the forward's per-round kernel launches with: lsh_fwd_mma's
/// where it has one, else the op's (`op`, lsh_fwd). The emitter, the
/// runtime and attnc perf all go by this rule.
ATTNC_HOST_DEVICE constexpr LshTile lshFwdLaunchTile(const LshTile &op, int chunk, int headDim,
                                                     int elemBytes) {
  return lshMmaFwd(chunk, headDim, elemBytes) ? lshMmaFwdTile(chunk, headDim, elemBytes) : op;
}

//===-- The backward on tensor cores (lsh_bwd_dq_mma, lsh_bwd_dkdv_mma) ---===//
//
// Square tiles of S = 16 * warps slots: dQ keeps S query slots and streams
// S key slots, dK/dV keeps S key slots and streams S query slots. Both hold
// their Q, dO, K and V rows as T, the key factors and the query slots'
// round lse, round weight and delta:
//
//   mma bwd     4*S*row(D)                          Q, dO, K, V
//               + 4*S + 12*S + 8*S                  key scales; lse, w,
//                                                   delta; positions
//
// Registers: dK/dV holds S^T and dP^T (S/2 floats each) and dK, dV (D/2
// each), S + D floats, within the accumulator budget; dQ holds S + D/2.
// D = 256 has no such tile and keeps the SIMT backward.

/// Static shared memory of lsh_bwd_dq_mma and lsh_bwd_dkdv_mma.
ATTNC_HOST_DEVICE constexpr int lshMmaBwdSmemBytes(int slots, int headDim, int elemBytes) {
  return 4 * slots * rowBytes(headDim, elemBytes) + 24 * slots;
}

/// Shape constraints of the tensor-core backward (static_asserted there).
ATTNC_HOST_DEVICE constexpr bool lshMmaBwdValidTile(const LshTile &t, int chunk, int headDim,
                                                    int elemBytes) {
  return elemBytes == 2 && headDim % 16 == 0 && headDim > 0 && t.warps >= 1 &&
         t.blockQ == kRowsPerWarp * t.warps && t.blockKv == t.blockQ && chunk % t.blockQ == 0 &&
         t.blockQ + headDim <= accFloatBudget(elemBytes) &&
         lshMmaBwdSmemBytes(t.blockQ, headDim, elemBytes) <= kLshSmemLimitBytes;
}

/// The tile of the tensor-core backward: the largest square tile of 64,
/// 32 or 16 slots that divides the chunk and fits; warps == 0 where there
/// is none (fp32, chunks that are not a multiple of 16, D = 256).
ATTNC_HOST_DEVICE constexpr LshTile lshMmaBwdTile(int chunk, int headDim, int elemBytes) {
  for (int s = 64; s >= 16; s /= 2) {
    const LshTile t{s, s, s / kRowsPerWarp};
    if (lshMmaBwdValidTile(t, chunk, headDim, elemBytes))
      return t;
  }
  return LshTile{0, 0, 0};
}
ATTNC_HOST_DEVICE constexpr bool lshMmaBwd(int chunk, int headDim, int elemBytes) {
  return lshMmaBwdTile(chunk, headDim, elemBytes).warps > 0;
}
/// The tile the backward's dQ and dK/dV launch with, by the same rule.
ATTNC_HOST_DEVICE constexpr LshTile lshBwdLaunchTile(const LshTile &op, int chunk, int headDim,
                                                     int elemBytes) {
  return lshMmaBwd(chunk, headDim, elemBytes) ? lshMmaBwdTile(chunk, headDim, elemBytes) : op;
}

} // namespace attnc::tile

#endif // ATTNC_ABI_LSHTILEMODEL_H
