//===- lsh_bwd_mma.cuh - LSH attention backward on tensor cores ----------===//
//
// lsh_bwd_dq_mma and lsh_bwd_dkdv_mma: one round's gradients with the
// semantics of lsh_bwd_dq and lsh_bwd_dkdv (lsh.cuh), as warp matrix
// products, for fp16 and bf16 where LshTileModel.h's lshMmaBwdTile gives a
// tile (square, S = 16 * WARPS slots). Grids lshBwdDqGrid and
// lshBwdDkdvGrid of that tile, WARPS * 32 threads, static shared memory
// lshMmaBwdSmemBytes. lsh_bwd_preprocess and lsh_bwd_combine run before
// and after them unchanged.
//
// Both kernels keep S slots of one side (dQ: query slots; dK/dV: key
// slots), each warp 16 of them, and stream the other side's slots in tiles
// of S, gathered by the permutation straight into shared memory as T (as
// in lsh_fwd_mma), with each key's factor 1 / max(|q_j|, floor) and each
// query slot's round lse, round weight (lshRoundWeight, one thread per
// slot) and delta in shared memory. Per tile:
//
//   dQ     S = Q K^T, dP = dO V^T (16 queries x S keys per warp);
//          p, g of every pair (lshPairGrad on q . k_j = S * factor_j);
//          dQ += (g * factor_j) K, from registers;
//   dK/dV  S^T = K Q^T, dP^T = V dO^T (16 keys x S queries per warp);
//          p, g as above; dV += P^T dO, dK += G^T Q, from registers.
//
// round_dq, round_dk and round_dv (fp32) go to the original positions. No
// floating-point atomics: each output row belongs to one warp, and the
// results are the same on every run.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_LSH_BWD_MMA_CUH
#define ATTNC_CUDA_LSH_BWD_MMA_CUH

#include "attnc/lsh_fwd_mma.cuh"

namespace attnc {

template <int S, int D, class T> struct LshMmaBwdSmem {
  static constexpr int kLd = SmemLd<T, D>::value; ///< elements per row
  T q[S * kLd];
  T dout[S * kLd];
  T k[S * kLd]; ///< the key slots' q rows
  T v[S * kLd];
  float keyScale[S]; ///< 1 / max(|q_j|, kSharedQkNormFloor)
  float lse[S];      ///< the query slots' round lse of this round
  float w[S];        ///< ... their round weights (lshRoundWeight)
  float delta[S];
  int qpos[S];
  int kpos[S];
};

/// Round lse, round weight and delta of the S query slots whose positions
/// are sm.qpos (-1: pad slot, which gets -inf, 0, 0), one thread per slot,
/// into sm.lse, sm.w, sm.delta.
template <int S, int NTH, class Smem>
ATTNC_HD void lshQueryStats(Smem &sm, const AttnLshArgs &a, const LshRound &rd, int tid) {
  const float *roundLse = a.round_lse + size_t(rd.bh) * a.rounds * rd.N; // [R, N]
  for (int x = tid; x < S; x += NTH) {
    const int i = sm.qpos[x];
    const float own = i >= 0 ? a.round_lse[rd.row0 + i] : negInf();
    sm.lse[x] = own;
    sm.w[x] = lshRoundWeight<1>(roundLse, a.rounds, rd.N, i, own, 0);
    sm.delta[x] = i >= 0 ? a.delta[size_t(rd.bh) * rd.N + i] : 0.f;
  }
}

/// p and g of every pair of a warp's S and dP tiles (layout L), in place:
/// s <- p (with the dropout factor), dp <- g (lshPairGrad). ROWS_ARE_KEYS:
/// the tiles are S^T and dP^T (dK/dV), and dK takes g as it is. Otherwise
/// (dQ) g comes out times the key's factor: dq_i += g k_j with k_j = q_j
/// * factor_j, and the products read the q rows. row0 is the warp's first row in the
/// block's slots. What belongs to a row (its position, and its key factor
/// or query statistics) is read once per tile; what belongs to a column
/// pair, colOf(n, 0) and colOf(n, 1), which are adjacent and even, in
/// 8-byte loads.
template <class V, class L, bool ROWS_ARE_KEYS, int NT, class Smem>
ATTNC_HD void lshTileGrads(float (&s)[NT][4], float (&dp)[NT][4], const LshCtx &c, const Smem &sm,
                           int row0) {
  const int lane = threadIdx.x % 32;
  const int rowLo = row0 + L::rowBase(lane), col0 = L::colBase(lane);
  // Per row r (0: lo, 1: hi): position and, for key rows, the factor; for
  // query rows, lse, weight and delta.
  int rowPos[2];
  float rowA[2], rowB[2], rowC[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int slot = rowLo + L::kRowStep * r;
    if constexpr (ROWS_ARE_KEYS) {
      rowPos[r] = sm.kpos[slot];
      rowA[r] = sm.keyScale[slot];
      rowB[r] = rowC[r] = 0.f;
    } else {
      rowPos[r] = sm.qpos[slot];
      rowA[r] = sm.lse[slot];
      rowB[r] = sm.w[slot];
      rowC[r] = sm.delta[slot];
    }
  }
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const int col = col0 + L::colOf(n, 0);
    int2 colPos;
    float2 colA, colB = make_float2(0.f, 0.f), colC = make_float2(0.f, 0.f);
    if constexpr (ROWS_ARE_KEYS) {
      colPos = *reinterpret_cast<const int2 *>(sm.qpos + col);
      colA = *reinterpret_cast<const float2 *>(sm.lse + col);
      colB = *reinterpret_cast<const float2 *>(sm.w + col);
      colC = *reinterpret_cast<const float2 *>(sm.delta + col);
    } else {
      colPos = *reinterpret_cast<const int2 *>(sm.kpos + col);
      colA = *reinterpret_cast<const float2 *>(sm.keyScale + col);
    }
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int r = e >> 1;
      const bool hi = e & 1;
      const int cp = hi ? colPos.y : colPos.x;
      const float ca = hi ? colA.y : colA.x, cb = hi ? colB.y : colB.x, cc = hi ? colC.y : colC.x;
      float p, g;
      if constexpr (ROWS_ARE_KEYS) // row: key j; column: query i
        lshPairGrad<V>(c, s[n][e] * rowA[r], dp[n][e], cp, rowPos[r], ca, cb, cc, p, g);
      else // row: query i; column: key j
        lshPairGrad<V>(c, s[n][e] * ca, dp[n][e], rowPos[r], cp, rowA[r], rowB[r], rowC[r], p, g);
      s[n][e] = p;
      dp[n][e] = ROWS_ARE_KEYS ? g : g * ca;
    }
  }
}

