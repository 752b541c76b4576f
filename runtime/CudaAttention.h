//===- CudaAttention.h - Run one compiled attention op on a GPU -*- C++ -*-===//
//
// Compiles an artifact's CUDA source and runs one fused op: forward, and
// the FlashAttention-2 backward (preprocess, dK/dV, dQ, dparams) when a
// cotangent is given. Where it runs is a KernelDevice and KernelModule
// (runtime/KernelDevice.h): a GPU (NVRTC, cached CUBIN, compiled for the
// GPU present and re-tiled for it, runtime/DeviceTiling.h), or the SIMT
// emulator on the CPU (the same source, host-compiled at the tiles a given
// arch gets: `attnc run --target cuda-sim`).
//
// Three ways in:
//   - run(): host f32 tensors in and out (f16/bf16 kernels get converted
//     copies); low-rank projections run on the device, key padding
//     included (tensor cores for f16 / bf16 kernels).
//   - forwardOnDevice() / backwardOnDevice() / lshOnDevice(): operands
//     already in device memory, in the kernels' dtype, as views
//     (DeviceTensor) that are checked where they enter: dtype, shape,
//     contiguity and 16-byte alignment, an error naming the tensor
//     otherwise.
//   - attendF32OnDevice(): a training step's f32 device buffers, any
//     kind and dtype: conversions and low-rank projections run as device
//     kernels (attnc/device_support.cuh) around the entries above.
//
// One source per way in: CudaAttention.cpp (compiling, launching, the
// device entries), CudaAttentionHost.cpp (run), CudaAttentionStep.cpp
// (attendF32OnDevice), with their shared helpers in CudaAttentionSupport.h.
//
// The GPU half has not run on a GPU yet: scripts/device-check.sh is its
// first test; the emulated half is tested on every build.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_CUDAATTENTION_H
#define ATTNC_RUNTIME_CUDAATTENTION_H

#include "runtime/CpuAttention.h"
#include "runtime/DeviceTiling.h"
#include "runtime/HostCompiler.h"
#include "runtime/KernelDevice.h"
#include "runtime/NvrtcCompiler.h"

#include "attnc/abi/KernelArgs.h"
#include "attnc/abi/ProjectionTileModel.h"

#include <functional>

namespace attnc {

/// A view of a tensor in device memory, as a caller hands it in.
struct DeviceTensor {
  std::string name; ///< "q": for messages
  void *data = nullptr;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides; ///< in elements; empty: contiguous row-major
  std::string dtype;            ///< f32, f16, bf16, i32
};

/// Ok when `t` is what a kernel can read or write in place: `dtype`,
/// `shape`, contiguous, its address 16-byte aligned and, when
/// `vectorRows`, each innermost row a whole number of 16-byte vectors.
/// The error names the kernel, the tensor and the value at fault.
Status checkDeviceOperand(const DeviceTensor &t, const std::string &kernel,
                          const std::string &dtype, const std::vector<int64_t> &shape,
                          bool vectorRows);

/// One dense attention call's device operands ([B, H, N, D] in the
/// kernels' dtype; lse f32 [B, H, Nq]).
struct DeviceAttentionArgs {
  DeviceTensor q, k, v, out, lse;
  DeviceTensor dout, dq, dk, dv;    ///< backward
  const int *lengths = nullptr;     ///< device [B], or null
  const float *params = nullptr;    ///< device [P, H], or null
  const float *rotations = nullptr; ///< LSH: device [rounds, D, buckets / 2]
  float *dparams = nullptr;         ///< backward, P > 0: device [P, H], accumulated into
  /// Low-rank (attendF32OnDevice): E and F, device f32 [kProj, columns] or,
  /// not shared by heads, [H, kProj, columns]; F null: E projects both.
  const float *E = nullptr, *F = nullptr;
  int64_t eColumns = 0; ///< E's and F's columns (0: the kernel's maxSeq)
  /// Their gradients (backward), written; dF null: V's into dE too.
  float *dE = nullptr, *dF = nullptr;
  bool dropout = false;
  uint64_t dropoutSeed = 0;
  uint32_t dropoutOffset = 0;
};

class CudaAttention {
public:
  /// Compiles `source`, whose tiles were picked for `compiledFor`
  /// ("sm_80"), for device `ordinal` (-1: the process's, cuda::processDevice), re-tiling each
  /// kernel for it where its arch or shared memory differ (runtime/DeviceTiling.h); `retile` false
  /// refuses instead. `dtype` is the kernels' element type: f32, f16 or
  /// bf16. With `ptxArch` ("sm_70"), the kernels take that older arch's
  /// code path and tiles instead: compiled to its PTX (compute_70), which
  /// the driver JITs for device 0, so a newer GPU runs, say, the Volta
  /// kernels (the arch must not be newer than the GPU's).
  static Expected<CudaAttention> compile(const std::string &source, const std::string &compiledFor,
                                         const std::string &dtype, const KernelDesc &forward,
                                         std::optional<KernelDesc> backward,
                                         const std::vector<std::string> &includeDirs,
                                         const NvrtcCompiler &compiler, bool retile = true,
                                         const std::string &ptxArch = "", int ordinal = -1);
  /// The same kernels on the SIMT emulator, at the tiles a GPU of `arch`
  /// ("sm_90") runs them with (re-tiled for it, within its shared memory).
  static Expected<CudaAttention>
  compileEmulated(const std::string &source, const std::string &compiledFor,
                  const std::string &arch, const std::string &dtype, const KernelDesc &forward,
                  std::optional<KernelDesc> backward, const HostCompiler &compiler);

