//===- Train.cpp - attnc train / eval -------------------------------------===//
//
// The model-level commands: the spec's model becomes a train::Model whose
// attention is the variant's generated CPU kernel (forward and backward,
// compiled by the kernel pipeline for the model's shape), trained by
// train::train (runtime/train/Trainer.h).
//
//===----------------------------------------------------------------------===//
#include "driver/Train.h"
#include "driver/Compile.h"
#include "driver/ModelConfig.h"
#include "driver/ModelGraph.h"
#include "driver/BenchCommon.h"
#include "driver/Run.h"
#include "driver/Tune.h"

#include "runtime/CudaAttention.h"
#include "runtime/CudaDriver.h"
#include "runtime/FileSystem.h"
#include "runtime/KernelCache.h"

#include <nlohmann/json.hpp>

#include "dsl/MLIRGen.h"
#include "dsl/Parser.h"
#include "passes/Passes.h"
#include "runtime/Philox.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/CompiledStep.h"
#include "runtime/train/Trainer.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <cmath>
#include <sys/resource.h>
#include <fstream>
#include <iostream>
#include <sstream>

using namespace mlir;

namespace attnc::driver {

namespace {

int fail(const char *cmd, const std::string &msg) {
  std::cerr << "attnc " << cmd << ": error: " << msg << "\n";
  return kExitInput;
}

/// What both commands build: the spec's model with compiled attention.
struct Prepared {
  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  std::optional<CpuAttention> kernels;
  /// --target cuda: the attention on the GPU (host in, host out), which the
  /// model and the compiled CUDA step call instead of `kernels`.
  std::shared_ptr<CudaAttention> cudaKernels;
  std::string target = "cpu", precision = "f32";
  float lossScale = 0;
  train::ModelConfig config;
  std::string specHash, name;
};

/// What a command does with the run directory's kernel choices.
enum class Pin { None, Read, ReadWrite };

/// A run directory keeps the kernel choices of its first run (the attention
/// tile and the FFN chunk, which may come from the tuning database):
/// resuming and evaluating use the same ones whatever the database says now,
/// since another tile or chunk sums in another order and would break the
/// exact resume. The file names the spec (hash) and model it belongs to and
/// is ignored for any other; `attnc train` writes it (a fresh run with
/// --no-resume chooses again), eval/generate/fill read it, and the checks
/// (--grad-check, --check-reversible) leave it alone.
int pinRunChoices(const char *cmd, const TrainCliOptions &opt, Pin pin, const Prepared &p,
                  attn::VariantOp variant, train::ModelConfig &c) {
  if (pin == Pin::None)
    return kExitOk;
  const std::string path = opt.out + "/kernel-choices.json";
  attn::TileAttr tile = variant.getTile();
  Expected<std::string> text = fs::readFile(path);
  if (text && !(pin == Pin::ReadWrite && !opt.resume)) {
    nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j["block_q"].is_number_integer() || !j["block_kv"].is_number_integer() ||
        !j["ffn_chunk"].is_number_integer() || !j["spec_hash"].is_string() ||
        !j["model"].is_string())
      return fail(cmd, path + " is not a kernel-choices file (an object with integer block_q, "
                              "block_kv and ffn_chunk, and the spec_hash and model it belongs "
                              "to); remove it to choose again");
    if (j["spec_hash"] == p.specHash && j["model"] == p.name) {
      const int64_t bq = j["block_q"], bkv = j["block_kv"], chunk = j["ffn_chunk"];
      // k and LSH rounds/chunk shape the weights: the run's own values.
      const int64_t k = j.value("k", int64_t(c.lowrankK));
      const int64_t rounds = j.value("lsh_rounds", int64_t(c.lshRounds));
      auto lsh = variant.getLshAttr();
      const int64_t lshChunk = j.value("lsh_chunk", lsh ? int64_t(lsh.getChunk()) : 0);
      if (bq != tile.getBlockQ() || bkv != tile.getBlockKv() || chunk != c.ffnChunk ||
          k != c.lowrankK || rounds != c.lshRounds || (lsh && lshChunk != lsh.getChunk()))
        std::cerr << "attnc " << cmd << ": using this run's kernel choices from " << path
                  << " (tile " << bq << "x" << bkv << ", ffn chunk " << chunk
                  << (c.lowrank ? ", k " + std::to_string(k) : "")
                  << (lsh ? ", LSH rounds " + std::to_string(rounds) + " chunk " +
                                std::to_string(lshChunk)
                          : "")
                  << ")\n";
      variant.setTileAttr(
          attn::TileAttr::get(variant.getContext(), bq, bkv, tile.getWarps(), tile.getStages()));
      c.ffnChunk = int(chunk);
      if (auto lr = variant.getLowrankAttr()) {
        variant.setLowrankAttr(attn::LowRankAttr::get(variant.getContext(), k, lr.getShare()));
        c.lowrankK = int(k);
      }
      if (lsh) {
        variant.setLshAttr(attn::LshAttr::get(variant.getContext(), lsh.getBuckets(), rounds,
                                              lshChunk, lsh.getBefore(), lsh.getAfter(),
                                              lsh.getSeed(), lsh.getDenseFallback()));
        c.lshRounds = int(rounds);
      }
      return kExitOk;
    }
  }
  if (pin != Pin::ReadWrite)
    return kExitOk;
  // Another spec's or model's file with its checkpoint stays: loading that
  // checkpoint fails with a spec mismatch, and that run keeps its choices.
  if (text && opt.resume && fs::readFile(opt.out + "/latest.json"))
    return kExitOk;
  nlohmann::json j = {{"spec_hash", p.specHash},
                      {"model", p.name},
                      {"block_q", tile.getBlockQ()},
                      {"block_kv", tile.getBlockKv()},
                      {"ffn_chunk", c.ffnChunk}};
  if (c.lowrank)
    j["k"] = c.lowrankK;
  if (auto lsh = variant.getLshAttr())
    j["lsh_rounds"] = lsh.getRounds(), j["lsh_chunk"] = lsh.getChunk();
  if (Status st = fs::createDirectories(opt.out); !st)
    return fail(cmd, st.error());
  if (Status st = fs::writeFileAtomic(path, j.dump(2) + "\n"); !st)
    return fail(cmd, st.error());
  return kExitOk;
}

int prepare(const char *cmd, const TrainCliOptions &opt, Prepared &p, Pin pin = Pin::Read) {
  if (opt.target != "cpu" && opt.target != "cuda")
    return fail(cmd, "--target " + opt.target + ": targets are cpu and cuda");
  if (opt.target == "cuda") {
    if (std::string(cmd) != "train")
      return fail(cmd, "--target cuda: only attnc train runs on the GPU so far (eval, "
                       "generate and fill run on the CPU: leave --target out)");
    if (opt.engine == "cuda-sim")
      return fail(cmd, "--engine cuda-sim emulates the CUDA step on the CPU; it does not "
                       "take --target cuda");
    if (Status driver = cuda::Driver::available(); !driver)
      return fail(cmd, "--target cuda: " + driver.error() +
                           " (--engine cuda-sim checks the CUDA step on the CPU)");
  } else if (opt.precision != "auto" && opt.precision != "f32" && opt.engine != "cuda-sim") {
    return fail(cmd, "--precision " + opt.precision +
                         " needs --target cuda or --engine "
                         "cuda-sim (the CPU step trains in fp32)");
  }
  p.target = opt.target, p.precision = opt.precision, p.lossScale = opt.lossScale;
  std::string text;
  p.module = loadSpecModule(opt.spec, cmd, p.context, &text);
  if (!p.module)
    return kExitInput;
  p.specHash = sha256Hex(text);
  const std::set<std::string> autoFfn = modelsWithAutoFfnChunk(*p.module);
  // The tuning database's CPU tiles and accuracy choices (attn-apply-tuning),
  // then the heuristics; the FFN chunk from the database below.
  ResolvePipelineOptions resolve;
  resolve.tuningDb = tuningDbPath();
  resolve.report = true;
  if (!runResolvePipeline(*p.module, resolve))
    return kExitInput;
  attn::ModelOp model;
  std::string names;
  int count = 0;
  for (attn::ModelOp m : p.module->getOps<attn::ModelOp>()) {
    names += (names.empty() ? "" : ", ") + m.getSymName().str();
    ++count;
    if (m.getSymName() == opt.model || (opt.model.empty() && count == 1))
      model = m;
  }
  if (opt.model.empty() && count > 1)
    return fail(cmd, "the spec has several models (" + names + "); name one with --model");
  if (!model)
    return fail(cmd, names.empty() ? "'" + opt.spec + "' has no model to train"
                                   : "no model '" + opt.model + "' in " + opt.spec +
                                         " (it has: " + names + ")");
  p.name = model.getSymName().str();
  // The model's dtype is the GPU step's compute precision unless
  // --precision names one (the CPU trains in fp32 either way).
  const std::string dtype = attn::stringifyDType(model.getDtype()).str();
  if (p.precision == "auto")
    p.precision = p.target == "cpu" && opt.engine != "cuda-sim" ? "f32"
                  : dtype == "fp32"                             ? "f32"
                                                                : dtype;
  auto layer = *model.getBody().getOps<attn::LayerOp>().begin();
  auto variant =
      SymbolTable::lookupNearestSymbolFrom<attn::VariantOp>(model, layer.getAttentionAttr());
  train::ModelConfig &c = p.config;
  c = modelConfigOf(model, layer, variant);
  c.dropoutSeed = opt.seed;
  if (c.dModel % c.heads)
    return fail(cmd, "d_model " + std::to_string(c.dModel) + " is not a multiple of heads " +
                         std::to_string(c.heads));
  if (autoFfn.count(p.name))
    if (int chunk = tunedFfnChunk(TuningLookup::open(), c, std::cerr))
      c.ffnChunk = chunk > 0 ? chunk : 0;
  if (int rc = pinRunChoices(cmd, opt, pin, p, variant, c))
    return rc;
  codegen::AttentionShape shape;
  shape.batch = opt.batch, shape.heads = c.heads, shape.seq = c.seq;
  shape.headDim = c.dModel / c.heads, shape.maxSeq = c.seq;
  shape.elementType = FloatType::getF32(&p.context);
  shape.withLengths = true;
  shape.differentiate = true;
  if (p.target == "cuda") {
    Expected<cuda::DeviceInfo> dev = cuda::queryDevice(0);
    if (!dev)
      return fail(cmd, dev.error());
    // On the GPU the attention computes in the model's dtype (inputs and
    // outputs stay fp32 in the step; CudaAttention converts).
    codegen::AttentionShape gpuShape = shape;
    Builder bld(&p.context);
    gpuShape.elementType = dtype == "fp16"   ? Type(bld.getF16Type())
                           : dtype == "bf16" ? Type(bld.getBF16Type())
                                             : Type(bld.getF32Type());
    std::optional<CudaAttention> kernels;
    if (int rc = compileCudaAttention(*p.module, variant, gpuShape, dev->arch(), kernels))
      return rc;
    p.cudaKernels = std::make_shared<CudaAttention>(std::move(*kernels));
    std::cerr << "attnc " << cmd << ": on " << dev->describe() << "\n";
  }
  return compileCpuAttention(*p.module, variant, shape, p.kernels);
}

/// Peak resident set size of this process (getrusage), in MiB.
long peakRssMiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024; // Linux reports KiB
}

