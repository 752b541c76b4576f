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
  int B = int(qs[0]), H = int(qs[1]), Nq = int(qs[2]), N = int(ks[2]), D = int(qs[3]);
  const int *lengths =
      in.lengths ? reinterpret_cast<const int *>(in.lengths->data.data()) : nullptr;
  AttentionOutputs out;
  out.out = zeros({B, H, Nq, D});
  out.lse = zeros({B, H, Nq});

  if (fwd_.lsh)
    return runLsh(in, std::move(out));

  int kProj = 0, Nmax = 0;
  bool perHead = fwd_.share == "none";
  st::Tensor kp, vp; // projected keys/values, kept for the backward
  if (fwd_.lowrank) {
    if (!in.E)
      return makeError("low-rank kernel " + fwd_.name + " needs E");
    kProj = int(in.E->shape[in.E->shape.size() - 2]);
    Nmax = int(in.E->shape.back());
    kp = zeros({B, H, kProj, D});
    vp = zeros({B, H, kProj, D});
    cpu::LowRankFwdArgs a{};
    a.q = f32(in.q), a.k = f32(in.k), a.v = f32(in.v);
    a.E = f32(in.E), a.F = in.F ? f32(in.F) : f32(in.E);
    a.kp = f32(kp), a.vp = f32(vp), a.out = f32(out.out), a.lse = f32(out.lse);
    a.lengths = lengths, a.params = f32(in.params);
    a.B = B, a.H = H, a.Nq = Nq, a.N = N, a.Nmax = Nmax, a.kProj = kProj;
    a.perHead = perHead, a.scale = fwd_.scale;
    if (in.dropout) // over the projected keys
      a.dropout = fwd_.dropout, a.dropout_seed = in.dropoutSeed,
      a.dropout_offset = in.dropoutOffset;
    if (int rc = reinterpret_cast<int (*)(const cpu::LowRankFwdArgs *)>(fwdFn_)(&a))
      return makeError("kernel " + fwd_.name + " failed: " + kernelError(rc));
  } else if (in.dout && in.forwardOut && in.forwardLse) {
    // The caller kept the forward: the backward reads it as is.
    if (in.forwardOut->shape != out.out.shape || in.forwardLse->shape != out.lse.shape)
      return makeError("kernel " + fwd_.name + ": the kept forward results are " +
                       in.forwardOut->shapeStr() + " and " + in.forwardLse->shapeStr() +
                       "; expected " + out.out.shapeStr() + " and " + out.lse.shapeStr());
    out.out = *in.forwardOut;
    out.lse = *in.forwardLse;
  } else {
    AttnFwdArgs a{};
    a.q = f32(in.q), a.k = f32(in.k), a.v = f32(in.v);
    a.out = f32(out.out), a.lse = f32(out.lse);
    a.lengths = lengths, a.params = f32(in.params);
    a.B = B, a.H = H, a.Nq = Nq, a.Nk = N, a.scale = fwd_.scale;
    if (in.dropout) // training: the kernels' attention dropout
      a.dropout = fwd_.dropout, a.dropout_seed = in.dropoutSeed,
      a.dropout_offset = in.dropoutOffset;
    if (int rc = reinterpret_cast<int (*)(const AttnFwdArgs *)>(fwdFn_)(&a))
      return makeError("kernel " + fwd_.name + " failed: " + kernelError(rc));
  }
  if (!in.dout)
    return out;
  if (!bwd_)
    return makeError("no backward kernel was compiled for " + fwd_.name);

  const int P = bwd_->numParams;
  out.dq = zeros(qs);
  out.dk = zeros(ks);
  out.dv = zeros(in.v->shape);
  std::vector<float> delta(size_t(B) * H * Nq);
  std::vector<float> partial(
      std::max<size_t>(1, cpu::bwd_workspace_floats(B, H, Nq, bwd_->blockQ, P)));
  if (P)
    out.dparams = zeros({P, H});
  float *dparams = out.dparams ? f32(*out.dparams) : nullptr;
  if (bwd_->lowrank) {
    out.dE = zeros(in.E->shape);
    if (in.F)
      out.dF = zeros(in.F->shape);
    st::Tensor dkp = zeros({B, H, kProj, D}), dvp = zeros({B, H, kProj, D});
    cpu::LowRankBwdArgs g{};
    g.q = f32(in.q), g.k = f32(in.k), g.v = f32(in.v);
    g.E = f32(in.E), g.F = in.F ? f32(in.F) : f32(in.E);
    g.kp = f32(kp), g.vp = f32(vp);
    g.out = f32(out.out), g.dout = f32(in.dout), g.lse = f32(out.lse);
    g.lengths = lengths, g.params = f32(in.params);
    g.delta = delta.data(), g.dkp = f32(dkp), g.dvp = f32(dvp);
    g.dq = f32(*out.dq), g.dk = f32(*out.dk), g.dv = f32(*out.dv);
    g.dE = f32(*out.dE), g.dF = out.dF ? f32(*out.dF) : nullptr;
    g.dparams = dparams, g.dparams_partial = P ? partial.data() : nullptr;
    g.B = B, g.H = H, g.Nq = Nq, g.N = N, g.Nmax = Nmax, g.kProj = kProj;
    g.perHead = perHead, g.scale = bwd_->scale;
    if (in.dropout) // the forward's masks, redrawn
      g.dropout = fwd_.dropout, g.dropout_seed = in.dropoutSeed,
      g.dropout_offset = in.dropoutOffset;
    if (int rc = reinterpret_cast<int (*)(const cpu::LowRankBwdArgs *)>(bwdFn_)(&g))
      return makeError("kernel " + bwd_->name + " failed: " + kernelError(rc));
  } else {
    AttnBwdArgs g{};
    g.q = f32(in.q), g.k = f32(in.k), g.v = f32(in.v);
    g.out = f32(out.out), g.dout = f32(in.dout), g.lse = f32(out.lse);
    g.lengths = lengths, g.params = f32(in.params), g.delta = delta.data();
    g.dq = f32(*out.dq), g.dk = f32(*out.dk), g.dv = f32(*out.dv);
    g.dparams = dparams, g.dparams_partial = P ? partial.data() : nullptr;
    g.B = B, g.H = H, g.Nq = Nq, g.Nk = N, g.scale = bwd_->scale;
    if (in.dropout) // the forward's masks, redrawn
      g.dropout = fwd_.dropout, g.dropout_seed = in.dropoutSeed,
      g.dropout_offset = in.dropoutOffset;
    if (int rc = reinterpret_cast<int (*)(const AttnBwdArgs *)>(bwdFn_)(&g))
      return makeError("kernel " + bwd_->name + " failed: " + kernelError(rc));
  }
  return out;
}

