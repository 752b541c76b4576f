//===- Trainer.cpp - The training loop of attnc train ---------------------===//
#include "runtime/train/Trainer.h"
#include "runtime/Plot.h"

#include "runtime/FileSystem.h"
#include "runtime/PhiloxDraws.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/DataParallel.h"

#include <chrono>
#include <filesystem>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <unistd.h>

namespace attnc::train {

namespace {

std::string duration(double s) {
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  else
    std::snprintf(buf, sizeof buf, "%dh%02dm", int(s) / 3600, (int(s) / 60) % 60);
  return buf;
}

} // namespace

Expected<GradCheckResult> gradientCheck(ParameterStore &model, int probes, float eps, uint64_t seed,
                                        const LossFn &loss, double floor) {
  model.zeroGrads();
  if (Expected<double> base = loss(/*backward=*/true); !base)
    return base.takeError();
  std::vector<ParamRef> params = model.params();
  // The analytic gradients, kept: evaluating the loss again may overwrite
  // the model's buffers.
  std::vector<std::vector<float>> grads;
  for (const ParamRef &pr : params)
    grads.emplace_back(pr.grad, pr.grad + pr.size);
  GradCheckResult res;
  auto lossAt = [&] { return loss(/*backward=*/false); };
  for (size_t p = 0; p < params.size(); ++p) {
    const ParamRef &pr = params[p];
    const std::vector<float> &grad = grads[p];
    bool anyGrad = false;
    for (int64_t i = 0; i < pr.size && !anyGrad; ++i)
      anyGrad = grad[size_t(i)] != 0.0f;
    for (int k = 0; k < probes; ++k) {
      // Probe where the gradient lives (a zero-gradient tensor, e.g. a
      // constant parameter, is probed anywhere: its numeric slope must be 0).
      philox::Block r = philox::philox4x32({uint32_t(p), uint32_t(k), 7u, 0u}, seed);
      int64_t idx = int64_t(r[0] % uint64_t(pr.size));
      for (int tries = 0; anyGrad && grad[size_t(idx)] == 0.0f && tries < 64; ++tries)
        idx = (idx + 1 + int64_t(r[1] % 7)) % pr.size;
      // Constant per-head parameters share their tensor with learned ones
      // and get no gradient by design: not probed.
      const bool headParams =
          pr.name.size() >= 11 && pr.name.compare(pr.name.size() - 11, 11, "head_params") == 0;
      if (headParams && grad[size_t(idx)] == 0.0f)
        continue;
      const float orig = pr.value[idx];
      auto slope = [&](float h) -> Expected<double> {
        pr.value[idx] = orig + h;
        Expected<double> up = lossAt();
        pr.value[idx] = orig - h;
        Expected<double> down = lossAt();
        pr.value[idx] = orig;
        if (!up || !down)
          return makeError(!up ? up.error() : down.error());
        return (*up - *down) / (2.0 * h);
      };
      Expected<double> n1 = slope(eps), n2 = slope(eps / 2), n4 = slope(eps / 4);
      if (!n1 || !n2 || !n4)
        return makeError(!n1 ? n1.error() : !n2 ? n2.error() : n4.error());
      // The loss is only piecewise smooth where LSH buckets (or a ReLU) can
      // switch: slopes at ε, ε/2 and ε/4 that disagree mean a jump inside
      // the interval, not a wrong gradient. Such probes are counted, not
      // judged.
      auto apart = [&](double a, double b) {
        return std::abs(a - b) / std::max(std::max(std::abs(a), std::abs(b)), floor) > 0.1;
      };
      if (apart(*n1, *n2) || apart(*n2, *n4)) {
        ++res.nonSmooth;
        continue;
      }
      GradCheckProbe probe{pr.name, idx, double(grad[size_t(idx)]), *n2};
      double err =
          std::abs(probe.analytic - probe.numeric) / std::max(std::abs(probe.numeric), floor);
      if (err > res.worst)
        res.worst = err, res.worstParam = pr.name;
      res.probes.push_back(probe);
    }
  }
  return res;
}

namespace {

/// The rows of a run's CSV log (train.csv, eval.csv) that a resumed run
/// keeps: those of steps before `start` (`limit`: the step counts up to and
/// including it), in order; rows of steps it will redo, or torn lines, go.
/// Calls `row(step, value)` with the second column of each kept row.
std::string keptRows(const std::string &path, const char *header, int64_t start, bool inclusive,
                     const std::function<void(int64_t, double)> &row) {
  std::string kept = std::string(header) + "\n";
  if (start <= 0)
    return kept;
  std::ifstream in(path);
  std::string line;
  int64_t last = -1;
  while (std::getline(in, line)) {
    char *endp = nullptr;
    long long step = std::strtoll(line.c_str(), &endp, 10);
    if (endp == line.c_str() || *endp != ',' || step < 0 || step > start ||
        (!inclusive && step == start) || step <= last)
      continue;
    char *endv = nullptr;
    double value = std::strtod(endp + 1, &endv);
    if (endv == endp + 1)
      continue;
    last = step;
    row(step, value);
    kept += line + "\n";
  }
  return kept;
}

} // namespace

Status writeTrainingPlot(const std::string &path, const std::string &title,
                         const std::vector<double> &losses, const std::vector<EvalPoint> &evals) {
  plot::LinePlot plot;
  plot.title = title;
  plot.xLabel = "step";
  plot.yLabel = "loss (nats per predicted byte)";
  std::vector<double> steps(losses.size());
  for (size_t i = 0; i < steps.size(); ++i)
    steps[i] = double(i + 1); // the loss of step i is the state after i+1 updates' data
  plot::Series raw{"", steps, losses, "#1f77b4", 1.0, 0.25, false};
  // About 2 % of the run per side, so the trend shows through the noise.
  const int window = std::max(1, int(losses.size() / 50)) * 2 + 1;
  plot::Series smooth{"training (moving average of " + std::to_string(window) + " steps)",
                      steps,
                      plot::movingAverage(losses, window),
                      "#1f77b4",
                      2.0,
                      1.0,
                      false};
  plot::Series held{"held-out", {}, {}, "#d62728", 2.0, 1.0, true};
  for (const EvalPoint &e : evals)
    held.x.push_back(double(e.step)), held.y.push_back(e.loss);
  plot.series = {raw, smooth};
  if (!evals.empty())
    plot.series.push_back(held);
  return plot::writeLinePlot(path, plot);
}

namespace {

/// Continues the run of `opt.outDir`'s newest intact checkpoint: checks that
/// it shares the settings `config` lists (and the micro-batches), loads the
/// weights, the optimizer and the step's own state. Returns its step.
Expected<int64_t> resumeFromCheckpoint(ParameterStore &model, AdamW &adam,
                                       std::vector<ParamRef> &params, const nlohmann::json &config,
                                       const TrainOptions &opt, bool writer, std::ostream &log) {
  Expected<Checkpoint> ck = loadNewestIntactCheckpoint(opt.outDir, opt.specHash);
  if (!ck)
    return ck.takeError();
  if (writer && !ck->recovered.empty())
    log << "note: " << ck->recovered << "\n";
  const std::string where = "checkpoint in " + opt.outDir;
  if (!ck->state.is_object() || !ck->state.contains("config") || !ck->state["config"].is_object() ||
      !ck->state.contains("steps") || !ck->state["steps"].is_number_integer())
    return makeError(where + ": its state is not an attnc train state (no config/steps)");
  const nlohmann::json &saved = ck->state["config"];
  // Micro-batches first, with their own hint (absent from the config: 1).
  const int savedMicro = saved.value("micro_batches", 1);
  if (savedMicro != opt.microBatches)
    return makeError(where + " was trained with " + std::to_string(savedMicro) +
                     " micro-batch(es) per step, this run has " + std::to_string(opt.microBatches) +
                     "; resume with --micro-batches " + std::to_string(savedMicro) +
                     " at a rank count that divides it (the sum's order is the "
                     "micro-batches', so it then continues exactly)");
  for (auto &[key, value] : config.items()) {
    const nlohmann::json &had = saved.value(key, nlohmann::json());
    if (had != value)
      return makeError(where + " was trained with " + key + " = " + had.dump() + ", not " +
                       value.dump() +
                       "; resume with the same settings (or use a new --out, or "
                       "--no-resume)");
  }
  if (ck->step > opt.steps)
    return makeError(where + " is at step " + std::to_string(ck->step) + ", beyond --steps " +
                     std::to_string(opt.steps) + "; pass a larger --steps to continue");
  if (Status s = model.loadWeights(ck->tensors); !s)
    return makeError(where + ": " + s.error());
  if (Status s = adam.loadState(ck->tensors, params); !s)
    return makeError(where + ": " + s.error());
  if (adam.stepCount() != ck->step)
    return makeError(where + ": the optimizer state is at step " +
                     std::to_string(adam.stepCount()) + " but the checkpoint at step " +
                     std::to_string(ck->step));
  if (opt.restoreStepState && ck->state.contains("step_state"))
    if (Status s = opt.restoreStepState(ck->state["step_state"].dump()); !s)
      return makeError(where + ": " + s.error());
  int64_t planned = ck->state["steps"].get<int64_t>();
  if (writer)
    log << "resuming from step " << ck->step << " (" << opt.outDir << ")\n";
  if (planned != opt.steps)
    log << "note: the learning-rate schedule now spans " << opt.steps << " steps instead of "
        << planned << ", so this run will not match an uninterrupted one\n";
  return ck->step;
}

/// What the ranks waited for: the gradient exchange's time per step after
/// the backward, against its whole time.
void reportExchange(std::ostream &log, const DataParallelStep &exchange, bool overlapped) {
  const DataParallelStep::Timeline &t = exchange.timeline();
  const double busy = 1e3 * t.busySeconds / double(t.steps),
               exposed = 1e3 * t.exposedSeconds / double(t.steps);
  std::ios::fmtflags flags = log.flags();
  std::streamsize precision = log.precision();
  log << std::fixed << std::setprecision(2) << "gradient exchange (rank 0): " << busy
      << " ms per step in " << exchange.buckets() << " bucket"
      << (exchange.buckets() == 1 ? "" : "s") << ", " << exposed << " ms of it after the backward"
      << (overlapped
              ? " (" +
                    std::to_string(int(std::lround(
                        100.0 * std::clamp(1.0 - exposed / std::max(busy, 1e-9), 0.0, 1.0)))) +
                    "% overlapped)"
              : std::string(" (not overlapped)"))
      << "\n";
  log.flags(flags);
  log.precision(precision);
}

} // namespace

Expected<TrainSummary> train(ParameterStore &model, const DataSource &data, const TrainOptions &opt,
                             std::ostream &log) {
  using Clock = std::chrono::steady_clock;
  std::error_code ec;
  std::filesystem::create_directories(opt.outDir, ec);
  if (ec)
    return makeError("cannot create '" + opt.outDir + "': " + ec.message());
  if (!opt.resident && !opt.stepFn)
    return makeError("train: no training step (a compiled step runs it)");
  AdamWConfig adamCfg = opt.adam;
  adamCfg.totalSteps = opt.steps;
  AdamW adam(adamCfg);
  std::vector<ParamRef> params = model.params();
  TrainSummary sum;
  int64_t start = 0;
  // What a resumed run must share with the checkpoint to continue it: the
  // data order, the batch and the optimizer's hyper-parameters.
  nlohmann::json config = {{"seed", opt.seed},
                           {"batch", opt.batch},
                           {"lr", double(opt.adam.lr)},
                           {"warmup", opt.adam.warmupSteps},
                           {"weight_decay", double(opt.adam.weightDecay)},
                           {"clip", double(opt.adam.clipNorm)}};
  // What attnc eval reuses unless told otherwise (resuming compares none
  // of it): the evaluation's batches and the data, its file paths made
  // absolute so the run evaluates from any folder.
  const nlohmann::json runRecord = {{"eval_batches", opt.evalBatches},
                                    {"data", absoluteDataPaths(opt.data)}};
  // Data parallelism: the micro-batches decide the arithmetic (and so the
  // checkpoint's continuation); one micro-batch is the single-process step.
  dist::Communicator &comm = opt.comm ? *opt.comm : dist::world();
  const bool writer = comm.rank() == 0;
  if (opt.microBatches != 1)
    config["micro_batches"] = opt.microBatches;
  std::optional<DataParallelStep> parallel;
  const bool dataParallel = opt.microBatches != 1 || comm.size() > 1;
  if (dataParallel && !opt.resident) {
    Expected<DataParallelStep> dp = DataParallelStep::create(
        params, opt.batch, opt.microBatches, comm, {opt.bucketBytes, opt.overlapExchange});
    if (!dp)
      return dp.takeError();
    parallel = std::move(*dp);
  }
  {
    // Every rank must be about to run the same training.
    std::vector<dist::Setting> same = {{"spec", opt.specHash},
                                       {"settings", config.dump()},
                                       {"steps", std::to_string(opt.steps)},
                                       {"data", opt.data},
                                       {"out", opt.outDir}};
    same.insert(same.end(), opt.rankSettings.begin(), opt.rankSettings.end());
    if (Status s = dist::checkRanksAgree(comm, same); !s)
      return s.takeError();
  }
  if (dataParallel && opt.resident) {
    // The device step combines the micro-batches itself, on the device
    // (its set-up may bootstrap NCCL: after the ranks agree).
    Expected<std::string> how = opt.resident->setDataParallel(
        {opt.batch, opt.microBatches, &comm, opt.bucketBytes, opt.overlapExchange});
    if (!how)
      return how.takeError();
    if (writer)
      log << "data parallel on the device: " << *how << "\n";
  }
  if (opt.resume && hasCheckpoint(opt.outDir)) {
    Expected<int64_t> resumed = resumeFromCheckpoint(model, adam, params, config, opt, writer, log);
    if (!resumed)
      return resumed.takeError();
    start = *resumed;
  }
  if (opt.resident)
    if (Status s = opt.resident->upload(adam); !s)
      return s.takeError();
  // The host copies of a device-resident run, before they are read.
  auto syncHost = [&]() -> Status {
    return opt.resident ? opt.resident->download(adam) : Status{};
  };
  sum.firstStep = start;
  const int64_t end = opt.stopAfter > 0 ? std::min(opt.steps, start + opt.stopAfter) : opt.steps;
  auto save = [&](int64_t step) -> Status {
    if (Status s = syncHost(); !s)
      return s;
    if (!writer) // rank 0 writes; the others hold the same state
      return {};
    Checkpoint ck;
    ck.step = step;
    ck.specHash = opt.specHash;
    model.saveWeights(ck.tensors);
    adam.saveState(ck.tensors);
    ck.state = {{"config", config}, {"steps", opt.steps}, {"run", runRecord}};
    if (opt.stepState)
      if (std::string s = opt.stepState(); !s.empty())
        ck.state["step_state"] = nlohmann::json::parse(s);
    return saveCheckpoint(opt.outDir, ck);
  };

  // The log: a fresh run starts a fresh file; a resumed one keeps the rows
  // before its checkpoint (rows of steps it will redo, or torn lines, go).
  std::string csvPath = opt.outDir + "/train.csv";
  const char *header = "step,loss,lr,grad_norm,tokens_per_s,seconds";
  std::vector<double> earlierLosses;
  std::string kept =
      keptRows(csvPath, header, start, /*inclusive=*/false, [&](int64_t step, double v) {
        if (size_t(step) == earlierLosses.size()) // rows out of order would misplace the curve
          earlierLosses.push_back(v);
      });
  // The evaluations (eval.csv), the same way: those up to the checkpoint.
  const std::string evalPath = opt.outDir + "/eval.csv";
  const char *evalHeader = "step,loss,bits_per_byte,accuracy";
  std::string keptEvals =
      keptRows(evalPath, evalHeader, start, /*inclusive=*/true, [&](int64_t step, double v) {
        sum.evals.push_back({step, v});
      });
  // Only rank 0 writes the logs: its kept rows, then appended ones. The
  // other ranks' streams stay closed and write nowhere.
  auto openLog = [&](const std::string &path, const std::string &rows,
                     std::ofstream &stream) -> Status {
    if (!writer)
      return {};
    if (Status s = fs::writeFileAtomic(path, rows); !s)
      return s;
    stream.open(path, std::ios::app);
    return {};
  };
  std::ofstream evalCsv, csv;
  if (Status s = openLog(evalPath, keptEvals, evalCsv); !s)
    return s.takeError();
  auto record = [&](int64_t step, const EvalResult &e) {
    sum.evals.push_back({step, e.loss});
    evalCsv << step << "," << e.loss << "," << e.bitsPerByte << "," << e.accuracy << "\n";
    evalCsv.flush();
  };
  if (Status s = openLog(csvPath, kept, csv); !s)
    return s.takeError();
  const bool tty = writer && opt.progress && isatty(STDERR_FILENO);
  const auto t0 = Clock::now();
  const double tokensPerStep = double(opt.batch) * model.config().seq;
  int64_t stoppedAt = end;
  double lastLogLine = 0; // seconds into the run of the last progress line off a terminal
  for (int64_t step = start; step < end; ++step) {
    auto s0 = Clock::now();
    Batch b = data.train(opt.seed, step, opt.batch);
    if (!opt.resident && !parallel) // a resident step's gradients stay on the device
      model.zeroGrads();
    double loss = 0, gradNorm = 0;
    if (parallel) {
      Expected<double> r = parallel->run(
          b, step, opt.stepFn, [&model] { model.zeroGrads(); }, opt.gradReady);
      if (!r)
        return makeError("step " + std::to_string(step) + ": " + r.error());
      loss = *r;
    } else if (opt.resident) {
      Expected<ResidentTraining::Update> r = opt.resident->update(b, step, adam);
      if (!r)
        return makeError("step " + std::to_string(step) + ": " + r.error());
      loss = r->loss, gradNorm = r->gradNorm;
    } else { // the step's dropout masks come from `step`, the same on a resumed run
      Expected<double> r = opt.stepFn(b, step);
      if (!r)
        return makeError("step " + std::to_string(step) + ": " + r.error());
      loss = *r;
    }
    if (!std::isfinite(loss))
      return makeError("step " + std::to_string(step) + ": the loss is " +
                       (std::isnan(loss) ? "NaN" : "infinite") +
                       "; lower --lr or check the data (the last checkpoint is kept)");
    if (!opt.resident) {
      Expected<double> norm = adam.step(params);
      if (!norm)
        return makeError("step " + std::to_string(step) + ": " + norm.error());
      gradNorm = *norm;
    }
    double secs = std::chrono::duration<double>(Clock::now() - s0).count();
    double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
    sum.losses.push_back(loss);
    csv << step << "," << loss << "," << learningRate(adamCfg, step) << "," << gradNorm << ","
        << tokensPerStep / secs << "," << elapsed << "\n";
    csv.flush(); // a row per step as it ends: tail -f follows, a killed run keeps its rows
    // A terminal gets a live line; a log file or pipe a line every
    // kLogEvery seconds, so a long run shows it is alive.
    constexpr double kLogEvery = 30;
    const bool logLine = writer && opt.progress && !tty && elapsed - lastLogLine >= kLogEvery;
    if (tty || logLine) {
      double perStep = elapsed / double(step - start + 1);
      std::ios::fmtflags flags = log.flags();
      std::streamsize precision = log.precision();
      log << (tty ? "\r" : "") << "step " << step + 1 << "/" << opt.steps << "  loss " << std::fixed
          << std::setprecision(4) << loss << "  " << std::setprecision(0) << tokensPerStep / perStep
          << " tok/s  ETA " << duration(perStep * double(end - step - 1)) << (tty ? "      " : "\n")
          << std::flush;
      log.flags(flags);
      log.precision(precision);
      if (logLine)
        lastLogLine = elapsed;
    }
    if (writer && opt.evalEvery > 0 && (step + 1) % opt.evalEvery == 0 && step + 1 < end) {
      if (Status s = syncHost(); !s)
        return s.takeError();
      Expected<EvalResult> e = evaluate(opt.forward, model.config(), data, opt.evalBatches);
      if (!e)
        return e.takeError();
      log << (tty ? "\n" : "") << "step " << step + 1 << ": eval loss " << e->loss << " ("
          << e->bitsPerByte << " bits/byte), accuracy " << e->accuracy << "\n";
      record(step + 1, *e);
    }
    if (opt.checkpointEvery > 0 && (step + 1) % opt.checkpointEvery == 0 && step + 1 < end) {
      csv.flush(); // the log reaches the checkpoint's step before the checkpoint exists
      if (Status s = save(step + 1); !s)
        return s.takeError();
    }
    if (opt.stop && opt.stop->load() && step + 1 < end) {
      sum.interrupted = true;
      stoppedAt = step + 1;
      break;
    }
  }
  if (tty)
    log << "\n";
  csv.close();
  if (parallel && comm.size() > 1 && writer && parallel->timeline().steps > 0)
    reportExchange(log, *parallel, parallel->overlaps(opt.gradReady));
  sum.lastStep = std::max(start, stoppedAt);
  sum.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  sum.tokensPerSecond =
      sum.seconds > 0 ? tokensPerStep * double(sum.lastStep - start) / sum.seconds : 0;
  sum.finalLoss = sum.losses.empty() ? 0 : sum.losses.back();
  if (sum.lastStep > start) // nothing new: the latest checkpoint already holds this state
    if (Status s = save(sum.lastStep); !s)
      return s.takeError();
  if (Status s = syncHost(); !s)
    return s.takeError();
  if (!writer || sum.interrupted) // rank 0 evaluates and draws; an interrupt is in a hurry
    return sum;
  Expected<EvalResult> e = evaluate(opt.forward, model.config(), data, opt.evalBatches);
  if (!e)
    return e.takeError();
  sum.eval = *e;
  if (sum.evals.empty() || sum.evals.back().step != sum.lastStep)
    record(sum.lastStep, *e);
  for (const EvalPoint &p : sum.evals)
    if (p.loss < sum.bestEval.loss || sum.bestEval.step < 0)
      sum.bestEval = p;
  // The curves of the whole run (resumed runs included).
  std::vector<double> all = earlierLosses;
  all.insert(all.end(), sum.losses.begin(), sum.losses.end());
  if (Status s = writeTrainingPlot(opt.outDir + "/loss.svg",
                                   opt.title.empty() ? "attnc train" : opt.title, all, sum.evals);
      !s)
    return s.takeError();
  return sum;
}

} // namespace attnc::train
