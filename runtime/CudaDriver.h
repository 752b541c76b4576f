//===- CudaDriver.h - CUDA driver API loaded at run time --------*- C++ -*-===//
//
// attnc binaries must start on machines without an NVIDIA driver (every
// development and CI machine), so nothing links libcuda: the driver is
// dlopened ("libcuda.so.1") on first use and its entry points resolved with
// dlsym. A machine without a driver gets an Error saying so, not a loader
// failure at start-up.
//
// Entry points are declared with <cuda.h>'s own prototypes and resolved
// under the names cuda.h maps them to (cuMemAlloc -> cuMemAlloc_v2,
// cuEventElapsedTime -> cuEventElapsedTime_v2, ...), so the ABI always
// matches the headers the runtime was built with. Contexts are the devices'
// primary contexts (what the CUDA runtime, cuBLAS and PyTorch use), so
// memory and streams interoperate with them.
//
// On top of the raw table: device queries, RAII wrappers for the primary
// context, modules, device buffers and events, and a launcher for the
// single-struct-parameter kernels of docs/kernels.md. Every error names what
// failed (the kernel, the module, the call) and carries cuGetErrorString.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_CUDADRIVER_H
#define ATTNC_RUNTIME_CUDADRIVER_H

#include "runtime/Error.h"

#include <cuda.h>

#include <cstddef>
#include <memory>
#include <string>

namespace attnc::cuda {

/// The driver entry points the runtime uses. The X-macro argument is the
/// cuda.h name; it expands to the versioned name (e.g. cuMemAlloc_v2)
/// wherever cuda.h defines such a mapping, in the member name too.
#define ATTNC_CUDA_DRIVER_FUNCTIONS(X)                                                             \
  X(cuGetErrorString)                                                                              \
  X(cuGetErrorName)                                                                                \
  X(cuInit)                                                                                        \
  X(cuDriverGetVersion)                                                                            \
  X(cuDeviceGet)                                                                                   \
  X(cuDeviceGetCount)                                                                              \
  X(cuDeviceGetName)                                                                               \
  X(cuDeviceGetAttribute)                                                                          \
  X(cuDeviceTotalMem)                                                                              \
  X(cuDevicePrimaryCtxRetain)                                                                      \
  X(cuDevicePrimaryCtxRelease)                                                                     \
  X(cuCtxSetCurrent)                                                                               \
  X(cuCtxGetCurrent)                                                                               \
  X(cuCtxPushCurrent)                                                                              \
  X(cuCtxPopCurrent)                                                                               \
  X(cuCtxGetDevice)                                                                                \
  X(cuCtxSynchronize)                                                                              \
  X(cuModuleLoadData)                                                                              \
  X(cuModuleLoadDataEx)                                                                            \
  X(cuModuleUnload)                                                                                \
  X(cuModuleGetFunction)                                                                           \
  X(cuModuleGetGlobal)                                                                             \
  X(cuFuncSetAttribute)                                                                            \
  X(cuFuncGetAttribute)                                                                            \
  X(cuLaunchKernel)                                                                                \
  X(cuMemAlloc)                                                                                    \
  X(cuMemFree)                                                                                     \
  X(cuMemAllocAsync)                                                                               \
  X(cuMemFreeAsync)                                                                                \
  X(cuMemcpyHtoD)                                                                                  \
  X(cuMemcpyDtoH)                                                                                  \
  X(cuMemcpyHtoDAsync)                                                                             \
  X(cuMemcpyDtoHAsync)                                                                             \
  X(cuMemcpyDtoD)                                                                                  \
  X(cuMemsetD8)                                                                                    \
  X(cuMemGetInfo)                                                                                  \
  X(cuStreamCreate)                                                                                \
  X(cuStreamDestroy)                                                                               \
  X(cuStreamSynchronize)                                                                           \
  X(cuStreamIsCapturing)                                                                           \
  X(cuEventCreate)                                                                                 \
  X(cuEventDestroy)                                                                                \
  X(cuEventRecord)                                                                                 \
  X(cuStreamWaitEvent)                                                                             \
  X(cuMemcpyDtoDAsync)                                                                             \
  X(cuMemsetD8Async)                                                                               \
  X(cuPointerGetAttribute)                                                                         \
  X(cuEventSynchronize)                                                                            \
  X(cuEventElapsedTime)

/// The loaded driver: a table of function pointers plus error formatting.
class Driver {
public:
  /// The process-wide driver: loaded and cuInit'ed once (thread-safe).
  /// The error explains why there is none, e.g. "libcuda.so.1 not found: no
  /// NVIDIA driver on this machine (...)", or cuInit's failure.
  static Expected<const Driver *> get();
  /// Ok when get() succeeds, else its error. Cheap after the first call.
  static Status available();
  /// Loads and initialises a driver from `library` (not cached; tests name
  /// a library that does not exist to check the message).
  static Expected<std::unique_ptr<Driver>> load(const std::string &library);

