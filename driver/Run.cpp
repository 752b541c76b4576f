//===- Run.cpp - attnc run: one attention op on safetensors inputs --------===//
#include "driver/Run.h"
#include "driver/Report.h"
#include "driver/Compile.h"

#include "codegen/AttentionFunction.h"
#include "dialect/AttnDialect.h"
#include "dsl/MLIRGen.h"
#include "dsl/Parser.h"
#include "runtime/KernelHeaders.h"
#include "runtime/Artifact.h"
#include "runtime/AttentionIO.h"
#include "runtime/CpuAttention.h"
#include "runtime/CudaAttention.h"
#include "runtime/CudaDriver.h"
#include "runtime/NvrtcCompiler.h"
#include "runtime/PhiloxDraws.h"
#include "runtime/KernelCache.h"
#include "runtime/Safetensors.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <ostream>
#include <sstream>
#include <thread>

using namespace mlir;

namespace attnc::driver {

namespace {

mlir::LogicalResult fail(const std::string &msg) {
  diagnostics() << "attnc run: error: " << msg << "\n";
  return mlir::failure();
}

} // namespace

namespace {

/// One variant's kernels for `target`: a module of its own (this variant
/// and one function, so kernel names and the translation unit hold exactly
/// this op), the pipeline and the emitter; the forward's and backward's
/// descriptions for the runtime.
mlir::LogicalResult emitVariant(ModuleOp module, attn::VariantOp variant,
                                const codegen::AttentionShape &shape, const std::string &target,
                                const std::string &arch, CompiledKernels &compiled,
                                std::optional<KernelDesc> &fwd, std::optional<KernelDesc> &bwd) {
  OwningOpRef<ModuleOp> scratch = ModuleOp::create(module.getLoc());
  OpBuilder b(scratch->getBody(), scratch->getBody()->begin());
  auto copy = llvm::cast<attn::VariantOp>(b.clone(*variant));
  if (failed(codegen::buildAttentionFunction(*scratch, copy, "attention", shape)))
    return mlir::failure();
  if (mlir::failed(compileFunctions(*scratch, target, arch, compiled)))
    return mlir::failure();
  for (const ManifestKernel &k : compiled.kernels)
    (k.backward ? bwd : fwd) = k.desc();
  if (!fwd) {
    diagnostics() << "attnc: error: internal: the pipeline produced no forward kernel\n";
    return mlir::failure();
  }
  if (!shape.differentiate)
    bwd.reset();
  return mlir::success();
}

} // namespace

mlir::LogicalResult emitCudaVariantArtifact(ModuleOp module, attn::VariantOp variant,
                                            const codegen::AttentionShape &shape,
                                            const std::string &arch, Artifact &out) {
  CompiledKernels compiled;
  std::optional<KernelDesc> fwd, bwd;
  if (mlir::failed(emitVariant(module, variant, shape, "cuda", arch, compiled, fwd, bwd)))
    return mlir::failure();
  out.dir = "variant " + variant.getSymName().str();
  out.manifest.target = "cuda", out.manifest.arch = arch, out.manifest.source = "kernels.cu";
  out.manifest.kernels = std::move(compiled.kernels);
  out.files["kernels.cu"] = std::move(compiled.source);
  return mlir::success();
}

mlir::LogicalResult emitCudaAttention(ModuleOp module, attn::VariantOp variant,
                                      const codegen::AttentionShape &shape, const std::string &arch,
                                      std::string &source, std::string &dtype, KernelDesc &fwd) {
  CompiledKernels compiled;
  std::optional<KernelDesc> f, bwd;
  codegen::AttentionShape forwardOnly = shape;
  forwardOnly.differentiate = false;
  if (mlir::failed(emitVariant(module, variant, forwardOnly, "cuda", arch, compiled, f, bwd)))
    return mlir::failure();
  source = std::move(compiled.source), dtype = compiled.kernels.front().dtype, fwd = *f;
  return mlir::success();
}

static HostCompiler &hostCompiler() {
  static HostCompiler compiler(&KernelCache::processDefault());
  return compiler;
}

mlir::LogicalResult compileCudaAttention(ModuleOp module, attn::VariantOp variant,
                                         const codegen::AttentionShape &shape,
                                         const std::string &arch, bool emulate,
                                         std::optional<CudaAttention> &out, int ordinal) {
  CompiledKernels compiled;
  std::optional<KernelDesc> fwd, bwd;
  if (mlir::failed(emitVariant(module, variant, shape, "cuda", arch, compiled, fwd, bwd)))
    return mlir::failure();
  const std::string dtype = compiled.kernels.front().dtype;
  Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cuda);
  if (!dirs) {
    diagnostics() << "attnc: error: " << dirs.error() << "\n";
    return mlir::failure();
  }
  NvrtcCompiler nvrtc(&KernelCache::processDefault());
  Expected<CudaAttention> kernels =
      emulate ? CudaAttention::compileEmulated(compiled.source, arch, arch, dtype, *fwd, bwd,
                                               hostCompiler())
              : CudaAttention::compile(compiled.source, arch, dtype, *fwd, bwd, *dirs, nvrtc,
                                       /*retile=*/true, /*ptxArch=*/"", ordinal);
  if (!kernels) {
    diagnostics() << "attnc: error: " << kernels.error() << "\n";
    return mlir::failure();
  }
  out.emplace(std::move(kernels).take());
  return mlir::success();
}

