//===- Trainer.h - The training loop of attnc train -------------*- C++ -*-===//
//
// Runs AdamW on a model's parameters over the spec's objective, with a
// compiled step (CompiledStep.h) computing loss and gradients: batches from Data.h
// (deterministic per (seed, step)), a NaN/Inf check that stops with the
// step and the tensor named, periodic evaluation, atomic checkpoints every
// `checkpointEvery` steps and at the end (Checkpoint.h) from which a resumed
// run reproduces the uninterrupted one's losses exactly, a CSV log, a live
// progress line on a terminal and an SVG loss curve.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_TRAINER_H
#define ATTNC_RUNTIME_TRAIN_TRAINER_H

#include "runtime/dist/Communicator.h"
#include "runtime/train/Data.h"
#include "runtime/train/CrossEntropy.h"
#include "runtime/train/Parameters.h"

#include <nlohmann/json.hpp>

#include <atomic>
#include <functional>
#include <iosfwd>
#include <optional>

namespace attnc::train {

/// Training whose parameters and AdamW moments stay on a device (the
/// compiled CUDA step with the device AdamW, runtime/train/
/// CompiledStepCuda.cpp): the trainer hands it each step and has it copy
/// them back before evaluations and checkpoints.
class ResidentTraining {
public:
  virtual ~ResidentTraining() = default;
  /// Copies the model's parameters and `adam`'s moments (zeros where it
  /// has none yet) to the device.
  virtual Status upload(const AdamW &adam) = 0;
  struct Update {
    double loss = 0;     ///< the mean loss
    double gradNorm = 0; ///< before clipping, as AdamW::step returns it
  };
  /// Runs step `step` on `batch`, then applies AdamW with `adam`'s config
  /// at its step count (which advances) on the device. A non-finite
  /// gradient is an error naming the parameter, with nothing updated.
  virtual Expected<Update> update(const Batch &batch, int64_t step, AdamW &adam) = 0;
  /// Copies the parameters into the model's tensors and the moments and
  /// step count into `adam`.
  virtual Status download(AdamW &adam) = 0;
  /// Data parallelism on the device (TrainOptions::comm, microBatches):
  /// from now on each update() gets the global `batch`, runs this rank's
  /// micro-batches of it and combines every micro-batch's weighted
  /// gradient in micro-batch order on the device, as DataParallelStep does
  /// on the host, before the optimizer. Returns how the gradients travel,
  /// for the log. Errors: the plan does not fit the step.
  struct DataParallelPlan {
    int batch = 0, microBatches = 1;
    dist::Communicator *comm = nullptr;
    int64_t bucketBytes = int64_t(1) << 20;
    bool overlap = true; ///< exchange finished buckets during the last micro-batch's backward
  };
  virtual Expected<std::string> setDataParallel(const DataParallelPlan &plan) = 0;
};

/// A model's forward to the logits [batch·seq, vocab] on `batch` sequences
/// (a compiled inference function, CompiledStep::infer), no dropout.
struct Forward {
  int batch = 0;
  std::function<Expected<const float *>(const Batch &batch)> run;
};

struct TrainOptions {
  std::string outDir; ///< checkpoints, train.csv, loss.svg
  std::string data;   ///< "synthetic:duplicate" or file/directory paths (':'-separated)
  int64_t steps = 100;
  int batch = 8;
  uint64_t seed = 0;
  AdamWConfig adam;
  int64_t evalEvery = 0; ///< 0: only at the end
  int evalBatches = 8;
  int64_t checkpointEvery = 0; ///< 0: only at the end
  double heldOutFraction = 0.05;
  std::string specHash;  ///< checkpoints of another spec are refused
  bool resume = true;    ///< continue from outDir's latest checkpoint
  int64_t stopAfter = 0; ///< > 0: stop after this many steps (checkpointed); the
                         ///< schedule still spans `steps`
  /// When it becomes true (a signal handler sets it), the run ends after
  /// the step in progress as --stop-after would: a checkpoint, then
  /// TrainSummary::interrupted, without the final evaluation.
  const std::atomic<bool> *stop = nullptr;
  bool progress = true; ///< live line when stderr is a terminal
  std::string title;    ///< loss.svg's title: the model, its attention and the data
  /// The training step's forward and backward (mean loss; gradients in the
  /// model's buffers, which the trainer zeroes first): a compiled
  /// whole-model step (CompiledStep::run). Required unless `resident`.
  std::function<Expected<double>(const Batch &batch, int64_t step)> stepFn;
  /// The forward to the logits for the evaluations (CompiledStep::infer).
  Forward forward;
  /// When set, the step and the optimizer run here instead (stepFn unused).
  ResidentTraining *resident = nullptr;
  /// The step's own state a checkpoint carries (the fp16 loss scaler), as
  /// JSON text stored under "step_state" (empty: none), and handed back on
  /// resume, so a resumed fp16 run goes on at the same loss scale.
  std::function<std::string()> stepState;
  std::function<Status(const std::string &)> restoreStepState;
  /// Data parallelism (docs/distributed.md). Each step's global `batch` is
  /// split into `microBatches` micro-batches of batch / microBatches
  /// sequences in order (one stepFn call each, dropout keyed by step ·
  /// microBatches + micro-batch), spread over the ranks of `comm` in order
  /// (rank r takes a run of microBatches / size of them). Every rank then
  /// combines every micro-batch's gradient, weighted by its share of the
  /// step's targets, in micro-batch order, so the update is bit-identical
  /// at any rank count that divides microBatches. The checkpoint records
  /// microBatches; a resumed run must use the same. Only rank 0 writes
  /// (checkpoints, logs, the plot) and evaluates. null: one process.
  dist::Communicator *comm = nullptr;
  int microBatches = 1;
  /// The exchange's buckets and whether they overlap the backward of the
  /// rank's last micro-batch (DataParallelStep::Options), and the step's
  /// report of finished gradients that the overlap needs
  /// (CompiledStep::setGradReady; empty: the exchange follows the step).
  int64_t bucketBytes = int64_t(1) << 20;
  bool overlapExchange = true;
  std::function<void(std::function<void(const float *)>)> gradReady;
  /// Settings besides the trainer's own that every rank must share (the
  /// binary, the engine), compared at start-up (dist::checkRanksAgree).
  std::vector<dist::Setting> rankSettings;
};

/// Evaluation: the objective's metric on held-out (or fixed synthetic) data.
struct EvalResult {
  double loss = 0;        ///< mean cross-entropy (nats) over counted positions
  double bitsPerByte = 0; ///< loss / ln 2
  double accuracy = 0;    ///< argmax accuracy over counted positions
  int64_t positions = 0;
};

/// One held-out evaluation: the mean loss after `step` steps.
struct EvalPoint {
  int64_t step = -1;
  double loss = 0;
};

struct TrainSummary {
  int64_t firstStep = 0, lastStep = 0; ///< steps run by this call [first, last)
  double finalLoss = 0, tokensPerSecond = 0, seconds = 0;
  EvalResult eval;
  std::vector<double> losses; ///< per step run by this call
  /// Every evaluation of the run (a resumed run's earlier ones from
  /// eval.csv), in step order, and the one with the lowest loss.
  std::vector<EvalPoint> evals;
  EvalPoint bestEval;
  bool interrupted = false; ///< TrainOptions::stop ended the run early
};

/// Loads the data the options name for the model's objective.
class DataSource {
public:
  static Expected<DataSource> open(const std::string &spec, const ModelConfig &model,
                                   double heldOutFraction);
  Batch train(uint64_t seed, int64_t step, int B) const;
  /// Evaluation batch `index` (held-out text, or a fixed synthetic stream).
  Batch eval(int64_t index, int B) const;
  int64_t evalBatchesAvailable(int B) const;
  std::string describe() const;

private:
  ModelConfig model_;
  std::optional<ByteCorpus> corpus_;
  bool duplicate_ = false;
};

/// `data` (TrainOptions::data) with each file path made absolute;
/// synthetic data as it is.
std::string absoluteDataPaths(const std::string &data);

/// What a training run's checkpoint records for attnc eval: the batch, the
/// batches per evaluation and the data (absolute paths). What a checkpoint
/// lacks (one an older attnc wrote) stays unset.
struct RecordedRun {
  std::optional<int> batch, evalBatches;
  std::optional<std::string> data;
};
RecordedRun recordedRun(const nlohmann::json &checkpointState);

/// The objective's metrics over `batches` evaluation batches of
/// forward.batch sequences: the softmax cross-entropy and argmax accuracy
/// of the forward's logits at the positions with a target.
Expected<EvalResult> evaluate(const Forward &forward, const ModelConfig &config,
                              const DataSource &data, int batches);

/// Trains `model`'s parameters (resuming from options.outDir when it has a
/// checkpoint and options.resume). Progress goes to `log` (stderr).
Expected<TrainSummary> train(ParameterStore &model, const DataSource &data,
                             const TrainOptions &options, std::ostream &log);

/// A finite-difference check of the model's gradients on one batch: for
/// `probes` coordinates of every parameter tensor (drawn from `seed`),
/// (L(θ+ε) − L(θ−ε)) / 2ε (at ε/2) against the analytic gradient of the
/// mean loss; errors are relative to max(|numeric|, floor), since fp32
/// losses leave ~1e-5 of noise in small slopes.
struct GradCheckProbe {
  std::string param;
  int64_t index = 0;
  double analytic = 0, numeric = 0;
};
struct GradCheckResult {
  std::vector<GradCheckProbe> probes;
  /// max |analytic − numeric| / max(|numeric|, floor) over the probes
  double worst = 0;
  std::string worstParam;
  /// Probes skipped because the slopes at ε, ε/2, ε/4 differ by > 10 %: the
  /// loss jumps inside the interval (an LSH bucket or a ReLU switched).
  int nonSmooth = 0;
};
/// How a gradient check evaluates the model on its batch: the mean loss and,
/// with `backward`, the gradients in the model's buffers (a compiled step
/// writes gradients on every call).
using LossFn = std::function<Expected<double>(bool backward)>;
Expected<GradCheckResult> gradientCheck(ParameterStore &model, int probes, float eps, uint64_t seed,
                                        const LossFn &loss, double floor = 1e-2);

/// loss.svg: the training loss of every step (faint) with its moving
/// average, and the held-out loss at each evaluation, under `title`.
Status writeTrainingPlot(const std::string &path, const std::string &title,
                         const std::vector<double> &losses, const std::vector<EvalPoint> &evals);

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_TRAINER_H
