//===- DataParallel.h - One step's micro-batches over the ranks -*- C++ -*-===//
//
// The data-parallel step of TrainOptions (comm, microBatches;
// docs/distributed.md): a step's global batch is split into S
// micro-batches of B / S sequences, in order; rank r of N runs micro-batches
// [r·S/N, (r+1)·S/N) through the compiled step, each weighted by its share
// of the step's counted targets (so the result is the global batch's mean
// loss). The ranks then exchange them in buckets: each rank owns a slice of
// the bucket, receives every micro-batch's values there (an MPI
// all-to-all), adds them up in micro-batch order, and an all-gather gives
// every rank every slice's sum. The same additions happen in the same order
// whatever the rank count, so every rank holds the same gradient and it
// does not depend on N: a run at 2 ranks equals one process with
// --micro-batches 2 bit for bit, and a checkpoint resumes at any rank count
// that divides S. The bytes moved are a ring all-reduce's.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_DATAPARALLEL_H
#define ATTNC_RUNTIME_TRAIN_DATAPARALLEL_H

#include "runtime/dist/Communicator.h"
#include "runtime/train/Data.h"
#include "runtime/train/Optimizer.h"

#include <functional>
#include <vector>

namespace attnc::train {

/// Rows [row0, row0 + rows) of `b`.
Batch sliceBatch(const Batch &b, int row0, int rows);
/// Positions with a target (≥ 0): what the step's mean loss divides by.
int64_t countedTargets(const Batch &b);

class DataParallelStep {
public:
  /// The step function: loss and gradients (into `params`' buffers, which
  /// it zeroes or overwrites) of one micro-batch; its int64 is the dropout
  /// key.
  using StepFn = std::function<Expected<double>(const Batch &, int64_t)>;
  /// Errors: a global batch that the micro-batches do not divide, or
  /// micro-batches the ranks do not divide.
  static Expected<DataParallelStep> create(std::vector<ParamRef> params, int batch,
                                           int microBatches, dist::Communicator &comm);
  /// Runs this rank's micro-batches of `global` (step `step`), exchanges,
  /// and leaves the combined gradient in the parameters' gradient buffers;
  /// returns the global mean loss. `zeroGrads` clears the model's
  /// gradients before each micro-batch.
  Expected<double> run(const Batch &global, int64_t step, const StepFn &fn,
                       const std::function<void()> &zeroGrads);
  int firstMicroBatch() const { return first_; }
  int microBatchesHere() const { return per_; }

private:
  DataParallelStep() = default;
  std::vector<ParamRef> params_;
  dist::Communicator *comm_ = nullptr;
  int batch_ = 0, micro_ = 1, per_ = 1, first_ = 0;
  int64_t total_ = 0;        ///< gradient floats
  std::vector<float> local_; ///< [per_][total_]: weighted gradients
  std::vector<float> send_, gathered_, sum_, combined_;
};

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_DATAPARALLEL_H