/// The first tiles of either backward kernel: query slots qslots[0..S)
/// and key slots kslots[0..S), their statistics, and their Q, dO, K and V
/// rows in one copy group, awaited by every thread.
template <int S, int D, int NTH, class T, class Smem>
ATTNC_HD void lshFirstTiles(Smem &sm, const AttnLshArgs &a, const LshRound &rd, size_t slice,
                            const int *qslots, const int *kslots, int tid) {
  for (int x = tid; x < S; x += NTH) {
    sm.qpos[x] = qslots[x];
    sm.kpos[x] = kslots[x];
  }
  __syncthreads();
  lshQueryStats<S, NTH>(sm, a, rd, tid);
  const T *gq = static_cast<const T *>(a.q) + slice * D;
  gatherTile<S, D, NTH>(sm.q, gq, sm.qpos, tid);
  gatherTile<S, D, NTH>(sm.dout, static_cast<const T *>(a.dout) + slice * D, sm.qpos, tid);
  gatherTile<S, D, NTH>(sm.k, gq, sm.kpos, tid);
  gatherTile<S, D, NTH>(sm.v, static_cast<const T *>(a.v) + slice * D, sm.kpos, tid);
  cpAsyncCommit();
  cpAsyncWait<0>();
  __syncthreads();
}

/// Writes a warp's fp32 accumulator rows to rows pos[slot] of `out` ([N,
/// D] of one round; pad slots, pos < 0, are skipped).
template <class L, int NO>
ATTNC_HD void lshStoreRows(float *out, const float (&acc)[NO][4], const int *pos, int row0, int D) {
  const int lane = threadIdx.x % 32, col0 = L::colBase(lane);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int x = pos[row0 + L::rowBase(lane) + L::kRowStep * r];
    if (x < 0)
      continue;
    float *o = out + size_t(x) * D + col0;
#pragma unroll
    for (int n = 0; n < NO; ++n)
      *reinterpret_cast<float2 *>(o + L::colOf(n, 0)) =
          make_float2(acc[n][2 * r], acc[n][2 * r + 1]);
  }
}

/// round_dq of S query slots of one round.
template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS, class T,
          class Variant>
