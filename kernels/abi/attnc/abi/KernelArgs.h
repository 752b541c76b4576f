//===- KernelArgs.h - Arguments of generated attention kernels --*- C++ -*-===//
//
// Shared, byte for byte, by the CUDA kernel headers (compiled by NVRTC), the
// CPU kernel headers and the runtime that fills them in. Includes nothing
// but Philox.h (itself include-free) so NVRTC can compile it. See docs/kernels.md.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_ABI_KERNELARGS_H
#define ATTNC_ABI_KERNELARGS_H

#include "attnc/abi/Philox.h" // attention dropout masks (no includes of its own)

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
  /// (attnc/abi/Philox.h attentionKeep).
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

/// The low-rank (Linformer) projections on the device
/// (attnc/device_support.cuh strided_gemm and strided_gemm_mma), fp32 in
/// memory:
///   C_z = beta * C_z + sum over t < terms of A_(z,t) * B_(z,t)
/// for z < batches, A [m, k], B [k, n], C [m, n], each addressed by element
/// strides. A's batch offset is (z % a_batch_mod) * a_batch (a per-head
/// E repeats over the batch); B's and C's are z * stride; term t adds
/// t * a_term and t * b_term (dE sums over the batch that way).
///
/// Key padding (seq_lengths non-null): one axis is a sequence position,
/// and the elements at or past the length of its batch row b =
/// (z * seq_z_scale + t) / seq_div read as zero: A's rows (dK = Eᵀ·dK'),
/// the depth (K' = E·K) or B's columns (dE = dK'·Kᵀ).
struct StridedGemmArgs {
  const float *a, *b;
  float *c;
  long long m, n, k;
  long long a_row, a_col, b_row, b_col, c_row, c_col; ///< strides of A[m, k], B[k, n], C[m, n]
  long long a_batch, a_batch_mod, b_batch, c_batch;
  long long a_term, b_term;
  int terms;
  float beta;             ///< 0: C is written without being read; 1: accumulated into
  const int *seq_lengths; ///< [batch rows] key-padding lengths, or null
  int seq_axis;           ///< a GemmSeqAxis
  int seq_z_scale;        ///< 0 or 1
  int seq_div;            ///< >= 1
  /// strided_gemm_mma only: the batches of the grid, and its split of the
  /// summed range (terms x depth) into `splits` parts whose partial C land
  /// in `partial` ([splits, batches, m, n]) for strided_gemm_reduce to sum
  /// in order (1: C is written directly; partial unused).
  long long batches;
  int splits;
  float *partial;
};
/// Which axis of a StridedGemmArgs is a padded sequence.
enum GemmSeqAxis { kGemmSeqRowsOfA = 0, kGemmSeqDepth = 1, kGemmSeqColumnsOfB = 2 };
/// strided_gemm's launch: a block of kStridedGemmThreads threads per
/// kStridedGemmTile x kStridedGemmTile tile of one C_z, grid batches x
/// tiles (tile fastest); it stages kStridedGemmDepth-deep slices.
constexpr int kStridedGemmTile = 32;
constexpr int kStridedGemmThreads = (kStridedGemmTile / 4) * (kStridedGemmTile / 4);
constexpr int kStridedGemmDepth = 16;

/// An elementwise conversion between fp32 and a kernel's 16-bit type
/// (attnc/device_support.cuh convert), rounding to nearest even.
struct ConvertArgs {
  const void *in;
  void *out;
  long long n; ///< elements
};
/// convert's launch: kConvertThreads threads a block, kConvertPerThread
/// elements a thread.
constexpr int kConvertThreads = 256;
constexpr int kConvertPerThread = 4;

