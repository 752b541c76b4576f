//===- GpuStepDevice.cpp - A compiled CUDA step's GPU --------------------===//
//
// The one part of the GPU training engine the emulator tests cannot reach:
// the driver (memory, copies, launches), NVRTC for the device's arch and
// cuBLAS. The step is on the legacy default stream, so its launches,
// GEMMs and copies run in program order; a data-parallel run's exchange
// has a non-blocking stream of its own, ordered against the step by events.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/StepDevice.h"

#include "attnc/abi/OptimizerArgs.h"
#include "attnc/abi/model_step_env.h"
#include "runtime/Cublas.h"
#include "runtime/CudaDriver.h"
#include "runtime/KernelCache.h"
#include "runtime/NvrtcCompiler.h"

#include <map>

namespace attnc::train {

namespace {

CUdeviceptr dptr(const void *p) { return reinterpret_cast<CUdeviceptr>(p); }

class GpuStepDevice final : public StepDevice {
public:
  GpuStepDevice(cuda::Context ctx, cuda::Module module, std::unique_ptr<cuda::Cublas> blas,
                cuda::GemmPrecision precision, const cuda::Driver &driver)
      : ctx_(std::move(ctx)), module_(std::move(module)), blas_(std::move(blas)),
        precision_(precision), d_(driver) {}

  std::string describe() const override { return ctx_.device().describe(); }
  Expected<DeviceScope> enter() override { return enterContext(ctx_); }

  Expected<void *> allocate(size_t bytes, const std::string &what) override {
    CUdeviceptr p = 0;
    if (Status s = inContext([&] {
          return d_.check(d_.cuMemAlloc(&p, std::max<size_t>(bytes, 4)),
                          "cuMemAlloc(" + std::to_string(bytes) + " B, " + what + ")");
        });
        !s)
      return s.takeError();
    return reinterpret_cast<void *>(p);
  }
  void release(void *p) override {
    if (p)
      (void)inContext([&] { return d_.check(d_.cuMemFree(dptr(p)), "cuMemFree"); });
  }
  // The step runs on the legacy default stream, in program order: its
  // copies are the synchronous calls (the host reads what they bring).
  Status upload(void *dst, const void *src, size_t bytes) override {
    countUpload(bytes);
    return inContext(
        [&] { return d_.check(d_.cuMemcpyHtoD(dptr(dst), src, bytes), "cuMemcpyHtoD"); });
  }
  Status download(void *dst, const void *src, size_t bytes) override {
    countDownload(bytes);
    return inContext(
        [&] { return d_.check(d_.cuMemcpyDtoH(dst, dptr(src), bytes), "cuMemcpyDtoH"); });
  }
  Status copy(void *dst, const void *src, size_t bytes) override {
    return inContext([&] {
      if (onSide_)
        return d_.check(d_.cuMemcpyDtoDAsync(dptr(dst), dptr(src), bytes, side_),
                        "cuMemcpyDtoDAsync (the exchange's stream)");
      return d_.check(d_.cuMemcpyDtoD(dptr(dst), dptr(src), bytes), "cuMemcpyDtoD");
    });
  }
  Status zero(void *dst, size_t bytes) override {
    return inContext([&] {
      if (onSide_)
        return d_.check(d_.cuMemsetD8Async(dptr(dst), 0, bytes, side_),
                        "cuMemsetD8Async (the exchange's stream)");
      return d_.check(d_.cuMemsetD8(dptr(dst), 0, bytes), "cuMemsetD8");
    });
  }
  Status launch(const std::string &name, long long blocks, int threads,
                const attnc_kargs &args) override {
    return launchStruct(name, blocks, threads, &args);
  }
  Status launchOptimizer(const std::string &name, long long blocks, const void *args) override {
    return launchStruct(name, blocks, opt::kThreads, args);
  }
  Status gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, const float *B,
              float *C) override {
    // cuBLAS works in the current context.
    return inContext([&] { return blas_->gemm(ta, tb, M, N, K, A, B, C, precision_, nullptr); });
  }
  Status synchronize() override {
    return inContext([&] { return cuda::synchronize(nullptr, "the compiled CUDA step"); });
  }