  Expected<AttentionOutputs> run(const AttentionInputs &inputs);

  /// Dense kernels (low-rank: over the projected k and v) on device
  /// operands; see the file comment. The backward needs the forward's out
  /// and lse.
  Status forwardOnDevice(const DeviceAttentionArgs &args);
  Status backwardOnDevice(const DeviceAttentionArgs &args);
  /// LSH kernels on device operands (q, v, out, lse; with `backward` also
  /// dout, dq, dv): the backward recomputes the forward first (it reads
  /// each round's lse, which lives in the workspace between the two).
  /// Scratch is one workspace kept between calls.
  Status lshOnDevice(const DeviceAttentionArgs &args, bool backward);

  /// A training step's attention on its own f32 device buffers, whatever
  /// the kernels' dtype and kind: dense, low-rank or LSH; all operands
  /// f32, [B, H, N, D] (lse [B, H, N]), except that dense and low-rank
  /// keys and values (k, v, dk, dv) may have their own length. Forward (`backward` false): out,
  /// lse. Backward: dq, dk (zeros for LSH and the shared-QK dense
  /// fallback, whose keys are the normalised queries), dv,
  /// dE, dF and dparams (accumulated into, as backwardOnDevice does) from
  /// dout and the forward's out and lse (LSH recomputes its forward and
  /// may leave them empty). Around the attention kernels, on the device
  /// (attnc/device_support.cuh): f16 and bf16 kernels read and write
  /// converted copies; low-rank kernels attend over E·K and F·V projected
  /// here, and their backward projects dK' and dV' back and forms dE and
  /// dF. Copies and projections live in a kept operand space: nothing
  /// goes through the host, and after reserveF32OnDevice nothing is
  /// allocated.
  Status attendF32OnDevice(const DeviceAttentionArgs &args, bool backward);
  /// Allocates what attendF32OnDevice needs for B x H x N now (the
  /// operand space and the kernels' workspace), for a step that must not
  /// allocate while it runs.
  Status reserveF32OnDevice(int64_t B, int64_t H, int64_t N);
  /// The module of attnc/device_support.cuh's entry points that
  /// attendF32OnDevice launches (NVRTC or the emulator compiles it where
  /// the attention kernels are).
  static const char *deviceSupportSource();
  /// The kernels' element type.
  const std::string &dtype() const { return dtype_; }
  /// The device entries above enqueue on `stream` (a caller's CUstream;
  /// null: the legacy default stream) from now on, ordered after what was
  /// enqueued before (KernelDevice::useStream). They never wait for the
  /// device: errors of launches come back, errors inside kernels surface
  /// at the caller's next synchronisation.
  Status useStream(void *stream);

