//===- flash_fwd.cuh - Fused attention forward (FlashAttention-2) ---------===//
//
// One CTA computes BLOCK_Q query rows of one (batch, head): grid
// (ceil(Nq / BLOCK_Q), B * H), WARPS * 32 threads, dynamic shared memory
// tile::fwdSmemBytes(BLOCK_Q, BLOCK_KV, HEAD_DIM, STAGES, sizeof(T)).
//
// Threads and warps: BLOCK_Q == 16 * WARPS; warp w owns query rows
// [16w, 16w + 16) of the block for the whole kernel: its S = Q K^T tile
// (16 x BLOCK_KV), its online-softmax state and its O accumulator (16 x
// HEAD_DIM), all in registers in the m16n8 accumulator layout (mma.cuh), so
// the softmax needs no shared memory and P feeds P V straight from
// registers. All threads cooperate on the tile copies.
//
// Shared memory (byte offsets from tile::fwdSmem, rows padded by 16 bytes):
//
//   [ Q: BLOCK_Q rows | stage 0: K (BLOCK_KV rows), V (BLOCK_KV rows) | stage 1 ... ]
//
// Q is loaded once; K/V blocks go through a STAGES-deep cp.async pipeline
// (block n + STAGES - 1 is in flight while block n is computed; sm_75 loads
// synchronously). At the end each warp stages its normalised O rows in its
// own Q rows (no other warp reads them) and stores them with 16-byte writes.
//
// Per KV block: S = Q K^T (fp32 accumulate) -> s * scale -> Variant::score
// -> masks (-inf) -> online softmax (exp2, quad-uniform running max) -> O +=
// P V (with attention dropout, P masked and rescaled after the softmax
// summed it). Blocks entirely past the keys (key tail, key padding) or, when
// causal, after the block's last query are never visited; masks are
// evaluated only on blocks that may contain masked entries (and always with
// a Variant::keep). A row with no kept key ends with O = 0 and lse = -inf.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_FLASH_FWD_CUH
#define ATTNC_CUDA_FLASH_FWD_CUH

#include "attnc/common.cuh"
#include "attnc/copy.cuh"
#include "attnc/mma.cuh"
#include "attnc/softmax.cuh"
#include "attnc/variant.cuh"

namespace attnc {

/// Compile-time shape of the forward kernel.
template <int BLOCK_Q, int BLOCK_KV, int HEAD_DIM, int WARPS, int STAGES, class T>
struct FwdTraits {
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kLd = SmemLd<T, HEAD_DIM>::value; ///< elements per row
  static constexpr int kQOff = tile::fwdSmem(BLOCK_Q, BLOCK_KV, HEAD_DIM, STAGES, sizeof(T)).q;
  static constexpr int kKvOff = tile::fwdSmem(BLOCK_Q, BLOCK_KV, HEAD_DIM, STAGES, sizeof(T)).kv;
  static constexpr int kStageBytes =
      tile::fwdSmem(BLOCK_Q, BLOCK_KV, HEAD_DIM, STAGES, sizeof(T)).stageBytes;
  static constexpr int kVOff = BLOCK_KV * kLd * int(sizeof(T)); ///< in a stage

  static_assert(BLOCK_Q == tile::kRowsPerWarp * WARPS, "16 rows per warp");
  static_assert(BLOCK_KV % 16 == 0 && HEAD_DIM % 16 == 0, "MMA k-steps");
  static_assert(STAGES >= 1, "at least one K/V stage");
  static_assert(kThreads <= tile::kMaxThreads, "too many warps");
  static_assert(2 * BLOCK_KV * kLd * int(sizeof(T)) == kStageBytes,
                "layout disagrees with TileModel.h");
};

template <int BLOCK_Q, int BLOCK_KV, int HEAD_DIM, int WARPS, int STAGES, class T, class Variant>
__device__ void flash_fwd(const AttnFwdArgs &a) {
  using Tr = FwdTraits<BLOCK_Q, BLOCK_KV, HEAD_DIM, WARPS, STAGES, T>;
  using Mma = WarpMma<T>;
  constexpr int D = HEAD_DIM, LD = Tr::kLd, NS = BLOCK_KV / 8, NO = D / 8;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const BlockInfo blk = blockInfo<BLOCK_Q, Variant>(a, a.Nq);
  const int bh = blk.bh, b = blk.b, h = blk.h, q0 = blk.start;
  if (blk.rows <= 0)
    return;
  const int qRows = blk.rows, kvEnd = blk.kvEnd;
  int nFirst, nBlocks; // the key blocks any row of this block may keep
  keyBlocks<Variant, BLOCK_KV>(q0, qRows, kvEnd, nFirst, nBlocks);

  const T *gQ = static_cast<const T *>(a.q) + (size_t(bh) * a.Nq + q0) * D;
  const T *gK = static_cast<const T *>(a.k) + size_t(bh) * a.Nk * D;
  const T *gV = static_cast<const T *>(a.v) + size_t(bh) * a.Nk * D;
  T *sQ = smemAt<T>(Tr::kQOff);
  auto sK = [](int stage) { return smemAt<T>(Tr::kKvOff + stage * Tr::kStageBytes); };
  auto sV = [](int stage) { return smemAt<T>(Tr::kKvOff + stage * Tr::kStageBytes + Tr::kVOff); };
  auto loadKv = [&](int n) {
    const int rows = kvEnd - n * BLOCK_KV, stage = n % STAGES;
    loadTile<BLOCK_KV, D, Tr::kThreads>(sK(stage), gK + size_t(n) * BLOCK_KV * D, rows, tid);
    loadTile<BLOCK_KV, D, Tr::kThreads>(sV(stage), gV + size_t(n) * BLOCK_KV * D, rows, tid);
  };

  // Q is the oldest group: complete whenever K/V block 0 is.
  loadTile<BLOCK_Q, D, Tr::kThreads>(sQ, gQ, qRows, tid);
  cpAsyncCommit();
#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (nFirst + s < nBlocks)
      loadKv(nFirst + s);
    cpAsyncCommit(); // empty groups keep the wait counts uniform
  }

