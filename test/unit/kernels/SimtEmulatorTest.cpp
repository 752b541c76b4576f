//===- SimtEmulatorTest.cpp - The host CUDA emulator's own checks ---------===//
//
// The emulator (kernels/emulator/attnc/simt_emulator.h and
// tensor_core_emulator.h) must catch what a GPU would. Each check has a
// tiny kernel here that breaks it and must fail, next to the correct
// kernel that must pass:
//
//   - schedules: a missing __syncthreads whose reader has a higher thread
//     index than the writer (the old emulator's blind spot) is caught under
//     the reverse or a random schedule; one whose reader runs several warp
//     collectives after the writer, under index; blocks run in the
//     schedule's order;
//   - warp collectives: a mask that names an exited or a divergent lane, a
//     lane outside its own mask, a shuffle reading outside its mask,
//     different collectives at once, __syncthreads at different call
//     sites, deadlocks; disjoint masks in divergent branches are fine;
//   - ldmatrix: misaligned row addresses, rows outside shared memory;
//     mma and ldmatrix compute the PTX fragments' product;
//   - cp.async: destination not shared or misaligned, source misaligned,
//     shared or outside the device buffers, copies in flight at exit, when
//     copies land; writes past the launch's dynamic shared memory.
//
// Vector loads and stores the kernels make directly (Elem<T>::load4,
// storeTile) are checked by UBSan's alignment check, which this test is
// compiled with (test/unit/kernels/CMakeLists.txt): a misaligned float4 load
// must abort.
//
//===----------------------------------------------------------------------===//
#include "attnc/simt_emulator.h"

#include "attnc/tensor_core_emulator.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace {

using emu::Schedule;

bool isNaN(float x) { return std::isnan(x); }

/// Runs `body` under `s`; the launch's result.
bool launchUnder(const Schedule &s, long long gx, int threads, const std::function<void()> &body) {
  emu::ScheduleScope scope(s);
  return emu::launch(gx, 1, threads, body);
}

/// EXPECT that the last launch failed with a message containing every part.
void expectError(std::initializer_list<const char *> parts) {
  for (const char *p : parts)
    EXPECT_NE(emu::lastError.find(p), std::string::npos)
        << "\"" << p << "\" missing from: " << emu::lastError;
}

const Schedule kIndex = emu::indexSchedule(), kReverse = emu::reverseSchedule();

//===-- Schedules ---------------------------------------------------------===//

TEST(SimtEmulatorSchedule, Parses) {
  Schedule s;
  ASSERT_TRUE(emu::parseSchedule("index", s));
  EXPECT_EQ(s.kind, Schedule::Index);
  ASSERT_TRUE(emu::parseSchedule("reverse", s));
  EXPECT_EQ(s.kind, Schedule::Reverse);
  ASSERT_TRUE(emu::parseSchedule("random:42", s));
  EXPECT_EQ(s.kind, Schedule::Random);
  EXPECT_EQ(s.seed, 42u);
  EXPECT_EQ(s.name(), "random:42");
  ASSERT_TRUE(emu::parseSchedule("random", s));
  EXPECT_EQ(s.seed, 1u);
  for (const char *bad : {"", "rand", "random:", "random:x", "Index", "reverse "})
    EXPECT_FALSE(emu::parseSchedule(bad, s)) << bad;
}

TEST(SimtEmulatorSchedule, FromEnvironment) {
  ASSERT_EQ(setenv("ATTNC_EMU_SCHEDULE", "random:9", 1), 0);
  EXPECT_EQ(emu::scheduleFromEnv().name(), "random:9");
  ASSERT_EQ(setenv("ATTNC_EMU_SCHEDULE", "reverse", 1), 0);
  EXPECT_EQ(emu::scheduleFromEnv().name(), "reverse");
  ASSERT_EQ(unsetenv("ATTNC_EMU_SCHEDULE"), 0);
  EXPECT_EQ(emu::scheduleFromEnv().name(), "index");
  ASSERT_EQ(setenv("ATTNC_EMU_SCHEDULE", "backwards", 1), 0);
  EXPECT_DEATH(emu::scheduleFromEnv(), "ATTNC_EMU_SCHEDULE=backwards");
  ASSERT_EQ(unsetenv("ATTNC_EMU_SCHEDULE"), 0);
}

