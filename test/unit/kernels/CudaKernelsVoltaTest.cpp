//===- CudaKernelsVoltaTest.cpp - Volta's kernels on the host emulator ----===//
//
// The kernel headers as they compile for sm_70, run on the block
// emulator: fp16 GEMMs on mma.sync.m8n8k4 (tensor_core_emulator.h models it
// from the PTX ISA's fragment tables, independently of mma.cuh's index
// arithmetic), bf16 on the SIMT path (Volta has no bf16 MMA), copies
// staged through registers (no cp.async; copy.cuh's StagedTile), no
// ldmatrix (this build does not define it, so a Volta path that used it
// would not link).
//
// First the warp GEMMs alone against exact integer products (gemmSS with
// both B layouts, gemmRS on a previous accumulator, an odd NT that falls
// back to SIMT); then the attention kernels at sm_70's default tiles
// (TileModel.h: 96 KB of shared memory, one stage) against the double
// reference of CudaEmulatedAttention.h, on shapes that are not tile
// multiples. The NVRTC builds of the same kernels for sm_70 (no spills) and
// their PTX (m8n8k4, no ldmatrix or cp.async) are in CudaKernelsTest.cpp.
//
//===----------------------------------------------------------------------===//
#define ATTNC_EMULATE_ARCH 700

#include "test/unit/support/CudaEmulatedAttention.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

namespace {

static_assert(ATTNC_MMA_ARCH == 700, "the kernels take Volta's path here");
static_assert(attnc::MmaKindOf<__half, 8>::value == attnc::MmaKind::M8n8k4);
static_assert(attnc::MmaKindOf<__half, 1>::value == attnc::MmaKind::Simt);
static_assert(attnc::MmaKindOf<__nv_bfloat16, 8>::value == attnc::MmaKind::Simt);
#if defined(ATTNC_EMULATE_ASYNC_COPY)
#error "Volta has no cp.async: its copies must be synchronous"
#endif

//===-- Warp GEMMs --------------------------------------------------------===//

constexpr int kK = 32;       ///< inner dimension
constexpr int kPad = 8;      ///< shared-memory row padding, as the kernels'
constexpr int kMaxCols = 32; ///< the widest tile tested (NT = 4)

/// Small integers times 1/4: exact in fp16, and so are their fp32 sums.
float entry(int i, int j, int salt) { return float((i * 7 + j * 3 + salt) % 9 - 4) * 0.25f; }

struct WarpTiles {
  __half a[16][kK + kPad];              ///< A, 16 x K
  __half bn[kMaxCols][kK + kPad];       ///< B n-major: B[k][n] at bn[n][k]
  __half bk[kK][kMaxCols + kPad];       ///< B k-major: B[k][n] at bk[k][n]
  __half b2[kMaxCols][kMaxCols + kPad]; ///< gemmRS's B, k-major (K = 32 rows)
};

/// acc[n][e] of every lane, scattered to the 16 x 8NT tile through the
/// kernels' accumulator layout (AccLayout<__half, NT>).
template <int NT> struct TileOut {
  std::vector<double> v = std::vector<double>(16 * 8 * NT, -1e300);
  std::vector<int> writes = std::vector<int>(16 * 8 * NT, 0);
  void scatter(const float (&acc)[NT][4], int lane) {
    using L = attnc::AccLayout<__half, NT>;
    for (int n = 0; n < NT; ++n)
      for (int e = 0; e < 4; ++e) {
        const int row = L::rowBase(lane) + L::kRowStep * (e / 2);
        const int col = L::colBase(lane) + L::colOf(n, e % 2);
        v[size_t(row * 8 * NT + col)] = acc[n][e];
        ++writes[size_t(row * 8 * NT + col)];
      }
  }
};

/// One warp: C1 = A B (gemmSS, B n-major), C2 = A B (B k-major), and
/// C3 = fp16(C1[:, :K]) B2 (gemmRS, needs NT1 = K / 8 = 4 for the P
/// operand), checked element by element against double products.
template <int NT> void checkWarpGemms() {
  SCOPED_TRACE("NT = " + std::to_string(NT));
  constexpr int N = 8 * NT;
  TileOut<NT> c1, c2;
  TileOut<NT> c3;
  ASSERT_TRUE(emu::launch(1, 1, 32, [&] {
    WarpTiles &s = emu::shared<WarpTiles>();
    const int lane = int(threadIdx.x);
    if (lane == 0) {
      for (int i = 0; i < 16; ++i)
        for (int k = 0; k < kK; ++k)
          s.a[i][k] = __float2half(entry(i, k, 1));
      for (int k = 0; k < kK; ++k)
        for (int n = 0; n < kMaxCols; ++n) {
          s.bn[n][k] = s.bk[k][n] = __float2half(entry(k, n, 2));
          s.b2[k][n] = __float2half(entry(n, k, 5));
        }
    }
    __syncwarp();
    float acc1[NT][4], acc2[NT][4];
    attnc::zeroAcc(acc1);
    attnc::zeroAcc(acc2);
    attnc::WarpMma<__half>::gemmSS<kK, NT, false>(acc1, &s.a[0][0], kK + kPad, &s.bn[0][0],
                                                  kK + kPad);
    attnc::WarpMma<__half>::gemmSS<kK, NT, true>(acc2, &s.a[0][0], kK + kPad, &s.bk[0][0],
                                                 kMaxCols + kPad);
    c1.scatter(acc1, lane);
    c2.scatter(acc2, lane);
    if constexpr (NT == kK / 8) {
      float acc3[NT][4];
      attnc::zeroAcc(acc3);
      attnc::WarpMma<__half>::gemmRS<kK, NT>(acc3, acc1, &s.b2[0][0], kMaxCols + kPad);
      c3.scatter(acc3, lane);
    }
  })) << emu::lastError;
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < N; ++j) {
      double want = 0, want3 = 0;
      for (int k = 0; k < kK; ++k)
        want += double(entry(i, k, 1)) * entry(k, j, 2);
      const size_t at = size_t(i * N + j);
      EXPECT_EQ(c1.writes[at], 1) << "element (" << i << ", " << j << ") held by one lane";
      EXPECT_EQ(c1.v[at], want) << "gemmSS n-major at (" << i << ", " << j << ")";
      EXPECT_EQ(c2.v[at], want) << "gemmSS k-major at (" << i << ", " << j << ")";
      if (NT == kK / 8) {
        // P = C1 (16 x 32) rounded to fp16 (exact: multiples of 1/16 well
        // inside fp16's range), times B2.
        for (int k = 0; k < kK; ++k) {
          double p = 0;
          for (int kk = 0; kk < kK; ++kk)
            p += double(entry(i, kk, 1)) * entry(kk, k, 2);
          want3 += p * entry(j, k, 5);
        }
        EXPECT_EQ(c3.v[at], want3) << "gemmRS at (" << i << ", " << j << ")";
      }
    }
}

