//===- CompiledStepCuda.cpp - A compiled training step on a GPU -----------===//
//
// The CUDA step (codegen's CudaModelStep) on a device: its kernels built by
// NVRTC for the device's arch, its host code by the host compiler, GEMMs on
// cuBLAS at the chosen precision, everything in one device arena. The
// parameters stay the Model's host tensors (the optimizer, checkpoints and
// evaluation are the CPU trainer's): each step uploads them and downloads
// the gradients. Attention goes through the model's attention function on
// host copies (the CUDA attention runner is host-in, host-out), so this is
// correct but not yet fast; docs/model-compilation.md says what is left.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/CompiledStep.h"

#include "runtime/train/CudaStepEnv.h"
#include "runtime/Cublas.h"
#include "runtime/CudaDriver.h"
#include "runtime/KernelCache.h"
#include "runtime/NvrtcCompiler.h"
#include "runtime/train/LossScaler.h"

#include <cmath>
#include <cstring>
#include <map>
#include <optional>

namespace attnc::train {

struct CompiledStep::CudaState {
  cuda::Context ctx;
  cuda::Module module;
  std::unique_ptr<cuda::Cublas> blas;
  cuda::GemmPrecision precision = cuda::GemmPrecision::F32;
  LossScaler scaler;
  std::map<std::string, cuda::Kernel> kernels;
  std::optional<cuda::DeviceBuffer> arena, scratch;
  std::vector<std::optional<cuda::DeviceBuffer>> args, grads;
  std::vector<size_t> argBytes, gradBytes;
  std::vector<void *> argPtrs;
  std::vector<float *> gradPtrs;
  std::vector<std::vector<float>> hostIn, hostOut; ///< attention's host copies

