//===- CudaAttention.cpp - Run one compiled attention op on a GPU ---------===//
#include "runtime/CudaAttention.h"

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

namespace {

size_t elemBytes(const std::string &dtype) { return dtype == "f32" || dtype == "i32" ? 4 : 2; }

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

/// Device memory of a KernelDevice, released when destroyed.
class DeviceArray {
public:
  DeviceArray() = default;
  DeviceArray(KernelDevice *dev, void *p, size_t bytes) : dev_(dev), p_(p), bytes_(bytes) {}
  DeviceArray(DeviceArray &&o) noexcept : dev_(o.dev_), p_(o.p_), bytes_(o.bytes_) {
    o.p_ = nullptr;
  }
  DeviceArray &operator=(DeviceArray &&o) noexcept {
    std::swap(dev_, o.dev_), std::swap(p_, o.p_), std::swap(bytes_, o.bytes_);
    return *this;
  }
  ~DeviceArray() {
    if (p_)
      dev_->release(p_);
  }
  template <typename T = void> T *as() const { return static_cast<T *>(p_); }
  size_t bytes() const { return bytes_; }

private:
  KernelDevice *dev_ = nullptr;
  void *p_ = nullptr;
  size_t bytes_ = 0;
};

/// `bytes` of device memory holding `host` (when given) or zeros.
Expected<DeviceArray> deviceArray(KernelDevice &dev, size_t bytes, const std::string &what,
                                  const void *host = nullptr) {
  Expected<void *> p = dev.allocate(std::max<size_t>(bytes, 16), what);
  if (!p)
    return p.takeError();
  DeviceArray a(&dev, *p, bytes);
  if (Status s = host ? dev.upload(*p, host, bytes) : dev.zero(*p, bytes); !s)
    return s.takeError();
  return a;
}

/// `bytes` of `host` on the device in `out`, or nothing when `host` is
/// null (the optional inputs: lengths, per-head parameters).
Status uploadOptional(KernelDevice &dev, const void *host, size_t bytes, const std::string &what,
                      std::optional<DeviceArray> &out) {
  if (!host)
    return {};
  Expected<DeviceArray> a = deviceArray(dev, bytes, what, host);
  if (!a)
    return a.takeError();
  out.emplace(std::move(*a));
  return {};
}

/// An optional host tensor (F, per-head parameters) on the device, or
/// nothing.
Status uploadOptional(KernelDevice &dev, const st::Tensor *t, const std::string &what,
                      std::optional<DeviceArray> &out) {
  return uploadOptional(dev, t ? t->data.data() : nullptr, t ? t->data.size() : 0, what, out);
}

Expected<std::vector<float>> download(KernelDevice &dev, const DeviceArray &buf, size_t n,
                                      const std::string &dtype) {
  std::vector<uint8_t> bytes(n * elemBytes(dtype));
  if (Status s = dev.download(bytes.data(), buf.as(), bytes.size()); !s)
    return s.takeError();
  return fromDevice(bytes, dtype);
}

std::string shapeStr(const std::vector<int64_t> &s) {
  std::string r = "[";
  for (size_t i = 0; i < s.size(); ++i)
    r += (i ? ", " : "") + std::to_string(s[i]);
  return r + "]";
}

/// A contiguous view of `a`.
DeviceTensor view(const char *name, const DeviceArray &a, std::vector<int64_t> shape,
                  const std::string &dtype) {
  return DeviceTensor{name, a.as(), std::move(shape), {}, dtype};
}

/// The low-rank projections around the GPU attention run on the host, with
/// the CPU kernels' own projection (the same loops as the CPU target),
/// compiled by the host compiler like any CPU kernel: the runtime reaches
/// kernel code only through the JIT, never by including it.
constexpr const char *kHostProjectionSource = R"(#include "attnc/entries/host_lowrank.h"
)";

/// Offsets of parts of `bytes` laid out one after the other, each 256-byte
/// aligned; the total last.
std::vector<size_t> packParts(std::vector<size_t> bytes) {
  size_t total = 0;
  for (size_t &p : bytes) {
    const size_t at = total;
    total += (p + 255) / 256 * 256;
    p = at;
  }
  bytes.push_back(total);
  return bytes;
}