// m8n8k4: NT = 2 (one 16-column block) and 4 (two, and gemmRS); NT = 1 and
// 3 take the SIMT path (its layout is m16n8's) and must agree as well.
TEST(VoltaWarpMma, M8n8k4GemmsMatchExactProducts) {
  checkWarpGemms<2>();
  checkWarpGemms<4>();
}
TEST(VoltaWarpMma, OddTilesFallBackToSimt) {
  checkWarpGemms<1>();
  checkWarpGemms<3>();
}

//===-- Attention at sm_70's default tiles --------------------------------===//

const EmuShape kDefaultsDense{2, 1, 150, 133}, kDefaultsMod{3, 2, 150, 133};
const EmuShape kLowRank{3, 1, 150, 48, 150};

template <class T, int D> void runVoltaDefaults(double tol) {
  runDefaultTiles<T, D, 70, EmuDense>(kDefaultsDense, tol);
  runDefaultTiles<T, D, 70, EmuMod>(kDefaultsMod, tol);
}

// fp16 on tensor cores, dense and modified (causal, key padding, a score
// modifier, a window, dparams), 150 queries x 133 keys.
TEST(VoltaKernelsEmulated, DefaultTilesFp16D64) { runVoltaDefaults<__half, 64>(kTolFp16); }
TEST(VoltaKernelsEmulated, DefaultTilesFp16D128) { runVoltaDefaults<__half, 128>(kTolFp16); }
// Low-rank: k = 48 keys projected from 150 positions.
TEST(VoltaLowRankEmulated, DefaultTilesFp16D64) {
  runDefaultTiles<__half, 64, 70, EmuDense>(kLowRank, kTolFp16);
}
TEST(VoltaLowRankEmulated, DefaultTilesFp16D128) {
  runDefaultTiles<__half, 128, 70, EmuDense>(kLowRank, kTolFp16);
}
// bf16: bf16 in memory, fp32 SIMT compute.
TEST(VoltaKernelsEmulated, DefaultTilesBf16D64) {
  runDefaultTiles<__nv_bfloat16, 64, 70, EmuMod>(kDefaultsMod, kTolBf16);
}
// Attention dropout on the m8n8k4 path (the mask follows the layout).
TEST(VoltaKernelsEmulated, DropoutFp16D64) {
  runDefaultTiles<__half, 64, 70, emu::WithDropout<EmuMod>>(kShort, kTolFp16);
}
// A 16-key backward tile over two warps gives each warp 8 columns (NT = 1):
// those GEMMs take SIMT while the 16-column ones take m8n8k4, in one
// kernel. Causal with key blocks past the last query too.
TEST(VoltaKernelsEmulated, MixedTensorCoreAndSimtTiles) {
  runEmulated<__half, 80, 32, 16, 2, 1, 16, 16, 2, 0, EmuMod>(kLong, kTolFp16);
  runEmulated<__half, 80, 32, 16, 2, 1, 16, 16, 2, 0, EmuCausal>({2, 2, 64, 140}, kTolFp16);
}

} // namespace