train::AttentionFn attentionOf(Prepared &p) {
  if (p.cudaKernels)
    return [k = p.cudaKernels](const AttentionInputs &in) { return k->run(in); };
  return [&p](const AttentionInputs &in) { return p.kernels->run(in); };
}

} // namespace

namespace {

Expected<std::unique_ptr<train::CompiledStep>> compiledStep(Prepared &p, train::Model &model,
                                                            int batch, bool recomputeLayers,
                                                            const std::string &engine = "compiled",
                                                            bool fuseInChunks = true);

/// --grad-check: finite differences of the whole model on the first batch,
/// on the engine --engine names (the compiled step by default).
int gradCheck(Prepared &p, const train::DataSource &data, const TrainCliOptions &opt) {
  train::Model model(p.config, attentionOf(p), opt.seed);
  train::Batch b = data.train(opt.seed, 0, opt.batch);
  if (p.config.dropout > 0 || p.config.attentionDropout > 0) { // the masks change the loss
    Expected<train::StepResult> off = model.run(b, false);
    model.setDropout(true, 0);
    Expected<train::StepResult> on = model.run(b, false);
    if (!off || !on)
      return fail("train", !off ? off.error() : on.error());
    std::cout << "dropout " << p.config.dropout << ", attention dropout "
              << p.config.attentionDropout << ": loss " << on->meanLoss()
              << " with the masks of step 0, " << off->meanLoss() << " without\n";
  }
  model.setDropout(true, 0); // fixed masks: the loss is a function of the weights
  train::LossFn loss;        // the runtime engine: Model::run
  std::unique_ptr<train::CompiledStep> step;
  if (opt.engine != "runtime") {
    Expected<std::unique_ptr<train::CompiledStep>> s =
        compiledStep(p, model, opt.batch, opt.recomputeLayers, opt.engine);
    if (!s)
      return fail("train", s.error());
    step = std::move(*s);
    // Step 0's masks, like the runtime engine's above.
    loss = [&](bool) { return step->run(b, /*training=*/true, 0); };
  }
  Expected<train::GradCheckResult> r = train::gradientCheck(
      model, b, opt.gradCheck, opt.gradCheckEps, opt.seed, /*floor=*/1e-2, loss);
  if (!r)
    return fail("train", r.error());
  for (const train::GradCheckProbe &pr : r->probes)
    std::cout << "  " << pr.param << "[" << pr.index << "]: analytic " << pr.analytic << " numeric "
              << pr.numeric << "\n";
  bool ok = r->worst <= opt.gradCheckTol;
  // A check where most probes hit jumps would prove nothing.
  ok = ok && r->probes.size() >= 2 * size_t(r->nonSmooth);
  std::cout << (ok ? "gradient check passed" : "gradient check FAILED") << ": " << r->probes.size()
            << " probes, worst relative error " << r->worst << " (" << r->worstParam
            << "), tolerance " << opt.gradCheckTol << "; " << r->nonSmooth
            << " probe(s) skipped where the loss jumps (LSH buckets, ReLU)\n";
  return ok ? kExitOk : kExitInput;
}

/// --check-reversible: the backward from rebuilt inputs against the one from
/// stored inputs, and the activation plans for 2, 6 and 12 layers.
int checkReversible(Prepared &p, const train::DataSource &data, const TrainCliOptions &opt) {
  if (!p.config.reversible)
    return fail("train", "--check-reversible needs a model with reversible layers");
  train::ModelConfig stored = p.config;
  stored.storeReversibleInputs = true;
  train::Model a(p.config, attentionOf(p), opt.seed), b(stored, attentionOf(p), opt.seed);
  train::Batch batch = data.train(opt.seed, 0, opt.batch);
  a.zeroGrads();
  b.zeroGrads();
  a.setDropout(true, 0), b.setDropout(true, 0); // the rebuild must replay the masks
  Expected<train::StepResult> ra = a.run(batch, true), rb = b.run(batch, true);
  if (!ra || !rb)
    return fail("train", !ra ? ra.error() : rb.error());
  std::vector<train::ParamRef> pa = a.params(), pb = b.params();
  double worst = 0;
  std::string where;
  for (size_t i = 0; i < pa.size(); ++i)
    for (int64_t j = 0; j < pa[i].size; ++j) {
      double d = std::abs(double(pa[i].grad[j]) - double(pb[i].grad[j]));
      if (d > worst)
        worst = d, where = pa[i].name;
    }
  bool ok = worst <= 1e-4;
  std::cout << "reversible backward (rebuilt inputs) vs stored inputs: max |difference| of the "
               "gradients "
            << worst << " (" << where << ")" << (ok ? "" : " > 1e-4: FAILED") << "\n";
  std::cout << "activation memory kept for the backward (batch " << opt.batch << "):\n";
  for (int layers : {2, 6, 12}) {
    train::ModelConfig c = p.config;
    c.layers = layers;
    train::ModelConfig s = c;
    s.storeReversibleInputs = true; // what storing every layer's inputs would keep
    train::Model rev(c, attentionOf(p), 0), std(s, attentionOf(p), 0);
    std::cout << "  " << layers << " layers: reversible " << rev.activationPlan(opt.batch).keptBytes
              << " bytes, storing inputs " << std.activationPlan(opt.batch).keptBytes << " bytes\n";
  }
  return ok ? kExitOk : kExitInput;
}

} // namespace

