//===- Run.cpp - attnc run: one attention op on safetensors inputs --------===//
#include "tools/attnc/Run.h"
#include "tools/attnc/Compile.h"

#include "codegen/AttentionFunction.h"
#include "dsl/AttnDialect.h"
#include "dsl/MLIRGen.h"
#include "dsl/Parser.h"
#include "runtime/CpuAttention.h"
#include "runtime/CudaDriver.h"
#include "runtime/KernelCache.h"
#include "runtime/Safetensors.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <sstream>

using namespace mlir;

namespace attnc::driver {

namespace {

int fail(const std::string &msg) {
  std::cerr << "attnc run: error: " << msg << "\n";
  return kExitInput;
}

/// Checks one tensor's dtype and shape (-1: any size); the error names the
/// file, the tensor and what was expected.
bool expectTensor(const std::string &file, const std::string &name, const st::Tensor &t,
                  st::DType dtype, const std::vector<int64_t> &shape, const std::string &what,
                  std::string &err) {
  bool ok = t.dtype == dtype && t.shape.size() == shape.size();
  for (size_t i = 0; ok && i < shape.size(); ++i)
    ok = shape[i] < 0 || shape[i] == t.shape[i];
  if (ok)
    return true;
  std::string want = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    want += (i ? ", " : "") + (shape[i] < 0 ? std::string("*") : std::to_string(shape[i]));
  err = file + ": tensor '" + name + "' is " + st::dtypeName(t.dtype) + " " + t.shapeStr() +
        "; expected " + st::dtypeName(dtype) + " " + want + "]" + (what.empty() ? "" : " " + what);
  return false;
}

/// Counter-based normal samples: the same (seed, tensor, index) always gives
/// the same value, on any machine and in any order.
float normalAt(uint64_t seed, const std::string &tensor, uint64_t index) {
  auto mix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  uint64_t key = seed;
  for (char c : tensor)
    key = mix(key ^ static_cast<uint8_t>(c));
  uint64_t a = mix(key ^ (2 * index)), b = mix(key ^ (2 * index + 1));
  double u1 = (double(a >> 11) + 1.0) / 9007199254740993.0; // (0, 1]
  double u2 = double(b >> 11) / 9007199254740992.0;
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

st::Tensor randomProjection(uint64_t seed, const std::string &name, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  int64_t k = shape[shape.size() - 2], nmax = shape.back();
  // Xavier-normal scale over [k, Nmax], as fairseq initialises Linformer's E.
  float stddev = float(std::sqrt(2.0 / double(k + nmax)));
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = stddev * normalAt(seed, name, uint64_t(i));
  return st::Tensor::f32(std::move(shape), v);
}

} // namespace

int compileCpuAttention(ModuleOp module, attn::VariantOp variant,
                        const codegen::AttentionShape &shape, std::optional<CpuAttention> &out) {
  // A module of its own: this variant and one function, so kernel names and
  // the emitted translation unit hold exactly this op.
  OwningOpRef<ModuleOp> scratch = ModuleOp::create(module.getLoc());
  OpBuilder b(scratch->getBody(), scratch->getBody()->begin());
  auto copy = llvm::cast<attn::VariantOp>(b.clone(*variant));
  if (failed(codegen::buildAttentionFunction(*scratch, copy, "attention", shape)))
    return kExitInput;
  CompiledKernels compiled;
  if (int rc = compileFunctions(*scratch, "cpu", "sm_80", compiled))
    return rc;
  auto desc = [](const codegen::KernelInfo &k) {
    KernelDesc d;
    d.name = k.name, d.backward = k.backward, d.headDim = int(k.headDim);
    d.blockQ = int(k.blockQ), d.blockKv = int(k.blockKv);
    d.causal = k.causal, d.keyPadding = k.keyPadding, d.numParams = int(k.numParams);
    d.lowrank = k.kvSource == "lowrank", d.share = k.share, d.scale = float(k.scale);
    d.entryPoints = k.entryPoints;
    return d;
  };
  std::optional<KernelDesc> fwd, bwd;
  for (const codegen::KernelInfo &k : compiled.kernels)
    (k.backward ? bwd : fwd) = desc(k);
  if (!fwd) {
    std::cerr << "attnc: error: internal: the pipeline produced no forward kernel\n";
    return kExitInput;
  }
  if (!shape.differentiate)
    bwd.reset();
  static HostCompiler compiler(&KernelCache::processDefault());
  Expected<CpuAttention> kernels =
      CpuAttention::compile(compiled.source, *fwd, bwd, defaultKernelIncludeDirs(), compiler);
  if (!kernels) {
    std::cerr << "attnc: error: " << kernels.error() << "\n";
    return kExitInput;
  }
  out.emplace(std::move(kernels).take());
  return kExitOk;
}

int runAttention(const RunOptions &opt) {
  // --- the variant
  std::string name;
  if (opt.op != "attention") {
    if (opt.op.rfind("attention:", 0) != 0)
      return fail("unknown --op '" + opt.op + "'; expected attention or attention:NAME");
    name = opt.op.substr(10);
  }
  std::ifstream specFile(opt.spec, std::ios::binary);
  if (!specFile)
    return fail("cannot open '" + opt.spec + "'");
  std::stringstream ss;
  ss << specFile.rdbuf();
  std::string text = ss.str();
  DiagnosticEngine diag(text, std::cerr);
  std::optional<ast::Spec> spec = parseAndCheck(text, opt.spec, diag);
  if (!spec)
    return kExitInput;
  MLIRContext context;
  registerAttncDialects(context);
  OwningOpRef<ModuleOp> module = mlirGen(context, *spec);
  if (!module)
    return kExitInput;
  SmallVector<attn::VariantOp> variants(module->getOps<attn::VariantOp>());
  attn::VariantOp variant;
  std::string names;
  for (attn::VariantOp v : variants) {
    names += (names.empty() ? "" : ", ") + v.getSymName().str();
    if (v.getSymName() == name || (name.empty() && variants.size() == 1))
      variant = v;
  }
  if (!variant)
    return fail(name.empty() ? "the spec has " + std::to_string(variants.size()) +
                                   " attention variants (" + names +
                                   "); name one with --op attention:NAME"
                             : "no attention variant '" + name + "' in " + opt.spec +
                                   " (it has: " + names + ")");
  if (variant.getLsh()) {
    std::cerr << "attnc run: LSH attention kernels are not implemented yet\n";
    return kExitNotImplemented;
  }

  // --- inputs
  std::string err;
  st::File in, weights, grad;
  if (!st::read(opt.inputs, in, err))
    return fail(err);
  auto get = [&](st::File &f, const std::string &file, const std::string &t,
                 bool required) -> const st::Tensor * {
    auto it = f.tensors.find(t);
    if (it != f.tensors.end())
      return &it->second;
    if (required)
      err = file + ": missing tensor '" + t + "'";
    return nullptr;
  };
  const st::Tensor *q = get(in, opt.inputs, "q", true);
  const st::Tensor *k = q ? get(in, opt.inputs, "k", true) : nullptr;
  const st::Tensor *v = k ? get(in, opt.inputs, "v", true) : nullptr;
  if (!v)
    return fail(err);
  if (q->shape.size() != 4 || q->dtype != st::DType::F32)
    return fail(opt.inputs + ": tensor 'q' is " + st::dtypeName(q->dtype) + " " +
                q->shapeStr() + "; expected F32 [B, H, N, Dh]");
  int64_t B = q->shape[0], H = q->shape[1], N = q->shape[2], D = q->shape[3];
  if (!expectTensor(opt.inputs, "k", *k, st::DType::F32, {B, H, N, D}, "(like q)", err) ||
      !expectTensor(opt.inputs, "v", *v, st::DType::F32, {B, H, N, D}, "(like q)", err))
    return fail(err);
  if (B < 1 || H < 1 || N < 1 || D < 1)
    return fail(opt.inputs + ": tensor 'q' " + q->shapeStr() + " has an empty dimension");
  const st::Tensor *lengths = get(in, opt.inputs, "lengths", false);
  if (lengths) {
    if (!expectTensor(opt.inputs, "lengths", *lengths, st::DType::I32, {B}, "", err))
      return fail(err);
    const int32_t *len = reinterpret_cast<const int32_t *>(lengths->data.data());
    for (int64_t b = 0; b < B; ++b)
      if (len[b] < 0 || len[b] > N)
        return fail(opt.inputs + ": lengths[" + std::to_string(b) + "] = " +
                    std::to_string(len[b]) + " is outside [0, " + std::to_string(N) + "]");
    if (!variant.getKeyPadding())
      std::cerr << "attnc run: warning: '" << variant.getSymName().str()
                << "' has no 'mask padding'; the 'lengths' input is ignored\n";
  }
  if (!opt.weights.empty() && !st::read(opt.weights, weights, err))
    return fail(err);
  const st::Tensor *dout = nullptr;
  if (!opt.grad.empty()) {
    if (!st::read(opt.grad, grad, err))
      return fail(err);
    if (!(dout = get(grad, opt.grad, "dout", true)))
      return fail(err);
    if (!expectTensor(opt.grad, "dout", *dout, st::DType::F32, {B, H, N, D}, "(like q)", err))
      return fail(err);
  }

  // --- weights: from the file, or drawn from the seed
  st::Tensor eStore, fStore, paramStore;
  const st::Tensor *E = nullptr, *F = nullptr, *params = nullptr;
  if (auto lr = variant.getLowrankAttr()) {
    bool perHead = lr.getShare() == attn::ShareMode::none;
    bool shared = lr.getShare() == attn::ShareMode::kv || lr.getShare() == attn::ShareMode::layerwise;
    E = get(weights, opt.weights, "E", false);
    int64_t kRows = lr.isAutoK() ? (E ? E->shape[E->shape.size() - 2] : std::min<int64_t>(256, N))
                                 : lr.getK();
    std::vector<int64_t> want = perHead ? std::vector<int64_t>{H, kRows, -1}
                                        : std::vector<int64_t>{kRows, -1};
    std::string what = perHead ? "([H, k, Nmax] with share = none)" : "([k, Nmax])";
    if (E && !expectTensor(opt.weights, "E", *E, st::DType::F32, want, what, err))
      return fail(err);
    int64_t nmax = E ? E->shape.back() : N;
    if (nmax < N)
      return fail(opt.weights + ": tensor 'E' covers " + std::to_string(nmax) +
                  " positions; the inputs have N = " + std::to_string(N));
    want.back() = nmax;
    if (!E) {
      eStore = randomProjection(opt.seed, "E", perHead ? std::vector<int64_t>{H, kRows, nmax}
                                                       : std::vector<int64_t>{kRows, nmax});
      E = &eStore;
    }
    F = get(weights, opt.weights, "F", false);
    if (shared && F)
      return fail(opt.weights + ": tensor 'F' given, but share = " +
                  stringifyShareMode(lr.getShare()).str() + " uses E for both keys and values");
    if (!shared) {
      if (F && !expectTensor(opt.weights, "F", *F, st::DType::F32, want, "(like E)", err))
        return fail(err);
      if (!F) {
        fStore = randomProjection(opt.seed, "F", E->shape);
        F = &fStore;
      }
    }
    variant.setLowrankAttr(attn::LowRankAttr::get(&context, kRows, lr.getShare()));
  }
  std::vector<std::string> paramNames;
  if (auto decls = variant.getParams(); decls && !decls->empty()) {
    std::vector<float> values;
    for (Attribute a : *decls) {
      auto p = llvm::cast<attn::HeadParamAttr>(a);
      paramNames.push_back(p.getName().str());
      const st::Tensor *given = get(weights, opt.weights, p.getName().str(), false);
      if (given) {
        if (!expectTensor(opt.weights, p.getName().str(), *given, st::DType::F32, {H},
                          "(one value per head)", err))
          return fail(err);
        std::vector<float> g = given->asF32();
        values.insert(values.end(), g.begin(), g.end());
        continue;
      }
      for (int64_t h = 0; h < H; ++h)
        values.push_back(p.getInit() == attn::ParamInit::alibi
                             ? float(std::exp2(-8.0 * double(h + 1) / double(H)))
                             : float(p.getValue().convertToDouble()));
    }
    paramStore = st::Tensor::f32({int64_t(paramNames.size()), H}, values);
    params = &paramStore;
  }

  // --- compile
  if (opt.target == "cuda") {
    Status driver = cuda::Driver::available();
    if (!driver)
      return fail("--target cuda: " + driver.error());
    std::cerr << "attnc run: --target cuda is not implemented yet (the CUDA kernels are "
                 "compiled and checked with NVRTC; launching them comes next)\n";
    return kExitNotImplemented;
  }
  codegen::AttentionShape shape;
  shape.batch = B, shape.heads = H, shape.seq = N, shape.headDim = D;
  shape.maxSeq = E ? E->shape.back() : N;
  shape.elementType = FloatType::getF32(&context);
  shape.withLengths = lengths != nullptr;
  shape.differentiate = dout != nullptr;
  auto t0 = std::chrono::steady_clock::now();
  std::optional<CpuAttention> kernels;
  if (int rc = compileCpuAttention(*module, variant, shape, kernels))
    return rc;
  auto t1 = std::chrono::steady_clock::now();

  // --- run and write
  AttentionInputs args;
  args.q = q, args.k = k, args.v = v, args.lengths = lengths;
  args.E = E, args.F = F, args.params = params, args.dout = dout;
  Expected<AttentionOutputs> result = kernels->run(args);
  if (!result)
    return fail(result.error());
  auto t2 = std::chrono::steady_clock::now();
  st::File out;
  out.metadata["generator"] = "attnc run";
  out.metadata["variant"] = variant.getSymName().str();
  out.tensors["out"] = std::move(result->out);
  out.tensors["lse"] = std::move(result->lse);
  if (dout) {
    out.tensors["dq"] = std::move(*result->dq);
    out.tensors["dk"] = std::move(*result->dk);
    out.tensors["dv"] = std::move(*result->dv);
    if (result->dE)
      out.tensors["dE"] = std::move(*result->dE);
    if (result->dF)
      out.tensors["dF"] = std::move(*result->dF);
    if (result->dparams) {
      std::vector<float> all = result->dparams->asF32();
      for (size_t p = 0; p < paramNames.size(); ++p)
        out.tensors["d" + paramNames[p]] = st::Tensor::f32(
            {H}, std::vector<float>(all.begin() + p * H, all.begin() + (p + 1) * H));
    }
  }
  if (!st::write(opt.output, out, err))
    return fail(err);
  auto ms = [](auto a, auto b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  std::cerr << "attnc run: " << variant.getSymName().str() << " on [" << B << ", " << H << ", "
            << N << ", " << D << "]" << (dout ? " forward+backward" : " forward")
            << ": kernels " << (kernels->fromCache() ? "from cache" : "compiled") << " in "
            << int(ms(t0, t1)) << " ms, ran in " << ms(t1, t2) << " ms; wrote " << opt.output
            << "\n";
  return kExitOk;
}

} // namespace attnc::driver
