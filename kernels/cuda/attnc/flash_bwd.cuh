//===- flash_bwd.cuh - Fused attention backward (FlashAttention-2) --------===//
//
// Four kernel bodies, launched in this order with WARPS * 32 threads each.
// All take the template arguments <BLOCK_Q, BLOCK_KV, HEAD_DIM, WARPS,
// STAGES, T, Variant> of the backward tile config (tile::defaultTile(...,
// true)), so that the entry points are uniform; each uses what it needs.
//
//   flash_bwd_preprocess  grid (ceil(Nq / BLOCK_Q), B * H), no shared memory:
//                         delta_i = sum_d dout_id * out_id.
//   flash_bwd_dkdv        grid (ceil(Nk / BLOCK_KV), B * H), dynamic shared
//                         memory tile::bwdDkdvSmemBytes: dK, dV of BLOCK_KV
//                         keys, looping over query blocks; also the dparams
//                         partials of those keys.
//   flash_bwd_dq          grid (ceil(Nq / BLOCK_Q), B * H), dynamic shared
//                         memory tile::bwdDqSmemBytes: dQ of BLOCK_Q
//                         queries, looping over key blocks.
//   flash_bwd_dparams     grid (P * H), only when P > 0, no shared memory:
//                         dparams[p * H + h] += the sum of its partials in
//                         a fixed order (by its first warp).
//
// dQ gets its own pass (recomputing S and dP) instead of FlashAttention-2's
// atomicAdd, and dparams go through per-block partials: no floating-point
// atomics anywhere, so gradients are bit-reproducible.
//
// Both main kernels share one scheme. A CTA keeps FIXED rows (dK/dV: the
// BLOCK_KV keys, K and V tiles; dQ: the BLOCK_Q queries, Q and dO tiles)
// and streams the other side's tiles X, Y (dK/dV: Q, dO; dQ: K, V) through
// shared memory. Warps tile FIXED rows 16 at a time, WM = FIXED / 16, and
// split the rest WN = WARPS / WM ways; warp w = wm + WM * wn:
//
//   phase 1  S = Fixed_x X^T, dP = Fixed_y Y^T for its 16 rows and its
//            1/WN of the streamed rows (dK/dV computes S^T and dP^T: rows
//            are keys), fp32, in registers;
//   phase 2  P = exp(score(scale S) - lse), dS = P (dP - delta),
//            G = dS * dscore/ds (variant.cuh); G (and for dK/dV, P) go to
//            shared memory as T (as FlashAttention-2 rounds them);
//   phase 3  after a barrier, its 16 rows x 1/WN of HEAD_DIM of
//            dV += P^T dO, dK += G^T Q (dK/dV) or dQ += G K (dQ),
//            accumulated in registers across the loop.
//
// Shared memory (byte offsets from tile::bwdSmem, rows padded by 16 bytes):
//
//   [ fixed X | fixed Y | score tile(s) (P^T, G^T | G) | stats | stage 0:
//     X rows, Y rows | stage 1 ... ]
//
// stats are lse * log2 e (+inf for i >= Nq or an empty row, making p = 0)
// and delta of the query rows: per stage in dK/dV, fixed in dQ. With
// STAGES >= 1 the streamed pairs go through a STAGES-deep cp.async
// pipeline; STAGES == 0 keeps a single slot that X and Y take turns in (X
// loaded twice per step), for tiles that cannot fit four D-wide buffers.
// The epilogue stages the scaled results in the fixed tiles' space and
// writes them with 16-byte stores; rows are fully written (0 for keys past
// lengths[b] or with no kept query).
//
// dparams: each dK/dV thread accumulates sum ds * dscore/dparam_p over its
// elements; the CTA reduces them (warp butterflies, then warps in order)
// into dparams_partial[(p * B * H + b * H + h) * ceil(Nk / BLOCK_KV) +
// kv_block], written for every CTA; flash_bwd_dparams adds them up.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_FLASH_BWD_CUH
#define ATTNC_CUDA_FLASH_BWD_CUH

#include "attnc/common.cuh"
#include "attnc/copy.cuh"
#include "attnc/mma.cuh"
#include "attnc/variant.cuh"

