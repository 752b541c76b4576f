//===- DataParallel.cpp - One step's micro-batches over the ranks ---------===//
#include "runtime/train/DataParallel.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <unordered_map>

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

float microBatchWeight(const Batch &part, int64_t counted, int microBatches) {
  return counted > 0 ? float(double(countedTargets(part)) / double(counted))
                     : 1.0f / float(microBatches);
}

BucketSpan bucketsSpanned(int64_t at, int64_t n, int64_t bucket) {
  if (n <= 0)
    return {};
  return {at / bucket, (at + n - 1) / bucket};
}

Status checkMicroBatches(int batch, int microBatches, int ranks) {
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
  return {};
}

struct DataParallelStep::Handover {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<int> pending; ///< per bucket: its parameters not yet final
  bool cancelled = false;
};

Expected<DataParallelStep> DataParallelStep::create(std::vector<ParamRef> params, int batch,
                                                    int microBatches, dist::Communicator &comm,
                                                    Options options) {
  const int ranks = comm.size();
  if (Status s = checkMicroBatches(batch, microBatches, ranks); !s)
    return s.takeError();
  if (options.bucketBytes < int64_t(sizeof(float)))
    return makeError("gradient bucket of " + std::to_string(options.bucketBytes) +
                     " bytes: must hold at least one float");
  DataParallelStep d;
  d.params_ = std::move(params);
  d.comm_ = &comm;
  d.options_ = options;
  d.batch_ = batch, d.micro_ = microBatches;
  d.per_ = microBatches / ranks;
  d.first_ = comm.rank() * d.per_;
  for (const ParamRef &p : d.params_) {
    d.offsets_.push_back(d.total_);
    d.total_ += p.size;
  }
  d.local_.assign(size_t(d.per_) * size_t(d.total_), 0.f);
  d.combined_.assign(size_t(d.total_), 0.f);
  d.bucket_ = std::max<int64_t>(1, options.bucketBytes / int64_t(sizeof(float)));
  const int64_t numBuckets = std::max<int64_t>(1, (d.total_ + d.bucket_ - 1) / d.bucket_);
  d.bucketCovers_.assign(size_t(numBuckets), 0);
  for (size_t i = 0; i < d.params_.size(); ++i) {
    const BucketSpan span = bucketsSpanned(d.offsets_[i], d.params_[i].size, d.bucket_);
    for (int64_t b = span.first; b <= span.last; ++b)
      ++d.bucketCovers_[size_t(b)];
  }
  d.handover_ = std::make_shared<Handover>();
  return d;
}

bool DataParallelStep::overlaps(const GradReadyHook &gradReady) const {
  return options_.overlap && gradReady && comm_->size() > 1 && comm_->callsFromAnyThread();
}

void DataParallelStep::weigh(size_t i, int j, float weight) {
  const ParamRef &p = params_[i];
  float *dst = local_.data() + size_t(j) * size_t(total_) + offsets_[i];
  for (int64_t e = 0; e < p.size; ++e)
    dst[e] = weight * p.grad[e];
}

void DataParallelStep::gradientDone(size_t i, float weight) {
  weigh(i, per_ - 1, weight);
  Handover &h = *handover_;
  std::lock_guard<std::mutex> lock(h.mutex);
  const BucketSpan span = bucketsSpanned(offsets_[i], params_[i].size, bucket_);
  for (int64_t b = span.first; b <= span.last; ++b)
    --h.pending[size_t(b)];
  h.changed.notify_all();
}

