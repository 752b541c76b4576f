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
  /// Compiles `source`, whose tiles were picked for `compiledFor`
  /// ("sm_80"), for device 0, re-tiling each kernel for it where its arch
  /// or shared memory differ (runtime/DeviceTiling.h); `retile` false
  /// refuses instead. `dtype` is the kernels' element type: f32, f16 or
  /// bf16.
  static Expected<CudaAttention> compile(const std::string &source, const std::string &compiledFor,
                                         const std::string &dtype, const KernelDesc &forward,
                                         std::optional<KernelDesc> backward,
                                         const std::vector<std::string> &includeDirs,
                                         const NvrtcCompiler &compiler, bool retile = true);

  Expected<AttentionOutputs> run(const AttentionInputs &inputs);

  /// What was re-tiled for this GPU, a line per kernel (none: the
  /// compiled tiles run as they are).
  const std::vector<std::string> &retiled() const { return retiled_; }
  /// The GPU, as DeviceInfo::describe() says it.
  const std::string &device() const { return device_; }

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
  std::vector<std::string> retiled_;
  std::string device_;
  float forwardMs_ = 0, backwardMs_ = 0;
  std::shared_ptr<SharedObject> projections_; ///< low-rank: the host projections
  ProjectFwdFn *projectFwd_ = nullptr;
  ProjectBwdFn *projectBwd_ = nullptr;
};

} // namespace attnc

#endif // ATTNC_RUNTIME_CUDAATTENTION_H
