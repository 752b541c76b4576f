//===- KernelArgs.h - Arguments of generated attention kernels --*- C++ -*-===//
//
// Shared, byte for byte, by the CUDA kernel headers (compiled by NVRTC), the
// CPU kernel headers and the runtime that fills them in. Includes nothing
// but Philox.h (itself include-free) so NVRTC can compile it. See docs/kernels.md.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_KERNELARGS_H
#define ATTNC_CODEGEN_KERNELARGS_H

#include "Philox.h" // attention dropout masks (no includes of its own)

namespace attnc {

/// Forward attention: out, lse from q, k, v (all contiguous [B, H, N, D]).
struct AttnFwdArgs {
  const void *q, *k, *v; ///< element type T
  void *out;             ///< T, [B, H, Nq, D]
  float *lse;            ///< [B, H, Nq], natural log; -inf for empty rows
  const int *lengths;    ///< [B] key-padding lengths, or nullptr
  const float *params;   ///< per-head parameters [P * H], or nullptr
  int B, H, Nq, Nk;
  float scale;
  /// Attention dropout (variants with kDropout): drop probability (0: off,
  /// as in evaluation), and the Philox seed and offset of this call
  /// (codegen/Philox.h attentionKeep).
  float dropout;
  unsigned int dropout_offset;
  unsigned long long dropout_seed;
};

/// Backward attention (FlashAttention-2 style, recomputing from lse).
struct AttnBwdArgs {
  const void *q, *k, *v, *out, *dout; ///< element type T
  const float *lse;                   ///< saved by the forward
  const int *lengths;
  const float *params;
  float *delta;           ///< workspace [B, H, Nq]: rowsum(dout * out)
  void *dq, *dk, *dv;     ///< T, fully written
  float *dparams;         ///< [P * H], accumulated into; nullptr when P == 0
  float *dparams_partial; ///< workspace for a deterministic reduction
  int B, H, Nq, Nk;
  float scale;
  float dropout; ///< as in AttnFwdArgs: the forward's, so the masks agree
  unsigned int dropout_offset;
  unsigned long long dropout_seed;
};


/// The two row kernels around shared-QK dense attention (LSH's dense
/// fallback): normalise (q -> out = keys) and fold_dk (q, dk -> out = dq +=).
struct SharedQkArgs {
  const void *q;  ///< T, [rows, D]
  const void *dk; ///< T, [rows, D]; fold_dk only
  void *out;      ///< T, [rows, D]: the keys, or dq (accumulated into)
  long long rows; ///< B * H * N
};

/// LSH attention (Reformer, shared QK; docs/kernels.md "LSH kernels"). One
/// struct for every LSH entry point, forward and backward. Keys are the
/// normalised queries, so there is no k. CHUNK, BEFORE, AFTER and the head
/// dim are template parameters of the kernels; rounds and buckets are here
/// and must match the rotations' shape [rounds, D, num_buckets / 2].
struct AttnLshArgs {
  const void *q, *v;        ///< T, [B, H, N, D]
  void *out;                ///< T, [B, H, N, D]: written by the forward, read by the backward
  float *lse;               ///< [B, H, N]: likewise; -inf for rows with no kept key
  const void *dout;         ///< T, backward only
  void *dq, *dv;            ///< T, backward only, fully written (dq includes the key path)
  const int *lengths;       ///< [B] key-padding lengths, or nullptr
  const float *params;      ///< per-head constants [P * H], or nullptr
  const float *rotations;   ///< [rounds, D, num_buckets / 2], fp32
  /// Each round's lse [B, H, rounds, N], on every target: written by the
  /// forward, kept by the caller and read by the backward, which weights the
  /// rounds from these instead of the fp32-rounded combined lse.
  float *round_lse;
  // Workspaces, allocated by the caller on CUDA (sizes below, Npad =
  // ceil(N / CHUNK) * CHUNK); the CPU entry points allocate their own and
  // ignore these (they may be nullptr there).
  int *buckets;             ///< [B, H, rounds, N]
  int *perm;                ///< [B, H, rounds, Npad]: sorted positions, -1 in pad slots
  float *keys;              ///< [B, H, N, D]: q / max(|q|, 1e-6)
  float *round_out;         ///< [B, H, rounds, N, D]: each round's output, original order
  float *delta;             ///< [B, H, N]: rowsum(dout * out), backward
  float *round_dq, *round_dk, *round_dv; ///< [B, H, rounds, N, D], backward
  int B, H, N, rounds, num_buckets;
  float scale;
  /// Attention dropout (variants with kDropout; 0: off): entry (query i,
  /// key j) of round r survives when philox::attentionKeep(dropout_seed,
  /// dropout_offset, bh * rounds + r, i, j, dropout), positions original.
  float dropout;
  unsigned int dropout_offset;
  unsigned long long dropout_seed;
};

} // namespace attnc

#endif // ATTNC_CODEGEN_KERNELARGS_H