/// LSH attention (Reformer, shared QK; docs/kernels.md "LSH kernels"). One
/// struct for every LSH entry point, forward and backward. Keys are the
/// normalised queries, so there is no k. CHUNK, BEFORE, AFTER and the head
/// dim are template parameters of the kernels; rounds and buckets are here
/// and must match the rotations' shape [rounds, D, num_buckets / 2].
struct AttnLshArgs {
  const void *q, *v;      ///< T, [B, H, N, D]
  void *out;              ///< T, [B, H, N, D]: written by the forward, read by the backward
  float *lse;             ///< [B, H, N]: likewise; -inf for rows with no kept key
  const void *dout;       ///< T, backward only
  void *dq, *dv;          ///< T, backward only, fully written (dq includes the key path)
  const int *lengths;     ///< [B] key-padding lengths, or nullptr
  const float *params;    ///< per-head constants [P * H], or nullptr
  const float *rotations; ///< [rounds, D, num_buckets / 2], fp32
  /// Each round's lse [B, H, rounds, N], on every target: written by the
  /// forward, kept by the caller and read by the backward, which weights the
  /// rounds from these instead of the fp32-rounded combined lse.
  float *round_lse;
  // Workspaces, allocated by the caller on CUDA (sizes below, Npad =
  // ceil(N / CHUNK) * CHUNK); the CPU entry points allocate their own and
  // ignore these (they may be nullptr there).
  int *buckets;     ///< [B, H, rounds, N]
  int *perm;        ///< [B, H, rounds, Npad]: sorted positions, -1 in pad slots
  float *keys;      ///< [B, H, N, D]: q / max(|q|, 1e-6)
  float *round_out; ///< [B, H, rounds, N, D]: each round's output, original order
  float *delta;     ///< [B, H, N]: rowsum(dout * out), backward
  float *round_dq, *round_dk, *round_dv; ///< [B, H, rounds, N, D], backward
  int B, H, N, rounds, num_buckets;
  float scale;
  /// Attention dropout (variants with kDropout; 0: off): entry (query i,
  /// key j) of round r survives when philox::attentionKeep(dropout_seed,
  /// dropout_offset, bh * rounds + r, i, j, dropout), positions original.
  float dropout;
  unsigned int dropout_offset;
  unsigned long long dropout_seed;
  /// CUDA workspace of the multi-block sort, lshSortCounts() ints
  /// (LshTileModel.h): per (b, h, round), each bucket's count in each tile
  /// of positions, then their exclusive offsets. The CPU ignores it.
  int *sort_counts;
};

/// The CPU kernels' own argument structs (the CUDA low-rank kernels take
/// AttnFwdArgs / AttnBwdArgs with the projections done by the runtime).
/// Default visibility: they appear in the generated entry points'
/// signatures (the kernels' own namespace attnc::cpu is otherwise hidden).
/// Not part of a CUDA compile (NVRTC refuses unannotated host functions).
#if !defined(__CUDACC_RTC__) && !defined(__CUDACC__)
namespace cpu {

/// Low-rank attention forward: projections, then dense attention over the
/// kProj projected keys (Variant must have neither causality nor key
/// padding: the projected keys are all valid).
struct LowRankFwdArgs {
  const float *q, *k, *v; ///< q [B, H, Nq, D]; k, v [B, H, N, D]
  const float *E, *F;     ///< [kProj, Nmax] or [H, kProj, Nmax]; F may be E
  float *kp, *vp;         ///< projected keys / values [B, H, kProj, D] (written, keep for bwd)
  float *out, *lse;       ///< [B, H, Nq, D], [B, H, Nq]
  const int *lengths;     ///< [B] key-padding lengths before projection, or nullptr
  const float *params;    ///< per-head parameters of the variant, or nullptr
  int B, H, Nq, N, Nmax, kProj;
  bool perHead; ///< E, F are [H, kProj, Nmax] (share = none)
  float scale;
  /// Attention dropout over the projected keys (AttnFwdArgs's fields: the
  /// mask of (query i, projected key j)).
  float dropout;
  unsigned int dropout_offset;
  unsigned long long dropout_seed;
};

struct LowRankBwdArgs {
  const float *q, *k, *v, *E, *F;
  const float *kp, *vp; ///< as written by lowrank_fwd
  const float *out, *dout, *lse;
  const int *lengths;
  const float *params;
  float *delta;           ///< workspace [B, H, Nq]
  float *dkp, *dvp;       ///< workspace [B, H, kProj, D]
  float *dq, *dk, *dv;    ///< fully written
  float *dE, *dF;         ///< accumulated; dF may equal dE (kv / layerwise), or be null with F = E
  float *dparams;         ///< [P·H] accumulated, nullptr when P = 0
  float *dparams_partial; ///< see bwd_workspace_floats(), or nullptr
  int B, H, Nq, N, Nmax, kProj;
  bool perHead;
  float scale;
  float dropout; ///< as LowRankFwdArgs's, so the masks agree
  unsigned int dropout_offset;
  unsigned long long dropout_seed;
};

/// Floats of `dparams_partial` the CPU backward uses: one partial per
/// (b, h, query block) and parameter.
inline unsigned long long bwd_workspace_floats(int B, int H, int Nq, int blockQ, int numParams) {
  if (numParams <= 0 || B <= 0 || H <= 0 || Nq <= 0 || blockQ <= 0)
    return 0;
  return static_cast<unsigned long long>(B) * H * ((Nq + blockQ - 1) / blockQ) * numParams;
}

} // namespace cpu
#endif

} // namespace attnc

#endif // ATTNC_ABI_KERNELARGS_H
