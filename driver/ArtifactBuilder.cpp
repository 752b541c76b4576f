//===- ArtifactBuilder.cpp - A resolved spec compiled into an artifact ----===//
#include "driver/ArtifactBuilder.h"
#include "driver/Report.h"
#include "driver/ModelConfigOf.h"
#include "driver/ModelGraph.h"

#include "attnc/abi/model_step_env.h"
#include "runtime/FileSystem.h"
#include "runtime/train/ModelConfigJson.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/Support/raw_ostream.h"

#include <filesystem>
#include <ostream>

using namespace mlir;

namespace attnc::driver {

namespace {

/// The models of `module` the options select, in spec order.
SmallVector<attn::ModelOp> selectedModels(ModuleOp module, const ArtifactOptions &o) {
  SmallVector<attn::ModelOp> models;
  for (attn::ModelOp m : module.getOps<attn::ModelOp>())
    if (o.model.empty() || m.getSymName() == o.model)
      models.push_back(m);
  return models;
}

attn::VariantOp variantOf(attn::ModelOp model, attn::LayerOp &layer) {
  layer = *model.getBody().getOps<attn::LayerOp>().begin();
  return SymbolTable::lookupNearestSymbolFrom<attn::VariantOp>(model, layer.getAttentionAttr());
}

/// The error for a selection without models.
mlir::LogicalResult noModel(const std::string &model) {
  diagnostics() << "attnc: error: "
                << (model.empty() ? std::string("the spec has no model, so no head dim or dtype to "
                                                "compile its attention for; use 'attnc run --op "
                                                "attention:NAME' with inputs")
                                  : "no model '" + model + "' in the spec")
                << "\n";
  return mlir::failure();
}

} // namespace

mlir::LogicalResult compileModelKernels(ModuleOp resolved, const ArtifactOptions &o,
                                        const std::string &target, CompiledKernels &out,
                                        std::string *ir) {
  OwningOpRef<ModuleOp> copy(resolved.clone());
  SmallVector<attn::ModelOp> models = selectedModels(*copy, o);
  if (models.empty())
    return noModel(o.model);
  for (attn::ModelOp model : models) {
    attn::LayerOp layer;
    attn::VariantOp variant = variantOf(model, layer);
    codegen::AttentionShape shape;
    // LSH decides its dense fallback from N: compile for the model's length
    // (the kernels themselves take N at run time).
    if (variant.getLsh())
      shape.seq = model.getSeq();
    shape.heads = model.getHeads();
    shape.maxSeq = model.getSeq();
    shape.headDim = model.getDModel() / model.getHeads();
    Builder b(copy->getContext());
    // The CPU backend computes in f32 whatever the model's dtype.
    attn::DType dtype = target == "cpu" ? attn::DType::fp32 : model.getDtype();
    shape.elementType = dtype == attn::DType::fp16   ? b.getF16Type()
                        : dtype == attn::DType::bf16 ? b.getBF16Type()
                                                     : b.getF32Type();
    shape.withLengths = true;
    shape.differentiate = true;
    if (failed(codegen::buildAttentionFunction(*copy, variant,
                                               (model.getSymName() + "_attention").str(), shape)))
      return mlir::failure();
  }
  if (mlir::failed(compileFunctions(*copy, target, o.arch, out)))
    return mlir::failure();
  if (ir) {
    llvm::raw_string_ostream os(*ir);
    copy->print(os);
    *ir += "\n";
  }
  return mlir::success();
}

mlir::LogicalResult buildArtifact(ModuleOp resolved, const std::string &specHash,
                                  const ArtifactOptions &o, Artifact &out,
                                  std::vector<CompiledModelCounts> *counts) {
  if (o.target != "cpu" && o.target != "cuda") {
    diagnostics() << "attnc: error: target '" << o.target << "': artifacts are for cpu or cuda\n";
    return mlir::failure();
  }
  const bool cuda = o.target == "cuda";
  SmallVector<attn::ModelOp> models = selectedModels(resolved, o);
  if (models.empty())
    return noModel(o.model);
  Manifest &info = out.manifest;
  info = Manifest();
  out.files.clear();
  info.specHash = specHash;
  info.target = o.target;
  info.arch = cuda ? o.arch : "host";
  info.source = cuda ? "kernels.cu" : "kernels.cpp";

  if (!cuda || o.deviceKernels) {
    CompiledKernels kernels;
    std::string ir;
    if (mlir::failed(compileModelKernels(resolved, o, o.target, kernels, &ir)))
      return mlir::failure();
    info.kernels = std::move(kernels.kernels);
    out.files[info.source] = std::move(kernels.source);
    out.files["attn.mlir"] = std::move(ir);
  }
  if (cuda && o.hostKernels) {
    CompiledKernels host;
    if (mlir::failed(compileModelKernels(resolved, o, "cpu", host, nullptr)))
      return mlir::failure();
    info.hostSource = "kernels.cpp";
    info.hostKernels = std::move(host.kernels);
    out.files[info.hostSource] = std::move(host.source);
  }

  // Each model's compiled training step and inference function: CPU, the
  // C++ of both; CUDA, the step's kernels (NVRTC where it trains) and host
  // code, and the CPU C++ of the inference function.
  for (attn::ModelOp model : models) {
    ModelGraph g;
    ModelGraphOptions graph;
    graph.batch = o.batch, graph.inferBatch = o.inferBatch;
    graph.emitSource = true, graph.recomputeLayers = o.recomputeLayers;
    if (!compileModelGraph(resolved, model, graph, g))
      return mlir::failure();
    attn::LayerOp layer;
    attn::VariantOp variant = variantOf(model, layer);
    const std::string stem = "model_" + model.getSymName().str();
    ManifestModel m;
    m.name = model.getSymName().str();
    m.batch = o.batch;
    m.stepSource = stem + (cuda ? "_host.cpp" : ".cpp");
    m.stepSymbol = cuda ? g.step.cudaSymbol : g.step.symbol;
    m.attentionFunction = (model.getSymName() + "_attention").str();
    m.arenaBytes = g.arenaBytes, m.keptBytes = g.keptBytes;
    m.args = g.step.args, m.gradArgs = g.step.gradArgs;
    m.configJson = train::modelConfigToJson(modelConfigOf(model, layer, variant));
    m.trainJson = train::trainSettingsToJson(trainSettingsOf(model));
    if (cuda) {
      m.stepKernels = stem + ".cu";
      m.stepAbi = ATTNC_CUDA_STEP_ABI;
      out.files[m.stepKernels] = std::move(g.step.cudaDeviceSource);
      out.files[m.stepSource] = std::move(g.step.cudaHostSource);
    }
    // Inference runs the CPU function on both targets (for cpu it is in
    // the step's own source).
    m.inferSource = stem + ".cpp";
    m.inferSymbol = g.step.inferSymbol;
    m.inferArenaBytes = g.step.inferArenaBytes, m.inferBatch = g.step.inferBatch;
    m.inferArgs = g.step.inferArgs;
    out.files[m.inferSource] = std::move(g.step.source);
    if (counts)
      counts->push_back({m.name, g.fusedKernels, g.gemms, g.attentionCalls, g.step.cudaSymbol});
    info.models.push_back(std::move(m));
  }
  return mlir::success();
}

mlir::LogicalResult writeArtifact(const std::string &dir, const Artifact &artifact) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir)) {
    diagnostics() << "attnc: error: cannot create the artifact directory '" << dir
                  << "': " << (ec ? ec.message() : "not a directory") << "\n";
    return mlir::failure();
  }
  // The manifest goes last: a directory with a manifest is complete.
  for (const auto &[name, text] : artifact.files)
    if (Status st = fs::writeFileAtomic(dir + "/" + name, text); !st) {
      diagnostics() << "attnc: error: " << st.error() << "\n";
      return mlir::failure();
    }
  if (Status st = fs::writeFileAtomic(dir + "/manifest.json", writeManifest(artifact.manifest));
      !st) {
    diagnostics() << "attnc: error: " << st.error() << "\n";
    return mlir::failure();
  }
  return mlir::success();
}

} // namespace attnc::driver
