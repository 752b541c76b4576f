//===- CudaAttention.cpp - Run one compiled attention op on a GPU ---------===//
//
// Compiling (NVRTC for a GPU, the host compiler for the SIMT emulator),
// launching and the device entries: forwardOnDevice, backwardOnDevice,
// lshOnDevice. Host tensors in and out: CudaAttentionHost.cpp; a training
// step's f32 buffers: CudaAttentionStep.cpp.
//
//===----------------------------------------------------------------------===//
#include "runtime/CudaAttention.h"
#include "runtime/CudaAttentionSupport.h"

#include "runtime/CudaDriver.h"
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

using namespace cuda_attention;

namespace {

/// The kernels of attnc/device_support.cuh, as a module's source.
constexpr const char *kSupportSource = R"(#include "attnc/entries/device_support.cuh"
)";

} // namespace

const char *CudaAttention::deviceSupportSource() { return kSupportSource; }

Status checkDeviceOperand(const DeviceTensor &t, const std::string &kernel,
                          const std::string &dtype, const std::vector<int64_t> &shape,
                          bool vectorRows) {
  const std::string where = "kernel " + kernel + ": tensor '" + t.name + "'";
  if (!t.data)
    return makeError(where + " has no data (a null pointer)");
  if (t.dtype != dtype)
    return makeError(where + " is " + t.dtype + "; the kernel takes " + dtype);
  if (t.shape != shape)
    return makeError(where + " has shape " + shapeStr(t.shape) + "; the kernel takes " +
                     shapeStr(shape));
  if (!t.strides.empty()) {
    if (t.strides.size() != t.shape.size())
      return makeError(where + " has " + std::to_string(t.strides.size()) + " strides for " +
                       std::to_string(t.shape.size()) + " dimensions");
    int64_t expect = 1;
    for (size_t i = t.shape.size(); i-- > 0;) {
      if (t.shape[i] != 1 && t.strides[i] != expect)
        return makeError(where + " is not contiguous: strides " + shapeStr(t.strides) +
                         " for shape " + shapeStr(t.shape) + " (dimension " + std::to_string(i) +
                         " has stride " + std::to_string(t.strides[i]) + ", expected " +
                         std::to_string(expect) + "); pass a contiguous copy");
      expect *= t.shape[i];
    }
  }
  const uintptr_t address = reinterpret_cast<uintptr_t>(t.data);
  if (address % 16 != 0)
    return makeError(where + " starts at an address that is not 16-byte aligned (" +
                     std::to_string(address % 16) +
                     " bytes past); the kernels load 16 bytes at "
                     "a time");
  if (vectorRows && !shape.empty() && (shape.back() * int64_t(elemBytes(dtype))) % 16 != 0)
    return makeError(where + ": rows of " + std::to_string(shape.back()) + " " + dtype +
                     " elements are not a whole number of 16-byte vectors");
  return {};
}

namespace {

/// `arch` parsed, and one attnc has kernels for (sm_70 or newer); errors
/// begin with `what`.
Expected<GpuArch> kernelArch(const std::string &arch, const std::string &what) {
  Expected<GpuArch> a = parseGpuArch(arch);
  if (!a)
    return makeError(what + ": " + a.error());
  if (a->sm < attnc::tile::kOldestSm)
    return makeError(what + " " + a->str() + ": attnc's CUDA kernels need sm_70 (Volta) or newer");
  return a;
}

/// The plans of a forward and (optional) backward kernel on `device`.
Expected<std::pair<DeviceKernelPlan, std::optional<DeviceKernelPlan>>>
planBoth(const KernelDesc &forward, const std::optional<KernelDesc> &backward,
         const std::string &dtype, const std::string &compiledFor, const DeviceLimits &device,
         bool retile, std::vector<std::string> &defines) {
  if (dtype != "f32" && dtype != "f16" && dtype != "bf16")
    return makeError("kernel " + forward.name + ": unknown dtype '" + dtype + "'");
  Expected<DeviceKernelPlan> f = planKernelForDevice(forward, dtype, compiledFor, device, retile);
  if (!f)
    return f.takeError();
  std::optional<DeviceKernelPlan> b;
  if (backward) {
    Expected<DeviceKernelPlan> p =
        planKernelForDevice(*backward, dtype, compiledFor, device, retile);
    if (!p)
      return p.takeError();
    b = std::move(*p);
  }
  for (const DeviceKernelPlan *p : {&*f, b ? &*b : nullptr})
    if (p && !p->define.empty())
      defines.push_back(p->define);
  return std::make_pair(std::move(*f), std::move(b));
}

} // namespace

