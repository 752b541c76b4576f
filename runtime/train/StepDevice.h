//===- StepDevice.h - Where a compiled CUDA step runs ------------*- C++ -*-===//
//
// A compiled CUDA step needs memory, kernel launches, GEMMs and copies.
// CompiledStep drives it the same way on a GPU (runtime/train/
// CompiledStepCuda.cpp: the driver, NVRTC, cuBLAS) and on the CPU with the
// kernels under the SIMT emulator (host memory, CPU GEMMs): so the
// emulator tests run every line of the GPU engine except this interface's
// GPU implementation.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_STEPDEVICE_H
#define ATTNC_RUNTIME_TRAIN_STEPDEVICE_H

#include "runtime/Cublas.h"
#include "runtime/Error.h"
#include "runtime/KernelDevice.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

struct attnc_kargs; // kernels/abi/attnc/abi/model_step_env.h

namespace attnc {
class SharedObject;
}

namespace attnc::train {

/// What a GEMM input becomes at precision `p` (cuBLAS's compute type) on
/// the emulated device: the value the 16-bit type (or tf32) holds, rounded
/// to nearest even.
float roundGemmInput(float x, cuda::GemmPrecision p);

/// Ok for a launch shape a GPU takes (1-D grid below 2^31 blocks, a
/// multiple of 32 threads up to 1024), else an error naming the kernel.
Status checkLaunchShape(const std::string &kernel, long long blocks, int threads);

/// The KernelDevice a compiled CUDA step runs on, with the step's own
/// kernels, the optimizer's and GEMMs.
class StepDevice : public KernelDevice {
public:
  /// Kernel `name` of the step's module over `blocks` blocks of `threads`.
  virtual Status launch(const std::string &name, long long blocks, int threads,
                        const attnc_kargs &args) = 0;
  /// Kernel `name` of attnc/optimizer.cuh (which every step module
  /// carries) over `blocks` blocks of opt::kThreads, its one struct
  /// argument (OptGradNormArgs or OptAdamWArgs) at `args`.
  virtual Status launchOptimizer(const std::string &name, long long blocks, const void *args) = 0;
  /// Row-major C[M, N] = op(A)·op(B), fp32 storage.
  virtual Status gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A,
                      const float *B, float *C) = 0;

  /// A second queue of work beside the step's (data-parallel overlap:
  /// the gradient exchange runs there while the backward goes on).
  /// sideWaitsForMain: work enqueued on the side from now on starts after
  /// everything enqueued on the main queue so far; mainWaitsForSide the
  /// reverse. While onSide(true), launchOptimizer and copy enqueue on the
  /// side; sideStream() is its CUstream, for NCCL. The defaults (the
  /// emulator, which runs every call at once, in order) do nothing.
  virtual Status sideWaitsForMain() { return {}; }
  virtual Status mainWaitsForSide() { return {}; }
  virtual void onSide(bool side) { (void)side; }
  virtual void *sideStream() { return nullptr; }
};

/// The GPU: the step's kernels (`kernelSource`) compiled by NVRTC for
/// device 0's arch, GEMMs on cuBLAS at `precision`. Errors: no driver,
/// NVRTC, module load, cuBLAS.
Expected<std::unique_ptr<StepDevice>>
createGpuStepDevice(const std::string &kernelSource, const std::string &programName,
                    const std::vector<std::string> &includeDirs, cuda::GemmPrecision precision);

/// The emulated device: host memory, the kernels compiled into `so` with
/// the SIMT emulator (looked up by name, launched through its
/// attnc_simt_run and attnc_simt_run_optimizer), GEMMs on the CPU with inputs rounded as
/// `precision` rounds them. `so` must outlive the device.
std::unique_ptr<StepDevice> createEmulatedStepDevice(const SharedObject &so,
                                                     cuda::GemmPrecision precision);

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_STEPDEVICE_H