namespace attnc {

/// Compile-time shape of one backward main kernel: FIXED rows per CTA,
/// STREAM rows per step, SCORE_TILES score tiles in shared memory.
template <int FIXED, int STREAM, int HEAD_DIM, int WARPS, int STAGES, class T, int SCORE_TILES,
          bool STATS_STREAM>
struct BwdTraits {
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kLd = SmemLd<T, HEAD_DIM>::value;
  static constexpr int kScoreLd = SmemLd<T, STREAM>::value;
  static constexpr int kWM = FIXED / tile::kRowsPerWarp;
  static constexpr int kWN = WARPS / kWM;
  static constexpr int kNT1 = STREAM / kWN / 8;   ///< phase-1 n-tiles per warp
  static constexpr int kNT3 = HEAD_DIM / kWN / 8; ///< phase-3 n-tiles per warp
  static constexpr int kStages = STAGES > 0 ? STAGES : 1;

  static __host__ __device__ constexpr tile::BwdSmem layout() {
    return tile::bwdSmem(FIXED, STREAM, HEAD_DIM, STAGES, sizeof(T), SCORE_TILES, STATS_STREAM);
  }
  static constexpr int kFixedX = layout().fixedX, kFixedY = layout().fixedY;
  static constexpr int kScore0 = layout().score0, kScore1 = layout().score1;
  static constexpr int kStats = layout().stats;
  static constexpr int kStatStride = layout().statStride;
  static constexpr int kSlot = layout().slot;
  static constexpr int kSlotStride = layout().slotStride;
  static constexpr int kSlotY = layout().slotY;

  static_assert(FIXED % 16 == 0 && STREAM % 16 == 0 && HEAD_DIM % 16 == 0, "MMA tiles");
  static_assert(WARPS % kWM == 0, "warps must tile the fixed rows");
  static_assert(STREAM % (8 * kWN) == 0 && HEAD_DIM % (8 * kWN) == 0,
                "warp columns must be whole n-tiles");
  static_assert(kThreads <= tile::kMaxThreads, "too many warps");
  static_assert(kFixedY == FIXED * kLd * int(sizeof(T)), "layout disagrees with TileModel.h");
};

/// Fills `st` with lse * log2 e (+inf when lse is -inf or the row is past
/// Nq) then delta (0 past Nq) of queries [q0, q0 + ROWS).
template <int ROWS, int NTHREADS>
ATTNC_HD void loadStats(float *st, const float *lse, const float *delta, int q0, int Nq, int tid) {
  for (int r = tid; r < ROWS; r += NTHREADS) {
    const int i = q0 + r;
    const float l = i < Nq ? lse[i] : negInf();
    st[r] = l == negInf() ? posInf() : l * kLog2e;
    st[ROWS + r] = i < Nq ? delta[i] : 0.f;
  }
}

//===-- delta = rowsum(dout * out) ----------------------------------------===//

template <int BLOCK_Q, int BLOCK_KV, int HEAD_DIM, int WARPS, int STAGES, class T, class Variant>
__device__ void flash_bwd_preprocess(const AttnBwdArgs &a) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const tile::GridBlock blk = tile::gridBlock(blockIdx.x, tile::gridTiles(a.Nq, BLOCK_Q));
  const int bh = blk.row, q0 = blk.tile * BLOCK_Q;
  for (int r = warp; r < BLOCK_Q; r += WARPS) {
    const int i = q0 + r;
    if (i >= a.Nq)
      break;
    const size_t row = (size_t(bh) * a.Nq + i) * HEAD_DIM;
    const T *o = static_cast<const T *>(a.out) + row;
    const T *d = static_cast<const T *>(a.dout) + row;
    float acc = 0.f;
#pragma unroll
    for (int c = lane; c < HEAD_DIM; c += 32)
      acc = fmaf(Elem<T>::toFloat(o[c]), Elem<T>::toFloat(d[c]), acc);
    acc = warpSum(acc);
    if (lane == 0)
      a.delta[size_t(bh) * a.Nq + i] = acc;
  }
}

//===-- dK, dV ------------------------------------------------------------===//

