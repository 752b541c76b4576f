//===- LossScalerTest.cpp - Dynamic loss scaling --------------------------===//
//
// The state machine of runtime/train/LossScaler.h (growth after N finite
// steps, back-off and skip on overflow, the floor and the cap, disabled
// scaling for fp32/bf16) and its checkpoint JSON (round trip, errors naming
// the field).
//
//===----------------------------------------------------------------------===//
#include "runtime/train/LossScaler.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace attnc;
using namespace attnc::train;
using nlohmann::json;

namespace {

bool contains(const std::string &haystack, const std::string &needle) {
  return haystack.find(needle) != std::string::npos;
}

LossScalerConfig fp16() { return LossScalerConfig::forPrecision(cuda::GemmPrecision::Fp16); }

TEST(LossScaler, DefaultsAreCommonPractice) {
  LossScaler s(fp16());
  EXPECT_TRUE(s.enabled());
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.invScale(), 1.0f / 65536.0f);
  EXPECT_EQ(s.config().growthInterval, 2000);
  EXPECT_EQ(s.config().growthFactor, 2.0f);
  EXPECT_EQ(s.config().backoffFactor, 0.5f);
  EXPECT_EQ(s.config().minScale, 1.0f);
  EXPECT_EQ(s.goodSteps(), 0);
  EXPECT_EQ(s.skippedSteps(), 0);
}

TEST(LossScaler, DisabledForF32Tf32Bf16) {
  for (cuda::GemmPrecision p :
       {cuda::GemmPrecision::F32, cuda::GemmPrecision::Tf32, cuda::GemmPrecision::Bf16}) {
    LossScaler s(LossScalerConfig::forPrecision(p));
    EXPECT_FALSE(s.enabled());
    EXPECT_EQ(s.scale(), 1.0f);
    for (int i = 0; i < 5000; ++i)
      EXPECT_TRUE(s.update(false));
    EXPECT_FALSE(s.update(true)); // reported skipped, scale untouched
    EXPECT_FALSE(s.update(true));
    EXPECT_EQ(s.scale(), 1.0f);
    EXPECT_EQ(s.invScale(), 1.0f);
    EXPECT_EQ(s.skippedSteps(), 2);
  }
}

TEST(LossScaler, GrowsAfterIntervalOfFiniteSteps) {
  LossScaler s(fp16());
  for (int i = 0; i < 1999; ++i)
    ASSERT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.goodSteps(), 1999);
  EXPECT_TRUE(s.update(false)); // the 2000th
  EXPECT_EQ(s.scale(), 131072.0f);
  EXPECT_EQ(s.goodSteps(), 0);
  for (int i = 0; i < 2000; ++i)
    s.update(false);
  EXPECT_EQ(s.scale(), 262144.0f);
}

TEST(LossScaler, OverflowHalvesSkipsAndRestartsTheCount) {
  LossScaler s(fp16());
  for (int i = 0; i < 1500; ++i)
    s.update(false);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.scale(), 32768.0f);
  EXPECT_EQ(s.goodSteps(), 0);
  EXPECT_EQ(s.skippedSteps(), 1);
  // The 1500 steps before the overflow no longer count.
  for (int i = 0; i < 1999; ++i)
    s.update(false);
  EXPECT_EQ(s.scale(), 32768.0f);
  s.update(false);
  EXPECT_EQ(s.scale(), 65536.0f);
}

TEST(LossScaler, FloorAndCap) {
  LossScalerConfig c = fp16();
  c.initScale = 4.0f;
  c.growthInterval = 3;
  c.maxScale = 16.0f;
  LossScaler s(c);
  const float expectDown[] = {2.0f, 1.0f, 1.0f, 1.0f};
  for (float e : expectDown) {
    EXPECT_FALSE(s.update(true));
    EXPECT_EQ(s.scale(), e);
  }
  EXPECT_EQ(s.skippedSteps(), 4);
  for (int i = 0; i < 30; ++i)
    s.update(false);
  EXPECT_EQ(s.scale(), 16.0f); // capped, never Inf
  // Always a power of two: unscaling is exact.
  EXPECT_EQ(s.invScale() * s.scale(), 1.0f);
  // The default cap is 2^24.
  LossScalerConfig d = fp16();
  d.growthInterval = 1;
  LossScaler t(d);
  for (int i = 0; i < 100; ++i)
    t.update(false);
  EXPECT_EQ(t.scale(), 16777216.0f);
}

