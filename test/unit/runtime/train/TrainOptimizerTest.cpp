//===- TrainOptimizerTest.cpp - AdamW, schedule, checkpoints --------------===//
#include "runtime/FileSystem.h"
#include "runtime/Sha256.h"
#include "runtime/train/Checkpoint.h"
#include "runtime/train/Optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <csignal>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace attnc;
using namespace attnc::train;
namespace sfs = std::filesystem;

namespace {

//===--- Optimizer ---------------------------------------------------------===//

/// A parameter with storage, for the tests.
struct Param {
  std::string name;
  std::vector<float> value, grad;
  bool decay = true;
};

std::vector<ParamRef> refs(std::vector<Param> &ps) {
  std::vector<ParamRef> r;
  for (Param &p : ps)
    r.push_back(
        {p.name, p.value.data(), p.grad.data(), static_cast<int64_t>(p.value.size()), p.decay});
  return r;
}

std::vector<Param> makeParams() {
  std::vector<Param> ps(2);
  ps[0].name = "w";
  ps[0].value.resize(37);
  ps[1].name = "b";
  ps[1].value.resize(5);
  ps[1].decay = false;
  for (Param &p : ps) {
    for (size_t i = 0; i < p.value.size(); ++i)
      p.value[i] = static_cast<float>(std::sin(0.7 * i + p.name.size()) * 0.9);
    p.grad.assign(p.value.size(), 0.0f);
  }
  return ps;
}

/// Deterministic gradients for `step`; `scale` sets the global norm's size.
void setGrads(std::vector<Param> &ps, int step, float scale) {
  for (size_t k = 0; k < ps.size(); ++k)
    for (size_t i = 0; i < ps[k].grad.size(); ++i)
      ps[k].grad[i] = scale * static_cast<float>(std::cos(1.3 * i + 2.1 * step + 0.5 * k) +
                                                 0.1 * std::sin(0.37 * step * (i + 1)));
}

double refLr(const AdamWConfig &c, int64_t step) {
  const double pi = std::acos(-1.0);
  if (c.warmupSteps > 0 && step < c.warmupSteps)
    return c.lr * double(step + 1) / double(c.warmupSteps);
  double lo = double(c.lr) * c.minLrRatio;
  if (step >= c.totalSteps)
    return lo;
  double p = double(step - c.warmupSteps) / double(c.totalSteps - c.warmupSteps);
  return lo + (double(c.lr) - lo) * 0.5 * (1 + std::cos(pi * p));
}

/// Double-precision AdamW (PyTorch's formulation) over the same parameters.
struct RefAdamW {
  AdamWConfig c;
  std::vector<std::vector<double>> w, m, v;
  std::vector<bool> decay;
  int64_t t = 0;

