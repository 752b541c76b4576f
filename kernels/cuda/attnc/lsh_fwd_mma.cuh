//===- lsh_fwd_mma.cuh - LSH attention forward on tensor cores -----------===//
//
// lsh_fwd_mma: one round's chunk attention with lsh_fwd's semantics
// (lsh.cuh) as warp matrix products, for fp16 and bf16 where
// LshTileModel.h's lshMmaFwdTile gives a tile. Grid lshFwdGrid of that
// tile, WARPS * 32 threads, static shared memory lshMmaFwdSmemBytes.
//
// A block takes BQ = 16 * WARPS query slots t0.. of one chunk c; warp w
// owns slots [16w, 16w + 16) with their S tile, online softmax and O
// accumulator in registers, as in flash_fwd. The block visits the key
// slots of chunks max(0, c - BEFORE) .. min(C - 1, c + AFTER) in tiles of
// BKV:
//   - the tile's q rows (shared-QK keys, not normalised) and v rows are
//     gathered by the permutation straight into shared memory as T, in
//     16-byte copies (cp.async on sm_80+), pad slots zero-filled;
//   - each key's factor 1 / max(|q_j|, floor) is computed from its
//     gathered row;
//   - S = Q K^T on tensor cores, column j scaled by its key's factor: the
//     score of (i, j) is q_i . k_j with k_j = q_j / max(|q_j|, floor), and
//     no fp32 key buffer is read;
//   - masks, scores and dropout of each pair come from lsh_common.cuh
//     (attnc/common/lsh_pair.h), positions from the permutation;
//   - online softmax in log2 units, then O += P V from registers.
// round_out and round_lse go to the queries' original positions as fp32,
// and lsh_combine follows unchanged. The backward (lsh_bwd.cuh) reads
// round_lse as it does from lsh_fwd.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_LSH_FWD_MMA_CUH
#define ATTNC_CUDA_LSH_FWD_MMA_CUH

#include "attnc/copy.cuh"
#include "attnc/lsh_common.cuh"
#include "attnc/mma.cuh"
#include "attnc/softmax.cuh"