TEST(LossScaler, ConfigCheckNamesTheField) {
  struct Case {
    void (*mutate)(LossScalerConfig &);
    const char *field;
  };
  const Case cases[] = {
      {[](LossScalerConfig &c) { c.growthFactor = 1.0f; }, "loss_scaler.growth_factor:"},
      {[](LossScalerConfig &c) { c.backoffFactor = 1.5f; }, "loss_scaler.backoff_factor:"},
      {[](LossScalerConfig &c) { c.backoffFactor = 0.0f; }, "loss_scaler.backoff_factor:"},
      {[](LossScalerConfig &c) { c.growthInterval = 0; }, "loss_scaler.growth_interval:"},
      {[](LossScalerConfig &c) { c.initScale = 1e30f; }, "loss_scaler.init_scale:"},
      {[](LossScalerConfig &c) { c.minScale = INFINITY; }, "loss_scaler.min_scale:"},
  };
  for (const Case &k : cases) {
    LossScalerConfig c = fp16();
    k.mutate(c);
    Status s = c.check();
    ASSERT_FALSE(s.ok()) << k.field;
    EXPECT_TRUE(contains(s.error(), k.field)) << s.error();
  }
  EXPECT_TRUE(fp16().check().ok());
}

TEST(LossScaler, JsonRoundTrip) {
  LossScalerConfig c = fp16();
  c.growthInterval = 7;
  LossScaler s(c);
  for (int i = 0; i < 12; ++i)
    s.update(false);
  s.update(true);
  s.update(false);
  s.update(false);
  const json j = s.toJson();
  // Through text, as in a checkpoint file.
  Expected<LossScaler> r = LossScaler::fromJson(json::parse(j.dump()));
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->scale(), s.scale());
  EXPECT_EQ(r->goodSteps(), 2);
  EXPECT_EQ(r->skippedSteps(), 1);
  EXPECT_EQ(r->config().growthInterval, 7);
  EXPECT_TRUE(r->enabled());
  EXPECT_EQ(r->toJson(), j);
  // The restored scaler continues exactly as the original.
  for (int i = 0; i < 20; ++i) {
    const bool overflow = i == 9;
    EXPECT_EQ(r->update(overflow), s.update(overflow));
    EXPECT_EQ(r->scale(), s.scale());
    EXPECT_EQ(r->goodSteps(), s.goodSteps());
  }
  // Disabled round trip.
  LossScaler off(LossScalerConfig::forPrecision(cuda::GemmPrecision::Bf16));
  Expected<LossScaler> o = LossScaler::fromJson(off.toJson());
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_FALSE(o->enabled());
  EXPECT_EQ(o->scale(), 1.0f);
}

TEST(LossScaler, JsonErrorsNameTheField) {
  const json good = LossScaler(fp16()).toJson();
  struct Case {
    const char *key;
    json value; // null: remove the key
    const char *expect;
  };
  const Case cases[] = {
      {"scale", json(), "ckpt.loss_scaler.scale: missing"},
      {"scale", "big", "ckpt.loss_scaler.scale: unexpected value \"big\""},
      {"scale", 0.5, "ckpt.loss_scaler.scale: 0.5 is outside [min_scale, max_scale]"},
      {"scale", 1e30, "ckpt.loss_scaler.scale:"},
      {"good_steps", 2.5, "ckpt.loss_scaler.good_steps: unexpected value 2.5"},
      {"good_steps", 2000, "ckpt.loss_scaler.good_steps: 2000 is outside [0, growth_interval)"},
      {"good_steps", -1, "ckpt.loss_scaler.good_steps:"},
      {"skipped_steps", -3, "ckpt.loss_scaler.skipped_steps: -3 is negative"},
      {"enabled", 1, "ckpt.loss_scaler.enabled: unexpected value 1"},
      {"growth_interval", 0, "ckpt.loss_scaler.growth_interval: must be at least 1"},
      {"backoff_factor", 2.0, "ckpt.loss_scaler.backoff_factor:"},
      {"max_scale", json(), "ckpt.loss_scaler.max_scale: missing"},
  };
  for (const Case &k : cases) {
    json j = good;
    if (k.value.is_null())
      j.erase(k.key);
    else
      j[k.key] = k.value;
    Expected<LossScaler> r = LossScaler::fromJson(j, "ckpt.loss_scaler");
    ASSERT_FALSE(r.ok()) << k.key << " = " << k.value.dump();
    EXPECT_TRUE(contains(r.error(), k.expect)) << r.error();
  }
  // A disabled scaler with a scale other than 1.
  json off = LossScaler().toJson();
  off["scale"] = 1024.0;
  Expected<LossScaler> r = LossScaler::fromJson(off);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error(), "loss_scaler.scale: 1024 but the scaler is disabled"))
      << r.error();
  EXPECT_FALSE(LossScaler::fromJson(json::array()).ok());
}

} // namespace
