//===- CApi.cpp - attnc's C ABI over the driver and the runtime -----------===//
//
// bindings/c/include/attnc/attnc.h. Compiling goes through the driver (the
// spec's front end, the resolve and kernel pipelines, the emitters) and
// the runtime's CPU kernels; running calls CpuAttention::call on the
// caller's buffers. The driver reports its errors on std::cerr; a compile
// here captures that stream (one compile at a time) and returns what it
// said as the error's message. CUDA variants run in CApiCuda.cpp.
//
//===----------------------------------------------------------------------===//
#include "CApiInternal.h"

#include "codegen/AttentionFunction.h"
#include "driver/Run.h"
#include "driver/Spec.h"
#include "dsl/AttnDialect.h"
#include "dsl/Diagnostics.h"
#include "dsl/MLIRGen.h"
#include "dsl/Parser.h"
#include "runtime/AttentionIO.h"
#include "runtime/CudaDriver.h"
#include "runtime/CpuAttention.h"
#include "runtime/Philox.h"

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

using namespace attnc;

namespace attnc::capi {

attnc_error *fail(std::string message) { return new attnc_error{std::move(message)}; }

/// std::cerr into a string while alive (the driver prints its errors).
class CaptureErrors {
public:
  CaptureErrors() : old_(std::cerr.rdbuf(text_.rdbuf())) {}
  ~CaptureErrors() { std::cerr.rdbuf(old_); }
  std::string text() const {
    std::string t = text_.str();
    while (!t.empty() && (t.back() == '\n' || t.back() == ' '))
      t.pop_back();
    return t;
  }

private:
  std::ostringstream text_;
  std::streambuf *old_;
};

std::mutex &compileMutex() {
  static std::mutex m;
  return m;
}

/// The spec's text: `spec` itself, or the file it names.
bool specText(const char *spec, std::string &text, std::string &where, std::string &err) {
  const std::string s = spec;
  const bool looksLikePath = s.find('\n') == std::string::npos && s.find('{') == std::string::npos;
  if (looksLikePath) {
    where = s;
    return driver::readSpecFile(s, text, err);
  }
  where = "<spec>";
  text = s;
  return true;
}

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
struct Prepared {
  AttentionCall call;
  View q, k, v, lengths, out, lse;
  std::vector<View> params;
  std::vector<float> headParams; ///< [P, H], gathered from the per-head tensors
};

attnc_error *prepare(const attnc_variant &var, const attnc_call &c, bool backward, Prepared &p) {
  if (c.struct_size < offsetof(attnc_call, dout))
    return fail("attnc_call.struct_size " + std::to_string(c.struct_size) +
                ": too small (set it to sizeof(attnc_call))");
  if (!var.cpu)
    return fail("variant '" + var.name + "' has no CPU kernels");
  const bool copies = c.allow_copies != 0;
  if (c.q.ndim != 4)
    return fail(describe("q", c.q) + ": expected [B, H, N, D]");
  const int64_t B = c.q.shape[0], H = var.heads, N = c.q.shape[2], D = var.headDim;
  if (attnc_error *e = view("q", c.q, {B, H, N, D}, ATTNC_F32, copies, false, p.q))
    return e;
  if (!var.sig.sharedQk)
    if (attnc_error *e = view("k", c.k, {B, H, -1, D}, ATTNC_F32, copies, false, p.k))
      return e;
  const int64_t Nk = var.sig.sharedQk ? N : c.k.shape[2];
  if (var.sig.sharedQk && Nk != N)
    return fail("internal");
  if (attnc_error *e = view("v", c.v, {B, H, Nk, D}, ATTNC_F32, copies, false, p.v))
    return e;
  if (c.lengths) {
    if (!var.keyPadding)
      return fail("lengths given, but '" + var.name +
                  "' was compiled without key padding (compile with key_padding = 1)");
    if (attnc_error *e = view("lengths", *c.lengths, {B}, ATTNC_I32, copies, false, p.lengths))
      return e;
    const int32_t *len = reinterpret_cast<const int32_t *>(p.lengths.data);
    for (int64_t b = 0; b < B; ++b)
      if (len[b] < 1 || len[b] > Nk)
        return fail("lengths[" + std::to_string(b) + "] = " + std::to_string(len[b]) +
                    ": must be within 1.." + std::to_string(Nk));
  }
  if (var.sig.lowrank && Nk > var.maxSeq)
    return fail("N = " + std::to_string(Nk) + " keys, but '" + var.name +
                "' was compiled with max_seq " + std::to_string(var.maxSeq) +
                " (E's columns); compile it with a larger max_seq");
  const int numParams = int(var.params.size());
  if (numParams > 0 && !c.params)
    return fail("'" + var.name + "' takes " + std::to_string(numParams) +
                " parameter tensor(s) (attnc_variant_param); params is NULL");
  p.params.resize(size_t(numParams));
  AttentionCall &a = p.call;
  a.B = int(B), a.H = int(H), a.Nq = int(N), a.N = int(Nk), a.D = int(D);
  p.headParams.assign(var.sig.params.size() * size_t(H), 0.f);
  for (int i = 0; i < numParams; ++i) {
    const ParamSpec &ps = var.params[size_t(i)];
    if (attnc_error *e = view(ps.name.c_str(), c.params[i], ps.shape, ATTNC_F32, copies, false,
                              p.params[size_t(i)]))
      return e;
    const float *d = p.params[size_t(i)].data;
    switch (ps.kind) {
    case ParamSpec::E:
      a.E = d;
      break;
    case ParamSpec::F:
      a.F = d;
      break;
    case ParamSpec::Rotations:
      a.rotations = d;
      break;
    case ParamSpec::Head:
      std::memcpy(&p.headParams[size_t(ps.headIndex) * size_t(H)], d, sizeof(float) * size_t(H));
      break;
    }
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

attnc_error *attnc_compile(const char *spec, const char *name, const attnc_compile_options *o,
                           attnc_variant **variant) {
  return guard([&]() -> attnc_error * {
    if (!variant)
      return fail("attnc_compile: variant is NULL");
    *variant = nullptr;
    if (!spec)
      return fail("attnc_compile: spec is NULL");
    if (!o || o->struct_size < offsetof(attnc_compile_options, arch))
      return fail("attnc_compile: options missing or too small (use attnc_compile_options_init)");
    // Fields of later versions: their defaults when the caller's struct
    // predates them.
    const bool v2 = o->struct_size >= sizeof(attnc_compile_options);
    const char *archOption = v2 ? o->arch : nullptr;
    const int deviceOption = v2 ? o->device : -1;
    const std::string target = o->target ? o->target : "cpu";
    const bool cuda = target == "cuda" || target == "cuda-sim";
    if (target != "cpu" && !cuda)
      return fail("target '" + target + "': expected cpu, cuda or cuda-sim");
    if (!cuda && o->dtype != ATTNC_F32)
      return fail(std::string("dtype ") + dtypeName(o->dtype) +
                  ": the CPU kernels are fp32 (cast the tensors, or use the CUDA target)");
    if (cuda && o->dtype == ATTNC_I32)
      return fail("dtype i32: the CUDA kernels are f32, f16 or bf16");
    std::string arch = archOption ? archOption : "";
    if (target == "cuda") {
      // The driver loads the kernels: say why there is none before compiling.
      if (Status s = cuda::Driver::available(); !s)
        return fail("target cuda: " + s.error() +
                    " (target cuda-sim runs the CUDA kernels on the CPU, on host memory)");
      int ordinal = deviceOption;
      if (ordinal < 0) {
        Expected<int> own = cuda::processDevice();
        if (!own)
          return fail("target cuda: " + own.error());
        ordinal = *own;
      }
      Expected<int> count = cuda::deviceCount();
      if (!count || ordinal >= *count)
        return fail("device " + std::to_string(ordinal) + ": the driver sees " +
                    (count ? std::to_string(*count) : count.error()) + " device(s)");
      if (arch.empty())
        if (Expected<cuda::DeviceInfo> dev = cuda::queryDevice(ordinal))
          arch = dev->arch();
    }
    if (arch.empty())
      arch = "sm_80"; // cuda-sim: the tiles an A100 gets, as attnc run --target cuda-sim
    if (cuda)
      if (Expected<GpuArch> a = parseGpuArch(arch); !a)
        return fail("arch '" + arch + "': " + a.error());
    if (o->heads < 1 || o->heads > 1024)
      return fail("heads = " + std::to_string(o->heads) + ": expected 1..1024");
    if (o->head_dim < 1 || o->head_dim > 512)
      return fail("head_dim = " + std::to_string(o->head_dim) + ": expected 1..512");

    std::string text, where, err;
    if (!specText(spec, text, where, err))
      return fail(err);
    std::lock_guard<std::mutex> lock(compileMutex());
    CaptureErrors captured;
    auto failed = [&](const std::string &what) {
      std::string said = captured.text();
      return fail(said.empty() ? what : what + ":\n" + said);
    };
    mlir::MLIRContext context;
    mlir::ScopedDiagnosticHandler diagnostics(&context, driver::printDiagnostic);
    DiagnosticEngine diag(text, std::cerr);
    std::optional<ast::Spec> parsed = parseAndCheck(text, where, diag);
    if (!parsed)
      return failed("the spec " + (where == "<spec>" ? std::string("text") : where) +
                    " has errors");
    registerAttncDialects(context);
    mlir::OwningOpRef<mlir::ModuleOp> module = mlirGen(context, *parsed);
    if (!module)
      return failed("the spec could not be built");
    if (!driver::runResolvePipeline(*module, ResolvePipelineOptions()))
      return failed("resolving the spec's 'auto' choices failed");

    std::vector<attn::VariantOp> variants(module->getOps<attn::VariantOp>().begin(),
                                          module->getOps<attn::VariantOp>().end());
    attn::VariantOp chosen;
    std::string names;
    const std::string want = name ? name : "";
    for (attn::VariantOp v : variants) {
      names += (names.empty() ? "" : ", ") + v.getSymName().str();
      if (v.getSymName() == want || (want.empty() && variants.size() == 1))
        chosen = v;
    }
    if (!chosen)
      return fail(variants.empty() ? std::string("the spec has no attention variant")
                  : want.empty()
                      ? "the spec has " + std::to_string(variants.size()) +
                            " attention variants (" + names + "); name one"
                      : "no attention variant '" + want + "' (the spec has: " + names + ")");

    auto v = std::make_unique<attnc_variant>();
    v->name = chosen.getSymName().str();
    v->heads = o->heads, v->headDim = o->head_dim;
    v->keyPadding = o->key_padding != 0 || chosen.getKeyPadding();
    AttentionSignature &sig = v->sig;
    sig.name = v->name;
    sig.keyPadding = chosen.getKeyPadding();
    sig.sharedQk = chosen.getSharedQk();
    if (auto lsh = chosen.getLshAttr()) {
      sig.lshRounds = lsh.getRounds();
      sig.lshBuckets = lsh.getBuckets();
      sig.lshSeed = uint64_t(lsh.getSeed());
      v->params.push_back({"lsh_rotations",
                           {sig.lshRounds, o->head_dim, sig.lshBuckets / 2},
                           false,
                           ParamSpec::Rotations});
    }
    if (auto lr = chosen.getLowrankAttr()) {
      if (o->max_seq < 1)
        return fail("'" + v->name +
                    "' is low-rank: set max_seq, the longest sequence it will see (E and F "
                    "have that many columns)");
      sig.lowrank = true;
      sig.share = stringifyShareMode(lr.getShare()).str();
      sig.k = lr.getK();
      v->maxSeq = o->max_seq;
      std::vector<int64_t> eShape = sig.share == "none"
                                        ? std::vector<int64_t>{o->heads, sig.k, o->max_seq}
                                        : std::vector<int64_t>{sig.k, o->max_seq};
      v->params.insert(v->params.begin(), {"E", eShape, true, ParamSpec::E});
      if (sig.share != "kv" && sig.share != "layerwise")
        v->params.insert(v->params.begin() + 1, {"F", eShape, true, ParamSpec::F});
    }
    if (auto decls = chosen.getParams())
      for (mlir::Attribute a : *decls) {
        auto hp = llvm::cast<attn::HeadParamAttr>(a);
        ParamDecl d{hp.getName().str(), hp.getInit() == attn::ParamInit::alibi,
                    float(hp.getValue().convertToDouble()), hp.getLearned()};
        sig.params.push_back(d);
        ParamSpec ps{d.name, {o->heads}, d.learned, ParamSpec::Head};
        ps.headIndex = int(sig.params.size()) - 1;
        ps.decl = d;
        v->params.push_back(ps);
      }

    codegen::AttentionShape shape;
    shape.heads = o->heads, shape.headDim = o->head_dim;
    shape.maxSeq = sig.lowrank ? o->max_seq : 0;
    shape.elementType = o->dtype == ATTNC_F16    ? mlir::Type(mlir::Float16Type::get(&context))
                        : o->dtype == ATTNC_BF16 ? mlir::Type(mlir::BFloat16Type::get(&context))
                                                 : mlir::Type(mlir::Float32Type::get(&context));
    shape.withLengths = v->keyPadding;
    shape.differentiate = o->backward != 0;
    if (cuda) {
      auto state = std::make_unique<CudaState>();
      state->emulated = target == "cuda-sim";
      state->ordinal = state->emulated ? -1 : (deviceOption >= 0 ? deviceOption : 0);
      if (!state->emulated && deviceOption < 0)
        if (Expected<int> own = cuda::processDevice())
          state->ordinal = *own;
      state->dtype = o->dtype;
      if (driver::compileCudaAttention(*module, chosen, shape, arch, state->emulated,
                                       state->kernels, state->ordinal) != driver::kExitOk)
        return failed("compiling '" + v->name + "' for " + target + " (" + arch + ") failed");
      v->cuda = std::move(state);
      if (attnc_error *e = prepareCuda(*v, *v->cuda))
        return e;
      *variant = v.release();
      return nullptr;
    }
    std::optional<CpuAttention> kernels;
    if (driver::compileCpuAttention(*module, chosen, shape, kernels) != driver::kExitOk)
      return failed("compiling '" + v->name + "' for the CPU failed");
    v->cpu = std::move(kernels);
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
    Prepared p;
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
    Prepared p;
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
