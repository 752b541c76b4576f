//===- Train.cpp - attnc train / eval -------------------------------------===//
//
// The model-level commands: the spec's model is compiled whole (its
// training step and inference function, driver/ModelGraph.h) around the
// variant's generated attention kernels (forward and backward, compiled by
// the kernel pipeline for the model's shape), trained by train::train
// (runtime/train/Trainer.h) and evaluated, continued and filled by its
// inference function. The hand-assembled whole-model reference the
// compiled step is tested against lives in test/reference (attnc-reference).
//
//===----------------------------------------------------------------------===//
#include "driver/Train.h"
#include "driver/Report.h"
#include "driver/ArtifactBuilder.h"
#include "driver/ModelConfigOf.h"
#include "driver/ModelSession.h"
#include "driver/Spec.h"

#include "attnc/abi/TileModel.h"
#include "runtime/CudaDriver.h"
#include "runtime/PhiloxDraws.h"
#include "runtime/train/ArtifactTrain.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/CompiledStep.h"
#include "runtime/train/Trainer.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <ostream>
#include <sstream>

using namespace mlir;

namespace attnc::driver {

namespace {

/// The forward of a compiled step's inference function (evaluations).
train::Forward forwardOf(train::CompiledStep &step) {
  train::Forward f;
  f.batch = step.inferBatch();
  f.run = [&step](const train::Batch &b) { return step.infer(b); };
  return f;
}

/// The options of the runtime's training front door, from attnc train's.
train::ArtifactTrainOptions artifactTrainOptions(const PreparedModel &p,
                                                 const TrainCliOptions &opt) {
  train::ArtifactTrainOptions to = opt.run;
  to.log = &diagnostics();
  to.precision = p.precision; // resolved: the model's dtype on the CUDA engines
  to.hostOptimizer = opt.optimizer == "host";
  to.tool = "attnc train";
  return to;
}

/// The prepared model compiled into an artifact in memory, as attnc
/// compile -o would write it: for the CPU, or for CUDA on the GPU present
/// (--target cuda) or on the emulator (--engine cuda-sim, with the same
/// attention compiled for the CPU).
mlir::LogicalResult buildTrainingArtifact(PreparedModel &p, const TrainCliOptions &opt,
                                          Artifact &artifact) {
  ArtifactOptions ao;
  const bool sim = opt.run.engine == "cuda-sim";
  ao.target = opt.target == "cuda" || sim ? "cuda" : "cpu";
  if (opt.target == "cuda") {
    Expected<cuda::DeviceInfo> dev = cuda::queryDevice(0);
    if (!dev)
      return commandError("train", dev.error());
    ao.arch = dev->arch();
  }
  // The step runs one micro-batch (runtime/train/DataParallel.h); the
  // evaluations take the whole batch.
  ao.batch = opt.batch / train::microBatchesOf(artifactTrainOptions(p, opt));
  ao.inferBatch = opt.batch;
  ao.model = p.name;
  // Reversible layers rebuild their inputs anyway.
  ao.recomputeLayers = opt.recomputeLayers && !p.config.reversible;
  // The emulator runs the CUDA step with the CUDA attention kernels where
  // they exist for the head dim (f32 dense and LSH then on the step's
  // buffers, as attnc-rt train does), else on the CPU kernels.
  ao.hostKernels = sim;
  ao.deviceKernels = !sim || (!opt.run.hostAttention &&
                              attnc::tile::cudaHeadDimSupported(p.config.dModel / p.config.heads));
  std::vector<CompiledModelCounts> counts;
  if (mlir::failed(buildArtifact(*p.module, p.specHash, ao, artifact, &counts)))
    return mlir::failure();
  const ManifestModel &m = artifact.manifest.models.front();
  diagnostics() << "attnc train: compiled step of " << p.name
                << (ao.recomputeLayers ? " (layers recomputed in the backward)" : "") << ": arena "
                << m.arenaBytes / 1024 << " KiB, " << counts.front().fusedKernels
                << " fused row kernels, " << counts.front().gemms << " GEMMs, "
                << counts.front().attentionCalls << " attention calls\n";
  return mlir::success();
}

/// --grad-check: finite differences of the whole model on the first batch,
/// on the compiled step (the CPU's, or the CUDA step under cuda-sim).
mlir::LogicalResult gradCheck(const PreparedModel &p, const Artifact &artifact,
                              const train::DataSource &data, const TrainCliOptions &opt) {
  Expected<train::ArtifactModel> loaded =
      train::loadArtifactModel(artifact, artifactTrainOptions(p, opt));
  if (!loaded)
    return commandError("train", loaded.error());
  train::CompiledStep &step = *loaded->step;
  const train::ModelConfig &config = loaded->config;
  train::Batch b = data.train(opt.run.seed, 0, opt.batch);
  if (config.dropout > 0 || config.attentionDropout > 0) { // the masks change the loss
    Expected<double> off = step.run(b, /*training=*/false, 0);
    Expected<double> on = step.run(b, /*training=*/true, 0);
    if (!off || !on)
      return commandError("train", !off ? off.error() : on.error());
    results() << "dropout " << config.dropout << ", attention dropout " << config.attentionDropout
              << ": loss " << *on << " with the masks of step 0, " << *off << " without\n";
  }
  // Step 0's masks: the loss is a function of the weights.
  train::LossFn loss = [&](bool) { return step.run(b, /*training=*/true, 0); };
  Expected<train::GradCheckResult> r =
      train::gradientCheck(*loaded->store, opt.gradCheck, opt.gradCheckEps, opt.run.seed, loss);
  if (!r)
    return commandError("train", r.error());
  for (const train::GradCheckProbe &pr : r->probes)
    results() << "  " << pr.param << "[" << pr.index << "]: analytic " << pr.analytic << " numeric "
              << pr.numeric << "\n";
  bool ok = r->worst <= opt.gradCheckTol;
  // A check where most probes hit jumps would prove nothing.
  ok = ok && r->probes.size() >= 2 * size_t(r->nonSmooth);
  results() << (ok ? "gradient check passed" : "gradient check FAILED") << ": " << r->probes.size()
            << " probes, worst relative error " << r->worst << " (" << r->worstParam
            << "), tolerance " << opt.gradCheckTol << "; " << r->nonSmooth
            << " probe(s) skipped where the loss jumps (LSH buckets, ReLU)\n";
  return mlir::success(ok);
}

} // namespace

CommandResult runTrain(const TrainCliOptions &given) {
  TrainCliOptions options = given;
  if (options.target == "cuda-sim") { // the CUDA step, its kernels on the emulator
    if (options.run.engine != "compiled" && options.run.engine != "cuda-sim")
      return commandError("train", "--target cuda-sim runs the compiled CUDA step; it does not "
                                   "take --engine " +
                                       options.run.engine);
    options.target = "cpu", options.run.engine = "cuda-sim";
  }
  // A run that fails before its first checkpoint leaves no pins behind: the
  // folder's next run chooses afresh.
  const std::string pinsPath = options.run.out + "/kernel-choices.json";
  struct DropNewPins {
    std::string path, out;
    bool keep;
    ~DropNewPins() {
      std::error_code ec;
      if (!keep && !train::hasCheckpoint(out))
        std::filesystem::remove(path, ec);
    }
  } dropNewPins{pinsPath, options.run.out, std::filesystem::exists(pinsPath)};
  PreparedModel p;
  const bool check = options.gradCheck > 0;
  if (mlir::failed(prepare("train", options, p, check ? Pin::None : Pin::ReadWrite,
                           /*compileKernels=*/false)))
    return mlir::failure();
  // The batch the step is planned for: --batch, else the model's train
  // block, else attnc's default (the other settings resolve the same way
  // in the runtime, from the artifact's copy of the block).
  TrainCliOptions opt = options;
  opt.batch = int(*opt.run.flags.orElse(trainSettingsOf(p.model()))
                       .orElse(train::defaultTrainSettings())
                       .batch);
  // Data parallelism: the batch is the global one, split into
  // micro-batches (one per rank by default) that the step is planned for.
  const int micro = train::microBatchesOf(artifactTrainOptions(p, opt));
  if (opt.batch % micro != 0)
    return commandError("train",
                        "--batch " + std::to_string(opt.batch) +
                            " is the global batch and must divide into " + std::to_string(micro) +
                            " micro-batches" +
                            (opt.run.parallel.microBatches
                                 ? std::string()
                                 : " (one per rank of mpirun -np " + std::to_string(micro) + ")"));
  // The data first: a wrong path fails before anything compiles.
  Expected<train::DataSource> data = train::DataSource::open(opt.run.data, p.config, 0.05);
  if (!data)
    return commandError("train", data.error());
  // The one front door: the same artifact attnc compile -o writes, trained
  // by the runtime call attnc-rt train makes.
  Artifact artifact;
  if (mlir::failed(buildTrainingArtifact(p, opt, artifact)))
    return mlir::failure();
  if (check) {
    if (mlir::failed(gradCheck(p, artifact, *data, opt)))
      return mlir::failure();
    return Outcome::Done;
  }
  train::ArtifactTrainOptions to = artifactTrainOptions(p, opt);
  to.opened = &*data;
  Expected<train::ArtifactTrainResult> r = train::trainArtifact(artifact, to);
  if (!r)
    return commandError("train", r.error());
  train::writeTrainReport(*r, opt.run.out, results());
  return r->summary.interrupted ? Outcome::Interrupted : Outcome::Done;
}

namespace {

/// The run's latest checkpoint (or, if it is corrupt, the newest intact
/// one, with a note saying so).
Expected<train::Checkpoint> latestCheckpoint(const char *cmd, const TrainCliOptions &opt,
                                             const PreparedModel &p) {
  Expected<train::Checkpoint> ck = train::loadNewestIntactCheckpoint(opt.run.out, p.specHash);
  if (ck && !ck->recovered.empty())
    diagnostics() << "attnc " << cmd << ": note: " << ck->recovered << "\n";
  return ck;
}

} // namespace

mlir::LogicalResult runEval(const TrainCliOptions &opt) {
  const char *cmd = "eval";
  PreparedModel p;
  if (mlir::failed(prepare("eval", opt, p)))
    return mlir::failure();
  Expected<train::Checkpoint> ck = latestCheckpoint(cmd, opt, p);
  if (!ck)
    return commandError("eval", ck.error());
  // The run's own batch, evaluation size and data, unless the command line
  // names them: so eval repeats training's final evaluation.
  const train::RecordedRun recorded = train::recordedRun(ck->state);
  const int batch = opt.batchGiven || !recorded.batch ? opt.batch : *recorded.batch;
  const int evalBatches =
      opt.evalBatchesGiven || !recorded.evalBatches ? opt.run.evalBatches : *recorded.evalBatches;
  const std::string dataSpec = !opt.run.data.empty() ? opt.run.data : recorded.data.value_or("");
  if (dataSpec.empty())
    return commandError("eval", "--data is needed: the checkpoint in '" + opt.run.out +
                                    "' does not record its run's data (an older attnc wrote it)");
  auto source = [](bool given, bool known) {
    return given ? "given" : known ? "the run's" : "default";
  };
  diagnostics() << "attnc eval: batch " << batch << " ("
                << source(opt.batchGiven, recorded.batch.has_value()) << "), " << evalBatches
                << " batches (" << source(opt.evalBatchesGiven, recorded.evalBatches.has_value())
                << "), data " << dataSpec << " ("
                << source(!opt.run.data.empty(), recorded.data.has_value()) << ")\n";
  Expected<train::DataSource> data = train::DataSource::open(dataSpec, p.config, 0.05);
  if (!data)
    return commandError("eval", data.error());
  train::ParameterStore model(p.config, opt.run.seed);
  if (Status s = model.loadWeights(ck->tensors); !s)
    return commandError("eval", s.error());
  StepPlan plan;
  plan.inferBatch = batch;
  Expected<std::unique_ptr<train::CompiledStep>> step = compiledStep(p, model, plan);
  if (!step)
    return commandError("eval", step.error());
  Expected<train::EvalResult> e = train::evaluate(forwardOf(**step), p.config, *data, evalBatches);
  if (!e)
    return commandError("eval", e.error());
  results() << p.name << " at step " << ck->step << ": loss " << e->loss << " (" << e->bitsPerByte
            << " bits/byte), accuracy " << e->accuracy << " over " << e->positions
            << " positions\n";
  return mlir::success();
}

namespace {

/// The model of `opt.spec` with the weights of --out's latest checkpoint,
/// and its inference function for one sequence.
struct Trained {
  std::optional<train::ParameterStore> store;
  std::unique_ptr<train::CompiledStep> step;
};

mlir::LogicalResult loadTrained(const char *cmd, const TrainCliOptions &opt, PreparedModel &p,
                                Trained &t) {
  if (mlir::failed(prepare(cmd, opt, p)))
    return mlir::failure();
  Expected<train::Checkpoint> ck = latestCheckpoint(cmd, opt, p);
  if (!ck)
    return commandError(cmd, ck.error());
  t.store.emplace(p.config, opt.run.seed);
  if (Status s = t.store->loadWeights(ck->tensors); !s)
    return commandError(cmd, s.error());
  StepPlan plan;
  plan.inferBatch = 1;
  Expected<std::unique_ptr<train::CompiledStep>> step = compiledStep(p, *t.store, plan);
  if (!step)
    return commandError(cmd, step.error());
  t.step = std::move(*step);
  return mlir::success();
}

} // namespace

mlir::LogicalResult captureAttentionInputs(const char *cmd, const TrainCliOptions &opt,
                                           CapturedAttention &out) {
  PreparedModel p;
  if (mlir::failed(prepare(cmd, opt, p)))
    return mlir::failure();
  Expected<train::Checkpoint> ck = latestCheckpoint(cmd, opt, p);
  if (!ck)
    return commandError(cmd, ck.error());
  Expected<train::DataSource> data = train::DataSource::open(opt.run.data, p.config, 0.05);
  if (!data)
    return commandError(cmd, data.error());
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
  train::ParameterStore model(p.config, opt.run.seed);
  if (Status s = model.loadWeights(ck->tensors); !s)
    return commandError(cmd, s.error());
  // The compiled inference function, its attention captured.
  StepPlan plan;
  plan.inferBatch = opt.batch;
  plan.attention = capture;
  Expected<std::unique_ptr<train::CompiledStep>> step = compiledStep(p, model, plan);
  if (!step)
    return commandError(cmd, step.error());
  if (Expected<const float *> r = (*step)->infer(data->eval(0, opt.batch)); !r)
    return commandError(cmd, r.error());
  out.step = ck->step;
  if (!captured)
    return commandError(cmd, "the model called no attention");
  return mlir::success();
}

mlir::LogicalResult runGenerate(const TrainCliOptions &opt) {
  PreparedModel p;
  Trained model;
  if (mlir::failed(loadTrained("generate", opt, p, model)))
    return mlir::failure();
  const train::ModelConfig &c = p.config;
  if (c.objective != train::Objective::CausalLm)
    return commandError("generate", "'" + p.name +
                                        "' is not a causal LM (objective causal_lm); use "
                                        "attnc fill for masked models");
  if (c.vocab < 256)
    return commandError("generate", "the model's vocab " + std::to_string(c.vocab) +
                                        " cannot hold bytes (needs 256)");
  std::vector<int32_t> tokens(opt.prompt.begin(), opt.prompt.end());
  for (int32_t &t : tokens)
    t &= 0xff;
  if (tokens.empty())
    tokens.push_back('\n');
  if (tokens.size() > size_t(c.seq))
    diagnostics() << "attnc generate: warning: the prompt is " << tokens.size()
                  << " bytes and the model sees " << c.seq << " at a time: it continues from the "
                  << "prompt's last " << c.seq << "\n";
  results() << opt.prompt << std::flush;
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
    Expected<const float *> r = model.step->infer(b);
    if (!r)
      return commandError("generate", r.error());
    const float *logits = *r + size_t(last) * c.vocab;
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
      philox::Block rnd = philox::philox4x32({uint32_t(i), 0u, 0x6E4Eu, 0u}, opt.run.seed);
      double u = (double(rnd[0]) + 0.5) / 4294967296.0 * sum;
      for (next = 0; next < c.vocab - 1 && (u -= w[next]) > 0; ++next) {
      }
    }
    tokens.push_back(next);
    results() << char(next) << std::flush;
  }
  results() << "\n";
  return mlir::success();
}