  explicit RefAdamW(const AdamWConfig &cfg, const std::vector<Param> &ps) : c(cfg) {
    for (const Param &p : ps) {
      w.emplace_back(p.value.begin(), p.value.end());
      m.emplace_back(p.value.size(), 0.0);
      v.emplace_back(p.value.size(), 0.0);
      decay.push_back(p.decay);
    }
  }
  double step(const std::vector<Param> &ps) {
    std::vector<std::vector<double>> g;
    double sum = 0;
    for (const Param &p : ps) {
      g.emplace_back(p.grad.begin(), p.grad.end());
      for (double x : g.back())
        sum += x * x;
    }
    double norm = std::sqrt(sum);
    if (c.clipNorm > 0 && norm > c.clipNorm)
      for (auto &gg : g)
        for (double &x : gg)
          x *= c.clipNorm / norm;
    double lr = refLr(c, t);
    ++t;
    double bc1 = 1 - std::pow(double(c.beta1), double(t));
    double bc2 = 1 - std::pow(double(c.beta2), double(t));
    for (size_t k = 0; k < w.size(); ++k)
      for (size_t i = 0; i < w[k].size(); ++i) {
        if (decay[k])
          w[k][i] *= 1 - lr * c.weightDecay;
        m[k][i] = c.beta1 * m[k][i] + (1 - double(c.beta1)) * g[k][i];
        v[k][i] = c.beta2 * v[k][i] + (1 - double(c.beta2)) * g[k][i] * g[k][i];
        w[k][i] -= lr * (m[k][i] / bc1) / (std::sqrt(v[k][i] / bc2) + c.eps);
      }
    return norm;
  }
};

double maxDiff(const std::vector<Param> &ps, const RefAdamW &r) {
  double d = 0;
  for (size_t k = 0; k < ps.size(); ++k)
    for (size_t i = 0; i < ps[k].value.size(); ++i)
      d = std::max(d, std::fabs(double(ps[k].value[i]) - r.w[k][i]));
  return d;
}

void runAgainstReference(AdamWConfig cfg, float gradScale, bool expectClipped) {
  std::vector<Param> ps = makeParams();
  RefAdamW ref(cfg, ps);
  AdamW opt(cfg);
  bool clipped = false;
  for (int s = 0; s < 12; ++s) {
    setGrads(ps, s, gradScale);
    double refNorm = ref.step(ps);
    std::vector<Param> before = ps;
    Expected<double> norm = opt.step(refs(ps));
    ASSERT_TRUE(norm) << norm.error();
    EXPECT_NEAR(*norm, refNorm, 1e-9 * refNorm);
    EXPECT_EQ(opt.stepCount(), s + 1);
    if (cfg.clipNorm > 0 && refNorm > cfg.clipNorm) {
      clipped = true;
      // The gradients were scaled in place to the clip norm.
      EXPECT_NEAR(AdamW::gradNorm(refs(ps)), cfg.clipNorm, 1e-5 * cfg.clipNorm);
      EXPECT_NEAR(ps[0].grad[3], before[0].grad[3] * (cfg.clipNorm / refNorm),
                  1e-6 * std::fabs(before[0].grad[3]));
    } else {
      EXPECT_EQ(ps[0].grad, before[0].grad);
    }
    EXPECT_LT(maxDiff(ps, ref), 5e-6) << "after step " << s;
  }
  EXPECT_EQ(clipped, expectClipped);
  // The parameters moved a meaningful distance (the comparison is not void).
  std::vector<Param> init = makeParams();
  EXPECT_GT(std::fabs(ps[0].value[0] - init[0].value[0]), 1e-3);
}

} // namespace

TEST(TrainOptimizer, LearningRateSchedule) {
  AdamWConfig c;
  c.lr = 1e-3f;
  c.warmupSteps = 10;
  c.totalSteps = 110;
  c.minLrRatio = 0.1f;
  EXPECT_FLOAT_EQ(learningRate(c, 0), 1e-4f);
  EXPECT_FLOAT_EQ(learningRate(c, 4), 5e-4f);
  EXPECT_FLOAT_EQ(learningRate(c, 9), 1e-3f);
  EXPECT_FLOAT_EQ(learningRate(c, 10), 1e-3f);   // cosine starts at lr
  EXPECT_FLOAT_EQ(learningRate(c, 60), 5.5e-4f); // half way: the mean
  EXPECT_FLOAT_EQ(learningRate(c, 35),
                  float(1e-4 + 9e-4 * 0.5 * (1 + std::cos(std::acos(-1.0) * 0.25))));
  EXPECT_FLOAT_EQ(learningRate(c, 110), 1e-4f);
  EXPECT_FLOAT_EQ(learningRate(c, 5000), 1e-4f);
  EXPECT_GT(learningRate(c, 109), 1e-4f);
  EXPECT_LT(learningRate(c, 109), 1.01e-4f);
  for (int64_t s = 10; s < 120; ++s)
    EXPECT_LE(learningRate(c, s + 1), learningRate(c, s)) << s;

  AdamWConfig n; // no warm-up
  n.lr = 2e-3f;
  n.warmupSteps = 0;
  n.totalSteps = 100;
  n.minLrRatio = 0.0f;
  EXPECT_FLOAT_EQ(learningRate(n, 0), 2e-3f);
  EXPECT_FLOAT_EQ(learningRate(n, 50), 1e-3f);
  EXPECT_FLOAT_EQ(learningRate(n, 100), 0.0f);

  AdamWConfig w; // warm-up as long as the run: no cosine left
  w.lr = 1.0f;
  w.warmupSteps = 4;
  w.totalSteps = 4;
  w.minLrRatio = 0.5f;
  EXPECT_FLOAT_EQ(learningRate(w, 3), 1.0f);
  EXPECT_FLOAT_EQ(learningRate(w, 4), 0.5f);
}

