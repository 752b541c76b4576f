//===- lsh.h - LSH attention (Reformer, shared QK) on the CPU ---*- C++ -*-===//
//
// Forward and backward of LSH attention, fp32, semantics fixed by
// docs/kernels.md "LSH kernels (Reformer)":
//
//   template <int CHUNK, int BEFORE, int AFTER, int D, class Variant>
//   int attnc::cpu::lsh_fwd(const attnc::AttnLshArgs &a);   // out, lse, round_lse
//   template <int CHUNK, int BEFORE, int AFTER, int D, class Variant>
//   int attnc::cpu::lsh_bwd(const attnc::AttnLshArgs &a);   // dq, dv
//
// Both return 0 or a Status code (null pointer; bad size: B, H, N < 1,
// rounds < 1, num_buckets odd or < 2; workspace allocation failure). They
// allocate their own workspaces (about 2·B·H·rounds·N ints for buckets and
// permutation, 3·B·H·N floats, per-thread tiles, and B·H·N·D floats for dk in
// the backward; no per-round copies of the output) and ignore the workspace
// pointers of AttnLshArgs (buckets, perm, keys, round_out, round_d*,
// delta). round_lse ([B, H, rounds, N]) is caller-allocated: the forward
// writes it (when given) and the backward needs it.
//
// Phases (barriers of one OpenMP parallel region):
//   1. den_j = max(|q_j|, 1e-6)                               (per row)
//   2. buckets: y = q·R_r with the tile GEMM (every y a sum over d = 0..D-1
//      in order), argmax over [y; -y], first index on ties
//                                       (per (b, h, r, block of 64 rows))
//   3. stable counting sort per (b, h, r): histogram, prefix sum, scatter.
//   Forward, then round by round (r = 0..R-1), one task per (b, h, chunk):
//   4. gather the window's q and v rows into contiguous blocks (the chunk's
//      own queries are part of its window), keys k = q / den, Sᵀ = K_w·Qᵀ,
//      masks, the softmax statistics over the whole window, O = P·V_w; then
//      fold the round into out with a running maximum and sum (the online
//      softmax across rounds: out = Σ_r exp(lse_r − lse)·o_r, accumulated in
//      round order, without rounding lse first)
//   5. out /= sum, lse = max + log(sum).
//   Backward, after delta = rowsum(dout·out) and the round weights
//   w_r = softmax_r(round_lse) (p = exp(s − lse_r)·w_r never forms the
//   fp32-rounded combined lse), round by round, one parallel
//   loop with two kinds of task: a dq task per query chunk (dq_i += scale·
//   g·k_j over the chunk's window) and a dk/dv task per key chunk (the
//   queries that see key chunk c' are in chunks c'-AFTER..c'+BEFORE):
//   dk_j += scale·g·q_i, dv_j += p·dout_i; finally dq_j += the
//   normalisation backward of dk_j.
// Within a round each query (key) position is in exactly one chunk, so every
// row is updated by one task per round, and rounds run in order: no atomics,
// results bit-identical across runs and thread counts.
//
// The parts: lsh_common.h (shared state), lsh_hash.h (phases 1-3),
// lsh_fwd.h (4-5), lsh_bwd.h (the backward).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CPU_LSH_H
#define ATTNC_CPU_LSH_H

#include "lsh_bwd.h"
#include "lsh_fwd.h"

#endif // ATTNC_CPU_LSH_H
