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
#include "runtime/train/DataParallel.h"
#include "runtime/train/DeviceExchange.h"
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
  /// Data parallelism (setDataParallel): the flat gradient, padded to a
  /// multiple of the rank count, goes in buckets of `bucket` floats (a
  /// multiple too), rank q owning slice q of each.
  struct Parallel {
    dist::Communicator *comm = nullptr;
    std::unique_ptr<DeviceCollectives> collectives;
    int batch = 0, micro = 1, per = 1, first = 0;
    int64_t padded = 0, bucket = 0;
    /// Overlap: the last micro-batch's gradients are weighted as the step
    /// reports them, and each bucket whose gradients are all in is
    /// exchanged at once, on the device's side queue when the transport
    /// enqueues (`side`). bucketCovers: per bucket, the step's gradients
    /// that reach into it; pending: those not in yet this step.
    bool overlap = false, side = false;
    std::vector<int> bucketCovers, pending;
    int64_t nextBucket = -1;         ///< the buckets go last first: the next one to send
    int64_t sentEarly = 0, sent = 0; ///< bucket exchanges begun during a backward, and all
    float *local = nullptr;          ///< [per][padded]: weighted gradients, zero past flatN
    float *send = nullptr;     ///< [ranks][per][bucket / ranks] (per > 1: local in send order)
    float *gathered = nullptr; ///< [micro][bucket / ranks]
    float *sum = nullptr;      ///< [bucket / ranks]
    float *combined = nullptr; ///< [padded]
  };
  std::optional<Parallel> parallel;

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

Status CompiledStep::uploadStepInputs() {
  CudaState &s = *cuda_;
  Expected<DeviceScope> scope = s.device->enter();
  if (!scope)
    return scope.takeError();
  // The batch, and unless the device holds them, the parameters as they
  // are now (the optimizer ran on the host).
  for (size_t i = 0; i < desc_.args.size(); ++i)
    if (i < 2 || (s.argIsParam[i] && !s.resident))
      if (Status st = s.device->upload(s.argPtrs[i], args_[i], s.argBytes[i]); !st)
        return st;
  return {};
}

