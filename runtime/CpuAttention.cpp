//===- CpuAttention.cpp - Run one compiled attention op on the CPU --------===//
#include "runtime/CpuAttention.h"

#include "runtime/FileSystem.h"

#include "attnc/abi/KernelArgs.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace attnc {

Expected<CpuAttention> CpuAttention::compile(const std::string &source, const KernelDesc &forward,
                                             std::optional<KernelDesc> backward,
                                             const std::vector<std::string> &includeDirs,
                                             const HostCompiler &compiler) {
  HostCompileOptions options;
  options.includeDirs = includeDirs;
  // No CBLAS here: the low-rank projections' loop path is bit-identical
  // across thread counts (OpenBLAS 0.3.21's is not) and was as fast on the
  // reference machine, so the deterministic-backward promise holds.
  Expected<SharedObjectImage> image =
      compiler.compile("attnc_cpu_" + forward.name + ".cpp", source, options);
  if (!image)
    return image.takeError();
  Expected<SharedObject> so = SharedObject::load(image->image, image->programName);
  if (!so)
    return so.takeError();
  CpuAttention a(std::move(so).take());
  a.fwd_ = forward;
  a.bwd_ = std::move(backward);
  a.fromCache_ = image->fromCache;
  a.compileSeconds_ = image->compileSeconds;
  if (forward.entryPoints.size() != 1)
    return makeError("kernel " + forward.name + ": expected one CPU forward entry point");
  Expected<void *> f = a.so_.symbol(forward.entryPoints[0]);
  if (!f)
    return f.takeError();
  a.fwdFn_ = *f;
  if (a.bwd_) {
    if (a.bwd_->entryPoints.size() != 1)
      return makeError("kernel " + a.bwd_->name + ": expected one CPU backward entry point");
    Expected<void *> g = a.so_.symbol(a.bwd_->entryPoints[0]);
    if (!g)
      return g.takeError();
    a.bwdFn_ = *g;
  }
  return a;
}

namespace {

st::Tensor zeros(std::vector<int64_t> shape) {
  st::Tensor t;
  t.dtype = st::DType::F32;
  t.shape = std::move(shape);
  t.data.assign(static_cast<size_t>(t.numel()) * sizeof(float), 0);
  return t;
}

float *f32(st::Tensor &t) { return reinterpret_cast<float *>(t.data.data()); }
const float *f32(const st::Tensor *t) {
  return t ? reinterpret_cast<const float *>(t->data.data()) : nullptr;
}

const char *kernelError(int code) {
  switch (code) {
  case 1:
    return "a required pointer is null";
  case 2:
    return "a size is not positive";
  case 3:
    return "a workspace allocation failed";
  default:
    return "unknown error";
  }
}

} // namespace

