//===- TuneSpaceTest.cpp - The tile search space of attnc tune ------------===//
#include "codegen/TuneSpace.h"

#include <gtest/gtest.h>

#include <algorithm>

using namespace attnc;

namespace {

bool contains(const std::vector<tile::TileConfig> &v, const tile::TileConfig &c) {
  return std::any_of(v.begin(), v.end(), [&](const tile::TileConfig &x) {
    return x.blockQ == c.blockQ && x.blockKv == c.blockKv && x.warps == c.warps &&
           x.stages == c.stages;
  });
}

} // namespace

// Every candidate fits by the compiler's own rule (attn-tile's), the default
// tile is among them, and every config is either a candidate or rejected.
TEST(TuneSpace, CandidatesAreWhatTheCompilerAccepts) {
  for (int sm : {75, 80, 90})
    for (int bytes : {2, 4})
      for (int d : {32, 64, 128, 256})
        for (bool bwd : {false, true}) {
          tune::TileSpace s = tune::cudaTileSpace(bytes, d, bwd, {sm});
          ASSERT_FALSE(s.candidates.empty()) << sm << " " << bytes << " " << d << " " << bwd;
          for (const tile::TileConfig &c : s.candidates)
            EXPECT_TRUE(tile::tileFits(c, bytes, d, sm, bwd)) << tune::configText(c);
          EXPECT_TRUE(contains(s.candidates, tile::defaultTile(bytes, d, sm, bwd)))
              << "sm" << sm << " d" << d << " bwd " << bwd;
          size_t all = 4 * 4 * 5 * (bwd ? 4 : 3);
          EXPECT_EQ(s.candidates.size() + s.rejected.size(), all);
          for (const tune::Rejection &r : s.rejected)
            EXPECT_FALSE(tile::tileFits(r.config, bytes, d, sm, bwd) && r.family != "threads")
                << tune::configText(r.config) << " rejected for " << r.reason;
        }
}

// A deliberately tiny limit leaves nothing to launch, and the summary says
// why each family went.
TEST(TuneSpace, TinyLimitRejectsEverythingWithReasons) {
  tune::CudaLimits lim;
  lim.sm = 80;
  lim.smemBytes = 1024;
  tune::TileSpace s = tune::cudaTileSpace(2, 64, false, lim);
  EXPECT_TRUE(s.candidates.empty());
  std::string why = tune::summarizeRejections(s);
  EXPECT_NE(why.find("shared memory: "), std::string::npos) << why;
  EXPECT_NE(why.find("bytes > 1024"), std::string::npos) << why;
  EXPECT_NE(why.find("shape: "), std::string::npos) << why;
  lim.smemBytes = 0;
  lim.maxThreads = 32;
  s = tune::cudaTileSpace(2, 64, false, lim);
  for (const tile::TileConfig &c : s.candidates)
    EXPECT_EQ(c.warps, 1);
  EXPECT_NE(tune::summarizeRejections(s).find("threads: "), std::string::npos);
}

// sm_75 has no cp.async: multi-stage pipelines are rejected as such.
TEST(TuneSpace, PipeliningNeedsAmpere) {
  tune::TileSpace s = tune::cudaTileSpace(2, 64, false, {75});
  for (const tile::TileConfig &c : s.candidates)
    EXPECT_LE(c.stages, 1);
  EXPECT_NE(tune::summarizeRejections(s).find("pipelining: "), std::string::npos);
}

TEST(TuneSpace, CpuSpaceAndConfigText) {
  EXPECT_EQ(tune::cpuTileSpace().candidates.size(), 16u);
  EXPECT_EQ(tune::configText({64, 32, 4, 2}), "bq=64,bkv=32,w=4,s=2");
}
