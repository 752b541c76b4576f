//===- Run.cpp - attnc run: one attention op on safetensors inputs --------===//
#include "tools/attnc/Run.h"
#include "tools/attnc/Compile.h"

#include "codegen/AttentionFunction.h"
#include "dsl/AttnDialect.h"
#include "dsl/MLIRGen.h"
#include "dsl/Parser.h"
#include "runtime/Artifact.h"
#include "runtime/AttentionIO.h"
#include "runtime/CpuAttention.h"
#include "runtime/CudaDriver.h"
#include "runtime/KernelCache.h"
#include "runtime/Safetensors.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"

#include <chrono>
#include <cmath>
#include <filesystem>
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
    d.sharedQk = k.sharedQk;
    if (k.lsh)
      d.lsh = KernelDesc::Lsh{int(k.lsh->numBuckets), int(k.lsh->rounds), int(k.lsh->chunk),
                              int(k.lsh->before), int(k.lsh->after), uint64_t(k.lsh->seed)};
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
  // An artifact directory runs without the compiler.
  if (std::filesystem::is_directory(opt.spec)) {
    ArtifactRunOptions a;
    a.dir = opt.spec;
    if (opt.op != "attention")
      a.kernel = opt.op.rfind("attention:", 0) == 0 ? opt.op.substr(10) : opt.op;
    a.inputs = opt.inputs, a.weights = opt.weights, a.grad = opt.grad, a.output = opt.output;
    a.target = opt.target, a.seed = opt.seed;
    Status s = runArtifactAttention(a);
    if (s)
      return kExitOk;
    bool pending = s.error().find("not implemented yet") != std::string::npos;
    std::cerr << "attnc run: " << (pending ? "" : "error: ") << s.error() << "\n";
    return pending ? kExitNotImplemented : kExitInput;
  }
  // --- the variant
  std::string name;
  if (opt.op != "attention") {
    if (opt.op.rfind("attention:", 0) != 0)
      return fail("unknown --op '" + opt.op + "'; expected attention or attention:NAME");
    name = opt.op.substr(10);
  }
  MLIRContext context;
  OwningOpRef<ModuleOp> module = loadSpecModule(opt.spec, "run", context);
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

  // --- inputs and weights (runtime/AttentionIO.h)
  AttentionSignature sig;
  sig.name = variant.getSymName().str();
  sig.keyPadding = variant.getKeyPadding();
  sig.sharedQk = variant.getSharedQk();
  if (auto lsh = variant.getLshAttr()) {
    if (lsh.getBuckets() == attn::kAuto || lsh.getRounds() == attn::kAuto ||
        lsh.getChunk() == attn::kAuto)
      return fail("'" + sig.name +
                  "' leaves LSH buckets, rounds or chunk as 'auto'; give numbers to run one op "
                  "alone (attnc tune will choose them)");
    sig.lshRounds = lsh.getRounds();
    sig.lshBuckets = lsh.getBuckets();
    sig.lshSeed = uint64_t(lsh.getSeed());
  }
  if (auto lr = variant.getLowrankAttr()) {
    sig.lowrank = true;
    sig.share = stringifyShareMode(lr.getShare()).str();
    sig.k = lr.isAutoK() ? 0 : lr.getK();
  }
  if (auto decls = variant.getParams())
    for (Attribute a : *decls) {
      auto p = llvm::cast<attn::HeadParamAttr>(a);
      sig.params.push_back({p.getName().str(), p.getInit() == attn::ParamInit::alibi,
                            float(p.getValue().convertToDouble()), p.getLearned()});
    }
  Expected<std::unique_ptr<AttentionIO>> loaded =
      loadAttentionIO(opt.inputs, opt.weights, opt.grad, sig, opt.seed);
  if (!loaded)
    return fail(loaded.error());
  AttentionIO &io = **loaded;
  int64_t B = io.B, H = io.H, N = io.N, D = io.D;
  if (sig.lowrank)
    variant.setLowrankAttr(attn::LowRankAttr::get(
        &context, io.kRows, variant.getLowrankAttr().getShare()));

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
  shape.maxSeq = sig.lowrank ? io.nmax : N;
  shape.elementType = FloatType::getF32(&context);
  shape.withLengths = io.inputs.lengths != nullptr;
  shape.differentiate = io.inputs.dout != nullptr;
  auto t0 = std::chrono::steady_clock::now();
  std::optional<CpuAttention> kernels;
  if (int rc = compileCpuAttention(*module, variant, shape, kernels))
    return rc;
  auto t1 = std::chrono::steady_clock::now();

  // --- run and write
  Expected<AttentionOutputs> result = kernels->run(io.inputs);
  if (!result)
    return fail(result.error());
  auto t2 = std::chrono::steady_clock::now();
  if (Status written = writeAttentionOutputs(opt.output, std::move(*result), io, sig); !written)
    return fail(written.error());
  auto ms = [](auto a, auto b) {
    return std::chrono::duration<double, std::milli>(b - a).count();
  };
  std::cerr << "attnc run: " << variant.getSymName().str() << " on [" << B << ", " << H << ", "
            << N << ", " << D << "]"
            << (io.inputs.dout ? " forward+backward" : " forward")
            << ": kernels " << (kernels->fromCache() ? "from cache" : "compiled") << " in "
            << int(ms(t0, t1)) << " ms, ran in " << ms(t1, t2) << " ms; wrote " << opt.output
            << "\n";
  return kExitOk;
}

} // namespace attnc::driver