  /// What was re-tiled for this device, a line per kernel (none: the
  /// compiled tiles run as they are).
  const std::vector<std::string> &retiled() const { return retiled_; }
  /// The device, as it describes itself.
  std::string device() const { return device_->describe(); }
  KernelDevice &kernelDevice() { return *device_; }
  /// The kernels as they are launched here (tile, warps, shared memory).
  const KernelDesc &forwardKernel() const { return fwd_; }
  const std::optional<KernelDesc> &backwardKernel() const { return bwd_; }

  /// Milliseconds of the last run's kernels (CUDA events; the host clock
  /// on the emulator), forward and backward.
  float forwardMs() const { return forwardMs_; }
  float backwardMs() const { return backwardMs_; }

private:
  CudaAttention() = default;
  static Expected<CudaAttention> finish(CudaAttention a, const std::string &dtype,
                                        const DeviceKernelPlan &fwd,
                                        const std::optional<DeviceKernelPlan> &bwd);
  Expected<AttentionOutputs> runLsh(const AttentionInputs &inputs);
  /// run() of low-rank kernels: attendF32OnDevice, projections on the
  /// device (key padding included).
  Expected<AttentionOutputs> runLowRankOnDevice(const AttentionInputs &inputs);
  Status launch(const std::string &entry, long long blocks, int warps, size_t smem,
                const void *args, size_t argBytes);
  /// Waits for the device (an error names `kernel`) and sets `ms` to the
  /// time between marks `from` and `to`.
  Status waitAndTime(int from, int to, const std::string &kernel, float &ms);
  std::shared_ptr<KernelDevice> device_;
  std::unique_ptr<KernelModule> module_;
  std::string dtype_;
  KernelDesc fwd_;
  std::optional<KernelDesc> bwd_;
  std::vector<std::string> retiled_;
  float forwardMs_ = 0, backwardMs_ = 0;
  /// Scratch of the device entries (the dense backward's delta and dparams
  /// partials, LSH's buckets, permutations and per-round results), kept
  /// between calls and grown when a call needs more.
  Expected<char *> workspace(size_t bytes);
  /// The workspace a dense backward and an LSH call of this shape need.
  size_t denseBackwardWorkspaceBytes(int64_t B, int64_t H, int64_t Nq, int64_t Nk) const;
  size_t lshWorkspaceBytes(int64_t B, int64_t H, int64_t N, bool backward, bool ownOut) const;
  /// Threads of the hash and sort blocks the sort's counts are sized for.
  int lshHashThreads() const;
  /// A buffer of the device kept between calls, grown when a call needs
  /// more.
  struct KeptBuffer {
    std::shared_ptr<void> data;
    size_t bytes = 0;
  };
  Expected<char *> kept(KeptBuffer &buffer, size_t bytes, const std::string &what);
  KeptBuffer workspace_;
  /// attendF32OnDevice: the kernels of attnc/device_support.cuh (compiled
  /// where the attention kernels are, when the dtype or kind needs them),
  /// and the converted and projected operands.
  Status compileSupport(const std::function<Expected<std::unique_ptr<KernelModule>>(
                            const std::string &name, const std::string &source,
                            const std::vector<std::string> &entries)> &compile);
  Status launchSupport(const std::string &entry, long long blocks, int threads, const void *args,
                       size_t argBytes);
  Status convertOnDevice(const void *in, const std::string &from, void *out, const std::string &to,
                         int64_t n);
  /// One low-rank GEMM (ProjectionTileModel.h): fp32 SIMT for f32
  /// kernels, else tensor cores in the kernels' dtype, a split one with
  /// its parts in `partial`.
  Status projectOnDevice(StridedGemmArgs g, float *partial);
  /// The low-rank GEMMs' shape for B x H x Nkeys keys (eColumns 0: E has
  /// the kernel's maxSeq columns).
  tile::LowRankShape lowRankShape(int64_t B, int64_t H, int64_t Nkeys, int64_t eColumns) const;
  /// Floats the split low-rank GEMMs of that shape need (0: none split).
  size_t projectionSplitFloats(const tile::LowRankShape &s) const;
  std::unique_ptr<KernelModule> support_;
  KeptBuffer operands_;
};

} // namespace attnc

#endif // ATTNC_RUNTIME_CUDAATTENTION_H