/// Thread `writer` stores 1 in shared memory, thread `reader` loads it,
/// with or without a barrier between; returns what the reader saw under
/// `s` (NaN: the 0xff-filled shared memory, not written yet).
float readAfterWrite(const Schedule &s, int threads, int writer, int reader, bool barrier) {
  float seen = 0.f;
  EXPECT_TRUE(launchUnder(s, 1, threads, [&] {
    float &x = emu::shared<float>();
    if (int(threadIdx.x) == writer)
      x = 1.f;
    if (barrier)
      __syncthreads();
    if (int(threadIdx.x) == reader)
      seen = x;
  }));
  return seen;
}

// The old emulator ran every thread to the barrier in index order, so only
// readers below the writer saw the race. Reverse catches the others.
TEST(SimtEmulatorSchedule, MissingBarrierReaderAboveWriter) {
  for (int reader : {5, 63, 127}) { // same warp, next warp, last warp
    SCOPED_TRACE("reader " + std::to_string(reader));
    EXPECT_EQ(readAfterWrite(kIndex, 128, 0, reader, false), 1.f); // hidden
    EXPECT_TRUE(isNaN(readAfterWrite(kReverse, 128, 0, reader, false)));
    for (const Schedule &s : {kIndex, kReverse, emu::randomSchedule(3)})
      EXPECT_EQ(readAfterWrite(s, 128, 0, reader, true), 1.f) << s.name();
  }
  // Below the writer: index catches it.
  EXPECT_TRUE(isNaN(readAfterWrite(kIndex, 128, 100, 3, false)));
  EXPECT_EQ(readAfterWrite(kIndex, 128, 100, 3, true), 1.f);
}

// Random schedules catch both directions, some seed soon enough.
TEST(SimtEmulatorSchedule, RandomCatchesBothDirections) {
  for (auto [writer, reader] : {std::pair{0, 70}, std::pair{70, 0}, std::pair{3, 9}}) {
    int caught = 0;
    for (std::uint64_t seed = 1; seed <= 16; ++seed)
      caught += isNaN(readAfterWrite(emu::randomSchedule(seed), 96, writer, reader, false));
    EXPECT_GT(caught, 0) << writer << " -> " << reader;
    EXPECT_LT(caught, 16) << writer << " -> " << reader; // the order is random
  }
  // The same seed gives the same schedule.
  for (std::uint64_t seed : {5u, 6u})
    EXPECT_EQ(isNaN(readAfterWrite(emu::randomSchedule(seed), 96, 0, 70, false)),
              isNaN(readAfterWrite(emu::randomSchedule(seed), 96, 0, 70, false)));
}

// Warps interleave at collectives: under index warp 0 runs alone from one
// barrier to the next, so a write warp 1 makes before its first shuffle is
// not seen by warp 0 three shuffles later (run in lockstep, it would be).
TEST(SimtEmulatorSchedule, WarpsRunAheadAcrossCollectives) {
  for (bool barrier : {false, true}) {
    for (const Schedule &s : {kIndex, kReverse}) {
      float seen = 0.f;
      ASSERT_TRUE(launchUnder(s, 1, 64, [&] {
        float &x = emu::shared<float>();
        const int t = int(threadIdx.x);
        float v = float(t);
        if (t == 63) // warp 1, before its shuffles
          x = 1.f;
        if (barrier)
          __syncthreads();
        for (int i = 0; i < 3; ++i)
          v += __shfl_xor_sync(0xffffffffu, v, 1);
        if (t == 0) // warp 0, after its shuffles
          seen = x + 0.f * v;
      }));
      if (barrier || s.kind == Schedule::Reverse)
        EXPECT_EQ(seen, 1.f) << s.name();
      else
        EXPECT_TRUE(isNaN(seen)) << s.name() << ": warp 0 did not run ahead";
    }
  }
}

