//===- PerfModelTest.cpp - Occupancy and the throughput model -------------===//
//
// runtime/perf/PerfModel.h on counts written here, against cycles worked
// out by hand in each test's comments from the A100's rates.
//
//===----------------------------------------------------------------------===//
#include "runtime/perf/PerfModel.h"

#include <gtest/gtest.h>

using namespace attnc::perf;

TEST(PerfModel, KnowsTheArchsItHasRatesFor) {
  auto a100 = archRates("sm_80");
  ASSERT_TRUE(a100) << a100.error();
  EXPECT_EQ(a100->sms, 108);
  EXPECT_DOUBLE_EQ(a100->tensorFlopsClk, 2048);
  auto hopper = archRates("sm_90a"); // the arch-specific variant reads as sm_90
  ASSERT_TRUE(hopper) << hopper.error();
  EXPECT_EQ(hopper->sm, 90);
  auto none = archRates("sm_100");
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().find("sm_100"), std::string::npos);
  EXPECT_NE(none.error().find("sm_80"), std::string::npos); // lists what it knows
}

TEST(PerfModel, OccupancyNamesItsLimit) {
  ArchRates a100 = *archRates("sm_80");
  LaunchShape l;
  l.warpsPerBlock = 4;
  // 255 registers: 8160 per warp, allocated as 8192; a sub-partition's
  // 16384 hold 2 warps, the SM 8: two blocks of 4 warps.
  l.registers = 255, l.sharedBytes = 0;
  Occupancy o = occupancyOf(a100, l);
  EXPECT_EQ(o.blocks, 2);
  EXPECT_EQ(o.limit, "registers");
  // 100 KB (+1 KB reserved) of 164 KB: one block.
  l.registers = 64, l.sharedBytes = 100 * 1024;
  o = occupancyOf(a100, l);
  EXPECT_EQ(o.blocks, 1);
  EXPECT_EQ(o.limit, "shared memory");
  // 32 registers, no shared memory, 16 warps a block: 64 warps / 16.
  l.registers = 32, l.sharedBytes = 0, l.warpsPerBlock = 16;
  o = occupancyOf(a100, l);
  EXPECT_EQ(o.blocks, 4);
  EXPECT_EQ(o.limit, "warps");
  l.sharedBytes = 200 * 1024;
  EXPECT_EQ(occupancyOf(a100, l).blocks, 0);
}

TEST(PerfModel, TheBusiestUnitSetsThePace) {
  ArchRates a100 = *archRates("sm_80");
  PipeCounts c;
  c.instructions[int(Pipe::Tensor)] = 128;
  c.instructions[int(Pipe::Shared)] = 72;
  c.instructions[int(Pipe::Mufu)] = 34;
  c.instructions[int(Pipe::Fma)] = 300;
  c.instructions[int(Pipe::Alu)] = 200;
  c.total = 1000;
  c.tensorFlops = 128 * 4096.0;
  c.sharedBytes = 72 * 512.0;
  c.stallCycles = 2000;
  LaunchShape l;
  l.warpsPerBlock = 4, l.registers = 255, l.sharedBytes = 48 * 1024; // 2 blocks (registers)
  l.blocks = 432, l.loopTrips = 64;
  Prediction p = predict(a100, c, l);
  ASSERT_EQ(p.occupancy.blocks, 2);
  // 8 warps per round: tensor 8·128·4096/2048 = 2048 cycles; shared
  // 8·72·512/128 = 2304; mufu 8·32·34/16 = 544; fma 8·32·300/64 = 1200;
  // alu 8·32·200/64 = 800; issue 8·1000/4 = 2000; one warp's chain 2000.
  EXPECT_DOUBLE_EQ(p.tensor, 2048);
  EXPECT_DOUBLE_EQ(p.shared, 2304);
  EXPECT_DOUBLE_EQ(p.mufu, 544);
  EXPECT_DOUBLE_EQ(p.fma, 1200);
  EXPECT_DOUBLE_EQ(p.alu, 800);
  EXPECT_DOUBLE_EQ(p.issue, 2000);
  EXPECT_DOUBLE_EQ(p.latency, 2000);
  EXPECT_EQ(p.limiter, "shared");
  EXPECT_DOUBLE_EQ(p.roundCycles, 2304);
  // 432 blocks on 108 SMs x 2: 2 waves of 64 trips.
  EXPECT_DOUBLE_EQ(p.waves, 2);
  EXPECT_NEAR(p.seconds, 2 * 64 * 2304 / 1.41e9, 1e-12);
  EXPECT_NEAR(p.tensorUtilisation, 2048.0 / 2304, 1e-12);
}

TEST(PerfModel, DramIsAFloor) {
  ArchRates a100 = *archRates("sm_80");
  PipeCounts c;
  c.total = 10;
  c.instructions[int(Pipe::Alu)] = 10;
  LaunchShape l;
  l.warpsPerBlock = 4, l.registers = 32, l.blocks = 108, l.loopTrips = 1;
  l.dramBytes = 2039e9 * 1e-3; // a millisecond of the A100's bandwidth
  Prediction p = predict(a100, c, l);
  EXPECT_EQ(p.limiter, "dram");
  EXPECT_NEAR(p.seconds, 1e-3, 1e-12);
}

TEST(PerfModel, AKernelThatDoesNotFitHasNoTime) {
  ArchRates a100 = *archRates("sm_80");
  PipeCounts c;
  LaunchShape l;
  l.warpsPerBlock = 4, l.registers = 32, l.sharedBytes = 170 * 1024, l.blocks = 1;
  Prediction p = predict(a100, c, l);
  EXPECT_EQ(p.occupancy.blocks, 0);
  EXPECT_EQ(p.limiter, "does not fit");
  EXPECT_EQ(p.seconds, 0);
}
