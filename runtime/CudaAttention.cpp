//===- CudaAttention.cpp - Run one compiled attention op on a GPU ---------===//
#include "runtime/CudaAttention.h"

#include "runtime/DeviceTiling.h"

#include "runtime/FileSystem.h"
#include "runtime/HalfFloat.h"
#include "runtime/HostCompiler.h"
#include "runtime/KernelCache.h"
#include "runtime/KernelHeaders.h"

#include "attnc/abi/KernelArgs.h"
#include "attnc/abi/LshTileModel.h"
#include "attnc/abi/TileModel.h"

#include <cstdlib>
#include <cstring>

namespace attnc {

namespace {

size_t elemBytes(const std::string &dtype) { return dtype == "f32" ? 4 : 2; }

/// Host f32 values converted to the kernels' element type.
std::vector<uint8_t> toDevice(const float *v, size_t n, const std::string &dtype) {
  std::vector<uint8_t> out(n * elemBytes(dtype));
  if (dtype == "f32") {
    std::memcpy(out.data(), v, n * 4);
    return out;
  }
  uint16_t *o = reinterpret_cast<uint16_t *>(out.data());
  for (size_t i = 0; i < n; ++i)
    o[i] = dtype == "f16" ? half::toHalf(v[i]) : half::toBf16(v[i]);
  return out;
}

std::vector<float> fromDevice(const std::vector<uint8_t> &bytes, const std::string &dtype) {
  size_t n = bytes.size() / elemBytes(dtype);
  std::vector<float> out(n);
  if (dtype == "f32") {
    std::memcpy(out.data(), bytes.data(), n * 4);
    return out;
  }
  const uint16_t *in = reinterpret_cast<const uint16_t *>(bytes.data());
  for (size_t i = 0; i < n; ++i)
    out[i] = dtype == "f16" ? half::fromHalf(in[i]) : half::fromBf16(in[i]);
  return out;
}

const float *f32(const st::Tensor *t) {
  return t ? reinterpret_cast<const float *>(t->data.data()) : nullptr;
}

/// A device buffer holding `host` converted to `dtype` (or f32/i32 as is).
Expected<cuda::DeviceBuffer> upload(const void *host, size_t bytes) {
  Expected<cuda::DeviceBuffer> buf = cuda::DeviceBuffer::allocate(std::max<size_t>(bytes, 16));
  if (!buf)
    return buf;
  if (bytes)
    if (Status s = buf->upload(host, bytes); !s)
      return s.takeError();
  return buf;
}

/// Uploads `host` into `out` when it is not null (optional inputs).
Status uploadOptional(const void *host, size_t bytes, std::optional<cuda::DeviceBuffer> &out) {
  if (!host)
    return {};
  Expected<cuda::DeviceBuffer> b = upload(host, bytes);
  if (!b)
    return b.takeError();
  out.emplace(std::move(b).take());
  return {};
}

Expected<cuda::DeviceBuffer> zeros(size_t bytes) {
  Expected<cuda::DeviceBuffer> buf = cuda::DeviceBuffer::allocate(std::max<size_t>(bytes, 16));
  if (!buf)
    return buf;
  if (Status s = buf->zero(); !s)
    return s.takeError();
  return buf;
}

Expected<std::vector<float>> download(const cuda::DeviceBuffer &buf, size_t n,
                                      const std::string &dtype) {
  std::vector<uint8_t> bytes(n * elemBytes(dtype));
  if (Status s = buf.download(bytes.data(), bytes.size()); !s)
    return s.takeError();
  return fromDevice(bytes, dtype);
}

unsigned ceilDiv(int64_t a, int64_t b) { return unsigned((a + b - 1) / b); }

/// A one-dimensional grid of `blocks` (every attention grid is: TileModel.h),
/// or an error naming the kernel when no GPU could launch it.
Expected<cuda::Dim3> flatGrid(const std::string &kernel, long long blocks) {
  if (blocks < 1 || blocks > attnc::tile::kMaxGridX)
    return makeError("kernel " + kernel + ": a grid of " + std::to_string(blocks) +
                     " blocks is outside CUDA's 1 to " + std::to_string(attnc::tile::kMaxGridX) +
                     "; split the batch");
  return cuda::Dim3{unsigned(blocks), 1, 1};
}

/// The low-rank projections around the GPU attention run on the host, with
/// the CPU kernels' own projection (the same loops as the CPU target),
/// compiled by the host compiler like any CPU kernel: the runtime reaches
/// kernel code only through the JIT, never by including it.
constexpr const char *kHostProjectionSource = R"(#include "attnc/lowrank.h"
extern "C" int attnc_host_lowrank_project_fwd(
    const float *x, const float *e, float *xp, const int *lengths, int B, int H, int N, int D,
    int kProj, int Nmax, int perHead) {
  return attnc::cpu::lowrank_project_fwd(x, e, xp, lengths, B, H, N, D, kProj, Nmax, perHead != 0);
}
extern "C" int attnc_host_lowrank_project_bwd(
    const float *x, const float *e, const float *dxp, float *dx, float *de, const int *lengths,
    int B, int H, int N, int D, int kProj, int Nmax, int perHead) {
  return attnc::cpu::lowrank_project_bwd(x, e, dxp, dx, de, lengths, B, H, N, D, kProj, Nmax,
                                         perHead != 0);
}
)";

} // namespace

