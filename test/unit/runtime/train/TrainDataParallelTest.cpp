//===- TrainDataParallelTest.cpp - Micro-batches, weights, sum order ------===//
//
// DataParallelStep on a made-up step whose loss and gradient are means over
// the counted targets of its micro-batch, checked against the global
// batch's mean computed here in double: the weights make micro-batches with
// different target counts add up to it. Ranks are threads sharing
// in-process collectives, so the split over ranks and the order of the sum
// are checked without MPI: every rank's gradient equals one process's with
// the same micro-batches, bit for bit.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/DataParallel.h"

#include <gtest/gtest.h>

#include <cmath>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

using namespace attnc;
using namespace attnc::train;

namespace {

constexpr int kSeq = 6, kParams = 5;

/// A global batch of B rows whose rows have different numbers of targets
/// (row r ignores its first r² mod 5 positions), as MLM batches do.
Batch makeBatch(int B) {
  Batch b;
  b.B = B, b.S = kSeq;
  for (int r = 0; r < B; ++r)
    for (int i = 0; i < kSeq; ++i) {
      b.inputs.push_back(r * 31 + i * 7);
      b.targets.push_back(i < r * r % 5 ? -1 : (r * 13 + i * 5) % 17);
    }
  return b;
}

/// What position (input, target) contributes: to the loss and to each
/// gradient element.
double contribution(int32_t input, int32_t target, int element) {
  return std::sin(0.1 * input + 0.37 * target + 1.3 * element);
}

/// The made-up step: means over the micro-batch's counted positions,
/// written into `grad`; records the dropout keys it was given.
struct FakeStep {
  float *grad;
  std::vector<int64_t> keys;
  Expected<double> operator()(const Batch &b, int64_t key) {
    keys.push_back(key);
    double loss = 0, g[kParams] = {};
    int64_t n = 0;
    for (size_t p = 0; p < b.targets.size(); ++p) {
      if (b.targets[p] < 0)
        continue;
      ++n;
      loss += contribution(b.inputs[p], b.targets[p], -1);
      for (int e = 0; e < kParams; ++e)
        g[e] += contribution(b.inputs[p], b.targets[p], e);
    }
    for (int e = 0; e < kParams; ++e)
      grad[e] = float(g[e] / double(n));
    return loss / double(n);
  }
};

/// Ranks as threads: each collective posts every rank's bytes (and block
/// sizes), waits for all of them, then each rank reads what MPI would give
/// it.
class ThreadWorld {
public:
  explicit ThreadWorld(int n) : n_(n), slots_(size_t(n)) {}
  std::atomic<int> allToAlls{0}; ///< calls so far, all ranks
  struct Post {
    std::string data;
    std::vector<size_t> blocks; ///< allToAll: bytes for each rank, in order
  };
  class Rank final : public dist::Communicator {
  public:
    Rank(ThreadWorld &w, int r) : w_(w), r_(r) {}
    int rank() const override { return r_; }
    int size() const override { return w_.n_; }
    std::string describe() const override { return "threads"; }
    Status allGather(const void *mine, size_t bytes, void *all, const std::string &) override {
      std::vector<Post> posts =
          w_.exchange(r_, {std::string(static_cast<const char *>(mine), bytes), {}});
      for (int r = 0; r < w_.n_; ++r)
        std::memcpy(static_cast<char *>(all) + size_t(r) * bytes, posts[size_t(r)].data.data(),
                    bytes);
      return {};
    }
    Status allToAll(const void *send, const std::vector<size_t> &sendBytes, void *recv,
                    const std::vector<size_t> &recvBytes, const std::string &) override {
      size_t total = 0;
      for (size_t b : sendBytes)
        total += b;
      ++w_.allToAlls;
      std::vector<Post> posts =
          w_.exchange(r_, {std::string(static_cast<const char *>(send), total), sendBytes});
      char *out = static_cast<char *>(recv);
      for (int r = 0; r < w_.n_; ++r) {
        const Post &p = posts[size_t(r)];
        size_t at = 0;
        for (int q = 0; q < r_; ++q)
          at += p.blocks[size_t(q)];
        EXPECT_EQ(p.blocks[size_t(r_)], recvBytes[size_t(r)]);
        std::memcpy(out, p.data.data() + at, p.blocks[size_t(r_)]);
        out += recvBytes[size_t(r)];
      }
      return {};
    }
    Status allGatherV(const void *mine, void *all, const std::vector<size_t> &bytesOf,
                      const std::string &) override {
      std::vector<Post> posts =
          w_.exchange(r_, {std::string(static_cast<const char *>(mine), bytesOf[size_t(r_)]), {}});
      char *out = static_cast<char *>(all);
      for (int r = 0; r < w_.n_; ++r) {
        std::memcpy(out, posts[size_t(r)].data.data(), bytesOf[size_t(r)]);
        out += bytesOf[size_t(r)];
      }
      return {};
    }
    [[noreturn]] void abort(const std::string &message, int) override {
      ADD_FAILURE() << message;
      std::abort();
    }