TEST(TrainOptimizer, GradNormIsTheGlobalL2Norm) {
  std::vector<Param> ps(2);
  ps[0] = {"a", {0, 0}, {3, 4}, true};
  ps[1] = {"b", {0}, {12}, false};
  EXPECT_DOUBLE_EQ(AdamW::gradNorm(refs(ps)), 13.0);
  EXPECT_DOUBLE_EQ(AdamW::gradNorm({}), 0.0);
  // Accumulated in double: float squares of 1e20 would overflow.
  ps[0].grad = {1e20f, 1e20f};
  ps[1].grad = {0};
  EXPECT_NEAR(AdamW::gradNorm(refs(ps)), std::sqrt(2.0) * double(1e20f), 1e6);
}

TEST(TrainOptimizer, MatchesDoubleReferenceWithDecay) {
  AdamWConfig c;
  c.lr = 1e-2f;
  c.weightDecay = 0.1f;
  c.warmupSteps = 3;
  c.totalSteps = 10;
  c.clipNorm = 0.0f;
  runAgainstReference(c, 0.5f, false);
}

TEST(TrainOptimizer, MatchesDoubleReferenceWithoutDecay) {
  AdamWConfig c;
  c.lr = 3e-2f;
  c.weightDecay = 0.0f;
  c.beta1 = 0.8f;
  c.beta2 = 0.95f;
  c.warmupSteps = 0;
  c.totalSteps = 20;
  c.clipNorm = 100.0f; // never reached
  runAgainstReference(c, 0.5f, false);
}

TEST(TrainOptimizer, MatchesDoubleReferenceWithClipping) {
  AdamWConfig c;
  c.lr = 1e-2f;
  c.weightDecay = 0.05f;
  c.warmupSteps = 2;
  c.totalSteps = 12;
  c.clipNorm = 1.0f; // the gradients' norm is ~ 5·sqrt(21) ≈ 23
  runAgainstReference(c, 5.0f, true);
}

TEST(TrainOptimizer, NonFiniteGradientUpdatesNothing) {
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<Param> ps = makeParams();
    AdamWConfig c;
    c.lr = 1e-2f;
    c.totalSteps = 10;
    AdamW opt(c);
    setGrads(ps, 0, 1.0f);
    ASSERT_TRUE(opt.step(refs(ps)));
    setGrads(ps, 1, 10.0f); // would be clipped
    ps[1].grad[3] = bad;
    std::vector<Param> before = ps;
    st::File stateBefore;
    opt.saveState(stateBefore);

    Expected<double> r = opt.step(refs(ps));
    ASSERT_FALSE(r);
    EXPECT_NE(r.error().find("'b'"), std::string::npos) << r.error();
    EXPECT_NE(r.error().find("element 3"), std::string::npos) << r.error();
    EXPECT_EQ(opt.stepCount(), 1);
    for (size_t k = 0; k < ps.size(); ++k) {
      EXPECT_EQ(0, std::memcmp(ps[k].value.data(), before[k].value.data(),
                               ps[k].value.size() * sizeof(float)));
      EXPECT_EQ(0, std::memcmp(ps[k].grad.data(), before[k].grad.data(),
                               ps[k].grad.size() * sizeof(float))); // not clipped
    }
    st::File stateAfter;
    opt.saveState(stateAfter);
    EXPECT_EQ(st::serialize(stateAfter), st::serialize(stateBefore));
  }
}

TEST(TrainOptimizer, RejectsSizeChangeAndDuplicates) {
  std::vector<Param> ps = makeParams();
  AdamW opt;
  setGrads(ps, 0, 1.0f);
  ASSERT_TRUE(opt.step(refs(ps)));
  std::vector<ParamRef> r = refs(ps);
  r[0].size = 36;
  Expected<double> e = opt.step(r);
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().find("'w'"), std::string::npos) << e.error();
  r = refs(ps);
  r[1].name = "w";
  EXPECT_FALSE(opt.step(r));
  EXPECT_EQ(opt.stepCount(), 1);
}

