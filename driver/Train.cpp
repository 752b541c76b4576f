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
#include "driver/BenchCommon.h"
#include "driver/ModelConfig.h"
#include "driver/ModelSession.h"
#include "driver/Spec.h"

#include "runtime/Philox.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/CompiledStep.h"
#include "runtime/train/Trainer.h"

#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <sys/resource.h>

using namespace mlir;

namespace attnc::driver {

namespace {

/// Peak resident set size of this process (getrusage), in MiB.
long peakRssMiB() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024; // Linux reports KiB
}

/// The forward of a compiled step's inference function (evaluations).
train::Forward forwardOf(train::CompiledStep &step) {
  train::Forward f;
  f.batch = step.inferBatch();
  f.run = [&step](const train::Batch &b) { return step.infer(b); };
  return f;
}

/// --grad-check: finite differences of the whole model on the first batch,
/// on the compiled step (the CPU's, or the CUDA step under cuda-sim).
int gradCheck(Prepared &p, const train::DataSource &data, const TrainCliOptions &opt) {
  train::ParameterStore store(p.config, opt.seed);
  train::Batch b = data.train(opt.seed, 0, opt.batch);
  StepPlan plan;
  plan.batch = opt.batch, plan.recomputeLayers = opt.recomputeLayers, plan.engine = opt.engine;
  Expected<std::unique_ptr<train::CompiledStep>> s = compiledStep(p, store, plan);
  if (!s)
    return commandError("train", s.error());
  train::CompiledStep &step = **s;
  if (p.config.dropout > 0 || p.config.attentionDropout > 0) { // the masks change the loss
    Expected<double> off = step.run(b, /*training=*/false, 0);
    Expected<double> on = step.run(b, /*training=*/true, 0);
    if (!off || !on)
      return commandError("train", !off ? off.error() : on.error());
    std::cout << "dropout " << p.config.dropout << ", attention dropout "
              << p.config.attentionDropout << ": loss " << *on << " with the masks of step 0, "
              << *off << " without\n";
  }
  // Step 0's masks: the loss is a function of the weights.
  train::LossFn loss = [&](bool) { return step.run(b, /*training=*/true, 0); };
  Expected<train::GradCheckResult> r =
      train::gradientCheck(store, opt.gradCheck, opt.gradCheckEps, opt.seed, loss);
  if (!r)
    return commandError("train", r.error());
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

} // namespace

int benchEngines(const TrainCliOptions &opt, int repeats, const std::string &csvPath,
                 const std::string &svgPath) {
  Prepared p;
  if (int rc = prepare("bench", opt, p, Pin::None))
    return rc;
  train::ParameterStore store(p.config, opt.seed);
  // The compiled step keeping every activation, and (standard layers) with
  // each layer recomputed in the backward.
  struct Engine {
    std::string name;
    std::unique_ptr<train::CompiledStep> step;
    std::vector<double> ms;
    int64_t bytes = 0;
  };
  std::vector<Engine> engines;
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
    StepPlan sp;
    sp.batch = opt.batch, sp.recomputeLayers = recompute, sp.fuseInChunks = fuseInChunks;
    Expected<std::unique_ptr<train::CompiledStep>> step = compiledStep(p, store, sp);
    if (!step)
      return commandError("bench", step.error());
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
    store.zeroGrads();
    Expected<double> r = e.step->run(batch, true, 0);
    return r ? Status() : Status(r.takeError());
  };
  // One warm-up each, then the engines interleaved, so all see the same
  // machine load; medians of the repeats.
  for (int i = -1; i < repeats; ++i)
    for (Engine &e : engines) {
      auto t0 = std::chrono::steady_clock::now();
      if (Status st = run(e); !st)
        return commandError("bench", st.error());
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
    std::cout << "  " << std::left << std::setw(50) << e.name << std::right << std::fixed
              << std::setprecision(2) << std::setw(9) << m << " ms/step  " << std::setprecision(0)
              << std::setw(7) << tokens / m * 1e3 << " tokens/s  " << std::setprecision(2)
              << "time vs the first " << base / m << "x  activations "
              << double(e.bytes) / (1 << 20) << " MiB ("
              << double(e.bytes) / double(std::max<int64_t>(1, engines[0].bytes)) << "x)\n";
    csv << p.name << "," << opt.batch << "," << p.config.seq << "," << p.config.layers << ","
        << e.name << "," << m << "," << e.bytes << "\n";
    names.push_back(e.name);
    ms.push_back(m);
  }
  std::cout << "  (activations: the planned arena)\n";
  if (!svgPath.empty())
    bench::writeBarPlot(svgPath, "training step of " + p.name + " (ms, median)", names,
                        {{"ms/step", ms, 1}});
  std::cout << "wrote " << csvPath << (svgPath.empty() ? "" : " and " + svgPath) << "\n";
  return kExitOk;
}