Status CudaAttention::loadHostProjections() {
  Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cpu);
  if (!dirs)
    return dirs.takeError();
  HostCompileOptions options;
  options.includeDirs = *dirs;
  HostCompiler compiler(&KernelCache::processDefault());
  Expected<SharedObject> so =
      compiler.compileAndLoad("attnc_host_lowrank.cpp", kHostProjectionSource, options);
  if (!so)
    return so.takeError();
  projections_ = std::make_shared<SharedObject>(std::move(so).take());
  Expected<ProjectFwdFn *> fwd =
      projections_->function<ProjectFwdFn>("attnc_host_lowrank_project_fwd");
  if (!fwd)
    return fwd.takeError();
  Expected<ProjectBwdFn *> bwd =
      projections_->function<ProjectBwdFn>("attnc_host_lowrank_project_bwd");
  if (!bwd)
    return bwd.takeError();
  projectFwd_ = *fwd, projectBwd_ = *bwd;
  return {};
}

Expected<CudaAttention> CudaAttention::compile(const std::string &source,
                                               const std::string &compiledFor,
                                               const std::string &dtype, const KernelDesc &forward,
                                               std::optional<KernelDesc> backward,
                                               const std::vector<std::string> &includeDirs,
                                               const NvrtcCompiler &compiler, bool retile) {
  if (dtype != "f32" && dtype != "f16" && dtype != "bf16")
    return makeError("kernel " + forward.name + ": unknown dtype '" + dtype + "'");
  Expected<cuda::Context> ctx = cuda::Context::create(0);
  if (!ctx)
    return ctx.takeError();
  Expected<cuda::DeviceInfo> info = cuda::queryDevice(0);
  if (!info)
    return info.takeError();
  // The kernels as this GPU runs them: compiled for its arch, each tile
  // checked against its shared memory and re-tiled where needed.
  const DeviceLimits limits = DeviceLimits::of(*info);
  NvrtcOptions options;
  options.arch = info->arch();
  if (Expected<GpuArch> a = parseGpuArch(compiledFor); a && a->sm == limits.sm)
    options.arch = compiledFor; // keeps an "a"/"f" suffix
  options.includeDirs = includeDirs;
  Expected<DeviceKernelPlan> fwdPlan =
      planKernelForDevice(forward, dtype, compiledFor, limits, retile);
  if (!fwdPlan)
    return fwdPlan.takeError();
  std::optional<DeviceKernelPlan> bwdPlan;
  if (backward) {
    Expected<DeviceKernelPlan> p =
        planKernelForDevice(*backward, dtype, compiledFor, limits, retile);
    if (!p)
      return p.takeError();
    bwdPlan = std::move(*p);
  }
  std::vector<std::string> notes;
  for (const DeviceKernelPlan *p : {&*fwdPlan, bwdPlan ? &*bwdPlan : nullptr})
    if (p && !p->define.empty())
      options.options.push_back(p->define), notes.push_back(p->note);
  Expected<Cubin> cubin = compiler.compile("attnc_kernels.cu", source, options);
  if (!cubin)
    return cubin.takeError();
  Expected<cuda::Module> module = cuda::Module::load(cubin->image, cubin->programName);
  if (!module)
    return module.takeError();
  CudaAttention a(std::move(ctx).take(), std::move(module).take());
  a.dtype_ = dtype;
  a.fwd_ = fwdPlan->desc;
  if (bwdPlan)
    a.bwd_ = bwdPlan->desc;
  a.retiled_ = std::move(notes);
  a.device_ = info->describe();
  auto resolve = [&](const KernelDesc &d, std::vector<cuda::Kernel> &out) -> Status {
    for (const std::string &entry : d.entryPoints) {
      Expected<cuda::Kernel> k = a.module_.kernel(entry);
      if (!k)
        return k.takeError();
      out.push_back(*k);
    }
    return {};
  };
  if (Status s = resolve(a.fwd_, a.fwdKernels_); !s)
    return s.takeError();
  if (a.fwd_.lowrank)
    if (Status s = a.loadHostProjections(); !s)
      return s.takeError();
  if (a.bwd_)
    if (Status s = resolve(*a.bwd_, a.bwdKernels_); !s)
      return s.takeError();
  return a;
}

