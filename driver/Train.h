//===- Train.h - attnc train / eval -----------------------------*- C++ -*-===//
#ifndef ATTNC_DRIVER_TRAIN_H
#define ATTNC_DRIVER_TRAIN_H

#include "driver/Report.h"

#include "runtime/Safetensors.h"
#include "runtime/train/ArtifactTrain.h"

#include <cstdint>
#include <string>

namespace attnc::driver {

struct TrainCliOptions {
  std::string spec;     ///< the .attn file
  std::string specText; ///< the spec's text (a Session's): then `spec` only names it
  /// What the runtime's training front door takes (runtime/train/
  /// ArtifactTrain.h), filled by the command line: the model of the spec
  /// (default: the only one), data, run folder, the flags' training
  /// settings (the spec's train block and attnc's defaults fill the rest;
  /// runTrain resolves `batch` from them), seed, checkpoints, resume and
  /// stop, data parallelism (docs/distributed.md), the engine, the CUDA
  /// step's attention path, GEMM precision and loss scale. The fields
  /// below are the commands' own.
  train::ArtifactTrainOptions run;
  int batch = 8; ///< sequences per step (train) or per evaluation batch
  /// eval: --batch and --eval-batches were given; else the run's own, as
  /// its checkpoint records them (so are the data, when --data is empty).
  bool batchGiven = false, evalBatchesGiven = false;
  std::string target = "cpu";
  // Checks instead of training (test aids, documented in docs/training.md):
  int gradCheck = 0; ///< finite-difference probes per parameter tensor
  /// 5e-3: with N(0, 1/fan_in) weights, 1e-2 leaves a truncation error of
  /// 3 % on the embeddings and 1e-3 fp32 round-off of as much (dense_std).
  float gradCheckEps = 5e-3f;
  double gradCheckTol = 2e-2; ///< max relative error
  /// The CUDA step's AdamW: "device" (default) keeps parameters, gradients
  /// and moments on the device; "host" runs the CPU AdamW on downloaded
  /// gradients each step (the reference the device one is tested against).
  std::string optimizer = "device";
  /// Compiled engine: standard layers keep only their inputs and are
  /// recomputed in the backward (less memory, one more forward per layer).
  bool recomputeLayers = true;
  // generate / fill
  std::string prompt, text;
  int bytes = 64;
  float temperature = 0; ///< 0: greedy
  std::string maskChar = "_";
};

/// attnc train: compiles the model's attention kernels, trains, writes
/// checkpoints, train.csv and loss.svg under --out, prints a report.
/// Interrupted (options.run.stop): the run stopped early with a checkpoint.
CommandResult runTrain(const TrainCliOptions &options);
/// attnc eval: the objective's metric of --out's latest checkpoint.
mlir::LogicalResult runEval(const TrainCliOptions &options);
/// attnc generate: continue --prompt by --bytes bytes with a causal model.
mlir::LogicalResult runGenerate(const TrainCliOptions &options);
/// attnc fill: replace the --mask-char bytes of --text with a masked model's
/// predictions.
mlir::LogicalResult runFill(const TrainCliOptions &options);

/// Layer 0's attention inputs, as its kernel receives them, of the model of
/// `opt.spec` with the weights of --out's latest checkpoint, on evaluation
/// batch 0 of --data (--batch sequences): calibration data for attnc tune
/// --max-error. Returns an exit code (errors printed, naming `cmd`).
struct CapturedAttention {
  st::Tensor q, k, v, lengths, params;
  bool hasLengths = false, hasParams = false;
  int64_t step = 0; ///< the checkpoint's
};
mlir::LogicalResult captureAttentionInputs(const char *cmd, const TrainCliOptions &opt,
                                           CapturedAttention &out);

} // namespace attnc::driver

#endif // ATTNC_DRIVER_TRAIN_H
