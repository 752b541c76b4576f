//===- KernelDevice.cpp - GPU and emulated kernel devices -----------------===//
#include "runtime/KernelDevice.h"

#include "runtime/CudaDriver.h"
#include "runtime/HostCompiler.h"
#include "runtime/KernelHeaders.h"
#include "runtime/NvrtcCompiler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <set>

namespace attnc {

namespace {

//===-- GPU ---------------------------------------------------------------===//

CUdeviceptr dptr(const void *p) { return reinterpret_cast<CUdeviceptr>(p); }

class GpuKernelDevice final : public KernelDevice {
public:
  GpuKernelDevice(cuda::Context ctx, const cuda::Driver &d) : ctx_(std::move(ctx)), d_(d) {}
  std::string describe() const override { return ctx_.device().describe(); }
  Expected<DeviceScope> enter() override { return enterContext(ctx_); }
  Expected<void *> allocate(size_t bytes, const std::string &what) override {
    return allocateWith(bytes, what, false);
  }
  Expected<void *> allocateOrdered(size_t bytes, const std::string &what) override {
    return allocateWith(bytes, what, true);
  }
  void release(void *p) override { releaseWith(p, false); }
  void releaseOrdered(void *p) override { releaseWith(p, true); }
  Status upload(void *dst, const void *src, size_t bytes) override {
    countUpload(bytes);
    if (!bytes)
      return {};
    return inContext([&] {
      // From pageable memory the driver stages the bytes before returning,
      // so `src` is free for reuse; the copy itself is ordered on stream_.
      return d_.check(d_.cuMemcpyHtoDAsync(dptr(dst), src, bytes, stream_), "cuMemcpyHtoDAsync");
    });
  }
  Status download(void *dst, const void *src, size_t bytes) override {
    countDownload(bytes);
    if (!bytes)
      return {};
    return inContext([&]() -> Status {
      if (Status s =
              d_.check(d_.cuMemcpyDtoHAsync(dst, dptr(src), bytes, stream_), "cuMemcpyDtoHAsync");
          !s)
        return s;
      return d_.check(d_.cuStreamSynchronize(stream_), "cuStreamSynchronize (a download)");
    });
  }
  Status copy(void *dst, const void *src, size_t bytes) override {
    if (!bytes)
      return {};
    return inContext([&] {
      return d_.check(d_.cuMemcpyDtoDAsync(dptr(dst), dptr(src), bytes, stream_),
                      "cuMemcpyDtoDAsync");
    });
  }
  Status zero(void *dst, size_t bytes) override {
    if (!bytes)
      return {};
    return inContext([&] {
      return d_.check(d_.cuMemsetD8Async(dptr(dst), 0, bytes, stream_), "cuMemsetD8Async");
    });
  }
  Status synchronize() override {
    return inContext(
        [&] { return d_.check(d_.cuStreamSynchronize(stream_), "cuStreamSynchronize"); });
  }
  Status useStream(void *stream) override {
    CUstream next = static_cast<CUstream>(stream);
    if (next == stream_)
      return {};
    return inContext([&]() -> Status {
      // A stream being captured into a CUDA graph may not wait on work
      // outside the capture: the graph runs at replay, which the caller
      // orders (a variant's scratch is one; see attnc.h).
      for (CUstream s : {stream_, next}) {
        Expected<bool> c = capturing(s);
        if (!c)
          return c.takeError();
        if (*c) {
          stream_ = next;
          return {};
        }
      }
      if (!switched_)
        if (Status s = d_.check(d_.cuEventCreate(&switched_, CU_EVENT_DISABLE_TIMING),
                                "cuEventCreate (ordering a change of stream)");
            !s)
          return s;
      if (Status s =
              d_.check(d_.cuEventRecord(switched_, stream_), "cuEventRecord (the old stream)");
          !s)
        return s;
      if (Status s = d_.check(d_.cuStreamWaitEvent(next, switched_, 0),
                              "cuStreamWaitEvent (the new stream)");
          !s)
        return s;
      stream_ = next;
      return {};
    });
  }
  ~GpuKernelDevice() override {
    if (switched_)
      (void)d_.cuEventDestroy(switched_);
  }

private:
  /// Whether `s` is being captured into a graph. The legacy stream
  /// answers CUDA_ERROR_STREAM_CAPTURE_IMPLICIT while any blocking stream
  /// is captured: that counts as captured too.
  Expected<bool> capturing(CUstream s) const {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = d_.cuStreamIsCapturing(s, &status);
    if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
      return true;
    if (Status c = d_.check(r, "cuStreamIsCapturing"); !c)
      return c.takeError();
    return status != CU_STREAM_CAPTURE_STATUS_NONE;
  }
  /// `f()` with the device's context current (the caller's restored after).
  template <typename F> Status inContext(F &&f) { return cuda::inContext(ctx_.handle(), f); }
  Expected<void *> allocateWith(size_t bytes, const std::string &what, bool ordered) {
    CUdeviceptr p = 0;
    const std::string call = std::string(ordered ? "cuMemAllocAsync(" : "cuMemAlloc(") +
                             std::to_string(bytes) + " B, " + what + ")";
    Status s = inContext([&]() -> Status {
      if (!ordered)
        return d_.check(d_.cuMemAlloc(&p, std::max<size_t>(bytes, 16)), call);
      Expected<bool> c = capturing(stream_);
      if (!c)
        return c.takeError();
      if (*c)
        return makeError(what + " must grow to " + std::to_string(bytes) +
                         " B while the stream is being captured into a CUDA graph, where the "
                         "memory would belong to the graph; make one call of the same shape "
                         "before capturing");
      return d_.check(d_.cuMemAllocAsync(&p, std::max<size_t>(bytes, 16), stream_), call);
    });
    if (!s)
      return s.takeError();
    live_[reinterpret_cast<void *>(p)] = {bytes, ordered};
    countAllocation(bytes);
    return reinterpret_cast<void *>(p);
  }
  void releaseWith(void *p, bool ordered) {
    if (!p)
      return;
    bool fromPool = false;
    if (auto it = live_.find(p); it != live_.end())
      countRelease(it->second.bytes), fromPool = it->second.ordered, live_.erase(it);
    (void)inContext([&]() -> Status {
      if (ordered)
        (void)d_.cuMemFreeAsync(dptr(p), stream_);
      else if (fromPool) {
        // Pool memory outside the stream order (a variant being freed,
        // whose last stream may be gone): once the device is idle, any
        // stream's order will do.
        (void)d_.cuCtxSynchronize();
        (void)d_.cuMemFreeAsync(dptr(p), nullptr);
      } else
        (void)d_.cuMemFree(dptr(p));
      return {};
    });
  }