Expected<AttentionOutputs> CpuAttention::runLsh(const AttentionInputs &in,
                                                AttentionOutputs out) const {
  const KernelDesc::Lsh &l = *fwd_.lsh;
  const auto &qs = in.q->shape;
  int B = int(qs[0]), H = int(qs[1]), N = int(qs[2]), D = int(qs[3]);
  if (!in.rotations || in.rotations->shape != std::vector<int64_t>{l.rounds, D, l.numBuckets / 2})
    return makeError("LSH kernel " + fwd_.name + " needs rotations [" + std::to_string(l.rounds) +
                     ", " + std::to_string(D) + ", " + std::to_string(l.numBuckets / 2) + "]");
  // Each round's lse: written by the forward, read by the backward (which
  // weights the rounds from them rather than from the rounded combined lse).
  std::vector<float> roundLse(size_t(B) * H * l.rounds * N);
  AttnLshArgs a{};
  a.q = f32(in.q), a.v = f32(in.v);
  a.out = f32(out.out), a.lse = f32(out.lse);
  a.round_lse = roundLse.data();
  a.lengths = in.lengths ? reinterpret_cast<const int *>(in.lengths->data.data()) : nullptr;
  a.params = f32(in.params), a.rotations = f32(in.rotations);
  a.B = B, a.H = H, a.N = N, a.rounds = l.rounds, a.num_buckets = l.numBuckets;
  a.scale = fwd_.scale;
  if (in.dropout) // training: per round, the backward redraws the masks
    a.dropout = fwd_.dropout, a.dropout_seed = in.dropoutSeed, a.dropout_offset = in.dropoutOffset;
  using Entry = int (*)(const AttnLshArgs *);
  if (int rc = reinterpret_cast<Entry>(fwdFn_)(&a))
    return makeError("kernel " + fwd_.name + " failed: " + kernelError(rc));
  if (!in.dout)
    return out;
  if (!bwd_ || !bwd_->lsh)
    return makeError("no LSH backward kernel was compiled for " + fwd_.name);
  out.dq = zeros(qs);
  out.dv = zeros(in.v->shape);
  a.dout = f32(in.dout);
  a.dq = f32(*out.dq), a.dv = f32(*out.dv);
  a.scale = bwd_->scale;
  if (int rc = reinterpret_cast<Entry>(bwdFn_)(&a))
    return makeError("kernel " + bwd_->name + " failed: " + kernelError(rc));
  return out;
}

} // namespace attnc
