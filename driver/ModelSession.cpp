//===- ModelSession.cpp - A spec's model prepared for training -----------===//
#include "driver/ModelSession.h"
#include "driver/Report.h"
#include "driver/Compile.h"
#include "driver/ModelConfigOf.h"
#include "driver/ModelGraph.h"
#include "driver/ModelIdentity.h"
#include "driver/Run.h"
#include "driver/Spec.h"
#include "driver/tune/Tune.h"

#include "runtime/CudaDriver.h"
#include "runtime/FileSystem.h"
#include "runtime/KernelCache.h"
#include "runtime/train/Checkpoint.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

#include <nlohmann/json.hpp>

#include <ostream>

using namespace mlir;

namespace attnc::driver {

namespace {

/// A run directory keeps the kernel choices of its first run (the attention
/// tile and the FFN chunk, which may come from the tuning database; k and
/// LSH rounds and chunk): resuming and evaluating use the same ones whatever
/// the database says now, since another tile or chunk sums in another order
/// and would break the exact resume. The file names the spec (hash) and
/// model it belongs to and is ignored for any other; `attnc train` writes
/// it (a fresh run with --no-resume chooses again), eval/generate/fill read
/// it, and the checks (--grad-check, --check-reversible) leave it alone.
/// They are the first layer attn-apply-tuning applies (its run-choices), in
/// the form runChoicesOf gives.
std::string runChoicesPath(const TrainCliOptions &opt) {
  return opt.run.out + "/kernel-choices.json";
}

/// The resolved choices of `model` as attn-apply-tuning's run-choices.
std::vector<std::string> runChoicesOf(attn::ModelOp model) {
  auto layer = *model.getBody().getOps<attn::LayerOp>().begin();
  auto variant =
      SymbolTable::lookupNearestSymbolFrom<attn::VariantOp>(model, layer.getAttentionAttr());
  const train::ModelConfig c = modelConfigOf(model, layer, variant);
  attn::TileAttr tile = variant.getTile();
  auto entry = [](const char *key, int64_t v) {
    return std::string(key) + "=" + std::to_string(v);
  };
  std::vector<std::string> out = {
      "model=" + model.getSymName().str(), entry("block_q", tile.getBlockQ()),
      entry("block_kv", tile.getBlockKv()), entry("ffn_chunk", c.ffnChunk)};
  if (c.lowrank)
    out.push_back(entry("k", c.lowrankK));
  if (auto lsh = variant.getLshAttr()) {
    out.push_back(entry("lsh_rounds", lsh.getRounds()));
    out.push_back(entry("lsh_chunk", lsh.getChunk()));
  }
  return out;
}

/// Reads the run directory's pins for this spec and model into `layer`
/// (empty when there are none, or they are another spec's or model's, or a
/// fresh run chooses again). A file that is not a kernel-choices file is an
/// error.
mlir::LogicalResult readRunChoices(const char *cmd, const TrainCliOptions &opt, Pin pin,
                                   const PreparedModel &p, std::vector<std::string> &layer) {
  if (pin == Pin::None || (pin == Pin::ReadWrite && !opt.run.resume))
    return mlir::success();
  const std::string path = runChoicesPath(opt);
  Expected<std::string> text = fs::readFile(path);
  if (!text)
    return mlir::success();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j["block_q"].is_number_integer() || !j["block_kv"].is_number_integer() ||
      !j["ffn_chunk"].is_number_integer() || !j["spec_hash"].is_string() || !j["model"].is_string())
    return commandError(cmd, path +
                                 " is not a kernel-choices file (an object with integer block_q, "
                                 "block_kv and ffn_chunk, and the spec_hash and model it belongs "
                                 "to); remove it to choose again");
  // The pins name the model too: a run from before identities carries the
  // spec text's hash, which the spec's models share.
  if (j["spec_hash"] != p.specHash || j["model"] != p.name)
    return mlir::success();
  layer.push_back("model=" + p.name);
  for (const char *key : {"block_q", "block_kv", "ffn_chunk", "k", "lsh_rounds", "lsh_chunk"})
    if (j.contains(key) && j[key].is_number_integer())
      layer.push_back(std::string(key) + "=" + std::to_string(j[key].get<int64_t>()));
  return mlir::success();
}

/// Says so when the run's pins differ from what the database and the
/// heuristics would choose today (what a fresh resolve of `fresh`, a copy
/// of the module before resolution, gives).
void notePinnedChoices(const char *cmd, const TrainCliOptions &opt, attn::ModelOp model,
                       ModuleOp fresh) {
  ResolveFor resolve;
  if (!resolveAuto(fresh, resolve))
    return;
  attn::ModelOp freshModel;
  for (attn::ModelOp m : fresh.getOps<attn::ModelOp>())
    if (m.getSymName() == model.getSymName())
      freshModel = m;
  const std::vector<std::string> pinned = runChoicesOf(model);
  if (!freshModel || runChoicesOf(freshModel) == pinned)
    return;
  auto value = [&](const std::string &key) {
    for (const std::string &e : pinned)
      if (e.rfind(key + "=", 0) == 0)
        return e.substr(key.size() + 1);
    return std::string();
  };
  const std::string k = value("k"), rounds = value("lsh_rounds");
  diagnostics() << "attnc " << cmd << ": using this run's kernel choices from "
                << runChoicesPath(opt) << " (tile " << value("block_q") << "x" << value("block_kv")
                << ", ffn chunk " << value("ffn_chunk") << (k.empty() ? "" : ", k " + k)
                << (rounds.empty() ? "" : ", LSH rounds " + rounds + " chunk " + value("lsh_chunk"))
                << ")\n";
}

/// attnc train: writes the run's choices unless the file already holds
/// this run's (or another spec's with its checkpoint: loading that fails
/// with a spec mismatch, and that run keeps its choices).
mlir::LogicalResult writeRunChoices(const char *cmd, const TrainCliOptions &opt, Pin pin,
                                    const PreparedModel &p, attn::ModelOp model, bool pinsApplied) {
  if (pin != Pin::ReadWrite || pinsApplied)
    return mlir::success();
  const std::string path = runChoicesPath(opt);
  if (opt.run.resume && fs::readFile(path) && fs::readFile(opt.run.out + "/latest.json"))
    return mlir::success();
  nlohmann::json j = {{"spec_hash", p.specHash}, {"model", p.name}, {"model_ir", p.modelText}};
  for (const std::string &e : runChoicesOf(model)) {
    auto eq = e.find('=');
    if (e.compare(0, eq, "model") != 0)
      j[e.substr(0, eq)] = std::stoll(e.substr(eq + 1));
  }
  if (Status st = fs::createDirectories(opt.run.out); !st)
    return commandError(cmd, st.error());
  if (Status st = fs::writeFileAtomic(path, j.dump(2) + "\n"); !st)
    return commandError(cmd, st.error());
  return mlir::success();
}

/// Sets the model's identity (p.specHash, p.modelText) and checks it
/// against the run folder's latest checkpoint when the command continues
/// that run: eval, generate and fill always, train when it resumes. A run
/// whose checkpoints carry this spec text's hash (attnc before identities)
/// keeps that hash. A different model is refused with what differs.
mlir::LogicalResult checkRunIdentity(const char *cmd, const TrainCliOptions &opt, Pin pin,
                                     attn::ModelOp model, const std::string &textHash,
                                     PreparedModel &p) {
  const ModelIdentity id = modelIdentity(model);
  p.specHash = id.hash, p.modelText = id.text;
  const bool continues = pin == Pin::Read || (pin == Pin::ReadWrite && opt.run.resume);
  const std::string runHash = train::latestCheckpointSpecHash(opt.run.out);
  if (runHash.empty() || runHash == id.hash)
    return mlir::success();
  if (runHash == textHash) {
    p.specHash = textHash;
    return mlir::success();
  }
  if (!continues)
    return mlir::success();
  std::string was;
  if (Expected<std::string> pins = fs::readFile(runChoicesPath(opt))) {
    nlohmann::json j = nlohmann::json::parse(*pins, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j["spec_hash"] == runHash && j["model_ir"].is_string())
      was = j["model_ir"].get<std::string>();
  }
  const std::string what =
      was.empty() ? " (its checkpoints predate recorded models, so what changed is unknown)\n"
                  : ":\n" + identityDifference(was, id.text);
  const std::string todo = std::string(cmd) == "train"
                               ? "restore the spec's model, or train it in a new run (another "
                                 "--out, or --no-resume to start this one again)"
                               : "restore the spec's model, or name the run it belongs to "
                                 "with --out";
  return commandError(cmd, "model " + p.name + " is not the one the run in " + opt.run.out +
                               " was trained with" + what +
                               "(comments, formatting, names, tiles, FFN chunks and the train "
                               "block do not count); " +
                               todo);
}

} // namespace

