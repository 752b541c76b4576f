//===- TuneSpaceTest.cpp - The tile search space of attnc tune ------------===//
#include "codegen/TuneSpace.h"
#include "attnc/flash_bwd.h"

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
  for (int sm : {70, 75, 80, 90})
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

// Volta: one stage, 96 KiB, and for fp16 only tiles whose warp GEMMs keep
// the tensor cores (n-tile pairs for m8n8k4); the default tiles are such.
// The rule itself against BwdTraits' formulas on two backward tiles.
TEST(TuneSpace, VoltaFp16KeepsTheTensorCores) {
  // 64x64, 8 warps: dK/dV split 2 -> 32/2/8 = 2 n-tiles; dQ the same.
  EXPECT_TRUE(tile::evenWarpTiles({64, 64, 8, 1}, 64, true));
  // 32x16, 2 warps: dK/dV (16 fixed keys, 2 warps across queries) 32/2/8 = 2,
  // D 64/2/8 = 4; dQ (32 fixed queries, 1 warp across keys) 16/1/8 = 2 ...
  EXPECT_TRUE(tile::evenWarpTiles({32, 16, 2, 1}, 64, true));
  // ... but 16 queries over 2 warps are one n-tile each: odd.
  EXPECT_FALSE(tile::evenWarpTiles({16, 16, 2, 1}, 64, true));
  EXPECT_FALSE(tile::evenWarpTiles({64, 32, 4, 1}, 48, true)); // D 48 / 2 / 8 = 3
  for (int d : {32, 64, 128, 256})
    for (bool bwd : {false, true}) {
      tune::CudaLimits lim;
      lim.sm = 70;
      lim.fp16 = true;
      tune::TileSpace s = tune::cudaTileSpace(2, d, bwd, lim);
      ASSERT_FALSE(s.candidates.empty()) << d << " " << bwd;
      for (const tile::TileConfig &c : s.candidates) {
        EXPECT_TRUE(tile::evenWarpTiles(c, d, bwd)) << tune::configText(c);
        EXPECT_LE(c.stages, 1) << tune::configText(c);
        EXPECT_LE(tile::smemBytes(c, d, 2, bwd), 96 * 1024) << tune::configText(c);
      }
      EXPECT_TRUE(tile::evenWarpTiles(tile::defaultTile(2, d, 70, bwd), d, bwd)) << d << bwd;
      lim.fp16 = false; // bf16 runs on SIMT there anyway: no such rule
      EXPECT_EQ(tune::summarizeRejections(tune::cudaTileSpace(2, d, bwd, lim)).find("tensor cores"),
                std::string::npos);
    }
  tune::CudaLimits lim;
  lim.sm = 70;
  lim.fp16 = true;
  EXPECT_NE(tune::summarizeRejections(tune::cudaTileSpace(2, 64, true, lim)).find("tensor cores: "),
            std::string::npos);
  lim.sm = 75; // Turing's m16n8k8 takes any n-tile count
  EXPECT_EQ(tune::summarizeRejections(tune::cudaTileSpace(2, 64, true, lim)).find("tensor cores"),
            std::string::npos);
}

TEST(TuneSpace, CpuSpaceAndConfigText) {
  EXPECT_EQ(tune::cpuTileSpace().candidates.size(), 16u);
  EXPECT_EQ(tune::configText({64, 32, 4, 2}), "bq=64,bkv=32,w=4,s=2");
}

// The tuner's CPU workspace formula is the kernels' own layout sizes.
template <int BQ, int BKV, int D> long long kernelWorkspaceBytes() {
  using namespace attnc::cpu::detail;
  return 4 * static_cast<long long>(
                 std::max({FwdLayout<BQ, BKV, D>::kTotal, DkDvLayout<BQ, BKV, D>::kTotal,
                           DqLayout<BQ, BKV, D>::kTotal}));
}

TEST(TuneSpace, CpuWorkspaceIsTheKernelsLayout) {
  EXPECT_EQ(tune::cpuWorkspaceBytes(16, 32, 64), (kernelWorkspaceBytes<16, 32, 64>()));
  EXPECT_EQ(tune::cpuWorkspaceBytes(64, 64, 64), (kernelWorkspaceBytes<64, 64, 64>()));
  EXPECT_EQ(tune::cpuWorkspaceBytes(128, 16, 80), (kernelWorkspaceBytes<128, 16, 80>()));
  EXPECT_EQ(tune::cpuWorkspaceBytes(16, 128, 256), (kernelWorkspaceBytes<16, 128, 256>()));
}

// A deliberately tiny workspace limit rejects every config, each with its
// size; a limit between two footprints splits the space at exactly that size.
TEST(TuneSpace, CpuWorkspaceLimit) {
  tune::TileSpace none = tune::cpuTileSpace(64, {1024});
  EXPECT_TRUE(none.candidates.empty());
  EXPECT_EQ(none.rejected.size(), 16u);
  EXPECT_NE(tune::summarizeRejections(none).find("workspace: 16 config(s)"), std::string::npos);
  const long long limit = tune::cpuWorkspaceBytes(64, 64, 64);
  tune::TileSpace some = tune::cpuTileSpace(64, {limit});
  EXPECT_TRUE(contains(some.candidates, {64, 64, 1, 1}));
  EXPECT_FALSE(contains(some.candidates, {128, 128, 1, 1}));
  for (const tile::TileConfig &c : some.candidates)
    EXPECT_LE(tune::cpuWorkspaceBytes(c.blockQ, c.blockKv, 64), limit);
  for (const tune::Rejection &r : some.rejected)
    EXPECT_GT(tune::cpuWorkspaceBytes(r.config.blockQ, r.config.blockKv, 64), limit);
}

// The cost model counts padded work and per-tile overhead: tiny tiles pay
// overhead, tiles larger than a short sequence pay padding, causal halves
// the work, and the order it gives is by cost.
TEST(TuneSpace, CpuCostModel) {
  using tune::cpuTileCost;
  EXPECT_GT(cpuTileCost({16, 16, 1, 1}, 1024, 64, false),
            cpuTileCost({64, 64, 1, 1}, 1024, 64, false));
  EXPECT_GT(cpuTileCost({128, 128, 1, 1}, 40, 64, false),
            cpuTileCost({32, 32, 1, 1}, 40, 64, false));
  const double full = cpuTileCost({64, 64, 1, 1}, 4096, 64, false);
  const double half = cpuTileCost({64, 64, 1, 1}, 4096, 64, true);
  EXPECT_NEAR(half / full, 0.5, 0.02);
  tune::TileSpace s = tune::cpuTileSpace(64);
  tune::orderByCpuCost(s, 512, 64, true);
  for (size_t i = 1; i < s.candidates.size(); ++i)
    EXPECT_LE(cpuTileCost(s.candidates[i - 1], 512, 64, true),
              cpuTileCost(s.candidates[i], 512, 64, true));
}
