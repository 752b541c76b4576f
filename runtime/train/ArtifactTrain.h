//===- ArtifactTrain.h - Training a compiled model from an artifact -*- C++ -*-===//
//
// attnc-rt train: the whole-model training step `attnc compile --target cpu
// -o DIR` wrote into an artifact (its C++, arena plan and bindings in
// manifest.json's "models"), run by the training runtime with the
// artifact's attention kernels: no spec, no MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_ARTIFACTTRAIN_H
#define ATTNC_RUNTIME_TRAIN_ARTIFACTTRAIN_H

#include "runtime/Error.h"
#include "runtime/Manifest.h"

#include <cstdint>
#include <map>
#include <ostream>
#include <string>

namespace attnc::train {

struct ArtifactTrainOptions {
  std::string dir, model; ///< model: which compiled model (default: the only one)
  std::string data, out = "attnc-run";
  int64_t steps = 200;
  int batch = 0; ///< 0: the artifact's (the plan is per batch; another is an error)
  float lr = 1e-3f, weightDecay = 0.01f, clip = 1.0f;
  int64_t warmup = 20;
  uint64_t seed = 0;
  int64_t evalEvery = 0, checkpointEvery = 50;
  int evalBatches = 8;
  bool resume = true;
  /// CUDA artifacts: the GEMMs' (StepPrecision); auto: the attention
  /// kernels' dtype (the model's).
  std::string precision = "auto";
  float lossScale = 0;        ///< fp16: the initial loss scale (0: LossScaler's)
  bool hostOptimizer = false; ///< CUDA artifacts: AdamW on the host, not the device
};

/// An artifact as training reads it: its manifest and the files it names,
/// from memory (`files`, by name) or else from `dir`, which messages name.
struct Artifact {
  std::string dir;
  Manifest manifest;
  std::map<std::string, std::string> files;
  /// The artifact's file `name` (manifest.json's file names).
  Expected<std::string> file(const std::string &name) const;
};
/// The artifact in `dir` (its manifest read and checked; files on demand).
Expected<Artifact> openArtifact(const std::string &dir);

/// Trains the artifact's model; the report goes to `os`, progress to stderr.
Status trainArtifact(const Artifact &artifact, const ArtifactTrainOptions &options,
                     std::ostream &os);
/// openArtifact(options.dir), then trainArtifact.
Status trainArtifact(const ArtifactTrainOptions &options, std::ostream &os);

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_ARTIFACTTRAIN_H