__device__ void lsh_bwd_dq_mma(const AttnLshArgs &a) {
  constexpr int S = BQ;
  using Smem = LshMmaBwdSmem<S, D, T>;
  static_assert(tile::lshMmaBwdValidTile(tile::LshTile{BQ, BKV, WARPS}, CHUNK, D, int(sizeof(T))),
                "LshTileModel.h rejects this tile");
  static_assert(sizeof(Smem) == tile::lshMmaBwdSmemBytes(S, D, int(sizeof(T))), "layout");
  using Mma = WarpMma<T>;
  constexpr int NTH = WARPS * 32, LD = Smem::kLd, NS = S / 8, NO = D / 8;
  using Layout = AccLayout<T, NS>;
  static_assert(IsSame<Layout, AccLayout<T, NO>>::value, "S and dQ tiles share rows");
  ATTNC_LSH_SHARED(Smem, sm);

  const int tid = threadIdx.x, warp = tid / 32;
  const LshBlock blk = lshBlock<CHUNK, BEFORE, AFTER>(a, S);
  if (blk.empty)
    return;
  const LshRound &rd = blk.rd;
  const int t0 = blk.t0, ks = blk.lo, ke = blk.hi, *perm = blk.perm;
  const size_t slice = blk.slice;
  const T *gq = static_cast<const T *>(a.q) + slice * D; // the keys' rows
  const T *gv = static_cast<const T *>(a.v) + slice * D;
  const LshCtx ctx = lshCtx<Variant>(a, rd.b, rd.h, rd.r);

  lshFirstTiles<S, D, NTH, T>(sm, a, rd, slice, perm + t0, perm + ks, tid);

  const int row0 = warp * tile::kRowsPerWarp;
  float dq[NO][4];
  zeroAcc(dq);
  for (int kt = ks; kt < ke; kt += S) {
    lshKeyScales<S, D, NTH>(sm.keyScale, sm.k, LD, tid);
    __syncthreads(); // key factors complete

    float s[NS][4], dp[NS][4];
    zeroAcc(s);
    zeroAcc(dp);
    Mma::template gemmSS<D, NS, false>(s, sm.q + row0 * LD, LD, sm.k, LD);
    Mma::template gemmSS<D, NS, false>(dp, sm.dout + row0 * LD, LD, sm.v, LD);
    lshTileGrads<Variant, Layout, false>(s, dp, ctx, sm, row0); // dp: g * factor_j
    Mma::template gemmRS<S, NO>(dq, dp, sm.k, LD);

    if (kt + S < ke)
      lshNextTile<S, D, NTH>(sm.kpos, perm + kt + S, sm.k, gq, sm.v, gv, tid, [] {});
  }
  lshStoreRows<Layout>(a.round_dq + rd.row0 * D, dq, sm.qpos, row0, D);
}

/// round_dk, round_dv of S key slots of one round.
template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS, class T,
          class Variant>
__device__ void lsh_bwd_dkdv_mma(const AttnLshArgs &a) {
  constexpr int S = BKV;
  using Smem = LshMmaBwdSmem<S, D, T>;
  static_assert(tile::lshMmaBwdValidTile(tile::LshTile{BQ, BKV, WARPS}, CHUNK, D, int(sizeof(T))),
                "LshTileModel.h rejects this tile");
  static_assert(sizeof(Smem) == tile::lshMmaBwdSmemBytes(S, D, int(sizeof(T))), "layout");
  using Mma = WarpMma<T>;
  constexpr int NTH = WARPS * 32, LD = Smem::kLd, NS = S / 8, NO = D / 8;
  using Layout = AccLayout<T, NS>;
  static_assert(IsSame<Layout, AccLayout<T, NO>>::value, "S and dK tiles share rows");
  ATTNC_LSH_SHARED(Smem, sm);

  const int tid = threadIdx.x, warp = tid / 32;
  // The queries of chunks c-AFTER..c+BEFORE see this block's keys.
  const LshBlock blk = lshBlock<CHUNK, AFTER, BEFORE>(a, S);
  if (blk.empty)
    return;
  const LshRound &rd = blk.rd;
  const int t0 = blk.t0, qs = blk.lo, qe = blk.hi, *perm = blk.perm;
  const size_t slice = blk.slice;
  const T *gq = static_cast<const T *>(a.q) + slice * D;
  const T *gdo = static_cast<const T *>(a.dout) + slice * D;
  const LshCtx ctx = lshCtx<Variant>(a, rd.b, rd.h, rd.r);

  lshFirstTiles<S, D, NTH, T>(sm, a, rd, slice, perm + qs, perm + t0, tid);
  lshKeyScales<S, D, NTH>(sm.keyScale, sm.k, LD, tid); // the kept keys': fixed
  __syncthreads();

  const int row0 = warp * tile::kRowsPerWarp;
  float dk[NO][4], dv[NO][4];
  zeroAcc(dk);
  zeroAcc(dv);
  for (int qt = qs; qt < qe; qt += S) {
    float s[NS][4], dp[NS][4];
    zeroAcc(s);
    zeroAcc(dp);
    Mma::template gemmSS<D, NS, false>(s, sm.k + row0 * LD, LD, sm.q, LD);
    Mma::template gemmSS<D, NS, false>(dp, sm.v + row0 * LD, LD, sm.dout, LD);
    lshTileGrads<Variant, Layout, true>(s, dp, ctx, sm, row0);
    Mma::template gemmRS<S, NO>(dv, s, sm.dout, LD);
    Mma::template gemmRS<S, NO>(dk, dp, sm.q, LD);

    if (qt + S < qe)
      lshNextTile<S, D, NTH>(sm.qpos, perm + qt + S, sm.q, gq, sm.dout, gdo, tid,
                             [&] { lshQueryStats<S, NTH>(sm, a, rd, tid); });
  }
  lshStoreRows<Layout>(a.round_dk + rd.row0 * D, dk, sm.kpos, row0, D);
  lshStoreRows<Layout>(a.round_dv + rd.row0 * D, dv, sm.kpos, row0, D);
}

} // namespace attnc

#endif // ATTNC_CUDA_LSH_BWD_MMA_CUH