Expected<AttentionOutputs> CpuAttention::run(const AttentionInputs &in) const {
  if (!in.q || !in.k || !in.v)
    return makeError("attention needs q, k and v");
  const auto &qs = in.q->shape, &ks = in.k->shape;
  if (qs.size() != 4 || ks.size() != 4 || qs[3] != fwd_.headDim)
    return makeError("kernel " + fwd_.name + " was compiled for head dim " +
                     std::to_string(fwd_.headDim) + ", got q " + in.q->shapeStr());
  AttentionCall c;
  c.B = int(qs[0]), c.H = int(qs[1]), c.Nq = int(qs[2]), c.N = int(ks[2]), c.D = int(qs[3]);
  c.q = f32(in.q), c.k = f32(in.k), c.v = f32(in.v);
  c.lengths = in.lengths ? reinterpret_cast<const int32_t *>(in.lengths->data.data()) : nullptr;
  c.E = f32(in.E), c.F = f32(in.F);
  if (in.E)
    c.kRows = int(in.E->shape[in.E->shape.size() - 2]), c.nmax = int(in.E->shape.back());
  c.params = f32(in.params), c.rotations = f32(in.rotations);
  c.dropout = in.dropout, c.dropoutSeed = in.dropoutSeed, c.dropoutOffset = in.dropoutOffset;
  if (fwd_.lsh &&
      (!in.rotations || in.rotations->shape !=
                            std::vector<int64_t>{fwd_.lsh->rounds, c.D, fwd_.lsh->numBuckets / 2}))
    return makeError("LSH kernel " + fwd_.name + " needs rotations [" +
                     std::to_string(fwd_.lsh->rounds) + ", " + std::to_string(c.D) + ", " +
                     std::to_string(fwd_.lsh->numBuckets / 2) + "]");
  AttentionOutputs out;
  out.out = zeros({c.B, c.H, c.Nq, c.D});
  out.lse = zeros({c.B, c.H, c.Nq});
  c.out = f32(out.out), c.lse = f32(out.lse);
  if (in.dout) {
    if (in.forwardOut && in.forwardLse && !fwd_.lowrank && !fwd_.lsh) {
      // The caller kept the forward: the backward reads it as is.
      if (in.forwardOut->shape != out.out.shape || in.forwardLse->shape != out.lse.shape)
        return makeError("kernel " + fwd_.name + ": the kept forward results are " +
                         in.forwardOut->shapeStr() + " and " + in.forwardLse->shapeStr() +
                         "; expected " + out.out.shapeStr() + " and " + out.lse.shapeStr());
      out.out = *in.forwardOut;
      out.lse = *in.forwardLse;
      c.out = c.lse = nullptr;
      c.savedOut = f32(in.forwardOut), c.savedLse = f32(in.forwardLse);
    }
    c.dout = f32(in.dout);
    out.dq = zeros(qs);
    out.dv = zeros(in.v->shape);
    c.dq = f32(*out.dq), c.dv = f32(*out.dv);
    if (!fwd_.lsh) {
      out.dk = zeros(ks);
      c.dk = f32(*out.dk);
    }
    const int P = bwd_ ? bwd_->numParams : 0;
    if (P && !fwd_.lsh) {
      out.dparams = zeros({P, c.H});
      c.dparams = f32(*out.dparams);
    }
    if (bwd_ && bwd_->lowrank) {
      out.dE = zeros(in.E->shape);
      c.dE = f32(*out.dE);
      if (in.F) {
        out.dF = zeros(in.F->shape);
        c.dF = f32(*out.dF);
      }
    }
  }
  if (Status s = call(c); !s)
    return s.takeError();
  return out;
}

