//===- GpuStepDevice.cpp - A compiled CUDA step's GPU --------------------===//
//
// The one part of the GPU training engine the emulator tests cannot reach:
// the driver (memory, copies, launches), NVRTC for the device's arch and
// cuBLAS. Everything is on the legacy default stream, so the step's
// launches, GEMMs and copies run in program order.
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
  Status bind() override { return ctx_.makeCurrent(); }

  Expected<void *> allocate(size_t bytes, const std::string &what) override {
    CUdeviceptr p = 0;
    if (Status s = d_.check(d_.cuMemAlloc(&p, std::max<size_t>(bytes, 4)),
                            "cuMemAlloc(" + std::to_string(bytes) + " B, " + what + ")");
        !s)
      return s.takeError();
    return reinterpret_cast<void *>(p);
  }
  void release(void *p) override {
    if (p)
      (void)d_.cuMemFree(dptr(p));
  }
  Status upload(void *dst, const void *src, size_t bytes) override {
    countUpload(bytes);
    return d_.check(d_.cuMemcpyHtoD(dptr(dst), src, bytes), "cuMemcpyHtoD");
  }
  Status download(void *dst, const void *src, size_t bytes) override {
    countDownload(bytes);
    return d_.check(d_.cuMemcpyDtoH(dst, dptr(src), bytes), "cuMemcpyDtoH");
  }
  Status copy(void *dst, const void *src, size_t bytes) override {
    return d_.check(d_.cuMemcpyDtoD(dptr(dst), dptr(src), bytes), "cuMemcpyDtoD");
  }
  Status zero(void *dst, size_t bytes) override {
    return d_.check(d_.cuMemsetD8(dptr(dst), 0, bytes), "cuMemsetD8");
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
    return blas_->gemm(ta, tb, M, N, K, A, B, C, precision_, nullptr);
  }
  Status synchronize() override { return cuda::synchronize(nullptr, "the compiled CUDA step"); }

private:
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
                              nullptr, args);
  }

  cuda::Context ctx_;
  cuda::Module module_;
  std::unique_ptr<cuda::Cublas> blas_;
  cuda::GemmPrecision precision_;
  const cuda::Driver &d_;
  std::map<std::string, cuda::Kernel> kernels_;
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
