//===- CudaAttentionHost.cpp - CudaAttention on host tensors --------------===//
//
// run(): host f32 tensors in and out (f16/bf16 kernels get converted
// copies), with the low-rank projections on the device (key padding
// included); the LSH kernels' host entry.
//
//===----------------------------------------------------------------------===//
#include "runtime/CudaAttention.h"
#include "runtime/CudaAttentionSupport.h"

#include "runtime/CudaDriver.h"
#include "runtime/KernelHeaders.h"

#include "attnc/abi/KernelArgs.h"
#include "attnc/abi/LshTileModel.h"
#include "attnc/abi/TileModel.h"

#include <cstdlib>
#include <cstring>

namespace attnc {

using namespace cuda_attention;

Expected<AttentionOutputs> CudaAttention::run(const AttentionInputs &in) {
  Expected<DeviceScope> scope = device_->enter();
  if (!scope)
    return scope.takeError();
  if (fwd_.lsh)
    return runLsh(in);
  KernelDevice &dev = *device_;
  const auto &qs = in.q->shape;
  int B = int(qs[0]), H = int(qs[1]), Nq = int(qs[2]), Nk = int(in.k->shape[2]), D = int(qs[3]);
  if (D != fwd_.headDim)
    return makeError("kernel " + fwd_.name + " was compiled for head dim " +
                     std::to_string(fwd_.headDim) + ", got " + std::to_string(D));
  const int *lengths =
      in.lengths ? reinterpret_cast<const int *>(in.lengths->data.data()) : nullptr;
  // Low-rank: the projections run on the device too (attendF32OnDevice;
  // the kernels' times include them).
  if (fwd_.lowrank)
    return runLowRankOnDevice(in);
  const size_t nq = size_t(B) * H * Nq * D, nk = size_t(B) * H * Nk * D, eb = elemBytes(dtype_);
  auto hq = toDevice(f32(in.q), nq, dtype_), hk = toDevice(f32(in.k), nk, dtype_),
       hv = toDevice(f32(in.v), nk, dtype_);
  Expected<DeviceArray> dq = deviceArray(dev, hq.size(), "q", hq.data()),
                        dk = deviceArray(dev, hk.size(), "k", hk.data()),
                        dv = deviceArray(dev, hv.size(), "v", hv.data()),
                        dOut = deviceArray(dev, nq * eb, "out"),
                        dLse = deviceArray(dev, size_t(B) * H * Nq * 4, "lse");
  for (auto *b : {&dq, &dk, &dv, &dOut, &dLse})
    if (!*b)
      return b->takeError();
  std::optional<DeviceArray> dLen, dParams;
  if (Status s = uploadOptional(dev, lengths, size_t(B) * 4, "lengths", dLen); !s)
    return s.takeError();
  if (Status s = uploadOptional(dev, in.params, "params", dParams); !s)
    return s.takeError();
  DeviceAttentionArgs x;
  x.q = view("q", *dq, {B, H, Nq, D}, dtype_), x.k = view("k", *dk, {B, H, Nk, D}, dtype_);
  x.v = view("v", *dv, {B, H, Nk, D}, dtype_), x.out = view("out", *dOut, {B, H, Nq, D}, dtype_);
  x.lse = view("lse", *dLse, {B, H, Nq}, "f32");
  x.lengths = dLen ? dLen->as<int>() : nullptr;
  x.params = dParams ? dParams->as<float>() : nullptr;
  x.dropout = in.dropout, x.dropoutSeed = in.dropoutSeed, x.dropoutOffset = in.dropoutOffset;
  (void)module_->mark(0);
  if (Status s = forwardOnDevice(x); !s)
    return s.takeError();
  (void)module_->mark(1);
  if (Status s = waitAndTime(0, 1, fwd_.name, forwardMs_); !s)
    return s.takeError();

  Expected<AttentionOutputs> forward = downloadForward(dev, *dOut, *dLse, B, H, Nq, D, dtype_);
  if (!forward)
    return forward.takeError();
  AttentionOutputs out = std::move(*forward);
  if (!in.dout)
    return out;
  if (!bwd_)
    return makeError("no backward kernel was compiled for " + fwd_.name);

  // Backward: preprocess (delta), dK/dV, dQ, dparams (P > 0).
  const int P = bwd_->numParams;
  auto hdo = toDevice(f32(in.dout), nq, dtype_);
  Expected<DeviceArray> dDo = deviceArray(dev, hdo.size(), "dout", hdo.data()),
                        dDq = deviceArray(dev, nq * eb, "dq"),
                        dDk = deviceArray(dev, nk * eb, "dk"),
                        dDv = deviceArray(dev, nk * eb, "dv"),
                        dDparams = deviceArray(dev, size_t(std::max(P, 1)) * H * 4, "dparams");
  for (auto *b : {&dDo, &dDq, &dDk, &dDv, &dDparams})
    if (!*b)
      return b->takeError();
  x.dout = view("dout", *dDo, {B, H, Nq, D}, dtype_);
  x.dq = view("dq", *dDq, {B, H, Nq, D}, dtype_), x.dk = view("dk", *dDk, {B, H, Nk, D}, dtype_);
  x.dv = view("dv", *dDv, {B, H, Nk, D}, dtype_);
  x.dparams = P ? dDparams->as<float>() : nullptr;
  (void)module_->mark(1); // the backward's time starts here, not at the forward's end
  if (Status s = backwardOnDevice(x); !s)
    return s.takeError();
  (void)module_->mark(2);
  if (Status s = waitAndTime(1, 2, bwd_->name, backwardMs_); !s)
    return s.takeError();

  Expected<std::vector<float>> gq = download(dev, *dDq, nq, dtype_),
                               gk = download(dev, *dDk, nk, dtype_),
                               gv = download(dev, *dDv, nk, dtype_);
  if (!gq || !gk || !gv)
    return makeError(!gq ? gq.error() : !gk ? gk.error() : gv.error());
  out.dq = st::Tensor::f32(qs, *gq);
  if (P) {
    Expected<std::vector<float>> gp = download(dev, *dDparams, size_t(P) * H, "f32");
    if (!gp)
      return gp.takeError();
    out.dparams = st::Tensor::f32({P, H}, *gp);
  }
  if (fwd_.sharedQk) { // dk is folded into dq
    out.dv = st::Tensor::f32(in.v->shape, *gv);
    return out;
  }
  out.dk = st::Tensor::f32(in.k->shape, *gk);
  out.dv = st::Tensor::f32(in.v->shape, *gv);
  return out;
}

Expected<AttentionOutputs> CudaAttention::runLowRankOnDevice(const AttentionInputs &in) {
  KernelDevice &dev = *device_;
  const auto &qs = in.q->shape;
  const int64_t B = qs[0], H = qs[1], N = qs[2], D = qs[3], Nk = in.k->shape[2];
  const std::vector<int64_t> s4{B, H, N, D}, s3{B, H, N}, k4{B, H, Nk, D};
  const size_t n4 = size_t(B * H * N * D) * 4, k4b = size_t(B * H * Nk * D) * 4,
               n3 = size_t(B * H * N) * 4;
  if (!in.E || in.E->shape.size() < 2 || in.E->shape[in.E->shape.size() - 2] != fwd_.lowrankK)
    return makeError("low-rank kernel " + fwd_.name + " needs its projection E with " +
                     std::to_string(fwd_.lowrankK) + " rows");
  if (in.F && in.F->shape != in.E->shape)
    return makeError("low-rank kernel " + fwd_.name + ": F's shape differs from E's");
  Expected<DeviceArray> dq = deviceArray(dev, n4, "q", f32(in.q)),
                        dk = deviceArray(dev, k4b, "k", f32(in.k)),
                        dv = deviceArray(dev, k4b, "v", f32(in.v)),
                        dOut = deviceArray(dev, n4, "out"), dLse = deviceArray(dev, n3, "lse"),
                        dE = deviceArray(dev, in.E->data.size(), "E", in.E->data.data());
  for (auto *b : {&dq, &dk, &dv, &dOut, &dLse, &dE})
    if (!*b)
      return b->takeError();
  std::optional<DeviceArray> dF, dParams, dLen;
  if (Status s = uploadOptional(dev, in.F, "F", dF); !s)
    return s.takeError();
  if (Status s = uploadOptional(dev, in.params, "params", dParams); !s)
    return s.takeError();
  if (Status s = uploadOptional(dev, in.lengths ? in.lengths->data.data() : nullptr, size_t(B) * 4,
                                "lengths", dLen);
      !s)
    return s.takeError();
  DeviceAttentionArgs x;
  x.q = view("q", *dq, s4, "f32"), x.k = view("k", *dk, k4, "f32");
  x.v = view("v", *dv, k4, "f32"), x.out = view("out", *dOut, s4, "f32");
  x.lse = view("lse", *dLse, s3, "f32");
  x.lengths = dLen ? dLen->as<int>() : nullptr;
  x.E = dE->as<float>(), x.F = dF ? dF->as<float>() : nullptr;
  x.eColumns = in.E->shape.back();
  x.params = dParams ? dParams->as<float>() : nullptr;
  x.dropout = in.dropout, x.dropoutSeed = in.dropoutSeed, x.dropoutOffset = in.dropoutOffset;
  (void)module_->mark(0);
  if (Status s = attendF32OnDevice(x, false); !s)
    return s.takeError();
  (void)module_->mark(1);
  if (Status s = waitAndTime(0, 1, fwd_.name, forwardMs_); !s)
    return s.takeError();
  Expected<AttentionOutputs> forward = downloadForward(dev, *dOut, *dLse, B, H, N, D, "f32");
  if (!forward)
    return forward.takeError();
  AttentionOutputs out = std::move(*forward);
  if (!in.dout)
    return out;
  if (!bwd_)
    return makeError("no backward kernel was compiled for " + fwd_.name);
  const int P = bwd_->numParams;
  Expected<DeviceArray> dDo = deviceArray(dev, n4, "dout", f32(in.dout)),
                        gq = deviceArray(dev, n4, "dq"), gk = deviceArray(dev, k4b, "dk"),
                        gv = deviceArray(dev, k4b, "dv"),
                        gE = deviceArray(dev, in.E->data.size(), "dE"),
                        gF = deviceArray(dev, in.F ? in.F->data.size() : 16, "dF"),
                        gP = deviceArray(dev, size_t(std::max(P, 1) * H) * 4, "dparams");
  for (auto *b : {&dDo, &gq, &gk, &gv, &gE, &gF, &gP})
    if (!*b)
      return b->takeError();
  x.dout = view("dout", *dDo, s4, "f32"), x.dq = view("dq", *gq, s4, "f32");
  x.dk = view("dk", *gk, k4, "f32"), x.dv = view("dv", *gv, k4, "f32");
  x.dE = gE->as<float>(), x.dF = in.F ? gF->as<float>() : nullptr;
  x.dparams = P ? gP->as<float>() : nullptr;
  (void)module_->mark(1);
  if (Status s = attendF32OnDevice(x, true); !s)
    return s.takeError();
  (void)module_->mark(2);
  if (Status s = waitAndTime(1, 2, bwd_->name, backwardMs_); !s)
    return s.takeError();
  auto fetch = [&](const DeviceArray &a, size_t n, std::vector<int64_t> shape,
                   std::optional<st::Tensor> &to) -> Status {
    Expected<std::vector<float>> h = download(dev, a, n, "f32");
    if (!h)
      return h.takeError();
    to = st::Tensor::f32(std::move(shape), *h);
    return {};
  };
  for (Status s :
       {fetch(*gq, n4 / 4, in.q->shape, out.dq), fetch(*gk, k4b / 4, in.k->shape, out.dk),
        fetch(*gv, k4b / 4, in.v->shape, out.dv),
        fetch(*gE, in.E->data.size() / 4, in.E->shape, out.dE)})
    if (!s)
      return s.takeError();
  if (in.F)
    if (Status s = fetch(*gF, in.F->data.size() / 4, in.F->shape, out.dF); !s)
      return s.takeError();
  if (P)
    if (Status s = fetch(*gP, size_t(P * H), {P, H}, out.dparams); !s)
      return s.takeError();
  return out;
}

Expected<AttentionOutputs> CudaAttention::runLsh(const AttentionInputs &in) {
  KernelDevice &dev = *device_;
  const KernelDesc::Lsh &l = *fwd_.lsh;
  const auto &qs = in.q->shape;
  const int B = int(qs[0]), H = int(qs[1]), N = int(qs[2]), D = int(qs[3]), R = l.rounds;
  if (!in.rotations || in.rotations->shape != std::vector<int64_t>{R, D, l.numBuckets / 2})
    return makeError("LSH kernel " + fwd_.name + " needs rotations [" + std::to_string(R) + ", " +
                     std::to_string(D) + ", " + std::to_string(l.numBuckets / 2) + "]");
  const size_t nqd = size_t(B) * H * N * D, eb = elemBytes(dtype_);
  auto hq = toDevice(f32(in.q), nqd, dtype_), hv = toDevice(f32(in.v), nqd, dtype_);
  const st::Tensor *rot = in.rotations;
  Expected<DeviceArray> dQ = deviceArray(dev, hq.size(), "q", hq.data()),
                        dV = deviceArray(dev, hv.size(), "v", hv.data()),
                        dRot = deviceArray(dev, rot->data.size(), "rotations", rot->data.data()),
                        dOut = deviceArray(dev, nqd * eb, "out"),
                        dLse = deviceArray(dev, size_t(B) * H * N * 4, "lse");
  for (auto *b : {&dQ, &dV, &dRot, &dOut, &dLse})
    if (!*b)
      return b->takeError();
  std::optional<DeviceArray> dLen, dParams, dDo, dDq, dDv;
  if (Status s = uploadOptional(dev, in.lengths ? in.lengths->data.data() : nullptr, size_t(B) * 4,
                                "lengths", dLen);
      !s)
    return s.takeError();
  if (Status s = uploadOptional(dev, in.params, "params", dParams); !s)
    return s.takeError();
  DeviceAttentionArgs x;
  x.q = view("q", *dQ, {B, H, N, D}, dtype_), x.v = view("v", *dV, {B, H, N, D}, dtype_);
  x.out = view("out", *dOut, {B, H, N, D}, dtype_), x.lse = view("lse", *dLse, {B, H, N}, "f32");
  x.lengths = dLen ? dLen->as<int>() : nullptr;
  x.params = dParams ? dParams->as<float>() : nullptr;
  x.rotations = dRot->as<float>();
  x.dropout = in.dropout, x.dropoutSeed = in.dropoutSeed, x.dropoutOffset = in.dropoutOffset;
  if (in.dout) {
    if (!bwd_ || !bwd_->lsh)
      return makeError("no LSH backward kernel was compiled for " + fwd_.name);
    auto hdo = toDevice(f32(in.dout), nqd, dtype_);
    Expected<DeviceArray> a = deviceArray(dev, hdo.size(), "dout", hdo.data()),
                          q = deviceArray(dev, nqd * eb, "dq"),
                          v = deviceArray(dev, nqd * eb, "dv");
    for (auto *b : {&a, &q, &v})
      if (!*b)
        return b->takeError();
    dDo.emplace(std::move(*a)), dDq.emplace(std::move(*q)), dDv.emplace(std::move(*v));
    x.dout = view("dout", *dDo, {B, H, N, D}, dtype_);
    x.dq = view("dq", *dDq, {B, H, N, D}, dtype_), x.dv = view("dv", *dDv, {B, H, N, D}, dtype_);
  }
  if (Status s = lshOnDevice(x, in.dout != nullptr); !s)
    return s.takeError();
  if (Status s = dev.synchronize(); !s)
    return makeError("LSH kernel " + fwd_.name + ": " + s.error());
  if (Expected<float> ms = module_->elapsedMs(3, 4))
    forwardMs_ = *ms;
  if (in.dout)
    if (Expected<float> ms = module_->elapsedMs(4, 5))
      backwardMs_ = *ms;
  Expected<AttentionOutputs> forward = downloadForward(dev, *dOut, *dLse, B, H, N, D, dtype_);
  if (!forward)
    return forward.takeError();
  AttentionOutputs out = std::move(*forward);
  if (!in.dout)
    return out;
  Expected<std::vector<float>> gq = download(dev, *dDq, nqd, dtype_),
                               gv = download(dev, *dDv, nqd, dtype_);
  if (!gq || !gv)
    return makeError(!gq ? gq.error() : gv.error());
  out.dq = st::Tensor::f32(qs, *gq);
  out.dv = st::Tensor::f32(in.v->shape, *gv);
  return out;
}

} // namespace attnc