// Blocks run in index order, in reverse, or in a seeded permutation.
TEST(SimtEmulatorSchedule, BlockOrder) {
  auto order = [](const Schedule &s) {
    std::vector<int> seen;
    EXPECT_TRUE(launchUnder(s, 16, 32, [&] {
      if (threadIdx.x == 0)
        seen.push_back(int(blockIdx.x));
    }));
    return seen;
  };
  std::vector<int> ascending(16);
  for (int i = 0; i < 16; ++i)
    ascending[size_t(i)] = i;
  EXPECT_EQ(order(kIndex), ascending);
  EXPECT_EQ(order(kReverse), std::vector<int>(ascending.rbegin(), ascending.rend()));
  const std::vector<int> r7 = order(emu::randomSchedule(7));
  EXPECT_EQ(r7, order(emu::randomSchedule(7)));
  EXPECT_NE(r7, ascending);
  EXPECT_NE(r7, order(emu::randomSchedule(8)));
  EXPECT_EQ(std::set<int>(r7.begin(), r7.end()).size(), 16u);
  // A block reading what another block of the same launch writes: caught
  // by one order or the other.
  auto crossBlock = [](const Schedule &s) {
    std::vector<float> g(2, std::nanf(""));
    float seen = 0.f;
    EXPECT_TRUE(launchUnder(s, 2, 32, [&] {
      if (threadIdx.x == 0 && blockIdx.x == 0)
        g[0] = 1.f;
      if (threadIdx.x == 0 && blockIdx.x == 1)
        seen = g[0];
    }));
    return seen;
  };
  EXPECT_EQ(crossBlock(kIndex), 1.f);
  EXPECT_TRUE(isNaN(crossBlock(kReverse)));
}

// Lanes of a warp run in the schedule's order between collectives: a
// missing __syncwarp shows up one way or the other.
TEST(SimtEmulatorSchedule, LanesBetweenCollectives) {
  auto run = [](const Schedule &s, bool sync) {
    std::vector<float> out(32);
    EXPECT_TRUE(launchUnder(s, 1, 32, [&] {
      float *x = &emu::shared<float[32]>()[0];
      const int l = int(threadIdx.x);
      x[l] = float(l);
      if (sync)
        __syncwarp();
      out[size_t(l)] = x[(l + 1) % 32];
    }));
    int nans = 0;
    for (float v : out)
      nans += isNaN(v);
    return nans;
  };
  EXPECT_EQ(run(kIndex, false), 31); // lanes 0-30 read before lane l+1 wrote
  EXPECT_EQ(run(kReverse, false), 1);
  for (const Schedule &s : {kIndex, kReverse, emu::randomSchedule(2)})
    EXPECT_EQ(run(s, true), 0) << s.name();
}

//===-- Warp collectives --------------------------------------------------===//

// A full-warp sum, then the block's; the reference for what must work.
TEST(SimtEmulatorCollectives, ShufflesBallotMatch) {
  for (const Schedule &s : {kIndex, kReverse, emu::randomSchedule(11)}) {
    std::vector<float> sums(2);
    std::vector<unsigned> ballots(64), matches(64);
    std::vector<int> ups(64), downs(64);
    ASSERT_TRUE(launchUnder(s, 1, 64, [&] {
      const int t = int(threadIdx.x), l = t % 32;
      float v = float(t + 1);
      for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
      sums[size_t(t / 32)] = __shfl_sync(0xffffffffu, v, 7);
      ballots[size_t(t)] = __ballot_sync(0xffffffffu, l % 3 == 0);
      matches[size_t(t)] = __match_any_sync(0xffffffffu, l / 8);
      ups[size_t(t)] = __shfl_up_sync(0xffffffffu, l, 2);
      downs[size_t(t)] = __shfl_down_sync(0xffffffffu, l, 4, 8);
    })) << s.name();
    EXPECT_EQ(sums[0], 32.f * 33.f / 2.f);
    EXPECT_EQ(sums[1], 32.f * 32.f + 32.f * 33.f / 2.f);
    for (int t = 0; t < 64; ++t) {
      const int l = t % 32;
      EXPECT_EQ(ballots[size_t(t)], 0x49249249u);
      EXPECT_EQ(matches[size_t(t)], 0xffu << (l / 8 * 8));
      EXPECT_EQ(ups[size_t(t)], l >= 2 ? l - 2 : l);
      EXPECT_EQ(downs[size_t(t)], l % 8 + 4 < 8 ? l + 4 : l);
    }
  }
}

