//===- TrainSettings.h - Training settings from flags, the spec, defaults -*- C++ -*-===//
//
// How long and how fast to train: each setting comes from a command-line
// flag when one is given, else from the spec's `train { ... }` block (an
// artifact carries it as its model's "train" object), else from attnc's
// own defaults. attnc train and attnc-rt train resolve them the same way
// and say where each came from.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_TRAINSETTINGS_H
#define ATTNC_RUNTIME_TRAIN_TRAINSETTINGS_H

#include "runtime/Error.h"

#include <cstdint>
#include <optional>
#include <string>

namespace attnc::train {

/// Each setting is optional: a source says only what it says.
struct TrainSettings {
  std::optional<double> lr, weightDecay, clip;
  std::optional<int64_t> warmup, batch, steps, evalEvery;

  /// This source's settings, and `fallback`'s where it says nothing.
  TrainSettings orElse(const TrainSettings &fallback) const;
  bool empty() const;
};

/// attnc's defaults, for what neither the flags nor the spec say
/// (docs/training.md says why these).
TrainSettings defaultTrainSettings();

/// The settings as a JSON object with the spec's keywords ("lr", "warmup",
/// "weight_decay", ...); "{}" when empty.
std::string trainSettingsToJson(const TrainSettings &settings);
/// Reads that object back, checking each value against the table the
/// compiler checks (runtime/train/TrainSettingTable.h); errors name `where`.
Expected<TrainSettings> trainSettingsFromJson(const std::string &json, const std::string &where);

/// One line for the log: every resolved setting with its source, e.g.
/// "lr 0.002 (spec), warmup 30 (spec), steps 500 (flag), clip 1 (default)".
/// `plannedBatch` (> 0): the batch an artifact's step was planned for,
/// which wins unless a flag names it; shown as "(plan)" where it differs
/// from what the spec or the default would say.
std::string describeTrainSettings(const TrainSettings &flags, const TrainSettings &spec,
                                  int64_t plannedBatch = 0);

/// Data parallelism's flags (docs/distributed.md): micro-batches per step,
/// each the artifact's planned batch (0: one per rank of dist::world()),
/// how long a gradient exchange waits for the slowest rank, the gradient
/// per exchange bucket, and whether finished buckets are exchanged during
/// the backward.
struct DataParallelFlags {
  int microBatches = 0;
  double rankTimeout = 300;
  int bucketKiB = 1024;
  bool overlap = true;
};

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_TRAINSETTINGS_H