  private:
    ThreadWorld &w_;
    int r_;
  };

private:
  /// Posts rank r's contribution and returns every rank's, once all posted.
  std::vector<Post> exchange(int r, Post post) {
    std::unique_lock<std::mutex> lock(m_);
    const long generation = generation_;
    slots_[size_t(r)] = std::move(post);
    if (++arrived_ == n_) {
      gathered_ = slots_;
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return generation_ != generation; });
    }
    return gathered_;
  }

  int n_, arrived_ = 0;
  long generation_ = 0;
  std::vector<Post> slots_, gathered_;
  std::mutex m_;
  std::condition_variable cv_;
};

struct Result {
  double loss = 0;
  std::vector<float> grad;
  std::vector<int64_t> keys;
};

/// One step of `global` at `micro` micro-batches on `comm`.
Result runStep(const Batch &global, int micro, dist::Communicator &comm, int64_t step = 3) {
  std::vector<float> value(kParams, 0.f), grad(kParams, 0.f);
  std::vector<ParamRef> params = {{"w", value.data(), grad.data(), kParams, true}};
  Expected<DataParallelStep> dp = DataParallelStep::create(params, global.B, micro, comm, {});
  EXPECT_TRUE(dp.ok()) << dp.error();
  FakeStep fake{grad.data(), {}};
  Expected<double> loss = dp->run(
      global, step, [&](const Batch &b, int64_t key) { return fake(b, key); },
      [&] { std::fill(grad.begin(), grad.end(), 0.f); });
  EXPECT_TRUE(loss.ok()) << loss.error();
  return {loss ? *loss : 0.0, grad, fake.keys};
}

} // namespace

TEST(DataParallel, SliceAndCount) {
  const Batch b = makeBatch(6);
  const Batch part = sliceBatch(b, 2, 3);
  ASSERT_EQ(part.B, 3);
  EXPECT_EQ(part.inputs.front(), b.inputs[size_t(2 * kSeq)]);
  EXPECT_EQ(part.targets.back(), b.targets[size_t(4 * kSeq + kSeq - 1)]);
  // Rows ignore 0, 1, 4, 4, 1, 0 positions.
  EXPECT_EQ(countedTargets(b), 6 * kSeq - (0 + 1 + 4 + 4 + 1 + 0));
}