// Independent thread scheduling: divergent branches may each run a
// collective over their own lanes.
TEST(SimtEmulatorCollectives, DisjointMasksInDivergentBranches) {
  for (const Schedule &s : {kIndex, kReverse, emu::randomSchedule(4)}) {
    std::vector<int> got(32);
    ASSERT_TRUE(launchUnder(s, 1, 32,
                            [&] {
                              const int l = int(threadIdx.x);
                              if (l < 16) {
                                got[size_t(l)] = __shfl_sync(0x0000ffffu, l * 10, 15 - l);
                              } else {
                                __syncwarp(0xffff0000u);
                                got[size_t(l)] = int(__ballot_sync(0xffff0000u, l % 2) >> 16);
                              }
                            }))
        << s.name() << ": " << emu::lastError;
    for (int l = 0; l < 16; ++l)
      EXPECT_EQ(got[size_t(l)], (15 - l) * 10);
    for (int l = 16; l < 32; ++l)
      EXPECT_EQ(got[size_t(l)], 0xaaaa);
  }
}

// Half the warp shuffles with the full mask, the other half goes on to
// the barrier: on a GPU, undefined (the shuffle waits for lanes that never
// come). Under every schedule the launch fails naming the culprit.
TEST(SimtEmulatorCollectives, DivergentShuffleFails) {
  for (const Schedule &s : {kIndex, kReverse, emu::randomSchedule(5)}) {
    EXPECT_FALSE(launchUnder(s, 1, 64, [] {
      float v = 1.f;
      if (threadIdx.x % 32 < 16)
        v = __shfl_sync(0xffffffffu, v, 0);
      __syncthreads();
    })) << s.name();
    expectError({"__shfl_sync", "0xffffffff", "lane 16", "__syncthreads"});
  }
}

// A mask that names a lane which has returned.
TEST(SimtEmulatorCollectives, MaskNamingExitedLaneFails) {
  for (const Schedule &s : {kIndex, kReverse}) {
    EXPECT_FALSE(launchUnder(s, 1, 32, [] {
      if (threadIdx.x == 31)
        return;
      (void)__ballot_sync(0xffffffffu, 1);
    })) << s.name();
    expectError({"__ballot_sync", "lane 31", "exited"});
  }
  // A partial warp: lanes past the block's threads are no lanes to wait for.
  EXPECT_FALSE(launchUnder(kIndex, 1, 48, [] { (void)__shfl_xor_sync(0xffffffffu, 1, 1); }));
  expectError({"__shfl_xor_sync", "lane 16", "not a thread of the block"});
  EXPECT_TRUE(launchUnder(kIndex, 1, 48, [] {
    (void)__shfl_xor_sync(threadIdx.x < 32 ? 0xffffffffu : 0x0000ffffu, 1, 1);
  })) << emu::lastError;
}

TEST(SimtEmulatorCollectives, CallerOutsideItsMaskFails) {
  EXPECT_FALSE(launchUnder(kIndex, 1, 32, [] { (void)__shfl_sync(0x0000000fu, 1, 0); }));
  expectError({"block (0, 0, 0) warp 0 lane 4", "__shfl_sync", "0x0000000f",
               "does not name the calling lane"});
  EXPECT_FALSE(launchUnder(kIndex, 1, 32, [] { __syncwarp(threadIdx.x == 7 ? 1u : ~0u); }));
  expectError({"lane 7", "__syncwarp", "does not name the calling lane"});
}

TEST(SimtEmulatorCollectives, ShuffleReadingOutsideItsMaskFails) {
  EXPECT_FALSE(launchUnder(kIndex, 1, 32, [] {
    if (threadIdx.x < 16)
      (void)__shfl_sync(0x0000ffffu, 1, 20);
  }));
  expectError({"__shfl_sync", "reads lane 20", "not in its mask 0x0000ffff"});
}