Expected<double> CompiledStep::runDevice(float clipNorm) {
  CudaState &s = *cuda_;
  if (Status st = uploadStepInputs(); !st)
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
    static int gradReady(void *ctx, long long index) {
      CompiledStep &step = self(ctx);
      if (index < 0 || size_t(index) >= step.cuda_->gradPtrs.size())
        return check(ctx, makeError("grad_ready(" + std::to_string(index) + "): no such gradient"),
                     7);
      return check(ctx, step.deviceGradReady_(index), 7);
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
  env.grad_ready = deviceGradReady_ ? Env::gradReady : nullptr;
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
  Expected<DeviceScope> scope = s.device->enter();
  if (!scope)
    return scope.takeError();
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
  Expected<double> loss = 0.0; // each ends with the norm's state on the device
  if (s.parallel) {
    loss = runDeviceParallel(batch, step, adam.config().clipNorm);
  } else {
    if (Status st = setBatch(batch, true, step); !st)
      return st.takeError();
    loss = runDevice(adam.config().clipNorm);
  }
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

Expected<std::string> CompiledStep::setDataParallel(const DataParallelPlan &plan) {
  if (!cuda_)
    return makeError("compiled step: only the CUDA engines train data-parallel on a device");
  if (!plan.comm)
    return makeError("internal: data parallelism without a communicator");
  CudaState &s = *cuda_;
  dist::Communicator &comm = *plan.comm;
  const int ranks = comm.size();
  if (Status st = checkMicroBatches(plan.batch, plan.microBatches, ranks); !st)
    return st.takeError();
  if (plan.batch / plan.microBatches != desc_.batch)
    return makeError("the CUDA step was compiled for micro-batches of " +
                     std::to_string(desc_.batch) + " sequences, not " +
                     std::to_string(plan.batch / plan.microBatches) + " (global batch " +
                     std::to_string(plan.batch) + " over " + std::to_string(plan.microBatches) +
                     " micro-batches)");
  Expected<DeviceScope> scope = s.device->enter();
  if (!scope)
    return scope.takeError();
  CudaState::Parallel p;
  p.comm = &comm;
  p.batch = plan.batch, p.micro = plan.microBatches;
  p.per = p.micro / ranks, p.first = comm.rank() * p.per;
  // The transport: device copies for one process, NCCL between GPUs, else
  // MPI through host memory. ATTNC_DEVICE_EXCHANGE (local, nccl, host)
  // forces one, so one GPU can check NCCL's path against the copies.
  std::string transport = ranks == 1 ? "local" : engine_ == StepEngine::Cuda ? "nccl" : "host";
  const char *forced = std::getenv("ATTNC_DEVICE_EXCHANGE");
  if (forced && *forced) {
    transport = forced;
    if (transport != "local" && transport != "nccl" && transport != "host")
      return makeError(std::string("ATTNC_DEVICE_EXCHANGE=") + forced +
                       ": expected local, nccl or host");
    if (transport == "local" && ranks > 1)
      return makeError("ATTNC_DEVICE_EXCHANGE=local: device copies serve one process, not " +
                       std::to_string(ranks) + " ranks");
    if (transport == "nccl" && engine_ != StepEngine::Cuda)
      return makeError("ATTNC_DEVICE_EXCHANGE=nccl: NCCL needs the GPU engine, not cuda-sim");
  }
  std::string note;
  if (transport == "local") {
    p.collectives = deviceCopyCollectives(*s.device);
  } else if (transport == "nccl") {
    Expected<std::unique_ptr<DeviceCollectives>> nccl = ncclCollectives(comm);
    if (nccl)
      p.collectives = std::move(*nccl);
    else if (forced && *forced)
      return makeError("ATTNC_DEVICE_EXCHANGE=nccl: " + nccl.error());
    else
      note = " (NCCL unavailable: " + nccl.error() + ")";
  }
  if (!p.collectives)
    p.collectives = hostStagedCollectives(*s.device, comm);
  // Buckets and the padded length: multiples of the rank count, so every
  // rank's slice of a bucket has one size.
  auto roundUp = [](int64_t x, int64_t m) { return (x + m - 1) / m * m; };
  p.padded = roundUp(std::max<int64_t>(s.flatN, 1), ranks);
  p.bucket = std::min(
      p.padded, roundUp(std::max<int64_t>(plan.bucketBytes / int64_t(sizeof(float)), 1), ranks));
  const size_t slice = size_t(p.bucket / ranks);
  struct Buffer {
    float **at;
    size_t floats;
    const char *what;
  };
  const Buffer buffers[] = {
      {&p.local, size_t(p.per) * size_t(p.padded), "the micro-batches' weighted gradients"},
      {&p.send, p.per > 1 ? size_t(p.per) * slice * size_t(ranks) : 0,
       "the exchange's send blocks"},
      {&p.gathered, size_t(p.micro) * slice, "the exchange's received slices"},
      {&p.sum, slice, "the exchange's sums"},
      {&p.combined, size_t(p.padded), "the combined gradient"}};
  for (const Buffer &b : buffers) {
    if (b.floats == 0)
      continue;
    Expected<void *> m = s.allocate(b.floats * sizeof(float), b.what);
    if (!m)
      return m.takeError();
    *b.at = static_cast<float *>(*m);
    if (Status st = s.device->zero(*m, b.floats * sizeof(float)); !st) // the padding stays 0
      return st.takeError();
  }
  const int64_t buckets = (p.padded + p.bucket - 1) / p.bucket;
  p.bucketCovers.assign(size_t(buckets), 0);
  for (size_t g = 0; g < s.gradPtrs.size(); ++g) {
    const BucketSpan span =
        bucketsSpanned(s.gradPtrs[g] - s.grads, int64_t(s.gradBytes[g] / sizeof(float)), p.bucket);
    for (int64_t b = span.first; b <= span.last; ++b)
      ++p.bucketCovers[size_t(b)];
  }
  // NCCL enqueues on the side stream; the emulator runs each call at once,
  // in order (the overlap's logic without its concurrency). Host-staged
  // copies on a GPU wait for the device, so they do not overlap.
  p.side = p.collectives->enqueues() && engine_ == StepEngine::Cuda;
  p.overlap = plan.overlap && (ranks > 1 || (forced && *forced)) &&
              (p.side || engine_ == StepEngine::CudaSim);
  std::string line = std::to_string(ranks) + " rank" + (ranks == 1 ? "" : "s") + " x " +
                     std::to_string(p.per) + " micro-batch" + (p.per == 1 ? "" : "es") + " of " +
                     std::to_string(desc_.batch) + (desc_.batch == 1 ? " sequence" : " sequences") +
                     "; gradients exchanged in " + std::to_string(buckets) + " bucket" +
                     (buckets == 1 ? "" : "s") + " by " + p.collectives->describe() +
                     (p.overlap ? ", overlapped with the backward" : ", after the backward") + note;
  s.parallel = std::move(p);
  return line;
}

Expected<double> CompiledStep::runDeviceParallel(const Batch &global, int64_t step,
                                                 float clipNorm) {
  CudaState &s = *cuda_;
  CudaState::Parallel &p = *s.parallel;
  if (global.B != p.batch)
    return makeError("internal: a batch of " + std::to_string(global.B) + " for a step of " +
                     std::to_string(p.batch));
  const int64_t counted = countedTargets(global);
  const std::string what = "step " + std::to_string(step) + "'s gradient exchange";
  const int ranks = p.comm->size();
  auto weigh = [&](int j, int64_t at, int64_t n, float factor) {
    OptScaleArgs a{};
    a.src = s.grads + at, a.dst = p.local + size_t(j) * size_t(p.padded) + at;
    a.n = n, a.factor = factor;
    return s.device->launchOptimizer("attnc_opt_scale_into", opt::elementwiseBlocks(n), &a);
  };
  // fp16: as runDevice, a step whose gradients overflow reruns at a lower
  // loss scale, on every rank together: each rank tells whether one of its
  // micro-batches overflowed, and the combined gradient's norm (the same
  // bits everywhere) decides the rest. Every rank exchanges every bucket
  // once per try, overflowed or not, so their collectives always match.
  for (;;) {
    const float scale = s.scaler.scale();
    p.pending = p.bucketCovers;
    p.nextBucket = int64_t(p.bucketCovers.size()) - 1;
    // Per rank: [overflowed, each micro-batch's weighted loss].
    std::vector<double> mine(size_t(1 + p.per), 0.0), all(mine.size() * size_t(ranks));
    for (int j = 0; j < p.per; ++j) {
      const int m = p.first + j;
      const Batch part = sliceBatch(global, m * desc_.batch, desc_.batch);
      const float weight = microBatchWeight(part, counted, p.micro);
      // Weighted and unscaled in one multiply (1 / scale is a power of 2).
      const float factor = weight * (1.0f / scale);
      if (Status st = setBatch(part, true, step * p.micro + m); !st)
        return st.takeError();
      if (Status st = uploadStepInputs(); !st)
        return st.takeError();
      const bool overlapHere = p.overlap && j == p.per - 1;
      if (overlapHere)
        deviceGradReady_ = [&, j, factor](long long slot) -> Status {
          const int64_t at = s.gradPtrs[size_t(slot)] - s.grads,
                        n = int64_t(s.gradBytes[size_t(slot)] / sizeof(float));
          if (Status st = weigh(j, at, n, factor); !st)
            return st;
          const BucketSpan span = bucketsSpanned(at, n, p.bucket);
          for (int64_t b = span.first; b <= span.last; ++b)
            --p.pending[size_t(b)];
          return sendBuckets(/*all=*/false, what);
        };
      scaledOverflow_ = false;
      Expected<double> loss = runDeviceOnce(scale);
      deviceGradReady_ = nullptr;
      if (!loss && !scaledOverflow_)
        return makeError("micro-batch " + std::to_string(m) + " of " + std::to_string(p.micro) +
                         ": " + loss.error());
      if (!loss) {
        mine[0] = 1;
        break;
      }
      if (!overlapHere)
        if (Status st = weigh(j, 0, s.flatN, factor); !st)
          return st.takeError();
      mine[size_t(1 + j)] = double(weight) * *loss;
    }
    // What is left to send (everything, without overlap), then the
    // agreement: one host all-gather per step, under the ranks' deadline.
    if (Status st = sendBuckets(/*all=*/true, what); !st)
      return st.takeError();
    if (Status st = p.comm->allGather(mine.data(), mine.size() * sizeof(double), all.data(), what);
        !st)
      return st.takeError();
    bool overflowed = false;
    double loss = 0;
    for (int r = 0; r < ranks; ++r) {
      overflowed = overflowed || all[size_t(r) * mine.size()] != 0;
      for (int j = 0; j < p.per; ++j)
        loss += all[size_t(r) * mine.size() + size_t(1 + j)];
    }
    bool finite = !overflowed;
    if (finite) {
      if (Status st = s.device->copy(s.grads, p.combined, sizeof(float) * size_t(s.flatN)); !st)
        return st.takeError();
      if (Status st = deviceGradNorm(1.0f, clipNorm); !st)
        return st.takeError();
      finite = !s.lastState.nonfinite;
    }
    const bool applied = s.scaler.update(!finite);
    if (applied || !s.scaler.enabled())
      return loss; // a non-finite gradient without scaling is update()'s to report
    ++overflowReruns_;
    if (s.scaler.scale() >= scale)
      return makeError("compiled CUDA step: gradients overflow fp16 even at loss scale " +
                       std::to_string(scale));
  }
}

// The buckets go last first (where the backward starts), the same order on
// every rank. Per bucket [a, a + len): slice q of every local micro-batch
// goes to rank q (an all-to-all; they arrive rank-major, so in micro-batch
// order), which adds them up in that order (attnc_opt_ordered_sum) and
// all-gathers the sums into `combined`. DataParallelStep::exchangeBucket
// does the same on the host.
Status CompiledStep::sendBuckets(bool all, const std::string &what) {
  CudaState &s = *cuda_;
  CudaState::Parallel &p = *s.parallel;
  if (p.nextBucket < 0 || (!all && p.pending[size_t(p.nextBucket)] > 0)) // none to send now
    return all && p.side ? s.device->mainWaitsForSide() : Status();
  const int ranks = p.comm->size();
  void *stream = nullptr;
  if (p.side) { // behind the step's work so far, beside what follows
    if (Status st = s.device->sideWaitsForMain(); !st)
      return st;
    stream = s.device->sideStream();
    s.device->onSide(true);
  }
  // One bucket [a, a + slice · ranks).
  auto sendBucket = [&](int64_t a, int64_t slice) -> Status {
    const float *send = p.local + a;
    if (p.per > 1) { // rank-major blocks of micro-batch-major slices
      float *dst = p.send;
      for (int q = 0; q < ranks; ++q)
        for (int j = 0; j < p.per; ++j, dst += slice)
          if (Status st =
                  s.device->copy(dst, p.local + size_t(j) * size_t(p.padded) + a + q * slice,
                                 size_t(slice) * sizeof(float));
              !st)
            return st;
      send = p.send;
    }
    if (Status st =
            p.collectives->allToAll(send, p.gathered, size_t(p.per) * size_t(slice), stream, what);
        !st)
      return st;
    OptOrderedSumArgs sum{};
    sum.parts = p.gathered, sum.out = p.sum, sum.n = slice;
    sum.part_stride = slice, sum.num_parts = p.micro;
    if (Status st =
            s.device->launchOptimizer("attnc_opt_ordered_sum", opt::elementwiseBlocks(slice), &sum);
        !st)
      return st;
    return p.collectives->allGather(p.sum, p.combined + a, size_t(slice), stream, what);
  };
  Status sent;
  for (; sent && p.nextBucket >= 0 && (all || p.pending[size_t(p.nextBucket)] <= 0);
       --p.nextBucket) {
    ++p.sent, p.sentEarly += all ? 0 : 1;
    const int64_t a = p.nextBucket * p.bucket;
    sent = sendBucket(a, std::min(p.bucket, p.padded - a) / ranks);
  }
  if (p.side) {
    s.device->onSide(false);
    // Only the last call makes the step wait: during the backward the
    // exchange runs beside it.
    if (all)
      if (Status st = s.device->mainWaitsForSide(); !st && sent)
        sent = std::move(st);
  }
  return sent;
}

std::pair<int64_t, int64_t> CompiledStep::bucketsSentDuringBackward() const {
  if (!cuda_ || !cuda_->parallel)
    return {0, 0};
  return {cuda_->parallel->sentEarly, cuda_->parallel->sent};
}

Status CompiledStep::download(AdamW &adam) {
  if (!cuda_ || !cuda_->resident)
    return makeError("compiled step: download() before upload()");
  CudaState &s = *cuda_;
  if (s.hostCurrent) // an evaluation and a checkpoint of one step: copy once
    return {};
  Expected<DeviceScope> scope = s.device->enter();
  if (!scope)
    return scope.takeError();
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