namespace attnc {

template <int BQ, int BKV, int D, class T> struct LshMmaFwdSmem {
  static constexpr int kLd = SmemLd<T, D>::value; ///< elements per row
  T q[BQ * kLd];
  T k[BKV * kLd]; ///< the key slots' q rows
  T v[BKV * kLd];
  float keyScale[BKV]; ///< 1 / max(|q_j|, kSharedQkNormFloor)
  int qpos[BQ];
  int kpos[BKV];
};

// A row that keeps only its own key has lse = the self score. The softmax
// works in log2 units; the self score must come back from them exactly, or
// the backward's p = exp(s - lse) of such rows would be off (lsh.cuh).
static_assert(kLshSelfScore * kLog2e * kLn2 == kLshSelfScore,
              "the self score survives the log2 round trip");

/// Lanes per row of lshKeyScales: NTH / ROWS within [1, 32], halved until
/// each lane's share of D is whole 4-element loads.
template <int ROWS, int D, int NTH> ATTNC_HD constexpr int lshKeyScaleLanes() {
  int t = NTH / ROWS < 1 ? 1 : NTH / ROWS > 32 ? 32 : NTH / ROWS;
  while (t > 1 && (D / t) % 4 != 0)
    t /= 2;
  return t;
}

/// keyScale[r] = 1 / max(|row r|, kSharedQkNormFloor) for the ROWS rows
/// of a shared tile, by NTH threads: TPR consecutive lanes per row, each
/// summing D / TPR elements in 4-element loads, then xor butterflies
/// (zero-filled pad rows get 1 / floor; they are never kept). Every lane
/// runs every pass, so the butterflies see full warps.
template <int ROWS, int D, int NTH, class T>
ATTNC_HD void lshKeyScales(float *keyScale, const T *rows, int ld, int tid) {
  constexpr int TPR = lshKeyScaleLanes<ROWS, D, NTH>(), COLS = D / TPR, STEP = NTH / TPR;
  static_assert(D % TPR == 0 && COLS % 4 == 0 && NTH % 32 == 0, "whole 4-element loads");
  const int sub = tid % TPR;
#pragma unroll 1
  for (int r0 = 0; r0 < ROWS; r0 += STEP) {
    const int r = r0 + tid / TPR;
    float s = 0.f;
    if (r < ROWS) {
      const T *x = rows + r * ld + sub * COLS;
#pragma unroll
      for (int d = 0; d < COLS; d += 4) {
        const float4 v = Elem<T>::load4(x + d);
        s = fmaf(v.x, v.x, fmaf(v.y, v.y, fmaf(v.z, v.z, fmaf(v.w, v.w, s))));
      }
    }
    s = lshGroupSum<TPR>(s);
    if (r < ROWS && sub == 0)
      keyScale[r] = 1.f / fmaxf(sqrtf(s), kSharedQkNormFloor);
  }
}

/// The next tile of a tensor-core LSH loop: once every warp is done with
/// the current one, pos[x] = slots[x] for x < ROWS, then `between()` (with
/// the new slots visible), then rows pos of gx into x and of gy into y in
/// one copy group, awaited by every thread.
template <int ROWS, int D, int NTH, class T, class F>
ATTNC_HD void lshNextTile(int *pos, const int *slots, T *x, const T *gx, T *y, const T *gy, int tid,
                          F &&between) {
  __syncthreads(); // the current tile and its slots are consumed
  for (int i = tid; i < ROWS; i += NTH)
    pos[i] = slots[i];
  __syncthreads();
  between();
  gatherTile<ROWS, D, NTH>(x, gx, pos, tid);
  gatherTile<ROWS, D, NTH>(y, gy, pos, tid);
  cpAsyncCommit();
  cpAsyncWait<0>();
  __syncthreads(); // landed for all
}

/// Raw q . q_j tile -> logits in log2 units, -inf where the pair is not
/// kept. The thread's rows are queries iLo, iHi (positions; -1: pad slot);
/// column col is key position kpos[col] with factor keyScale[col].
/// Columns colOf(n, 0) and colOf(n, 1) are adjacent and even, so each
/// pair of them is one 8-byte load. Without a score modifier a kept
/// logit is s * (keyScale * scale * log2 e), or the self score.
template <class V, class L, int NT>
ATTNC_HD void lshLogits(float (&s)[NT][4], const LshCtx &c, int iLo, int iHi, const int *kpos,
                        const float *keyScale) {
  const int col0 = L::colBase(threadIdx.x % 32);
  const float scaleLog2 = c.scale * kLog2e;
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const int col = col0 + L::colOf(n, 0);
    const int2 j = *reinterpret_cast<const int2 *>(kpos + col);
    const float2 f = *reinterpret_cast<const float2 *>(keyScale + col);
    const float g[2] = {f.x * scaleLog2, f.y * scaleLog2};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = e < 2 ? iLo : iHi, kj = e & 1 ? j.y : j.x;
      float x;
      if constexpr (V::kHasScoreMod)
        x = lshScore<V>(c, s[n][e] * (e & 1 ? f.y : f.x), i, kj) * kLog2e;
      else
        x = kj == i ? kLshSelfScore * kLog2e : s[n][e] * g[e & 1];
      s[n][e] = lshKept<V>(c, i, kj) ? x : negInf();
    }
  }
}

/// Attention dropout on the probability tile (layout as lshLogits), after
/// the softmax summed it: the sums keep every probability, only V's
/// weights are dropped (lsh_fwd does the same).
template <class V, class L, int NT>
ATTNC_HD void lshDropoutProbs(float (&p)[NT][4], const LshCtx &c, int iLo, int iHi,
                              const int *kpos) {
  const int col0 = L::colBase(threadIdx.x % 32);
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    const int2 j = *reinterpret_cast<const int2 *>(kpos + col0 + L::colOf(n, 0));
#pragma unroll
    for (int e = 0; e < 4; ++e)
      if (p[n][e] != 0.f)
        p[n][e] *= lshDropout<V>(c, e < 2 ? iLo : iHi, e & 1 ? j.y : j.x);
  }
}

template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS, class T,
          class Variant>
