//===- TrainEvalTest.cpp - Evaluation and the parameter store -------------===//
//
// train::evaluate over a forward function (what a compiled inference
// function is to the trainer) against a double-precision reference written
// here, including the held-out text's last, short batch (padded to the
// forward's batch with rows that count nothing); and the parameter store:
// its order and sizes are parameterShapes', weights survive a save/load
// round trip, a wrong tensor is an error naming it, and the LSH rotations
// are its constants.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/Parameters.h"
#include "runtime/train/Trainer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

using namespace attnc;
using namespace attnc::train;

namespace {

/// A fake model: logit v of row r is a fixed function of the token and v.
float fakeLogit(int32_t token, int v) { return float(std::sin(0.37 * token + 0.11 * v) * 3.0); }

std::string writeCorpus() {
  char path[] = "/tmp/attnc-eval-XXXXXX";
  int fd = mkstemp(path);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream out(path);
  for (int i = 0; i < 4000; ++i)
    out << char('a' + (i * 7 + i / 13) % 26);
  return path;
}

TEST(TrainEvaluate, MatchesADoubleReferenceAndPadsTheLastBatch) {
  ModelConfig c;
  c.vocab = 256, c.seq = 16, c.objective = Objective::CausalLm;
  const std::string path = writeCorpus();
  Expected<DataSource> data = DataSource::open(path, c, 0.1);
  ASSERT_TRUE(data.ok()) << data.error();
  // 400 held-out bytes: 24 windows of 16, so batches of 5 end in one of 4.
  const int B = 5;
  const int64_t batches = data->evalBatchesAvailable(B);
  ASSERT_GT(batches, 1);
  int shortBatches = 0;
  double refLoss = 0;
  int64_t refCount = 0, refCorrect = 0;
  for (int64_t i = 0; i < batches; ++i) {
    Batch b = data->eval(i, B);
    shortBatches += b.B < B;
    for (int r = 0; r < b.B * b.S; ++r) {
      const int32_t t = b.targets[size_t(r)];
      if (t < 0)
        continue;
      double mx = -1e300, sum = 0;
      int arg = 0;
      for (int v = 0; v < c.vocab; ++v)
        if (fakeLogit(b.inputs[size_t(r)], v) > mx)
          mx = fakeLogit(b.inputs[size_t(r)], v), arg = v;
      for (int v = 0; v < c.vocab; ++v)
        sum += std::exp(double(fakeLogit(b.inputs[size_t(r)], v)) - mx);
      refLoss += mx + std::log(sum) - fakeLogit(b.inputs[size_t(r)], t);
      ++refCount;
      refCorrect += arg == t;
    }
  }
  ASSERT_EQ(shortBatches, 1) << "the corpus must end in a short batch for this test";
  std::vector<float> logits;
  int calls = 0;
  Forward f;
  f.batch = B;
  f.run = [&](const Batch &b) -> Expected<const float *> {
    ++calls;
    EXPECT_EQ(b.B, B); // always the compiled batch: short ones are padded
    EXPECT_EQ(b.inputs.size(), size_t(B) * size_t(c.seq));
    logits.assign(b.inputs.size() * size_t(c.vocab), 0.0f);
    for (size_t r = 0; r < b.inputs.size(); ++r)
      for (int v = 0; v < c.vocab; ++v)
        logits[r * size_t(c.vocab) + size_t(v)] = fakeLogit(b.inputs[r], v);
    return static_cast<const float *>(logits.data());
  };
  Expected<EvalResult> e = evaluate(f, c, *data, int(batches));
  ASSERT_TRUE(e.ok()) << e.error();
  EXPECT_EQ(calls, batches);
  EXPECT_EQ(e->positions, refCount);
  EXPECT_NEAR(e->loss, refLoss / double(refCount), 1e-6);
  EXPECT_NEAR(e->bitsPerByte, refLoss / double(refCount) / std::log(2.0), 1e-6);
  EXPECT_DOUBLE_EQ(e->accuracy, double(refCorrect) / double(refCount));
  std::remove(path.c_str());
}

TEST(TrainEvaluate, AForwardErrorIsReturnedAndNoForwardIsAnError) {
  ModelConfig c;
  c.seq = 16, c.objective = Objective::Duplicate;
  Expected<DataSource> data = DataSource::open("synthetic:duplicate", c, 0.05);
  ASSERT_TRUE(data.ok()) << data.error();
  Forward f;
  f.batch = 2;
  f.run = [](const Batch &) -> Expected<const float *> { return makeError("layer 0 broke"); };
  Expected<EvalResult> e = evaluate(f, c, *data, 2);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().find("layer 0 broke"), std::string::npos);
  Expected<EvalResult> none = evaluate(Forward{}, c, *data, 2);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().find("no forward function"), std::string::npos);
}

ModelConfig smallModel() {
  ModelConfig c;
  c.vocab = 32, c.seq = 8, c.dModel = 8, c.heads = 2, c.dff = 16, c.layers = 2;
  c.lowrank = true, c.share = "none", c.lowrankK = 4;
  c.headParams = {{"slope", true, 0, false}};
  return c;
}

