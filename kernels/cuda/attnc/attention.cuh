//===- attention.cuh - Every CUDA attention kernel, in one include -*- C++ -*-===//
//
// The CUDA family's umbrella: what a generated kernel unit (codegen's
// emitKernels, compiled by NVRTC or on the SIMT emulator) and a test of the
// whole family include. Each header below documents its own templates:
//
//   flash_fwd.cuh / flash_bwd.cuh  dense attention (mma.sync tiles)
//   lsh.cuh                        LSH (Reformer) attention, forward and backward
//   shared_qk.cuh                  the row kernels around shared-QK dense attention
//
// Linformer's projections are cuBLAS GEMMs or the generated unit's own
// kernels, not a header here. The emitted unit defines its variants after
// this include. What the headers read beyond it are the compile flags the
// JIT passes (ATTNC_EMULATE_MMA and the emulator's other switches).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_ATTENTION_CUH
#define ATTNC_CUDA_ATTENTION_CUH

#include "attnc/flash_bwd.cuh"
#include "attnc/flash_fwd.cuh"
#include "attnc/lsh.cuh"
#include "attnc/shared_qk.cuh"

#endif // ATTNC_CUDA_ATTENTION_CUH