Expected<CudaAttention> CudaAttention::finish(CudaAttention a, const std::string &dtype,
                                              const DeviceKernelPlan &fwd,
                                              const std::optional<DeviceKernelPlan> &bwd) {
  a.dtype_ = dtype;
  a.fwd_ = fwd.desc;
  if (bwd)
    a.bwd_ = bwd->desc;
  for (const DeviceKernelPlan *p : {&fwd, bwd ? &*bwd : nullptr})
    if (p && !p->note.empty())
      a.retiled_.push_back(p->note);
  for (const KernelDesc *d : {&a.fwd_, a.bwd_ ? &*a.bwd_ : nullptr})
    for (const std::string &entry : d ? d->entryPoints : std::vector<std::string>{})
      if (!a.module_->has(entry))
        return makeError("kernel '" + entry + "' is not in the compiled module of " + d->name);
  return a;
}

Expected<CudaAttention> CudaAttention::compile(const std::string &source,
                                               const std::string &compiledFor,
                                               const std::string &dtype, const KernelDesc &forward,
                                               std::optional<KernelDesc> backward,
                                               const std::vector<std::string> &includeDirs,
                                               const NvrtcCompiler &compiler, bool retile,
                                               const std::string &ptxArch, int ordinal) {
  if (ordinal < 0) {
    Expected<int> own = cuda::processDevice();
    if (!own)
      return own.takeError();
    ordinal = *own;
  }
  Expected<std::shared_ptr<KernelDevice>> device = createGpuKernelDevice(ordinal);
  if (!device)
    return device.takeError();
  // Modules load into the current context: the device's, for this call.
  Expected<DeviceScope> scope = (*device)->enter();
  if (!scope)
    return scope.takeError();
  Expected<cuda::DeviceInfo> info = cuda::queryDevice(ordinal);
  if (!info)
    return info.takeError();
  // The kernels as this GPU runs them: compiled for its arch, each tile
  // checked against its shared memory and re-tiled where needed.
  DeviceLimits limits = DeviceLimits::of(*info);
  NvrtcOptions options;
  options.arch = info->arch();
  if (Expected<GpuArch> a = parseGpuArch(compiledFor); a && a->sm == limits.sm)
    options.arch = compiledFor; // keeps an "a"/"f" suffix
  if (!ptxArch.empty()) {
    // An older arch's path on this GPU: its tiles within both limits, its
    // PTX JIT-compiled by the driver.
    Expected<GpuArch> older = kernelArch(ptxArch, "--as-arch");
    if (!older)
      return older.takeError();
    if (older->sm > limits.sm)
      return makeError("--as-arch " + ptxArch + " is newer than the GPU, " + info->arch() +
                       ": a GPU JITs only the PTX of its own or an older arch");
    limits.sm = older->sm;
    limits.smemOptinBytes = std::min(limits.smemOptinBytes, attnc::tile::smemLimitBytes(older->sm));
    limits.description += ", running " + older->str() + "'s kernels as PTX";
    options.arch = older->str();
    options.ptx = true;
  }
  options.includeDirs = includeDirs;
  auto plans = planBoth(forward, backward, dtype, compiledFor, limits, retile, options.options);
  if (!plans)
    return plans.takeError();
  Expected<Cubin> cubin = compiler.compile("attnc_kernels.cu", source, options);
  if (!cubin)
    return cubin.takeError();
  Expected<std::unique_ptr<KernelModule>> module = loadGpuKernelModule(*cubin);
  if (!module)
    return module.takeError();
  CudaAttention a;
  a.device_ = std::move(*device);
  a.module_ = std::move(*module);
  Expected<CudaAttention> done = finish(std::move(a), dtype, plans->first, plans->second);
  if (!done)
    return done;
  if (Status s = done->compileSupport(
          [&](const std::string &name, const std::string &src, const std::vector<std::string> &) {
            Expected<Cubin> c = compiler.compile(name + ".cu", src, options);
            if (!c)
              return Expected<std::unique_ptr<KernelModule>>(c.takeError());
            return loadGpuKernelModule(*c);
          });
      !s)
    return s.takeError();
  return done;
}

