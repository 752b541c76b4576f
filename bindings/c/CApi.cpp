//===- CApi.cpp - attnc's C ABI over the runtime --------------------------===//
//
// bindings/c/include/attnc/attnc.h: errors, the options both ways in take
// (attnc_compile, in CApiCompile.cpp, which needs the compiler; attnc_load
// of a compiled artifact, here, which needs only the runtime), the
// variant's parameters, and the CPU calls (CpuAttention::call on the
// caller's buffers). CUDA variants run in CApiCuda.cpp.
//
//===----------------------------------------------------------------------===//
#include "CApiInternal.h"

#include "runtime/Artifact.h"
#include "runtime/AttentionIO.h"
#include "runtime/CudaDriver.h"
#include "runtime/CpuAttention.h"
#include "runtime/FileSystem.h"
#include "runtime/HostCompiler.h"
#include "runtime/KernelCache.h"
#include "runtime/KernelHeaders.h"
#include "runtime/NvrtcCompiler.h"
#include "runtime/PhiloxDraws.h"

#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

using namespace attnc;

namespace attnc::capi {

attnc_error *fail(std::string message) { return new attnc_error{std::move(message)}; }

const char *dtypeName(attnc_dtype d) {
  switch (d) {
  case ATTNC_F32:
    return "f32";
  case ATTNC_F16:
    return "f16";
  case ATTNC_BF16:
    return "bf16";
  case ATTNC_I32:
    return "i32";
  }
  return "an unknown dtype";
}

std::string shapeStr(const int64_t *shape, int ndim) {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

/// A tensor the CPU kernels read or write in place: f32 (or i32), on the
/// CPU, of `shape`, contiguous, 4-byte aligned. Otherwise (and
/// `allowCopies`) `copy` receives its contiguous values and the pointer
/// points there; else the error names it.
struct View {
  float *data = nullptr;
  std::vector<float> copy; ///< when the caller's layout could not be read as it is
  const attnc_tensor *from = nullptr;
  bool copied = false;
};

std::string describe(const char *what, const attnc_tensor &t) {
  return std::string(what) + " (" + dtypeName(t.dtype) + " " + shapeStr(t.shape, t.ndim) +
         ", strides " + shapeStr(t.strides, t.ndim) + ")";
}

attnc_error *view(const char *what, const attnc_tensor &t, const std::vector<int64_t> &shape,
                  attnc_dtype dtype, bool allowCopies, bool writable, View &out) {
  if (!t.data)
    return fail(std::string(what) + ": no data (null pointer)");
  if (t.device != ATTNC_CPU)
    return fail(std::string(what) + ": on a CUDA device; this variant was compiled for the CPU");
  if (t.dtype != dtype)
    return fail(describe(what, t) + ": expected " + dtypeName(dtype) +
                (dtype == ATTNC_F32 ? " (the CPU kernels are fp32)" : ""));
  if (t.ndim != int(shape.size()) ||
      !std::equal(shape.begin(), shape.end(), t.shape,
                  [](int64_t want, int64_t got) { return want < 0 || want == got; }))
    return fail(describe(what, t) + ": expected shape " +
                shapeStr(shape.data(), int(shape.size())));
  bool contiguous = true;
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    if (t.shape[d] != 1 && t.strides[d] != stride)
      contiguous = false;
    stride *= t.shape[d];
  }
  const bool aligned = reinterpret_cast<uintptr_t>(t.data) % 4 == 0;
  out.from = &t;
  if (contiguous && aligned) {
    out.data = static_cast<float *>(t.data);
    return nullptr;
  }
  if (!allowCopies)
    return fail(describe(what, t) + ": " + (aligned ? "not contiguous" : "not 4-byte aligned") +
                "; the kernels read contiguous [B, H, N, D] rows (pass a contiguous tensor, or "
                "allow copies)");
  out.copied = true;
  out.copy.assign(size_t(stride), 0.f);
  out.data = out.copy.data();
  if (!writable) { // gather the values (byte-wise: the source may be misaligned)
    const char *base = static_cast<const char *>(t.data);
    std::vector<int64_t> idx(size_t(t.ndim), 0);
    for (int64_t i = 0; i < stride; ++i) {
      int64_t off = 0;
      for (int d = 0; d < t.ndim; ++d)
        off += idx[size_t(d)] * t.strides[d];
      std::memcpy(&out.copy[size_t(i)], base + off * 4, 4);
      for (int d = t.ndim - 1; d >= 0; --d)
        if (++idx[size_t(d)] < t.shape[d])
          break;
        else
          idx[size_t(d)] = 0;
    }
  }
  return nullptr;
}

/// A written view that was a copy: its values back to the caller's layout.
void scatter(const View &v) {
  if (!v.copied)
    return;
  const attnc_tensor &t = *v.from;
  char *base = static_cast<char *>(t.data);
  std::vector<int64_t> idx(size_t(t.ndim), 0);
  for (size_t i = 0; i < v.copy.size(); ++i) {
    int64_t off = 0;
    for (int d = 0; d < t.ndim; ++d)
      off += idx[size_t(d)] * t.strides[d];
    std::memcpy(base + off * 4, &v.copy[i], 4);
    for (int d = t.ndim - 1; d >= 0; --d)
      if (++idx[size_t(d)] < t.shape[d])
        break;
      else
        idx[size_t(d)] = 0;
  }
}

/// What attnc_forward and attnc_backward share: the checked inputs as an
/// AttentionCall, and the views behind it.
struct PreparedCall {
  AttentionCall call;
  View q, k, v, lengths, out, lse;
  std::vector<View> params;
  std::vector<float> headParams; ///< [P, H], gathered from the per-head tensors
};

attnc_error *checkCall(const attnc_call &c) {
  if (c.struct_size < offsetof(attnc_call, dout))
    return fail("attnc_call.struct_size " + std::to_string(c.struct_size) +
                ": too small (set it to sizeof(attnc_call))");
  if (c.q.ndim != 4)
    return fail(describe("q", c.q) + ": expected [B, H, N, D]");
  return nullptr;
}

attnc_error *checkCallFits(const attnc_variant &var, const attnc_call &c, int64_t keys) {
  if (c.lengths && !var.keyPadding)
    return fail("lengths given, but '" + var.name +
                "' was compiled without key padding (compile with key_padding = 1)");
  if (var.sig.lowrank && keys > var.maxSeq)
    return fail("N = " + std::to_string(keys) + " keys, but '" + var.name +
                "' was compiled with max_seq " + std::to_string(var.maxSeq) +
                " (E's columns); compile it with a larger max_seq");
  if (!var.params.empty() && !c.params)
    return fail("'" + var.name + "' takes " + std::to_string(var.params.size()) +
                " parameter tensor(s) (attnc_variant_param); params is NULL");
  return nullptr;
}

attnc_error *prepare(const attnc_variant &var, const attnc_call &c, bool backward,
                     PreparedCall &p) {
  if (attnc_error *e = checkCall(c))
    return e;
  if (!var.cpu)
    return fail("variant '" + var.name + "' has no CPU kernels");
  const bool copies = c.allow_copies != 0;
  const int64_t B = c.q.shape[0], H = var.heads, N = c.q.shape[2], D = var.headDim;
  if (attnc_error *e = view("q", c.q, {B, H, N, D}, ATTNC_F32, copies, false, p.q))
    return e;
  if (!var.sig.sharedQk)
    if (attnc_error *e = view("k", c.k, {B, H, -1, D}, ATTNC_F32, copies, false, p.k))
      return e;
  const int64_t Nk = var.sig.sharedQk ? N : c.k.shape[2];
  if (attnc_error *e = view("v", c.v, {B, H, Nk, D}, ATTNC_F32, copies, false, p.v))
    return e;
  if (attnc_error *e = checkCallFits(var, c, Nk))
    return e;
  if (c.lengths) {
    if (attnc_error *e = view("lengths", *c.lengths, {B}, ATTNC_I32, copies, false, p.lengths))
      return e;
    const int32_t *len = reinterpret_cast<const int32_t *>(p.lengths.data);
    for (int64_t b = 0; b < B; ++b)
      if (len[b] < 1 || len[b] > Nk)
        return fail("lengths[" + std::to_string(b) + "] = " + std::to_string(len[b]) +
                    ": must be within 1.." + std::to_string(Nk));
  }
  const int numParams = int(var.params.size());
  p.params.resize(size_t(numParams));
  AttentionCall &a = p.call;
  a.B = int(B), a.H = int(H), a.Nq = int(N), a.N = int(Nk), a.D = int(D);
  p.headParams.assign(var.sig.params.size() * size_t(H), 0.f);
  for (int i = 0; i < numParams; ++i) {
    const ParamSpec &ps = var.params[size_t(i)];
    if (attnc_error *e = view(ps.name.c_str(), c.params[i], ps.shape, ATTNC_F32, copies, false,
                              p.params[size_t(i)]))
      return e;
    bindParam(ps, p.params[size_t(i)].data, a, [&](int index, const float *d) -> attnc_error * {
      std::memcpy(&p.headParams[size_t(index) * size_t(H)], d, sizeof(float) * size_t(H));
      return nullptr;
    });
  }
  if (var.sig.lowrank) {
    a.kRows = int(var.params[0].shape[var.params[0].shape.size() - 2]);
    a.nmax = int(var.maxSeq);
  }
  a.params = p.headParams.empty() ? nullptr : p.headParams.data();
  a.q = p.q.data, a.k = var.sig.sharedQk ? p.q.data : p.k.data, a.v = p.v.data;
  a.lengths = c.lengths ? reinterpret_cast<const int32_t *>(p.lengths.data) : nullptr;
  // out and lse: written by the forward, read by a dense backward.
  if (attnc_error *e = view("out", c.out, {B, H, N, D}, ATTNC_F32, copies, !backward, p.out))
    return e;
  if (attnc_error *e = view("lse", c.lse, {B, H, N}, ATTNC_F32, copies, !backward, p.lse))
    return e;
  if (backward) {
    a.savedOut = p.out.data, a.savedLse = p.lse.data;
  } else {
    a.out = p.out.data, a.lse = p.lse.data;
  }
  return nullptr;
}

/// Parameter `index` of `v`, or the error naming the index and the count.
attnc_error *param(const attnc_variant *v, int index, const ParamSpec *&out) {
  if (!v)
    return fail("the variant is NULL");
  if (index < 0 || index >= int(v->params.size()))
    return fail("parameter " + std::to_string(index) + ": '" + v->name + "' has " +
                std::to_string(v->params.size()));
  out = &v->params[size_t(index)];
  return nullptr;
}

attnc_error *checkOptions(const attnc_compile_options *o, const char *who, Target &t) {
  if (!o || o->struct_size < offsetof(attnc_compile_options, arch))
    return fail(std::string(who) +
                ": options missing or too small (use attnc_compile_options_init)");
  // Fields of later versions: their defaults when the caller's struct
  // predates them.
  const bool v2 = o->struct_size >= sizeof(attnc_compile_options);
  const char *archOption = v2 ? o->arch : nullptr;
  t.ordinal = v2 ? o->device : -1;
  t.name = o->target ? o->target : "cpu";
  t.cuda = t.name == "cuda" || t.name == "cuda-sim";
  t.emulated = t.name == "cuda-sim";
  if (t.name != "cpu" && !t.cuda)
    return fail("target '" + t.name + "': expected cpu, cuda or cuda-sim");
  if (!t.cuda && o->dtype != ATTNC_F32)
    return fail(std::string("dtype ") + dtypeName(o->dtype) +
                ": the CPU kernels are fp32 (cast the tensors, or use the CUDA target)");
  if (t.cuda && o->dtype == ATTNC_I32)
    return fail("dtype i32: the CUDA kernels are f32, f16 or bf16");
  t.arch = archOption ? archOption : "";
  t.archGiven = !t.arch.empty();
  if (t.name == "cuda") {
    // The driver loads the kernels: say why there is none before compiling.
    if (Status s = cuda::Driver::available(); !s)
      return fail("target cuda: " + s.error() +
                  " (target cuda-sim runs the CUDA kernels on the CPU, on host memory)");
    if (t.ordinal < 0) {
      Expected<int> own = cuda::processDevice();
      if (!own)
        return fail("target cuda: " + own.error());
      t.ordinal = *own;
    }
    Expected<int> count = cuda::deviceCount();
    if (!count || t.ordinal >= *count)
      return fail("device " + std::to_string(t.ordinal) + ": the driver sees " +
                  (count ? std::to_string(*count) : count.error()) + " device(s)");
    if (t.arch.empty())
      if (Expected<cuda::DeviceInfo> dev = cuda::queryDevice(t.ordinal))
        t.arch = dev->arch();
  }
  if (t.arch.empty())
    t.arch = "sm_80"; // cuda-sim: the tiles an A100 gets, as attnc run --target cuda-sim
  if (t.cuda)
    if (Expected<GpuArch> a = parseGpuArch(t.arch); !a)
      return fail("arch '" + t.arch + "': " + a.error());
  if (o->heads < 1 || o->heads > 1024)
    return fail("heads = " + std::to_string(o->heads) + ": expected 1..1024");
  if (o->head_dim < 1 || o->head_dim > 512)
    return fail("head_dim = " + std::to_string(o->head_dim) + ": expected 1..512");
  return nullptr;
}

attnc_error *describeParams(attnc_variant &v) {
  const AttentionSignature &sig = v.sig;
  v.params.clear();
  auto spec = [](std::string name, std::vector<int64_t> shape, bool learned, ParamSpec::Kind kind) {
    ParamSpec p;
    p.name = std::move(name), p.shape = std::move(shape), p.learned = learned, p.kind = kind;
    return p;
  };
  if (sig.lshRounds > 0)
    v.params.push_back(spec("lsh_rotations", {sig.lshRounds, v.headDim, sig.lshBuckets / 2}, false,
                            ParamSpec::Rotations));
  if (sig.lowrank) {
    if (v.maxSeq < 1)
      return fail("'" + v.name +
                  "' is low-rank: set max_seq, the longest sequence it will see (E and F "
                  "have that many columns)");
    std::vector<int64_t> eShape = sig.share == "none"
                                      ? std::vector<int64_t>{v.heads, sig.k, v.maxSeq}
                                      : std::vector<int64_t>{sig.k, v.maxSeq};
    v.params.insert(v.params.begin(), spec("E", eShape, true, ParamSpec::E));
    if (sig.share != "kv" && sig.share != "layerwise")
      v.params.insert(v.params.begin() + 1, spec("F", eShape, true, ParamSpec::F));
  }
  for (size_t i = 0; i < sig.params.size(); ++i) {
    ParamSpec ps = spec(sig.params[i].name, {v.heads}, sig.params[i].learned, ParamSpec::Head);
    ps.headIndex = int(i);
    ps.decl = sig.params[i];
    v.params.push_back(ps);
  }
  return nullptr;
}

attnc_error *guard(const std::function<attnc_error *()> &fn) {
  try {
    return fn();
  } catch (const std::exception &e) {
    return fail(std::string("attnc: internal error: ") + e.what());
  } catch (...) {
    return fail("attnc: internal error");
  }
}

} // namespace attnc::capi

