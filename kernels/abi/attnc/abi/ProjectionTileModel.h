//===- ProjectionTileModel.h - Tiles and shapes of the low-rank GEMMs -----===//
//
// The numbers the low-rank (Linformer) projection kernels
// (kernels/cuda/attnc/device_support.cuh strided_gemm_mma), the runtime,
// attnc perf and the tests agree on, and the three GEMMs a low-rank
// variant runs around its attention (docs/kernels.md, "Low-rank
// projections on tensor cores"). constexpr and no headers beyond the
// kernel ABI, so NVRTC and the host compiler both read it.
//
// strided_gemm_mma: a block of kProjWarps warps per kProjTileM x kProjTileN
// tile of one C_z, each warp 16 rows by kProjTileN columns; kProjDepth-deep
// slices of A and B are read as fp32, rounded to the kernel's 16-bit type
// and staged in shared memory (A [m][k], kProjDepth + 8 halves a row; B
// [n][k] likewise, or [k][n], kProjTileN + 8 halves a row, when its n side
// is contiguous: the 16-byte pads keep ldmatrix free of bank conflicts),
// then multiplied on mma.cuh's warp GEMMs with fp32 accumulation. One
// entry per dtype and layout (projLayout).
//
// Split-K: when a GEMM has fewer tiles than kProjTargetBlocks (K' = E·K:
// k x D outputs per (b, h) over a depth of N), its summed range (terms x
// slices) is cut into `splits` contiguous parts. Each part writes its
// partial C to a workspace, and strided_gemm_reduce sums the parts in
// order: the split depends on the shape only, so a shape's result is the
// same on every GPU and every run.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_ABI_PROJECTIONTILEMODEL_H
#define ATTNC_ABI_PROJECTIONTILEMODEL_H

#include "attnc/abi/KernelArgs.h"
#include "attnc/abi/Qualifiers.h"