Expected<CudaAttention>
CudaAttention::compileEmulated(const std::string &source, const std::string &compiledFor,
                               const std::string &arch, const std::string &dtype,
                               const KernelDesc &forward, std::optional<KernelDesc> backward,
                               const HostCompiler &compiler) {
  Expected<GpuArch> target = kernelArch(arch, "emulating");
  if (!target)
    return target.takeError();
  DeviceLimits limits;
  limits.sm = target->sm;
  limits.smemOptinBytes = attnc::tile::smemLimitBytes(target->sm);
  limits.description = "the SIMT emulator as " + target->str();
  std::vector<std::string> defines;
  auto plans = planBoth(forward, backward, dtype, compiledFor, limits, true, defines);
  if (!plans)
    return plans.takeError();
  // The emulator takes the arch's tensor-core path: m16n8k16 from sm_75,
  // Volta's m8n8k4 on sm_70 (tensor_core_emulator.h).
  const std::string emulatedArch = "-DATTNC_EMULATE_ARCH=" + std::to_string(target->sm * 10);
  defines.push_back(emulatedArch);
  std::vector<std::string> entries = plans->first.desc.entryPoints;
  if (plans->second)
    entries.insert(entries.end(), plans->second->desc.entryPoints.begin(),
                   plans->second->desc.entryPoints.end());
  Expected<std::unique_ptr<KernelModule>> module =
      compileEmulatedKernelModule("attnc_kernels", source, entries, defines, compiler);
  if (!module)
    return module.takeError();
  CudaAttention a;
  a.device_ = createEmulatedKernelDevice();
  a.module_ = std::move(*module);
  Expected<CudaAttention> done = finish(std::move(a), dtype, plans->first, plans->second);
  if (!done)
    return done;
  if (Status s = done->compileSupport([&](const std::string &name, const std::string &src,
                                          const std::vector<std::string> &entries) {
        return compileEmulatedKernelModule(name, src, entries, {emulatedArch}, compiler);
      });
      !s)
    return s.takeError();
  return done;
}

Status CudaAttention::useStream(void *stream) {
  Expected<DeviceScope> scope = device_->enter();
  if (!scope)
    return scope.takeError();
  if (Status s = device_->useStream(stream); !s)
    return s;
  module_->setStream(stream);
  if (support_)
    support_->setStream(stream);
  return {};
}

Status CudaAttention::launch(const std::string &entry, long long blocks, int warps, size_t smem,
                             const void *args, size_t argBytes) {
  if (blocks < 1 || blocks > attnc::tile::kMaxGridX)
    return makeError("kernel " + entry + ": a grid of " + std::to_string(blocks) +
                     " blocks is outside CUDA's 1 to " + std::to_string(attnc::tile::kMaxGridX) +
                     "; split the batch");
  return module_->launch(entry, blocks, warps * 32, smem, args, argBytes);
}

Status CudaAttention::waitAndTime(int from, int to, const std::string &kernel, float &ms) {
  if (Status s = device_->synchronize(); !s)
    return makeError("kernel " + kernel + ": " + s.error());
  if (Expected<float> t = module_->elapsedMs(from, to))
    ms = *t;
  return {};
}

