//===- Compile.cpp - Spec to kernels and artifacts ------------------------===//
#include "tools/attnc/Compile.h"
#include "tools/attnc/ModelConfig.h"
#include "tools/attnc/ModelGraph.h"
#include "tools/attnc/Tune.h"

#include "codegen/Manifest.h"
#include "dsl/AttnDialect.h"
#include "dsl/MLIRGen.h"
#include "dsl/Parser.h"
#include "passes/Passes.h"

#include "codegen/TileModel.h"
#include "codegen/cuda/include/attnc/model_step_env.h"
#include "runtime/FileSystem.h"
#include "runtime/KernelCache.h"
#include "runtime/NvrtcCompiler.h"
#include "runtime/train/ModelConfigJson.h"

#include <nlohmann/json.hpp>

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

OwningOpRef<ModuleOp> loadSpecModule(const std::string &path, const char *cmd,
                                     MLIRContext &context, std::string *textOut) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    std::cerr << "attnc " << cmd << ": error: cannot open '" << path << "'\n";
    return nullptr;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  std::string text = ss.str();
  DiagnosticEngine diag(text, std::cerr);
  std::optional<ast::Spec> spec = parseAndCheck(text, path, diag);
  if (!spec)
    return nullptr;
  registerAttncDialects(context);
  OwningOpRef<ModuleOp> module = mlirGen(context, *spec);
  if (module && textOut)
    *textOut = std::move(text);
  return module;
}

std::string sha256Hex(const std::string &text) {
  std::array<uint8_t, 32> digest = llvm::SHA256::hash(
      llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(text.data()), text.size()));
  static const char hex[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : digest) {
    out.push_back(hex[b >> 4]);
    out.push_back(hex[b & 15]);
  }
  return out;
}

int compileFunctions(ModuleOp module, const std::string &target, const std::string &arch,
                     CompiledKernels &out) {
  PassManager pm(module.getContext());
  codegen::buildKernelPipeline(pm, target, arch);
  if (failed(pm.run(module)))
    return kExitInput;
  llvm::raw_string_ostream os(out.source);
  if (failed(codegen::emitKernels(module, target == "cpu" ? codegen::Target::Cpu
                                                          : codegen::Target::Cuda,
                                  os, out.kernels)))
    return kExitInput;
  return kExitOk;
}

