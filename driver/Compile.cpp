//===- Compile.cpp - Spec to kernels and artifacts ------------------------===//
#include "driver/Compile.h"
#include "driver/ModelConfig.h"
#include "driver/ModelGraph.h"
#include "driver/Tune.h"

#include "dsl/AttnDialect.h"
#include "dsl/MLIRGen.h"
#include "dsl/Parser.h"
#include "passes/Pipelines.h"

#include "attnc/abi/TileModel.h"
#include "attnc/abi/model_step_env.h"
#include "runtime/KernelHeaders.h"
#include "runtime/FileSystem.h"
#include "runtime/KernelCache.h"
#include "runtime/NvrtcCompiler.h"
#include "runtime/train/ModelConfigJson.h"

#include "mlir/Pass/PassManager.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

using namespace mlir;

namespace attnc::driver {

int compileFunctions(ModuleOp module, const std::string &target, const std::string &arch,
                     CompiledKernels &out) {
  PassManager pm(module.getContext());
  KernelPipelineOptions kernel;
  kernel.target = target, kernel.arch = arch;
  populateKernelPipeline(pm, kernel);
  if (failed(pm.run(module)))
    return kExitInput;
  llvm::raw_string_ostream os(out.source);
  if (failed(codegen::emitKernels(
          module, target == "cpu" ? codegen::Target::Cpu : codegen::Target::Cuda, os, out.kernels)))
    return kExitInput;
  return kExitOk;
}

int compileModels(ModuleOp module, const std::string &target, const std::string &arch,
                  CompiledKernels &out) {
  // The tuning database's tiles for the target, and (CPU measurements: the
  // CPU target) k / LSH rounds from attnc tune --max-error, where the spec
  // left them auto; then the heuristics.
  ResolvePipelineOptions resolve;
  resolve.tuningDb = tuningDbPath();
  resolve.target = target, resolve.arch = arch;
  resolve.tuneAccuracy = target == "cpu";
  resolve.report = true;
  if (!runResolvePipeline(module, resolve))
    return kExitInput;

  SmallVector<attn::ModelOp> models(module.getOps<attn::ModelOp>());
  if (models.empty()) {
    std::cerr << "attnc: error: the spec has no model, so no head dim or dtype to compile "
                 "its attention for; use 'attnc run --op attention:NAME' with inputs\n";
    return kExitInput;
  }
  for (attn::ModelOp model : models) {
    auto layer = *model.getBody().getOps<attn::LayerOp>().begin();
    auto variant =
        SymbolTable::lookupNearestSymbolFrom<attn::VariantOp>(model, layer.getAttentionAttr());
    codegen::AttentionShape shape;
    // LSH decides its dense fallback from N: compile for the model's length
    // (the kernels themselves take N at run time).
    if (variant.getLsh())
      shape.seq = model.getSeq();
    shape.heads = model.getHeads();
    shape.maxSeq = model.getSeq();
    shape.headDim = model.getDModel() / model.getHeads();
    Builder b(module.getContext());
    // The CPU backend computes in f32 whatever the model's dtype.
    attn::DType dtype = target == "cpu" ? attn::DType::fp32 : model.getDtype();
    shape.elementType = dtype == attn::DType::fp16   ? b.getF16Type()
                        : dtype == attn::DType::bf16 ? b.getBF16Type()
                                                     : b.getF32Type();
    shape.withLengths = true;
    shape.differentiate = true;
    if (failed(codegen::buildAttentionFunction(module, variant,
                                               (model.getSymName() + "_attention").str(), shape)))
      return kExitInput;
  }
  return compileFunctions(module, target, arch, out);
}

int checkWithNvrtc(const CompiledKernels &compiled, const std::string &arch, std::ostream &os) {
  Expected<GpuArch> gpu = parseGpuArch(arch);
  if (!gpu) {
    std::cerr << "attnc: error: " << gpu.error() << "\n";
    return kExitInput;
  }
  NvrtcCompiler nvrtc(&KernelCache::processDefault());
  NvrtcOptions options;
  options.arch = arch;
  Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cuda);
  if (!dirs) {
    std::cerr << "attnc: error: " << dirs.error() << "\n";
    return kExitInput;
  }
  options.includeDirs = *dirs;
  Expected<Cubin> cubin = nvrtc.compile("attnc_kernels.cu", compiled.source, options);
  if (!cubin) {
    std::cerr << "attnc: error: " << cubin.error() << "\n";
    return kExitInput;
  }
  int limit = attnc::tile::smemLimitBytes(gpu->sm);
  int failures = 0;
  os << "NVRTC " << NvrtcCompiler::version() << " " << arch << ": "
     << (cubin->fromCache ? "from cache" : "compiled") << ", " << cubin->image.size()
     << " bytes of CUBIN\n";
  for (const ManifestKernel &k : compiled.kernels)
    for (const std::string &entry : k.entryPoints) {
      const KernelResources *r = cubin->kernel(entry);
      if (!r) {
        os << "  " << entry << ": MISSING from the ptxas report\n";
        ++failures;
        continue;
      }
      // Only the attention loops use the tile's dynamic shared memory.
      bool usesTile = entry.find("_preprocess_") == std::string::npos &&
                      entry.find("_dparams_") == std::string::npos &&
                      entry.find("_shared_qk_") == std::string::npos;
      int smem = r->staticSmemBytes + (usesTile ? int(k.smemBytes) : 0);
      bool ok = !r->spills() && r->registers <= attnc::tile::kMaxRegsPerThread && smem <= limit;
      os << "  " << (ok ? "ok  " : "FAIL") << " " << entry << ": " << r->registers << " registers, "
         << r->spillStoreBytes << "+" << r->spillLoadBytes << " bytes spilled, " << smem << " of "
         << limit << " bytes shared memory\n";
      failures += !ok;
    }
  if (failures) {
    std::cerr << "attnc: error: " << failures << " kernel(s) failed the " << arch
              << " resource check\n";
    return kExitInput;
  }
  return kExitOk;
}