/// The LSH kernels' workspace (offsets, the total last): buckets, perm,
/// keys, round_out, round_lse; the backward's delta, round_dq, round_dk,
/// round_dv; out and lse when the caller gave none.
std::vector<size_t> lshWorkspaceParts(int64_t B, int64_t H, int64_t N, int64_t D, int64_t R,
                                      int chunk, bool backward, bool ownOut, size_t elemBytes) {
  const int64_t bh = B * H, npad = attnc::tile::lshPaddedLength(int(N), chunk);
  const size_t nqd = size_t(bh * N * D);
  std::vector<size_t> parts = {size_t(bh * R * N) * 4, size_t(bh * R * npad) * 4, nqd * 4,
                               nqd * R * 4, size_t(bh * R * N) * 4};
  if (backward)
    parts.insert(parts.end(), {size_t(bh * N) * 4, nqd * R * 4, nqd * R * 4, nqd * R * 4});
  if (ownOut)
    parts.insert(parts.end(), {nqd * elemBytes, size_t(bh * N) * 4});
  return packParts(std::move(parts));
}

/// The kernels of attnc/device_support.cuh, as a module's source.
constexpr const char *kSupportSource = R"(#include "attnc/entries/device_support.cuh"
)";
} // namespace

const char *CudaAttention::deviceSupportSource() { return kSupportSource; }

namespace {

const std::vector<std::string> kSupportEntries = {"attnc_strided_gemm", "attnc_convert_f32_f16",
                                                  "attnc_convert_f16_f32", "attnc_convert_f32_bf16",
                                                  "attnc_convert_bf16_f32"};

} // namespace

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
  if (a.fwd_.lowrank)
    if (Status s = a.loadHostProjections(); !s)
      return s.takeError();
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