namespace {

/// The compiled whole-model step of the prepared model for `batch`.
Expected<std::unique_ptr<train::CompiledStep>> compiledStep(Prepared &p, train::Model &model,
                                                            int batch, bool recomputeLayers,
                                                            const std::string &engine,
                                                            bool fuseInChunks) {
  // Reversible layers rebuild their inputs anyway.
  recomputeLayers = recomputeLayers && !p.config.reversible;
  attn::ModelOp m;
  for (attn::ModelOp op : p.module->getOps<attn::ModelOp>())
    if (op.getSymName() == p.name)
      m = op;
  // The FFN chunk the run uses (tuned, or pinned by kernel-choices.json)
  // may differ from the spec's resolved one: the compiled step uses it too.
  attn::LayerOp layer = *m.getBody().getOps<attn::LayerOp>().begin();
  if (layer.getFfnChunk()) {
    const int64_t rows = int64_t(batch) * p.config.seq;
    layer.setFfnChunkAttr(
        mlir::Builder(m).getI64IntegerAttr(p.config.ffnChunk > 0 ? p.config.ffnChunk : rows));
  }
  ModelGraph g;
  if (!compileModelGraph(*p.module, m, batch, 0, /*emitSource=*/true, g, recomputeLayers,
                         fuseInChunks))
    return makeError("whole-model compilation of " + p.name + " failed (see the diagnostics)");
  std::cerr << "attnc train: compiled step of " << p.name
            << (recomputeLayers ? " (layers recomputed in the backward)" : "") << ": arena "
            << g.arenaBytes / 1024 << " KiB, " << g.fusedKernels << " fused row kernels, "
            << g.gemms << " GEMMs, " << g.attentionCalls << " attention calls\n";
  // The CPU step; the CUDA step on the GPU; or the CUDA step with its
  // kernels on the SIMT emulator.
  train::StepEngine stepEngine = train::StepEngine::Cpu;
  if (p.target == "cuda") {
    std::cerr << "attnc train: the CUDA step (" << g.step.cudaSymbol << ") on the GPU, GEMMs in "
              << p.precision << "\n";
    stepEngine = train::StepEngine::Cuda;
  } else if (engine == "cuda-sim") {
    std::cerr << "attnc train: cuda-sim: the CUDA step's kernels (" << g.step.cudaSymbol
              << ") run on the SIMT emulator, GEMM inputs rounded as " << p.precision << "\n";
    stepEngine = train::StepEngine::CudaSim;
  }
  train::StepPrecision precision;
  precision.gemm = p.precision, precision.initialLossScale = p.lossScale;
  return train::CompiledStep::create(std::move(g.step), model, attentionOf(p),
                                     HostCompiler(&KernelCache::processDefault()), stepEngine,
                                     precision);
}

/// --compare-engines: the runtime's and the compiled step on one batch.
int compareEngines(Prepared &p, const train::DataSource &data, const TrainCliOptions &opt) {
  train::Model model(p.config, attentionOf(p), opt.seed);
  Expected<std::unique_ptr<train::CompiledStep>> step = compiledStep(
      p, model, opt.batch, opt.recomputeLayers, opt.engine == "runtime" ? "compiled" : opt.engine);
  if (!step)
    return fail("train", step.error());
  train::Batch batch = data.train(opt.seed, 0, opt.batch);
  model.zeroGrads();
  model.setDropout(true, 0);
  Expected<train::StepResult> r = model.run(batch, true);
  if (!r)
    return fail("train", r.error());
  std::vector<train::ParamRef> params = model.params();
  std::vector<std::vector<float>> runtimeGrads;
  for (const train::ParamRef &pr : params)
    runtimeGrads.emplace_back(pr.grad, pr.grad + pr.size);
  model.zeroGrads();
  Expected<double> loss = (*step)->run(batch, true, 0);
  if (!loss)
    return fail("train", loss.error());
  // Per tensor: max |difference| relative to the tensor's largest gradient,
  // or to 1e-4 of the largest of all when the tensor's is tiny (the key
  // bias's gradient is zero in exact arithmetic: softmax ignores a shift).
  double global = 0;
  for (const std::vector<float> &g : runtimeGrads)
    for (float x : g)
      global = std::max(global, std::abs(double(x)));
  double worst = 0;
  std::string where;
  for (size_t i = 0; i < params.size(); ++i) {
    double diff = 0, scale = std::max(1e-4 * global, 1e-30);
    for (int64_t j = 0; j < params[i].size; ++j) {
      diff = std::max(diff, std::abs(double(params[i].grad[j]) - runtimeGrads[i][size_t(j)]));
      scale = std::max(scale, std::abs(double(runtimeGrads[i][size_t(j)])));
    }
    if (diff / scale > worst)
      worst = diff / scale, where = params[i].name;
  }
  double lossDiff = std::abs(*loss - r->meanLoss());
  bool ok = worst <= 1e-3 && lossDiff <= 1e-4 * std::max(1.0, std::abs(r->meanLoss()));
  std::cout << "loss: runtime " << r->meanLoss() << ", "
            << (opt.engine == "cuda-sim" ? "cuda-sim " : "compiled ") << *loss << "\n"
            << "gradients: worst max|difference|/max|gradient| " << worst << " (" << where
            << ") over " << params.size() << " tensors" << (ok ? "" : "  > 1e-3: FAILED") << "\n";
  return ok ? kExitOk : kExitInput;
}

} // namespace