Status CpuAttention::call(const AttentionCall &c) const {
  if (!c.q || !c.v || (!c.k && !fwd_.lsh))
    return makeError("attention needs q, k and v");
  if (c.D != fwd_.headDim)
    return makeError("kernel " + fwd_.name + " was compiled for head dim " +
                     std::to_string(fwd_.headDim) + ", got " + std::to_string(c.D));
  if (c.B < 1 || c.H < 1 || c.Nq < 1 || c.N < 1)
    return makeError("kernel " + fwd_.name + ": empty shape [" + std::to_string(c.B) + ", " +
                     std::to_string(c.H) + ", " + std::to_string(c.Nq) + ", " +
                     std::to_string(c.D) + "]");
  if (c.dout && !bwd_)
    return makeError("no backward kernel was compiled for " + fwd_.name);
  if (fwd_.lsh)
    return callLsh(c);
  const int B = c.B, H = c.H, Nq = c.Nq, N = c.N, D = c.D;
  const size_t bhq = size_t(B) * size_t(H) * size_t(Nq);
  // The forward runs for a forward call, and for a backward that has no
  // kept forward to read (always for low-rank: its backward needs kp, vp).
  const bool forward = !c.dout || fwd_.lowrank || !c.savedOut || !c.savedLse;
  std::vector<float> outScratch, lseScratch;
  float *out = c.out, *lse = c.lse;
  if (forward && (!out || !lse)) {
    if (!c.dout)
      return makeError("kernel " + fwd_.name + ": the forward needs out and lse");
    outScratch.assign(bhq * size_t(D), 0.f), lseScratch.assign(bhq, 0.f);
    out = outScratch.data(), lse = lseScratch.data();
  }
  const int kProj = c.kRows, Nmax = c.nmax;
  const bool perHead = fwd_.share == "none";
  std::vector<float> kp, vp; // projected keys/values, kept for the backward
  if (fwd_.lowrank) {
    if (!c.E || kProj < 1 || Nmax < N)
      return makeError("low-rank kernel " + fwd_.name +
                       " needs E [k, Nmax] with Nmax >= N = " + std::to_string(N));
    kp.assign(size_t(B) * H * kProj * D, 0.f), vp.assign(kp.size(), 0.f);
    cpu::LowRankFwdArgs a{};
    a.q = c.q, a.k = c.k, a.v = c.v;
    a.E = c.E, a.F = c.F ? c.F : c.E;
    a.kp = kp.data(), a.vp = vp.data(), a.out = out, a.lse = lse;
    a.lengths = c.lengths, a.params = c.params;
    a.B = B, a.H = H, a.Nq = Nq, a.N = N, a.Nmax = Nmax, a.kProj = kProj;
    a.perHead = perHead, a.scale = fwd_.scale;
    if (c.dropout) // over the projected keys
      a.dropout = fwd_.dropout, a.dropout_seed = c.dropoutSeed, a.dropout_offset = c.dropoutOffset;
    if (int rc = reinterpret_cast<int (*)(const cpu::LowRankFwdArgs *)>(fwdFn_)(&a))
      return makeError("kernel " + fwd_.name + " failed: " + kernelError(rc));
  } else if (forward) {
    AttnFwdArgs a{};
    a.q = c.q, a.k = c.k, a.v = c.v;
    a.out = out, a.lse = lse;
    a.lengths = c.lengths, a.params = c.params;
    a.B = B, a.H = H, a.Nq = Nq, a.Nk = N, a.scale = fwd_.scale;
    if (c.dropout) // training: the kernels' attention dropout
      a.dropout = fwd_.dropout, a.dropout_seed = c.dropoutSeed, a.dropout_offset = c.dropoutOffset;
    if (int rc = reinterpret_cast<int (*)(const AttnFwdArgs *)>(fwdFn_)(&a))
      return makeError("kernel " + fwd_.name + " failed: " + kernelError(rc));
  }
  if (!c.dout)
    return {};
  if (!c.dq || !c.dk || !c.dv)
    return makeError("the backward of " + fwd_.name + " needs dq, dk and dv");
  const float *fwdOut = forward ? out : c.savedOut, *fwdLse = forward ? lse : c.savedLse;
  const int P = bwd_->numParams;
  std::vector<float> delta(bhq);
  std::vector<float> partial(
      std::max<size_t>(1, cpu::bwd_workspace_floats(B, H, Nq, bwd_->blockQ, P)));
  std::vector<float> dparamsScratch;
  float *dparams = c.dparams;
  if (P && !dparams) { // not wanted, but the kernels write them
    dparamsScratch.assign(size_t(P) * size_t(H), 0.f);
    dparams = dparamsScratch.data();
  }
  if (bwd_->lowrank) {
    if (!c.dE)
      return makeError("the backward of " + fwd_.name + " needs dE");
    std::vector<float> dkp(kp.size(), 0.f), dvp(kp.size(), 0.f);
    cpu::LowRankBwdArgs g{};
    g.q = c.q, g.k = c.k, g.v = c.v;
    g.E = c.E, g.F = c.F ? c.F : c.E;
    g.kp = kp.data(), g.vp = vp.data();
    g.out = fwdOut, g.dout = c.dout, g.lse = fwdLse;
    g.lengths = c.lengths, g.params = c.params;
    g.delta = delta.data(), g.dkp = dkp.data(), g.dvp = dvp.data();
    g.dq = c.dq, g.dk = c.dk, g.dv = c.dv;
    g.dE = c.dE, g.dF = c.F ? c.dF : nullptr;
    g.dparams = dparams, g.dparams_partial = P ? partial.data() : nullptr;
    g.B = B, g.H = H, g.Nq = Nq, g.N = N, g.Nmax = Nmax, g.kProj = kProj;
    g.perHead = perHead, g.scale = bwd_->scale;
    if (c.dropout) // the forward's masks, redrawn
      g.dropout = fwd_.dropout, g.dropout_seed = c.dropoutSeed, g.dropout_offset = c.dropoutOffset;
    if (int rc = reinterpret_cast<int (*)(const cpu::LowRankBwdArgs *)>(bwdFn_)(&g))
      return makeError("kernel " + bwd_->name + " failed: " + kernelError(rc));
  } else {
    AttnBwdArgs g{};
    g.q = c.q, g.k = c.k, g.v = c.v;
    g.out = fwdOut, g.dout = c.dout, g.lse = fwdLse;
    g.lengths = c.lengths, g.params = c.params, g.delta = delta.data();
    g.dq = c.dq, g.dk = c.dk, g.dv = c.dv;
    g.dparams = dparams, g.dparams_partial = P ? partial.data() : nullptr;
    g.B = B, g.H = H, g.Nq = Nq, g.Nk = N, g.scale = bwd_->scale;
    if (c.dropout) // the forward's masks, redrawn
      g.dropout = fwd_.dropout, g.dropout_seed = c.dropoutSeed, g.dropout_offset = c.dropoutOffset;
    if (int rc = reinterpret_cast<int (*)(const AttnBwdArgs *)>(bwdFn_)(&g))
      return makeError("kernel " + bwd_->name + " failed: " + kernelError(rc));
  }
  return {};
}