int runTrain(const TrainCliOptions &opt) {
  Prepared p;
  const bool check = opt.gradCheck > 0;
  if (int rc = prepare("train", opt, p, check ? Pin::None : Pin::ReadWrite))
    return rc;
  Expected<train::DataSource> data = train::DataSource::open(opt.data, p.config, 0.05);
  if (!data)
    return commandError("train", data.error());
  if (opt.gradCheck > 0)
    return gradCheck(p, *data, opt);
  train::ParameterStore model(p.config, opt.seed);
  // The training step and, for the evaluations, the inference function.
  StepPlan plan;
  plan.batch = opt.batch, plan.inferBatch = opt.batch;
  plan.recomputeLayers = opt.recomputeLayers, plan.engine = opt.engine;
  Expected<std::unique_ptr<train::CompiledStep>> step = compiledStep(p, model, plan);
  if (!step)
    return commandError("train", step.error());
  std::unique_ptr<train::CompiledStep> compiled = std::move(*step);
  train::TrainOptions to;
  to.outDir = opt.out, to.data = opt.data, to.steps = opt.steps, to.batch = opt.batch;
  to.seed = opt.seed, to.evalEvery = opt.evalEvery, to.evalBatches = opt.evalBatches;
  to.checkpointEvery = opt.checkpointEvery, to.specHash = p.specHash, to.resume = opt.resume;
  to.adam.lr = opt.lr, to.adam.weightDecay = opt.weightDecay, to.adam.clipNorm = opt.clip;
  to.adam.warmupSteps = opt.warmup;
  to.stopAfter = opt.stopAfter;
  const bool onDevice = opt.target == "cuda" || opt.engine == "cuda-sim";
  if (onDevice && opt.optimizer == "device")
    to.resident = compiled.get();
  else
    to.stepFn = [&](const train::Batch &b, int64_t step) { return compiled->run(b, true, step); };
  to.forward = forwardOf(*compiled);
  to.stepState = [&] { return compiled->stepState(); };
  to.restoreStepState = [&](const std::string &s) { return compiled->restoreStepState(s); };
  std::cerr << "attnc train: " << p.name << " (" << model.numParams() << " parameters, "
            << p.config.layers << (p.config.reversible ? " reversible" : "") << " layer(s)) on "
            << data->describe() << "\n";
  Expected<train::TrainSummary> s = train::train(model, *data, to, std::cerr);
  if (!s)
    return commandError("train", s.error());
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
            << "compiled step: arena " << compiled->arenaBytes() / 1024 << " KiB, of which "
            << compiled->keptBytes() / 1024 << " KiB kept for the backward; peak resident memory "
            << peakRssMiB() << " MiB; inference arena " << compiled->inferArenaBytes() / 1024
            << " KiB\n";
  if (p.precision == "fp16")
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
    return commandError("eval", data.error());
  train::ParameterStore model(p.config, opt.seed);
  Expected<train::Checkpoint> ck = train::loadLatestCheckpoint(opt.out, p.specHash);
  if (!ck)
    return commandError("eval", ck.error());
  if (Status s = model.loadWeights(ck->tensors); !s)
    return commandError("eval", s.error());
  StepPlan plan;
  plan.inferBatch = opt.batch;
  Expected<std::unique_ptr<train::CompiledStep>> step = compiledStep(p, model, plan);
  if (!step)
    return commandError("eval", step.error());
  Expected<train::EvalResult> e =
      train::evaluate(forwardOf(**step), p.config, *data, opt.evalBatches);
  if (!e)
    return commandError("eval", e.error());
  std::cout << p.name << " at step " << ck->step << ": loss " << e->loss << " (" << e->bitsPerByte
            << " bits/byte), accuracy " << e->accuracy << " over " << e->positions
            << " positions\n";
  return kExitOk;
}

namespace {

/// The model of `opt.spec` with the weights of --out's latest checkpoint,
/// and its inference function for one sequence.
struct Trained {
  std::optional<train::ParameterStore> store;
  std::unique_ptr<train::CompiledStep> step;
};

int loadTrained(const char *cmd, const TrainCliOptions &opt, Prepared &p, Trained &t) {
  if (int rc = prepare(cmd, opt, p))
    return rc;
  Expected<train::Checkpoint> ck = train::loadLatestCheckpoint(opt.out, p.specHash);
  if (!ck)
    return commandError(cmd, ck.error());
  t.store.emplace(p.config, opt.seed);
  if (Status s = t.store->loadWeights(ck->tensors); !s)
    return commandError(cmd, s.error());
  StepPlan plan;
  plan.inferBatch = 1;
  Expected<std::unique_ptr<train::CompiledStep>> step = compiledStep(p, *t.store, plan);
  if (!step)
    return commandError(cmd, step.error());
  t.step = std::move(*step);
  return kExitOk;
}

} // namespace

int captureAttentionInputs(const char *cmd, const TrainCliOptions &opt, CapturedAttention &out) {
  Prepared p;
  if (int rc = prepare(cmd, opt, p))
    return rc;
  Expected<train::Checkpoint> ck = train::loadLatestCheckpoint(opt.out, p.specHash);
  if (!ck)
    return commandError(cmd, ck.error());
  Expected<train::DataSource> data = train::DataSource::open(opt.data, p.config, 0.05);
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
  train::ParameterStore model(p.config, opt.seed);
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
  return captured ? kExitOk : commandError(cmd, "the model called no attention");
}

int runGenerate(const TrainCliOptions &opt) {
  Prepared p;
  Trained model;
  if (int rc = loadTrained("generate", opt, p, model))
    return rc;
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
  Trained model;
  if (int rc = loadTrained("fill", opt, p, model))
    return rc;
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
  std::cout << out << "\n";
  return kExitOk;
}

} // namespace attnc::driver