int benchEngines(const TrainCliOptions &opt, int repeats, const std::string &csvPath,
                 const std::string &svgPath) {
  Prepared p;
  if (int rc = prepare("bench", opt, p, Pin::None))
    return rc;
  train::Model model(p.config, attentionOf(p), opt.seed);
  // The compiled step as planned, and (standard layers) with each layer
  // recomputed in the backward.
  struct Engine {
    std::string name;
    std::unique_ptr<train::CompiledStep> step; ///< null: the runtime engine
    std::vector<double> ms;
    int64_t bytes = 0;
  };
  std::vector<Engine> engines(1);
  engines[0].name = "runtime";
  const train::Model::ActivationPlan plan = model.activationPlan(opt.batch);
  engines[0].bytes = plan.keptBytes + plan.scratchBytes;
  // The last: as attnc train runs it, without fusion inside chunked FFN
  // bodies (what that fusion gains; only when the FFN is chunked).
  const bool recomputeByDefault = !p.config.reversible;
  const bool chunked = p.config.ffnChunk > 0 && p.config.ffnChunk < opt.batch * p.config.seq;
  std::vector<std::pair<bool, bool>> variants = {{false, true}}; // {recompute, fuse in chunks}
  if (!p.config.reversible)
    variants.push_back({true, true});
  if (chunked)
    variants.push_back({recomputeByDefault, false});
  for (auto [recompute, fuseInChunks] : variants) {
    Expected<std::unique_ptr<train::CompiledStep>> step =
        compiledStep(p, model, opt.batch, recompute, "compiled", fuseInChunks);
    if (!step)
      return fail("bench", step.error());
    Engine e;
    e.name = recompute ? "compiled (layers recomputed)" : "compiled";
    if (!fuseInChunks)
      e.name += ", FFN chunks unfused";
    e.bytes = (*step)->arenaBytes();
    e.step = std::move(*step);
    engines.push_back(std::move(e));
  }
  train::Batch batch = syntheticBatch(p.config, opt.batch);
  auto run = [&](Engine &e) -> Status {
    model.zeroGrads();
    if (e.step) {
      Expected<double> r = e.step->run(batch, true, 0);
      return r ? Status() : Status(r.takeError());
    }
    model.setDropout(true, 0);
    Expected<train::StepResult> r = model.run(batch, true);
    return r ? Status() : Status(r.takeError());
  };
  // One warm-up each, then the engines interleaved, so all see the same
  // machine load; medians of the repeats.
  for (int i = -1; i < repeats; ++i)
    for (Engine &e : engines) {
      auto t0 = std::chrono::steady_clock::now();
      if (Status st = run(e); !st)
        return fail("bench", st.error());
      if (i >= 0)
        e.ms.push_back(
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count());
    }
  const double tokens = double(opt.batch) * p.config.seq;
  std::cout << "training step of " << p.name << " (batch " << opt.batch << ", seq " << p.config.seq
            << ", " << p.config.layers << (p.config.reversible ? " reversible" : "")
            << " layer(s)), median of " << repeats << ", interleaved:\n";
  std::ofstream csv(csvPath, std::ios::app);
  if (csv.tellp() == 0)
    csv << "model,batch,seq,layers,engine,ms,activation_bytes\n";
  std::vector<std::string> names;
  std::vector<double> ms;
  const double base = bench::median(engines[0].ms);
  for (Engine &e : engines) {
    double m = bench::median(e.ms);
    std::cout << "  " << std::left << std::setw(28) << e.name << std::right << std::fixed
              << std::setprecision(2) << std::setw(9) << m << " ms/step  " << std::setprecision(0)
              << std::setw(7) << tokens / m * 1e3 << " tokens/s  " << std::setprecision(2)
              << "time vs runtime " << base / m << "x  activations " << double(e.bytes) / (1 << 20)
              << " MiB (" << double(e.bytes) / double(std::max<int64_t>(1, engines[0].bytes))
              << "x)\n";
    csv << p.name << "," << opt.batch << "," << p.config.seq << "," << p.config.layers << ","
        << e.name << "," << m << "," << e.bytes << "\n";
    names.push_back(e.name);
    ms.push_back(m);
  }
  std::cout << "  (runtime activations: kept + one layer's recomputation; compiled: the "
               "planned arena)\n";
  if (!svgPath.empty())
    bench::writeBarPlot(svgPath, "training step of " + p.name + " (ms, median)", names,
                        {{"ms/step", ms, 1}});
  std::cout << "wrote " << csvPath << (svgPath.empty() ? "" : " and " + svgPath) << "\n";
  return kExitOk;
}