// Lanes at different collectives with the same mask do not sync together
// (PTX: same instruction form and mask).
TEST(SimtEmulatorCollectives, DifferentCollectivesFail) {
  EXPECT_FALSE(launchUnder(kIndex, 1, 32, [] {
    if (threadIdx.x < 16)
      (void)__shfl_xor_sync(0xffffffffu, 1, 1);
    else
      (void)__shfl_down_sync(0xffffffffu, 1, 1);
  }));
  expectError({"__shfl_xor_sync", "lane 16 waits at __shfl_down_sync"});
  EXPECT_FALSE(launchUnder(kIndex, 1, 32, [] {
    if (threadIdx.x == 3)
      (void)__match_any_sync(0xffffffffu, 1);
    else
      __syncwarp();
  }));
  expectError({"cannot complete", "__match_any_sync", "__syncwarp"});
  // __syncwarp(mask) where lanes 8-31 name lanes 0-7, which sync among
  // themselves: lanes 8-31 would wait forever.
  for (const Schedule &s : {kIndex, kReverse}) {
    EXPECT_FALSE(launchUnder(s, 1, 32, [] { __syncwarp(threadIdx.x < 8 ? 0xffu : ~0u); }));
    expectError({"__syncwarp with mask 0xffffffff", "cannot complete: lane 0 waits at __syncwarp "
                                                    "with mask 0x000000ff"});
  }
}

TEST(SimtEmulatorCollectives, SyncthreadsAtDifferentSitesFails) {
  // Outside the EXPECT macro: within a macro's arguments every line is
  // the macro's.
  auto twoSites = [] {
    if (threadIdx.x < 64)
      __syncthreads();
    else
      __syncthreads();
  };
  EXPECT_FALSE(launchUnder(kIndex, 1, 128, twoSites));
  expectError({"different __syncthreads",
               "threads 0-63 at SimtEmulatorTest.cpp:", "threads 64-127 at SimtEmulatorTest.cpp:"});
  // Threads that return early are not waited for.
  EXPECT_TRUE(launchUnder(kReverse, 1, 128, [] {
    if (threadIdx.x >= 64)
      return;
    __syncthreads();
  }));
}

// A barrier some threads never reach; the launch after a failed one runs
// normally (its threads' stacks were abandoned mid-body).
TEST(SimtEmulatorCollectives, DeadlockThenNormalLaunch) {
  emu::ScheduleScope scope(kIndex);
  EXPECT_FALSE(emu::launch(1, 1, 64, [] {
    if (threadIdx.x == 0)
      __syncthreads();
    else if (threadIdx.x < 32)
      __syncwarp();
    else
      __syncthreads();
  }));
  expectError({"warp 0 lane 1", "__syncwarp", "lane 0 waits at __syncthreads"});
  std::vector<float> out(2);
  auto blockSum = [&] {
    float *partial = &emu::shared<float[4]>()[0];
    const int t = int(threadIdx.x);
    float v = float(t + 1);
    for (int o = 16; o > 0; o >>= 1)
      v += __shfl_xor_sync(0xffffffffu, v, o);
    if (t % 32 == 0)
      partial[t / 32] = v;
    __syncthreads();
    if (t == 0)
      out[blockIdx.x] = partial[0] + partial[1] + partial[2] + partial[3];
  };
  ASSERT_TRUE(emu::launch(2, 1, 128, blockSum)) << emu::lastError;
  EXPECT_EQ(emu::lastError, "");
  EXPECT_EQ(out[0], 128.f * 129.f / 2.f);
  EXPECT_EQ(out[1], 128.f * 129.f / 2.f);
}

//===-- ldmatrix and mma --------------------------------------------------===//

/// Shared memory with 16-byte padded rows, as the kernels lay it out.
struct Tiles {
  __half a[16][24];
  __half b[16][24]; ///< B^T: row n holds column n of B (k-contiguous)
};