TEST(TrainOptimizer, StateRoundTripResumesBitIdentically) {
  AdamWConfig c;
  c.lr = 1e-2f;
  c.weightDecay = 0.1f;
  c.warmupSteps = 2;
  c.totalSteps = 8;
  c.clipNorm = 3.0f;
  std::vector<Param> a = makeParams();
  AdamW straight(c);
  for (int s = 0; s < 4; ++s) {
    setGrads(a, s, 1.0f + s);
    ASSERT_TRUE(straight.step(refs(a)));
  }
  // Save, go through the bytes of a safetensors image, restore into a new
  // optimizer and a copy of the parameters.
  st::File saved;
  straight.saveState(saved);
  EXPECT_EQ(saved.metadata.at("adam.step"), "4");
  ASSERT_TRUE(saved.tensors.count("adam.m.w") && saved.tensors.count("adam.v.b"));
  st::File parsed;
  std::string err;
  ASSERT_TRUE(st::parse(st::serialize(saved), "state", parsed, err)) << err;
  std::vector<Param> b = a;
  AdamW resumed(c);
  Status loaded = resumed.loadState(parsed, refs(b));
  ASSERT_TRUE(loaded) << loaded.error();
  EXPECT_EQ(resumed.stepCount(), 4);

  for (int s = 4; s < 10; ++s) {
    setGrads(a, s, 1.0f + s);
    setGrads(b, s, 1.0f + s);
    Expected<double> na = straight.step(refs(a));
    Expected<double> nb = resumed.step(refs(b));
    ASSERT_TRUE(na && nb);
    EXPECT_EQ(*na, *nb);
    for (size_t k = 0; k < a.size(); ++k)
      ASSERT_EQ(
          0, std::memcmp(a[k].value.data(), b[k].value.data(), a[k].value.size() * sizeof(float)))
          << "step " << s << " parameter " << a[k].name;
  }
}

TEST(TrainOptimizer, LoadStateErrorsNameTheTensor) {
  std::vector<Param> ps = makeParams();
  AdamW opt;
  setGrads(ps, 0, 1.0f);
  ASSERT_TRUE(opt.step(refs(ps)));
  st::File saved;
  opt.saveState(saved);

  st::File missing = saved;
  missing.tensors.erase("adam.v.b");
  AdamW o1;
  Status s1 = o1.loadState(missing, refs(ps));
  ASSERT_FALSE(s1);
  EXPECT_NE(s1.error().find("adam.v.b"), std::string::npos) << s1.error();

  st::File sized = saved;
  sized.tensors["adam.m.w"] = st::Tensor::f32({3}, {1, 2, 3});
  AdamW o2;
  Status s2 = o2.loadState(sized, refs(ps));
  ASSERT_FALSE(s2);
  EXPECT_NE(s2.error().find("adam.m.w"), std::string::npos) << s2.error();
  EXPECT_EQ(o2.stepCount(), 0); // nothing half-loaded

  st::File noStep = saved;
  noStep.metadata.clear();
  AdamW o3;
  EXPECT_FALSE(o3.loadState(noStep, refs(ps)));

  // A fresh optimizer's state (step 0, no tensors) loads.
  st::File fresh;
  AdamW().saveState(fresh);
  AdamW o4;
  EXPECT_TRUE(o4.loadState(fresh, refs(ps)));
}

//===--- Checkpoints -------------------------------------------------------===//

