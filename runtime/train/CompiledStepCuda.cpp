//===- CompiledStepCuda.cpp - A compiled CUDA training step ---------------===//
//
// Runs the CUDA step (codegen's CudaModelStep) on a StepDevice: a GPU, or
// the SIMT emulator on the CPU, through the same code. The step's arena,
// arguments and gradients are device memory; the parameters, their
// gradients and AdamW's moments are each one flat buffer (a parameter per
// 16-byte-aligned segment), the layout of the device AdamW
// (attnc/optimizer.cuh). Training keeps them there (upload, update,
// download: the ResidentTraining the trainer drives); a lone run() (engine
// comparisons, gradient checks) uploads the Model's host parameters and
// downloads the gradients. Attention goes through the model's attention function on host copies
// (the CUDA attention runner is host-in, host-out): correct, not yet fast
// (docs/model-compilation.md).
//
//===----------------------------------------------------------------------===//
#include "runtime/train/CompiledStep.h"

#include "attnc/abi/OptimizerArgs.h"
#include "attnc/abi/model_step_env.h"
#include "runtime/Cublas.h"
#include "runtime/train/DeviceOptimizer.h"
#include "runtime/train/LossScaler.h"
#include "runtime/train/StepDevice.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>

namespace attnc::train {

struct CompiledStep::CudaState {
  std::unique_ptr<StepDevice> device;
  LossScaler scaler;
  std::vector<void *> owned; ///< released with the state
  void *arena = nullptr, *scratch = nullptr;
  size_t scratchBytes = 0;
  std::vector<size_t> argBytes, gradBytes;
  std::vector<bool> argIsParam; ///< uploaded every step (else once)
  /// The flat parameter buffers: segments in Model::params() order.
  std::vector<FlatSegment> segments;
  int64_t flatN = 0;
  float *weights = nullptr, *grads = nullptr, *m = nullptr, *v = nullptr;
  double *partials = nullptr;
  OptStepState *state = nullptr; ///< the last gradient norm (device)
  OptStepState lastState{};      ///< ... as read back
  long long *decayRanges = nullptr;
  int numDecayRanges = 0;
  bool resident = false;    ///< the device holds the parameters (training)
  bool hostCurrent = false; ///< ... and the host copies equal them (no update since)
  std::vector<void *> argPtrs;
  std::vector<float *> gradPtrs;
  std::vector<std::vector<float>> hostIn, hostOut; ///< attention's host copies
  /// The step's NaN/Inf checks, in program order: each launches a kernel
  /// that leaves the first bad index in its slot, read once the step is
  /// done (or when the slots run out: then read and reused).
  /// ATTNC_CUDA_CHECK_SLOTS (1..256) lowers the count so the tests reach
  /// the reuse.
  size_t numSlots = 256;
  unsigned long long *slots = nullptr;
  struct Check {
    std::string what;
    const float *x;
    long long width;
    bool scaled;
  };
  std::vector<Check> checks;

