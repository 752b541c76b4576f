//===- TuneMeasureTest.cpp - The tuner's measuring half (Measure.h) -------===//
//
// The final round's rule on scripted timings (the heuristic stays unless a
// finalist beats it beyond the spread and 2 %; a failed timing ends the
// round), medians, and the shapes and determinism of the random attention
// inputs the tuners time.
//
//===----------------------------------------------------------------------===//
#include "runtime/tune/Measure.h"

#include <gtest/gtest.h>

#include <map>
#include <vector>

using namespace attnc;
using namespace attnc::tune;

namespace {

/// Timings per candidate, one per round (three rounds).
std::function<double(size_t)> scripted(std::vector<std::vector<double>> ms) {
  auto calls = std::make_shared<std::map<size_t, size_t>>();
  return [ms, calls](size_t i) { return ms[i][(*calls)[i]++]; };
}

TEST(TuneMeasure, MedianIsTheUpperMiddle) {
  EXPECT_EQ(median({3, 1, 2}), 2);
  EXPECT_EQ(median({4, 1, 3, 2}), 3);
  EXPECT_EQ(median({7}), 7);
}

TEST(TuneMeasure, AFinalistMustBeatTheHeuristicBeyondTheSpread) {
  // 10 % faster with 1 % spreads: chosen.
  std::optional<Finalists> f =
      chooseAmongFinalists(2, scripted({{10.0, 10.05, 10.1}, {9.0, 9.05, 9.1}}));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->best, 1u);
  EXPECT_DOUBLE_EQ(f->med[0], 10.05);
  EXPECT_DOUBLE_EQ(f->med[1], 9.05);
  EXPECT_NEAR(f->spread[0], 0.1 / 10.05, 1e-12);
  // 1 % faster: inside the 2 % floor, the heuristic stays.
  f = chooseAmongFinalists(2, scripted({{10, 10, 10}, {9.9, 9.9, 9.9}}));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->best, 0u);
  // 10 % faster but the heuristic's timings spread 30 %: it stays.
  f = chooseAmongFinalists(2, scripted({{8, 10, 11}, {9, 9, 9}}));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->best, 0u);
  // Of two that beat it, the faster.
  f = chooseAmongFinalists(3, scripted({{10, 10, 10}, {8, 8, 8}, {7, 7, 7}}));
  ASSERT_TRUE(f);
  EXPECT_EQ(f->best, 2u);
}

TEST(TuneMeasure, AFailedTimingEndsTheRound) {
  EXPECT_FALSE(chooseAmongFinalists(2, scripted({{10, 10, 10}, {9, -1, 9}})));
}

TEST(TuneMeasure, RandomInputsHaveTheVariantsShapesAndRepeat) {
  AttentionExtras lowrank;
  lowrank.lowrankK = 4, lowrank.share = "none", lowrank.numParams = 2;
  RandomAttentionInputs a(2, 3, 8, 16, /*withDout=*/true, lowrank);
  ASSERT_NE(a.in.E, nullptr);
  ASSERT_NE(a.in.F, nullptr);
  ASSERT_NE(a.in.params, nullptr);
  ASSERT_NE(a.in.dout, nullptr);
  EXPECT_EQ(a.in.q->shape, (std::vector<int64_t>{2, 3, 8, 16}));
  EXPECT_EQ(a.in.E->shape, (std::vector<int64_t>{3, 4, 8}));
  EXPECT_EQ(a.in.params->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a.in.lengths->shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(reinterpret_cast<const int32_t *>(a.in.lengths->data.data())[1], 8);
  RandomAttentionInputs b(2, 3, 8, 16, /*withDout=*/true, lowrank);
  EXPECT_EQ(a.in.q->data, b.in.q->data); // fixed seed
  AttentionExtras kv;
  kv.lowrankK = 4, kv.share = "kv";
  RandomAttentionInputs c(1, 2, 8, 16, /*withDout=*/false, kv);
  EXPECT_EQ(c.in.E->shape, (std::vector<int64_t>{4, 8}));
  EXPECT_EQ(c.in.F, nullptr); // kv: E serves both
  EXPECT_EQ(c.in.dout, nullptr);
  RandomAttentionInputs dense(1, 2, 8, 16, false);
  EXPECT_EQ(dense.in.E, nullptr);
  EXPECT_EQ(dense.in.params, nullptr);
}

} // namespace