int runTrain(const TrainCliOptions &opt) {
  Prepared p;
  const bool check = opt.gradCheck > 0 || opt.checkReversible || opt.compareEngines;
  if (int rc = prepare("train", opt, p, check ? Pin::None : Pin::ReadWrite))
    return rc;
  Expected<train::DataSource> data = train::DataSource::open(opt.data, p.config, 0.05);
  if (!data)
    return fail("train", data.error());
  if (opt.gradCheck > 0)
    return gradCheck(p, *data, opt);
  if (opt.checkReversible)
    return checkReversible(p, *data, opt);
  if (opt.compareEngines)
    return compareEngines(p, *data, opt);
  train::Model model(p.config, attentionOf(p), opt.seed);
  std::unique_ptr<train::CompiledStep> compiled;
  if (opt.engine != "runtime") {
    Expected<std::unique_ptr<train::CompiledStep>> step =
        compiledStep(p, model, opt.batch, opt.recomputeLayers, opt.engine);
    if (!step)
      return fail("train", step.error());
    compiled = std::move(*step);
  }
  train::TrainOptions to;
  to.outDir = opt.out, to.data = opt.data, to.steps = opt.steps, to.batch = opt.batch;
  to.seed = opt.seed, to.evalEvery = opt.evalEvery, to.evalBatches = opt.evalBatches;
  to.checkpointEvery = opt.checkpointEvery, to.specHash = p.specHash, to.resume = opt.resume;
  to.adam.lr = opt.lr, to.adam.weightDecay = opt.weightDecay, to.adam.clipNorm = opt.clip;
  to.adam.warmupSteps = opt.warmup;
  to.stopAfter = opt.stopAfter;
  const bool onDevice = opt.target == "cuda" || opt.engine == "cuda-sim";
  if (compiled && onDevice && opt.optimizer == "device")
    to.resident = compiled.get();
  else if (compiled)
    to.stepFn = [&](const train::Batch &b, int64_t step) { return compiled->run(b, true, step); };
  if (compiled) {
    to.stepState = [&] { return compiled->stepState(); };
    to.restoreStepState = [&](const std::string &s) { return compiled->restoreStepState(s); };
  }
  std::cerr << "attnc train: " << p.name << " (" << model.numParams() << " parameters, "
            << p.config.layers << (p.config.reversible ? " reversible" : "") << " layer(s)) on "
            << data->describe() << "\n";
  Expected<train::TrainSummary> s = train::train(model, *data, to, std::cerr);
  if (!s)
    return fail("train", s.error());
  const train::EvalResult &e = s->eval;
  if (s->lastStep == s->firstStep) {
    std::cout << p.name << ": " << opt.out << " is already at step " << s->lastStep
              << "; nothing to train (held-out loss " << s->eval.loss << ", accuracy "
              << s->eval.accuracy << ")\n";
    return kExitOk;
  }
  std::cout << "trained " << p.name << " for steps " << s->firstStep << ".." << s->lastStep
            << " in " << s->seconds << " s (" << int64_t(s->tokensPerSecond) << " tokens/s)\n"
            << "final training loss " << s->finalLoss << "; held-out loss " << e.loss << " ("
            << e.bitsPerByte << " bits/byte), accuracy " << e.accuracy << " over " << e.positions
            << " positions\n"
            << (compiled
                    ? "compiled step: arena " + std::to_string(compiled->arenaBytes() / 1024) +
                          " KiB, of which " + std::to_string(compiled->keptBytes() / 1024) +
                          " KiB kept for the backward"
                    : "activation memory plan: " + std::to_string(s->plan.keptBytes / 1024) +
                          " KiB kept for the backward, " +
                          std::to_string(s->plan.scratchBytes / 1024) + " KiB per-layer scratch")
            << "; peak resident memory " << peakRssMiB() << " MiB\n";
  if (compiled && p.precision == "fp16")
    std::cout << "fp16 loss scale " << compiled->lossScale() << ", " << compiled->overflowReruns()
              << " step(s) rerun after an overflow\n";
  std::cout << "wrote " << opt.out << "/{latest.json,train.csv,loss.svg}\n";
  return kExitOk;
}