  ~CudaState() {
    for (void *p : owned)
      device->release(p);
    if (scratch)
      device->release(scratch);
  }
  Expected<void *> allocate(size_t bytes, const std::string &what) {
    Expected<void *> p = device->allocate(bytes, what);
    if (p)
      owned.push_back(*p);
    return p;
  }
};

CompiledStep::~CompiledStep() = default;

Status CompiledStep::initDevice(std::unique_ptr<StepDevice> device, cuda::GemmPrecision gemm,
                                float initialLossScale) {
  LossScalerConfig scaling = LossScalerConfig::forPrecision(gemm);
  if (initialLossScale > 0) {
    if (!scaling.enabled)
      return makeError(std::string("--loss-scale: only fp16 GEMMs scale the loss (precision ") +
                       cuda::gemmPrecisionName(gemm) + ")");
    scaling.initScale = initialLossScale;
    if (Status st = scaling.check("--loss-scale"); !st)
      return st.takeError();
  }
  cuda_ = std::make_shared<CudaState>();
  CudaState &s = *cuda_;
  s.device = std::move(device);
  s.scaler = LossScaler(scaling);

  // The parameters, their gradients and moments: flat buffers, zeroed (the
  // padding between segments stays zero, so it adds nothing to the norm
  // and AdamW leaves it at zero).
  const ModelConfig &c = model_.config();
  std::map<std::string, const FlatSegment *> segmentOf;
  for (const ParamRef &pr : model_.params()) {
    s.segments.push_back({pr.name, s.flatN, pr.size, pr.decay});
    s.flatN += (pr.size + 3) / 4 * 4;
  }
  for (const FlatSegment &seg : s.segments)
    segmentOf[seg.name] = &seg;
  const size_t flatBytes = sizeof(float) * size_t(std::max<int64_t>(s.flatN, 1));
  float **flat[4] = {&s.weights, &s.grads, &s.m, &s.v};
  const char *flatWhat[4] = {"the parameters", "the gradients", "AdamW's first moments",
                             "AdamW's second moments"};
  for (int k = 0; k < 4; ++k) {
    Expected<void *> b = s.allocate(flatBytes, flatWhat[k]);
    if (!b)
      return b.takeError();
    *flat[k] = static_cast<float *>(*b);
    if (Status st = s.device->zero(*b, flatBytes); !st)
      return st.takeError();
  }
  Expected<std::vector<long long>> ranges = decayRanges(s.segments, s.flatN);
  if (!ranges)
    return ranges.takeError();
  s.numDecayRanges = int(ranges->size() / 2);
  Expected<void *> rangeBuf =
      s.allocate(sizeof(long long) * std::max<size_t>(ranges->size(), 1), "the decay ranges");
  Expected<void *> partials = s.allocate(sizeof(double) * opt::kMaxPartials, "the norm's partials");
  Expected<void *> state = s.allocate(sizeof(OptStepState), "the optimizer's step state");
  for (Expected<void *> *b : {&rangeBuf, &partials, &state})
    if (!*b)
      return b->takeError();
  s.decayRanges = static_cast<long long *>(*rangeBuf);
  s.partials = static_cast<double *>(*partials);
  s.state = static_cast<OptStepState *>(*state);
  if (!ranges->empty())
    if (Status st =
            s.device->upload(s.decayRanges, ranges->data(), sizeof(long long) * ranges->size());
        !st)
      return st.takeError();

  // The arguments: tokens and targets (uploaded per step), parameters (in
  // the flat buffer) and constants (uploaded once).
  const size_t n = desc_.args.size();
  s.argBytes.assign(n, 0), s.argPtrs.assign(n, nullptr), s.argIsParam.assign(n, false);
  for (size_t i = 0; i < n; ++i) {
    const std::string &name = desc_.args[i];
    auto seg = segmentOf.find(name);
    s.argIsParam[i] = i >= 2 && seg != segmentOf.end();
    if (s.argIsParam[i]) {
      s.argBytes[i] = sizeof(float) * size_t(seg->second->size);
      s.argPtrs[i] = s.weights + seg->second->offset;
      continue;
    }
    const size_t bytes = i < 2 ? sizeof(int32_t) * size_t(desc_.batch) * size_t(c.seq)
                               : model_.constant(name)->data.size(); // create() checked it
    Expected<void *> b = s.allocate(bytes, "argument '" + name + "'");
    if (!b)
      return b.takeError();
    s.argBytes[i] = bytes, s.argPtrs[i] = *b;
    if (i >= 2)
      if (Status st = s.device->upload(*b, args_[i], bytes); !st)
        return st.takeError();
  }
  for (int a : desc_.gradArgs) { // create() checked each is a parameter
    const FlatSegment &seg = *segmentOf.at(desc_.args[size_t(a)]);
    s.gradBytes.push_back(sizeof(float) * size_t(seg.size));
    s.gradPtrs.push_back(s.grads + seg.offset);
  }
  Expected<void *> arena = s.allocate(size_t(desc_.arenaBytes), "the arena");
  if (!arena)
    return arena.takeError();
  s.arena = *arena;
  if (const char *e = std::getenv("ATTNC_CUDA_CHECK_SLOTS"); e && *e) {
    char *end = nullptr;
    const long long n = std::strtoll(e, &end, 10);
    if (*end || n < 1 || n > 256)
      return makeError(std::string("ATTNC_CUDA_CHECK_SLOTS=") + e + ": expected 1 to 256");
    s.numSlots = size_t(n);
  }
  Expected<void *> slots = s.allocate(s.numSlots * 8, "the NaN/Inf check slots");
  if (!slots)
    return slots.takeError();
  s.slots = static_cast<unsigned long long *>(*slots);
  return {};
}

/// Attention on host copies of the device operands (sizes from the model's
/// shapes), its results uploaded back.
int CompiledStep::attendOnDevice(int64_t layer, const float *const *in, const float *dout,
                                 float *const *out, const float *forwardOut,
                                 const float *forwardLse) {
  CudaState &s = *cuda_;
  const ModelConfig &c = model_.config();
  if (deviceAttention_) { // in place: the kernels read and write the step's buffers
    DeviceAttentionCall call;
    call.layer = layer, call.B = desc_.batch, call.H = c.heads, call.S = c.seq;
    call.Dh = c.dModel / c.heads;
    call.q = in[0], call.k = in[1], call.v = in[2], call.E = in[3], call.F = in[4];
    call.rotations = in[5], call.params = in[6];
    if (dout) {
      call.dout = dout, call.forwardOut = forwardOut, call.forwardLse = forwardLse;
      call.dq = out[0], call.dk = out[1], call.dv = out[2], call.dE = out[3], call.dF = out[4];
      call.dparams = out[5];
    } else {
      call.out = out[0], call.lse = out[1];
    }
    call.dropout = training_;
    call.dropoutSeed = c.dropoutSeed;
    call.dropoutOffset = uint32_t(step_) * 4096u + uint32_t(layer);
    if (Status st = deviceAttention_(call); !st) {
      error_ = "layer " + std::to_string(layer) + " attention: " + st.error();
      return 1;
    }
    return 0;
  }
  const size_t B = size_t(desc_.batch), H = size_t(c.heads), S = size_t(c.seq),
               Dh = size_t(c.dModel / c.heads);
  const size_t bhsd = B * H * S * Dh, bhs = B * H * S;
  const size_t e = (c.share == "none" ? H : 1) * size_t(c.lowrankK) * S;
  const size_t rot = size_t(c.lshRounds) * Dh * size_t(c.lshBuckets / 2);
  const size_t par = c.headParams.size() * H;
  // q, k, v, E, F, rotations, params; then dout, and the forward's out, lse.
  const float *src[10] = {in[0], in[1], in[2], in[3],      in[4],
                          in[5], in[6], dout,  forwardOut, forwardLse};
  const size_t inSize[10] = {bhsd, bhsd, bhsd, e, e, rot, par, bhsd, bhsd, bhs};
  s.hostIn.resize(10);
  const float *host[10] = {};
  for (size_t i = 0; i < 10; ++i) {
    if (!src[i])
      continue;
    s.hostIn[i].resize(inSize[i]);
    if (Status st = s.device->download(s.hostIn[i].data(), src[i], inSize[i] * sizeof(float));
        !st) {
      error_ = "layer " + std::to_string(layer) + " attention operand: " + st.error();
      return 7;
    }
    host[i] = s.hostIn[i].data();
  }
  // Forward: out, lse. Backward: dq, dk, dv, dE, dF, dparams.
  const size_t nOut = dout ? 6 : 2;
  const size_t outSize[6] = {bhsd, dout ? bhsd : bhs, bhsd, e, e, par};
  s.hostOut.resize(6);
  float *hostOut[6] = {};
  for (size_t i = 0; i < nOut; ++i)
    if (out[i]) {
      s.hostOut[i].assign(outSize[i], 0.0f);
      hostOut[i] = s.hostOut[i].data();
    }
  if (int rc = attend(layer, host, host[7], hostOut, host[8], host[9]))
    return rc;
  for (size_t i = 0; i < nOut; ++i)
    if (out[i])
      if (Status st = s.device->upload(out[i], hostOut[i], outSize[i] * sizeof(float)); !st) {
        error_ = "layer " + std::to_string(layer) + " attention result: " + st.error();
        return 7;
      }
  return 0;
}

Expected<double> CompiledStep::runDevice(float clipNorm) {
  CudaState &s = *cuda_;
  if (Status st = s.device->bind(); !st)
    return st.takeError();
  // The batch, and unless the device holds them, the parameters as they
  // are now (the optimizer ran on the host).
  for (size_t i = 0; i < desc_.args.size(); ++i)
    if (i < 2 || (s.argIsParam[i] && !s.resident))
      if (Status st = s.device->upload(s.argPtrs[i], args_[i], s.argBytes[i]); !st)
        return st.takeError();
  // fp16: a step whose gradients overflow is rerun at a lower loss scale
  // (the scaler halves it), so the trainer always gets one good step.
  for (;;) {
    const float scale = s.scaler.scale();
    scaledOverflow_ = false;
    Expected<double> loss = runDeviceOnce(scale);
    if (!loss && !scaledOverflow_)
      return loss;
    bool finite = !scaledOverflow_;
    if (finite && s.resident) { // unscaled and summed on the device
      if (Status st = deviceGradNorm(1.0f / scale, clipNorm); !st)
        return st.takeError();
      finite = !s.lastState.nonfinite;
    }
    for (size_t g = 0; finite && !s.resident && g < grads_.size(); ++g) {
      if (Status st = s.device->download(grads_[g], s.gradPtrs[g], s.gradBytes[g]); !st)
        return st.takeError();
      const float inv = 1.0f / scale;
      for (size_t j = 0; j < s.gradBytes[g] / sizeof(float); ++j) {
        grads_[g][j] *= inv;
        finite = finite && std::isfinite(grads_[g][j]);
      }
    }
    const bool applied = s.scaler.update(!finite);
    // Without scaling (f32, tf32, bf16) a non-finite gradient is the
    // trainer's to report; only an fp16 overflow reruns.
    if (applied || !s.scaler.enabled())
      return loss; // with scaling, the unscaled gradients are finite here
    // (Resident: the parameters are untouched, AdamW has not run.)
    ++overflowReruns_;
    if (s.scaler.scale() >= scale) // at the floor: nothing left to try
      return makeError("compiled CUDA step: gradients overflow fp16 even at loss scale " +
                       std::to_string(scale));
  }
}

float CompiledStep::lossScale() const { return cuda_ ? cuda_->scaler.scale() : 1.0f; }

CompiledStep::Transfers CompiledStep::transfers() const {
  Transfers t;
  if (cuda_) {
    auto add = [&](const DeviceTraffic &n) {
      t.uploads += n.uploads, t.downloads += n.downloads;
      t.uploadBytes += n.uploadBytes, t.downloadBytes += n.downloadBytes;
      t.allocations += n.allocations;
    };
    add(cuda_->device->traffic());
    if (attentionTraffic_)
      add(attentionTraffic_());
  }
  return t;
}

Expected<double> CompiledStep::runDeviceOnce(float lossScale) {
  struct Env {
    static CompiledStep &self(void *ctx) { return *static_cast<CompiledStep *>(ctx); }
    static StepDevice &dev(void *ctx) { return *self(ctx).cuda_->device; }
    static int check(void *ctx, const Status &st, int code) {
      if (st)
        return 0;
      self(ctx).error_ = st.error();
      return code;
    }
    static int launch(void *ctx, const char *name, long long blocks, int threads,
                      const attnc_kargs *args) {
      return check(ctx, dev(ctx).launch(name, blocks, threads, *args), 5);
    }
    static int gemm(void *ctx, int ta, int tb, long long M, long long N, long long K,
                    const float *A, const float *B, float *C) {
      return check(ctx, dev(ctx).gemm(ta != 0, tb != 0, M, N, K, A, B, C), 8);
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
                           long long width, int scaled) {
      CompiledStep &step = self(ctx);
      CudaState &s = *step.cuda_;
      if (s.checks.size() == s.numSlots) { // full: read them, start over
        Expected<bool> bad = step.readChecks();
        if (!bad)
          return check(ctx, bad.takeError(), 7);
        if (*bad)
          return 2;
        if (int rc = check(ctx, step.resetChecks(), 7))
          return rc;
      }
      attnc_kargs k{};
      k.p[0] = x, k.p[1] = s.slots + s.checks.size(), k.n[0] = n;
      s.checks.push_back({what, x, width, scaled != 0});
      const long long blocks = std::min<long long>((n + 255) / 256, 4096);
      return check(ctx, dev(ctx).launch("attnc_step_find_nonfinite", blocks, 256, k), 5);
    }
    static int copy(void *ctx, void *dst, const void *src, unsigned long long bytes) {
      return check(ctx, dev(ctx).copy(dst, src, bytes), 7);
    }
    static int zero(void *ctx, void *dst, unsigned long long bytes) {
      return check(ctx, dev(ctx).zero(dst, bytes), 7);
    }
    static int read(void *ctx, void *host, const void *src, unsigned long long bytes) {
      return check(ctx, dev(ctx).download(host, src, bytes), 7);
    }
    static void *scratch(void *ctx, unsigned long long bytes) {
      CudaState &s = *self(ctx).cuda_;
      if (!s.scratch || s.scratchBytes < bytes) {
        // Free first (the new one may need the room), once the kernels
        // queued on the old one are done.
        if (s.scratch) {
          if (check(ctx, s.device->synchronize(), 7))
            return nullptr;
          s.device->release(s.scratch);
        }
        s.scratch = nullptr, s.scratchBytes = 0;
        Expected<void *> b = s.device->allocate(bytes, "the row kernels' scratch");
        if (!b) {
          self(ctx).error_ = b.error();
          return nullptr;
        }
        s.scratch = *b, s.scratchBytes = bytes;
      }
      return s.scratch;
    }
  };
  CudaState &s = *cuda_;
  const ModelConfig &c = model_.config();
  attnc_cuda_env env{};
  env.ctx = this;
  env.launch = Env::launch, env.gemm = Env::gemm;
  env.attention = Env::attention, env.attention_grad = Env::attentionGrad;
  env.check_finite = Env::checkFinite;
  env.copy = Env::copy, env.zero = Env::zero, env.read = Env::read;
  env.scratch = Env::scratch;
  env.dropout_seed = c.dropoutSeed;
  env.step = uint32_t(step_);
  env.dropout_on = training_ && c.dropout > 0;
  env.loss_scale = lossScale;
  float loss = 0;
  error_.clear();
  if (Status st = resetChecks(); !st)
    return st.takeError();
  int rc = cudaFn_(&env, static_cast<char *>(s.arena), s.argPtrs.data(), s.gradPtrs.data(), &loss);
  if (rc == 0)
    if (Status st = s.device->synchronize(); !st)
      return st.takeError();
  if (rc != 0)
    return makeError(error_.empty() ? "compiled CUDA step failed with code " + std::to_string(rc)
                                    : error_);
  Expected<bool> bad = readChecks();
  if (!bad)
    return bad.takeError();
  if (*bad)
    return makeError(error_);
  return double(loss);
}

Status CompiledStep::deviceGradNorm(float invScale, float clipNorm) {
  CudaState &s = *cuda_;
  OptGradNormArgs a{};
  a.grads = s.grads, a.partials = s.partials, a.state = s.state;
  a.n = s.flatN, a.num_partials = opt::reduceBlocks(s.flatN);
  a.inv_scale = invScale;
  a.clip_norm = clipNorm;
  if (Status st = s.device->launchOptimizer("attnc_opt_grad_sumsq", a.num_partials, &a); !st)
    return st;
  if (Status st = s.device->launchOptimizer("attnc_opt_grad_finalize", 1, &a); !st)
    return st;
  return s.device->download(&s.lastState, s.state, sizeof s.lastState);
}

bool CompiledStep::resident() const { return cuda_ && cuda_->resident; }

bool CompiledStep::hostParamsCurrent() const {
  return !cuda_ || !cuda_->resident || cuda_->hostCurrent;
}

std::string CompiledStep::stepState() const {
  if (!cuda_ || !cuda_->scaler.enabled())
    return "";
  return nlohmann::json{{"loss_scaler", cuda_->scaler.toJson()}}.dump();
}

Status CompiledStep::restoreStepState(const std::string &json) {
  if (!cuda_ || !cuda_->scaler.enabled())
    return {};
  const nlohmann::json j = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("loss_scaler"))
    return {}; // a checkpoint of a run without loss scaling: start afresh
  Expected<LossScaler> scaler = LossScaler::fromJson(j["loss_scaler"], "step_state.loss_scaler");
  if (!scaler)
    return scaler.takeError();
  if (!scaler->enabled())
    return {};
  cuda_->scaler = *scaler;
  return {};
}