mlir::LogicalResult prepare(const char *cmd, const TrainCliOptions &opt, PreparedModel &p, Pin pin,
                            bool compileKernels) {
  if (opt.target == "cuda-sim")
    return commandError(cmd, "--target cuda-sim: only attnc train runs the CUDA step on the "
                             "emulator; " +
                                 std::string(cmd) + " runs on the CPU (leave --target out)");
  if (opt.target != "cpu" && opt.target != "cuda")
    return commandError(cmd, "--target " + opt.target + ": targets are cpu, cuda and cuda-sim");
  if (opt.target == "cuda") {
    if (std::string(cmd) != "train")
      return commandError(cmd, "--target cuda: only attnc train runs on the GPU so far (eval, "
                               "generate and fill run on the CPU: leave --target out)");
    if (opt.run.engine == "cuda-sim")
      return commandError(cmd, "--engine cuda-sim emulates the CUDA step on the CPU; it does not "
                               "take --target cuda");
    if (Status driver = cuda::Driver::available(); !driver)
      return commandError(cmd, "--target cuda: " + driver.error() +
                                   " (--engine cuda-sim checks the CUDA step on the CPU)");
  } else if (opt.run.precision != "auto" && opt.run.precision != "f32" &&
             opt.run.engine != "cuda-sim") {
    return commandError(cmd, "--precision " + opt.run.precision +
                                 " needs --target cuda or --engine "
                                 "cuda-sim (the CPU step trains in fp32)");
  }
  p.target = opt.target, p.precision = opt.run.precision, p.lossScale = opt.run.lossScale;
  std::string text;
  p.module = loadSpecModule(opt.spec, cmd, p.context, &text, opt.specText);
  if (!p.module)
    return mlir::failure();
  attn::ModelOp model;
  std::string names;
  int count = 0;
  for (attn::ModelOp m : p.module->getOps<attn::ModelOp>()) {
    names += (names.empty() ? "" : ", ") + m.getSymName().str();
    ++count;
    if (m.getSymName() == opt.run.model || (opt.run.model.empty() && count == 1))
      model = m;
  }
  if (opt.run.model.empty() && count > 1)
    return commandError(cmd, "the spec has several models (" + names + "); name one with --model");
  if (!model)
    return commandError(cmd, names.empty() ? "'" + opt.spec + "' has no model to train"
                                           : "no model '" + opt.run.model + "' in " + opt.spec +
                                                 " (it has: " + names + ")");
  p.name = model.getSymName().str();
  if (mlir::failed(checkRunIdentity(cmd, opt, pin, model, sha256Hex(text), p)))
    return mlir::failure();
  // The run's pinned choices, then the tuning database's CPU tiles, FFN
  // chunks and accuracy choices (attn-apply-tuning), then the heuristics.
  // The variant's one tile serves the CPU kernels (which every run
  // compiles: evaluation and inference run them) and, re-planned for the
  // device, the GPU's: the CPU's entries.
  ResolveFor resolve;
  resolve.report = true;
  if (mlir::failed(readRunChoices(cmd, opt, pin, p, resolve.runChoices)))
    return mlir::failure();
  OwningOpRef<ModuleOp> fresh;
  if (!resolve.runChoices.empty())
    fresh = p.module->clone();
  if (!resolveAuto(*p.module, resolve))
    return mlir::failure();
  if (fresh)
    notePinnedChoices(cmd, opt, model, *fresh);
  // The model's dtype is the GPU step's compute precision unless
  // --precision names one (the CPU trains in fp32 either way).
  const std::string dtype = attn::stringifyDType(model.getDtype()).str();
  if (p.precision == "auto")
    p.precision = p.target == "cpu" && opt.run.engine != "cuda-sim" ? "f32"
                  : dtype == "fp32"                                 ? "f32"
                                                                    : dtype;
  auto layer = *model.getBody().getOps<attn::LayerOp>().begin();
  auto variant =
      SymbolTable::lookupNearestSymbolFrom<attn::VariantOp>(model, layer.getAttentionAttr());
  train::ModelConfig &c = p.config;
  c = modelConfigOf(model, layer, variant);
  c.dropoutSeed = opt.run.seed;
  if (c.dModel % c.heads)
    return commandError(cmd, "d_model " + std::to_string(c.dModel) +
                                 " is not a multiple of heads " + std::to_string(c.heads));
  if (mlir::failed(writeRunChoices(cmd, opt, pin, p, model, !resolve.runChoices.empty())))
    return mlir::failure();
  if (!compileKernels)
    return mlir::success();
  codegen::AttentionShape shape;
  shape.batch = opt.batch, shape.heads = c.heads, shape.seq = c.seq;
  shape.headDim = c.dModel / c.heads, shape.maxSeq = c.seq;
  shape.elementType = FloatType::getF32(&p.context);
  shape.withLengths = true;
  shape.differentiate = true;
  if (p.target == "cuda") {
    Expected<cuda::DeviceInfo> dev = cuda::queryDevice(0);
    if (!dev)
      return commandError(cmd, dev.error());
    // On the GPU the attention computes in the model's dtype (inputs and
    // outputs stay fp32 in the step; CudaAttention converts).
    codegen::AttentionShape gpuShape = shape;
    Builder bld(&p.context);
    gpuShape.elementType = dtype == "fp16"   ? Type(bld.getF16Type())
                           : dtype == "bf16" ? Type(bld.getBF16Type())
                                             : Type(bld.getF32Type());
    std::optional<CudaAttention> kernels;
    if (mlir::failed(
            compileCudaAttention(*p.module, variant, gpuShape, dev->arch(), false, kernels)))
      return mlir::failure();
    p.cudaKernels = std::make_shared<CudaAttention>(std::move(*kernels));
    diagnostics() << "attnc " << cmd << ": on " << dev->describe() << "\n";
  }
  return compileCpuAttention(*p.module, variant, shape, p.kernels);
}