int runEval(const TrainCliOptions &opt) {
  Prepared p;
  if (int rc = prepare("eval", opt, p))
    return rc;
  Expected<train::DataSource> data = train::DataSource::open(opt.data, p.config, 0.05);
  if (!data)
    return fail("eval", data.error());
  train::Model model(p.config, attentionOf(p), opt.seed);
  Expected<train::Checkpoint> ck = train::loadLatestCheckpoint(opt.out, p.specHash);
  if (!ck)
    return fail("eval", ck.error());
  if (Status s = model.loadWeights(ck->tensors); !s)
    return fail("eval", s.error());
  Expected<train::EvalResult> e = train::evaluate(model, *data, opt.evalBatches, opt.batch);
  if (!e)
    return fail("eval", e.error());
  std::cout << p.name << " at step " << ck->step << ": loss " << e->loss << " (" << e->bitsPerByte
            << " bits/byte), accuracy " << e->accuracy << " over " << e->positions
            << " positions\n";
  return kExitOk;
}

namespace {

/// The model of `opt.spec` with the weights of --out's latest checkpoint.
int loadTrained(const char *cmd, const TrainCliOptions &opt, Prepared &p,
                std::optional<train::Model> &model) {
  if (int rc = prepare(cmd, opt, p))
    return rc;
  Expected<train::Checkpoint> ck = train::loadLatestCheckpoint(opt.out, p.specHash);
  if (!ck)
    return fail(cmd, ck.error());
  model.emplace(p.config, attentionOf(p), opt.seed);
  if (Status s = model->loadWeights(ck->tensors); !s)
    return fail(cmd, s.error());
  return kExitOk;
}

} // namespace