template <int BLOCK_Q, int BLOCK_KV, int HEAD_DIM, int WARPS, int STAGES, class T, class Variant>
__device__ void flash_bwd_dkdv(const AttnBwdArgs &a) {
  using Tr = BwdTraits<BLOCK_KV, BLOCK_Q, HEAD_DIM, WARPS, STAGES, T, 2, true>;
  using Mma = WarpMma<T>;
  constexpr int D = HEAD_DIM, LD = Tr::kLd, SLD = Tr::kScoreLd;
  constexpr int NT1 = Tr::kNT1, NT3 = Tr::kNT3, NTH = Tr::kThreads;
  constexpr int C1 = NT1 * 8, C3 = NT3 * 8, ST = Tr::kStages;
  constexpr int NP = Variant::kNumParams > 0 ? Variant::kNumParams : 1;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int wm = warp % Tr::kWM, wn = warp / Tr::kWM;
  const BlockInfo blk = blockInfo<BLOCK_KV, Variant>(a, a.Nk);
  const int bh = blk.bh, b = blk.b, h = blk.h, kv0 = blk.start, kvEnd = blk.kvEnd;
  const int kvRows = imax(0, imin(BLOCK_KV, kvEnd - kv0)); // attendable keys
  int mBegin, mEnd; // the query blocks that may keep one of these keys
  queryBlocks<Variant, BLOCK_Q>(kv0, kvRows, a.Nq, mBegin, mEnd);

  const size_t qBase = size_t(bh) * a.Nq, kBase = size_t(bh) * a.Nk + kv0;
  const T *gQ = static_cast<const T *>(a.q) + qBase * D;
  const T *gdO = static_cast<const T *>(a.dout) + qBase * D;
  T *sK = smemAt<T>(Tr::kFixedX), *sV = smemAt<T>(Tr::kFixedY);
  T *sPt = smemAt<T>(Tr::kScore0), *sGt = smemAt<T>(Tr::kScore1);
  auto stats = [](int st) { return smemAt<float>(Tr::kStats + st * Tr::kStatStride); };
  auto slotX = [](int st) { return smemAt<T>(Tr::kSlot + st * Tr::kSlotStride); };
  auto slotY = [](int st) { return smemAt<T>(Tr::kSlot + st * Tr::kSlotStride + Tr::kSlotY); };
  auto loadQ = [&](int m, T *dst) {
    loadTile<BLOCK_Q, D, NTH>(dst, gQ + size_t(m) * BLOCK_Q * D, a.Nq - m * BLOCK_Q, tid);
  };
  auto loadDo = [&](int m, T *dst) {
    loadTile<BLOCK_Q, D, NTH>(dst, gdO + size_t(m) * BLOCK_Q * D, a.Nq - m * BLOCK_Q, tid);
  };
  auto loadStep = [&](int m) { // the whole step m, for STAGES >= 1
    const int st = m % ST;
    loadStats<BLOCK_Q, NTH>(stats(st), a.lse + qBase, a.delta + qBase, m * BLOCK_Q, a.Nq, tid);
    loadQ(m, slotX(st));
    loadDo(m, slotY(st));
  };

  loadTile<BLOCK_KV, D, NTH>(sK, static_cast<const T *>(a.k) + kBase * D, kvRows, tid);
  loadTile<BLOCK_KV, D, NTH>(sV, static_cast<const T *>(a.v) + kBase * D, kvRows, tid);
  cpAsyncCommit();

  const ScoreCtx ctx = scoreCtx(a, b, h, kvEnd);
  const int j0 = kv0 + tile::kRowsPerWarp * wm; // this warp's first key
  const T *sKw = sK + tile::kRowsPerWarp * wm * LD;
  const T *sVw = sV + tile::kRowsPerWarp * wm * LD;
  // The warp's K and V rows multiply every query block: in registers on
  // m16n8k16 tensor cores (D / 2 registers) where they fit beside the
  // accumulators within the tile model's budget, with cp.async stages (one
  // stage stages the next tile through registers: sm_75 at D = 128
  // spilled), loaded once the fixed tiles (the only group in flight) landed.
  constexpr bool kFixedInRegisters =
      MmaKindOf<T, NT1>::value == MmaKind::M16n8 &&
      (D <= 64 || (STAGES >= 2 && (D + BLOCK_Q) / Tr::kWN + D / 2 <= tile::kAccFloatBudget));
  ResidentA<T, D, kFixedInRegisters> kRows, vRows;
  if constexpr (kFixedInRegisters) {
    cpAsyncWait<0>();
    __syncthreads();
  }
  kRows.load(sKw, LD);
  vRows.load(sVw, LD);
  float dK[NT3][4], dV[NT3][4], dpar[NP];
  zeroAcc(dK);
  zeroAcc(dV);
#pragma unroll
  for (int p = 0; p < NP; ++p)
    dpar[p] = 0.f;

  // Phases 1-2 of step m, given its Q and dO tiles: P^T, G^T to shared.
  auto scoresT = [&](float(&s)[NT1][4], const T *x) {
    zeroAcc(s);
    kRows.template gemm<NT1, false>(s, x + wn * C1 * LD, LD);
  };
  auto gradsT = [&](int m, float(&s)[NT1][4], const T *y, const float *st) {
    float dp[NT1][4];
    zeroAcc(dp);
    vRows.template gemm<NT1, false>(dp, y + wn * C1 * LD, LD);
    const int i0 = m * BLOCK_Q + wn * C1; // this warp's first query
    const bool mask = Variant::kHasMask || j0 + tile::kRowsPerWarp > kvEnd ||
                      (Variant::kCausal && j0 + tile::kRowsPerWarp - 1 > i0) || i0 + C1 > a.Nq;
    bwdGrads<Variant, AccLayout<T, NT1>, true, true>(s, dp, ctx, i0, j0, st + wn * C1,
                                                     st + BLOCK_Q + wn * C1, mask, dpar);
    const int at = tile::kRowsPerWarp * wm * SLD + wn * C1;
    storeAcc(sPt + at, SLD, s, 1.f, 1.f);
    storeAcc(sGt + at, SLD, dp, 1.f, 1.f);
  };
  // Phase 3: acc += score tile rows (all BLOCK_Q queries) x y columns.
  auto accumulate = [&](float(&acc)[NT3][4], const T *score, const T *y) {
    Mma::template gemmSS<BLOCK_Q, NT3, true>(acc, score + tile::kRowsPerWarp * wm * SLD, SLD,
                                             y + wn * C3, LD);
  };

  if constexpr (STAGES == 0) {
    T *slot = slotX(0);
    for (int m = mBegin; m < mEnd; ++m) {
      loadStats<BLOCK_Q, NTH>(stats(0), a.lse + qBase, a.delta + qBase, m * BLOCK_Q, a.Nq, tid);
      loadQ(m, slot);
      cpAsyncCommit();
      cpAsyncWait<0>();
      __syncthreads();
      float s[NT1][4];
      scoresT(s, slot);
      __syncthreads();
      loadDo(m, slot);
      cpAsyncCommit();
      cpAsyncWait<0>();
      __syncthreads();
      gradsT(m, s, slot, stats(0));
      __syncthreads();
      accumulate(dV, sPt, slot);
      __syncthreads();
      loadQ(m, slot);
      cpAsyncCommit();
      cpAsyncWait<0>();
      __syncthreads();
      accumulate(dK, sGt, slot);
      __syncthreads();
    }
  } else {
    // Without cp.async (one stage), step m + 1's Q and dO travel through
    // registers during step m's math (copy.cuh, StagedTile).
    using Staged = StagedTile<BLOCK_Q, D, NTH, T>;
    constexpr bool kStaged = STAGES == 1 && !ATTNC_ASYNC_COPY && Staged::kPairFits;
    Staged nextQ, nextDo;
    if (kStaged && mBegin < mEnd)
      loadStep(mBegin);
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      if (mBegin + s < mEnd)
        loadStep(mBegin + s);
      cpAsyncCommit();
    }
    for (int m = mBegin; m < mEnd; ++m) {
      const int mNext = m + 1;
      if constexpr (kStaged) {
        if (mNext < mEnd) {
          nextQ.fetch(gQ + size_t(mNext) * BLOCK_Q * D, a.Nq - mNext * BLOCK_Q, tid);
          nextDo.fetch(gdO + size_t(mNext) * BLOCK_Q * D, a.Nq - mNext * BLOCK_Q, tid);
        }
      } else {
        if (m + STAGES - 1 < mEnd)
          loadStep(m + STAGES - 1);
        cpAsyncCommit();
        cpAsyncWait<STAGES - 1>();
      }
      __syncthreads();
      const int st = m % ST;
      float s[NT1][4];
      scoresT(s, slotX(st));
      gradsT(m, s, slotY(st), stats(st));
      __syncthreads();
      accumulate(dV, sPt, slotY(st));
      accumulate(dK, sGt, slotX(st));
      __syncthreads();
      if constexpr (kStaged)
        if (mNext < mEnd) {
          loadStats<BLOCK_Q, NTH>(stats(0), a.lse + qBase, a.delta + qBase, mNext * BLOCK_Q, a.Nq,
                                  tid);
          nextQ.store(slotX(0), tid);
          nextDo.store(slotY(0), tid);
        }
    }
  }
  cpAsyncWait<0>();
  __syncthreads(); // all shared memory is free from here

  if constexpr (Variant::kNumParams > 0) {
    float *red = smemAt<float>(0);
    const int nKvBlocks = (a.Nk + BLOCK_KV - 1) / BLOCK_KV;
#pragma unroll
    for (int p = 0; p < Variant::kNumParams; ++p) {
      const float v = warpSum(dpar[p]);
      if (lane == 0)
        red[warp] = v;
      __syncthreads();
      if (tid == 0 && a.dparams_partial != nullptr) {
        float sum = 0.f;
        for (int w = 0; w < WARPS; ++w)
          sum += red[w];
        a.dparams_partial[(size_t(p) * a.B * a.H + bh) * nKvBlocks + blk.tile] = sum;
      }
      __syncthreads();
    }
  }

  const int at = tile::kRowsPerWarp * wm * LD + wn * C3;
  storeAcc(sK + at, LD, dK, a.scale, a.scale);
  storeAcc(sV + at, LD, dV, 1.f, 1.f);
  __syncthreads();
  const int rows = imin(BLOCK_KV, a.Nk - kv0);
  storeTile<BLOCK_KV, D, NTH>(static_cast<T *>(a.dk) + kBase * D, sK, rows, tid);
  storeTile<BLOCK_KV, D, NTH>(static_cast<T *>(a.dv) + kBase * D, sV, rows, tid);
}