  ~GpuStepDevice() override {
    Expected<cuda::ContextScope> scope = ctx_.enter();
    if (side_) {
      (void)d_.cuStreamSynchronize(side_);
      (void)d_.cuStreamDestroy(side_);
    }
    for (CUevent e : {mainDone_, sideDone_})
      if (e)
        (void)d_.cuEventDestroy(e);
    blas_.reset(); // cuBLAS frees its workspace in the current context
  }
  // The side stream is non-blocking: it does not wait for the legacy
  // default stream the step runs on, only for the events below.
  Status sideWaitsForMain() override {
    return inContext([&]() -> Status {
      if (Status s = ensureSide(); !s)
        return s;
      if (Status s = d_.check(d_.cuEventRecord(mainDone_, nullptr), "cuEventRecord (the step)"); !s)
        return s;
      return d_.check(d_.cuStreamWaitEvent(side_, mainDone_, 0),
                      "cuStreamWaitEvent (the exchange)");
    });
  }
  Status mainWaitsForSide() override {
    if (!side_)
      return {};
    return inContext([&]() -> Status {
      if (Status s = d_.check(d_.cuEventRecord(sideDone_, side_), "cuEventRecord (the exchange)");
          !s)
        return s;
      return d_.check(d_.cuStreamWaitEvent(nullptr, sideDone_, 0), "cuStreamWaitEvent (the step)");
    });
  }
  void onSide(bool side) override { onSide_ = side && side_; }
  void *sideStream() override {
    return inContext([&] { return ensureSide(); }) ? side_ : nullptr;
  }

private:
  /// `f()` with the step's context current (the caller's restored after).
  template <typename F> Status inContext(F &&f) { return cuda::inContext(ctx_.handle(), f); }

  /// Launches a kernel whose one parameter is the struct at `args`.
  Status launchStruct(const std::string &name, long long blocks, int threads, const void *args) {
    auto it = kernels_.find(name);
    if (it == kernels_.end()) {
      Expected<cuda::Kernel> k = module_.kernel(name);
      if (!k)
        return k.takeError();
      it = kernels_.emplace(name, *k).first;
    }
    if (Status s = checkLaunchShape(name, blocks, threads); !s)
      return s;
    if (blocks == 0)
      return {};
    return cuda::launchKernel(it->second, {unsigned(blocks), 1, 1}, {unsigned(threads), 1, 1}, 0,
                              onSide_ ? side_ : nullptr, args);
  }

  Status ensureSide() {
    if (side_)
      return {};
    if (Status s = d_.check(d_.cuStreamCreate(&side_, CU_STREAM_NON_BLOCKING),
                            "cuStreamCreate (the gradient exchange's stream)");
        !s)
      return s;
    for (CUevent *e : {&mainDone_, &sideDone_})
      if (Status s = d_.check(d_.cuEventCreate(e, CU_EVENT_DISABLE_TIMING), "cuEventCreate"); !s)
        return s;
    return {};
  }

  cuda::Context ctx_;
  cuda::Module module_;
  std::unique_ptr<cuda::Cublas> blas_;
  cuda::GemmPrecision precision_;
  const cuda::Driver &d_;
  std::map<std::string, cuda::Kernel> kernels_;
  CUstream side_ = nullptr;
  CUevent mainDone_ = nullptr, sideDone_ = nullptr;
  bool onSide_ = false;
};

} // namespace

Expected<std::unique_ptr<StepDevice>>
createGpuStepDevice(const std::string &kernelSource, const std::string &programName,
                    const std::vector<std::string> &includeDirs, cuda::GemmPrecision precision) {
  Expected<const cuda::Driver *> driver = cuda::Driver::get();
  if (!driver)
    return driver.takeError();
  Expected<int> ordinal = cuda::processDevice();
  if (!ordinal)
    return ordinal.takeError();
  Expected<cuda::Context> ctx = cuda::Context::create(*ordinal);
  if (!ctx)
    return ctx.takeError();
  // The module and cuBLAS's handle belong to the context current here.
  Expected<cuda::ContextScope> scope = ctx->enter();
  if (!scope)
    return scope.takeError();
  NvrtcCompiler nvrtc(&KernelCache::processDefault());
  NvrtcOptions options;
  options.arch = ctx->device().arch();
  options.includeDirs = includeDirs;
  Expected<Cubin> cubin = nvrtc.compile(programName, kernelSource, options);
  if (!cubin)
    return cubin.takeError();
  Expected<cuda::Module> module = cuda::Module::load(cubin->image, cubin->programName);
  if (!module)
    return module.takeError();
  // Volta takes a cuBLAS 12 (CUDA 13's has no sm_70 kernels).
  Expected<GpuArch> arch = parseGpuArch(options.arch);
  Expected<std::unique_ptr<cuda::Cublas>> blas = cuda::Cublas::create(arch ? arch->sm : 0);
  if (!blas)
    return blas.takeError();
  return std::unique_ptr<StepDevice>(new GpuStepDevice(std::move(*ctx), std::move(*module),
                                                       std::move(*blas), precision, **driver));
}

} // namespace attnc::train