// The micro-batches' weighted sum is the global batch's mean, which an
// unweighted mean of their means is not (their target counts differ).
TEST(DataParallel, MicroBatchesAddUpToTheGlobalMean) {
  const Batch global = makeBatch(8);
  double loss = 0, grad[kParams] = {};
  int64_t n = 0;
  for (size_t p = 0; p < global.targets.size(); ++p)
    if (global.targets[p] >= 0) {
      ++n;
      loss += contribution(global.inputs[p], global.targets[p], -1);
      for (int e = 0; e < kParams; ++e)
        grad[e] += contribution(global.inputs[p], global.targets[p], e);
    }
  std::unique_ptr<dist::Communicator> one = dist::singleProcess();
  for (int micro : {1, 2, 4, 8}) {
    Result r = runStep(global, micro, *one);
    EXPECT_NEAR(r.loss, loss / double(n), 1e-6) << micro;
    for (int e = 0; e < kParams; ++e)
      EXPECT_NEAR(r.grad[size_t(e)], grad[e] / double(n), 2e-6) << micro << " " << e;
  }
  // Unweighted, two micro-batches of 4 rows (15 and 18 targets) would be off.
  const Batch a = sliceBatch(global, 0, 4), b = sliceBatch(global, 4, 4);
  ASSERT_NE(countedTargets(a), countedTargets(b));
  std::vector<float> ga(kParams), gb(kParams);
  const double la = *FakeStep{ga.data(), {}}(a, 0), lb = *FakeStep{gb.data(), {}}(b, 0);
  EXPECT_GT(std::fabs((la + lb) / 2 - loss / double(n)), 1e-4);
}

// Two and four ranks (threads) each end with one process's gradient at the
// same micro-batches, bit for bit; the dropout keys are step · S + m, each
// micro-batch's once, on the rank that owns it.
TEST(DataParallel, AnyRankCountGivesTheSameBits) {
  const Batch global = makeBatch(8);
  std::unique_ptr<dist::Communicator> one = dist::singleProcess();
  const Result reference = runStep(global, 4, *one);
  EXPECT_EQ(reference.keys, (std::vector<int64_t>{12, 13, 14, 15}));
  for (int ranks : {2, 4}) {
    ThreadWorld world(ranks);
    std::vector<Result> results(ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r)
      threads.emplace_back([&, r] {
        ThreadWorld::Rank comm(world, r);
        results[size_t(r)] = runStep(global, 4, comm);
      });
    for (std::thread &t : threads)
      t.join();
    std::vector<int64_t> keys;
    for (int r = 0; r < ranks; ++r) {
      EXPECT_EQ(std::memcmp(results[size_t(r)].grad.data(), reference.grad.data(),
                            sizeof(float) * kParams),
                0)
          << ranks << " ranks, rank " << r;
      EXPECT_EQ(results[size_t(r)].loss, reference.loss) << ranks << " ranks, rank " << r;
      keys.insert(keys.end(), results[size_t(r)].keys.begin(), results[size_t(r)].keys.end());
      EXPECT_EQ(results[size_t(r)].keys.size(), size_t(4 / ranks));
    }
    EXPECT_EQ(keys, reference.keys) << ranks;
  }
}

TEST(DataParallel, BatchesAndRanksThatDoNotDivide) {
  std::vector<float> v(kParams), g(kParams);
  std::vector<ParamRef> params = {{"w", v.data(), g.data(), kParams, true}};
  std::unique_ptr<dist::Communicator> one = dist::singleProcess();
  Expected<DataParallelStep> odd = DataParallelStep::create(params, 7, 2, *one, {});
  ASSERT_FALSE(odd.ok());
  EXPECT_NE(odd.error().find("the global batch 7 does not divide into 2 micro-batches"),
            std::string::npos)
      << odd.error();
  ThreadWorld world(2);
  ThreadWorld::Rank rank(world, 0);
  Expected<DataParallelStep> uneven = DataParallelStep::create(params, 6, 3, rank, {});
  ASSERT_FALSE(uneven.ok());
  EXPECT_NE(uneven.error().find("2 ranks cannot share 3 micro-batches evenly"), std::string::npos)
      << uneven.error();
}

