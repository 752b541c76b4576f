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
// The exchange overlaps the backward of the rank's last micro-batch, as
// PyTorch's DDP does: the compiled step reports each gradient as it
// becomes final (CompiledStep::setGradReady), a bucket whose gradients are
// all final is exchanged by a communication thread while the backward
// goes on, and the buckets go in a fixed order (the last first, where the
// backward starts), so every rank makes the same calls. Bucket bounds do
// not change any sum, so the bits are those of the serial exchange.
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
/// Micro-batch `m`'s share of the step's mean loss: its counted targets
/// over the global batch's (`counted`), or 1 / microBatches when nothing
/// is counted. Each micro-batch's loss and gradient are means over its own
/// targets, so the weighted sum is the global batch's mean.
float microBatchWeight(const Batch &part, int64_t counted, int microBatches);
/// The buckets (of `bucket` elements each, numbered from 0) that
/// elements [at, at + n) of a flat gradient reach: first .. last, none
/// (last < first) when n is 0. The host and the device exchanges count
/// with it which gradients each bucket waits for.
struct BucketSpan {
  int64_t first = 0, last = -1;
};
BucketSpan bucketsSpanned(int64_t at, int64_t n, int64_t bucket);
/// Ok when `ranks` share `microBatches` micro-batches of a global `batch`
/// evenly; else the error a user can act on.
Status checkMicroBatches(int batch, int microBatches, int ranks);

class DataParallelStep {
public:
  /// The step function: loss and gradients (into `params`' buffers, which
  /// it zeroes or overwrites) of one micro-batch; its int64 is the dropout
  /// key.
  using StepFn = std::function<Expected<double>(const Batch &, int64_t)>;
  /// Installs (or, with an empty function, removes) the step's report of a
  /// finished gradient buffer (a ParamRef::grad); empty when the step
  /// cannot report (then the exchange starts after the backward).
  using GradReadyHook = std::function<void(std::function<void(const float *)>)>;
  struct Options {
    int64_t bucketBytes = int64_t(1) << 20; ///< of the flat fp32 gradient per bucket
    bool overlap = true;                    ///< exchange finished buckets during the backward
  };
  /// Errors: a global batch that the micro-batches do not divide, or
  /// micro-batches the ranks do not divide.
  static Expected<DataParallelStep> create(std::vector<ParamRef> params, int batch,
                                           int microBatches, dist::Communicator &comm,
                                           Options options);
  /// Runs this rank's micro-batches of `global` (step `step`), exchanges,
  /// and leaves the combined gradient in the parameters' gradient buffers;
  /// returns the global mean loss. `zeroGrads` clears the model's
  /// gradients before each micro-batch.
  Expected<double> run(const Batch &global, int64_t step, const StepFn &fn,
                       const std::function<void()> &zeroGrads, const GradReadyHook &gradReady = {});
  int firstMicroBatch() const { return first_; }
  int microBatchesHere() const { return per_; }
  int buckets() const { return int(bucketCovers_.size()); }
  /// Whether exchanges run beside the backward (a hook, a world whose
  /// calls may come from another thread, and Options::overlap).
  bool overlaps(const GradReadyHook &gradReady) const;

  /// The exchange's time line, summed over run()s: `busy` the seconds
  /// spent exchanging buckets, `exposed` those after this rank's backward
  /// ended (what the step waited for). Without overlap they are equal;
  /// busy − exposed is what the overlap hid.
  struct Timeline {
    double busySeconds = 0, exposedSeconds = 0;
    int64_t steps = 0;
  };
  const Timeline &timeline() const { return timeline_; }

private:
  DataParallelStep() = default;
  /// Every bucket, the last first, each once its gradients are final
  /// (pending_ 0) or the step is cancelled.
  Status exchangeBuckets(const std::string &what);
  Status exchangeBucket(int64_t a, int64_t n, const std::string &what);
  /// Parameter i's gradient, times `weight`, into micro-batch j's part of
  /// local_.
  void weigh(size_t i, int j, float weight);
  /// Parameter `i` of the last micro-batch is final: weighted into its
  /// slice of local_, and the buckets it covers one gradient nearer.
  void gradientDone(size_t i, float weight);
  std::vector<ParamRef> params_;
  std::vector<int64_t> offsets_; ///< each parameter's place in the flat gradient
  dist::Communicator *comm_ = nullptr;
  Options options_;
  int batch_ = 0, micro_ = 1, per_ = 1, first_ = 0;
  int64_t total_ = 0;        ///< gradient floats
  int64_t bucket_ = 1;       ///< floats per bucket
  std::vector<float> local_; ///< [per_][total_]: weighted gradients
  std::vector<float> send_, gathered_, sum_, combined_;
  std::vector<int> bucketCovers_; ///< per bucket: how many parameters reach into it
  // The last micro-batch's hand-over to the exchange thread.
  struct Handover;
  std::shared_ptr<Handover> handover_;
  Timeline timeline_;
};

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_DATAPARALLEL_H