Status CompiledStep::upload(const AdamW &adam) {
  if (!cuda_)
    return makeError("compiled step: only the CUDA engines keep the parameters on a device");
  CudaState &s = *cuda_;
  if (Status st = s.device->bind(); !st)
    return st;
  const std::vector<ParamRef> params = model_.params();
  for (size_t i = 0; i < params.size(); ++i) {
    const FlatSegment &seg = s.segments[i];
    const size_t bytes = sizeof(float) * size_t(seg.size);
    if (Status st = s.device->upload(s.weights + seg.offset, params[i].value, bytes); !st)
      return st;
    // A parameter without moments yet (before the first step) starts at 0.
    for (auto [moments, dst] :
         {std::pair{&adam.firstMoments(), s.m}, std::pair{&adam.secondMoments(), s.v}}) {
      auto it = moments->find(seg.name);
      Status st = it != moments->end() && !it->second.empty()
                      ? s.device->upload(dst + seg.offset, it->second.data(), bytes)
                      : s.device->zero(dst + seg.offset, bytes);
      if (!st)
        return st;
    }
  }
  s.resident = true, s.hostCurrent = true;
  return {};
}

Expected<ResidentTraining::Update> CompiledStep::update(const Batch &batch, int64_t step,
                                                        AdamW &adam) {
  if (!cuda_ || !cuda_->resident)
    return makeError("compiled step: update() before upload()");
  CudaState &s = *cuda_;
  const Transfers before = transfers();
  if (Status st = setBatch(batch, true, step); !st)
    return st.takeError();
  Expected<double> loss = runDevice(adam.config().clipNorm); // ends with the norm's state
  if (!loss)
    return loss.takeError();
  if (!std::isfinite(*loss)) // as the trainer says it, before anything is updated
    return makeError(std::string("the loss is ") + (std::isnan(*loss) ? "NaN" : "infinite") +
                     "; lower --lr or check the data (the last checkpoint is kept)");
  if (s.lastState.nonfinite) { // into the host gradients, to name the parameter
    const std::vector<ParamRef> params = model_.params();
    for (size_t i = 0; i < params.size(); ++i)
      if (Status st = s.device->download(params[i].grad, s.grads + s.segments[i].offset,
                                         sizeof(float) * size_t(params[i].size));
          !st)
        return st.takeError();
    return nonFiniteGradientError(params, adam.stepCount());
  }
  OptAdamWArgs a = adamWStepArgs(adam.config(), adam.stepCount());
  a.weights = s.weights, a.m = s.m, a.v = s.v, a.grads = s.grads, a.state = s.state;
  a.decay_ranges = s.decayRanges, a.num_decay_ranges = s.numDecayRanges;
  a.n = s.flatN;
  if (adam.config().weightDecay == 0.0f) // AdamW::step skips the multiply by 1
    a.num_decay_ranges = 0;
  if (Status st = s.device->launchOptimizer("attnc_opt_adamw", opt::elementwiseBlocks(s.flatN), &a);
      !st)
    return st.takeError();
  adam.countStep();
  s.hostCurrent = false;
  const Transfers after = transfers();
  lastStepTransfers_ = {after.uploads - before.uploads, after.downloads - before.downloads,
                        after.uploadBytes - before.uploadBytes,
                        after.downloadBytes - before.downloadBytes,
                        after.allocations - before.allocations};
  stepAllocations_ += lastStepTransfers_.allocations;
  return Update{*loss, std::sqrt(s.lastState.sumsq)};
}