//===-- dQ ----------------------------------------------------------------===//

template <int BLOCK_Q, int BLOCK_KV, int HEAD_DIM, int WARPS, int STAGES, class T, class Variant>
__device__ void flash_bwd_dq(const AttnBwdArgs &a) {
  using Tr = BwdTraits<BLOCK_Q, BLOCK_KV, HEAD_DIM, WARPS, STAGES, T, 1, false>;
  using Mma = WarpMma<T>;
  constexpr int D = HEAD_DIM, LD = Tr::kLd, SLD = Tr::kScoreLd;
  constexpr int NT1 = Tr::kNT1, NT3 = Tr::kNT3, NTH = Tr::kThreads;
  constexpr int C1 = NT1 * 8, C3 = NT3 * 8, ST = Tr::kStages;

  const int tid = threadIdx.x, warp = tid / 32;
  const int wm = warp % Tr::kWM, wn = warp / Tr::kWM;
  const BlockInfo blk = blockInfo<BLOCK_Q, Variant>(a, a.Nq);
  const int bh = blk.bh, b = blk.b, h = blk.h, q0 = blk.start;
  if (blk.rows <= 0)
    return;
  const int qRows = blk.rows, kvEnd = blk.kvEnd;
  int nFirst, nBlocks; // the key blocks any row of this block may keep
  keyBlocks<Variant, BLOCK_KV>(q0, qRows, kvEnd, nFirst, nBlocks);

  const size_t qBase = size_t(bh) * a.Nq + q0, kBase = size_t(bh) * a.Nk;
  const T *gK = static_cast<const T *>(a.k) + kBase * D;
  const T *gV = static_cast<const T *>(a.v) + kBase * D;
  T *sQ = smemAt<T>(Tr::kFixedX), *sdO = smemAt<T>(Tr::kFixedY);
  T *sG = smemAt<T>(Tr::kScore0);
  float *stats = smemAt<float>(Tr::kStats);
  auto slotX = [](int st) { return smemAt<T>(Tr::kSlot + st * Tr::kSlotStride); };
  auto slotY = [](int st) { return smemAt<T>(Tr::kSlot + st * Tr::kSlotStride + Tr::kSlotY); };
  auto loadK = [&](int n, T *dst) {
    loadTile<BLOCK_KV, D, NTH>(dst, gK + size_t(n) * BLOCK_KV * D, kvEnd - n * BLOCK_KV, tid);
  };
  auto loadV = [&](int n, T *dst) {
    loadTile<BLOCK_KV, D, NTH>(dst, gV + size_t(n) * BLOCK_KV * D, kvEnd - n * BLOCK_KV, tid);
  };

  loadTile<BLOCK_Q, D, NTH>(sQ, static_cast<const T *>(a.q) + qBase * D, qRows, tid);
  loadTile<BLOCK_Q, D, NTH>(sdO, static_cast<const T *>(a.dout) + qBase * D, qRows, tid);
  cpAsyncCommit();
  loadStats<BLOCK_Q, NTH>(stats, a.lse + qBase, a.delta + qBase, 0, qRows, tid);

  const ScoreCtx ctx = scoreCtx(a, b, h, kvEnd);
  const int i0 = q0 + tile::kRowsPerWarp * wm; // this warp's first query
  const T *sQw = sQ + tile::kRowsPerWarp * wm * LD;
  const T *sdOw = sdO + tile::kRowsPerWarp * wm * LD;
  const float *lse2 = stats + tile::kRowsPerWarp * wm;
  const float *dlt = stats + BLOCK_Q + tile::kRowsPerWarp * wm;
  // The warp's Q and dO rows multiply every key block: in registers (D / 2
  // registers) from D = 128 on, within the tile model's accumulator budget
  // with cp.async stages. At D = 64 they would cost dQ its second resident
  // block (118 -> 134 registers), which the performance model says loses
  // more than their traffic saves (docs/benchmarks.md).
  constexpr bool kFixedInRegisters = MmaKindOf<T, NT1>::value == MmaKind::M16n8 && D >= 128 &&
                                     STAGES >= 2 &&
                                     (D / 2 + BLOCK_KV) / Tr::kWN + D / 2 <= tile::kAccFloatBudget;
  ResidentA<T, D, kFixedInRegisters> qA, doA;
  if constexpr (kFixedInRegisters) {
    cpAsyncWait<0>(); // the fixed tiles, the only group in flight
    __syncthreads();
  }
  qA.load(sQw, LD);
  doA.load(sdOw, LD);
  float dQ[NT3][4], unused[1];
  zeroAcc(dQ);

  auto scores = [&](float(&s)[NT1][4], const T *x) {
    zeroAcc(s);
    qA.template gemm<NT1, false>(s, x + wn * C1 * LD, LD);
  };
  auto grads = [&](int n, float(&s)[NT1][4], const T *y) {
    float dp[NT1][4];
    zeroAcc(dp);
    doA.template gemm<NT1, false>(dp, y + wn * C1 * LD, LD);
    const int j0 = n * BLOCK_KV + wn * C1; // this warp's first key
    const bool mask = Variant::kHasMask || j0 + C1 > kvEnd ||
                      (Variant::kCausal && j0 + C1 - 1 > i0) || i0 + tile::kRowsPerWarp > a.Nq;
    bwdGrads<Variant, AccLayout<T, NT1>, false, false>(s, dp, ctx, i0, j0, lse2, dlt, mask, unused);
    storeAcc(sG + tile::kRowsPerWarp * wm * SLD + wn * C1, SLD, dp, 1.f, 1.f);
  };
  auto accumulate = [&](const T *x) { // dQ += G (all BLOCK_KV keys) K
    Mma::template gemmSS<BLOCK_KV, NT3, true>(dQ, sG + tile::kRowsPerWarp * wm * SLD, SLD,
                                              x + wn * C3, LD);
  };

  if constexpr (STAGES == 0) {
    T *slot = slotX(0);
    for (int n = nFirst; n < nBlocks; ++n) {
      loadK(n, slot);
      cpAsyncCommit();
      cpAsyncWait<0>();
      __syncthreads();
      float s[NT1][4];
      scores(s, slot);
      __syncthreads();
      loadV(n, slot);
      cpAsyncCommit();
      cpAsyncWait<0>();
      __syncthreads();
      grads(n, s, slot);
      __syncthreads();
      loadK(n, slot);
      cpAsyncCommit();
      cpAsyncWait<0>();
      __syncthreads();
      accumulate(slot);
      __syncthreads();
    }
  } else {
    // Without cp.async (one stage), block n + 1's K and V travel through
    // registers during block n's math (copy.cuh, StagedTile).
    using Staged = StagedTile<BLOCK_KV, D, NTH, T>;
    constexpr bool kStaged = STAGES == 1 && !ATTNC_ASYNC_COPY && Staged::kPairFits;
    Staged nextK, nextV;
    if (kStaged && nFirst < nBlocks) {
      loadK(nFirst, slotX(0));
      loadV(nFirst, slotY(0));
    }
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
      const int n = nFirst + s;
      if (n < nBlocks) {
        loadK(n, slotX(n % ST));
        loadV(n, slotY(n % ST));
      }
      cpAsyncCommit();
    }
    for (int n = nFirst; n < nBlocks; ++n) {
      const int nx = kStaged ? n + 1 : n + STAGES - 1;
      if constexpr (kStaged) {
        if (nx < nBlocks) {
          nextK.fetch(gK + size_t(nx) * BLOCK_KV * D, kvEnd - nx * BLOCK_KV, tid);
          nextV.fetch(gV + size_t(nx) * BLOCK_KV * D, kvEnd - nx * BLOCK_KV, tid);
        }
      } else {
        if (nx < nBlocks) {
          loadK(nx, slotX(nx % ST));
          loadV(nx, slotY(nx % ST));
        }
        cpAsyncCommit();
        cpAsyncWait<STAGES - 1>();
      }
      __syncthreads();
      const int st = n % ST;
      float s[NT1][4];
      scores(s, slotX(st));
      grads(n, s, slotY(st));
      __syncthreads();
      accumulate(slotX(st));
      __syncthreads();
      if constexpr (kStaged)
        if (nx < nBlocks) {
          nextK.store(slotX(0), tid);
          nextV.store(slotY(0), tid);
        }
    }
  }
  cpAsyncWait<0>();
  __syncthreads();

  storeAcc(sQ + tile::kRowsPerWarp * wm * LD + wn * C3, LD, dQ, a.scale, a.scale);
  __syncthreads();
  storeTile<BLOCK_Q, D, NTH>(static_cast<T *>(a.dq) + qBase * D, sQ, qRows, tid);
}