Expected<AttentionOutputs> CudaAttention::run(const AttentionInputs &in) {
  if (Status s = ctx_.makeCurrent(); !s)
    return s.takeError();
  if (fwd_.lsh)
    return runLsh(in);
  const auto &qs = in.q->shape;
  int B = int(qs[0]), H = int(qs[1]), Nq = int(qs[2]), N = int(in.k->shape[2]), D = int(qs[3]);
  if (D != fwd_.headDim)
    return makeError("kernel " + fwd_.name + " was compiled for head dim " +
                     std::to_string(fwd_.headDim) + ", got " + std::to_string(D));
  const int *lengths =
      in.lengths ? reinterpret_cast<const int *>(in.lengths->data.data()) : nullptr;
  bool perHead = fwd_.share == "none";
  int kProj = 0, Nmax = 0, Nk = N;
  // Low-rank: project on the host; the GPU sees kProj valid keys.
  std::vector<float> kp, vp;
  const float *keys = f32(in.k), *values = f32(in.v);
  if (fwd_.lowrank) {
    kProj = int(in.E->shape[in.E->shape.size() - 2]);
    Nmax = int(in.E->shape.back());
    kp.assign(size_t(B) * H * kProj * D, 0.f);
    vp.assign(kp.size(), 0.f);
    const float *F = in.F ? f32(in.F) : f32(in.E);
    if (projectFwd_(keys, f32(in.E), kp.data(), lengths, B, H, N, D, kProj, Nmax, perHead) ||
        projectFwd_(values, F, vp.data(), lengths, B, H, N, D, kProj, Nmax, perHead))
      return makeError("kernel " + fwd_.name + ": the low-rank projection failed");
    keys = kp.data(), values = vp.data(), Nk = kProj;
  }
  size_t nq = size_t(B) * H * Nq * D, nk = size_t(B) * H * Nk * D;
  auto hq = toDevice(f32(in.q), nq, dtype_), hk = toDevice(keys, nk, dtype_),
       hv = toDevice(values, nk, dtype_);
  Expected<cuda::DeviceBuffer> dq = upload(hq.data(), hq.size()), dk = upload(hk.data(), hk.size()),
                               dv = upload(hv.data(), hv.size()),
                               dOut = zeros(nq * elemBytes(dtype_)),
                               dLse = zeros(size_t(B) * H * Nq * 4);
  for (auto *b : {&dq, &dk, &dv, &dOut, &dLse})
    if (!*b)
      return b->takeError();
  std::optional<cuda::DeviceBuffer> dLen, dParams;
  if (Status st = uploadOptional(lengths && !fwd_.lowrank ? lengths : nullptr, size_t(B) * 4, dLen);
      !st)
    return st.takeError();
  if (Status st = uploadOptional(in.params ? in.params->data.data() : nullptr,
                                 in.params ? in.params->data.size() : 0, dParams);
      !st)
    return st.takeError();
  // Shared QK (LSH's dense fallback): entry 0 normalises q into the keys
  // buffer; the flash entries follow (docs/kernels.md).
  const size_t flashFwd = fwd_.sharedQk ? 1 : 0;
  const long long rows = (long long)B * H * Nq;
  const unsigned rowBlocks = ceilDiv(rows, fwd_.warps);
  if (fwd_.sharedQk)
    if (Status s =
            cuda::launch(fwdKernels_[0], {rowBlocks, 1, 1}, {unsigned(fwd_.warps * 32), 1, 1}, 0,
                         nullptr, SharedQkArgs{dq->as<void>(), nullptr, dk->as<void>(), rows});
        !s)
      return s.takeError();
  AttnFwdArgs a{};
  a.q = dq->as<void>(), a.k = dk->as<void>(), a.v = dv->as<void>();
  a.out = dOut->as<void>(), a.lse = dLse->as<float>();
  a.lengths = dLen ? dLen->as<int>() : nullptr;
  a.params = dParams ? dParams->as<float>() : nullptr;
  a.B = B, a.H = H, a.Nq = Nq, a.Nk = Nk, a.scale = fwd_.scale;
  if (in.dropout) // training: the kernels' attention dropout (the CPU kernels' masks)
    a.dropout = fwd_.dropout, a.dropout_seed = in.dropoutSeed, a.dropout_offset = in.dropoutOffset;
  cuda::Dim3 block{unsigned(fwd_.warps * 32), 1, 1};
  Expected<cuda::Event> e0 = cuda::Event::create(), e1 = cuda::Event::create(),
                        e2 = cuda::Event::create();
  if (!e0 || !e1 || !e2)
    return makeError("cannot create CUDA events: " + (!e0   ? e0.error()
                                                      : !e1 ? e1.error()
                                                            : e2.error()));
  Expected<cuda::Dim3> fwdGrid =
      flatGrid(fwd_.name, attnc::tile::queryTileBlocks(Nq, fwd_.blockQ, (long long)B * H));
  if (!fwdGrid)
    return fwdGrid.takeError();
  (void)e0->record();
  if (Status s =
          cuda::launch(fwdKernels_[flashFwd], *fwdGrid, block, size_t(fwd_.smemBytes), nullptr, a);
      !s)
    return s.takeError();
  (void)e1->record();
  if (Status s = cuda::synchronize(nullptr, fwdKernels_[flashFwd].name); !s)
    return s.takeError();
  if (Expected<float> ms = cuda::Event::elapsedMs(*e0, *e1))
    forwardMs_ = *ms;

  AttentionOutputs out;
  Expected<std::vector<float>> o = download(*dOut, nq, dtype_),
                               l = download(*dLse, size_t(B) * H * Nq, "f32");
  if (!o || !l)
    return makeError(!o ? o.error() : l.error());
  out.out = st::Tensor::f32({B, H, Nq, D}, *o);
  out.lse = st::Tensor::f32({B, H, Nq}, *l);
  if (!in.dout)
    return out;
  if (!bwd_)
    return makeError("no backward kernel was compiled for " + fwd_.name);

  // Backward: preprocess (delta), dK/dV, dQ, dparams (P > 0).
  const int P = bwd_->numParams;
  auto hdo = toDevice(f32(in.dout), nq, dtype_);
  long long partial = attnc::tile::bwd_workspace_floats(B, H, Nq, Nk, P, bwd_->blockKv);
  Expected<cuda::DeviceBuffer> dDo = upload(hdo.data(), hdo.size()),
                               dDelta = zeros(size_t(B) * H * Nq * 4),
                               dDq = zeros(nq * elemBytes(dtype_)),
                               dDk = zeros(nk * elemBytes(dtype_)),
                               dDv = zeros(nk * elemBytes(dtype_)),
                               dDparams = zeros(size_t(std::max(P, 1)) * H * 4),
                               dPartial = zeros(size_t(std::max(partial, 1LL)) * 4);
  for (auto *b : {&dDo, &dDelta, &dDq, &dDk, &dDv, &dDparams, &dPartial})
    if (!*b)
      return b->takeError();
  AttnBwdArgs g{};
  g.q = a.q, g.k = a.k, g.v = a.v, g.out = a.out, g.dout = dDo->as<void>();
  g.lse = a.lse, g.lengths = a.lengths, g.params = a.params;
  g.delta = dDelta->as<float>();
  g.dq = dDq->as<void>(), g.dk = dDk->as<void>(), g.dv = dDv->as<void>();
  g.dparams = P ? dDparams->as<float>() : nullptr;
  g.dparams_partial = P ? dPartial->as<float>() : nullptr;
  g.B = B, g.H = H, g.Nq = Nq, g.Nk = Nk, g.scale = bwd_->scale;
  g.dropout = a.dropout, g.dropout_seed = a.dropout_seed, g.dropout_offset = a.dropout_offset;
  cuda::Dim3 bblock{unsigned(bwd_->warps * 32), 1, 1};
  (void)e1->record(); // the backward's time starts here, not at the forward's end
  struct Step {
    cuda::Dim3 grid;
    size_t smem;
  };
  // Entry order as emitted: [normalise, fold_dk,] preprocess, dkdv, dq[, dparams].
  const size_t flashBwd = bwd_->sharedQk ? 2 : 0;
  const long long bh = (long long)B * H;
  Expected<cuda::Dim3> qGrid =
                           flatGrid(bwd_->name, attnc::tile::queryTileBlocks(Nq, bwd_->blockQ, bh)),
                       kGrid =
                           flatGrid(bwd_->name, attnc::tile::keyTileBlocks(Nk, bwd_->blockKv, bh));
  if (!qGrid || !kGrid)
    return makeError(!qGrid ? qGrid.error() : kGrid.error());
  Step steps[] = {{*qGrid, 0},
                  {*kGrid, size_t(bwd_->smemBytes)},
                  {*qGrid, size_t(bwd_->smemBytes)},
                  {{unsigned(std::max(P, 1) * H), 1, 1}, 0}};
  for (size_t i = 0; i + flashBwd < bwdKernels_.size() && i < 4; ++i)
    if (Status s = cuda::launch(bwdKernels_[i + flashBwd], steps[i].grid, bblock, steps[i].smem,
                                nullptr, g);
        !s)
      return s.takeError();
  if (bwd_->sharedQk) // dq += the key path through the normalisation
    if (Status s = cuda::launch(bwdKernels_[1], {ceilDiv(rows, bwd_->warps), 1, 1}, bblock, 0,
                                nullptr, SharedQkArgs{a.q, g.dk, g.dq, rows});
        !s)
      return s.takeError();
  (void)e2->record();
  if (Status s = cuda::synchronize(nullptr, bwdKernels_.back().name); !s)
    return s.takeError();
  if (Expected<float> ms = cuda::Event::elapsedMs(*e1, *e2))
    backwardMs_ = *ms;

  Expected<std::vector<float>> gq = download(*dDq, nq, dtype_), gk = download(*dDk, nk, dtype_),
                               gv = download(*dDv, nk, dtype_);
  if (!gq || !gk || !gv)
    return makeError(!gq ? gq.error() : !gk ? gk.error() : gv.error());
  out.dq = st::Tensor::f32(qs, *gq);
  if (P) {
    Expected<std::vector<float>> gp = download(*dDparams, size_t(P) * H, "f32");
    if (!gp)
      return gp.takeError();
    out.dparams = st::Tensor::f32({P, H}, *gp);
  }
  if (!fwd_.lowrank) {
    if (fwd_.sharedQk) { // dk is folded into dq
      out.dv = st::Tensor::f32(in.v->shape, *gv);
      return out;
    }
    out.dk = st::Tensor::f32(in.k->shape, *gk);
    out.dv = st::Tensor::f32(in.v->shape, *gv);
    return out;
  }
  // Low-rank backward of the projections, on the host.
  std::vector<float> dK(size_t(B) * H * N * D), dV(dK.size());
  std::vector<float> dE(in.E->data.size() / 4, 0.f), dF(in.F ? in.F->data.size() / 4 : 0, 0.f);
  const float *F = in.F ? f32(in.F) : f32(in.E);
  float *dFp = in.F ? dF.data() : dE.data(); // shared E = F: both into dE
  if (projectBwd_(f32(in.k), f32(in.E), gk->data(), dK.data(), dE.data(), lengths, B, H, N, D,
                  kProj, Nmax, perHead) ||
      projectBwd_(f32(in.v), F, gv->data(), dV.data(), dFp, lengths, B, H, N, D, kProj, Nmax,
                  perHead))
    return makeError("kernel " + bwd_->name + ": the low-rank projection backward failed");
  out.dk = st::Tensor::f32(in.k->shape, dK);
  out.dv = st::Tensor::f32(in.v->shape, dV);
  out.dE = st::Tensor::f32(in.E->shape, dE);
  if (in.F)
    out.dF = st::Tensor::f32(in.F->shape, dF);
  return out;
}