Status CompiledStep::download(AdamW &adam) {
  if (!cuda_ || !cuda_->resident)
    return makeError("compiled step: download() before upload()");
  CudaState &s = *cuda_;
  if (s.hostCurrent) // an evaluation and a checkpoint of one step: copy once
    return {};
  if (Status st = s.device->bind(); !st)
    return st;
  const std::vector<ParamRef> params = model_.params();
  std::map<std::string, std::vector<float>> m, v;
  for (size_t i = 0; i < params.size(); ++i) {
    const FlatSegment &seg = s.segments[i];
    const size_t bytes = sizeof(float) * size_t(seg.size);
    if (Status st = s.device->download(params[i].value, s.weights + seg.offset, bytes); !st)
      return st;
    if (adam.stepCount() == 0) // no moments before the first update (as AdamW)
      continue;
    std::vector<float> &mi = m[seg.name], &vi = v[seg.name];
    mi.resize(size_t(seg.size)), vi.resize(size_t(seg.size));
    if (Status st = s.device->download(mi.data(), s.m + seg.offset, bytes); !st)
      return st;
    if (Status st = s.device->download(vi.data(), s.v + seg.offset, bytes); !st)
      return st;
  }
  adam.importState(adam.stepCount(), std::move(m), std::move(v));
  s.hostCurrent = true;
  return {};
}

Status CompiledStep::resetChecks() {
  CudaState &s = *cuda_;
  s.checks.clear();
  const std::vector<unsigned long long> none(s.numSlots, ~0ull);
  return s.device->upload(s.slots, none.data(), none.size() * 8);
}

Expected<bool> CompiledStep::readChecks() {
  CudaState &s = *cuda_;
  std::vector<unsigned long long> found(s.checks.size());
  if (!found.empty())
    if (Status st = s.device->download(found.data(), s.slots, found.size() * 8); !st)
      return st.takeError();
  for (size_t i = 0; i < found.size(); ++i) {
    if (found[i] == ~0ull)
      continue;
    const CudaState::Check &c = s.checks[i];
    float value = 0;
    if (Status st = s.device->download(&value, c.x + found[i], sizeof value); !st)
      return st.takeError();
    // A scaled backward value under fp16: the loss scale is too high.
    scaledOverflow_ = c.scaled && s.scaler.enabled();
    nonfiniteCallback(this, c.what.c_str(), (long long)found[i], c.width, value);
    return true;
  }
  return false;
}

} // namespace attnc::train