Expected<AttentionOutputs> CudaAttention::run(const AttentionInputs &in) {
  Expected<DeviceScope> scope = device_->enter();
  if (!scope)
    return scope.takeError();
  if (fwd_.lsh)
    return runLsh(in);
  KernelDevice &dev = *device_;
  const auto &qs = in.q->shape;
  int B = int(qs[0]), H = int(qs[1]), Nq = int(qs[2]), N = int(in.k->shape[2]), D = int(qs[3]);
  if (D != fwd_.headDim)
    return makeError("kernel " + fwd_.name + " was compiled for head dim " +
                     std::to_string(fwd_.headDim) + ", got " + std::to_string(D));
  const int *lengths =
      in.lengths ? reinterpret_cast<const int *>(in.lengths->data.data()) : nullptr;
  // Low-rank over whole sequences: the projections run on the device too
  // (attendF32OnDevice; the kernels' times include them). Padded keys
  // (lengths < N) are zeroed by the host projections below.
  bool wholeSequences = Nq == N;
  for (int b = 0; lengths && b < B; ++b)
    wholeSequences = wholeSequences && lengths[b] >= N;
  if (fwd_.lowrank && support_ && wholeSequences)
    return runLowRankOnDevice(in);
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
  const size_t nq = size_t(B) * H * Nq * D, nk = size_t(B) * H * Nk * D, eb = elemBytes(dtype_);
  auto hq = toDevice(f32(in.q), nq, dtype_), hk = toDevice(keys, nk, dtype_),
       hv = toDevice(values, nk, dtype_);
  Expected<DeviceArray> dq = deviceArray(dev, hq.size(), "q", hq.data()),
                        dk = deviceArray(dev, hk.size(), "k", hk.data()),
                        dv = deviceArray(dev, hv.size(), "v", hv.data()),
                        dOut = deviceArray(dev, nq * eb, "out"),
                        dLse = deviceArray(dev, size_t(B) * H * Nq * 4, "lse");
  for (auto *b : {&dq, &dk, &dv, &dOut, &dLse})
    if (!*b)
      return b->takeError();
  std::optional<DeviceArray> dLen, dParams;
  if (Status s =
          uploadOptional(dev, fwd_.lowrank ? nullptr : lengths, size_t(B) * 4, "lengths", dLen);
      !s)
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

  AttentionOutputs out;
  Expected<std::vector<float>> o = download(dev, *dOut, nq, dtype_),
                               l = download(dev, *dLse, size_t(B) * H * Nq, "f32");
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
      lshWorkspaceParts(B, H, N, D, R, l.chunk, withBackward, ownOut, elemBytes(dtype_));
  const size_t total = parts.back();
  Expected<char *> w = workspace(total);
  if (!w)
    return w.takeError();
  char *base = *w;
  AttnLshArgs a{};
  a.q = x.q.data, a.v = x.v.data;
  a.out = ownOut ? base + parts[9] : x.out.data;
  a.lse = ownOut ? reinterpret_cast<float *>(base + parts[10]) : static_cast<float *>(x.lse.data);
  a.lengths = x.lengths, a.params = x.params, a.rotations = x.rotations;
  a.buckets = reinterpret_cast<int *>(base + parts[0]);
  a.perm = reinterpret_cast<int *>(base + parts[1]);
  a.keys = reinterpret_cast<float *>(base + parts[2]);
  a.round_out = reinterpret_cast<float *>(base + parts[3]);
  a.round_lse = reinterpret_cast<float *>(base + parts[4]);
  a.B = int(B), a.H = int(H), a.N = int(N), a.rounds = R, a.num_buckets = l.numBuckets;
  a.scale = fwd_.scale;
  if (x.dropout) // training: per round, the backward redraws the masks
    a.dropout = fwd_.dropout, a.dropout_seed = x.dropoutSeed, a.dropout_offset = x.dropoutOffset;
  using attnc::tile::LshGrid;
  auto launchAll = [&](const KernelDesc &d, const std::vector<LshGrid> &grids) -> Status {
    if (d.entryPoints.size() != grids.size())
      return makeError("LSH kernel " + d.name + ": expected " + std::to_string(grids.size()) +
                       " entry points, found " + std::to_string(d.entryPoints.size()));
    for (size_t i = 0; i < grids.size(); ++i)
      if (Status s = launch(d.entryPoints[i], grids[i].x, d.warps, 0, &a, sizeof a); !s)
        return s;
    return {};
  };
  const attnc::tile::LshTile ft{fwd_.blockQ, fwd_.blockKv, fwd_.warps};
  (void)module_->mark(3);
  // Entry order as emitted: hash, fwd, combine.
  if (Status s = launchAll(fwd_, {attnc::tile::lshHashGrid(int(bh), R),
                                  attnc::tile::lshFwdGrid(ft, int(N), l.chunk, int(bh), R),
                                  attnc::tile::lshRowGrid(int(N), int(bh))});
      !s)
    return s;
  (void)module_->mark(4);
  if (!withBackward)
    return {};
  a.dout = x.dout.data, a.dq = x.dq.data, a.dv = x.dv.data;
  a.delta = reinterpret_cast<float *>(base + parts[5]);
  a.round_dq = reinterpret_cast<float *>(base + parts[6]);
  a.round_dk = reinterpret_cast<float *>(base + parts[7]);
  a.round_dv = reinterpret_cast<float *>(base + parts[8]);
  a.scale = bwd_->scale;
  const attnc::tile::LshTile bt{bwd_->blockQ, bwd_->blockKv, bwd_->warps};
  // Entry order as emitted: hash (recomputed), preprocess, dq, dkdv, combine.
  if (Status s = launchAll(*bwd_, {attnc::tile::lshHashGrid(int(bh), R),
                                   attnc::tile::lshRowGrid(int(N), int(bh)),
                                   attnc::tile::lshBwdDqGrid(bt, int(N), l.chunk, int(bh), R),
                                   attnc::tile::lshBwdDkdvGrid(bt, int(N), l.chunk, int(bh), R),
                                   attnc::tile::lshRowGrid(int(N), int(bh))});
      !s)
    return s;
  (void)module_->mark(5);
  return {};
}

