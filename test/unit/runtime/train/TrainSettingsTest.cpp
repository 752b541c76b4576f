//===- TrainSettingsTest.cpp - Flags, the spec's train block, defaults ----===//
//
// Each setting comes from the flag, else the spec, else attnc's default;
// the manifest's JSON copy reads back exactly and is checked against the
// same table the compiler checks (runtime/train/TrainSettingTable.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/train/TrainSettings.h"

#include <gtest/gtest.h>

using namespace attnc::train;

TEST(TrainSettings, FlagsOverrideTheSpecWhichOverridesTheDefaults) {
  TrainSettings flags, spec;
  flags.steps = 500;
  spec.lr = 2e-3, spec.steps = 300, spec.warmup = 30;
  const TrainSettings s = flags.orElse(spec).orElse(defaultTrainSettings());
  EXPECT_EQ(*s.steps, 500);                         // the flag
  EXPECT_EQ(*s.lr, 2e-3);                           // the spec
  EXPECT_EQ(*s.warmup, 30);                         // the spec
  EXPECT_EQ(*s.clip, *defaultTrainSettings().clip); // neither says: the default
  EXPECT_EQ(*s.batch, *defaultTrainSettings().batch);
  // orElse fills only what is missing; the sources stay as they were.
  EXPECT_FALSE(flags.lr.has_value());
  EXPECT_TRUE(TrainSettings().empty());
  EXPECT_FALSE(spec.empty());
  // Every setting resolves to a value.
  for (const TrainSettings &t : {s, TrainSettings().orElse(defaultTrainSettings())})
    EXPECT_TRUE(t.lr && t.weightDecay && t.clip && t.warmup && t.batch && t.steps && t.evalEvery);
}

TEST(TrainSettings, TheLogSaysWhereEachSettingCameFrom) {
  TrainSettings flags, spec;
  flags.steps = 500;
  spec.lr = 0.002, spec.steps = 300;
  const std::string line = describeTrainSettings(flags, spec);
  EXPECT_NE(line.find("lr 0.002 (spec)"), std::string::npos) << line;
  EXPECT_NE(line.find("steps 500 (flag)"), std::string::npos) << line;
  EXPECT_NE(line.find("clip 1 (default)"), std::string::npos) << line;
  // An artifact planned for another batch than the spec's: the plan wins.
  spec.batch = 8;
  EXPECT_NE(describeTrainSettings(flags, spec, 2).find("batch 2 (plan)"), std::string::npos);
  EXPECT_NE(describeTrainSettings(flags, spec, 8).find("batch 8 (spec)"), std::string::npos);
  flags.batch = 2;
  EXPECT_NE(describeTrainSettings(flags, spec, 2).find("batch 2 (flag)"), std::string::npos);
}

TEST(TrainSettings, JsonRoundTripsAndIsChecked) {
  TrainSettings s;
  s.lr = 2e-3, s.warmup = 30, s.batch = 8, s.steps = 300, s.clip = 0.5, s.weightDecay = 0;
  s.evalEvery = 100;
  const std::string text = trainSettingsToJson(s);
  attnc::Expected<TrainSettings> back = trainSettingsFromJson(text, "m.train");
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(back->lr, s.lr);
  EXPECT_EQ(back->warmup, s.warmup);
  EXPECT_EQ(back->batch, s.batch);
  EXPECT_EQ(back->steps, s.steps);
  EXPECT_EQ(back->clip, s.clip);
  EXPECT_EQ(back->weightDecay, s.weightDecay);
  EXPECT_EQ(back->evalEvery, s.evalEvery);
  EXPECT_EQ(trainSettingsToJson(TrainSettings()), "{}");
  ASSERT_TRUE(trainSettingsFromJson("{}", "m.train").ok());
  EXPECT_TRUE(trainSettingsFromJson("{}", "m.train")->empty());
  // What the compiler would refuse, the runtime refuses too, naming the field.
  struct Bad {
    const char *json, *message;
  } bad[] = {
      {R"({"lr": 0})", "m.train.lr: 0 is out of range"},
      {R"({"lr": "fast"})", "m.train.lr: expected a number"},
      {R"({"warmup": 2.5})", "m.train.warmup: expected an integer"},
      {R"({"batch": 0})", "m.train.batch: 0 is out of range"},
      {R"({"momentum": 0.9})", "m.train.momentum: not a training setting"},
      {R"([1, 2])", "m.train: expected an object"},
      {R"({"steps": )", "m.train: expected an object"},
  };
  for (const Bad &b : bad) {
    attnc::Expected<TrainSettings> r = trainSettingsFromJson(b.json, "m.train");
    ASSERT_FALSE(r.ok()) << b.json;
    EXPECT_NE(r.error().find(b.message), std::string::npos) << r.error();
  }
}