namespace {

/// A step with three gradient tensors that, like the compiled backward,
/// reports them last first; after the last tensor it waits (up to 10 s)
/// for an exchange to have started, which only the overlap can do while
/// the step is still running.
struct ReportingStep {
  std::vector<std::vector<float>> grads{std::vector<float>(3), std::vector<float>(2),
                                        std::vector<float>(4)};
  std::function<void(const float *)> ready;
  ThreadWorld *world = nullptr; ///< set: wait for its first all-to-all
  bool sawOverlap = false;
  Expected<double> operator()(const Batch &b, int64_t) {
    double loss = 0;
    for (int t = 2; t >= 0; --t) {
      std::vector<float> &g = grads[size_t(t)];
      for (size_t e = 0; e < g.size(); ++e) {
        double sum = 0;
        for (size_t p = 0; p < b.targets.size(); ++p)
          if (b.targets[p] >= 0)
            sum += contribution(b.inputs[p], b.targets[p], int(e) + 10 * t);
        g[e] = float(sum / double(countedTargets(b)));
      }
      if (ready)
        ready(g.data());
      if (t == 2 && world && ready) {
        const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (world->allToAlls == 0 && std::chrono::steady_clock::now() < until)
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
        sawOverlap = world->allToAlls > 0;
      }
    }
    for (size_t p = 0; p < b.targets.size(); ++p)
      if (b.targets[p] >= 0)
        loss += contribution(b.inputs[p], b.targets[p], -1);
    return loss / double(countedTargets(b));
  }
};

struct Reported {
  std::vector<float> grad; ///< the three tensors, flat
  double loss = 0;
  bool sawOverlap = false;
};

Reported runReporting(const Batch &global, int micro, dist::Communicator &comm, bool overlap,
                      ThreadWorld *world) {
  ReportingStep fake;
  fake.world = world;
  std::vector<std::vector<float>> values{std::vector<float>(3), std::vector<float>(2),
                                         std::vector<float>(4)};
  std::vector<ParamRef> params;
  for (int t = 0; t < 3; ++t)
    params.push_back({"t" + std::to_string(t), values[size_t(t)].data(),
                      fake.grads[size_t(t)].data(), int64_t(values[size_t(t)].size()), true});
  // Two floats per bucket: five buckets, the last (tensor 2's end) first.
  Expected<DataParallelStep> dp =
      DataParallelStep::create(params, global.B, micro, comm, {8, overlap});
  EXPECT_TRUE(dp.ok()) << dp.error();
  EXPECT_EQ(dp->buckets(), 5);
  Expected<double> loss = dp->run(
      global, 5, [&](const Batch &b, int64_t key) { return fake(b, key); }, [] {},
      [&](std::function<void(const float *)> fn) { fake.ready = std::move(fn); });
  EXPECT_TRUE(loss.ok()) << loss.error();
  Reported r{{}, loss ? *loss : 0.0, fake.sawOverlap};
  for (const std::vector<float> &g : fake.grads)
    r.grad.insert(r.grad.end(), g.begin(), g.end());
  const DataParallelStep::Timeline &t = dp->timeline();
  EXPECT_EQ(t.steps, 1);
  if (comm.size() > 1) {
    EXPECT_GE(t.exposedSeconds, 0.0);
  }
  return r;
}

} // namespace

// Buckets sent while the backward still runs (the step sees an exchange
// begin before it ends) give the serial exchange's bits, which are one
// process's: the bucket bounds and the overlap change no sum.
TEST(DataParallel, OverlappedBucketsGiveTheSerialBits) {
  const Batch global = makeBatch(8);
  std::unique_ptr<dist::Communicator> one = dist::singleProcess();
  const Reported reference = runReporting(global, 4, *one, true, nullptr);
  for (bool overlap : {true, false}) {
    ThreadWorld world(2);
    std::vector<Reported> results(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        ThreadWorld::Rank comm(world, r);
        results[size_t(r)] = runReporting(global, 4, comm, overlap, &world);
      });
    for (std::thread &t : threads)
      t.join();
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(results[size_t(r)].grad.size(), reference.grad.size());
      EXPECT_EQ(std::memcmp(results[size_t(r)].grad.data(), reference.grad.data(),
                            sizeof(float) * reference.grad.size()),
                0)
          << (overlap ? "overlapped" : "serial") << ", rank " << r;
      EXPECT_EQ(results[size_t(r)].loss, reference.loss);
      // Serial: no exchange can start inside the step (it waits 10 s for
      // nothing, on the last micro-batch only).
      EXPECT_EQ(results[size_t(r)].sawOverlap, overlap) << "rank " << r;
    }
  }
}
