//===- ApplyTuning.cpp - The tuning database's choices for `auto` tunables ===//
//
// The IR half of the tuner (docs/tuning.md): attnc tune measures kernels
// into a database; this pass gives each model's attention variant what was
// measured for its shape wherever the spec left it `auto`: the tile of its
// kernels (CPU, or CUDA for the arch) and, with `accuracy`, low-rank k or
// LSH rounds and chunk (the tightest error budget measured). Before the
// database, a run folder's pinned choices (run-choices). What it does not
// decide, attn-resolve-tunables does after it.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"
#include "passes/PassNotes.h"

#include "runtime/NvrtcCompiler.h" // parseGpuArch
#include "runtime/Sha256.h"
#include "runtime/tune/TuningDb.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdlib>
#include <map>
#include <sstream>

namespace attnc {
#define GEN_PASS_DEF_APPLYTUNING
#include "passes/Passes.h.inc"
} // namespace attnc

using namespace mlir;
using namespace attnc;
using namespace attnc::attn;

namespace attnc {

std::string cpuAttentionSignature(VariantOp variant, int64_t headDim) {
  OpBuilder b(variant);
  auto copy = llvm::cast<VariantOp>(b.clone(*variant));
  copy.setSymName("v");
  copy.setTileAttr(TileAttr::getAuto(variant.getContext()));
  std::string text;
  llvm::raw_string_ostream os(text);
  copy.print(os);
  copy.erase();
  return "cpu attention f32 d" + std::to_string(headDim) + " fwd+bwd " +
         Sha256::hexHash(os.str()).substr(0, 12);
}

} // namespace attnc