__device__ void lsh_fwd_mma(const AttnLshArgs &a) {
  using Smem = LshMmaFwdSmem<BQ, BKV, D, T>;
  static_assert(tile::lshMmaFwdValidTile(tile::LshTile{BQ, BKV, WARPS}, CHUNK, D, int(sizeof(T))),
                "LshTileModel.h rejects this tile");
  static_assert(sizeof(Smem) == tile::lshMmaFwdSmemBytes(BQ, BKV, D, int(sizeof(T))), "layout");
  using Mma = WarpMma<T>;
  constexpr int NTH = WARPS * 32, LD = Smem::kLd, NS = BKV / 8, NO = D / 8;
  using Layout = AccLayout<T, NS>;
  static_assert(IsSame<Layout, AccLayout<T, NO>>::value, "S and O tiles share rows");
  ATTNC_LSH_SHARED(Smem, sm);

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const LshBlock blk = lshBlock<CHUNK, BEFORE, AFTER>(a, BQ);
  if (blk.empty) // only pad slots
    return;
  const LshRound &rd = blk.rd;
  const int t0 = blk.t0, ks = blk.lo, ke = blk.hi, *perm = blk.perm;
  const T *gq = static_cast<const T *>(a.q) + size_t(rd.bh) * rd.N * D;
  const T *gv = static_cast<const T *>(a.v) + size_t(rd.bh) * rd.N * D;
  const LshCtx ctx = lshCtx<Variant>(a, rd.b, rd.h, rd.r);

  // The query slots and the first key tile's slots, then their rows: one
  // copy group.
  for (int x = tid; x < BQ; x += NTH)
    sm.qpos[x] = perm[t0 + x];
  for (int x = tid; x < BKV; x += NTH)
    sm.kpos[x] = perm[ks + x];
  __syncthreads();
  gatherTile<BQ, D, NTH>(sm.q, gq, sm.qpos, tid);
  gatherTile<BKV, D, NTH>(sm.k, gq, sm.kpos, tid);
  gatherTile<BKV, D, NTH>(sm.v, gv, sm.kpos, tid);
  cpAsyncCommit();
  cpAsyncWait<0>();
  __syncthreads(); // Q and the first key tile landed for all
  const int rowLo = warp * tile::kRowsPerWarp + Layout::rowBase(lane);
  const int iLo = sm.qpos[rowLo], iHi = sm.qpos[rowLo + Layout::kRowStep];

  float o[NO][4];
  zeroAcc(o);
  OnlineSoftmax<Layout> softmax;
  softmax.init();
  // The warp's Q rows multiply every key tile: in registers on m16n8k16
  // where they fit beside S and O within 128 registers (flash_fwd's rule
  // for one-stage loops).
  constexpr bool kQInRegisters =
      MmaKindOf<T, NS>::value == MmaKind::M16n8 && (BKV + D) / 2 + D / 4 <= 128;
  ResidentA<T, D, kQInRegisters> qRows;
  qRows.load(sm.q + warp * tile::kRowsPerWarp * LD, LD);

  for (int kt = ks; kt < ke; kt += BKV) {
    lshKeyScales<BKV, D, NTH>(sm.keyScale, sm.k, LD, tid);
    __syncthreads(); // key factors complete

    float s[NS][4];
    zeroAcc(s);
    qRows.template gemm<NS, false>(s, sm.k, LD);
    lshLogits<Variant, Layout>(s, ctx, iLo, iHi, sm.kpos, sm.keyScale);
    softmax.update(s, o);
    if constexpr (Variant::kDropout)
      if (ctx.dropout > 0.f)
        lshDropoutProbs<Variant, Layout>(s, ctx, iLo, iHi, sm.kpos);
    Mma::template gemmRS<BKV, NO>(o, s, sm.v, LD);

    if (kt + BKV < ke)
      lshNextTile<BKV, D, NTH>(sm.kpos, perm + kt + BKV, sm.k, gq, sm.v, gv, tid, [] {});
  }

  float inv[2], lse[2];
  softmax.finish(inv, lse);
  const int col0 = Layout::colBase(lane);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int i = r == 0 ? iLo : iHi;
    if (i < 0)
      continue;
    float *out = a.round_out + (rd.row0 + i) * D + col0;
#pragma unroll
    for (int n = 0; n < NO; ++n)
      *reinterpret_cast<float2 *>(out + Layout::colOf(n, 0)) =
          make_float2(o[n][2 * r] * inv[r], o[n][2 * r + 1] * inv[r]);
    if (Layout::rowLeader(lane))
      a.round_lse[rd.row0 + i] = lse[r];
  }
}

} // namespace attnc

#endif // ATTNC_CUDA_LSH_FWD_MMA_CUH
