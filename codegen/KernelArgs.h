//===- KernelArgs.h - Arguments of generated attention kernels --*- C++ -*-===//
//
// Shared, byte for byte, by the CUDA kernel headers (compiled by NVRTC), the
// CPU kernel headers and the runtime that fills them in. Includes no headers
// so NVRTC can compile it. See docs/kernels.md.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_KERNELARGS_H
#define ATTNC_CODEGEN_KERNELARGS_H

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
};

} // namespace attnc

#endif // ATTNC_CODEGEN_KERNELARGS_H