namespace {

bool tileIsAuto(TileAttr t) { return t.getBlockQ() == kAuto && t.getBlockKv() == kAuto; }

/// A number as attnc's messages print them (std::ostream's shortest form,
/// "0.5", where raw_ostream would print "5.000000e-01").
std::string num(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

struct ApplyTuningPass : public attnc::impl::ApplyTuningBase<ApplyTuningPass> {
  using ApplyTuningBase::ApplyTuningBase;

  /// The notes go where the caller sends pass notes (passes/PassNotes.h:
  /// the driver's Reporter, or attnc-opt's stderr), as attnc has always
  /// printed them ("attnc: ..."), when `report` is on.
  llvm::raw_ostream &log() { return report ? passNotes() : llvm::nulls(); }

  void runOnOperation() override {
    if (target != "cpu" && target != "cuda") {
      getOperation().emitError("attn-apply-tuning: target must be cpu or cuda, found '")
          << target << "'";
      return signalPassFailure();
    }
    if (failed(applyRunChoices()))
      return signalPassFailure();
    if (db.empty())
      return; // pins alone
    Expected<tune::TuningDb> opened = tune::TuningDb::open(db);
    if (!opened) {
      // A database that cannot be read leaves the heuristics in charge.
      log() << "attnc: warning: " << opened.error() << "; using the heuristic tile\n";
      return;
    }
    const tune::TuningDb &tuned = *opened;
    deviceId = device.empty() ? tune::cpuDevice().id() : std::string(device);
    if (target == "cpu" || accuracy)
      cpuToolchainId = toolchain.empty() ? tune::hostToolchain() : std::string(toolchain);
    ModuleOp module = getOperation();
    for (ModelOp model : module.getOps<ModelOp>()) {
      const bool pins = model.getSymName() == pinnedModel;
      if (accuracy && !(pins && pinnedAccuracy))
        applyAccuracy(tuned, model);
    }
    for (ModelOp model : module.getOps<ModelOp>()) {
      const bool pins = model.getSymName() == pinnedModel;
      if (target == "cpu" && !(pins && pinnedFfnChunk))
        applyFfnChunk(tuned, model);
      if (pins && pinnedTile)
        continue;
      if (target == "cpu")
        applyCpuTile(tuned, model);
      else if (failed(applyCudaTile(tuned, model)))
        return signalPassFailure();
    }
  }

  /// The run folder's layer: its pins for the named model's `auto`
  /// settings (an explicit setting is the spec's, which the run's spec
  /// hash already matched).
  LogicalResult applyRunChoices() {
    if (runChoices.empty())
      return success();
    ModuleOp module = getOperation();
    std::string modelName;
    std::map<std::string, int64_t> pins;
    for (const std::string &entry : runChoices) {
      auto [key, value] = llvm::StringRef(entry).split('=');
      int64_t n = 0;
      if (key == "model")
        modelName = value.str();
      else if (key != "block_q" && key != "block_kv" && key != "ffn_chunk" && key != "k" &&
               key != "lsh_rounds" && key != "lsh_chunk")
        return module.emitError("attn-apply-tuning: run-choices: unknown key '") << key << "'";
      else if (value.getAsInteger(10, n) || n < kAuto)
        return module.emitError("attn-apply-tuning: run-choices: '")
               << entry << "' is not KEY=N with N >= -1 (-1: the heuristic's)";
      else
        pins[key.str()] = n;
    }
    ModelOp model;
    for (ModelOp m : module.getOps<ModelOp>())
      if (m.getSymName() == modelName)
        model = m;
    if (!model)
      return module.emitError("attn-apply-tuning: run-choices name no model of this module: '")
             << modelName << "'";
    MLIRContext *ctx = module.getContext();
    VariantOp variant = variantOf(model);
    LayerOp layer = *model.getBody().getOps<LayerOp>().begin();
    auto pinned = [&](const char *key) -> std::optional<int64_t> {
      auto it = pins.find(key);
      return it == pins.end() ? std::nullopt : std::optional<int64_t>(it->second);
    };
    // A pinned -1 (auto) is the heuristic's choice, pinned too: the layers
    // below (the database) skip every pinned setting of this model.
    pinnedModel = model.getSymName().str();
    pinnedTile = pinned("block_q") && pinned("block_kv");
    pinnedFfnChunk = pinned("ffn_chunk").has_value();
    pinnedAccuracy = pinned("k") || pinned("lsh_rounds") || pinned("lsh_chunk");
    // LSH takes its tile from the chunk (pinned below); warps and stages
    // stay the heuristics'.
    if (pinnedTile && !variant.getLsh() && tileIsAuto(variant.getTile()))
      variant.setTileAttr(
          TileAttr::get(ctx, *pinned("block_q"), *pinned("block_kv"), kAuto, kAuto));
    if (auto chunk = layer.getFfnChunk(); chunk && int64_t(*chunk) == kAuto && pinnedFfnChunk)
      layer.setFfnChunkAttr(Builder(layer).getI64IntegerAttr(*pinned("ffn_chunk")));
    if (auto lr = variant.getLowrankAttr(); lr && lr.isAutoK() && pinned("k"))
      variant.setLowrankAttr(LowRankAttr::get(ctx, *pinned("k"), lr.getShare()));
    if (auto lsh = variant.getLshAttr()) {
      const int64_t rounds = lsh.getRounds() == kAuto && pinned("lsh_rounds")
                                 ? *pinned("lsh_rounds")
                                 : lsh.getRounds();
      const int64_t chunk =
          lsh.getChunk() == kAuto && pinned("lsh_chunk") ? *pinned("lsh_chunk") : lsh.getChunk();
      variant.setLshAttr(LshAttr::get(ctx, lsh.getBuckets(), rounds, chunk, lsh.getBefore(),
                                      lsh.getAfter(), lsh.getSeed(), lsh.getDenseFallback()));
    }
    return success();
  }

  static VariantOp variantOf(ModelOp model) {
    auto layer = *model.getBody().getOps<LayerOp>().begin();
    return SymbolTable::lookupNearestSymbolFrom<VariantOp>(model, layer.getAttentionAttr());
  }

  void applyAccuracy(const tune::TuningDb &tuned, ModelOp model) {
    VariantOp variant = variantOf(model);
    auto lr = variant.getLowrankAttr();
    auto lsh = variant.getLshAttr();
    const bool autoK = lr && lr.isAutoK();
    const bool autoLsh = lsh && (lsh.getRounds() == kAuto || lsh.getChunk() == kAuto);
    if (!autoK && !autoLsh)
      return;
    const int64_t H = model.getHeads(), D = model.getDModel() / H;
    const std::string name = variant.getSymName().str();
    const std::string prefix = tune::accuracySignaturePrefix(bool(lr), name, D);
    const std::string bucket = tune::shapeBucket(model.getSeq(), H);
    // The tightest error budget measured for this variant and shape wins.
    const tune::Entry *best = nullptr;
    double bestBudget = 0;
    for (const tune::Entry *e : tuned.entries()) {
      if (e->device.id() != deviceId || e->toolchain != cpuToolchainId ||
          e->kernel.shapeBucket != bucket || !e->chosen() ||
          e->kernel.signature.rfind(prefix, 0) != 0 ||
          e->kernel.signature.find(" crossover") != std::string::npos)
        continue;
      double budget = std::atof(e->kernel.signature.c_str() + prefix.size());
      if (!best || budget < bestBudget)
        best = e, bestBudget = budget;
    }
    if (!best) {
      log() << "attnc: note: " << name << " leaves " << (lr ? "k" : "LSH rounds/chunk")
            << " auto and " << db << " has no accuracy entry for it (attnc tune --max-error "
            << "measures one); using the heuristic\n";
      return;
    }
    std::map<std::string, int64_t> values;
    for (llvm::StringRef part : llvm::split(llvm::StringRef(best->config), ',')) {
      auto [k, v] = part.split('=');
      int64_t n = 0;
      if (!v.getAsInteger(10, n))
        values[k.str()] = n;
    }
    MLIRContext *ctx = model.getContext();
    if (autoK && values.count("k")) {
      variant.setLowrankAttr(LowRankAttr::get(ctx, values["k"], lr.getShare()));
    } else if (autoLsh && values.count("rounds") && values.count("chunk")) {
      variant.setLshAttr(LshAttr::get(
          ctx, lsh.getBuckets(), lsh.getRounds() == kAuto ? values["rounds"] : lsh.getRounds(),
          lsh.getChunk() == kAuto ? values["chunk"] : lsh.getChunk(), lsh.getBefore(),
          lsh.getAfter(), lsh.getSeed(), lsh.getDenseFallback()));
    } else {
      log() << "attnc: note: the tuner found exact attention as fast for " << name
            << " at this length (max_error " << num(bestBudget) << "); the spec's variant stays, "
            << "with the heuristic\n";
      return;
    }
    log() << "attnc: " << name << ": " << best->config << " from " << db << " (max_error "
          << num(bestBudget) << ", " << num(best->medianMs) << " ms)\n";
  }

  /// The FFN row chunk a spec left auto: attnc tune's entry for the layer's
  /// dims on this CPU. "All rows at once" is chunk 0 in the IR.
  void applyFfnChunk(const tune::TuningDb &tuned, ModelOp model) {
    LayerOp layer = *model.getBody().getOps<LayerOp>().begin();
    auto chunk = layer.getFfnChunk();
    if (!chunk || int64_t(*chunk) != kAuto)
      return;
    const std::string act = stringifyActivation(layer.getFfnAct().value_or(Activation::gelu)).str();
    const tune::KernelKey key =
        tune::ffnKey(model.getDModel(), model.getDFf(), act, layer.getReversible(), model.getSeq());
    const tune::Entry *e = tuned.find(deviceId, key, cpuToolchainId);
    std::optional<int> parsed = e ? tune::parseFfnChunkConfig(e->config) : std::nullopt;
    if (!parsed)
      return; // attn-resolve-tunables' heuristic
    layer.setFfnChunkAttr(Builder(layer).getI64IntegerAttr(*parsed));
    log() << "attnc: ffn: tuned " << e->config << " (" << num(e->medianMs)
          << " ms per layer step) from " << db << "\n";
  }

  void applyCpuTile(const tune::TuningDb &tuned, ModelOp model) {
    VariantOp variant = variantOf(model);
    if (variant.getLsh() || !tileIsAuto(variant.getTile()))
      return; // LSH: one chunk per task on the CPU; an explicit tile wins
    const int64_t heads = model.getHeads(), headDim = model.getDModel() / heads;
    tune::KernelKey key{cpuAttentionSignature(variant, headDim),
                        tune::shapeBucket(model.getSeq(), heads)};
    const tune::Entry *e = tuned.find(deviceId, key, cpuToolchainId);
    std::optional<tune::TileChoice> tile = e ? tune::parseTileConfig(e->config) : std::nullopt;
    if (!tile) {
      if (!tuned.empty())
        log() << "attnc: note: no tuning entry for " << variant.getSymName().str() << " ("
              << key.shapeBucket << ") on this CPU in " << db
              << "; using the heuristic tile (attnc tune measures one)\n";
      return;
    }
    variant.setTileAttr(TileAttr::get(variant.getContext(), tile->blockQ, tile->blockKv, 1, 1));
    log() << "attnc: " << variant.getSymName().str() << ": tuned tile " << e->config << " ("
          << num(e->medianMs) << " ms) from " << db << "\n";
  }

  LogicalResult applyCudaTile(const tune::TuningDb &tuned, ModelOp model) {
    VariantOp variant = variantOf(model);
    if (variant.getLsh() || !tileIsAuto(variant.getTile()))
      return success();
    Expected<GpuArch> gpu = parseGpuArch(arch);
    if (!gpu)
      return model.emitError("attn-apply-tuning: ") << gpu.error();
    const int64_t heads = model.getHeads(), headDim = model.getDModel() / heads;
    const std::string dtype = model.getDtype() == DType::fp32   ? "f32"
                              : model.getDtype() == DType::bf16 ? "bf16"
                                                                : "f16";
    // attnc tune --target cuda's key; any GPU of this arch (compiling here
    // need not happen on the GPU), the newest entry when there are several.
    const tune::KernelKey key =
        tune::cudaAttentionKey(dtype, headDim, variant.getSymName().str(), model.getSeq(), heads);
    const std::string tc =
        cudaToolchain.empty() ? tune::nvrtcToolchain() : std::string(cudaToolchain);
    const tune::Entry *best = nullptr;
    for (const tune::Entry *e : tuned.entries())
      if (e->device.kind == "cuda" && e->device.ccMajor * 10 + e->device.ccMinor == gpu->sm &&
          e->kernel.signature == key.signature && e->kernel.shapeBucket == key.shapeBucket &&
          e->toolchain == tc && e->chosen() && (!best || e->updated > best->updated))
        best = e;
    std::optional<tune::TileChoice> tile =
        best ? tune::parseTileConfig(best->config) : std::nullopt;
    if (!tile) {
      if (!tuned.empty())
        log() << "attnc: note: no CUDA tuning entry for " << variant.getSymName().str() << " ("
              << key.shapeBucket << ", " << arch << ") in " << db
              << "; using the heuristic tile (attnc tune --target cuda measures one on a GPU)\n";
      return success();
    }
    // The forward's tile (attn-derive-backward gives the backward its own).
    variant.setTileAttr(TileAttr::get(variant.getContext(), tile->blockQ, tile->blockKv,
                                      tile->warps, tile->stages));
    log() << "attnc: " << variant.getSymName().str() << ": tuned tile " << best->config << " ("
          << num(best->medianMs) << " ms on " << best->device.name << ") from " << db << "\n";
    return success();
  }

  std::string deviceId, cpuToolchainId;
  /// The model run-choices pinned, and which of its settings.
  std::string pinnedModel;
  bool pinnedTile = false, pinnedFfnChunk = false, pinnedAccuracy = false;
};

} // namespace
