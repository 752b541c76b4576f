//===- DataParallel.cpp - One step's micro-batches over the ranks ---------===//
#include "runtime/train/DataParallel.h"

#include <algorithm>
#include <cstring>

namespace attnc::train {

Batch sliceBatch(const Batch &b, int row0, int rows) {
  Batch out;
  out.B = rows, out.S = b.S;
  const size_t at = size_t(row0) * size_t(b.S), n = size_t(rows) * size_t(b.S);
  out.inputs.assign(b.inputs.begin() + long(at), b.inputs.begin() + long(at + n));
  out.targets.assign(b.targets.begin() + long(at), b.targets.begin() + long(at + n));
  return out;
}

int64_t countedTargets(const Batch &b) {
  return std::count_if(b.targets.begin(), b.targets.end(), [](int32_t t) { return t >= 0; });
}

Expected<DataParallelStep> DataParallelStep::create(std::vector<ParamRef> params, int batch,
                                                    int microBatches, dist::Communicator &comm) {
  const int ranks = comm.size();
  if (microBatches < 1)
    return makeError("--micro-batches " + std::to_string(microBatches) + ": must be at least 1");
  if (microBatches % ranks != 0)
    return makeError(std::to_string(ranks) + " ranks cannot share " + std::to_string(microBatches) +
                     " micro-batches evenly; use a rank count that divides --micro-batches " +
                     std::to_string(microBatches));
  if (batch % microBatches != 0)
    return makeError("the global batch " + std::to_string(batch) + " does not divide into " +
                     std::to_string(microBatches) + " micro-batches" +
                     (ranks > 1 ? " (" + std::to_string(ranks) + " ranks)" : std::string()) +
                     "; pass a --batch that is a multiple of " + std::to_string(microBatches));
  DataParallelStep d;
  d.params_ = std::move(params);
  d.comm_ = &comm;
  d.batch_ = batch, d.micro_ = microBatches;
  d.per_ = microBatches / ranks;
  d.first_ = comm.rank() * d.per_;
  for (const ParamRef &p : d.params_)
    d.total_ += p.size;
  d.local_.assign(size_t(d.per_) * size_t(d.total_), 0.f);
  d.combined_.assign(size_t(d.total_), 0.f);
  return d;
}

Expected<double> DataParallelStep::run(const Batch &global, int64_t step, const StepFn &fn,
                                       const std::function<void()> &zeroGrads) {
  const int rows = batch_ / micro_;
  if (global.B != batch_)
    return makeError("internal: a batch of " + std::to_string(global.B) + " for a step of " +
                     std::to_string(batch_));
  const int64_t counted = countedTargets(global);
  std::vector<double> losses(per_), allLosses(micro_);
  for (int j = 0; j < per_; ++j) {
    const int m = first_ + j;
    const Batch part = sliceBatch(global, m * rows, rows);
    zeroGrads();
    Expected<double> loss = fn(part, step * micro_ + m);
    if (!loss)
      return makeError("micro-batch " + std::to_string(m) + " of " + std::to_string(micro_) + ": " +
                       loss.error());
    // Its share of the step's mean: its targets over all of them (each
    // micro-batch's loss and gradient are means over its own targets).
    const float weight =
        counted > 0 ? float(double(countedTargets(part)) / double(counted)) : 1.0f / float(micro_);
    float *dst = local_.data() + size_t(j) * size_t(total_);
    for (const ParamRef &p : params_) {
      for (int64_t i = 0; i < p.size; ++i)
        dst[i] = weight * p.grad[i];
      dst += p.size;
    }
    losses[size_t(j)] = double(weight) * *loss;
  }

  const std::string what = "step " + std::to_string(step) + "'s gradient exchange";
  if (Status s =
          comm_->allGather(losses.data(), losses.size() * sizeof(double), allLosses.data(), what);
      !s)
    return s.takeError();
  // Buckets of at most 16 MiB of this rank's gradients. In each, rank q
  // owns a slice: every rank sends it its micro-batches' values there (an
  // all-to-all; they arrive rank-major, so in micro-batch order), q adds
  // them up in that order, and an all-gather hands every rank every sum.
  // The same additions in the same order wherever they run: the bits do
  // not depend on the rank count. Traffic per rank is a ring
  // all-reduce's, 2 (N - 1) / N of a bucket with one micro-batch per rank.
  const int ranks = comm_->size(), me = comm_->rank();
  const int64_t bucket = std::max<int64_t>(1, (int64_t(4) << 20) / per_);
  std::vector<size_t> sendBytes(ranks), recvBytes(ranks), sliceBytes(ranks);
  for (int64_t a = 0; a < total_; a += bucket) {
    const int64_t n = std::min(bucket, total_ - a);
    auto sliceBegin = [&](int q) { return a + n * q / ranks; };
    const int64_t mine = sliceBegin(me + 1) - sliceBegin(me);
    send_.clear();
    for (int q = 0; q < ranks; ++q) {
      const int64_t from = sliceBegin(q), len = sliceBegin(q + 1) - from;
      for (int j = 0; j < per_; ++j) {
        const float *src = local_.data() + size_t(j) * size_t(total_) + from;
        send_.insert(send_.end(), src, src + len);
      }
      sendBytes[size_t(q)] = size_t(per_ * len) * sizeof(float);
      recvBytes[size_t(q)] = size_t(per_ * mine) * sizeof(float);
      sliceBytes[size_t(q)] = size_t(len) * sizeof(float);
    }
    gathered_.resize(size_t(micro_ * mine));
    if (Status s = comm_->allToAll(send_.data(), sendBytes, gathered_.data(), recvBytes, what); !s)
      return s.takeError();
    sum_.assign(size_t(mine), 0.f);
    for (int m = 0; m < micro_; ++m) {
      const float *in = gathered_.data() + size_t(m * mine);
      for (int64_t i = 0; i < mine; ++i)
        sum_[size_t(i)] += in[i];
    }
    if (Status s = comm_->allGatherV(sum_.data(), combined_.data() + a, sliceBytes, what); !s)
      return s.takeError();
  }
  const float *src = combined_.data();
  for (const ParamRef &p : params_) {
    std::memcpy(p.grad, src, size_t(p.size) * sizeof(float));
    src += p.size;
  }
  double loss = 0;
  for (double l : allLosses)
    loss += l;
  return loss;
}

} // namespace attnc::train