  Driver(const Driver &) = delete;
  Driver &operator=(const Driver &) = delete;
  ~Driver();

  /// cuDriverGetVersion as "13.0".
  std::string versionString() const;
  int version() const { return version_; }
  /// "CUDA_ERROR_OUT_OF_MEMORY (out of memory)".
  std::string errorString(CUresult r) const;
  /// Ok for CUDA_SUCCESS, else "WHAT: errorString(r)".
  Status check(CUresult r, const std::string &what) const;

#define ATTNC_DECLARE_MEMBER(name) decltype(&::name) name = nullptr;
  ATTNC_CUDA_DRIVER_FUNCTIONS(ATTNC_DECLARE_MEMBER)
#undef ATTNC_DECLARE_MEMBER

private:
  Driver() = default;
  void *library_ = nullptr;
  int version_ = 0;
};

/// One device's properties.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;             ///< "NVIDIA H200"
  int ccMajor = 0, ccMinor = 0; ///< compute capability
  int smCount = 0;
  size_t totalMemoryBytes = 0;
  int maxThreadsPerBlock = 0;
  int maxSmemPerBlock = 0;      ///< without opt-in (48 KiB)
  int maxSmemPerBlockOptin = 0; ///< with cuFuncSetAttribute
  int maxSmemPerSm = 0;
  int maxRegistersPerBlock = 0;

  /// "sm_90": the arch to compile CUBINs for.
  std::string arch() const;
  /// "NVIDIA H200 (sm_90, 132 SMs, 139.8 GiB, 227 KiB smem/block)".
  std::string describe() const;
};

/// The ordinal of the device whose memory `p` is (a pointer of
/// cuMemAlloc or of another library's allocator in the same process);
/// an error when it is not device memory (a host pointer).
Expected<int> pointerDevice(const void *p);
/// Number of CUDA devices (0 is not an error).
Expected<int> deviceCount();
/// The GPU this process trains and runs on: under a launcher, its rank
/// among the ranks on this machine (OMPI_COMM_WORLD_LOCAL_RANK,
/// MPI_LOCALRANKID, SLURM_LOCALID) modulo the device count, so the ranks of
/// `mpirun -np N` take a GPU each; otherwise 0. CUDA_VISIBLE_DEVICES still
/// chooses which devices are counted. Errors: no driver, no device.
Expected<int> processDevice();
/// Properties of device `ordinal`.
Expected<DeviceInfo> queryDevice(int ordinal = 0);

/// `ctx` current on the calling thread while this object lives; the
/// thread's previous current context (often the caller's, e.g. PyTorch's
/// on another device) comes back when it dies. Every attnc entry that
/// touches the driver holds one, so attnc leaves its caller's CUDA state
/// as it found it. Nothing is pushed when `ctx` is current already, so
/// nested scopes cost one cuCtxGetCurrent.
class ContextScope {
public:
  static Expected<ContextScope> enter(CUcontext ctx);
  ContextScope(ContextScope &&other) noexcept : pushed_(other.pushed_) { other.pushed_ = false; }
  ContextScope &operator=(ContextScope &&) = delete;
  ContextScope(const ContextScope &) = delete;
  ~ContextScope();

private:
  ContextScope() = default;
  bool pushed_ = false;
};

/// `f()` (a Status) with `ctx` current on the calling thread, the thread's
/// previous context restored after.
template <typename F> Status inContext(CUcontext ctx, F &&f) {
  Expected<ContextScope> scope = ContextScope::enter(ctx);
  if (!scope)
    return scope.takeError();
  return f();
}

/// A device's primary context, retained while this object lives. Creating
/// it changes no thread's current context; enter() makes it current for a
/// scope.
class Context {
public:
  static Expected<Context> create(int ordinal = 0);
  Context(Context &&other) noexcept;
  Context &operator=(Context &&other) noexcept;
  Context(const Context &) = delete;
  Context &operator=(const Context &) = delete;
  ~Context();