namespace {
/// Frees a kept buffer: stream-ordered when it is replaced by a larger one
/// in a call (no host wait), plainly when its owner goes.
struct KeptRelease {
  std::shared_ptr<KernelDevice> device;
  bool ordered = false;
  void operator()(void *p) const { ordered ? device->releaseOrdered(p) : device->release(p); }
};
} // namespace

Expected<char *> CudaAttention::kept(KeptBuffer &buffer, size_t bytes, const std::string &what) {
  if (buffer.bytes < bytes) {
    // Growth is stream-ordered: the old buffer is freed after the work
    // already enqueued on the stream reads it, and the new one comes from
    // the driver's pool without a host wait.
    if (KeptRelease *r = std::get_deleter<KeptRelease>(buffer.data))
      r->ordered = true;
    buffer.data.reset(); // the old one first: the new one may need its room
    buffer.bytes = 0;
    Expected<void *> w = device_->allocateOrdered(bytes, what);
    if (!w)
      return w.takeError();
    buffer.data = std::shared_ptr<void>(*w, KeptRelease{device_});
    buffer.bytes = bytes;
  }
  return static_cast<char *>(buffer.data.get());
}

Expected<char *> CudaAttention::workspace(size_t bytes) {
  return kept(workspace_, bytes, "the attention kernels' workspace");
}

Status CudaAttention::forwardOnDevice(const DeviceAttentionArgs &x) {
  if (fwd_.lsh)
    return makeError("kernel " + fwd_.name + ": LSH attention runs through run()");
  Expected<DeviceScope> scope = device_->enter();
  if (!scope)
    return scope.takeError();
  if (x.q.shape.size() != 4 || x.k.shape.size() != 4)
    return makeError("kernel " + fwd_.name + ": q and k must be [B, H, N, D], got " +
                     shapeStr(x.q.shape) + " and " + shapeStr(x.k.shape));
  const int64_t B = x.q.shape[0], H = x.q.shape[1], Nq = x.q.shape[2], Nk = x.k.shape[2],
                D = x.q.shape[3];
  if (D != fwd_.headDim)
    return makeError("kernel " + fwd_.name + " was compiled for head dim " +
                     std::to_string(fwd_.headDim) + ", got " + std::to_string(D));
  const std::vector<int64_t> qShape{B, H, Nq, D}, kShape{B, H, Nk, D};
  for (const auto &[t, shape] :
       {std::pair{&x.q, qShape}, {&x.k, kShape}, {&x.v, kShape}, {&x.out, qShape}})
    if (Status s = checkDeviceOperand(*t, fwd_.name, dtype_, shape, true); !s)
      return s;
  if (Status s = checkDeviceOperand(x.lse, fwd_.name, "f32", {B, H, Nq}, false); !s)
    return s;
  // Shared QK (LSH's dense fallback): entry 0 normalises q into the keys
  // buffer; the flash entry follows (docs/kernels.md).
  const size_t flash = fwd_.sharedQk ? 1 : 0;
  if (fwd_.sharedQk) {
    const long long rows = B * H * Nq;
    SharedQkArgs n{x.q.data, nullptr, x.k.data, rows};
    if (Status s = launch(fwd_.entryPoints[0], (rows + fwd_.warps - 1) / fwd_.warps, fwd_.warps, 0,
                          &n, sizeof n);
        !s)
      return s;
  }
  AttnFwdArgs a{};
  a.q = x.q.data, a.k = x.k.data, a.v = x.v.data, a.out = x.out.data;
  a.lse = static_cast<float *>(x.lse.data);
  a.lengths = x.lengths, a.params = x.params;
  a.B = int(B), a.H = int(H), a.Nq = int(Nq), a.Nk = int(Nk), a.scale = fwd_.scale;
  if (x.dropout) // training: the kernels' attention dropout (the CPU kernels' masks)
    a.dropout = fwd_.dropout, a.dropout_seed = x.dropoutSeed, a.dropout_offset = x.dropoutOffset;
  return launch(fwd_.entryPoints[flash], attnc::tile::queryTileBlocks(Nq, fwd_.blockQ, B * H),
                fwd_.warps, size_t(fwd_.smemBytes), &a, sizeof a);
}