  struct Allocation {
    size_t bytes = 0;
    bool ordered = false; ///< from the stream-ordered pool
  };
  cuda::Context ctx_;
  const cuda::Driver &d_;
  std::map<void *, Allocation> live_;
  CUstream stream_ = nullptr;
  CUevent switched_ = nullptr;
};

class GpuKernelModule final : public KernelModule {
public:
  explicit GpuKernelModule(cuda::Module m) : module_(std::move(m)) {}
  ~GpuKernelModule() override {
    // The events are the module's context's: destroyed inside it.
    Expected<cuda::ContextScope> scope = cuda::ContextScope::enter(module_.context());
    for (std::optional<cuda::Event> &e : events_)
      e.reset();
  }
  Status launch(const std::string &entry, long long blocks, int threads, size_t smemBytes,
                const void *args, size_t) override {
    Expected<cuda::Kernel *> k = kernel(entry);
    if (!k)
      return k.takeError();
    if (blocks < 1 || blocks > 2147483647LL || threads < 1 || threads > 1024)
      return makeError("kernel " + entry + ": cannot launch " + std::to_string(blocks) +
                       " blocks of " + std::to_string(threads) + " threads");
    return cuda::launchKernel(**k, {unsigned(blocks), 1, 1}, {unsigned(threads), 1, 1}, smemBytes,
                              stream_, args);
  }
  bool has(const std::string &entry) const override {
    return kernels_.count(entry) || bool(module_.kernel(entry));
  }
  Status mark(int slot) override {
    if (slot < 0 || slot >= kSlots)
      return makeError("timing mark " + std::to_string(slot) + " out of range");
    Expected<cuda::ContextScope> scope = cuda::ContextScope::enter(module_.context());
    if (!scope)
      return scope.takeError();
    if (!events_[slot]) {
      Expected<cuda::Event> e = cuda::Event::create();
      if (!e)
        return e.takeError();
      events_[slot].emplace(std::move(e).take());
    }
    return events_[slot]->record(stream_);
  }
  void setStream(void *stream) override { stream_ = static_cast<CUstream>(stream); }
  Expected<float> elapsedMs(int from, int to) override {
    if (from < 0 || to < 0 || from >= kSlots || to >= kSlots || !events_[from] || !events_[to])
      return makeError("timing marks " + std::to_string(from) + ", " + std::to_string(to) +
                       " were not recorded");
    Expected<cuda::ContextScope> scope = cuda::ContextScope::enter(module_.context());
    if (!scope)
      return scope.takeError();
    return cuda::Event::elapsedMs(*events_[from], *events_[to]);
  }

private:
  Expected<cuda::Kernel *> kernel(const std::string &entry) {
    auto it = kernels_.find(entry);
    if (it == kernels_.end()) {
      Expected<cuda::Kernel> k = module_.kernel(entry);
      if (!k)
        return k.takeError();
      it = kernels_.emplace(entry, *k).first;
    }
    return &it->second;
  }
  static constexpr int kSlots = 8;
  cuda::Module module_;
  std::map<std::string, cuda::Kernel> kernels_;
  std::optional<cuda::Event> events_[kSlots];
  CUstream stream_ = nullptr;
};

//===-- Emulator ----------------------------------------------------------===//

class EmulatedKernelDevice final : public KernelDevice {
public:
  ~EmulatedKernelDevice() override {
    for (auto &[p, bytes] : live_)
      std::free(p);
  }
  std::string describe() const override { return "the SIMT emulator (CPU)"; }
  Expected<DeviceScope> enter() override { return DeviceScope(); }
  Expected<void *> allocate(size_t bytes, const std::string &what) override {
    // 256-byte aligned, as cuMemAlloc's; NaN-filled (0xff bytes), as
    // uninitialised device memory holds garbage.
    const size_t n = (std::max<size_t>(bytes, 16) + 255) / 256 * 256;
    void *p = std::aligned_alloc(256, n);
    if (!p)
      return makeError("emulated device: cannot allocate " + std::to_string(bytes) + " B for " +
                       what);
    std::memset(p, 0xff, n);
    live_[p] = bytes;
    countAllocation(bytes);
    return p;
  }
  void release(void *p) override {
    if (auto it = live_.find(p); it != live_.end()) {
      countRelease(it->second);
      live_.erase(it);
      std::free(p);
    }
  }
  Status upload(void *dst, const void *src, size_t bytes) override {
    countUpload(bytes);
    if (bytes)
      std::memcpy(dst, src, bytes);
    return {};
  }
  Status download(void *dst, const void *src, size_t bytes) override {
    countDownload(bytes);
    if (bytes)
      std::memcpy(dst, src, bytes);
    return {};
  }
  Status copy(void *dst, const void *src, size_t bytes) override {
    if (bytes)
      std::memmove(dst, src, bytes);
    return {};
  }
  Status zero(void *dst, size_t bytes) override {
    if (bytes)
      std::memset(dst, 0, bytes);
    return {};
  }
  Status synchronize() override { return {}; }

private:
  std::map<void *, size_t> live_;
};

/// The entry points of an emulated module, called through the launcher
/// its translation unit defines (the emulator's state lives in that shared
/// object, so its launches must too).
class EmulatedKernelModule final : public KernelModule {
public:
  using LaunchFn = int(const char *entry, long long blocks, int threads, unsigned long long smem,
                       const void *args);
  using ErrorFn = const char *();
  EmulatedKernelModule(SharedObject so, std::vector<std::string> entries)
      : so_(std::move(so)), entries_(entries.begin(), entries.end()) {}
  Status init() {
    Expected<LaunchFn *> launch = so_.function<LaunchFn>("attnc_emu_launch");
    if (!launch)
      return launch.takeError();
    Expected<ErrorFn *> error = so_.function<ErrorFn>("attnc_emu_last_error");
    if (!error)
      return error.takeError();
    launch_ = *launch, error_ = *error;
    return {};
  }
  Status launch(const std::string &entry, long long blocks, int threads, size_t smemBytes,
                const void *args, size_t) override {
    if (blocks < 1 || blocks > 2147483647LL || threads < 1 || threads > 1024 || threads % 32)
      return makeError("kernel " + entry + ": cannot launch " + std::to_string(blocks) +
                       " blocks of " + std::to_string(threads) + " threads");
    const int rc = launch_(entry.c_str(), blocks, threads, smemBytes, args);
    if (rc == 2)
      return makeError("kernel " + entry + " is not in the emulated module");
    if (rc != 0)
      return makeError("kernel " + entry + " on the SIMT emulator: " + error_());
    return {};
  }
  bool has(const std::string &entry) const override { return entries_.count(entry) > 0; }
  Status mark(int slot) override {
    if (slot < 0 || slot >= kSlots)
      return makeError("timing mark " + std::to_string(slot) + " out of range");
    marks_[slot] = std::chrono::steady_clock::now();
    return {};
  }
  Expected<float> elapsedMs(int from, int to) override {
    if (from < 0 || to < 0 || from >= kSlots || to >= kSlots)
      return makeError("timing marks out of range");
    return float(std::chrono::duration<double, std::milli>(marks_[to] - marks_[from]).count());
  }

private:
  static constexpr int kSlots = 8;
  SharedObject so_;
  std::set<std::string> entries_;
  LaunchFn *launch_ = nullptr;
  ErrorFn *error_ = nullptr;
  std::chrono::steady_clock::time_point marks_[kSlots];
};

/// The translation unit of an emulated module: the emulator, the kernels,
/// and the launcher dispatching on the entry name.
std::string emulatedModuleSource(const std::string &cudaSource,
                                 const std::vector<std::string> &entries) {
  std::string s = "// A CUDA kernel module on the SIMT emulator (runtime/KernelDevice.h).\n"
                  "#include \"attnc/tensor_core_emulator.h\"\n"
                  "#include <cstring>\n"
                  "#ifndef __launch_bounds__\n#define __launch_bounds__(...)\n#endif\n\n" +
                  cudaSource +
                  "\nnamespace {\n"
                  "template <class Args>\n"
                  "int attnc_emu_run(void (*kernel)(Args), long long blocks, int threads,\n"
                  "                  unsigned long long smem, const void *args) {\n"
                  "  const Args a = *static_cast<const Args *>(args);\n"
                  "  return ::emu::launchSmem(blocks, 1, threads, size_t(smem), [&] { "
                  "kernel(a); }) ? 0 : 1;\n"
                  "}\n} // namespace\n\n"
                  "extern \"C\" const char *attnc_emu_last_error() { return "
                  "::emu::lastError.c_str(); }\n"
                  "extern \"C\" int attnc_emu_launch(const char *entry, long long blocks, int "
                  "threads,\n"
                  "                                  unsigned long long smem, const void *args) "
                  "{\n";
  for (const std::string &e : entries)
    s += "  if (!std::strcmp(entry, \"" + e + "\"))\n    return attnc_emu_run(" + e +
         ", blocks, threads, smem, args);\n";
  s += "  return 2;\n}\n";
  return s;
}

} // namespace

Expected<DeviceScope> enterContext(const cuda::Context &ctx) {
  Expected<cuda::ContextScope> scope = ctx.enter();
  if (!scope)
    return scope.takeError();
  auto held = std::make_shared<cuda::ContextScope>(std::move(*scope));
  return DeviceScope([held]() mutable { held.reset(); });
}

Expected<std::shared_ptr<KernelDevice>> createGpuKernelDevice(int wanted) {
  Expected<const cuda::Driver *> driver = cuda::Driver::get();
  if (!driver)
    return driver.takeError();
  Expected<int> ordinal = wanted >= 0 ? Expected<int>(wanted) : cuda::processDevice();
  if (!ordinal)
    return ordinal.takeError();
  Expected<cuda::Context> ctx = cuda::Context::create(*ordinal);
  if (!ctx)
    return ctx.takeError();
  return std::shared_ptr<KernelDevice>(new GpuKernelDevice(std::move(*ctx), **driver));
}

Expected<std::unique_ptr<KernelModule>> loadGpuKernelModule(const Cubin &cubin) {
  Expected<cuda::Module> module = cuda::Module::load(cubin.image, cubin.programName, cubin.ptx);
  if (!module)
    return module.takeError();
  return std::unique_ptr<KernelModule>(new GpuKernelModule(std::move(*module)));
}

std::shared_ptr<KernelDevice> createEmulatedKernelDevice() {
  return std::make_shared<EmulatedKernelDevice>();
}

Expected<std::unique_ptr<KernelModule>>
compileEmulatedKernelModule(const std::string &programName, const std::string &cudaSource,
                            const std::vector<std::string> &entries,
                            const std::vector<std::string> &defines, const HostCompiler &compiler) {
  Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::CudaEmulator);
  if (!dirs)
    return dirs.takeError();
  HostCompileOptions options;
  options.includeDirs = *dirs;
  // -fno-strict-aliasing: emulated shared memory is one byte array, typed
  // many ways (as the kernels' tests compile it).
  options.flags = {"-fno-strict-aliasing"};
  for (const std::string &d : defines)
    options.flags.push_back(d);
  Expected<SharedObject> so = compiler.compileAndLoad(
      programName + ".emu.cpp", emulatedModuleSource(cudaSource, entries), options);
  if (!so)
    return so.takeError();
  auto module = std::make_unique<EmulatedKernelModule>(std::move(*so), entries);
  if (Status s = module->init(); !s)
    return s.takeError();
  return std::unique_ptr<KernelModule>(std::move(module));
}

} // namespace attnc
