//===- CudaAttentionStep.cpp - CudaAttention on a training step's buffers -===//
//
// attendF32OnDevice(): a training step's f32 device buffers, any kind and
// dtype: conversions and low-rank projections run as device kernels
// (attnc/device_support.cuh) around the device entries.
//
//===----------------------------------------------------------------------===//
#include "runtime/CudaAttention.h"
#include "runtime/CudaAttentionSupport.h"

#include "runtime/CudaDriver.h"
#include "runtime/KernelHeaders.h"

#include "attnc/abi/KernelArgs.h"
#include "attnc/abi/LshTileModel.h"
#include "attnc/abi/ProjectionTileModel.h"
#include "attnc/abi/TileModel.h"

#include <cstdlib>
#include <cstring>

namespace attnc {

using namespace cuda_attention;

namespace {

/// The module's entry points: each strided_gemm_mma per dtype and layout.
std::vector<std::string> supportEntries() {
  std::vector<std::string> e = {"attnc_strided_gemm",     "attnc_strided_gemm_reduce",
                                "attnc_convert_f32_f16",  "attnc_convert_f16_f32",
                                "attnc_convert_f32_bf16", "attnc_convert_bf16_f32"};
  for (const char *dtype : {"f16", "bf16"})
    for (const char *layout : {"kk", "kn", "mk", "mn"})
      e.push_back(std::string("attnc_strided_gemm_mma_") + dtype + "_" + layout);
  return e;
}

} // namespace

//===-- A training step's f32 buffers -------------------------------------===//

Status CudaAttention::compileSupport(
    const std::function<Expected<std::unique_ptr<KernelModule>>(
        const std::string &, const std::string &, const std::vector<std::string> &)> &compile) {
  if (!fwd_.lowrank && dtype_ == "f32")
    return {}; // attendF32OnDevice calls the attention kernels alone
  Expected<std::unique_ptr<KernelModule>> m =
      compile("attnc_device_support", deviceSupportSource(), supportEntries());
  if (!m)
    return makeError("the kernels around " + fwd_.name +
                     " (attnc/device_support.cuh): " + m.error());
  support_ = std::move(*m);
  return {};
}

Status CudaAttention::launchSupport(const std::string &entry, long long blocks, int threads,
                                    const void *args, size_t argBytes) {
  if (!support_)
    return makeError("kernel " + fwd_.name +
                     ": the kernels of attnc/device_support.cuh were "
                     "not compiled");
  if (blocks < 1 || blocks > attnc::tile::kMaxGridX)
    return makeError("kernel " + entry + ": a grid of " + std::to_string(blocks) +
                     " blocks is outside CUDA's 1 to " + std::to_string(attnc::tile::kMaxGridX));
  return support_->launch(entry, blocks, threads, 0, args, argBytes);
}

Status CudaAttention::convertOnDevice(const void *in, const std::string &from, void *out,
                                      const std::string &to, int64_t n) {
  ConvertArgs c{in, out, n};
  const long long perBlock = static_cast<long long>(kConvertThreads) * kConvertPerThread;
  return launchSupport("attnc_convert_" + from + "_" + to, (n + perBlock - 1) / perBlock,
                       kConvertThreads, &c, sizeof c);
}

Status CudaAttention::projectOnDevice(StridedGemmArgs g, float *partial) {
  if (dtype_ == "f32") // fp32 SIMT, unsplit
    return launchSupport("attnc_strided_gemm", tile::simtGemmGrid(g), kStridedGemmThreads, &g,
                         sizeof g);
  // The kernels' 16-bit type on tensor cores; a split depth's parts land
  // in `partial` and are summed in order.
  if (g.splits > 1) {
    if (!partial)
      return makeError("kernel " + fwd_.name + ": no workspace for a split projection");
    g.partial = partial;
  }
  if (Status s = launchSupport("attnc_strided_gemm_mma_" + dtype_ + "_" + tile::projLayout(g),
                               tile::projGrid(g), tile::kProjThreads, &g, sizeof g);
      !s)
    return s;
  if (g.splits <= 1)
    return {};
  return launchSupport("attnc_strided_gemm_reduce", tile::projReduceGrid(g),
                       tile::kProjReduceThreads, &g, sizeof g);
}

size_t CudaAttention::denseBackwardWorkspaceBytes(int64_t B, int64_t H, int64_t Nq,
                                                  int64_t Nk) const {
  const int P = bwd_ ? bwd_->numParams : 0, blockKv = bwd_ ? bwd_->blockKv : 1;
  const long long partial =
      attnc::tile::bwd_workspace_floats(int(B), int(H), int(Nq), int(Nk), P, blockKv);
  return sizeof(float) * size_t(B * H * Nq + std::max(partial, 1LL));
}

int CudaAttention::lshHashThreads() const {
  // The fewer threads, the more tiles of positions and counts: enough for
  // the forward's and the backward's hash.
  return 32 * (bwd_ ? std::min(fwd_.warps, bwd_->warps) : fwd_.warps);
}

size_t CudaAttention::lshWorkspaceBytes(int64_t B, int64_t H, int64_t N, bool backward,
                                        bool ownOut) const {
  return lshWorkspaceParts(B, H, N, fwd_.headDim, fwd_.lsh->rounds, fwd_.lsh->chunk,
                           fwd_.lsh->numBuckets, lshHashThreads(), backward, ownOut,
                           elemBytes(dtype_))
      .back();
}

namespace {

/// The operand space of attendF32OnDevice for [B, H, N, D] with Nk keys
/// reaching the kernels: offsets of the parts (the total last).
enum F32Part {
  kPartQ,
  kPartK,
  kPartV,
  kPartOut,
  kPartDout,
  kPartDq,
  kPartDk,
  kPartDv,
  kPartKp,
  kPartVp,
  kPartDkp,
  kPartDvp,
  kPartKeys,
  kPartSplit
};
/// Shared-QK dense kernels (the LSH dense fallback) also take their keys,
/// the normalised queries, and a dK to fold into dQ from here.
std::vector<size_t> f32OperandParts(int64_t B, int64_t H, int64_t N, int64_t Nk, int64_t D,
                                    size_t elemBytes, bool converted, bool lowrank, bool sharedQk,
                                    size_t splitFloats) {
  const size_t q = size_t(B * H * N * D), k = size_t(B * H * Nk * D);
  const size_t c = converted ? elemBytes : 0, p = lowrank ? 4 : 0;
  const size_t s = sharedQk ? elemBytes : 0, dk = std::max(c, s);
  return packParts({q * c, k * c, k * c, q * c, q * c, q * c, k * dk, k * c, k * p, k * p, k * p,
                    k * p, q * s, 4 * splitFloats});
}

} // namespace

tile::LowRankShape CudaAttention::lowRankShape(int64_t B, int64_t H, int64_t Nkeys,
                                               int64_t eColumns) const {
  return {B,
          H,
          Nkeys,
          fwd_.headDim,
          fwd_.lowrankK,
          eColumns > 0 ? eColumns : fwd_.maxSeq,
          fwd_.share == "none"};
}

size_t CudaAttention::projectionSplitFloats(const tile::LowRankShape &s) const {
  if (!fwd_.lowrank || dtype_ == "f32") // the fp32 GEMM does not split
    return 0;
  long long most = tile::projPartialFloats(tile::lowRankProject(s));
  if (bwd_)
    most = std::max({most, tile::projPartialFloats(tile::lowRankProjectBack(s)),
                     tile::projPartialFloats(tile::lowRankWeightGrad(s))});
  return size_t(most);
}

Status CudaAttention::reserveF32OnDevice(int64_t B, int64_t H, int64_t N) {
  Expected<DeviceScope> scope = device_->enter();
  if (!scope)
    return scope.takeError();
  const int64_t Nk = fwd_.lowrank ? fwd_.lowrankK : N;
  const bool converted = dtype_ != "f32", sharedQk = fwd_.sharedQk && !fwd_.lsh;
  if (converted || fwd_.lowrank || sharedQk) {
    const size_t bytes =
        f32OperandParts(B, H, N, Nk, fwd_.headDim, elemBytes(dtype_), converted, fwd_.lowrank,
                        sharedQk, projectionSplitFloats(lowRankShape(B, H, N, 0)))
            .back();
    if (Expected<char *> o = kept(operands_, bytes, "the attention's converted operands"); !o)
      return o.takeError();
  }
  const size_t w = fwd_.lsh ? lshWorkspaceBytes(B, H, N, bwd_.has_value(), true)
                            : (bwd_ ? denseBackwardWorkspaceBytes(B, H, N, Nk) : size_t(0));
  if (w)
    if (Expected<char *> ws = workspace(w); !ws)
      return ws.takeError();
  return {};
}

Status CudaAttention::attendF32OnDevice(const DeviceAttentionArgs &x, bool backward) {
  const std::string &name = fwd_.name;
  if (backward && !bwd_)
    return makeError("no backward kernel was compiled for " + name);
  Expected<DeviceScope> scope = device_->enter();
  if (!scope)
    return scope.takeError();
  if (x.q.shape.size() != 4)
    return makeError("kernel " + name + ": q must be [B, H, N, D], got " + shapeStr(x.q.shape));
  const int64_t B = x.q.shape[0], H = x.q.shape[1], N = x.q.shape[2], D = x.q.shape[3];
  if (D != fwd_.headDim)
    return makeError("kernel " + name + " was compiled for head dim " +
                     std::to_string(fwd_.headDim) + ", got " + std::to_string(D));
  const bool lsh = fwd_.lsh.has_value(), lowrank = fwd_.lowrank;
  const bool sharedQk = fwd_.sharedQk && !lsh; // the LSH dense fallback
  // Keys: their own length (cross attention), or the queries' (LSH and
  // the shared-QK fallback, whose keys are the queries).
  const bool ownKeys = !lsh && !sharedQk;
  if (ownKeys && x.k.shape.size() != 4)
    return makeError("kernel " + name + ": k must be [B, H, N, D], got " + shapeStr(x.k.shape));
  const int64_t Nkeys = ownKeys ? x.k.shape[2] : N;
  const std::vector<int64_t> s4{B, H, N, D}, s3{B, H, N}, keys4{B, H, Nkeys, D};
  // The step's operands, all f32. Shared-QK keys are the queries (their dk
  // is folded into dq, and dk, when given, is zeroed); LSH's backward may
  // leave out and lse to the kernels' workspace.
  std::vector<const DeviceTensor *> operands = {&x.q, &x.v};
  if (!lsh && !sharedQk)
    operands.push_back(&x.k);
  const bool withOut = !(lsh && backward && !x.out.data);
  if (withOut)
    operands.push_back(&x.out);
  if (backward) {
    operands.insert(operands.end(), {&x.dout, &x.dq, &x.dv});
    if (!lsh && !sharedQk)
      operands.push_back(&x.dk);
  }
  for (const DeviceTensor *t : operands) {
    const bool key = t == &x.k || t == &x.v || t == &x.dk || t == &x.dv;
    if (Status s = checkDeviceOperand(*t, name, "f32", key ? keys4 : s4, true); !s)
      return s;
  }
  if (withOut)
    if (Status s = checkDeviceOperand(x.lse, name, "f32", s3, false); !s)
      return s;
  const int64_t K = fwd_.lowrankK, Nmax = x.eColumns > 0 ? x.eColumns : fwd_.maxSeq;
  if (lowrank) {
    if (!x.E)
      return makeError("low-rank kernel " + name + ": no projection E");
    if (K < 1 || Nkeys > Nmax)
      return makeError("low-rank kernel " + name + ": E is [" + std::to_string(K) + ", " +
                       std::to_string(Nmax) + "], which cannot project " + std::to_string(Nkeys) +
                       " keys");
    if (backward && !x.dE)
      return makeError("low-rank kernel " + name + ": no buffer for the gradient of E");
  }
  const int64_t Nk = lowrank ? K : Nkeys; // the keys the kernels see
  const bool converted = dtype_ != "f32";
  const tile::LowRankShape shape = lowRankShape(B, H, Nkeys, Nmax);
  const std::vector<size_t> at = f32OperandParts(B, H, N, Nk, D, elemBytes(dtype_), converted,
                                                 lowrank, sharedQk, projectionSplitFloats(shape));
  char *space = nullptr;
  if (converted || lowrank || sharedQk) {
    Expected<char *> o = kept(operands_, at.back(), "the attention's converted operands");
    if (!o)
      return o.takeError();
    space = *o;
  }
  auto part = [&](F32Part p) { return static_cast<void *>(space + at[p]); };
  const std::vector<int64_t> k4{B, H, Nk, D};
  auto f32View = [](const char *n, const void *p, std::vector<int64_t> shape) {
    return DeviceTensor{n, const_cast<void *>(p), std::move(shape), {}, "f32"};
  };

  // Low-rank: K' = E·K, V' = F·V (F = E when shared), [B, H, K, D], f32,
  // with keys at or past a row's length left out. The kernels then attend
  // over all K projected keys: no lengths reach them.
  const float *F = x.F ? x.F : x.E;
  float *split = lowrank ? static_cast<float *>(part(kPartSplit)) : nullptr;
  auto projection = [&](const float *e, const void *in, void *out) {
    StridedGemmArgs g = tile::lowRankProject(shape);
    g.a = e, g.b = static_cast<const float *>(in), g.c = static_cast<float *>(out);
    g.seq_lengths = x.lengths;
    return projectOnDevice(g, split);
  };
  const void *k32 = x.k.data, *v32 = x.v.data;
  if (lowrank) {
    if (Status s = projection(x.E, x.k.data, part(kPartKp)); !s)
      return s;
    if (Status s = projection(F, x.v.data, part(kPartVp)); !s)
      return s;
    k32 = part(kPartKp), v32 = part(kPartVp);
  }

  // The kernels' operands: the f32 ones, or converted copies.
  DeviceAttentionArgs y = x;
  if (lowrank)
    y.lengths = nullptr;
  auto input = [&](const char *n, const void *f32, F32Part p, std::vector<int64_t> shape,
                   DeviceTensor &view) -> Status {
    if (!converted) {
      view = f32View(n, f32, std::move(shape));
      return {};
    }
    const int64_t count = shape[0] * shape[1] * shape[2] * shape[3];
    view = DeviceTensor{n, part(p), std::move(shape), {}, dtype_};
    return convertOnDevice(f32, "f32", part(p), dtype_, count);
  };
  auto output = [&](const char *n, void *f32, F32Part p, std::vector<int64_t> shape,
                    DeviceTensor &view) {
    view = converted ? DeviceTensor{n, part(p), std::move(shape), {}, dtype_}
                     : f32View(n, f32, std::move(shape));
  };
  auto back = [&](const DeviceTensor &view, void *f32) -> Status {
    if (!converted)
      return {};
    const int64_t count = view.shape[0] * view.shape[1] * view.shape[2] * view.shape[3];
    return convertOnDevice(view.data, dtype_, f32, "f32", count);
  };
  for (Status s :
       {input("q", x.q.data, kPartQ, s4, y.q), input("v", v32, kPartV, lsh ? s4 : k4, y.v)})
    if (!s)
      return s;
  if (sharedQk) // the forward normalises q into them, the backward below
    y.k = DeviceTensor{"keys", part(kPartKeys), s4, {}, dtype_};
  else if (!lsh)
    if (Status s = input("k", k32, kPartK, k4, y.k); !s)
      return s;

  if (!backward) {
    output("out", x.out.data, kPartOut, s4, y.out);
    if (Status s = lsh ? lshOnDevice(y, false) : forwardOnDevice(y); !s)
      return s;
    return back(y.out, x.out.data);
  }

  // Backward: dout (and the forward's out) in, dq, dk', dv' out.
  if (Status s = input("dout", x.dout.data, kPartDout, s4, y.dout); !s)
    return s;
  if (withOut)
    if (Status s = input("out", x.out.data, kPartOut, s4, y.out); !s)
      return s;
  void *dk32 = lowrank ? part(kPartDkp) : x.dk.data, *dv32 = lowrank ? part(kPartDvp) : x.dv.data;
  output("dq", x.dq.data, kPartDq, s4, y.dq);
  output("dv", dv32, kPartDv, lsh ? s4 : k4, y.dv);
  if (sharedQk) { // dK lands in scratch and is folded into dQ
    y.dk = DeviceTensor{"dk", part(kPartDk), s4, {}, dtype_};
    const long long rows = B * H * N;
    SharedQkArgs n{y.q.data, nullptr, y.k.data, rows};
    if (Status s = launch(bwd_->entryPoints[0], (rows + bwd_->warps - 1) / bwd_->warps, bwd_->warps,
                          0, &n, sizeof n);
        !s)
      return s;
  } else if (!lsh) {
    output("dk", dk32, kPartDk, k4, y.dk);
  }
  if (Status s = lsh ? lshOnDevice(y, true) : backwardOnDevice(y); !s)
    return s;
  for (Status s : {back(y.dq, x.dq.data), back(y.dv, dv32)})
    if (!s)
      return s;
  if (lsh || sharedQk) // the key path is folded into dq
    return x.dk.data ? device_->zero(x.dk.data, sizeof(float) * size_t(B * H * N * D)) : Status{};
  if (Status s = back(y.dk, dk32); !s)
    return s;
  if (!lowrank)
    return {};

  // Low-rank backward: dK = Eᵀ·dK', dE = Σ dK'·Kᵀ (summed over the batch,
  // and over heads when shared); the same for V with F. dE's columns past
  // Nkeys stay zero, and so do padded keys' rows of dK and columns of dE.
  auto backProjection = [&](const float *e, const void *in, const void *dIn, void *dOut,
                            float *dE) -> Status {
    StridedGemmArgs g = tile::lowRankProjectBack(shape);
    g.a = e, g.b = static_cast<const float *>(dIn), g.c = static_cast<float *>(dOut);
    g.seq_lengths = x.lengths;
    if (Status s = projectOnDevice(g, split); !s)
      return s;
    StridedGemmArgs w = tile::lowRankWeightGrad(shape);
    w.a = static_cast<const float *>(dIn), w.b = static_cast<const float *>(in), w.c = dE;
    w.seq_lengths = x.lengths;
    return projectOnDevice(w, split);
  };
  const bool perHead = shape.perHead;
  const size_t eBytes = sizeof(float) * size_t((perHead ? H : 1) * K * Nmax);
  if (Status s = device_->zero(x.dE, eBytes); !s)
    return s;
  if (x.dF)
    if (Status s = device_->zero(x.dF, eBytes); !s)
      return s;
  if (Status s = backProjection(x.E, x.k.data, dk32, x.dk.data, x.dE); !s)
    return s;
  return backProjection(F, x.v.data, dv32, x.dv.data, x.dF ? x.dF : x.dE);
}

} // namespace attnc