Status CudaAttention::backwardOnDevice(const DeviceAttentionArgs &x) {
  if (!bwd_)
    return makeError("no backward kernel was compiled for " + fwd_.name);
  if (bwd_->lsh)
    return makeError("kernel " + bwd_->name + ": LSH attention runs through run()");
  Expected<DeviceScope> scope = device_->enter();
  if (!scope)
    return scope.takeError();
  if (x.q.shape.size() != 4 || x.k.shape.size() != 4)
    return makeError("kernel " + bwd_->name + ": q and k must be [B, H, N, D], got " +
                     shapeStr(x.q.shape) + " and " + shapeStr(x.k.shape));
  const int64_t B = x.q.shape[0], H = x.q.shape[1], Nq = x.q.shape[2], Nk = x.k.shape[2],
                D = x.q.shape[3];
  const std::vector<int64_t> qShape{B, H, Nq, D}, kShape{B, H, Nk, D};
  for (const auto &[t, shape] : {std::pair{&x.q, qShape},
                                 {&x.k, kShape},
                                 {&x.v, kShape},
                                 {&x.out, qShape},
                                 {&x.dout, qShape},
                                 {&x.dq, qShape},
                                 {&x.dk, kShape},
                                 {&x.dv, kShape}})
    if (Status s = checkDeviceOperand(*t, bwd_->name, dtype_, shape, true); !s)
      return s;
  if (Status s = checkDeviceOperand(x.lse, bwd_->name, "f32", {B, H, Nq}, false); !s)
    return s;
  const int P = bwd_->numParams;
  if (P && !x.dparams)
    return makeError("kernel " + bwd_->name + ": no buffer for the gradient of its " +
                     std::to_string(P) + " per-head parameters");
  // Workspace: delta, and the dparams partials.
  Expected<char *> w = workspace(denseBackwardWorkspaceBytes(B, H, Nq, Nk));
  if (!w)
    return w.takeError();
  float *delta = reinterpret_cast<float *>(*w);
  AttnBwdArgs g{};
  g.q = x.q.data, g.k = x.k.data, g.v = x.v.data, g.out = x.out.data, g.dout = x.dout.data;
  g.lse = static_cast<float *>(x.lse.data), g.lengths = x.lengths, g.params = x.params;
  g.delta = delta;
  g.dq = x.dq.data, g.dk = x.dk.data, g.dv = x.dv.data;
  g.dparams = P ? x.dparams : nullptr;
  g.dparams_partial = P ? delta + B * H * Nq : nullptr;
  g.B = int(B), g.H = int(H), g.Nq = int(Nq), g.Nk = int(Nk), g.scale = bwd_->scale;
  if (x.dropout)
    g.dropout = fwd_.dropout, g.dropout_seed = x.dropoutSeed, g.dropout_offset = x.dropoutOffset;
  // Entry order as emitted: [normalise, fold_dk,] preprocess, dkdv, dq[, dparams].
  const size_t first = bwd_->sharedQk ? 2 : 0;
  const long long qBlocks = attnc::tile::queryTileBlocks(Nq, bwd_->blockQ, B * H),
                  kBlocks = attnc::tile::keyTileBlocks(Nk, bwd_->blockKv, B * H);
  struct Step {
    long long blocks;
    size_t smem;
  };
  const Step steps[] = {{qBlocks, 0},
                        {kBlocks, size_t(bwd_->smemBytes)},
                        {qBlocks, size_t(bwd_->smemBytes)},
                        {std::max(P, 1) * H, 0}};
  for (size_t i = 0; i + first < bwd_->entryPoints.size() && i < 4; ++i)
    if (Status s = launch(bwd_->entryPoints[i + first], steps[i].blocks, bwd_->warps, steps[i].smem,
                          &g, sizeof g);
        !s)
      return s;
  if (bwd_->sharedQk) { // dq += the key path through the normalisation
    const long long rows = B * H * Nq;
    SharedQkArgs f{x.q.data, x.dk.data, x.dq.data, rows};
    if (Status s = launch(bwd_->entryPoints[1], (rows + bwd_->warps - 1) / bwd_->warps, bwd_->warps,
                          0, &f, sizeof f);
        !s)
      return s;
  }
  return {};
}