  CudaState(cuda::Context c, cuda::Module m) : ctx(std::move(c)), module(std::move(m)) {}
};

CompiledStep::~CompiledStep() = default;

namespace {

const cuda::Driver &drv() { return **cuda::Driver::get(); }

Expected<cuda::DeviceBuffer> deviceBuffer(size_t bytes, const std::string &what) {
  Expected<cuda::DeviceBuffer> b = cuda::DeviceBuffer::allocate(std::max<size_t>(bytes, 4));
  if (!b)
    return makeError("compiled CUDA step: " + what + ": " + b.error());
  return b;
}

} // namespace

Status CompiledStep::initCuda(const std::vector<std::string> &includeDirs,
                              const StepPrecision &precision) {
  Expected<cuda::GemmPrecision> p = cuda::parseGemmPrecision(precision.gemm);
  if (!p)
    return p.takeError();
  Expected<cuda::Context> ctx = cuda::Context::create(0);
  if (!ctx)
    return ctx.takeError();
  NvrtcCompiler nvrtc(&KernelCache::processDefault());
  NvrtcOptions options;
  options.arch = ctx->device().arch();
  options.includeDirs = includeDirs;
  Expected<Cubin> cubin =
      nvrtc.compile(desc_.cudaSymbol + ".cu", desc_.cudaDeviceSource, options);
  if (!cubin)
    return cubin.takeError();
  Expected<cuda::Module> module = cuda::Module::load(cubin->image, cubin->programName);
  if (!module)
    return module.takeError();
  cuda_ = std::make_shared<CudaState>(std::move(*ctx), std::move(*module));
  CudaState &s = *cuda_;
  s.precision = *p;
  s.scaler = LossScaler(LossScalerConfig::forPrecision(*p));
  Expected<std::unique_ptr<cuda::Cublas>> blas = cuda::Cublas::create();
  if (!blas)
    return blas.takeError();
  s.blas = std::move(*blas);

  // Device copies of the arguments (tokens, targets, parameters, constants)
  // and of the gradients; constants are uploaded once.
  const ModelConfig &c = model_.config();
  std::map<std::string, ParamRef> byName;
  for (const ParamRef &pr : model_.params())
    byName[pr.name] = pr;
  const size_t n = desc_.args.size();
  s.args.resize(n), s.argBytes.assign(n, 0), s.argPtrs.assign(n, nullptr);
  for (size_t i = 0; i < n; ++i) {
    const std::string &name = desc_.args[i];
    size_t bytes = i < 2 ? sizeof(int32_t) * size_t(desc_.batch) * size_t(c.seq) : 0;
    if (auto it = byName.find(name); i >= 2 && it != byName.end())
      bytes = sizeof(float) * size_t(it->second.size);
    else if (const st::Tensor *t = i >= 2 ? model_.constant(name) : nullptr)
      bytes = t->data.size();
    Expected<cuda::DeviceBuffer> b = deviceBuffer(bytes, "argument '" + name + "'");
    if (!b)
      return b.takeError();
    s.args[i].emplace(std::move(*b));
    s.argBytes[i] = bytes;
    s.argPtrs[i] = s.args[i]->as<void>();
    if (i >= 2 && !byName.count(name))
      if (Status st = s.args[i]->upload(args_[i], bytes); !st)
        return st.takeError();
  }
  for (int a : desc_.gradArgs) {
    const size_t bytes = s.argBytes[size_t(a)];
    Expected<cuda::DeviceBuffer> b = deviceBuffer(bytes, "gradient of '" + desc_.args[size_t(a)] + "'");
    if (!b)
      return b.takeError();
    s.grads.emplace_back(std::move(*b));
    s.gradBytes.push_back(bytes);
    s.gradPtrs.push_back(s.grads.back()->as<float>());
  }
  Expected<cuda::DeviceBuffer> arena = deviceBuffer(size_t(desc_.arenaBytes), "the arena");
  if (!arena)
    return arena.takeError();
  s.arena.emplace(std::move(*arena));
  return {};
}

/// Attention on host copies of the device operands (sizes from the model's
/// shapes), its results uploaded back.
int CompiledStep::attendOnDevice(int64_t layer, const float *const *in, const float *dout,
                                 float *const *out, const float *forwardOut,
                                 const float *forwardLse) {
  CudaState &s = *cuda_;
  const ModelConfig &c = model_.config();
  const size_t B = size_t(desc_.batch), H = size_t(c.heads), S = size_t(c.seq),
               Dh = size_t(c.dModel / c.heads);
  const size_t bhsd = B * H * S * Dh, bhs = B * H * S;
  const size_t e = (c.share == "none" ? H : 1) * size_t(c.lowrankK) * S;
  const size_t rot = size_t(c.lshRounds) * Dh * size_t(c.lshBuckets / 2);
  const size_t par = c.headParams.size() * H;
  // in: q, k, v, E, F, rotations, params; then dout, out, lse.
  const float *src[10] = {in[0], in[1], in[2], in[3], in[4], in[5], in[6], dout, forwardOut,
                          forwardLse};
  const size_t inSize[10] = {bhsd, bhsd, bhsd, e, e, rot, par, bhsd, bhsd, bhs};
  s.hostIn.resize(10);
  const float *host[10] = {};
  for (int i = 0; i < 10; ++i) {
    if (!src[i])
      continue;
    s.hostIn[size_t(i)].resize(inSize[i]);
    if (Status st = drv().check(drv().cuMemcpyDtoH(s.hostIn[size_t(i)].data(),
                                                   reinterpret_cast<CUdeviceptr>(src[i]),
                                                   inSize[i] * sizeof(float)),
                                "cuMemcpyDtoH (attention operand)");
        !st) {
      error_ = st.error();
      return 7;
    }
    host[i] = s.hostIn[size_t(i)].data();
  }
  // out: out, lse (forward) or dq, dk, dv, dE, dF, dparams (backward).
  const int nOut = dout ? 6 : 2;
  const size_t outSize[6] = {dout ? bhsd : bhsd, dout ? bhsd : bhs, bhsd, e, e, par};
  s.hostOut.resize(6);
  float *hostOut[6] = {};
  for (int i = 0; i < nOut; ++i)
    if (out[i]) {
      s.hostOut[size_t(i)].assign(outSize[i], 0.0f);
      hostOut[i] = s.hostOut[size_t(i)].data();
    }
  if (int rc = attend(layer, host, host[7], hostOut, host[8], host[9]))
    return rc;
  for (int i = 0; i < nOut; ++i)
    if (out[i])
      if (Status st = drv().check(drv().cuMemcpyHtoD(reinterpret_cast<CUdeviceptr>(out[i]),
                                                     hostOut[i], outSize[i] * sizeof(float)),
                                  "cuMemcpyHtoD (attention result)");
          !st) {
        error_ = st.error();
        return 7;
      }
  return 0;
}

Expected<double> CompiledStep::runCuda() {
  CudaState &s = *cuda_;
  if (Status st = s.ctx.makeCurrent(); !st)
    return st.takeError();
  // The parameters as they are now (the optimizer ran on the host).
  for (size_t i = 2; i < desc_.args.size(); ++i)
    if (model_.constant(desc_.args[i]) == nullptr)
      if (Status st = s.args[i]->upload(args_[i], s.argBytes[i]); !st)
        return st.takeError();
  for (size_t i = 0; i < 2; ++i)
    if (Status st = s.args[i]->upload(args_[i], s.argBytes[i]); !st)
      return st.takeError();
  // fp16: a step whose gradients overflow is rerun at a lower loss scale
  // (the scaler halves it), so the trainer always gets one good step.
  for (;;) {
    const float scale = s.scaler.scale();
    Expected<double> loss = runCudaOnce(scale);
    if (!loss)
      return loss;
    bool finite = true;
    for (size_t g = 0; g < grads_.size(); ++g) {
      if (Status st = s.grads[g]->download(grads_[g], s.gradBytes[g]); !st)
        return st.takeError();
      const size_t n = s.gradBytes[g] / sizeof(float);
      const float inv = 1.0f / scale;
      for (size_t j = 0; j < n; ++j) {
        grads_[g][j] *= inv;
        finite = finite && std::isfinite(grads_[g][j]);
      }
    }
    const bool applied = s.scaler.update(!finite);
    // Unscaled (or fp32/bf16) non-finite gradients are the trainer's to
    // report; only an fp16 overflow reruns.
    if (applied || !s.scaler.enabled())
      return loss;
    if (s.scaler.scale() >= scale) // at the floor: nothing left to try
      return makeError("compiled CUDA step: gradients overflow fp16 even at loss scale " +
                       std::to_string(scale));
  }
}

Expected<double> CompiledStep::runCudaOnce(float lossScale) {
  struct Env {
    static CompiledStep &self(void *ctx) { return *static_cast<CompiledStep *>(ctx); }
    static int fail(void *ctx, const Status &st, int code) {
      self(ctx).error_ = st.error();
      return code;
    }
    static int launch(void *ctx, const char *name, long long blocks, int threads,
                      const attnc_kargs *args) {
      CudaState &s = *self(ctx).cuda_;
      auto it = s.kernels.find(name);
      if (it == s.kernels.end()) {
        Expected<cuda::Kernel> k = s.module.kernel(name);
        if (!k)
          return fail(ctx, k.takeError(), 4);
        it = s.kernels.emplace(name, *k).first;
      }
      if (blocks == 0)
        return 0;
      if (Status st = cuda::launch(it->second, {unsigned(blocks), 1, 1}, {unsigned(threads), 1, 1},
                                   0, nullptr, *args);
          !st)
        return fail(ctx, st, 5);
      return 0;
    }
    static int gemm(void *ctx, int ta, int tb, long long M, long long N, long long K,
                    const float *A, const float *B, float *C) {
      CudaState &s = *self(ctx).cuda_;
      if (Status st = s.blas->gemm(ta != 0, tb != 0, M, N, K, A, B, C, s.precision, nullptr); !st)
        return fail(ctx, st, 8);
      return 0;
    }
    static int attention(void *ctx, long long layer, const float *const *in, float *out,
                         float *lse) {
      float *outs[2] = {out, lse};
      return self(ctx).attendOnDevice(layer, in, nullptr, outs, nullptr, nullptr);
    }
    static int attentionGrad(void *ctx, long long layer, const float *const *in,
                             float *const *out) {
      // in: q, k, v, out, lse, dout, E, F, rotations, params
      const float *fwdIn[7] = {in[0], in[1], in[2], in[6], in[7], in[8], in[9]};
      return self(ctx).attendOnDevice(layer, fwdIn, in[5], out, in[3], in[4]);
    }
    static int checkFinite(void *ctx, const char *what, const float *x, long long n,
                           long long width) {
      std::vector<float> h(static_cast<size_t>(n));
      if (Status st = drv().check(drv().cuMemcpyDtoH(h.data(), reinterpret_cast<CUdeviceptr>(x),
                                                     h.size() * sizeof(float)),
                                  std::string("cuMemcpyDtoH (") + what + ")");
          !st)
        return fail(ctx, st, 7);
      for (long long i = 0; i < n; ++i)
        if (!std::isfinite(h[size_t(i)]))
          return nonfiniteCallback(ctx, what, i, width, h[size_t(i)]);
      return 0;
    }
    static int copy(void *ctx, void *dst, const void *src, unsigned long long bytes) {
      if (Status st = drv().check(drv().cuMemcpyDtoD(reinterpret_cast<CUdeviceptr>(dst),
                                                     reinterpret_cast<CUdeviceptr>(src), bytes),
                                  "cuMemcpyDtoD");
          !st)
        return fail(ctx, st, 7);
      return 0;
    }
    static int zero(void *ctx, void *dst, unsigned long long bytes) {
      if (Status st = drv().check(drv().cuMemsetD8(reinterpret_cast<CUdeviceptr>(dst), 0, bytes),
                                  "cuMemsetD8");
          !st)
        return fail(ctx, st, 7);
      return 0;
    }
    static int read(void *ctx, void *host, const void *src, unsigned long long bytes) {
      if (Status st = drv().check(drv().cuMemcpyDtoH(host, reinterpret_cast<CUdeviceptr>(src), bytes),
                                  "cuMemcpyDtoH (loss)");
          !st)
        return fail(ctx, st, 7);
      return 0;
    }
    static void *scratch(void *ctx, unsigned long long bytes) {
      CudaState &s = *self(ctx).cuda_;
      if (!s.scratch || s.scratch->size() < bytes) {
        s.scratch.reset(); // free first: the new one may need the room
        Expected<cuda::DeviceBuffer> b = cuda::DeviceBuffer::allocate(bytes);
        if (!b) {
          self(ctx).error_ = "compiled CUDA step: scratch of " + std::to_string(bytes) +
                             " bytes: " + b.error();
          return nullptr;
        }
        s.scratch.emplace(std::move(*b));
      }
      return s.scratch->as<void>();
    }
  };
  CudaState &s = *cuda_;
  attnc_cuda_env env = cudaStepEnv<Env>(this);
  return callCudaStep(env, lossScale, reinterpret_cast<char *>(s.arena->ptr()), s.argPtrs.data(),
                      s.gradPtrs.data(),
                      [] { return cuda::synchronize(nullptr, "the compiled CUDA step"); });
}

} // namespace attnc::train