  const DeviceInfo &device() const { return device_; }
  CUcontext handle() const { return ctx_; }
  /// The context current on the calling thread until the scope ends.
  Expected<ContextScope> enter() const { return ContextScope::enter(ctx_); }
  /// Makes the context current on the calling thread, for good (tools and
  /// tests that own their thread; library entries use enter()).
  Status makeCurrent() const;
  /// Free and total device memory.
  Expected<std::pair<size_t, size_t>> memoryInfo() const;
  Status synchronize() const;

private:
  Context() = default;
  CUcontext ctx_ = nullptr;
  CUdevice dev_ = 0;
  DeviceInfo device_;
};

/// A kernel (entry function) of a loaded module.
struct Kernel {
  CUfunction function = nullptr;
  CUcontext context = nullptr; ///< its module's; current during launches
  std::string name;
  std::string module;
  /// The CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES last set by
  /// launchKernel(), so it is set once, not per launch.
  size_t dynamicSmemLimit = 48 * 1024;
};

/// A CUBIN, or PTX JIT-compiled by the driver, loaded into the current
/// context (which it remembers: unloading and launches enter it).
class Module {
public:
  /// Loads `image` (a CUBIN, or with `ptx` PTX text ending in a NUL, which
  /// the driver JITs for the current GPU; its error log comes back in the
  /// message); `name` (e.g. the program name) is used in messages.
  static Expected<Module> load(const std::string &image, const std::string &name, bool ptx = false);
  Module(Module &&other) noexcept;
  Module &operator=(Module &&other) noexcept;
  Module(const Module &) = delete;
  Module &operator=(const Module &) = delete;
  ~Module();

  const std::string &name() const { return name_; }
  /// The context it was loaded into.
  CUcontext context() const { return ctx_; }
  /// The entry function `name`; the error names it and the module.
  Expected<Kernel> kernel(const std::string &name) const;
  /// A __device__ / __constant__ variable: its address and size.
  Expected<std::pair<CUdeviceptr, size_t>> global(const std::string &name) const;

private:
  Module() = default;
  CUmodule module_ = nullptr;
  CUcontext ctx_ = nullptr;
  std::string name_;
};

/// Grid or block dimensions.
struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

/// Launches `kernel` whose single parameter is a struct (docs/kernels.md)
/// at `args`, in its module's context. Above 48 KiB of dynamic shared memory the kernel's opt-in
/// limit is raised first. Errors name the kernel, the launch shape and
/// cuGetErrorString. Asynchronous: errors in the kernel itself surface at
/// the next synchronisation.
Status launchKernel(Kernel &kernel, Dim3 grid, Dim3 block, size_t dynamicSmem, CUstream stream,
                    const void *args);
template <typename Args>
Status launch(Kernel &kernel, Dim3 grid, Dim3 block, size_t dynamicSmem, CUstream stream,
              const Args &args) {
  return launchKernel(kernel, grid, block, dynamicSmem, stream, &args);
}

/// cuStreamSynchronize with an error naming `what` (e.g. the last kernel).
Status synchronize(CUstream stream, const std::string &what);

/// Device memory of the current context, freed (in that context) when
/// destroyed.
class DeviceBuffer {
public:
  static Expected<DeviceBuffer> allocate(size_t bytes);
  DeviceBuffer(DeviceBuffer &&other) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer();

  CUdeviceptr ptr() const { return ptr_; }
  /// The address as a kernel-argument pointer.
  template <typename T> T *as() const { return reinterpret_cast<T *>(ptr_); }
  size_t size() const { return size_; }
  /// Synchronous copies of `bytes` (<= size()) from / to host memory.
  Status upload(const void *host, size_t bytes);
  Status download(void *host, size_t bytes) const;
  Status zero();

private:
  DeviceBuffer() = default;
  void free();
  CUdeviceptr ptr_ = 0;
  CUcontext ctx_ = nullptr;
  size_t size_ = 0;
};

/// A CUDA event for timing.
class Event {
public:
  static Expected<Event> create();
  Event(Event &&other) noexcept;
  Event &operator=(Event &&other) noexcept;
  Event(const Event &) = delete;
  Event &operator=(const Event &) = delete;
  ~Event();

  Status record(CUstream stream = nullptr);
  /// Milliseconds from `start` to `end` (waits for `end`).
  static Expected<float> elapsedMs(const Event &start, const Event &end);

private:
  Event() = default;
  CUevent event_ = nullptr;
};

} // namespace attnc::cuda

#endif // ATTNC_RUNTIME_CUDADRIVER_H