attn::ModelOp PreparedModel::model() {
  return SymbolTable::lookupNearestSymbolFrom<attn::ModelOp>(*module,
                                                             StringAttr::get(&context, name));
}

train::AttentionFn attentionOf(PreparedModel &p) {
  if (p.cudaKernels)
    return [k = p.cudaKernels](const AttentionInputs &in) { return k->run(in); };
  return [&p](const AttentionInputs &in) { return p.kernels->run(in); };
}

/// The compiled training step and inference function of the prepared model.
Expected<std::unique_ptr<train::CompiledStep>>
compiledStep(PreparedModel &p, train::ParameterStore &store, const StepPlan &plan) {
  // Reversible layers rebuild their inputs anyway.
  const bool recomputeLayers = plan.recomputeLayers && !p.config.reversible;
  attn::ModelOp m = p.model();
  ModelGraph g;
  ModelGraphOptions graph;
  graph.batch = plan.batch > 0 ? plan.batch : plan.inferBatch;
  graph.train = plan.batch > 0;
  graph.infer = plan.inferBatch > 0;
  graph.inferBatch = plan.inferBatch;
  graph.emitSource = true, graph.recomputeLayers = recomputeLayers;
  graph.fuseInChunks = plan.fuseInChunks;
  if (!compileModelGraph(*p.module, m, graph, g))
    return makeError("whole-model compilation of " + p.name + " failed (see the diagnostics)");
  if (graph.train)
    diagnostics() << "attnc train: compiled step of " << p.name
                  << (recomputeLayers ? " (layers recomputed in the backward)" : "") << ": arena "
                  << g.arenaBytes / 1024 << " KiB, " << g.fusedKernels << " fused row kernels, "
                  << g.gemms << " GEMMs, " << g.attentionCalls << " attention calls\n";
  // The CPU step; the CUDA step on the GPU; or the CUDA step with its
  // kernels on the SIMT emulator. Inference runs the CPU C++ on all three.
  train::StepEngine stepEngine = train::StepEngine::Cpu;
  if (graph.train && p.target == "cuda") {
    diagnostics() << "attnc train: the CUDA step (" << g.step.cudaSymbol
                  << ") on the GPU, GEMMs in " << p.precision << "\n";
    stepEngine = train::StepEngine::Cuda;
  } else if (graph.train && plan.engine == "cuda-sim") {
    diagnostics() << "attnc train: cuda-sim: the CUDA step's kernels (" << g.step.cudaSymbol
                  << ") run on the SIMT emulator, GEMM inputs rounded as " << p.precision << "\n";
    stepEngine = train::StepEngine::CudaSim;
  }
  if (!graph.train) { // inference only
    g.step.symbol.clear();
    g.step.cudaSymbol.clear();
  }
  train::StepPrecision precision;
  precision.gemm = p.precision, precision.initialLossScale = p.lossScale;
  return train::CompiledStep::create(
      std::move(g.step), store, plan.attention ? plan.attention : attentionOf(p),
      HostCompiler(&KernelCache::processDefault()), stepEngine, precision);
}

} // namespace attnc::driver