/// Writes `text` to `path` via a temporary file and a rename.
static bool writeAtomically(const std::filesystem::path &path, const std::string &text,
                            std::string &err) {
  Status written = fs::writeFileAtomic(path.string(), text);
  if (!written)
    err = written.error();
  return bool(written);
}

int writeArtifact(const std::string &dir, const std::string &specText, ModuleOp module,
                  const std::string &target, const std::string &arch,
                  const CompiledKernels &compiled, int batch) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    std::cerr << "attnc: error: cannot create the artifact directory '" << dir
              << "': " << (ec ? ec.message() : "not a directory") << "\n";
    return kExitInput;
  }
  Manifest info;
  // The compiled training step of every model, built where the artifact is
  // trained (attnc-rt train): CPU, the step's C++; CUDA, its kernels (NVRTC
  // for the device's arch) and host code.
  std::vector<std::pair<std::string, std::string>> stepFiles;
  if (target == "cpu" || target == "cuda")
    for (attn::ModelOp model : module.getOps<attn::ModelOp>()) {
      ModelGraph g;
      ModelGraphOptions graph;
      graph.batch = batch, graph.emitSource = true, graph.recomputeLayers = true;
      if (!compileModelGraph(module, model, graph, g))
        return kExitInput;
      auto layer = *model.getBody().getOps<attn::LayerOp>().begin();
      auto variant =
          SymbolTable::lookupNearestSymbolFrom<attn::VariantOp>(model, layer.getAttentionAttr());
      const bool cuda = target == "cuda";
      const std::string stem = "model_" + model.getSymName().str();
      ManifestModel m;
      m.name = model.getSymName().str();
      m.batch = batch;
      m.stepSource = stem + (cuda ? "_host.cpp" : ".cpp");
      m.stepSymbol = cuda ? g.step.cudaSymbol : g.step.symbol;
      m.attentionFunction = (model.getSymName() + "_attention").str();
      m.arenaBytes = g.arenaBytes, m.keptBytes = g.keptBytes;
      m.args = g.step.args, m.gradArgs = g.step.gradArgs;
      m.configJson = train::modelConfigToJson(modelConfigOf(model, layer, variant));
      if (cuda) {
        m.stepKernels = stem + ".cu";
        m.stepAbi = ATTNC_CUDA_STEP_ABI;
        stepFiles.push_back({m.stepKernels, g.step.cudaDeviceSource});
      }
      stepFiles.push_back({m.stepSource, cuda ? g.step.cudaHostSource : g.step.source});
      // Inference runs the CPU function on both targets (for cpu it is in
      // the step's own source).
      m.inferSource = stem + ".cpp";
      m.inferSymbol = g.step.inferSymbol;
      m.inferArenaBytes = g.step.inferArenaBytes, m.inferBatch = g.step.inferBatch;
      m.inferArgs = g.step.inferArgs;
      if (cuda)
        stepFiles.push_back({m.inferSource, g.step.source});
      info.models.push_back(std::move(m));
    }
  info.specHash = sha256Hex(specText);
  info.target = target;
  info.arch = target == "cpu" ? "host" : arch;
  info.source = target == "cpu" ? "kernels.cpp" : "kernels.cu";
  info.kernels = compiled.kernels;
  const std::string manifest = writeManifest(info);
  std::string ir;
  llvm::raw_string_ostream is(ir);
  module.print(is);
  std::string err;
  std::filesystem::path root(dir);
  // The manifest goes last: a directory with a manifest is complete.
  for (auto &[file, source] : stepFiles)
    if (!writeAtomically(root / file, source, err)) {
      std::cerr << "attnc: error: " << err << "\n";
      return kExitInput;
    }
  if (!writeAtomically(root / info.source, compiled.source, err) ||
      !writeAtomically(root / "attn.mlir", ir + "\n", err) ||
      !writeAtomically(root / "manifest.json", manifest, err)) {
    std::cerr << "attnc: error: " << err << "\n";
    return kExitInput;
  }
  std::cout << "wrote " << dir << "/{manifest.json," << info.source
            << ",attn.mlir}: " << compiled.kernels.size() << " kernel(s) for " << info.target << " "
            << info.arch << "\n";
  for (auto &[file, source] : stepFiles)
    std::cout << "wrote " << dir << "/" << file << ": the compiled training step (batch " << batch
              << "; attnc-rt train " << dir << " trains it)\n";
  return kExitOk;
}