//===-- dparams = sum of the dK/dV blocks' partials -----------------------===//

template <int BLOCK_Q, int BLOCK_KV, int HEAD_DIM, int WARPS, int STAGES, class T, class Variant>
__device__ void flash_bwd_dparams(const AttnBwdArgs &a) {
  constexpr int P = Variant::kNumParams;
  if constexpr (P > 0) {
    // One warp: there are only B * ceil(Nk / BLOCK_KV) partials per
    // (parameter, head), and one butterfly fixes the order of the sum.
    const int lane = threadIdx.x % 32;
    const int p = blockIdx.x / a.H, h = blockIdx.x % a.H;
    if (threadIdx.x >= 32 || p >= P)
      return;
    const int nKvBlocks = (a.Nk + BLOCK_KV - 1) / BLOCK_KV;
    const int n = a.B * nKvBlocks;
    float acc = 0.f;
    for (int x = lane; x < n; x += 32) {
      const int bb = x / nKvBlocks, kb = x % nKvBlocks;
      acc += a.dparams_partial[(size_t(p) * a.B * a.H + bb * a.H + h) * nKvBlocks + kb];
    }
    acc = warpSum(acc);
    if (lane == 0)
      a.dparams[p * a.H + h] += acc;
  }
}

} // namespace attnc

#endif // ATTNC_CUDA_FLASH_BWD_CUH
