//===- ArtifactTrain.h - Training a compiled model from an artifact -*- C++ -*-===//
//
// The one front door to training: a model's compiled training step and
// inference function, as an artifact carries them (manifest.json's
// "models": the C++ or CUDA sources, arena plans, bindings and the model's
// configuration), bound to a parameter store with the artifact's attention
// kernels, and trained by the training loop. `attnc-rt train DIR` opens the
// artifact from a directory; `attnc train SPEC` builds the same artifact in
// memory (driver/ArtifactBuilder.h) and calls the same function. No MLIR here.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_ARTIFACTTRAIN_H
#define ATTNC_RUNTIME_TRAIN_ARTIFACTTRAIN_H

#include "runtime/Artifact.h"
#include "runtime/Error.h"
#include "runtime/train/CompiledStep.h"
#include "runtime/train/Trainer.h"
#include "runtime/train/TrainSettings.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>

namespace attnc::train {

struct ArtifactTrainOptions {
  std::string dir, model; ///< model: which compiled model (default: the only one)
  std::string data, out = "attnc-run";
  /// What the command line says (lr, warmup, steps, ...): each overrides
  /// the model's recommended setting (the manifest's "train"), which
  /// overrides attnc's default. The batch is the artifact's plan; a flag
  /// naming another is an error.
  TrainSettings flags;
  uint64_t seed = 0;
  int64_t checkpointEvery = 50;
  int evalBatches = 8;
  bool resume = true;
  int64_t stopAfter = 0; ///< > 0: stop (with a checkpoint) after this many steps
  /// A run directory whose newest intact checkpoint's weights start this
  /// (fresh) run, for the parameters whose names and shapes match; the
  /// others keep their initialisation. Optimizer state is not carried.
  std::string initFrom;
  /// Becomes true to end the run after the step in progress, with a
  /// checkpoint (TrainOptions::stop); the tools set it on SIGINT/SIGTERM.
  const std::atomic<bool> *stop = nullptr;
  DataParallelFlags parallel;
  /// "compiled": the artifact's step where it was compiled for (CPU, or a
  /// GPU for a CUDA artifact); "cuda-sim": a CUDA artifact's step with its
  /// kernels on the SIMT emulator, on a machine without a GPU.
  std::string engine = "compiled";
  /// What the command line named: empty, or cpu / cuda, which must be the
  /// artifact's own target (cuda-sim is `engine` cuda-sim).
  std::string target;
  /// CUDA steps: attention through the host (operands downloaded, the
  /// kernels run host-in host-out, results uploaded; on cuda-sim the
  /// artifact's CPU kernels), instead of the attention kernels on the
  /// step's buffers, which f32 dense and LSH kernels do by default.
  bool hostAttention = false;
  /// CUDA artifacts: the GEMMs' (StepPrecision); auto: the attention
  /// kernels' dtype (the model's).
  std::string precision = "auto";
  float lossScale = 0;        ///< fp16: the initial loss scale (0: LossScaler's)
  bool hostOptimizer = false; ///< CUDA artifacts: AdamW on the host, not the device
  /// What progress lines begin with ("attnc-rt train: ").
  std::string tool = "attnc-rt train";
  /// Where progress lines and notes go (null: nowhere; the tools pass
  /// stderr).
  std::ostream *log = nullptr;
  /// The training data already opened for this model (`data` names it);
  /// null: trainArtifact opens `data`.
  const DataSource *opened = nullptr;
};

/// One model of an artifact, ready to run: its configuration (from the
/// manifest), parameters and compiled step.
struct ArtifactModel {
  ManifestModel manifest;
  ModelConfig config;
  /// The model's recommended training settings (the spec's train block);
  /// the batch is the plan's (manifest.batch) whatever it says.
  TrainSettings recommended;
  std::string precision; ///< the GEMMs' (f32 on the CPU)
  StepEngine engine = StepEngine::Cpu;
  std::unique_ptr<ParameterStore> store;
  std::unique_ptr<CompiledStep> step;
};

/// Binds the artifact's model (options.model, or the only one) to fresh
/// parameters from options.seed and compiles its step (host compiler,
/// NVRTC on a GPU) with its attention kernels. Progress goes to
/// options.log (nowhere when null).
/// The micro-batches a run of `options` splits each step into: its own,
/// else one per rank of dist::world().
int microBatchesOf(const ArtifactTrainOptions &options);

Expected<ArtifactModel> loadArtifactModel(const Artifact &artifact,
                                          const ArtifactTrainOptions &options);

struct ArtifactTrainResult {
  std::string model;
  int64_t numParams = 0;
  TrainSummary summary;
  int64_t arenaBytes = 0, keptBytes = 0, inferArenaBytes = 0;
  std::string precision;
  bool gpu = false;    ///< a CUDA step (on a GPU or the emulator)
  float lossScale = 1; ///< fp16 CUDA steps: the loss scale at the end
  int64_t overflowReruns = 0;
  /// Device-resident CUDA steps: host<->device copies of the last step,
  /// and whether attention ran on the step's buffers.
  CompiledStep::Transfers stepTransfers;
  bool deviceAttention = false;
  long long stepAllocations = 0; ///< device allocations during the steps
  /// Data parallelism of a device-resident step: bucket exchanges begun
  /// during a backward (overlapped) and in all.
  int64_t bucketsOverlapped = 0, bucketsSent = 0;
};

/// Trains the artifact's model; progress goes to options.log (nowhere when
/// null), the result back to the caller to report.
Expected<ArtifactTrainResult> trainArtifact(const Artifact &artifact,
                                            const ArtifactTrainOptions &options);
/// openArtifact(options.dir), then trainArtifact.
Expected<ArtifactTrainResult> trainArtifact(const ArtifactTrainOptions &options);

/// The report both attnc train and attnc-rt train print: steps, time and
/// rate, the final training and held-out losses, the compiled step's
/// memory, and where the run's files are (`outDir`).
void writeTrainReport(const ArtifactTrainResult &result, const std::string &outDir,
                      std::ostream &os);

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_ARTIFACTTRAIN_H
