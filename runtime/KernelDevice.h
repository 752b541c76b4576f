//===- KernelDevice.h - Where compiled CUDA kernels run -------*- C++ -*-===//
//
// CUDA kernels run on a GPU, or on the CPU under the SIMT emulator
// (kernels/emulator): the same kernel source, the same launches,
// the same runtime code around them. KernelDevice is the memory and the
// copies (device memory, or host memory filled with NaNs as uninitialised
// device memory holds garbage), KernelModule the compiled kernels,
// launched by entry name with their one struct argument. The emulated pair
// counts its host<->device traffic, so tests can show what a step moves.
//
//   GPU:       createGpuKernelDevice (device 0's primary context), and
//              loadGpuKernelModule (a CUBIN of NVRTC's);
//   emulator:  createEmulatedKernelDevice, and compileEmulatedKernelModule
//              (the CUDA source built by the host compiler against the
//              emulator, docs/emulator.md).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_KERNELDEVICE_H
#define ATTNC_RUNTIME_KERNELDEVICE_H

#include "runtime/Error.h"

#include <algorithm>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace attnc {

class HostCompiler;
struct Cubin;

/// Copies and allocations between the host and a device, counted.
struct DeviceTraffic {
  long long uploads = 0, downloads = 0, allocations = 0;
  long long uploadBytes = 0, downloadBytes = 0;
  long long bytesInUse = 0, peakBytes = 0; ///< device memory allocated here
};

/// While alive, a device is usable from the calling thread (a GPU: its
/// context current); when it dies, the thread's previous state comes back.
class DeviceScope {
public:
  DeviceScope() = default;
  explicit DeviceScope(std::function<void()> leave) : leave_(std::move(leave)) {}
  DeviceScope(DeviceScope &&other) noexcept : leave_(std::exchange(other.leave_, nullptr)) {}
  DeviceScope &operator=(DeviceScope &&) = delete;
  DeviceScope(const DeviceScope &) = delete;
  ~DeviceScope() {
    if (leave_)
      leave_();
  }

private:
  std::function<void()> leave_;
};

class KernelDevice {
public:
  virtual ~KernelDevice() = default;
  /// "NVIDIA H200 (sm_90, ...)" or "the SIMT emulator (CPU)".
  virtual std::string describe() const = 0;
  /// The device usable from the calling thread for the scope's life (a
  /// GPU's context current, the caller's restored after). Each method below
  /// enters it by itself; a caller making many calls enters once around
  /// them, so the inner ones find it current and push nothing.
  virtual Expected<DeviceScope> enter() = 0;
  /// Device memory (addresses as pointers; freed with release). The error
  /// names `what`. Synchronous: for set-up, not for a call's hot path.
  virtual Expected<void *> allocate(size_t bytes, const std::string &what) = 0;
  virtual void release(void *p) = 0;
  /// Device memory ordered on the stream in use (cuMemAllocAsync): no host
  /// wait, usable by work enqueued after it on that stream. Refused while
  /// the stream is being captured into a CUDA graph (the allocation would
  /// belong to the graph). Freed with releaseOrdered, also stream-ordered.
  virtual Expected<void *> allocateOrdered(size_t bytes, const std::string &what) {
    return allocate(bytes, what);
  }
  virtual void releaseOrdered(void *p) { release(p); }
  /// Host to device, enqueued on the stream in use (the host buffer may be
  /// reused as soon as it returns).
  virtual Status upload(void *dst, const void *src, size_t bytes) = 0;
  /// Device to host, ordered on the stream in use; returns when the bytes
  /// are in `dst`.
  virtual Status download(void *dst, const void *src, size_t bytes) = 0;
  virtual Status copy(void *dst, const void *src, size_t bytes) = 0;
  virtual Status zero(void *dst, size_t bytes) = 0;
  /// Waits for the device's work (errors in kernels surface here).
  virtual Status synchronize() = 0;
  /// Where copies, zeroing and (through the modules) launches go from now
  /// on: a CUstream of the caller's, or null for the legacy default
  /// stream. When it changes, the new stream first waits (an event, no
  /// host wait) for what was enqueued on the old one, so scratch reused
  /// across streams is never raced. The emulator runs everything at once
  /// and ignores it.
  virtual Status useStream(void *stream) {
    (void)stream;
    return {};
  }
  /// What was moved and allocated so far (implementations count it).
  const DeviceTraffic &traffic() const { return traffic_; }

protected:
  void countUpload(size_t bytes) { ++traffic_.uploads, traffic_.uploadBytes += (long long)bytes; }
  void countDownload(size_t bytes) {
    ++traffic_.downloads, traffic_.downloadBytes += (long long)bytes;
  }
  void countAllocation(size_t bytes) {
    ++traffic_.allocations, traffic_.bytesInUse += (long long)bytes;
    traffic_.peakBytes = std::max(traffic_.peakBytes, traffic_.bytesInUse);
  }
  void countRelease(size_t bytes) { traffic_.bytesInUse -= (long long)bytes; }

private:
  DeviceTraffic traffic_;
};

/// Compiled kernels, launched by entry point name.
class KernelModule {
public:
  virtual ~KernelModule() = default;
  /// Entry `entry` over `blocks` blocks (a one-dimensional grid, as every
  /// attention grid is) of `threads` threads with `smemBytes` of dynamic
  /// shared memory; its one struct argument at `args`, `argBytes` long.
  virtual Status launch(const std::string &entry, long long blocks, int threads, size_t smemBytes,
                        const void *args, size_t argBytes) = 0;
  /// Whether the module has entry `entry`.
  virtual bool has(const std::string &entry) const = 0;
  /// The stream launches and marks go to (null: the legacy default one);
  /// KernelDevice::useStream orders the switch.
  virtual void setStream(void *stream) { (void)stream; }
  /// A timestamp in the device's order of work: elapsed milliseconds
  /// between two marks (GPU: CUDA events; emulator: the host clock).
  virtual Status mark(int slot) = 0;
  virtual Expected<float> elapsedMs(int from, int to) = 0;
};

namespace cuda {
class Context;
}
/// `ctx` current on the calling thread for the scope's life (what a GPU
/// device's enter() returns).
Expected<DeviceScope> enterContext(const cuda::Context &ctx);

/// A device of the CUDA driver, in its primary context (the context
/// PyTorch and the runtime API use): `ordinal`, or with -1 the process's
/// (cuda::processDevice). Errors: no driver, no such device.
Expected<std::shared_ptr<KernelDevice>> createGpuKernelDevice(int ordinal = -1);
/// A CUBIN loaded on the GPU device (created by createGpuKernelDevice).
Expected<std::unique_ptr<KernelModule>> loadGpuKernelModule(const Cubin &cubin);

/// Host memory standing in for a device: NaN-filled allocations, counted
/// traffic.
std::shared_ptr<KernelDevice> createEmulatedKernelDevice();
/// `cudaSource` (an emitted CUDA kernel translation unit with entry points
/// `entries`) compiled for the CPU against the SIMT emulator, with the
/// tensor-core and asynchronous-copy paths emulated, and `defines`
/// (NVRTC-style "-DNAME=VALUE") applied.
Expected<std::unique_ptr<KernelModule>>
compileEmulatedKernelModule(const std::string &programName, const std::string &cudaSource,
                            const std::vector<std::string> &entries,
                            const std::vector<std::string> &defines, const HostCompiler &compiler);

} // namespace attnc

#endif // ATTNC_RUNTIME_KERNELDEVICE_H