int compileModels(ModuleOp module, const std::string &target, const std::string &arch,
                  CompiledKernels &out) {
  // k / LSH rounds measured by attnc tune --max-error, where the spec left
  // them auto (CPU measurements: the CPU target).
  // The tuning database, read once for every choice below.
  const TuningLookup tuned = TuningLookup::open();
  if (target == "cpu")
    applyTunedAccuracy(tuned, module, std::cerr);
  PassManager resolve(module.getContext());
  ResolveTunablesOptions options;
  options.report = true;
  resolve.addPass(createResolveTunables(options));
  if (failed(resolve.run(module)))
    return kExitInput;

  SmallVector<attn::ModelOp> models(module.getOps<attn::ModelOp>());
  if (models.empty()) {
    std::cerr << "attnc: error: the spec has no model, so no head dim or dtype to compile "
                 "its attention for; use 'attnc run --op attention:NAME' with inputs\n";
    return kExitInput;
  }
  for (attn::ModelOp model : models) {
    auto layer = *model.getBody().getOps<attn::LayerOp>().begin();
    auto variant = SymbolTable::lookupNearestSymbolFrom<attn::VariantOp>(
        model, layer.getAttentionAttr());
    codegen::AttentionShape shape;
    // LSH decides its dense fallback from N: compile for the model's length
    // (the kernels themselves take N at run time).
    if (variant.getLsh())
      shape.seq = model.getSeq();
    shape.heads = model.getHeads();
    shape.maxSeq = model.getSeq();
    shape.headDim = model.getDModel() / model.getHeads();
    // A measured tile from `attnc tune` (CPU), when the spec leaves it auto.
    if (target == "cpu")
      applyTunedCpuTile(tuned, variant, shape.headDim, model.getSeq(), shape.heads, std::cerr);
    else
      applyTunedCudaTile(tuned, variant,
                         model.getDtype() == attn::DType::fp32   ? "f32"
                         : model.getDtype() == attn::DType::bf16 ? "bf16"
                                                                 : "f16",
                         shape.headDim, model.getSeq(), shape.heads, arch, std::cerr);
    Builder b(module.getContext());
    // The CPU backend computes in f32 whatever the model's dtype.
    attn::DType dtype = target == "cpu" ? attn::DType::fp32 : model.getDtype();
    shape.elementType = dtype == attn::DType::fp16   ? b.getF16Type()
                        : dtype == attn::DType::bf16 ? b.getBF16Type()
                                                     : b.getF32Type();
    shape.withLengths = true;
    shape.differentiate = true;
    if (failed(codegen::buildAttentionFunction(module, variant,
                                               (model.getSymName() + "_attention").str(),
                                               shape)))
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
  options.includeDirs = {ATTNC_SOURCE_DIR "/codegen", ATTNC_SOURCE_DIR "/codegen/cuda/include"};
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
  for (const codegen::KernelInfo &k : compiled.kernels)
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
      os << "  " << (ok ? "ok  " : "FAIL") << " " << entry << ": " << r->registers
         << " registers, " << r->spillStoreBytes << "+" << r->spillLoadBytes
         << " bytes spilled, " << smem << " of " << limit << " bytes shared memory\n";
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
  codegen::ManifestInfo info;
  // The compiled training step of every model, built where the artifact is
  // trained (attnc-rt train): CPU, the step's C++; CUDA, its kernels (NVRTC
  // for the device's arch) and host code.
  std::vector<std::pair<std::string, std::string>> stepFiles;
  if (target == "cpu" || target == "cuda")
    for (attn::ModelOp model : module.getOps<attn::ModelOp>()) {
      ModelGraph g;
      if (!compileModelGraph(module, model, batch, 0, /*emitSource=*/true, g,
                             /*recomputeLayers=*/true))
        return kExitInput;
      auto layer = *model.getBody().getOps<attn::LayerOp>().begin();
      auto variant =
          SymbolTable::lookupNearestSymbolFrom<attn::VariantOp>(model, layer.getAttentionAttr());
      const bool cuda = target == "cuda";
      const std::string stem = "model_" + model.getSymName().str();
      const std::string file = stem + (cuda ? "_host.cpp" : ".cpp");
      nlohmann::json m = {{"name", model.getSymName().str()},
                          {"batch", batch},
                          {"step_source", file},
                          {"step_symbol", cuda ? g.step.cudaSymbol : g.step.symbol},
                          {"attention_function", (model.getSymName() + "_attention").str()},
                          {"arena_bytes", g.arenaBytes},
                          {"kept_bytes", g.keptBytes},
                          {"args", g.step.args},
                          {"grad_args", g.step.gradArgs},
                          {"config", nlohmann::json::parse(train::modelConfigToJson(
                                         modelConfigOf(model, layer, variant)))}};
      if (cuda) {
        m["step_kernels"] = stem + ".cu";
        m["step_abi"] = ATTNC_CUDA_STEP_ABI;
        stepFiles.push_back({stem + ".cu", g.step.cudaDeviceSource});
      }
      info.models.push_back(m.dump());
      stepFiles.push_back({file, cuda ? g.step.cudaHostSource : g.step.source});
    }
  info.specHash = sha256Hex(specText);
  info.target = target;
  info.arch = target == "cpu" ? "host" : arch;
  info.source = target == "cpu" ? "kernels.cpp" : "kernels.cu";
  info.kernels = compiled.kernels;
  std::string manifest, ir;
  llvm::raw_string_ostream ms(manifest), is(ir);
  codegen::writeManifest(info, ms);
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
  std::cout << "wrote " << dir << "/{manifest.json," << info.source << ",attn.mlir}: "
            << compiled.kernels.size() << " kernel(s) for " << info.target << " "
            << info.arch << "\n";
  for (auto &[file, source] : stepFiles)
    std::cout << "wrote " << dir << "/" << file << ": the compiled training step (batch "
              << batch << "; attnc-rt train " << dir << " trains it)\n";
  return kExitOk;
}

} // namespace attnc::driver