mlir::LogicalResult runFill(const TrainCliOptions &opt) {
  PreparedModel p;
  Trained model;
  if (mlir::failed(loadTrained("fill", opt, p, model)))
    return mlir::failure();
  const train::ModelConfig &c = p.config;
  if (c.objective != train::Objective::Mlm)
    return commandError("fill", "'" + p.name +
                                    "' is not a masked LM (objective mlm); use attnc "
                                    "generate for causal models");
  if (opt.maskChar.size() != 1)
    return commandError("fill", "--mask-char must be one byte, found '" + opt.maskChar + "'");
  if (opt.text.empty() || opt.text.size() > size_t(c.seq))
    return commandError("fill", "--text must have 1 to " + std::to_string(c.seq) +
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
    return commandError("fill", "--text has no '" + opt.maskChar + "' to fill");
  Expected<const float *> r = model.step->infer(b);
  if (!r)
    return commandError("fill", r.error());
  std::string out = opt.text;
  for (size_t i = 0; i < opt.text.size(); ++i)
    if (opt.text[i] == opt.maskChar[0]) {
      const float *l = *r + i * c.vocab;
      int best = 0;
      for (int v = 1; v < c.vocab; ++v)
        best = l[v] > l[best] ? v : best;
      out[i] = char(best);
    }
  results() << out << "\n";
  return mlir::success();
}

} // namespace attnc::driver
