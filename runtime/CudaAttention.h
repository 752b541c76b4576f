//===- CudaAttention.h - Run one compiled attention op on a GPU -*- C++ -*-===//
//
// Compiles an artifact's CUDA source with NVRTC (cached CUBIN), loads it in
// the device's primary context and runs one fused op: forward, and the
// FlashAttention-2 backward (preprocess, dK/dV, dQ, dparams) when a
// cotangent is given. Tensors arrive and leave as host f32; f16/bf16
// kernels get converted copies. Low-rank projections run on the host (the
// CPU kernels' projection, compiled by the host compiler) around the GPU
// attention: correct, not fast; the GEMMs move to cuBLAS later.
//
// NOT YET RUN ON A GPU: written and compiled without one (see the notes of
// the fused-kernel issue); scripts/device-check.sh is its first test.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_CUDAATTENTION_H
#define ATTNC_RUNTIME_CUDAATTENTION_H

#include "runtime/CpuAttention.h"
#include "runtime/CudaDriver.h"
#include "runtime/HostCompiler.h"
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
  Status loadHostProjections();
  using ProjectFwdFn = int(const float *, const float *, float *, const int *, int, int, int, int,
                           int, int, int);
  using ProjectBwdFn = int(const float *, const float *, const float *, float *, float *,
                           const int *, int, int, int, int, int, int, int);
  cuda::Context ctx_;
  cuda::Module module_;
  std::string dtype_;
  KernelDesc fwd_;
  std::optional<KernelDesc> bwd_;
  std::vector<cuda::Kernel> fwdKernels_, bwdKernels_;
  float forwardMs_ = 0, backwardMs_ = 0;
  std::shared_ptr<SharedObject> projections_; ///< low-rank: the host projections
  ProjectFwdFn *projectFwd_ = nullptr;
  ProjectBwdFn *projectBwd_ = nullptr;
};

} // namespace attnc

#endif // ATTNC_RUNTIME_CUDAATTENTION_H