mlir::LogicalResult emitCpuAttention(ModuleOp module, attn::VariantOp variant,
                                     const codegen::AttentionShape &shape, EmittedKernels &out) {
  CompiledKernels compiled;
  std::optional<KernelDesc> fwd, bwd;
  if (mlir::failed(emitVariant(module, variant, shape, "cpu", "sm_80", compiled, fwd, bwd)))
    return mlir::failure();
  out.source = std::move(compiled.source), out.fwd = *fwd, out.bwd = bwd;
  return mlir::success();
}

std::vector<std::string> buildCpuAttentions(const std::vector<EmittedKernels> &emitted, int threads,
                                            std::vector<std::optional<CpuAttention>> &out) {
  out.clear();
  out.resize(emitted.size());
  std::vector<std::string> errors(emitted.size());
  Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cpu);
  if (!dirs) {
    errors.assign(emitted.size(), dirs.error());
    return errors;
  }
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < emitted.size(); i = next++) {
      const EmittedKernels &e = emitted[i];
      Expected<CpuAttention> k =
          CpuAttention::compile(e.source, e.fwd, e.bwd, *dirs, hostCompiler());
      if (k)
        out[i].emplace(std::move(k).take());
      else
        errors[i] = k.error();
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < std::min<int>(threads, int(emitted.size())); ++t)
    pool.emplace_back(worker);
  worker();
  for (std::thread &t : pool)
    t.join();
  return errors;
}

mlir::LogicalResult compileCpuAttention(ModuleOp module, attn::VariantOp variant,
                                        const codegen::AttentionShape &shape,
                                        std::optional<CpuAttention> &out) {
  EmittedKernels e;
  if (mlir::failed(emitCpuAttention(module, variant, shape, e)))
    return mlir::failure();
  Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cpu);
  if (!dirs) {
    diagnostics() << "attnc: error: " << dirs.error() << "\n";
    return mlir::failure();
  }
  Expected<CpuAttention> kernels =
      CpuAttention::compile(e.source, e.fwd, e.bwd, *dirs, hostCompiler());
  if (!kernels) {
    diagnostics() << "attnc: error: " << kernels.error() << "\n";
    return mlir::failure();
  }
  out.emplace(std::move(kernels).take());
  return mlir::success();
}