Expected<AttentionOutputs> CudaAttention::runLsh(const AttentionInputs &in) {
  const KernelDesc::Lsh &l = *fwd_.lsh;
  const auto &qs = in.q->shape;
  const int B = int(qs[0]), H = int(qs[1]), N = int(qs[2]), D = int(qs[3]), R = l.rounds;
  if (D != fwd_.headDim)
    return makeError("kernel " + fwd_.name + " was compiled for head dim " +
                     std::to_string(fwd_.headDim) + ", got " + std::to_string(D));
  if (!in.rotations || in.rotations->shape != std::vector<int64_t>{R, D, l.numBuckets / 2})
    return makeError("LSH kernel " + fwd_.name + " needs rotations [" + std::to_string(R) + ", " +
                     std::to_string(D) + ", " + std::to_string(l.numBuckets / 2) + "]");
  if (l.numBuckets > attnc::tile::kLshMaxBuckets)
    return makeError("LSH kernel " + fwd_.name + ": " + std::to_string(l.numBuckets) +
                     " buckets; the CUDA hash kernel handles at most " +
                     std::to_string(attnc::tile::kLshMaxBuckets));
  const int bh = B * H, npad = attnc::tile::lshPaddedLength(N, l.chunk);
  const size_t nqd = size_t(bh) * N * D, eb = elemBytes(dtype_);
  const size_t rounds = size_t(R);
  auto hq = toDevice(f32(in.q), nqd, dtype_), hv = toDevice(f32(in.v), nqd, dtype_);
  const st::Tensor *rot = in.rotations;
  Expected<cuda::DeviceBuffer> dQ = upload(hq.data(), hq.size()), dV = upload(hv.data(), hv.size()),
                               dRot = upload(rot->data.data(), rot->data.size()),
                               dOut = zeros(nqd * eb), dLse = zeros(size_t(bh) * N * 4),
                               dBuckets = zeros(size_t(bh) * rounds * N * 4),
                               dPerm = zeros(size_t(bh) * rounds * npad * 4),
                               dKeys = zeros(nqd * 4), dRoundOut = zeros(nqd * rounds * 4),
                               dRoundLse = zeros(size_t(bh) * rounds * N * 4);
  for (auto *b : {&dQ, &dV, &dRot, &dOut, &dLse, &dBuckets, &dPerm, &dKeys, &dRoundOut, &dRoundLse})
    if (!*b)
      return b->takeError();
  std::optional<cuda::DeviceBuffer> dLen, dParams;
  if (Status st =
          uploadOptional(in.lengths ? in.lengths->data.data() : nullptr, size_t(B) * 4, dLen);
      !st)
    return st.takeError();
  if (Status st = uploadOptional(in.params ? in.params->data.data() : nullptr,
                                 in.params ? in.params->data.size() : 0, dParams);
      !st)
    return st.takeError();
  AttnLshArgs a{};
  a.q = dQ->as<void>(), a.v = dV->as<void>(), a.out = dOut->as<void>(), a.lse = dLse->as<float>();
  a.lengths = dLen ? dLen->as<int>() : nullptr;
  a.params = dParams ? dParams->as<float>() : nullptr;
  a.rotations = dRot->as<float>();
  a.buckets = dBuckets->as<int>(), a.perm = dPerm->as<int>(), a.keys = dKeys->as<float>();
  a.round_out = dRoundOut->as<float>(), a.round_lse = dRoundLse->as<float>();
  a.B = B, a.H = H, a.N = N, a.rounds = R, a.num_buckets = l.numBuckets, a.scale = fwd_.scale;
  if (in.dropout) // training: per round, the backward redraws the masks
    a.dropout = fwd_.dropout, a.dropout_seed = in.dropoutSeed, a.dropout_offset = in.dropoutOffset;

  using attnc::tile::LshGrid;
  auto launchAll = [&](std::vector<cuda::Kernel> &kernels, const KernelDesc &d,
                       const std::vector<LshGrid> &grids) -> Status {
    if (kernels.size() != grids.size())
      return makeError("LSH kernel " + d.name + ": expected " + std::to_string(grids.size()) +
                       " entry points, found " + std::to_string(kernels.size()));
    for (size_t i = 0; i < grids.size(); ++i) {
      Expected<cuda::Dim3> grid = flatGrid(kernels[i].name, grids[i].x);
      if (!grid)
        return grid.takeError();
      if (Status s = cuda::launch(kernels[i], *grid, {unsigned(d.warps * 32), 1, 1}, 0, nullptr, a);
          !s)
        return s;
    }
    return cuda::synchronize(nullptr, kernels.back().name);
  };
  attnc::tile::LshTile ft{fwd_.blockQ, fwd_.blockKv, fwd_.warps};
  Expected<cuda::Event> e0 = cuda::Event::create(), e1 = cuda::Event::create(),
                        e2 = cuda::Event::create();
  if (!e0 || !e1 || !e2)
    return makeError("cannot create CUDA events");
  (void)e0->record();
  // Entry order as emitted: hash, fwd, combine.
  if (Status s = launchAll(fwdKernels_, fwd_,
                           {attnc::tile::lshHashGrid(bh, R),
                            attnc::tile::lshFwdGrid(ft, N, l.chunk, bh, R),
                            attnc::tile::lshRowGrid(N, bh)});
      !s)
    return s.takeError();
  (void)e1->record();
  (void)cuda::synchronize(nullptr, "event");
  if (Expected<float> ms = cuda::Event::elapsedMs(*e0, *e1))
    forwardMs_ = *ms;
  AttentionOutputs out;
  Expected<std::vector<float>> o = download(*dOut, nqd, dtype_),
                               ls = download(*dLse, size_t(bh) * N, "f32");
  if (!o || !ls)
    return makeError(!o ? o.error() : ls.error());
  out.out = st::Tensor::f32({B, H, N, D}, *o);
  out.lse = st::Tensor::f32({B, H, N}, *ls);
  if (!in.dout)
    return out;
  if (!bwd_ || !bwd_->lsh)
    return makeError("no LSH backward kernel was compiled for " + fwd_.name);
  auto hdo = toDevice(f32(in.dout), nqd, dtype_);
  Expected<cuda::DeviceBuffer> dDo = upload(hdo.data(), hdo.size()),
                               dDelta = zeros(size_t(bh) * N * 4), dDq = zeros(nqd * eb),
                               dDv = zeros(nqd * eb), dRdq = zeros(nqd * rounds * 4),
                               dRdk = zeros(nqd * rounds * 4), dRdv = zeros(nqd * rounds * 4);
  for (auto *b : {&dDo, &dDelta, &dDq, &dDv, &dRdq, &dRdk, &dRdv})
    if (!*b)
      return b->takeError();
  a.dout = dDo->as<void>(), a.dq = dDq->as<void>(), a.dv = dDv->as<void>();
  a.delta = dDelta->as<float>();
  a.round_dq = dRdq->as<float>(), a.round_dk = dRdk->as<float>(), a.round_dv = dRdv->as<float>();
  a.scale = bwd_->scale;
  attnc::tile::LshTile bt{bwd_->blockQ, bwd_->blockKv, bwd_->warps};
  (void)e1->record();
  // Entry order as emitted: hash (recomputed), preprocess, dq, dkdv, combine.
  if (Status s = launchAll(bwdKernels_, *bwd_,
                           {attnc::tile::lshHashGrid(bh, R), attnc::tile::lshRowGrid(N, bh),
                            attnc::tile::lshBwdDqGrid(bt, N, l.chunk, bh, R),
                            attnc::tile::lshBwdDkdvGrid(bt, N, l.chunk, bh, R),
                            attnc::tile::lshRowGrid(N, bh)});
      !s)
    return s.takeError();
  (void)e2->record();
  (void)cuda::synchronize(nullptr, "event");
  if (Expected<float> ms = cuda::Event::elapsedMs(*e1, *e2))
    backwardMs_ = *ms;
  Expected<std::vector<float>> gq = download(*dDq, nqd, dtype_), gv = download(*dDv, nqd, dtype_);
  if (!gq || !gv)
    return makeError(!gq ? gq.error() : gv.error());
  out.dq = st::Tensor::f32(qs, *gq);
  out.dv = st::Tensor::f32(in.v->shape, *gv);
  return out;
}

} // namespace attnc