namespace attnc::tile {

constexpr int kProjTileM = 64;
constexpr int kProjTileN = 64;
constexpr int kProjDepth = 64;
constexpr int kProjWarps = kProjTileM / 16;
constexpr int kProjThreads = 32 * kProjWarps;
constexpr int kProjRowHalves = kProjDepth + 8; ///< a staged row, 16-bit elements
/// A k row of B staged k-major (its n side contiguous in memory).
constexpr int kProjKRowHalves = kProjTileN + 8;
/// About two waves of blocks on a 132-SM H100 (more than one block fits
/// an SM; the rest hides the global loads' latency).
constexpr long long kProjTargetBlocks = 256;
/// A split gets at least this many slices, and there are at most
/// kProjMaxSplits of them (the workspace is splits partial Cs).
constexpr long long kProjMinSlicesPerSplit = 8;
constexpr int kProjMaxSplits = 16;
/// strided_gemm_reduce: a thread per element of C.
constexpr int kProjReduceThreads = 256;

ATTNC_HOST_DEVICE constexpr long long projCeil(long long a, long long b) { return (a + b - 1) / b; }

/// Output tiles of one C_z.
ATTNC_HOST_DEVICE constexpr long long projTiles(long long m, long long n) {
  return projCeil(m, kProjTileM) * projCeil(n, kProjTileN);
}

/// The split of a GEMM's summed range (terms x kProjDepth slices).
ATTNC_HOST_DEVICE constexpr int projSplits(long long m, long long n, long long k, long long terms,
                                           long long batches) {
  const long long tiles = batches * projTiles(m, n);
  const long long slices = terms * projCeil(k, kProjDepth);
  if (tiles >= kProjTargetBlocks || slices < 2 * kProjMinSlicesPerSplit)
    return 1;
  long long s = projCeil(kProjTargetBlocks, tiles);
  if (s > slices / kProjMinSlicesPerSplit)
    s = slices / kProjMinSlicesPerSplit;
  return int(s < kProjMaxSplits ? s : kProjMaxSplits);
}

/// Which side of A and of B is contiguous in memory, as strided_gemm_mma's
/// entry names it: A's "k" or "m", then B's "k" or "n" (the low-rank GEMMs
/// are "kn" K' = E·K, "mn" dK = Eᵀ·dK', "kk" dE = dK'·Kᵀ).
ATTNC_HOST_DEVICE constexpr const char *projLayout(const StridedGemmArgs &g) {
  return g.a_col == 1 ? (g.b_row == 1 ? "kk" : "kn") : (g.b_row == 1 ? "mk" : "mn");
}

/// Blocks of the fp32 strided_gemm: a kStridedGemmTile square tile of each
/// C_z (g.batches of them), never split.
ATTNC_HOST_DEVICE constexpr long long simtGemmGrid(const StridedGemmArgs &g) {
  return g.batches * projCeil(g.m, kStridedGemmTile) * projCeil(g.n, kStridedGemmTile);
}

/// Blocks of strided_gemm_mma (split outermost, then z, tile fastest).
ATTNC_HOST_DEVICE constexpr long long projGrid(const StridedGemmArgs &g) {
  return (g.splits > 1 ? g.splits : 1) * g.batches * projTiles(g.m, g.n);
}

/// Floats of the split workspace (0 without a split).
ATTNC_HOST_DEVICE constexpr long long projPartialFloats(const StridedGemmArgs &g) {
  return g.splits > 1 ? g.splits * g.batches * g.m * g.n : 0;
}

/// Blocks of strided_gemm_reduce.
ATTNC_HOST_DEVICE constexpr long long projReduceGrid(const StridedGemmArgs &g) {
  return projCeil(g.batches * g.m * g.n, kProjReduceThreads);
}

//===-- The low-rank GEMMs ------------------------------------------------===//
//
// A low-rank variant over [B, H, N, D] keys with E (and F) of kProj rows and
// Nmax columns, one per head when perHead: the GEMMs of docs/kernels.md
// "Low-rank", as StridedGemmArgs without pointers (the caller sets a, b, c,
// seq_lengths and partial). batches, splits and the key-padding axis are
// set.

struct LowRankShape {
  long long B, H, N, D, kProj, Nmax;
  bool perHead;
};

/// Sets the split of a GEMM whose shape is set.
ATTNC_HOST_DEVICE constexpr StridedGemmArgs projWithSplit(StridedGemmArgs g) {
  g.splits = projSplits(g.m, g.n, g.k, g.terms, g.batches);
  return g;
}

/// X'[b, h] (kProj x D) = E_h[:, :n_b] · X[b, h, :n_b] (n_b x D).
ATTNC_HOST_DEVICE constexpr StridedGemmArgs lowRankProject(const LowRankShape &s) {
  StridedGemmArgs g{};
  g.m = s.kProj, g.n = s.D, g.k = s.N;
  g.a_row = s.Nmax, g.a_col = 1, g.b_row = s.D, g.b_col = 1, g.c_row = s.D, g.c_col = 1;
  g.a_batch = s.perHead ? s.kProj * s.Nmax : 0, g.a_batch_mod = s.H;
  g.b_batch = s.N * s.D, g.c_batch = s.kProj * s.D;
  g.terms = 1, g.beta = 0, g.batches = s.B * s.H;
  g.seq_axis = kGemmSeqDepth, g.seq_z_scale = 1, g.seq_div = int(s.H);
  return projWithSplit(g);
}

/// dX[b, h] (N x D) = E_hᵀ (N x kProj) · dX'[b, h] (kProj x D); rows at or
/// past n_b are zero.
ATTNC_HOST_DEVICE constexpr StridedGemmArgs lowRankProjectBack(const LowRankShape &s) {
  StridedGemmArgs g{};
  g.m = s.N, g.n = s.D, g.k = s.kProj;
  g.a_row = 1, g.a_col = s.Nmax, g.b_row = s.D, g.b_col = 1, g.c_row = s.D, g.c_col = 1;
  g.a_batch = s.perHead ? s.kProj * s.Nmax : 0, g.a_batch_mod = s.H;
  g.b_batch = s.kProj * s.D, g.c_batch = s.N * s.D;
  g.terms = 1, g.beta = 0, g.batches = s.B * s.H;
  g.seq_axis = kGemmSeqRowsOfA, g.seq_z_scale = 1, g.seq_div = int(s.H);
  return projWithSplit(g);
}

/// dE_g (kProj x N, row stride Nmax) += Σ dX'[b, h] · X[b, h]ᵀ over the
/// batch (per head: batch h, term b) or over batch and heads (shared: one
/// batch, term b·H + h); columns at or past n_b add nothing.
ATTNC_HOST_DEVICE constexpr StridedGemmArgs lowRankWeightGrad(const LowRankShape &s) {
  StridedGemmArgs g{};
  g.m = s.kProj, g.n = s.N, g.k = s.D;
  g.a_row = s.D, g.a_col = 1, g.b_row = 1, g.b_col = s.D, g.c_row = s.Nmax, g.c_col = 1;
  g.beta = 1;
  g.seq_axis = kGemmSeqColumnsOfB, g.seq_z_scale = 0;
  if (s.perHead) {
    g.a_batch = s.kProj * s.D, g.a_batch_mod = s.H, g.b_batch = s.N * s.D;
    g.c_batch = s.kProj * s.Nmax, g.terms = int(s.B), g.a_term = s.H * s.kProj * s.D;
    g.b_term = s.H * s.N * s.D, g.batches = s.H, g.seq_div = 1;
  } else {
    g.a_batch_mod = 1, g.terms = int(s.B * s.H), g.a_term = s.kProj * s.D;
    g.b_term = s.N * s.D, g.batches = 1, g.seq_div = int(s.H);
  }
  return projWithSplit(g);
}

} // namespace attnc::tile

#endif // ATTNC_ABI_PROJECTIONTILEMODEL_H