mlir::LogicalResult runAttention(const RunOptions &opt) {
  // An artifact directory runs without the compiler.
  if (std::filesystem::is_directory(opt.spec)) {
    ArtifactRunOptions a;
    a.dir = opt.spec;
    if (opt.op != "attention")
      a.kernel = opt.op.rfind("attention:", 0) == 0 ? opt.op.substr(10) : opt.op;
    a.inputs = opt.inputs, a.weights = opt.weights, a.grad = opt.grad, a.output = opt.output;
    a.target = opt.target, a.seed = opt.seed;
    a.log = &diagnostics(), a.tool = "attnc run";
    Status s = runArtifactAttention(a);
    if (!s)
      return commandError("run", s.error());
    return mlir::success();
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
    return mlir::failure();
  SmallVector<attn::VariantOp> variants(module->getOps<attn::VariantOp>());
  attn::VariantOp variant;
  std::string names;
  for (attn::VariantOp v : variants) {
    names += (names.empty() ? "" : ", ") + v.getSymName().str();
    if (v.getSymName() == name || (name.empty() && variants.size() == 1))
      variant = v;
  }
  if (!variant)
    return fail(name.empty()
                    ? "the spec has " + std::to_string(variants.size()) + " attention variants (" +
                          names + "); name one with --op attention:NAME"
                    : "no attention variant '" + name + "' in " + opt.spec + " (it has: " + names +
                          ")");

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
      loadAttentionIO(opt.inputs, opt.weights, opt.grad, sig, opt.seed, [](const std::string &m) {
        diagnostics() << "attnc: warning: " << m << "\n";
      });
  if (!loaded)
    return fail(loaded.error());
  AttentionIO &io = **loaded;
  int64_t B = io.B, H = io.H, N = io.N, D = io.D;
  if (sig.lowrank)
    variant.setLowrankAttr(
        attn::LowRankAttr::get(&context, io.kRows, variant.getLowrankAttr().getShare()));

  // --- compile
  codegen::AttentionShape shape;
  shape.batch = B, shape.heads = H, shape.seq = N, shape.headDim = D;
  shape.maxSeq = sig.lowrank ? io.nmax : N;
  shape.elementType = FloatType::getF32(&context);
  shape.withLengths = io.inputs.lengths != nullptr;
  shape.differentiate = io.inputs.dout != nullptr;
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  if (opt.target == "cuda" || opt.target == "cuda-sim") {
    // The GPU: kernels in --dtype (inputs and outputs stay f32 on the host),
    // NVRTC to CUBIN for --arch (default: the device's own); the CUDA
    // events time the kernels. cuda-sim: the same source on the SIMT
    // emulator, at the tiles --arch gets.
    const bool emulate = opt.target == "cuda-sim";
    Builder bld(&context);
    shape.elementType = opt.dtype == "f16"    ? Type(bld.getF16Type())
                        : opt.dtype == "bf16" ? Type(bld.getBF16Type())
                                              : Type(bld.getF32Type());
    const std::string arch = opt.arch.empty() ? defaultCudaArch() : opt.arch;
    Status driver = emulate ? Status() : cuda::Driver::available();
    if (Expected<GpuArch> a = parseGpuArch(arch); !a)
      return fail("--arch: " + a.error());
    std::optional<CudaAttention> kernels;
    if (!driver) // loading the CUBIN needs the driver: say so before compiling
      return fail("--target cuda: " + driver.error() +
                  " (attnc compile --check-nvrtc checks the kernels without a GPU), and "
                  "--target cuda-sim runs them on the CPU");
    auto t0 = std::chrono::steady_clock::now();
    if (mlir::failed(compileCudaAttention(*module, variant, shape, arch, emulate, kernels)))
      return mlir::failure();
    auto t1 = std::chrono::steady_clock::now();
    Expected<AttentionOutputs> result = kernels->run(io.inputs);
    if (!result)
      return fail(result.error());
    if (Status written = writeAttentionOutputs(opt.output, std::move(*result), io, sig); !written)
      return fail(written.error());
    diagnostics() << "attnc run: " << variant.getSymName().str() << " on [" << B << ", " << H
                  << ", " << N << ", " << D << "] " << opt.dtype << " " << arch
                  << (io.inputs.dout ? " forward+backward" : " forward") << ": kernels ready in "
                  << int(ms(t0, t1)) << " ms; forward " << kernels->forwardMs() << " ms, backward "
                  << kernels->backwardMs() << " ms on "
                  << (emulate ? "the SIMT emulator" : "the GPU") << "; wrote " << opt.output
                  << "\n";
    return mlir::success();
  }
  auto t0 = std::chrono::steady_clock::now();
  std::optional<CpuAttention> kernels;
  if (mlir::failed(compileCpuAttention(*module, variant, shape, kernels)))
    return mlir::failure();
  auto t1 = std::chrono::steady_clock::now();

  // --- run and write
  Expected<AttentionOutputs> result = kernels->run(io.inputs);
  if (!result)
    return fail(result.error());
  auto t2 = std::chrono::steady_clock::now();
  if (Status written = writeAttentionOutputs(opt.output, std::move(*result), io, sig); !written)
    return fail(written.error());
  diagnostics() << "attnc run: " << variant.getSymName().str() << " on [" << B << ", " << H << ", "
                << N << ", " << D << "]" << (io.inputs.dout ? " forward+backward" : " forward")
                << ": kernels " << (kernels->fromCache() ? "from cache" : "compiled") << " in "
                << int(ms(t0, t1)) << " ms, ran in " << ms(t1, t2) << " ms; wrote " << opt.output
                << "\n";
  return mlir::success();
}

mlir::LogicalResult writeRandomInputs(const InputsOptions &opt) {
  if (opt.shape.size() != 4)
    return commandError("inputs", "--shape takes B,H,N,D (four positive integers)");
  for (int64_t d : opt.shape)
    if (d < 1 || d > (int64_t(1) << 24))
      return commandError("inputs", "--shape: " + std::to_string(d) +
                                        " is outside [1, 2^24]; B,H,N,D are positive");
  const int64_t B = opt.shape[0], N = opt.shape[2];
  const int64_t elements = B * opt.shape[1] * N * opt.shape[3];
  if (elements > (int64_t(1) << 30))
    return commandError("inputs", "--shape: " + std::to_string(elements) +
                                      " elements per tensor is over 2^30 (4 GiB of f32)");
  // One Philox stream per tensor, so q stays q whatever else is written.
  auto normal = [&](uint32_t stream) {
    std::vector<float> v(static_cast<size_t>(elements));
    for (int64_t i = 0; i < elements; ++i)
      v[size_t(i)] = philox::normal(opt.seed, stream, uint64_t(i));
    return st::Tensor::f32(opt.shape, v);
  };
  st::File in;
  in.tensors["q"] = normal(1), in.tensors["k"] = normal(2), in.tensors["v"] = normal(3);
  if (opt.lengths) {
    std::vector<int32_t> lengths(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) // uniform in [1, N]
      lengths[size_t(b)] =
          int32_t(1 + philox::philox4x32({uint32_t(b), 0u, 4u, 0u}, opt.seed)[0] % uint32_t(N));
    in.tensors["lengths"] = st::Tensor::i32({B}, lengths);
  }
  in.metadata["attnc_inputs_seed"] = std::to_string(opt.seed);
  std::string err;
  if (!st::write(opt.output, in, err))
    return commandError("inputs", err);
  std::string wrote = opt.output;
  if (!opt.grad.empty()) {
    st::File dout;
    dout.tensors["dout"] = normal(5);
    if (!st::write(opt.grad, dout, err))
      return commandError("inputs", err);
    wrote += " and " + opt.grad;
  }
  results() << "wrote " << wrote << ": q, k, v [" << opt.shape[0] << ", " << opt.shape[1] << ", "
            << N << ", " << opt.shape[3] << "] f32" << (opt.lengths ? ", lengths [B] i32" : "")
            << (opt.grad.empty() ? "" : ", dout") << " (seed " << opt.seed << ")\n";
  return mlir::success();
}

} // namespace attnc::driver