  const ScoreCtx ctx = scoreCtx(a, b, h, kvEnd);
  const int i0 = q0 + warp * tile::kRowsPerWarp; // this warp's first query
  T *sQw = sQ + warp * tile::kRowsPerWarp * LD;
  float o[NO][4];
  zeroAcc(o);
  using Layout = AccLayout<T, NS>;
  static_assert(IsSame<Layout, AccLayout<T, NO>>::value, "S and O tiles share rows");
  OnlineSoftmax<Layout> softmax;
  softmax.init();
  // On m16n8k16 tensor cores the warp's Q rows stay in registers once
  // loaded (D / 4 registers), which takes Q's ldmatrix traffic (a ninth to a
  // fifth of the loop's shared-memory bytes) off every key block: where
  // they fit beside S and O (BLOCK_KV / 2 + D / 2 floats) within 128
  // registers, or within the tile model's accumulator budget when the loop
  // has cp.async stages (one stage stages the next tile through registers).
  constexpr int kQAccRegisters = (BLOCK_KV + D) / 2 + D / 4;
  constexpr bool kQInRegisters =
      MmaKindOf<T, NS>::value == MmaKind::M16n8 &&
      (kQAccRegisters <= 128 || (STAGES >= 2 && kQAccRegisters <= tile::kAccFloatBudget));
  ResidentA<T, D, kQInRegisters> q;
  if constexpr (kQInRegisters) {
    cpAsyncWait<STAGES - 1>(); // Q, the oldest group, landed (for this thread)
    __syncthreads();           // ... and for all
  }
  q.load(sQw, LD);

  // Without cp.async (sm_70, sm_75: one stage), block n + 1 travels
  // through registers while block n is multiplied: loaded before the math,
  // stored after it (when its chunks fit kStagedChunkBudget).
  using Staged = StagedTile<BLOCK_KV, D, Tr::kThreads, T>;
  constexpr bool kStaged = STAGES == 1 && !ATTNC_ASYNC_COPY && Staged::kPairFits;
  Staged nextK, nextV;
  if (kStaged && nFirst < nBlocks)
    loadKv(nFirst);

  for (int n = nFirst; n < nBlocks; ++n) {
    const int kvNext = n + 1;
    if constexpr (kStaged) {
      if (kvNext < nBlocks) {
        nextK.fetch(gK + size_t(kvNext) * BLOCK_KV * D, kvEnd - kvNext * BLOCK_KV, tid);
        nextV.fetch(gV + size_t(kvNext) * BLOCK_KV * D, kvEnd - kvNext * BLOCK_KV, tid);
      }
    } else {
      if (n + STAGES - 1 < nBlocks)
        loadKv(n + STAGES - 1);
      cpAsyncCommit();
      cpAsyncWait<STAGES - 1>(); // block n (and Q) landed, for this thread
    }
    __syncthreads(); // ... and for all

    const int j0 = n * BLOCK_KV, stage = n % STAGES;
    // Warps whose rows are past Nq, or (causal) all before this block's
    // first key, have nothing to add.
    const bool active = i0 < a.Nq && (!Variant::kCausal || j0 <= i0 + 15);
    if (active) {
      float s[NS][4];
      zeroAcc(s);
      q.template gemm<NS, false>(s, sK(stage), LD);
      const bool mask = Variant::kHasMask || j0 + BLOCK_KV > kvEnd ||
                        (Variant::kCausal && j0 + BLOCK_KV - 1 > i0);
      fwdLogits<Variant, Layout>(s, ctx, i0, j0, mask);
      softmax.update(s, o);
      if constexpr (Variant::kDropout)
        if (ctx.dropout > 0.f)
          dropoutProbs<Variant, Layout>(s, ctx, i0, j0);
      Mma::template gemmRS<BLOCK_KV, NO>(o, s, sV(stage), LD);
    }
    __syncthreads(); // stage n % STAGES is refilled next iteration
    if constexpr (kStaged)
      if (kvNext < nBlocks) {
        nextK.store(sK(0), tid);
        nextV.store(sV(0), tid);
      }
  }
  cpAsyncWait<0>();
  __syncthreads(); // Q rows may have been copied by other warps' threads

  float inv[2], lse[2];
  softmax.finish(inv, lse);
  if (Layout::rowLeader(lane)) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int i = i0 + Layout::rowBase(lane) + Layout::kRowStep * r;
      if (i < a.Nq)
        a.lse[size_t(bh) * a.Nq + i] = lse[r];
    }
  }
  storeAcc(sQw, LD, o, inv[0], inv[1]);
  __syncwarp();
  T *gO = static_cast<T *>(a.out) + (size_t(bh) * a.Nq + i0) * D;
  storeTile<tile::kRowsPerWarp, D, 32>(gO, sQw, a.Nq - i0, lane);
}

} // namespace attnc

#endif // ATTNC_CUDA_FLASH_FWD_CUH