Expected<double> DataParallelStep::run(const Batch &global, int64_t step, const StepFn &fn,
                                       const std::function<void()> &zeroGrads,
                                       const GradReadyHook &gradReady) {
  using Clock = std::chrono::steady_clock;
  const int rows = batch_ / micro_;
  if (global.B != batch_)
    return makeError("internal: a batch of " + std::to_string(global.B) + " for a step of " +
                     std::to_string(batch_));
  const int64_t counted = countedTargets(global);
  const std::string what = "step " + std::to_string(step) + "'s gradient exchange";
  const bool overlap = overlaps(gradReady);
  Handover &h = *handover_;
  {
    std::lock_guard<std::mutex> lock(h.mutex);
    h.pending = bucketCovers_;
    h.cancelled = false;
  }
  std::vector<double> losses(per_), allLosses(micro_);
  std::thread exchanger;
  Status exchanged;
  Clock::time_point backwardEnd;
  for (int j = 0; j < per_; ++j) {
    const int m = first_ + j;
    const bool last = j == per_ - 1;
    const Batch part = sliceBatch(global, m * rows, rows);
    const float weight = microBatchWeight(part, counted, micro_);
    std::vector<bool> done(params_.size(), false);
    zeroGrads();
    if (last && overlap) {
      std::unordered_map<const float *, size_t> index;
      for (size_t i = 0; i < params_.size(); ++i)
        index[params_[i].grad] = i;
      gradReady([this, index = std::move(index), &done, weight](const float *grad) {
        auto it = index.find(grad);
        if (it != index.end() && !done[it->second]) {
          done[it->second] = true;
          gradientDone(it->second, weight);
        }
      });
      exchanger = std::thread([this, &exchanged, what] { exchanged = exchangeBuckets(what); });
    }
    Expected<double> loss = fn(part, step * micro_ + m);
    if (last && overlap)
      gradReady({});
    if (!loss) {
      if (exchanger.joinable()) {
        {
          std::lock_guard<std::mutex> lock(h.mutex);
          h.cancelled = true;
        }
        h.changed.notify_all();
        exchanger.join();
      }
      return makeError("micro-batch " + std::to_string(m) + " of " + std::to_string(micro_) + ": " +
                       loss.error());
    }
    if (last) {
      backwardEnd = Clock::now();
      for (size_t i = 0; i < params_.size(); ++i) // those the step did not report
        if (!done[i])
          gradientDone(i, weight);
    } else {
      for (size_t i = 0; i < params_.size(); ++i)
        weigh(i, j, weight);
    }
    losses[size_t(j)] = double(weight) * *loss;
  }
  if (exchanger.joinable())
    exchanger.join();
  else
    exchanged = exchangeBuckets(what);
  timeline_.exposedSeconds += std::chrono::duration<double>(Clock::now() - backwardEnd).count();
  ++timeline_.steps;
  if (!exchanged)
    return exchanged.takeError();
  if (Status s =
          comm_->allGather(losses.data(), losses.size() * sizeof(double), allLosses.data(), what);
      !s)
    return s.takeError();
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

Status DataParallelStep::exchangeBuckets(const std::string &what) {
  Handover &h = *handover_;
  for (int64_t b = int64_t(bucketCovers_.size()) - 1; b >= 0; --b) {
    {
      std::unique_lock<std::mutex> lock(h.mutex);
      h.changed.wait(lock, [&] { return h.cancelled || h.pending[size_t(b)] <= 0; });
      if (h.cancelled)
        return makeError(what + ": cancelled (this rank's backward failed)");
    }
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t a = b * bucket_;
    if (Status s = exchangeBucket(a, std::min(bucket_, total_ - a), what); !s)
      return s;
    timeline_.busySeconds +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  return {};
}

// In each bucket, rank q owns a slice: every rank sends it its
// micro-batches' values there (an all-to-all; they arrive rank-major, so in
// micro-batch order), q adds them up in that order, and an all-gather hands
// every rank every slice's sum. The same additions in the same order
// wherever they run: the bits depend neither on the rank count nor on the
// bucket bounds. Traffic per rank is a ring all-reduce's, 2 (N - 1) / N of
// a bucket with one micro-batch per rank.
Status DataParallelStep::exchangeBucket(int64_t a, int64_t n, const std::string &what) {
  if (n <= 0)
    return {};
  const int ranks = comm_->size(), me = comm_->rank();
  std::vector<size_t> sendBytes(ranks), recvBytes(ranks), sliceBytes(ranks);
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
    return s;
  sum_.assign(size_t(mine), 0.f);
  for (int m = 0; m < micro_; ++m) {
    const float *in = gathered_.data() + size_t(m * mine);
    for (int64_t i = 0; i < mine; ++i)
      sum_[size_t(i)] += in[i];
  }
  return comm_->allGatherV(sum_.data(), combined_.data() + a, sliceBytes, what);
}

} // namespace attnc::train