Status CudaAttention::lshOnDevice(const DeviceAttentionArgs &x, bool withBackward) {
  if (!fwd_.lsh)
    return makeError("kernel " + fwd_.name + " is not an LSH kernel");
  if (withBackward && (!bwd_ || !bwd_->lsh))
    return makeError("no LSH backward kernel was compiled for " + fwd_.name);
  Expected<DeviceScope> scope = device_->enter();
  if (!scope)
    return scope.takeError();
  const KernelDesc::Lsh &l = *fwd_.lsh;
  if (x.q.shape.size() != 4)
    return makeError("LSH kernel " + fwd_.name + ": q must be [B, H, N, D], got " +
                     shapeStr(x.q.shape));
  const int64_t B = x.q.shape[0], H = x.q.shape[1], N = x.q.shape[2], D = x.q.shape[3];
  const int R = l.rounds;
  if (D != fwd_.headDim)
    return makeError("kernel " + fwd_.name + " was compiled for head dim " +
                     std::to_string(fwd_.headDim) + ", got " + std::to_string(D));
  if (l.numBuckets > attnc::tile::kLshMaxBuckets)
    return makeError("LSH kernel " + fwd_.name + ": " + std::to_string(l.numBuckets) +
                     " buckets; the CUDA hash kernel handles at most " +
                     std::to_string(attnc::tile::kLshMaxBuckets));
  if (!x.rotations)
    return makeError("LSH kernel " + fwd_.name + " needs its rotations [" + std::to_string(R) +
                     ", " + std::to_string(D) + ", " + std::to_string(l.numBuckets / 2) + "]");
  const std::vector<int64_t> s4{B, H, N, D};
  // A backward may leave out and lse to the workspace (it recomputes them).
  const bool ownOut = withBackward && !x.out.data;
  std::vector<const DeviceTensor *> operands = {&x.q, &x.v};
  if (!ownOut)
    operands.push_back(&x.out);
  if (withBackward)
    operands.insert(operands.end(), {&x.dout, &x.dq, &x.dv});
  for (const DeviceTensor *t : operands)
    if (Status s = checkDeviceOperand(*t, fwd_.name, dtype_, s4, true); !s)
      return s;
  if (!ownOut)
    if (Status s = checkDeviceOperand(x.lse, fwd_.name, "f32", {B, H, N}, false); !s)
      return s;
  const int64_t bh = B * H;
  std::vector<size_t> parts =
      lshWorkspaceParts(B, H, N, D, R, l.chunk, l.numBuckets, lshHashThreads(), withBackward,
                        ownOut, elemBytes(dtype_));
  const size_t total = parts.back();
  Expected<char *> w = workspace(total);
  if (!w)
    return w.takeError();
  char *base = *w;
  AttnLshArgs a{};
  a.q = x.q.data, a.v = x.v.data;
  a.out = ownOut ? base + parts[10] : x.out.data;
  a.lse = ownOut ? reinterpret_cast<float *>(base + parts[11]) : static_cast<float *>(x.lse.data);
  a.lengths = x.lengths, a.params = x.params, a.rotations = x.rotations;
  a.buckets = reinterpret_cast<int *>(base + parts[0]);
  a.perm = reinterpret_cast<int *>(base + parts[1]);
  a.keys = reinterpret_cast<float *>(base + parts[2]);
  a.round_out = reinterpret_cast<float *>(base + parts[3]);
  a.round_lse = reinterpret_cast<float *>(base + parts[4]);
  a.sort_counts = reinterpret_cast<int *>(base + parts[5]);
  a.B = int(B), a.H = int(H), a.N = int(N), a.rounds = R, a.num_buckets = l.numBuckets;
  a.scale = fwd_.scale;
  if (x.dropout) // training: per round, the backward redraws the masks
    a.dropout = fwd_.dropout, a.dropout_seed = x.dropoutSeed, a.dropout_offset = x.dropoutOffset;
  using attnc::tile::LshGrid;
  // Each launch: its grid, and its warps where they are not the kernel's.
  struct LshLaunch {
    LshGrid grid;
    int warps = 0;
  };
  auto launchAll = [&](const KernelDesc &d, const std::vector<LshLaunch> &launches) -> Status {
    if (d.entryPoints.size() != launches.size())
      return makeError("LSH kernel " + d.name + ": expected " + std::to_string(launches.size()) +
                       " entry points, found " + std::to_string(d.entryPoints.size()));
    for (size_t i = 0; i < launches.size(); ++i) {
      const int warps = launches[i].warps > 0 ? launches[i].warps : d.warps;
      if (Status s = launch(d.entryPoints[i], launches[i].grid.x, warps, 0, &a, sizeof a); !s)
        return s;
    }
    return {};
  };
  // The per-round kernels launch with their own tiles where the emitter
  // chose the tensor-core ones, by the same rule (LshTileModel.h).
  const attnc::tile::LshTile ft = attnc::tile::lshFwdLaunchTile(
      {fwd_.blockQ, fwd_.blockKv, fwd_.warps}, l.chunk, int(D), int(elemBytes(dtype_)));
  (void)module_->mark(3);
  // Entry order as emitted: hash, sort offsets, sort scatter, fwd, combine.
  const attnc::tile::LshGrid hashTiles =
      attnc::tile::lshHashTileGrid(int(N), fwd_.warps * 32, int(bh), R);
  if (Status s =
          launchAll(fwd_, {{hashTiles},
                           {attnc::tile::lshHashGrid(int(bh), R)},
                           {hashTiles},
                           {attnc::tile::lshFwdGrid(ft, int(N), l.chunk, int(bh), R), ft.warps},
                           {attnc::tile::lshRowGrid(int(N), int(bh))}});
      !s)
    return s;
  (void)module_->mark(4);
  if (!withBackward)
    return {};
  a.dout = x.dout.data, a.dq = x.dq.data, a.dv = x.dv.data;
  a.delta = reinterpret_cast<float *>(base + parts[6]);
  a.round_dq = reinterpret_cast<float *>(base + parts[7]);
  a.round_dk = reinterpret_cast<float *>(base + parts[8]);
  a.round_dv = reinterpret_cast<float *>(base + parts[9]);
  a.scale = bwd_->scale;
  const attnc::tile::LshTile bt = attnc::tile::lshBwdLaunchTile(
      {bwd_->blockQ, bwd_->blockKv, bwd_->warps}, l.chunk, int(D), int(elemBytes(dtype_)));
  // Entry order as emitted: hash and sort (recomputed), preprocess, dq,
  // dkdv, combine.
  const attnc::tile::LshGrid bwdHashTiles =
      attnc::tile::lshHashTileGrid(int(N), bwd_->warps * 32, int(bh), R);
  if (Status s = launchAll(
          *bwd_, {{bwdHashTiles},
                  {attnc::tile::lshHashGrid(int(bh), R)},
                  {bwdHashTiles},
                  {attnc::tile::lshRowGrid(int(N), int(bh))},
                  {attnc::tile::lshBwdDqGrid(bt, int(N), l.chunk, int(bh), R), bt.warps},
                  {attnc::tile::lshBwdDkdvGrid(bt, int(N), l.chunk, int(bh), R), bt.warps},
                  {attnc::tile::lshRowGrid(int(N), int(bh))}});
      !s)
    return s;
  (void)module_->mark(5);
  return {};
}

} // namespace attnc