int captureAttentionInputs(const char *cmd, const TrainCliOptions &opt, CapturedAttention &out) {
  Prepared p;
  if (int rc = prepare(cmd, opt, p))
    return rc;
  Expected<train::Checkpoint> ck = train::loadLatestCheckpoint(opt.out, p.specHash);
  if (!ck)
    return fail(cmd, ck.error());
  Expected<train::DataSource> data = train::DataSource::open(opt.data, p.config, 0.05);
  if (!data)
    return fail(cmd, data.error());
  bool captured = false;
  train::AttentionFn capture = [&](const AttentionInputs &in) {
    if (!captured) { // the first call is layer 0's
      out.q = *in.q, out.k = in.k ? *in.k : *in.q, out.v = *in.v;
      if ((out.hasLengths = in.lengths != nullptr))
        out.lengths = *in.lengths;
      if ((out.hasParams = in.params != nullptr))
        out.params = *in.params;
      captured = true;
    }
    return p.kernels->run(in);
  };
  train::Model model(p.config, capture, opt.seed);
  if (Status s = model.loadWeights(ck->tensors); !s)
    return fail(cmd, s.error());
  if (Expected<train::StepResult> r = model.run(data->eval(0, opt.batch), false); !r)
    return fail(cmd, r.error());
  out.step = ck->step;
  return captured ? kExitOk : fail(cmd, "the model called no attention");
}