// A (16 x 16) * B (16 x 8) through ldmatrix.x4 / .x2 and mma, as
// WarpMma::gemmSS does it, against a plain product.
TEST(SimtEmulatorTensorCores, LdmatrixAndMmaProduct) {
  float a[16][16], b[16][8];
  for (int i = 0; i < 16; ++i)
    for (int k = 0; k < 16; ++k)
      a[i][k] = float((i * 7 + k * 3) % 11 - 5) / 4.f; // exact in fp16
  for (int k = 0; k < 16; ++k)
    for (int n = 0; n < 8; ++n)
      b[k][n] = float((k * 5 + n) % 7 - 3) / 2.f;
  for (const Schedule &s : {kIndex, kReverse, emu::randomSchedule(8)}) {
    float c[16][8] = {};
    ASSERT_TRUE(launchUnder(s, 1, 32, [&] {
      Tiles &sm = emu::shared<Tiles>();
      const int l = int(threadIdx.x), g = l / 4, t = l % 4;
      for (int k = 0; k < 16; ++k) {
        sm.a[l % 16][k] = __float2half_rn(a[l % 16][k]);
        if (l < 8)
          sm.b[l][k] = __float2half_rn(b[k][l]);
      }
      __syncwarp();
      unsigned af[4], bf[2];
      attnc::ldsmX4(af, &sm.a[l % 16][(l / 16) * 8]);
      attnc::ldsmX2(bf, &sm.b[l % 8][((l / 8) % 2) * 8]);
      float acc[4] = {};
      attnc::mma16816<__half>(acc, af, bf[0], bf[1]);
      for (int j = 0; j < 4; ++j)
        c[g + 8 * (j / 2)][2 * t + j % 2] = acc[j];
    })) << emu::lastError;
    for (int i = 0; i < 16; ++i)
      for (int n = 0; n < 8; ++n) {
        float want = 0.f;
        for (int k = 0; k < 16; ++k)
          want += a[i][k] * b[k][n];
        EXPECT_EQ(c[i][n], want) << i << ", " << n;
      }
  }
}

// Volta's mma.m8n8k4 (four 8 x 8 x 4 products a warp): each lane's
// fragments filled as the PTX ISA's tables give them (section 9.7.14.5.1),
// every computation with its own A, B and C, against plain products.
TEST(SimtEmulatorTensorCores, VoltaMma884FourProducts) {
  float a[4][8][4], b[4][4][8], c0[4][8][8];
  for (int q = 0; q < 4; ++q) {
    for (int i = 0; i < 8; ++i)
      for (int k = 0; k < 4; ++k)
        a[q][i][k] = float((i * 7 + k * 3 + q * 5) % 11 - 5) / 4.f; // exact in fp16
    for (int k = 0; k < 4; ++k)
      for (int n = 0; n < 8; ++n)
        b[q][k][n] = float((k * 5 + n + q) % 7 - 3) / 2.f;
    for (int i = 0; i < 8; ++i)
      for (int n = 0; n < 8; ++n)
        c0[q][i][n] = float(i - n + q) / 8.f;
  }
  auto pack = [](float lo, float hi) {
    return unsigned(attnc::bitCast<unsigned short>(__float2half_rn(lo))) |
           unsigned(attnc::bitCast<unsigned short>(__float2half_rn(hi))) << 16;
  };
  for (const Schedule &s : {kIndex, kReverse, emu::randomSchedule(4)}) {
    float d[4][8][8] = {};
    ASSERT_TRUE(launchUnder(s, 1, 32, [&] {
      const int l = int(threadIdx.x), q = (l % 16) / 4, hi = l >= 16 ? 4 : 0;
      unsigned af[2], bf[2];
      float acc[8];
      // A row-major: a_i = A[l % 4 + hi][i]; B column-major: b_i = B[i][l % 4 + hi].
      for (int r = 0; r < 2; ++r) {
        af[r] = pack(a[q][l % 4 + hi][2 * r], a[q][l % 4 + hi][2 * r + 1]);
        bf[r] = pack(b[q][2 * r][l % 4 + hi], b[q][2 * r + 1][l % 4 + hi]);
      }
      // C: c_i = C[(l & 1) + (i & 2) + hi][(i & 4) + (l & 2) + (i & 1)].
      for (int i = 0; i < 8; ++i)
        acc[i] = c0[q][(l & 1) + (i & 2) + hi][(i & 4) + (l & 2) + (i & 1)];
      attnc::mma884(acc, af, bf);
      for (int i = 0; i < 8; ++i)
        d[q][(l & 1) + (i & 2) + hi][(i & 4) + (l & 2) + (i & 1)] = acc[i];
    })) << emu::lastError;
    for (int q = 0; q < 4; ++q)
      for (int i = 0; i < 8; ++i)
        for (int n = 0; n < 8; ++n) {
          float want = c0[q][i][n];
          for (int k = 0; k < 4; ++k)
            want += a[q][i][k] * b[q][k][n];
          EXPECT_EQ(d[q][i][n], want) << "computation " << q << ", " << i << ", " << n;
        }
  }
}