Expected<AttentionOutputs> CudaAttention::runLowRankOnDevice(const AttentionInputs &in) {
  KernelDevice &dev = *device_;
  const auto &qs = in.q->shape;
  const int64_t B = qs[0], H = qs[1], N = qs[2], D = qs[3];
  const std::vector<int64_t> s4{B, H, N, D}, s3{B, H, N};
  const size_t n4 = size_t(B * H * N * D) * 4, n3 = size_t(B * H * N) * 4;
  if (!in.E || in.E->shape.size() < 2 || in.E->shape[in.E->shape.size() - 2] != fwd_.lowrankK)
    return makeError("low-rank kernel " + fwd_.name + " needs its projection E with " +
                     std::to_string(fwd_.lowrankK) + " rows");
  if (in.F && in.F->shape != in.E->shape)
    return makeError("low-rank kernel " + fwd_.name + ": F's shape differs from E's");
  Expected<DeviceArray> dq = deviceArray(dev, n4, "q", f32(in.q)),
                        dk = deviceArray(dev, n4, "k", f32(in.k)),
                        dv = deviceArray(dev, n4, "v", f32(in.v)),
                        dOut = deviceArray(dev, n4, "out"), dLse = deviceArray(dev, n3, "lse"),
                        dE = deviceArray(dev, in.E->data.size(), "E", in.E->data.data());
  for (auto *b : {&dq, &dk, &dv, &dOut, &dLse, &dE})
    if (!*b)
      return b->takeError();
  std::optional<DeviceArray> dF, dParams;
  if (Status s = uploadOptional(dev, in.F, "F", dF); !s)
    return s.takeError();
  if (Status s = uploadOptional(dev, in.params, "params", dParams); !s)
    return s.takeError();
  DeviceAttentionArgs x;
  x.q = view("q", *dq, s4, "f32"), x.k = view("k", *dk, s4, "f32");
  x.v = view("v", *dv, s4, "f32"), x.out = view("out", *dOut, s4, "f32");
  x.lse = view("lse", *dLse, s3, "f32");
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
  AttentionOutputs out;
  Expected<std::vector<float>> o = download(dev, *dOut, size_t(B * H * N * D), "f32"),
                               l = download(dev, *dLse, size_t(B * H * N), "f32");
  if (!o || !l)
    return makeError(!o ? o.error() : l.error());
  out.out = st::Tensor::f32(s4, *o);
  out.lse = st::Tensor::f32(s3, *l);
  if (!in.dout)
    return out;
  if (!bwd_)
    return makeError("no backward kernel was compiled for " + fwd_.name);
  const int P = bwd_->numParams;
  Expected<DeviceArray> dDo = deviceArray(dev, n4, "dout", f32(in.dout)),
                        gq = deviceArray(dev, n4, "dq"), gk = deviceArray(dev, n4, "dk"),
                        gv = deviceArray(dev, n4, "dv"),
                        gE = deviceArray(dev, in.E->data.size(), "dE"),
                        gF = deviceArray(dev, in.F ? in.F->data.size() : 16, "dF"),
                        gP = deviceArray(dev, size_t(std::max(P, 1) * H) * 4, "dparams");
  for (auto *b : {&dDo, &gq, &gk, &gv, &gE, &gF, &gP})
    if (!*b)
      return b->takeError();
  x.dout = view("dout", *dDo, s4, "f32"), x.dq = view("dq", *gq, s4, "f32");
  x.dk = view("dk", *gk, s4, "f32"), x.dv = view("dv", *gv, s4, "f32");
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
  for (Status s : {fetch(*gq, n4 / 4, in.q->shape, out.dq), fetch(*gk, n4 / 4, in.k->shape, out.dk),
                   fetch(*gv, n4 / 4, in.v->shape, out.dv),
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
  AttentionOutputs out;
  Expected<std::vector<float>> o = download(dev, *dOut, nqd, dtype_),
                               ls = download(dev, *dLse, size_t(B) * H * N, "f32");
  if (!o || !ls)
    return makeError(!o ? o.error() : ls.error());
  out.out = st::Tensor::f32({B, H, N, D}, *o);
  out.lse = st::Tensor::f32({B, H, N}, *ls);
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

//===-- A training step's f32 buffers -------------------------------------===//

Status CudaAttention::compileSupport(
    const std::function<Expected<std::unique_ptr<KernelModule>>(
        const std::string &, const std::string &, const std::vector<std::string> &)> &compile) {
  if (!fwd_.lowrank && dtype_ == "f32")
    return {}; // attendF32OnDevice calls the attention kernels alone
  Expected<std::unique_ptr<KernelModule>> m =
      compile("attnc_device_support", kSupportSource, kSupportEntries);
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

Status CudaAttention::projectOnDevice(const StridedGemmArgs &g, long long batches) {
  const long long tiles = ((g.m + kStridedGemmTile - 1) / kStridedGemmTile) *
                          ((g.n + kStridedGemmTile - 1) / kStridedGemmTile);
  return launchSupport("attnc_strided_gemm", batches * tiles, kStridedGemmThreads, &g, sizeof g);
}

size_t CudaAttention::denseBackwardWorkspaceBytes(int64_t B, int64_t H, int64_t Nq,
                                                  int64_t Nk) const {
  const int P = bwd_ ? bwd_->numParams : 0, blockKv = bwd_ ? bwd_->blockKv : 1;
  const long long partial =
      attnc::tile::bwd_workspace_floats(int(B), int(H), int(Nq), int(Nk), P, blockKv);
  return sizeof(float) * size_t(B * H * Nq + std::max(partial, 1LL));
}

size_t CudaAttention::lshWorkspaceBytes(int64_t B, int64_t H, int64_t N, bool backward,
                                        bool ownOut) const {
  return lshWorkspaceParts(B, H, N, fwd_.headDim, fwd_.lsh->rounds, fwd_.lsh->chunk, backward,
                           ownOut, elemBytes(dtype_))
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
  kPartKeys
};
/// Shared-QK dense kernels (the LSH dense fallback) also take their keys,
/// the normalised queries, and a dK to fold into dQ from here.
std::vector<size_t> f32OperandParts(int64_t B, int64_t H, int64_t N, int64_t Nk, int64_t D,
                                    size_t elemBytes, bool converted, bool lowrank, bool sharedQk) {
  const size_t q = size_t(B * H * N * D), k = size_t(B * H * Nk * D);
  const size_t c = converted ? elemBytes : 0, p = lowrank ? 4 : 0;
  const size_t s = sharedQk ? elemBytes : 0, dk = std::max(c, s);
  return packParts(
      {q * c, k * c, k * c, q * c, q * c, q * c, k * dk, k * c, k * p, k * p, k * p, k * p, q * s});
}

} // namespace

Status CudaAttention::reserveF32OnDevice(int64_t B, int64_t H, int64_t N) {
  Expected<DeviceScope> scope = device_->enter();
  if (!scope)
    return scope.takeError();
  const int64_t Nk = fwd_.lowrank ? fwd_.lowrankK : N;
  const bool converted = dtype_ != "f32", sharedQk = fwd_.sharedQk && !fwd_.lsh;
  if (converted || fwd_.lowrank || sharedQk) {
    const size_t bytes = f32OperandParts(B, H, N, Nk, fwd_.headDim, elemBytes(dtype_), converted,
                                         fwd_.lowrank, sharedQk)
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
  const std::vector<size_t> at =
      f32OperandParts(B, H, N, Nk, D, elemBytes(dtype_), converted, lowrank, sharedQk);
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

  // Low-rank: K' = E·K, V' = F·V (F = E when shared), [B, H, K, D], f32.
  const bool perHead = fwd_.share == "none";
  const float *F = x.F ? x.F : x.E;
  auto projection = [&](const float *e, const void *in, void *out) {
    StridedGemmArgs g{};
    g.a = e, g.b = static_cast<const float *>(in), g.c = static_cast<float *>(out);
    g.m = K, g.n = D, g.k = Nkeys;
    g.a_row = Nmax, g.a_col = 1, g.b_row = D, g.b_col = 1, g.c_row = D, g.c_col = 1;
    g.a_batch = perHead ? K * Nmax : 0, g.a_batch_mod = H;
    g.b_batch = Nkeys * D, g.c_batch = K * D;
    g.terms = 1, g.beta = 0;
    return projectOnDevice(g, B * H);
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
  // Nkeys stay zero.
  auto backProjection = [&](const float *e, const void *in, const void *dIn, void *dOut,
                            float *dE) -> Status {
    StridedGemmArgs g{}; // dX[b, h] (Nk x D) = E_hᵀ (Nk x K) · dX'[b, h] (K x D)
    g.a = e, g.b = static_cast<const float *>(dIn), g.c = static_cast<float *>(dOut);
    g.m = Nkeys, g.n = D, g.k = K;
    g.a_row = 1, g.a_col = Nmax, g.b_row = D, g.b_col = 1, g.c_row = D, g.c_col = 1;
    g.a_batch = perHead ? K * Nmax : 0, g.a_batch_mod = H;
    g.b_batch = K * D, g.c_batch = Nkeys * D;
    g.terms = 1, g.beta = 0;
    if (Status s = projectOnDevice(g, B * H); !s)
      return s;
    StridedGemmArgs w{}; // dE_g (K x Nk) += dX'[b, h] (K x D) · X[b, h]ᵀ (D x Nk)
    w.a = static_cast<const float *>(dIn), w.b = static_cast<const float *>(in), w.c = dE;
    w.m = K, w.n = Nkeys, w.k = D;
    w.a_row = D, w.a_col = 1, w.b_row = 1, w.b_col = D, w.c_row = Nmax, w.c_col = 1;
    w.beta = 1;
    if (perHead) { // C_h = Σ_b: batch h, term b
      w.a_batch = K * D, w.a_batch_mod = H, w.b_batch = Nkeys * D, w.c_batch = K * Nmax;
      w.terms = int(B), w.a_term = H * K * D, w.b_term = H * Nkeys * D;
      return projectOnDevice(w, H);
    }
    w.a_batch_mod = 1, w.terms = int(B * H), w.a_term = K * D, w.b_term = Nkeys * D;
    return projectOnDevice(w, 1);
  };
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
