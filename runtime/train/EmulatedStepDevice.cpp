//===- EmulatedStepDevice.cpp - A compiled CUDA step on the CPU ----------===//
//
// The device of `attnc train --engine cuda-sim`: host memory filled with
// NaNs when allocated (as uninitialised device memory is garbage, a read
// before a write shows), the step's kernels on the SIMT emulator compiled
// into the step's shared object, GEMMs on the CPU with their inputs
// rounded as cuBLAS's reduced compute types round them (so fp16 overflows
// here too, and the loss scaling is exercised).
//
//===----------------------------------------------------------------------===//
#include "runtime/train/StepDevice.h"

#include "attnc/abi/OptimizerArgs.h"
#include "attnc/abi/model_step_env.h"
#include "runtime/HalfFloat.h"
#include "runtime/HostCompiler.h"
#include "runtime/train/Gemm.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

namespace attnc::train {

Status checkLaunchShape(const std::string &kernel, long long blocks, int threads) {
  if (threads <= 0 || threads > 1024 || threads % 32 || blocks < 0 || blocks > (1LL << 31) - 1)
    return makeError("kernel " + kernel + " launched with " + std::to_string(blocks) +
                     " blocks of " + std::to_string(threads) + " threads");
  return {};
}

namespace {

/// x with its mantissa rounded to `keep` bits (nearest, ties to even).
float roundMantissa(float x, int keep) {
  uint32_t b;
  std::memcpy(&b, &x, 4);
  if ((b & 0x7f800000u) == 0x7f800000u) // Inf, NaN
    return x;
  const int drop = 23 - keep;
  b += (1u << (drop - 1)) - 1 + ((b >> drop) & 1u);
  b &= ~((1u << drop) - 1);
  std::memcpy(&x, &b, 4);
  return x;
}

} // namespace

float roundGemmInput(float x, cuda::GemmPrecision p) {
  switch (p) {
  case cuda::GemmPrecision::F32:
    return x;
  case cuda::GemmPrecision::Tf32: // fp32's range, 10 mantissa bits
    return roundMantissa(x, 10);
  case cuda::GemmPrecision::Bf16:
    return half::fromBf16(half::toBf16(x));
  case cuda::GemmPrecision::Fp16: // overflows to Inf past 65504, subnormals below 2^-14
    return half::fromHalf(half::toHalf(x));
  }
  return x;
}

namespace {

class EmulatedStepDevice final : public StepDevice {
public:
  using KernelFn = void(attnc_kargs);
  using RunFn = int(KernelFn *kernel, long long blocks, int threads, const attnc_kargs *args);
  using RunOptimizerFn = int(const char *name, long long blocks, const void *args);

  EmulatedStepDevice(const SharedObject &so, cuda::GemmPrecision precision)
      : so_(so), precision_(precision) {}
  ~EmulatedStepDevice() override {
    for (void *p : live_)
      std::free(p);
  }

  std::string describe() const override { return "the SIMT emulator (CPU)"; }
  Expected<DeviceScope> enter() override { return DeviceScope(); }

  Expected<void *> allocate(size_t bytes, const std::string &what) override {
    const size_t rounded = (std::max<size_t>(bytes, 4) + 63) / 64 * 64;
    void *p = std::aligned_alloc(64, rounded);
    if (!p)
      return makeError("cannot allocate " + std::to_string(bytes) + " bytes for " + what);
    std::memset(p, 0xff, rounded); // NaN floats: reading before writing shows
    live_.push_back(p);
    return p;
  }
  void release(void *p) override {
    for (size_t i = 0; i < live_.size(); ++i)
      if (live_[i] == p) {
        std::free(p);
        live_.erase(live_.begin() + long(i));
        return;
      }
  }
  Status upload(void *dst, const void *src, size_t bytes) override {
    countUpload(bytes);
    std::memcpy(dst, src, bytes);
    return {};
  }
  Status download(void *dst, const void *src, size_t bytes) override {
    countDownload(bytes);
    std::memcpy(dst, src, bytes);
    return {};
  }
  Status copy(void *dst, const void *src, size_t bytes) override {
    std::memmove(dst, src, bytes);
    return {};
  }
  Status zero(void *dst, size_t bytes) override {
    std::memset(dst, 0, bytes);
    return {};
  }
  Status launch(const std::string &name, long long blocks, int threads,
                const attnc_kargs &args) override {
    if (!run_) {
      Expected<RunFn *> run = so_.function<RunFn>("attnc_simt_run");
      if (!run)
        return run.takeError();
      run_ = *run;
    }
    auto it = kernels_.find(name);
    if (it == kernels_.end()) {
      Expected<KernelFn *> fn = so_.function<KernelFn>(name);
      if (!fn)
        return fn.takeError();
      it = kernels_.emplace(name, *fn).first;
    }
    if (Status s = checkLaunchShape(name, blocks, threads); !s)
      return s;
    if (run_(it->second, blocks, threads, &args))
      return makeError("kernel " + name +
                       " deadlocked on the emulator (a barrier not reached by every thread)");
    return {};
  }
  Status launchOptimizer(const std::string &name, long long blocks, const void *args) override {
    if (!runOptimizer_) {
      Expected<RunOptimizerFn *> run = so_.function<RunOptimizerFn>("attnc_simt_run_optimizer");
      if (!run)
        return run.takeError();
      runOptimizer_ = *run;
    }
    if (Status s = checkLaunchShape(name, blocks, opt::kThreads); !s)
      return s;
    switch (runOptimizer_(name.c_str(), blocks, args)) {
    case 0:
      return {};
    case 2:
      return makeError("no optimizer kernel " + name + " in the step's module");
    default:
      return makeError("kernel " + name + " deadlocked on the emulator");
    }
  }
  Status gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, const float *B,
              float *C) override {
    if (precision_ == cuda::GemmPrecision::F32) {
      train::gemm(ta, tb, M, N, K, A, B, C);
      return {};
    }
    a_.resize(size_t(M * K)), b_.resize(size_t(K * N));
    for (size_t i = 0; i < a_.size(); ++i)
      a_[i] = roundGemmInput(A[i], precision_);
    for (size_t i = 0; i < b_.size(); ++i)
      b_[i] = roundGemmInput(B[i], precision_);
    train::gemm(ta, tb, M, N, K, a_.data(), b_.data(), C);
    return {};
  }
  Status synchronize() override { return {}; }

private:
  const SharedObject &so_;
  cuda::GemmPrecision precision_;
  RunFn *run_ = nullptr;
  RunOptimizerFn *runOptimizer_ = nullptr;
  std::map<std::string, KernelFn *> kernels_;
  std::vector<void *> live_;
  std::vector<float> a_, b_; ///< rounded GEMM inputs
};

} // namespace

std::unique_ptr<StepDevice> createEmulatedStepDevice(const SharedObject &so,
                                                     cuda::GemmPrecision precision) {
  return std::make_unique<EmulatedStepDevice>(so, precision);
}

} // namespace attnc::train