TEST(SimtEmulatorTensorCores, MisalignedLdmatrixRowFails) {
  emu::ScheduleScope scope(kIndex);
  EXPECT_FALSE(emu::launch(1, 1, 32, [] {
    Tiles &sm = emu::shared<Tiles>();
    unsigned r[4];
    const int l = int(threadIdx.x);
    // Lane 9's row starts 2 bytes (one element) in.
    attnc::ldsmX4(r, &sm.a[l % 16][(l / 16) * 8 + (l == 9)]);
  }));
  expectError({"warp 0 lane 9", "ldmatrix row address", "not 16-byte aligned"});
}

TEST(SimtEmulatorTensorCores, LdmatrixRowOutsideSharedMemoryFails) {
  emu::ScheduleScope scope(kIndex);
  alignas(16) static __half global[32][8];
  EXPECT_FALSE(emu::launch(1, 1, 32, [] {
    unsigned r[2];
    attnc::ldsmX2(r, global[threadIdx.x]);
  }));
  expectError({"lane 0", "ldmatrix row address", "not inside shared memory"});
  // Past the end of the launch's dynamic shared memory.
  EXPECT_FALSE(emu::launchSmem(1, 1, 32, 1024, [] {
    unsigned r[4];
    attnc::ldsmX4(r, attnc::attncSmem + 16 * threadIdx.x + (threadIdx.x == 31 ? 1024 : 0));
  }));
  expectError({"lane 31", "ldmatrix row address", "not inside shared memory"});
  // .x2 reads the rows of lanes 0-15 only; the others' addresses are ignored.
  EXPECT_TRUE(emu::launchSmem(1, 1, 32, 1024, [] {
    unsigned r[2];
    const int l = int(threadIdx.x);
    attnc::ldsmX2(r, l < 16 ? attnc::attncSmem + 16 * l : static_cast<unsigned char *>(nullptr));
  })) << emu::lastError;
}

//===-- cp.async ----------------------------------------------------------===//

/// Device-like global memory for the copies: registered while it lives.
struct Global : emu::GlobalMemory {
  alignas(16) float data[64];
  Global() {
    for (int i = 0; i < 64; ++i)
      data[i] = float(i);
    emu::registerGlobal(this);
  }
  ~Global() override { emu::unregisterGlobal(this); }
  bool contains(const void *p, size_t bytes) const override {
    const auto *c = static_cast<const unsigned char *>(p);
    const auto *lo = reinterpret_cast<const unsigned char *>(data);
    return c >= lo && c + bytes <= lo + sizeof data;
  }
};

TEST(SimtEmulatorAsyncCopy, CopiesLandByTheWait) {
  Global g;
  for (const Schedule &s : {kIndex, kReverse, emu::randomSchedule(12)}) {
    float before = 0.f, after = 0.f;
    emu::ScheduleScope scope(s);
    ASSERT_TRUE(emu::launchSmem(1, 1, 32, 512, [&] {
      float *sm = reinterpret_cast<float *>(attnc::attncSmem);
      const int l = int(threadIdx.x);
      if (l < 16)
        attnc::copy16(sm + 4 * l, g.data + 4 * l, true);
      attnc::cpAsyncCommit();
      if (l == 0)
        before = sm[0];
      attnc::cpAsyncWait<0>();
      __syncwarp();
      if (l == 0)
        after = sm[60];
    })) << emu::lastError;
    EXPECT_EQ(after, 60.f) << s.name();
    // Index lands copies at the wait (as late as allowed), reverse at the
    // issue (as early).
    if (s.kind == Schedule::Index) {
      EXPECT_TRUE(isNaN(before));
    } else if (s.kind == Schedule::Reverse) {
      EXPECT_EQ(before, 0.f);
    }
  }
}