namespace {

fs::TempDir tempDir() {
  Expected<fs::TempDir> d = fs::TempDir::create("attnc-ckpt-test-");
  if (!d) {
    ADD_FAILURE() << d.error();
    std::abort();
  }
  return std::move(d).take();
}

Checkpoint smallCheckpoint(int64_t step, const std::string &spec = "spec-aaaa") {
  Checkpoint c;
  c.step = step;
  c.specHash = spec;
  c.tensors.tensors["w"] = st::Tensor::f32({2, 2}, {1.0f * step, 2, 3, 4});
  c.tensors.tensors["adam.m.w"] = st::Tensor::f32({4}, {0.5f, 0, 0, float(step)});
  c.tensors.metadata["adam.step"] = std::to_string(step);
  c.state = {{"rng", {1, 2, 3}}, {"data_position", step * 10}, {"note", "x"}};
  return c;
}

std::vector<std::string> listDir(const std::string &dir) {
  std::vector<std::string> names;
  for (const auto &e : sfs::directory_iterator(dir))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void writeText(const std::string &path, const std::string &text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

} // namespace

TEST(TrainOptimizerCheckpoint, RoundTrip) {
  fs::TempDir d = tempDir();
  std::string dir = d.path() + "/run"; // created by the save
  EXPECT_FALSE(hasCheckpoint(dir));
  Checkpoint c = smallCheckpoint(5);
  Status s = saveCheckpoint(dir, c);
  ASSERT_TRUE(s) << s.error();
  EXPECT_TRUE(hasCheckpoint(dir));
  Expected<Checkpoint> l = loadLatestCheckpoint(dir, "spec-aaaa");
  ASSERT_TRUE(l) << l.error();
  EXPECT_EQ(l->step, 5);
  EXPECT_EQ(l->specHash, "spec-aaaa");
  EXPECT_EQ(l->state, c.state);
  EXPECT_EQ(st::serialize(l->tensors), st::serialize(c.tensors));
  EXPECT_EQ(listDir(dir),
            (std::vector<std::string>{"ckpt-5.json", "ckpt-5.safetensors", "latest.json"}));
  // The per-checkpoint JSON has the documented fields.
  nlohmann::json j = nlohmann::json::parse(*fs::readFile(dir + "/ckpt-5.json"));
  EXPECT_EQ(j["format_version"], 1);
  EXPECT_EQ(j["step"], 5);
  EXPECT_EQ(j["spec_hash"], "spec-aaaa");
  EXPECT_EQ(j["tensors"], "ckpt-5.safetensors");
  EXPECT_EQ(j["tensors_sha256"], Sha256::hexHash(*fs::readFile(dir + "/ckpt-5.safetensors")));
  EXPECT_EQ(j["state"], c.state);
  // An empty expected hash accepts any spec.
  EXPECT_TRUE(loadLatestCheckpoint(dir, ""));
}

TEST(TrainOptimizerCheckpoint, KeepsTheNewest) {
  fs::TempDir d = tempDir();
  for (int64_t s : {10, 20, 30}) {
    Status st = saveCheckpoint(d.path(), smallCheckpoint(s), 2);
    ASSERT_TRUE(st) << st.error();
  }
  EXPECT_EQ(listDir(d.path()),
            (std::vector<std::string>{"ckpt-20.json", "ckpt-20.safetensors", "ckpt-30.json",
                                      "ckpt-30.safetensors", "latest.json"}));
  ASSERT_TRUE(saveCheckpoint(d.path(), smallCheckpoint(40), 1));
  EXPECT_EQ(listDir(d.path()),
            (std::vector<std::string>{"ckpt-40.json", "ckpt-40.safetensors", "latest.json"}));
  EXPECT_EQ(loadLatestCheckpoint(d.path(), "")->step, 40);
  EXPECT_FALSE(saveCheckpoint(d.path(), smallCheckpoint(50), 0));
}

TEST(TrainOptimizerCheckpoint, ResavingTheLatestStepIsSafe) {
  fs::TempDir d = tempDir();
  ASSERT_TRUE(saveCheckpoint(d.path(), smallCheckpoint(7), 2));
  Checkpoint c = smallCheckpoint(7);
  c.tensors.tensors["w"] = st::Tensor::f32({1}, {42.0f});
  Status s = saveCheckpoint(d.path(), c, 2);
  ASSERT_TRUE(s) << s.error();
  Expected<Checkpoint> l = loadLatestCheckpoint(d.path(), "");
  ASSERT_TRUE(l) << l.error();
  EXPECT_EQ(l->tensors.tensors.at("w").asF32(), std::vector<float>{42.0f});
  // One tensors file for step 7: the replaced one is gone.
  int tensorsFiles = 0;
  for (const std::string &n : listDir(d.path()))
    tensorsFiles += n.find(".safetensors") != std::string::npos;
  EXPECT_EQ(tensorsFiles, 1);
  // And again (back to the plain name).
  ASSERT_TRUE(saveCheckpoint(d.path(), smallCheckpoint(7), 2));
  EXPECT_EQ(loadLatestCheckpoint(d.path(), "")->tensors.tensors.at("w").asF32()[0], 7.0f);
}

TEST(TrainOptimizerCheckpoint, SpecMismatchNamesBothHashes) {
  fs::TempDir d = tempDir();
  const std::string a(64, 'a'), b(64, 'b');
  ASSERT_TRUE(saveCheckpoint(d.path(), smallCheckpoint(3, a)));
  Expected<Checkpoint> l = loadLatestCheckpoint(d.path(), b);
  ASSERT_FALSE(l);
  EXPECT_NE(l.error().find("was written for spec " + a), std::string::npos) << l.error();
  EXPECT_NE(l.error().find("this spec is " + b), std::string::npos) << l.error();
  EXPECT_NE(l.error().find("ckpt-3.json"), std::string::npos) << l.error();
}

TEST(TrainOptimizerCheckpoint, TamperedTensorsFailTheChecksum) {
  fs::TempDir d = tempDir();
  ASSERT_TRUE(saveCheckpoint(d.path(), smallCheckpoint(3)));
  std::string path = d.path() + "/ckpt-3.safetensors";
  std::string bytes = *fs::readFile(path);
  bytes[bytes.size() - 3] ^= 0x01; // in the data: still a parseable file
  writeText(path, bytes);
  Expected<Checkpoint> l = loadLatestCheckpoint(d.path(), "spec-aaaa");
  ASSERT_FALSE(l);
  EXPECT_NE(l.error().find(path), std::string::npos) << l.error();
  EXPECT_NE(l.error().find("SHA-256"), std::string::npos) << l.error();

  // Truncated, and missing.
  writeText(path, bytes.substr(0, 20));
  l = loadLatestCheckpoint(d.path(), "");
  ASSERT_FALSE(l);
  EXPECT_NE(l.error().find(path), std::string::npos) << l.error();
  sfs::remove(path);
  l = loadLatestCheckpoint(d.path(), "");
  ASSERT_FALSE(l);
  EXPECT_NE(l.error().find(path), std::string::npos) << l.error();
}

TEST(TrainOptimizerCheckpoint, MissingOrCorruptLatest) {
  fs::TempDir d = tempDir();
  Expected<Checkpoint> l = loadLatestCheckpoint(d.path(), "");
  ASSERT_FALSE(l);
  EXPECT_NE(l.error().find("nothing to resume"), std::string::npos) << l.error();
  l = loadLatestCheckpoint(d.path() + "/does-not-exist", "");
  ASSERT_FALSE(l);
  EXPECT_NE(l.error().find("nothing to resume"), std::string::npos) << l.error();

  ASSERT_TRUE(saveCheckpoint(d.path(), smallCheckpoint(1)));
  const std::string latest = d.path() + "/latest.json";
  for (std::string bad :
       {std::string("{\"checkpoint\": \"ckpt-1.js"), std::string(""), std::string("[1, 2]"),
        std::string("{\"checkpoint\": 3}"), std::string("{\"checkpoint\": \"../x.json\"}")}) {
    writeText(latest, bad);
    EXPECT_TRUE(hasCheckpoint(d.path()));
    l = loadLatestCheckpoint(d.path(), "");
    ASSERT_FALSE(l) << bad;
    EXPECT_NE(l.error().find(latest), std::string::npos) << l.error();
  }
  // latest.json naming a missing or corrupt checkpoint JSON names that file.
  writeText(latest, "{\"format_version\": 1, \"step\": 2, \"checkpoint\": \"ckpt-2.json\"}");
  l = loadLatestCheckpoint(d.path(), "");
  ASSERT_FALSE(l);
  EXPECT_NE(l.error().find(d.path() + "/ckpt-2.json"), std::string::npos) << l.error();
  writeText(latest, "{\"format_version\": 1, \"step\": 1, \"checkpoint\": \"ckpt-1.json\"}");
  ASSERT_TRUE(loadLatestCheckpoint(d.path(), ""));
  writeText(d.path() + "/ckpt-1.json", "{\"format_version\": 1, \"step\": 1}");
  l = loadLatestCheckpoint(d.path(), "");
  ASSERT_FALSE(l);
  EXPECT_NE(l.error().find(d.path() + "/ckpt-1.json"), std::string::npos) << l.error();
}

TEST(TrainOptimizerCheckpoint, CorruptLatestFallsBackToTheNewestIntact) {
  fs::TempDir d = tempDir();
  for (int64_t step : {10, 20, 30})
    ASSERT_TRUE(saveCheckpoint(d.path(), smallCheckpoint(step), 3));
  // The newest tensors damaged: the strict loader refuses, the forgiving
  // one loads step 20 and says which failed and which it used.
  const std::string newest = d.path() + "/ckpt-30.safetensors";
  std::string bytes = *fs::readFile(newest);
  bytes[bytes.size() - 3] ^= 0x01;
  writeText(newest, bytes);
  ASSERT_FALSE(loadLatestCheckpoint(d.path(), "spec-aaaa"));
  Expected<Checkpoint> l = loadNewestIntactCheckpoint(d.path(), "spec-aaaa");
  ASSERT_TRUE(l) << l.error();
  EXPECT_EQ(l->step, 20);
  EXPECT_NE(l->recovered.find(newest), std::string::npos) << l->recovered;
  EXPECT_NE(l->recovered.find(d.path() + "/ckpt-20.json"), std::string::npos) << l->recovered;
  // latest.json itself torn: the newest intact JSON (30's tensors are bad).
  writeText(d.path() + "/latest.json", "{\"checkpoint\": \"ckpt-3");
  l = loadNewestIntactCheckpoint(d.path(), "");
  ASSERT_TRUE(l) << l.error();
  EXPECT_EQ(l->step, 20);
  EXPECT_NE(l->recovered.find(d.path() + "/latest.json"), std::string::npos) << l->recovered;
  // Another spec's run is refused, not recovered from.
  l = loadNewestIntactCheckpoint(d.path(), "spec-bbbb");
  ASSERT_FALSE(l);
  // Nothing intact: the latest's error, saying so.
  sfs::remove(d.path() + "/ckpt-20.safetensors");
  sfs::remove(d.path() + "/ckpt-10.safetensors");
  l = loadNewestIntactCheckpoint(d.path(), "");
  ASSERT_FALSE(l);
  EXPECT_NE(l.error().find("no older checkpoint"), std::string::npos) << l.error();
}

TEST(TrainOptimizerCheckpoint, IntactLatestIsNotRecovered) {
  fs::TempDir d = tempDir();
  ASSERT_TRUE(saveCheckpoint(d.path(), smallCheckpoint(4)));
  ASSERT_TRUE(saveCheckpoint(d.path(), smallCheckpoint(8)));
  Expected<Checkpoint> l = loadNewestIntactCheckpoint(d.path(), "spec-aaaa");
  ASSERT_TRUE(l) << l.error();
  EXPECT_EQ(l->step, 8);
  EXPECT_TRUE(l->recovered.empty()) << l->recovered;
}

//===--- Crash safety ------------------------------------------------------===//

namespace {

constexpr int64_t kBigFloats = 5 * 1000 * 1000; // 20 MB

std::vector<float> bigPattern(int64_t step) {
  std::vector<float> v(kBigFloats);
  for (int64_t i = 0; i < kBigFloats; ++i)
    v[i] = static_cast<float>((i * 7 + step) % 1009);
  v[0] = static_cast<float>(step);
  return v;
}

Checkpoint bigCheckpoint(int64_t step) {
  Checkpoint c;
  c.step = step;
  c.specHash = "spec-big";
  c.tensors.tensors["big"] = st::Tensor::f32({kBigFloats}, bigPattern(step));
  c.state = {{"step", step}};
  return c;
}

/// The child: saves big checkpoints from `first` on, reporting each
/// completed save's step on `fd`, until killed.
[[noreturn]] void saveLoop(const std::string &dir, int64_t first, int fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  for (int64_t s = first; s < first + 500; ++s) {
    Status st = saveCheckpoint(dir, bigCheckpoint(s), 2);
    if (!st) {
      std::fprintf(stderr, "child: %s\n", st.error().c_str());
      ::_exit(3);
    }
    if (::write(fd, &s, sizeof s) != sizeof s)
      ::_exit(4);
  }
  ::_exit(0);
}

std::set<std::string> temporaries(const std::string &dir, bool nonEmptyOnly) {
  std::set<std::string> out;
  std::error_code ec;
  for (auto it = sfs::directory_iterator(dir, ec); !ec && it != sfs::directory_iterator();
       it.increment(ec)) {
    std::string n = it->path().filename().string();
    if (n.rfind(".ckpt-tmp-", 0) != 0)
      continue;
    std::error_code sec;
    if (!nonEmptyOnly || sfs::file_size(it->path(), sec) > 0)
      out.insert(n);
  }
  return out;
}

/// Every ckpt-*.json in `dir` names a tensors file with its recorded hash.
void expectAllCheckpointJsonsValid(const std::string &dir) {
  for (const std::string &n : listDir(dir)) {
    if (n.rfind("ckpt-", 0) != 0 || n.size() < 5 || n.substr(n.size() - 5) != ".json")
      continue;
    Expected<std::string> text = fs::readFile(dir + "/" + n);
    ASSERT_TRUE(text) << text.error();
    nlohmann::json j = nlohmann::json::parse(*text, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << n << " is not complete JSON";
    Expected<std::string> t = fs::readFile(dir + "/" + j["tensors"].get<std::string>());
    ASSERT_TRUE(t) << n << ": " << t.error();
    EXPECT_EQ(Sha256::hexHash(*t), j["tensors_sha256"].get<std::string>()) << n;
  }
}

} // namespace

TEST(TrainOptimizerCheckpoint, SurvivesKillDuringWrite) {
  fs::TempDir d = tempDir();
  const std::string dir = d.path();
  std::random_device rd;
  const unsigned seed = rd();
  std::mt19937 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));

  // How long one save takes here, to spread the kill times over it.
  auto t0 = std::chrono::steady_clock::now();
  {
    fs::TempDir probe = tempDir();
    ASSERT_TRUE(saveCheckpoint(probe.path(), bigCheckpoint(0), 2));
  }
  const double saveMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

  int64_t maxCompleted = -1; // the newest save a child reported complete
  int64_t lastLoaded = -1;
  int midWriteKills = 0;
  const int kIterations = 8;
  for (int it = 0; it < kIterations; ++it) {
    const int64_t first = int64_t(it) * 1000 + 1;
    std::set<std::string> stale = temporaries(dir, false);
    int fds[2];
    ASSERT_EQ(::pipe(fds), 0);
    std::fflush(nullptr);
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      ::close(fds[0]);
      saveLoop(dir, first, fds[1]);
    }
    ::close(fds[1]);

    if (it % 2 == 0) {
      // At a random moment within the first few saves.
      std::uniform_real_distribution<double> u(0.0, 4.0 * saveMs);
      std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(u(rng)));
    } else {
      // Just after the child has started writing a new temporary file (of
      // the tensors or a JSON), skipping 0-2 saves first.
      int skip = std::uniform_int_distribution<int>(0, 2)(rng);
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      std::set<std::string> seen = stale;
      while (std::chrono::steady_clock::now() < deadline) {
        std::set<std::string> now = temporaries(dir, true);
        bool fresh = false;
        for (const std::string &n : now)
          if (!seen.count(n)) {
            fresh = true;
            seen.insert(n);
          }
        if (fresh && skip-- <= 0)
          break;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    ::kill(pid, SIGKILL);
    int wstatus = 0;
    ASSERT_EQ(::waitpid(pid, &wstatus, 0), pid);
    ASSERT_TRUE(WIFSIGNALED(wstatus)) << "the child ended on its own, status " << wstatus;
    int64_t s = 0;
    while (::read(fds[0], &s, sizeof s) == sizeof s)
      maxCompleted = std::max(maxCompleted, s);
    ::close(fds[0]);
    std::set<std::string> left = temporaries(dir, false);
    for (const std::string &n : left)
      if (!stale.count(n)) {
        ++midWriteKills;
        break;
      }

    Expected<Checkpoint> l = loadLatestCheckpoint(dir, "spec-big");
    if (!l) {
      EXPECT_EQ(maxCompleted, -1) << "a completed checkpoint was lost: " << l.error();
      EXPECT_NE(l.error().find("nothing to resume"), std::string::npos) << l.error();
      EXPECT_EQ(lastLoaded, -1);
      continue;
    }
    EXPECT_GE(l->step, maxCompleted);
    EXPECT_GE(l->step, lastLoaded);
    EXPECT_LT(l->step, first + 500);
    lastLoaded = l->step;
    EXPECT_EQ(l->state["step"], l->step);
    const st::Tensor &big = l->tensors.tensors.at("big");
    std::vector<float> want = bigPattern(l->step);
    ASSERT_EQ(big.data.size(), want.size() * sizeof(float));
    EXPECT_EQ(0, std::memcmp(big.data.data(), want.data(), big.data.size()));
    expectAllCheckpointJsonsValid(dir);
  }
  std::printf("[ info ] one save %.0f ms; %d of %d kills left a temporary file; "
              "newest completed step %lld, loaded %lld\n",
              saveMs, midWriteKills, kIterations, (long long)maxCompleted, (long long)lastLoaded);
  EXPECT_GE(midWriteKills, 1); // the polling kills land inside a write

  // A clean save afterwards removes the killed writers' leftovers and prunes.
  ASSERT_TRUE(saveCheckpoint(dir, smallCheckpoint(100000, "spec-big"), 2));
  EXPECT_TRUE(temporaries(dir, false).empty());
  int jsons = 0;
  for (const std::string &n : listDir(dir))
    jsons += n.rfind("ckpt-", 0) == 0 && n.find(".json") != std::string::npos;
  EXPECT_LE(jsons, 2);
  EXPECT_EQ(loadLatestCheckpoint(dir, "spec-big")->step, 100000);
}