using namespace attnc::capi;

extern "C" {

int attnc_api_version(void) { return ATTNC_C_API_VERSION; }

const char *attnc_error_message(const attnc_error *error) {
  return error ? error->message.c_str() : "";
}
void attnc_error_free(attnc_error *error) { delete error; }

void attnc_compile_options_init(attnc_compile_options *o) {
  if (!o)
    return;
  std::memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->target = "cpu";
  o->dtype = ATTNC_F32;
  o->backward = 1;
  o->arch = nullptr;
  o->device = -1;
}

attnc_error *attnc_load(const char *dir, const char *name, const attnc_compile_options *o,
                        attnc_variant **variant) {
  return guard([&]() -> attnc_error * {
    if (!variant)
      return fail("attnc_load: variant is NULL");
    *variant = nullptr;
    if (!dir)
      return fail("attnc_load: dir is NULL");
    Target target;
    if (attnc_error *e = checkOptions(o, "attnc_load", target))
      return e;
    Expected<Artifact> art = openArtifact(dir);
    if (!art)
      return fail(art.error());
    const Manifest &m = art->manifest;
    if (m.target != (target.cuda ? "cuda" : "cpu"))
      return fail(std::string(dir) + " holds " + m.target + " kernels; target " + target.name +
                  " runs " + (target.cuda ? "cuda" : "cpu") + " ones (attnc compile --target " +
                  (target.cuda ? "cuda" : "cpu") + ")");
    // The forward kernel (by its name or its function's), and its backward.
    const ManifestKernel *fwd = nullptr, *bwd = nullptr;
    std::string names;
    const std::string want = name ? name : "";
    for (const ManifestKernel &k : m.kernels)
      if (!k.backward) {
        names += (names.empty() ? "" : ", ") + k.name;
        if (!fwd && (want.empty() || k.name == want || k.function == want))
          fwd = &k;
      }
    if (!fwd)
      return fail(std::string(dir) + ": " +
                  (want.empty() ? std::string("no forward kernel")
                                : "no forward kernel '" + want + "' (it has: " + names + ")"));
    for (const ManifestKernel &k : m.kernels)
      if (k.backward && k.function == fwd->function)
        bwd = &k;
    if (o->backward && !bwd)
      return fail(std::string(dir) + ": kernel " + fwd->name +
                  " has no backward (compile the spec with a backward, or set backward = 0)");
    if (fwd->headDim != o->head_dim)
      return fail("head_dim = " + std::to_string(o->head_dim) + ", but " + dir +
                  " was compiled for head dim " + std::to_string(fwd->headDim));
    const attnc_dtype dtype = fwd->dtype == "f16"    ? ATTNC_F16
                              : fwd->dtype == "bf16" ? ATTNC_BF16
                                                     : ATTNC_F32;
    if (dtype != o->dtype)
      return fail(std::string("dtype ") + dtypeName(o->dtype) + ", but " + dir + "'s kernels are " +
                  fwd->dtype);

    auto v = std::make_unique<attnc_variant>();
    v->name = fwd->name;
    v->heads = o->heads, v->headDim = o->head_dim;
    v->sig = signatureOf(*fwd);
    v->keyPadding = fwd->keyPadding;
    v->maxSeq = v->sig.lowrank ? fwd->maxSeq : 0;
    if (attnc_error *e = describeParams(*v))
      return e;
    Expected<std::string> source = art->file(m.source);
    if (!source)
      return fail(source.error());
    std::optional<KernelDesc> bwdDesc;
    if (bwd && o->backward)
      bwdDesc = bwd->desc();
    Expected<std::vector<std::string>> dirs =
        kernelIncludeDirs(target.cuda ? KernelFamily::Cuda : KernelFamily::Cpu);
    if (!dirs)
      return fail(dirs.error());
    HostCompiler host(&KernelCache::processDefault());
    if (!target.cuda) {
      Expected<CpuAttention> kernels =
          CpuAttention::compile(*source, fwd->desc(), bwdDesc, *dirs, host);
      if (!kernels)
        return fail(kernels.error());
      v->cpu.emplace(std::move(kernels).take());
      *variant = v.release();
      return nullptr;
    }
    auto state = std::make_unique<CudaState>();
    state->emulated = target.emulated, state->ordinal = target.ordinal, state->dtype = dtype;
    NvrtcCompiler nvrtc(&KernelCache::processDefault());
    // cuda-sim emulates options.arch when given, else the artifact's.
    const std::string emulatedArch = target.archGiven ? target.arch : m.arch;
    Expected<CudaAttention> kernels =
        target.emulated ? CudaAttention::compileEmulated(*source, m.arch, emulatedArch, fwd->dtype,
                                                         fwd->desc(), bwdDesc, host)
                        : CudaAttention::compile(*source, m.arch, fwd->dtype, fwd->desc(), bwdDesc,
                                                 *dirs, nvrtc,
                                                 /*retile=*/true, /*ptxArch=*/"", target.ordinal);
    if (!kernels)
      return fail(kernels.error());
    state->kernels.emplace(std::move(kernels).take());
    v->cuda = std::move(state);
    if (attnc_error *e = prepareCuda(*v, *v->cuda))
      return e;
    *variant = v.release();
    return nullptr;
  });
}

void attnc_variant_free(attnc_variant *variant) { delete variant; }

const char *attnc_variant_name(const attnc_variant *v) { return v ? v->name.c_str() : ""; }
int attnc_variant_shared_qk(const attnc_variant *v) { return v && v->sig.sharedQk ? 1 : 0; }
int attnc_variant_from_cache(const attnc_variant *v) {
  return v && v->cpu && v->cpu->fromCache() ? 1 : 0;
}
void attnc_variant_tile(const attnc_variant *v, int64_t *blockQ, int64_t *blockKv) {
  const KernelDesc *k = !v        ? nullptr
                        : v->cuda ? &v->cuda->kernels->forwardKernel()
                        : v->cpu  ? &v->cpu->forwardDesc()
                                  : nullptr;
  if (blockQ)
    *blockQ = k ? k->blockQ : 0;
  if (blockKv)
    *blockKv = k ? k->blockKv : 0;
}

attnc_dtype attnc_variant_tensor_dtype(const attnc_variant *v) {
  if (!v || !v->cuda)
    return ATTNC_F32;
  const KernelDesc &k = v->cuda->kernels->forwardKernel();
  // Low-rank kernels (and the LSH dense fallback) take f32 tensors: their
  // projections and normalisations run in f32 around the kernels.
  return k.lowrank || (k.sharedQk && !k.lsh) ? ATTNC_F32 : v->cuda->dtype;
}

int attnc_variant_num_params(const attnc_variant *v) { return v ? int(v->params.size()) : 0; }

attnc_error *attnc_variant_param(const attnc_variant *v, int index, attnc_param_info *info) {
  if (!info)
    return fail("attnc_variant_param: info is NULL");
  const ParamSpec *found = nullptr;
  if (attnc_error *e = param(v, index, found))
    return e;
  const ParamSpec &p = *found;
  std::memset(info, 0, sizeof *info);
  info->name = p.name.c_str();
  info->ndim = int(p.shape.size());
  for (size_t d = 0; d < p.shape.size(); ++d)
    info->shape[d] = p.shape[d];
  info->learned = p.learned ? 1 : 0;
  return nullptr;
}

attnc_error *attnc_variant_init_param(const attnc_variant *v, int index, uint64_t seed,
                                      const attnc_tensor *out) {
  return guard([&]() -> attnc_error * {
    if (!out)
      return fail("attnc_variant_init_param: out is NULL");
    const ParamSpec *found = nullptr;
    if (attnc_error *e = param(v, index, found))
      return e;
    const ParamSpec &p = *found;
    View dst;
    if (attnc_error *e = view(p.name.c_str(), *out, p.shape, ATTNC_F32, false, true, dst))
      return e;
    const int64_t n = p.numel();
    std::vector<float> values;
    switch (p.kind) {
    case ParamSpec::E:
    case ParamSpec::F:
      values = randomProjection(seed, p.name, p.shape).asF32();
      break;
    case ParamSpec::Rotations:
      values.resize(size_t(n));
      philox::lshRotations(v->sig.lshSeed, /*stream=*/0, values);
      break;
    case ParamSpec::Head:
      for (int64_t h = 0; h < v->heads; ++h)
        values.push_back(p.decl.alibi ? float(std::exp2(-8.0 * double(h + 1) / double(v->heads)))
                                      : float(p.decl.value));
      break;
    }
    std::memcpy(dst.data, values.data(), sizeof(float) * size_t(n));
    return nullptr;
  });
}

attnc_error *attnc_forward(const attnc_variant *v, const attnc_call *c) {
  return guard([&]() -> attnc_error * {
    if (!v || !c)
      return fail("attnc_forward: variant or call is NULL");
    if (v->cuda)
      return cudaForward(*v, *c);
    PreparedCall p;
    if (attnc_error *e = prepare(*v, *c, /*backward=*/false, p))
      return e;
    if (Status s = v->cpu->call(p.call); !s)
      return fail(s.error());
    scatter(p.out), scatter(p.lse);
    return nullptr;
  });
}

attnc_error *attnc_backward(const attnc_variant *v, const attnc_call *c) {
  return guard([&]() -> attnc_error * {
    if (!v || !c)
      return fail("attnc_backward: variant or call is NULL");
    if (c->struct_size < sizeof(attnc_call))
      return fail("attnc_call.struct_size " + std::to_string(c->struct_size) +
                  ": too small for a backward (set it to sizeof(attnc_call))");
    if (v->cuda)
      return cudaBackward(*v, *c);
    if (!v->cpu->backwardDesc())
      return fail("'" + v->name + "' was compiled without its backward (options.backward = 1)");
    PreparedCall p;
    if (attnc_error *e = prepare(*v, *c, /*backward=*/true, p))
      return e;
    const bool copies = c->allow_copies != 0;
    const int64_t B = p.call.B, H = p.call.H, N = p.call.Nq, Nk = p.call.N, D = p.call.D;
    View dout, dq, dk, dv;
    if (attnc_error *e = view("dout", c->dout, {B, H, N, D}, ATTNC_F32, copies, false, dout))
      return e;
    if (attnc_error *e = view("dq", c->dq, {B, H, N, D}, ATTNC_F32, copies, true, dq))
      return e;
    std::vector<float> dkScratch;
    if (v->sig.sharedQk) { // the kernels fold dk into dq
      dkScratch.assign(size_t(B * H * Nk * D), 0.f);
      dk.data = dkScratch.data();
    } else if (attnc_error *e = view("dk", c->dk, {B, H, Nk, D}, ATTNC_F32, copies, true, dk)) {
      return e;
    }
    if (attnc_error *e = view("dv", c->dv, {B, H, Nk, D}, ATTNC_F32, copies, true, dv))
      return e;
    AttentionCall &a = p.call;
    a.dout = dout.data, a.dq = dq.data, a.dk = dk.data, a.dv = dv.data;
    // Parameter gradients: E and F straight into the caller's tensors;
    // per-head ones through [P, H].
    const int numParams = int(v->params.size());
    std::vector<View> dparams(static_cast<size_t>(numParams));
    std::vector<float> dHead(v->sig.params.size() * size_t(H), 0.f);
    std::vector<float> dE, dF;
    for (int i = 0; i < numParams; ++i) {
      const ParamSpec &ps = v->params[size_t(i)];
      const bool wanted = ps.learned && c->dparams && c->dparams[i].data;
      if (wanted)
        if (attnc_error *e = view(("d" + ps.name).c_str(), c->dparams[i], ps.shape, ATTNC_F32,
                                  copies, true, dparams[size_t(i)]))
          return e;
      float *dst = wanted ? dparams[size_t(i)].data : nullptr;
      const int64_t n = ps.numel();
      if (ps.kind == ParamSpec::E) {
        if (!dst)
          dE.assign(size_t(n), 0.f), dst = dE.data();
        a.dE = dst;
      } else if (ps.kind == ParamSpec::F) {
        if (!dst)
          dF.assign(size_t(n), 0.f), dst = dF.data();
        a.dF = dst;
      }
    }
    a.dparams = dHead.empty() ? nullptr : dHead.data();
    if (Status s = v->cpu->call(a); !s)
      return fail(s.error());
    for (int i = 0; i < numParams; ++i) {
      const ParamSpec &ps = v->params[size_t(i)];
      View &d = dparams[size_t(i)];
      if (!d.data)
        continue;
      if (ps.kind == ParamSpec::Head)
        std::memcpy(d.data, &dHead[size_t(ps.headIndex) * size_t(H)], sizeof(float) * size_t(H));
      scatter(d);
    }
    scatter(dq), scatter(dk), scatter(dv);
    return nullptr;
  });
}

} // extern "C"