TEST(SimtEmulatorAsyncCopy, DestinationMustBeAlignedSharedMemory) {
  emu::ScheduleScope scope(kIndex);
  Global g;
  alignas(16) static float notShared[8];
  EXPECT_FALSE(emu::launchSmem(1, 1, 32, 512, [&] {
    attnc::copy16(notShared, g.data, true);
    attnc::cpAsyncWait<0>();
  }));
  expectError({"lane 0", "cp.async shared destination", "not inside shared memory"});
  EXPECT_FALSE(emu::launchSmem(1, 1, 32, 512, [&] {
    attnc::copy16(attnc::attncSmem + 8, g.data, true);
    attnc::cpAsyncWait<0>();
  }));
  expectError({"cp.async shared destination", "not 16-byte aligned"});
  EXPECT_FALSE(emu::launchSmem(1, 1, 32, 512, [&] {
    attnc::copy16(attnc::attncSmem + 512, g.data, true); // past the launch's bytes
    attnc::cpAsyncWait<0>();
  }));
  expectError({"cp.async shared destination", "not inside shared memory"});
}

TEST(SimtEmulatorAsyncCopy, SourceMustBeAlignedGlobalMemory) {
  emu::ScheduleScope scope(kIndex);
  Global g;
  EXPECT_FALSE(emu::launchSmem(1, 1, 32, 512, [&] {
    attnc::copy16(attnc::attncSmem, g.data + 1, true);
    attnc::cpAsyncWait<0>();
  }));
  expectError({"cp.async global source", "not 16-byte aligned"});
  EXPECT_FALSE(emu::launchSmem(1, 1, 32, 512, [&] {
    attnc::copy16(attnc::attncSmem, attnc::attncSmem + 256, true);
    attnc::cpAsyncWait<0>();
  }));
  expectError({"cp.async global source", "is shared memory"});
  EXPECT_FALSE(emu::launchSmem(1, 1, 32, 512, [&] {
    attnc::copy16(attnc::attncSmem, g.data + 64, true); // one past the buffer
    attnc::cpAsyncWait<0>();
  }));
  expectError({"cp.async global source", "not inside a device buffer"});
  // A zero-fill reads nothing: any aligned global address will do.
  EXPECT_TRUE(emu::launchSmem(1, 1, 32, 512, [&] {
    attnc::copy16(attnc::attncSmem + 16 * threadIdx.x, g.data + 64, false);
    attnc::cpAsyncCommit();
    attnc::cpAsyncWait<0>();
  })) << emu::lastError;
}

TEST(SimtEmulatorAsyncCopy, CopiesInFlightAtExitFail) {
  emu::ScheduleScope scope(kIndex);
  Global g;
  EXPECT_FALSE(emu::launchSmem(1, 1, 32, 512, [&] {
    attnc::copy16(attnc::attncSmem + 16 * threadIdx.x, g.data, true);
    attnc::cpAsyncCommit();
    if (threadIdx.x != 5)
      attnc::cpAsyncWait<0>();
  }));
  expectError({"lane 5", "exited with 1 cp.async copies in flight"});
}

TEST(SimtEmulatorAsyncCopy, WritePastDynamicSharedMemoryFails) {
  emu::ScheduleScope scope(kIndex);
  EXPECT_FALSE(emu::launchSmem(3, 1, 32, 512, [] {
    if (blockIdx.x == 1 && threadIdx.x == 0)
      attnc::attncSmem[512 + 40] = 0;
  }));
  expectError({"block (1, 0, 0)", "at byte 552", "past the 512 bytes"});
  EXPECT_TRUE(emu::launchSmem(3, 1, 32, 512, [] {
    if (threadIdx.x == 0)
      attnc::attncSmem[511] = 0;
  }));
}

//===-- Vector accesses (UBSan) -------------------------------------------===//

#if defined(ATTNC_EMU_TEST_UBSAN_ALIGNMENT)
// Elem<float>::load4 is a float4 load: 16-byte aligned on a GPU, a trap
// otherwise; UBSan's alignment check aborts the host run the same way.
TEST(SimtEmulatorVectorAccess, MisalignedFloat4LoadAborts) {
  alignas(16) static float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(attnc::Elem<float>::load4(x + 4).x, 5.f);
  EXPECT_DEATH((void)attnc::Elem<float>::load4(x + 1), "misaligned address");
}
#endif

} // namespace
