//===- TileModel.h - Tile shapes and resource model of attention kernels -===//
//
// One place for the numbers the compiler's tile pass, the CUDA kernel headers
// and the runtime must agree on: the shared-memory layout of every fused
// attention kernel (the kernels take their buffer offsets from here, the
// runtime its dynamic shared-memory sizes), the per-arch limits, and the
// default tile per (dtype, head dim, arch). constexpr only and no headers, so
// NVRTC and the host compiler both read it. See docs/kernels.md.
//
// Formulas (bytes; e = element size, 4 for fp32 and 2 for fp16/bf16):
//
//   row(D)     = D*e + 16            one Q/K/V/dO tile row; the 16-byte pad
//                                    keeps ldmatrix and vector loads free of
//                                    bank conflicts (row/16 is odd, D%16 == 0)
//   forward    = BQ*row(D)                         Q tile (O is staged here)
//              + max(S,1) * 2*BKV*row(D)           K and V, S pipeline stages
//   bwd dK/dV  = 2*BKV*row(D)                      K, V (fixed per CTA)
//              + 2*BKV*(BQ*e + 16)                 P^T and G^T tiles (G: the
//                                                  gradient w.r.t. the raw
//                                                  score, dS * dscore/ds)
//              + max(S,1) * 8*BQ                   lse*log2e and delta rows
//              + max(S,1) * slot                   slot = 2*BQ*row(D) (Q, dO),
//                                                  BQ*row(D) when S == 0
//   bwd dQ     = 2*BQ*row(D)                       Q, dO (fixed per CTA)
//              + BQ*(BKV*e + 16)                   G tile
//              + 8*BQ                              lse*log2e and delta rows
//              + max(S,1) * slot                   slot = 2*BKV*row(D) (K, V),
//                                                  BKV*row(D) when S == 0
//
// Backward stages S: S >= 1 buffers S (Q, dO) resp. (K, V) tile pairs and
// prefetches S-1 ahead; S == 0 keeps one tile slot that the pair shares, the
// first tile being loaded twice per step (for fp32 with D = 256 on 64 KiB
// parts, where four D-wide tiles do not fit).
//
// Registers: a warp owns 16 rows. Forward, each thread holds the S tile
// (BKV/2 floats) and the O accumulator (D/2 floats). Backward, warps tile
// the fixed rows 16 at a time (WM = rows/16) and split the other dimension
// WN = warps/WM ways; a dK/dV thread holds (D + BQ)/WN floats (dK, dV, S^T,
// dP^T), a dQ thread (D/2 + BKV)/WN. defaultTile keeps these under
// accFloatBudget so that ptxas needs no spills (checked for sm_75/80/90 by
// test/unit/kernels/CudaKernelsTest.cpp). Entry points must be declared
// __launch_bounds__(WARPS * 32, 1): without the 1, ptxas aims at two CTAs
// per SM and caps registers at 128 or below, and spills.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_ABI_TILEMODEL_H
#define ATTNC_ABI_TILEMODEL_H

#include "attnc/abi/Qualifiers.h"