Status CpuAttention::callLsh(const AttentionCall &c) const {
  const KernelDesc::Lsh &l = *fwd_.lsh;
  const int B = c.B, H = c.H, N = c.Nq;
  if (!c.rotations)
    return makeError("LSH kernel " + fwd_.name + " needs rotations [" + std::to_string(l.rounds) +
                     ", " + std::to_string(c.D) + ", " + std::to_string(l.numBuckets / 2) + "]");
  const size_t bhn = size_t(B) * size_t(H) * size_t(N);
  std::vector<float> outScratch, lseScratch;
  float *out = c.out, *lse = c.lse;
  if (!out || !lse) {
    if (!c.dout)
      return makeError("kernel " + fwd_.name + ": the forward needs out and lse");
    outScratch.assign(bhn * size_t(c.D), 0.f), lseScratch.assign(bhn, 0.f);
    out = outScratch.data(), lse = lseScratch.data();
  }
  // Each round's lse: written by the forward, read by the backward (which
  // weights the rounds from them rather than from the rounded combined lse).
  std::vector<float> roundLse(bhn * size_t(l.rounds));
  AttnLshArgs a{};
  a.q = c.q, a.v = c.v;
  a.out = out, a.lse = lse;
  a.round_lse = roundLse.data();
  a.lengths = c.lengths;
  a.params = c.params, a.rotations = c.rotations;
  a.B = B, a.H = H, a.N = N, a.rounds = l.rounds, a.num_buckets = l.numBuckets;
  a.scale = fwd_.scale;
  if (c.dropout) // training: per round, the backward redraws the masks
    a.dropout = fwd_.dropout, a.dropout_seed = c.dropoutSeed, a.dropout_offset = c.dropoutOffset;
  using Entry = int (*)(const AttnLshArgs *);
  if (int rc = reinterpret_cast<Entry>(fwdFn_)(&a))
    return makeError("kernel " + fwd_.name + " failed: " + kernelError(rc));
  if (!c.dout)
    return {};
  if (!bwd_->lsh)
    return makeError("no LSH backward kernel was compiled for " + fwd_.name);
  if (!c.dq || !c.dv)
    return makeError("the backward of " + fwd_.name + " needs dq and dv");
  a.dout = c.dout;
  a.dq = c.dq, a.dv = c.dv;
  a.scale = bwd_->scale;
  if (int rc = reinterpret_cast<Entry>(bwdFn_)(&a))
    return makeError("kernel " + bwd_->name + " failed: " + kernelError(rc));
  return {};
}

} // namespace attnc
