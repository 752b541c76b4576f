//===- CudaAttention.h - Run one compiled attention op on a GPU -*- C++ -*-===//
//
// Compiles an artifact's CUDA source with NVRTC (cached CUBIN), loads it in
// the device's primary context and runs one fused op: forward, and the
// FlashAttention-2 backward (preprocess, dK/dV, dQ, dparams) when a
// cotangent is given. Tensors arrive and leave as host f32; f16/bf16
// kernels get converted copies. Low-rank projections run on the host
// (codegen/cpu/include/attnc/lowrank.h) around the GPU attention: correct,
// not fast; the GEMMs move to cuBLAS later.
//
// NOT YET RUN ON A GPU: written and compiled without one (see the notes of
// the fused-kernel issue); scripts/device-check.sh is its first test.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_CUDAATTENTION_H
#define ATTNC_RUNTIME_CUDAATTENTION_H

#include "runtime/CpuAttention.h"
#include "runtime/CudaDriver.h"
#include "runtime/NvrtcCompiler.h"

namespace attnc {

class CudaAttention {
public:
  /// `dtype` is the kernels' element type: f32, f16 or bf16.
  static Expected<CudaAttention> compile(const std::string &source, const std::string &arch,
                                         const std::string &dtype, const KernelDesc &forward,
                                         std::optional<KernelDesc> backward,
                                         const std::vector<std::string> &includeDirs,
                                         const NvrtcCompiler &compiler);

  Expected<AttentionOutputs> run(const AttentionInputs &inputs);

  /// Milliseconds of the last run's kernels (CUDA events), forward and
  /// backward.
  float forwardMs() const { return forwardMs_; }
  float backwardMs() const { return backwardMs_; }

private:
  CudaAttention(cuda::Context ctx, cuda::Module module)
      : ctx_(std::move(ctx)), module_(std::move(module)) {}
  Expected<AttentionOutputs> runLsh(const AttentionInputs &inputs);
  cuda::Context ctx_;
  cuda::Module module_;
  std::string dtype_;
  KernelDesc fwd_;
  std::optional<KernelDesc> bwd_;
  std::vector<cuda::Kernel> fwdKernels_, bwdKernels_;
  float forwardMs_ = 0, backwardMs_ = 0;
};

/// NVRTC include directories of the CUDA kernel headers: $ATTNC_CUDA_KERNEL_INCLUDE
/// (colon separated) if set, else the source tree's codegen/ and
/// codegen/cuda/include.
std::vector<std::string> defaultCudaKernelIncludeDirs();

/// What the host compiler needs to run CUDA kernel code under the SIMT
/// emulator (attnc train --engine cuda-sim): the emulator's directory, the
/// kernel directories and the toolkit's headers (cuda_fp16.h).
std::vector<std::string> cudaEmulatorIncludeDirs();

} // namespace attnc

#endif // ATTNC_RUNTIME_CUDAATTENTION_H