int runGenerate(const TrainCliOptions &opt) {
  Prepared p;
  std::optional<train::Model> model;
  if (int rc = loadTrained("generate", opt, p, model))
    return rc;
  const train::ModelConfig &c = p.config;
  if (c.objective != train::Objective::CausalLm)
    return fail("generate", "'" + p.name +
                                "' is not a causal LM (objective causal_lm); use "
                                "attnc fill for masked models");
  if (c.vocab < 256)
    return fail("generate",
                "the model's vocab " + std::to_string(c.vocab) + " cannot hold bytes (needs 256)");
  std::vector<int32_t> tokens(opt.prompt.begin(), opt.prompt.end());
  for (int32_t &t : tokens)
    t &= 0xff;
  if (tokens.empty())
    tokens.push_back('\n');
  std::cout << opt.prompt << std::flush;
  for (int i = 0; i < opt.bytes; ++i) {
    // The last `seq` bytes, padded after the end (a causal model never looks
    // ahead; LSH's sort sees the padding, as in training on shorter text).
    train::Batch b;
    b.B = 1, b.S = c.seq;
    size_t from = tokens.size() > size_t(c.seq) ? tokens.size() - c.seq : 0;
    b.inputs.assign(tokens.begin() + from, tokens.end());
    int last = int(b.inputs.size()) - 1;
    b.inputs.resize(c.seq, ' ');
    b.targets.assign(c.seq, -1);
    Expected<train::StepResult> r = model->run(b, /*backward=*/false);
    if (!r)
      return fail("generate", r.error());
    const float *logits = model->logits().data() + size_t(last) * c.vocab;
    int next = 0;
    if (opt.temperature <= 0) {
      for (int v = 1; v < c.vocab; ++v)
        next = logits[v] > logits[next] ? v : next;
    } else {
      double mx = logits[0], sum = 0;
      for (int v = 1; v < c.vocab; ++v)
        mx = std::max(mx, double(logits[v]));
      std::vector<double> w(c.vocab);
      for (int v = 0; v < c.vocab; ++v)
        sum += w[v] = std::exp((logits[v] - mx) / opt.temperature);
      philox::Block rnd = philox::philox4x32({uint32_t(i), 0u, 0x6E4Eu, 0u}, opt.seed);
      double u = (double(rnd[0]) + 0.5) / 4294967296.0 * sum;
      for (next = 0; next < c.vocab - 1 && (u -= w[next]) > 0; ++next) {
      }
    }
    tokens.push_back(next);
    std::cout << char(next) << std::flush;
  }
  std::cout << "\n";
  return kExitOk;
}

int runFill(const TrainCliOptions &opt) {
  Prepared p;
  std::optional<train::Model> model;
  if (int rc = loadTrained("fill", opt, p, model))
    return rc;
  const train::ModelConfig &c = p.config;
  if (c.objective != train::Objective::Mlm)
    return fail("fill", "'" + p.name +
                            "' is not a masked LM (objective mlm); use attnc "
                            "generate for causal models");
  if (opt.maskChar.size() != 1)
    return fail("fill", "--mask-char must be one byte, found '" + opt.maskChar + "'");
  if (opt.text.empty() || opt.text.size() > size_t(c.seq))
    return fail("fill", "--text must have 1 to " + std::to_string(c.seq) +
                            " bytes (the model's "
                            "sequence length), found " +
                            std::to_string(opt.text.size()));
  train::Batch b;
  b.B = 1, b.S = c.seq;
  b.inputs.assign(c.seq, ' ');
  b.targets.assign(c.seq, -1);
  int masked = 0;
  for (size_t i = 0; i < opt.text.size(); ++i) {
    bool m = opt.text[i] == opt.maskChar[0];
    b.inputs[i] = m ? c.vocab : (uint8_t)opt.text[i]; // the mask token is id vocab
    masked += m;
  }
  if (!masked)
    return fail("fill", "--text has no '" + opt.maskChar + "' to fill");
  Expected<train::StepResult> r = model->run(b, /*backward=*/false);
  if (!r)
    return fail("fill", r.error());
  std::string out = opt.text;
  for (size_t i = 0; i < opt.text.size(); ++i)
    if (opt.text[i] == opt.maskChar[0]) {
      const float *l = model->logits().data() + i * c.vocab;
      int best = 0;
      for (int v = 1; v < c.vocab; ++v)
        best = l[v] > l[best] ? v : best;
      out[i] = char(best);
    }
  std::cout << out << "\n";
  return kExitOk;
}

} // namespace attnc::driver