TEST(ParameterStore, OrderAndSizesAreParameterShapes) {
  for (bool reversible : {false, true})
    for (Objective o : {Objective::CausalLm, Objective::Mlm}) {
      ModelConfig c = smallModel();
      c.reversible = reversible, c.objective = o;
      ParameterStore store(c, 1);
      std::vector<ParameterShape> shapes = parameterShapes(c);
      std::vector<ParamRef> refs = store.params();
      ASSERT_EQ(refs.size(), shapes.size());
      int64_t total = 0;
      for (size_t i = 0; i < refs.size(); ++i) {
        int64_t n = 1;
        for (int64_t d : shapes[i].shape)
          n *= d;
        EXPECT_EQ(refs[i].name, shapes[i].name);
        EXPECT_EQ(refs[i].size, n) << refs[i].name;
        EXPECT_EQ(refs[i].decay, shapes[i].decay) << refs[i].name;
        total += n;
      }
      EXPECT_EQ(store.numParams(), total);
      EXPECT_EQ(parameterCount(c), total);
      // MLM's mask token: one more embedding row.
      EXPECT_EQ(store.find("tok_emb")->shape[0], c.vocab + (o == Objective::Mlm ? 1 : 0));
      EXPECT_EQ(store.find("head.w")->shape[0], reversible ? 2 * c.dModel : c.dModel);
      EXPECT_EQ(store.find("layers.1.attn.E")->shape, (std::vector<int64_t>{2, 4, 8}));
      EXPECT_EQ(store.find("no.such"), nullptr);
    }
}

TEST(ParameterStore, InitialisationIsTheSeedsAndWeightsRoundTrip) {
  ModelConfig c = smallModel();
  ParameterStore a(c, 7), b(c, 7), other(c, 8);
  EXPECT_EQ(a.find("layers.0.attn.wq")->value, b.find("layers.0.attn.wq")->value);
  EXPECT_NE(a.find("layers.0.attn.wq")->value, other.find("layers.0.attn.wq")->value);
  // Gains 1, biases 0, ALiBi slopes 2^(-8(h+1)/H).
  for (float g : a.find("final_ln.gamma")->value)
    EXPECT_EQ(g, 1.0f);
  for (float v : a.find("head.b")->value)
    EXPECT_EQ(v, 0.0f);
  EXPECT_FLOAT_EQ(a.find("layers.0.attn.head_params")->value[0], float(std::exp2(-4.0)));
  st::File f;
  a.saveWeights(f);
  ASSERT_TRUE(other.loadWeights(f).ok());
  for (const ParamRef &p : other.params())
    EXPECT_EQ(std::vector<float>(p.value, p.value + p.size), a.find(p.name)->value) << p.name;
  st::File wrong = f;
  wrong.tensors["layers.1.ffn.w1"] = st::Tensor::f32({3, 3}, std::vector<float>(9, 0));
  Status s = other.loadWeights(wrong);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("'layers.1.ffn.w1'"), std::string::npos) << s.error();
  wrong = f;
  wrong.tensors.erase("pos_emb");
  s = other.loadWeights(wrong);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().find("missing tensor 'pos_emb'"), std::string::npos) << s.error();
}

TEST(ParameterStore, TheRecipesInitialisation) {
  // docs/training.md, "The recipe": each tensor starts as documented.
  ModelConfig c;
  c.vocab = 256, c.seq = 64, c.dModel = 128, c.heads = 4, c.dff = 512, c.layers = 2;
  c.objective = Objective::Mlm, c.lowrank = true, c.share = "headwise", c.lowrankK = 16;
  ParameterStore s(c, 3);
  auto rms = [](const std::vector<float> &v) {
    double sum = 0;
    for (float x : v)
      sum += double(x) * x;
    return std::sqrt(sum / double(v.size()));
  };
  // Linear maps N(0, 1/fan_in); output maps also / sqrt(2·layers).
  EXPECT_NEAR(rms(s.find("layers.0.attn.wq")->value), 1 / std::sqrt(128.0), 0.004);
  EXPECT_NEAR(rms(s.find("layers.1.ffn.w1")->value), 1 / std::sqrt(128.0), 0.004);
  EXPECT_NEAR(rms(s.find("layers.0.ffn.w2")->value), 1 / std::sqrt(512.0) / 2, 0.002);
  EXPECT_NEAR(rms(s.find("layers.0.attn.wo")->value), 1 / std::sqrt(128.0) / 2, 0.002);
  EXPECT_NEAR(rms(s.find("head.w")->value), 1 / std::sqrt(128.0), 0.004);
  EXPECT_NEAR(rms(s.find("tok_emb")->value), 0.02, 0.001);
  EXPECT_NEAR(rms(s.find("pos_emb")->value), 0.02, 0.001);
  // E, F: row r pools columns [4r, 4r + 4) (64 positions into 16 rows).
  for (const char *name : {"layers.0.attn.E", "layers.1.attn.F"}) {
    const std::vector<float> &e = s.find(name)->value;
    ASSERT_EQ(e.size(), 16u * 64u) << name;
    for (int r = 0; r < 16; ++r)
      for (int col = 0; col < 64; ++col)
        EXPECT_NEAR(e[r * 64 + col], col / 4 == r ? 0.25 : 0.0, 0.06)
            << name << " " << r << "," << col;
  }
}

TEST(ParameterStore, LshRotationsAreConstantsPerLayer) {
  ModelConfig c = smallModel();
  c.lowrank = false, c.sharedQk = true, c.lshRounds = 2, c.lshBuckets = 4, c.lshSeed = 3;
  ParameterStore store(c, 0);
  EXPECT_EQ(store.find("layers.0.attn.wk"), nullptr); // shared QK: no key projection
  const st::Tensor *r0 = store.constant("layers.0.attn.lsh_rotations");
  const st::Tensor *r1 = store.constant("layers.1.attn.lsh_rotations");
  ASSERT_NE(r0, nullptr);
  ASSERT_NE(r1, nullptr);
  EXPECT_EQ(r0->shape, (std::vector<int64_t>{2, 4, 2}));
  EXPECT_NE(r0->data, r1->data); // Philox stream per layer
  EXPECT_EQ(store.constant("layers.2.attn.lsh_rotations"), nullptr);
  EXPECT_EQ(store.constant("layers.0.attn.wq"), nullptr);
}

} // namespace