namespace attnc::tile {

constexpr int kMaxRegsPerThread = 255;
constexpr int kMaxThreads = 1024;
/// Grids. gridDim.y and .z stop at 65535, and B * H (or B * H * rounds)
/// does not: every attention kernel's grid is one-dimensional, block x =
/// tile + tiles * row, where `row` is the (batch, head) slice (or slice
/// and round) and `tile` its block of rows. The tile index runs fastest,
/// so one slice's blocks run side by side and share its K and V in L2.
/// gridDim.x goes to 2^31 - 1 (sm_30 and later).
constexpr long long kMaxGridX = 2147483647LL;
/// The blocks of a (tiles x rows) grid; callers check it against kMaxGridX.
ATTNC_HOST_DEVICE constexpr long long gridBlocks(long long tiles, long long rows) {
  return tiles * rows;
}
/// Block `block`'s tile and row in a grid of `tiles` tiles per row.
struct GridBlock {
  int tile, row;
};
ATTNC_HOST_DEVICE constexpr GridBlock gridBlock(unsigned block, int tiles) {
  return GridBlock{int(block % unsigned(tiles)), int(block / unsigned(tiles))};
}
/// Tiles of `rowsPerTile` over `n` rows, at least 1 (so an empty slice
/// still has a block that returns early and the division is defined).
ATTNC_HOST_DEVICE constexpr int gridTiles(long long n, int rowsPerTile) {
  return n <= 0 ? 1 : int((n + rowsPerTile - 1) / rowsPerTile);
}

/// Blocks of the fused dense kernels for bh = B * H: the forward,
/// backward preprocess and dQ tile the queries, dK/dV the keys.
ATTNC_HOST_DEVICE constexpr long long queryTileBlocks(long long nq, int blockQ, long long bh) {
  return gridBlocks(gridTiles(nq, blockQ), bh);
}
ATTNC_HOST_DEVICE constexpr long long keyTileBlocks(long long nk, int blockKv, long long bh) {
  return gridBlocks(gridTiles(nk, blockKv), bh);
}

/// The head dims the CUDA dense and low-rank kernels are built for.
constexpr int kCudaHeadDims[] = {32, 64, 80, 96, 128, 256};
ATTNC_HOST_DEVICE constexpr bool cudaHeadDimSupported(long long headDim) {
  for (int d : kCudaHeadDims)
    if (d == headDim)
      return true;
  return false;
}

/// Query (forward) or fixed (backward) rows owned by one warp: one m16 MMA tile.
constexpr int kRowsPerWarp = 16;
/// Padding after each shared-memory row (see the file comment).
constexpr int kRowPadBytes = 16;
/// Accumulator floats per thread that the default tiles stay under: fp16
/// and bf16 (kAccFloatBudget), fp32. fp32 runs on SIMT FMAs whose operands
/// are fp32 registers too (tensor-core fragments pack two halves per
/// register), so it gets less: fp32, D = 256, 64 x 64 spills on sm_90.
constexpr int kAccFloatBudget = 160;
constexpr int kAccFloatBudgetFp32 = 144;
ATTNC_HOST_DEVICE constexpr int accFloatBudget(int elemBytes, bool backward = true) {
  (void)backward;
  return elemBytes == 4 ? kAccFloatBudgetFp32 : kAccFloatBudget;
}

/// 16-byte chunks a thread may hold in registers for the next tiles of a
/// one-stage loop on archs without cp.async (copy.cuh, StagedTile): 8 (32
/// registers). Larger tiles per thread (fp32, or D = 256 with few warps)
/// are copied synchronously instead: staged, they spilled next to the
/// accumulators in the NVRTC matrix at sm_70 and sm_75.
constexpr int kStagedChunkBudget = 8;

/// The oldest arch with kernels: Volta's mma.m8n8k4 is the oldest
/// tensor-core path (and CUDA 12's NVRTC the last to compile for it).
constexpr int kOldestSm = 70;

/// Largest dynamic + static shared memory one block may opt in to, in bytes.
ATTNC_HOST_DEVICE constexpr int smemLimitBytes(int sm) {
  return sm >= 120              ? 99 * 1024  // consumer Blackwell
         : sm >= 90             ? 227 * 1024 // H100/H200, B200
         : sm == 80 || sm == 87 ? 163 * 1024 // A100, Orin
         : sm >= 86             ? 99 * 1024  // consumer Ampere, Ada
         : sm == 75             ? 64 * 1024  // Turing
         : sm >= 70             ? 96 * 1024  // Volta (needs a CUDA 12 NVRTC)
                                : 48 * 1024;
}

ATTNC_HOST_DEVICE constexpr int maxInt(int a, int b) { return a > b ? a : b; }
ATTNC_HOST_DEVICE constexpr int ceilDiv(int a, int b) { return (a + b - 1) / b; }

/// Bytes of one shared-memory row of `cols` elements.
ATTNC_HOST_DEVICE constexpr int rowBytes(int cols, int elemBytes) {
  return cols * elemBytes + kRowPadBytes;
}

/// Forward kernel: byte offsets into dynamic shared memory.
struct FwdSmem {
  int q;          ///< BQ rows of Q, later of O
  int kv;         ///< first stage: BKV rows of K, then BKV rows of V
  int stageBytes; ///< distance between stages
  int total;
};

ATTNC_HOST_DEVICE constexpr FwdSmem fwdSmem(int blockQ, int blockKv, int headDim, int stages,
                                            int elemBytes) {
  const int row = rowBytes(headDim, elemBytes);
  const int stage = 2 * blockKv * row;
  return FwdSmem{0, blockQ * row, stage, blockQ * row + maxInt(stages, 1) * stage};
}

/// Backward kernels keep `fixed` rows for the whole CTA (K, V for dK/dV; Q,
/// dO for dQ) and stream `stream` rows through the stages.
struct BwdSmem {
  int fixedX, fixedY; ///< K, V (dK/dV kernel) or Q, dO (dQ kernel)
  int score0;         ///< P^T (dK/dV) or G (dQ): fixed x (stream*e + 16)
  int score1;         ///< G^T (dK/dV); unused (== score0) in dQ
  int stats;          ///< lse*log2e then delta, 2 * statRows floats per stage
  int statStride;     ///< bytes between the stats of two stages (0: fixed)
  int slot;           ///< first stage's tile slot: X rows, then Y rows
  int slotStride;     ///< bytes between stages
  int slotY;          ///< offset of Y inside a stage (0 when S == 0: shared)
  int total;
};

ATTNC_HOST_DEVICE constexpr BwdSmem bwdSmem(int fixedRows, int streamRows, int headDim, int stages,
                                            int elemBytes, int scoreTiles, bool statsStream) {
  const int row = rowBytes(headDim, elemBytes);
  const int nst = maxInt(stages, 1);
  const int fixed = 2 * fixedRows * row;
  const int scoreTile = fixedRows * rowBytes(streamRows, elemBytes);
  const int stats = fixed + scoreTiles * scoreTile;
  const int statRows = statsStream ? streamRows : fixedRows;
  const int statsBytes = (statsStream ? nst : 1) * 8 * statRows;
  const int slot = stats + statsBytes;
  const int slotY = stages == 0 ? 0 : streamRows * row;
  const int slotStride = (stages == 0 ? 1 : 2) * streamRows * row;
  return BwdSmem{0,     fixedRows * row,
                 fixed, scoreTiles == 2 ? fixed + scoreTile : fixed,
                 stats, statsStream ? 8 * statRows : 0,
                 slot,  slotStride,
                 slotY, slot + nst * slotStride};
}

ATTNC_HOST_DEVICE constexpr BwdSmem bwdDkdvSmem(int blockQ, int blockKv, int headDim, int stages,
                                                int elemBytes) {
  return bwdSmem(blockKv, blockQ, headDim, stages, elemBytes, 2, true);
}
ATTNC_HOST_DEVICE constexpr BwdSmem bwdDqSmem(int blockQ, int blockKv, int headDim, int stages,
                                              int elemBytes) {
  return bwdSmem(blockQ, blockKv, headDim, stages, elemBytes, 1, false);
}

/// Dynamic shared memory of attnc_fwd_*.
ATTNC_HOST_DEVICE constexpr int fwdSmemBytes(int blockQ, int blockKv, int headDim, int stages,
                                             int elemBytes) {
  return fwdSmem(blockQ, blockKv, headDim, stages, elemBytes).total;
}
/// Dynamic shared memory of attnc_bwd_dkdv_*.
ATTNC_HOST_DEVICE constexpr int bwdDkdvSmemBytes(int blockQ, int blockKv, int headDim, int stages,
                                                 int elemBytes) {
  return bwdDkdvSmem(blockQ, blockKv, headDim, stages, elemBytes).total;
}
/// Dynamic shared memory of attnc_bwd_dq_*.
ATTNC_HOST_DEVICE constexpr int bwdDqSmemBytes(int blockQ, int blockKv, int headDim, int stages,
                                               int elemBytes) {
  return bwdDqSmem(blockQ, blockKv, headDim, stages, elemBytes).total;
}
/// The larger of the two: enough for either backward kernel (preprocess and
/// dparams use none).
ATTNC_HOST_DEVICE constexpr int bwdSmemBytes(int blockQ, int blockKv, int headDim, int stages,
                                             int elemBytes) {
  return maxInt(bwdDkdvSmemBytes(blockQ, blockKv, headDim, stages, elemBytes),
                bwdDqSmemBytes(blockQ, blockKv, headDim, stages, elemBytes));
}

/// Floats of AttnBwdArgs::dparams_partial: one partial sum per parameter,
/// (batch, head) and dK/dV block, laid out [P][B*H][ceil(Nk/blockKv)].
ATTNC_HOST_DEVICE constexpr long long bwd_workspace_floats(int B, int H, int Nq, int Nk, int P,
                                                           int blockKv) {
  (void)Nq;
  return static_cast<long long>(P) * B * H * ceilDiv(Nk, blockKv);
}

/// A tile shape. Forward: blockQ == 16 * warps. Backward: the dK/dV kernel
/// keeps blockKv keys per CTA and streams blockQ queries, the dQ kernel the
/// other way round, both with `warps` warps; `stages` as in the file comment.
struct TileConfig {
  int blockQ, blockKv, warps, stages;
};

/// Warps along the non-fixed dimension of a backward kernel whose CTA keeps
/// `fixedRows` rows (0 when the shape is invalid).
ATTNC_HOST_DEVICE constexpr int bwdSplit(int fixedRows, int warps) {
  return fixedRows % kRowsPerWarp == 0 && fixedRows > 0 && warps % (fixedRows / kRowsPerWarp) == 0
             ? warps / (fixedRows / kRowsPerWarp)
             : 0;
}

/// Shape constraints of the kernel templates (static_asserted there too).
ATTNC_HOST_DEVICE constexpr bool validTile(const TileConfig &c, int headDim, bool backward) {
  if (headDim % 16 != 0 || headDim <= 0 || c.warps <= 0 || c.warps * 32 > kMaxThreads ||
      c.blockQ % 16 != 0 || c.blockKv % 16 != 0 || c.blockQ <= 0 || c.blockKv <= 0)
    return false;
  if (!backward)
    return c.blockQ == kRowsPerWarp * c.warps && c.stages >= 1;
  const int wnKv = bwdSplit(c.blockKv, c.warps);
  const int wnQ = bwdSplit(c.blockQ, c.warps);
  return c.stages >= 0 && wnKv > 0 && wnQ > 0 && c.blockQ % (8 * wnKv) == 0 &&
         headDim % (8 * wnKv) == 0 && c.blockKv % (8 * wnQ) == 0 && headDim % (8 * wnQ) == 0;
}

/// Accumulator floats per thread (see the file comment).
ATTNC_HOST_DEVICE constexpr int accFloats(const TileConfig &c, int headDim, bool backward) {
  if (!backward)
    return (c.blockKv + headDim) / 2;
  const int wnKv = bwdSplit(c.blockKv, c.warps);
  const int wnQ = bwdSplit(c.blockQ, c.warps);
  if (wnKv == 0 || wnQ == 0)
    return 1 << 30;
  return maxInt((headDim + c.blockQ) / wnKv, (headDim / 2 + c.blockKv) / wnQ);
}

/// Whether every warp GEMM of a config multiplies an even number of 8-column
/// n-tiles. Volta's fp16 tensor-core path (mma.m8n8k4, mma.cuh) takes them
/// in pairs; a GEMM with an odd count runs on fp32 SIMT there instead. The
/// forward's are BLOCK_KV / 8 and D / 8 (even for every valid tile); the
/// backward's warps split the non-fixed dimension (flash_bwd.cuh,
/// BwdTraits: kNT1, kNT3).
ATTNC_HOST_DEVICE constexpr bool evenWarpTiles(const TileConfig &c, int headDim, bool backward) {
  if (!backward)
    return (c.blockKv / 8) % 2 == 0 && (headDim / 8) % 2 == 0;
  const int wnKv = bwdSplit(c.blockKv, c.warps); // dK/dV: fixed keys
  const int wnQ = bwdSplit(c.blockQ, c.warps);   // dQ: fixed queries
  if (wnKv == 0 || wnQ == 0)
    return false;
  auto even = [](int cols, int split) { return (cols / split / 8) % 2 == 0; };
  return even(c.blockQ, wnKv) && even(headDim, wnKv) && even(c.blockKv, wnQ) && even(headDim, wnQ);
}

/// Dynamic shared memory a config needs (the larger bwd kernel for backward).
ATTNC_HOST_DEVICE constexpr int smemBytes(const TileConfig &c, int headDim, int elemBytes,
                                          bool backward) {
  return backward ? bwdSmemBytes(c.blockQ, c.blockKv, headDim, c.stages, elemBytes)
                  : fwdSmemBytes(c.blockQ, c.blockKv, headDim, c.stages, elemBytes);
}

/// Whether a config is a legal shape within the register budget and the
/// arch's shared memory.
/// ... within `smemLimit` bytes of shared memory (a device's own opt-in
/// limit, which the runtime reads from the driver).
ATTNC_HOST_DEVICE constexpr bool tileFitsWithin(const TileConfig &c, int elemBytes, int headDim,
                                                int sm, bool backward, int smemLimit) {
  return validTile(c, headDim, backward) &&
         accFloats(c, headDim, backward) <= accFloatBudget(elemBytes, backward) &&
         smemBytes(c, headDim, elemBytes, backward) <= smemLimit &&
         (sm >= 80 || c.stages <= 1); // no cp.async before Ampere
}
ATTNC_HOST_DEVICE constexpr bool tileFits(const TileConfig &c, int elemBytes, int headDim, int sm,
                                          bool backward) {
  return tileFitsWithin(c, elemBytes, headDim, sm, backward, smemLimitBytes(sm));
}

/// Candidate tiles, most preferred first: large query blocks (K/V reuse),
/// then pipelining, then large KV blocks.
constexpr int kNumFwdCandidates = 13;
constexpr int kNumBwdCandidates = 8;

ATTNC_HOST_DEVICE constexpr TileConfig fwdCandidate(int i) {
  constexpr TileConfig c[kNumFwdCandidates] = {
      {128, 128, 8, 2}, {128, 64, 8, 2}, {128, 128, 8, 1}, {128, 64, 8, 1}, {64, 64, 4, 2},
      {64, 64, 4, 1},   {64, 32, 4, 2},  {64, 32, 4, 1},   {32, 64, 2, 1},  {32, 32, 2, 2},
      {32, 32, 2, 1},   {16, 32, 1, 1},  {16, 16, 1, 1}};
  return c[i];
}
ATTNC_HOST_DEVICE constexpr TileConfig bwdCandidate(int i) {
  constexpr TileConfig c[kNumBwdCandidates] = {{64, 64, 8, 2}, {64, 64, 8, 1}, {32, 32, 4, 2},
                                               {32, 32, 4, 1}, {64, 64, 8, 0}, {32, 32, 4, 0},
                                               {16, 16, 2, 1}, {16, 16, 2, 0}};
  return c[i];
}

/// The default tile for a dtype (elemBytes 4: fp32, 2: fp16/bf16), head dim
/// and SM version (75, 80, 86, 89, 90...): the first candidate that fits.
/// Every supported combination has one (test/unit/kernels/CudaKernelsTest.cpp); the
/// smallest candidate is returned otherwise.
ATTNC_HOST_DEVICE constexpr TileConfig defaultTileWithin(int elemBytes, int headDim, int sm,
                                                         bool backward, int smemLimit) {
  const int n = backward ? kNumBwdCandidates : kNumFwdCandidates;
  for (int i = 0; i < n; ++i) {
    const TileConfig c = backward ? bwdCandidate(i) : fwdCandidate(i);
    if (tileFitsWithin(c, elemBytes, headDim, sm, backward, smemLimit))
      return c;
  }
  return backward ? bwdCandidate(n - 1) : fwdCandidate(n - 1);
}
ATTNC_HOST_DEVICE constexpr TileConfig defaultTile(int elemBytes, int headDim, int sm,
                                                   bool backward) {
  return defaultTileWithin(elemBytes, headDim, sm, backward, smemLimitBytes(sm));
}

} // namespace attnc::tile

#endif // ATTNC_ABI_TILEMODEL_H