namespace {
int fail(const std::string &msg) {
  std::cerr << "attnc: error: " << msg << "\n";
  return kExitInput;
}
} // namespace

int runCompile(const CompileCommandOptions &opts) {
  std::string err;
  if (!checkArch(opts.arch, err))
    return fail(err);
  std::string buffer;
  if (!readSpecFile(opts.spec, buffer, err))
    return fail(err);

  DiagnosticEngine diag(buffer, std::cerr);
  std::optional<ast::Spec> spec = parseAndCheck(buffer, opts.spec, diag);
  if (!spec)
    return kExitInput;

  std::ofstream file;
  std::ostream *os = &std::cout;
  if (!opts.emit.empty() && !opts.output.empty()) {
    file.open(opts.output);
    if (!file)
      return fail("cannot write '" + opts.output + "'");
    os = &file;
  }

  if (opts.emit == "ast") {
    ast::dump(*spec, *os);
    return 0;
  }
  MLIRContext context;
  registerAttncDialects(context);
  ScopedDiagnosticHandler handler(&context, printDiagnostic);
  OwningOpRef<ModuleOp> module = mlirGen(context, *spec);
  if (!module)
    return kExitInput;

  if (opts.emit == "graph" || opts.emit == "model-cpp" || opts.emit == "model-cuda") {
    // Whole-model compilation: each model's planned training step.
    if (!runResolvePipeline(*module, ResolvePipelineOptions()))
      return kExitInput;
    for (attn::ModelOp model : module->getOps<attn::ModelOp>()) {
      ModelGraph g;
      // As attnc train runs it by default: standard layers recomputed.
      ModelGraphOptions graph;
      graph.batch = opts.planBatch, graph.emitSource = true, graph.recomputeLayers = true;
      if (!compileModelGraph(*module, model, graph, g))
        return kExitInput;
      if (opts.emit == "model-cuda")
        *os << g.step.cudaDeviceSource << "\n// ---- host side ----\n" << g.step.cudaHostSource;
      else
        *os << (opts.emit == "graph" ? g.ir + "\n" : g.step.source);
    }
    return 0;
  }

  if (opts.emit == "cuda" || opts.emit == "cpp" || opts.checkNvrtc ||
      (opts.emit.empty() && !opts.output.empty())) {
    std::string target = opts.emit == "cpp" ? "cpu" : opts.emit == "cuda" ? "cuda" : opts.target;
    CompiledKernels compiled;
    int rc = compileModels(*module, target, opts.arch, compiled);
    if (rc)
      return rc;
    if (opts.checkNvrtc) {
      if (target != "cuda")
        return fail("--check-nvrtc needs the cuda target");
      if (int rc2 = checkWithNvrtc(compiled, opts.arch, std::cout))
        return rc2;
      if (checkModelStepsWithNvrtc(*module, opts.arch, opts.planBatch, std::cout))
        return kExitInput;
      if (opts.emit.empty() && opts.output.empty())
        return 0;
    }
    if (!opts.emit.empty()) {
      *os << compiled.source;
      return 0;
    }
    if (int rc2 = writeArtifact(opts.output, buffer, *module, target, opts.arch, compiled,
                                opts.planBatch))
      return rc2;
    reportMemoryPlans(*module, opts.planBatch, std::cout);
    reportCompiledPlans(*module, opts.planBatch, std::cout);
    return 0;
  }

  if (opts.emit == "lowered" || (opts.emit.empty() && opts.memoryPlan)) {
    ResolvePipelineOptions report;
    report.report = true;
    if (!runResolvePipeline(*module, report))
      return kExitInput;
  }
  if (!opts.emit.empty()) {
    std::string text;
    llvm::raw_string_ostream rs(text);
    module->print(rs);
    *os << rs.str() << "\n";
    return 0;
  }
  std::cout << opts.spec << ": ok (" << spec->attentions.size() << " attention variant(s), "
            << spec->models.size() << " model(s))\n";
  if (opts.memoryPlan) {
    reportMemoryPlans(*module, opts.planBatch, std::cout);
    reportCompiledPlans(*module, opts.planBatch, std::cout);
  }
  return 0;
}

} // namespace attnc::driver
