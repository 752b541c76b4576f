//===- lsh.cuh - LSH attention (Reformer, shared QK) ----------------------===//
//
// The CUDA kernels of docs/kernels.md, "LSH kernels (Reformer)". All are
// device function templates <CHUNK, BEFORE, AFTER, D, BQ, BKV, WARPS, T,
// Variant> taking the one AttnLshArgs, run with WARPS * 32 threads and
// static shared memory only (sizes in kernels/abi/attnc/abi/LshTileModel.h, checked here
// by static_assert). Launch order and grids, tiles x rows (bh = b * H + h):
//
//   forward   lsh_hash          (ceil(N/NT), B*H*R) keys (r == 0), buckets, counts
//             lsh_sort_offsets  (R, B*H)           offsets (in place), pad slots
//             lsh_sort_scatter  (ceil(N/NT), B*H*R) perm
//             lsh_fwd           (Npad/BQ, B*H*R)   round_out, round_lse
//               or lsh_fwd_mma: fp16/bf16 on tensor cores, with its own
//               tile (LshTileModel.h lshMmaFwdTile; lsh_fwd_mma.cuh)
//             lsh_combine       (ceil(N/64), B*H)  out (T), lse
//   backward  lsh_hash, lsh_sort_offsets, lsh_sort_scatter: as above (recomputed)
//             lsh_bwd_preprocess(ceil(N/64), B*H)  delta
//             lsh_bwd_dq        (Npad/BQ, B*H*R)   round_dq
//             lsh_bwd_dkdv      (Npad/BKV, B*H*R)  round_dk, round_dv
//               or lsh_bwd_dq_mma, lsh_bwd_dkdv_mma: fp16/bf16 on tensor
//               cores, own tile (lshMmaBwdTile; lsh_bwd_mma.cuh)
//             lsh_bwd_combine   (ceil(N/64), B*H)  dq (T), dv (T)
//
// each grid flattened into x (tile fastest, TileModel.h's gridBlock), the
// row being bh * R + r in the per-round kernels. The backward reads the
// forward's round_lse [B, H, R, N] (and out): the caller keeps it from
// lsh_fwd to the backward, and no backward kernel writes it; the backward
// does not read the combined lse. Everything is fp32 inside (T is loaded
// and converted); dot products run in order d = 0..D-1 with fmaf; there are
// no floating-point atomics and every output element is written by exactly
// one thread, so results are bit-reproducible.
//
// Hash and sort (lsh_hash.cuh; NT = WARPS*32 positions per tile, one per
// thread): r == 0 blocks write keys = q / max(|q|, 1e-6) (a warp per
// position). Each thread hashes its position j: y_k = sum_d q_jd R_r[d][k]
// accumulated as acc = fmaf(q_jd, R_r[d][k], acc) from 0 in order d =
// 0..D-1 (the CPU kernels must do the same for identical buckets), bucket =
// argmax [y; -y], first index on ties; the tile's counts (integer atomics
// in shared memory) go to sort_counts [row][bucket][tile]. lsh_sort_offsets
// turns each row's counts into exclusive offsets in (bucket, tile) order.
// lsh_sort_scatter walks its tile's positions warp by warp (a barrier
// between warps): lanes with equal buckets find each other with
// __match_any_sync, take offset + (their rank among them) and the lowest
// lane advances the bucket's offset. So the sort is stable and the same on
// every run. Slots N..Npad-1 get -1.
//
// Forward (one block per BQ query slots of one round): the block's queries
// are perm[t0 .. t0+BQ) of chunk c = t0 / CHUNK; it visits the key slots of
// chunks max(0, c-BEFORE) .. min(C-1, c+AFTER) in tiles of BKV, gathering
// fp32 keys (from `keys`) and V rows (converted) by perm into the same
// buffer in turn. Query row i of the tile belongs to kThreads/BQ
// consecutive lanes (TPR); each holds BKV/TPR scores and D/TPR output
// columns, the online softmax (natural exp) reduces over the row's lanes
// with xor shuffles. Results go to round_out/round_lse at the queries'
// original positions; pad slots write nothing.
//
// Backward, dQ: like the forward, recomputing p = exp(s - lse_ir) * w_ir
// for query i in round r, with this round's lse_ir = round_lse[r][i] and
// the round weight w_ir = exp(lse_ir - M_i) / sum_r' exp(lse_ir' - M_i),
// M_i = max_r' lse_ir' (w = 0 where lse_ir = -inf; lshRoundWeight, the
// lanes of a query row reading the R round_lse values of it). That is
// exp(s - lse_i) with the combined lse_i = M_i + log(sum) in exact
// arithmetic, but never forms lse_i: for a row whose only kept key is its
// own (self score -1e5) in R >= 2 rounds, lse_i = -1e5 + log R is rounded
// by up to 2^-8 in fp32, which would scale p (and dV) by up to 0.4%;
// lse_ir = -1e5 exactly there and w_ir = 1/R. dQ += scale * g * K. dK/dV:
// one block per BKV key slots of chunk c' streams the query slots of chunks
// max(0, c'-AFTER) .. min(C-1, c'+BEFORE) (the queries whose window holds
// c'), each query tile's round weights computed into shared memory by
// kThreads/BQ lanes per query as in dQ (the same values); dV += p * dO, dK
// += scale * g * Q. delta_i = dout_i . out_i (the combined out). Combine:
// dq = sum_r round_dq + (dk - k (k.dk)) / |q| (dk / 1e-6 when |q| <= 1e-6)
// with dk = sum_r round_dk, dv = sum_r round_dv, rounds in order 0..R-1.
//
// The parts: lsh_common.cuh (shapes, shared helpers), lsh_hash.cuh,
// lsh_fwd.cuh, lsh_bwd.cuh.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_LSH_CUH
#define ATTNC_CUDA_LSH_CUH

#include "attnc/lsh_bwd.cuh"
#include "attnc/lsh_bwd_mma.cuh"
#include "attnc/lsh_fwd.cuh"
#include "attnc/lsh_fwd_mma.cuh"

#endif // ATTNC_CUDA_LSH_CUH
