//===- CudaKernelsTest.cpp - NVRTC builds of the CUDA attention kernels ---===//
//
// Every CUDA kernel body (kernels/cuda/attnc) is instantiated the
// way the emitter does it (generated Variant structs, extern "C" entry
// points) with the default tile of kernels/abi/attnc/abi/TileModel.h, compiled by NVRTC
// for sm_70 (CUDA 12 NVRTC), sm_75, sm_80 and sm_90, and ptxas's resource report is checked: no
// spills, no stack frame, at most 255 registers, static + dynamic shared
// memory within the arch's limit, no warnings from the kernel headers.
// Matrix: {fp32, fp16, bf16} x head dim {32, 64, 80, 96, 128, 256} x arch,
// one test per cell (ctest -j spreads them), each compiling forward and
// backward of a dense variant and of one with causal + key padding + a
// two-parameter score modifier + a user mask (the matrix, the variants and
// the NVRTC/ptxas plumbing: test/unit/support/CudaTestSupport.h). No GPU is needed.
//
// The second half runs the same headers on the host: compiled by the host
// compiler they take the SIMT path for fp32 and, with ldmatrix, mma and
// cp.async from kernels/emulator/attnc/tensor_core_emulator.h
// (emulated from the PTX ISA's definitions), the tensor-core path for
// fp16/bf16 and asynchronous copies for all. The block emulator
// (simt_emulator.h, docs/emulator.md) runs every CUDA thread as a
// coroutine with real barrier and warp-collective semantics and checks
// masks, ldmatrix and cp.async addresses; shared memory is pre-filled with
// NaNs. Each case runs under several schedules (index, reverse, random
// warp and lane orders; blocks in order, reversed, shuffled; copies landing
// as late or as early as cp.async allows) whose results must agree bit for
// bit, and the first is compared with a double-precision reference of
// docs/kernels.md's semantics, on shapes that are not tile multiples and
// with tiles that cover every pipeline mode: tiling, masks, online
// softmax, backward algebra, dparams reduction, shared-memory layouts, MMA
// fragment mappings and the cp.async group accounting. Left for a GPU: the
// PTX itself, the sm_75 m16n8k8 split, synchronous copies, and real
// concurrency (the emulator interleaves at barriers and collectives only).
//
//===----------------------------------------------------------------------===//
#include "attnc/abi/TileModel.h"

#include "test/unit/support/CudaTestSupport.h"
#include "test/unit/support/DropoutReference.h"

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

using namespace attnc::tile;
using namespace cudatest;

namespace {

//===-- What is compiled --------------------------------------------------===//

// The dtypes, head dims, archs and variants: CudaTestSupport.h.

/// One kernel entry point and the dynamic shared memory it is launched with.
struct Entry {
  std::string name;
  int dynamicSmem;
};

/// The generated translation unit of one (dtype, head dim, arch) cell, as the
/// emitter writes it: variants, then one entry point per kernel.
std::string generate(const DType &dt, int D, int sm, std::vector<Entry> &entries) {
  const TileConfig f = defaultTile(dt.bytes, D, sm, false);
  const TileConfig b = defaultTile(dt.bytes, D, sm, true);
  std::ostringstream os;
  os << "// Generated for CudaKernelsTest: " << dt.name << ", D = " << D << ", sm_" << sm
     << ".\n#include \"attnc/flash_fwd.cuh\"\n#include \"attnc/flash_bwd.cuh\"\n\n";
  writeVariants(os);
  for (const VariantCase &v : kVariants) {
    auto entry = [&](const std::string &prefix, const TileConfig &c, const char *args,
                     const char *body, int smem) {
      const std::string name = prefix + v.op;
      os << "extern \"C\" __global__ void __launch_bounds__(" << c.warps * 32 << ", 1) " << name
         << "(attnc::" << args << " a) {\n  attnc::" << body << "<" << c.blockQ << ", " << c.blockKv
         << ", " << D << ", " << c.warps << ", " << c.stages << ", " << dt.cuda << ", " << v.type
         << ">(a);\n}\n";
      entries.push_back({name, smem});
    };
    entry("attnc_fwd_", f, "AttnFwdArgs", "flash_fwd",
          fwdSmemBytes(f.blockQ, f.blockKv, D, f.stages, dt.bytes));
    entry("attnc_bwd_preprocess_", b, "AttnBwdArgs", "flash_bwd_preprocess", 0);
    entry("attnc_bwd_dkdv_", b, "AttnBwdArgs", "flash_bwd_dkdv",
          bwdDkdvSmemBytes(b.blockQ, b.blockKv, D, b.stages, dt.bytes));
    entry("attnc_bwd_dq_", b, "AttnBwdArgs", "flash_bwd_dq",
          bwdDqSmemBytes(b.blockQ, b.blockKv, D, b.stages, dt.bytes));
    if (v.numParams > 0)
      entry("attnc_bwd_dparams_", b, "AttnBwdArgs", "flash_bwd_dparams", 0);
  }
  return os.str();
}

//===-- Tests -------------------------------------------------------------===//

TEST(CudaTileModel, ArchLimits) {
  EXPECT_EQ(smemLimitBytes(70), 96 * 1024);
  EXPECT_EQ(smemLimitBytes(75), 64 * 1024);
  EXPECT_EQ(smemLimitBytes(80), 163 * 1024);
  EXPECT_EQ(smemLimitBytes(86), 99 * 1024);
  EXPECT_EQ(smemLimitBytes(89), 99 * 1024);
  EXPECT_EQ(smemLimitBytes(90), 227 * 1024);
  static_assert(kMaxRegsPerThread == 255 && kMaxThreads == 1024);
  // Usable in constant expressions (the kernels take offsets from them).
  static_assert(fwdSmemBytes(128, 64, 128, 2, 2) == 128 * 272 + 2 * 2 * 64 * 272);
  static_assert(defaultTile(2, 128, 80, false).blockQ == 128);
}

TEST(CudaTileModel, DefaultTilesFitEveryCell) {
  for (int sm : {75, 80, 86, 89, 90})
    for (int e : {4, 2})
      for (int D : kHeadDims)
        for (bool bwd : {false, true}) {
          SCOPED_TRACE("sm_" + std::to_string(sm) + " e=" + std::to_string(e) +
                       " D=" + std::to_string(D) + (bwd ? " bwd" : " fwd"));
          const TileConfig c = defaultTile(e, D, sm, bwd);
          EXPECT_TRUE(validTile(c, D, bwd));
          EXPECT_TRUE(tileFits(c, e, D, sm, bwd));
          EXPECT_LE(smemBytes(c, D, e, bwd), smemLimitBytes(sm));
          EXPECT_LE(accFloats(c, D, bwd), accFloatBudget(e, bwd));
          if (!bwd) {
            EXPECT_EQ(c.blockQ, kRowsPerWarp * c.warps);
          }
          if (sm < 80) {
            EXPECT_LE(c.stages, 1); // no cp.async pipeline before Ampere
          }
        }
}

TEST(CudaTileModel, LayoutsAreAligned) {
  for (int e : {4, 2})
    for (int D : kHeadDims)
      for (int st : {0, 1, 2, 3}) {
        const int bq = 64, bkv = 32;
        const FwdSmem f = fwdSmem(bq, bkv, D, st > 0 ? st : 1, e);
        for (int off : {f.q, f.kv, f.stageBytes, f.total})
          EXPECT_EQ(off % 16, 0);
        for (const BwdSmem &b : {bwdDkdvSmem(bq, bkv, D, st, e), bwdDqSmem(bq, bkv, D, st, e)}) {
          for (int off : {b.fixedX, b.fixedY, b.score0, b.score1, b.stats, b.statStride, b.slot,
                          b.slotStride, b.slotY, b.total})
            EXPECT_EQ(off % 16, 0) << "D=" << D << " e=" << e << " stages=" << st;
          EXPECT_LT(b.slot, b.total);
        }
        // Padded rows are an odd number of 16-byte units: ldmatrix phases
        // and vector loads of 8 consecutive rows hit distinct banks.
        EXPECT_EQ(rowBytes(D, e) / 16 % 2, 1);
      }
  // Stage 0 shares one slot between the two streamed tiles.
  const BwdSmem one = bwdDkdvSmem(16, 16, 256, 0, 4);
  EXPECT_EQ(one.slotY, 0);
  EXPECT_EQ(one.total, one.slot + 16 * rowBytes(256, 4));
}

TEST(CudaTileModel, WorkspaceFloats) {
  EXPECT_EQ(bwd_workspace_floats(2, 3, 100, 100, 2, 64), 2LL * 2 * 3 * 2);
  EXPECT_EQ(bwd_workspace_floats(2, 3, 100, 129, 1, 64), 1LL * 2 * 3 * 3);
  EXPECT_EQ(bwd_workspace_floats(2, 3, 100, 129, 0, 64), 0);
}

TEST(CudaPtxasLog, Parses) {
  const std::string log =
      "ptxas info    : Compiling entry function 'k1' for 'sm_80'\n"
      "ptxas info    : Function properties for k1\n"
      "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads\n"
      "ptxas info    : Used 96 registers, used 1 barriers, 32 bytes smem, 488 bytes cmem[0]\n"
      "ptxas info    : Function properties for k2\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 432 bytes cmem[0]\n";
  auto u = parsePtxasLog(log);
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(u["k1"].registers, 96);
  EXPECT_EQ(u["k1"].stackFrame, 8);
  EXPECT_EQ(u["k1"].spillStores, 4);
  EXPECT_EQ(u["k1"].spillLoads, 12);
  EXPECT_EQ(u["k1"].staticSmem, 32);
  EXPECT_EQ(u["k2"].registers, 255);
  EXPECT_EQ(u["k2"].staticSmem, 0);
}

struct Cell {
  int sm;
  const DType *dtype;
  int headDim;
};

void PrintTo(const Cell &c, std::ostream *os) {
  *os << "sm_" << c.sm << " " << c.dtype->name << " D=" << c.headDim;
}

class CudaKernels : public testing::TestWithParam<Cell> {};

TEST_P(CudaKernels, CompileWithoutSpills) {
  const Cell &cell = GetParam();
  std::vector<Entry> entries;
  const std::string source = generate(*cell.dtype, cell.headDim, cell.sm, entries);
  const Compiled c = compile(source, cell.sm, "attnc_kernels.cu");
  ASSERT_TRUE(c.ok) << c.log << "\n--- source ---\n" << source;
  expectNoHeaderWarnings(c.log);

  const TileConfig f = defaultTile(cell.dtype->bytes, cell.headDim, cell.sm, false);
  const TileConfig b = defaultTile(cell.dtype->bytes, cell.headDim, cell.sm, true);
  std::printf("sm_%d %s D=%d: fwd tile %dx%d w%d s%d, bwd tile %dx%d w%d s%d, %.1f s\n", cell.sm,
              cell.dtype->name, cell.headDim, f.blockQ, f.blockKv, f.warps, f.stages, b.blockQ,
              b.blockKv, b.warps, b.stages, c.seconds);
  forEachReport(c.log, entries, [&](const Entry &e, const Usage &u) {
    std::printf("  %-28s %3d regs  %d spill st  %d spill ld  %d stack  smem %d+%d of %d\n",
                e.name.c_str(), u.registers, u.spillStores, u.spillLoads, u.stackFrame,
                u.staticSmem, e.dynamicSmem, smemLimitBytes(cell.sm));
    expectNoSpills(u, kMaxRegsPerThread);
    EXPECT_LE(u.staticSmem + e.dynamicSmem, smemLimitBytes(cell.sm));
  });
}

// Volta's fp16 GEMMs are tensor-core instructions: the PTX of compute_70
// has mma.sync.m8n8k4 and none of what Volta lacks (ldmatrix, cp.async,
// m16n8 shapes). Dense and modified variants, forward and backward.
class VoltaPtx : public testing::TestWithParam<int> {};

TEST_P(VoltaPtx, Fp16UsesM8n8k4) {
  const int D = GetParam();
  std::vector<Entry> entries;
  const std::string source = generate(kDTypes[1], D, 70, entries);
  const Compiled c = compile(source, 70, "attnc_kernels.cu", /*ptx=*/true);
  ASSERT_TRUE(c.ok) << c.log;
  size_t mmas = 0;
  for (size_t at = c.ptx.find("mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32");
       at != std::string::npos; at = c.ptx.find("mma.sync.aligned.m8n8k4", at + 1))
    ++mmas;
  std::printf("compute_70 fp16 D=%d: %zu mma.sync.aligned.m8n8k4 in %zu bytes of PTX\n", D, mmas,
              c.ptx.size());
  EXPECT_GT(mmas, 0u);
  for (const char *absent : {"ldmatrix", "cp.async", "m16n8k", ".bf16"})
    EXPECT_EQ(c.ptx.find(absent), std::string::npos) << absent << " in compute_70 PTX";
  // Every entry point is there.
  for (const Entry &e : entries)
    EXPECT_NE(c.ptx.find(".entry " + e.name), std::string::npos) << e.name;
}

INSTANTIATE_TEST_SUITE_P(HeadDims, VoltaPtx, testing::Values(64, 128),
                         [](const testing::TestParamInfo<int> &info) {
                           return "d" + std::to_string(info.param);
                         });

std::vector<Cell> allCells() {
  std::vector<Cell> cells;
  for (int sm : kArchs)
    for (const DType &dt : kDTypes)
      for (int D : kHeadDims)
        cells.push_back({sm, &dt, D});
  return cells;
}

INSTANTIATE_TEST_SUITE_P(Matrix, CudaKernels, testing::ValuesIn(allCells()),
                         [](const testing::TestParamInfo<Cell> &info) {
                           return "sm" + std::to_string(info.param.sm) + "_" +
                                  info.param.dtype->name + "_d" +
                                  std::to_string(info.param.headDim);
                         });

} // namespace

//===----------------------------------------------------------------------===//
// Host emulation of the kernels
//===----------------------------------------------------------------------===//

#include "test/unit/support/CudaEmulatedAttention.h"

namespace {

// bf16 before sm_80 runs the SIMT GEMMs on Elem<bf16>'s conversions, which
// the emulated cases (tensor cores for bf16) do not reach.
TEST(CudaKernelsEmulated, Bf16SimtConversions) {
  using E = attnc::Elem<__nv_bfloat16>;
  alignas(16) __nv_bfloat16 x[4];
  const float v[4] = {1.5f, -2.25f, 0.0078125f, 96.0f}; // exact in bf16
  E::store2(x, v[0], v[1]);
  E::store2(x + 2, v[2], v[3]);
  const float4 f = E::load4(x);
  const float2 h = E::load2(x + 2);
  EXPECT_EQ(f.x, v[0]);
  EXPECT_EQ(f.y, v[1]);
  EXPECT_EQ(f.z, v[2]);
  EXPECT_EQ(f.w, v[3]);
  EXPECT_EQ(h.x, v[2]);
  EXPECT_EQ(h.y, v[3]);
  EXPECT_EQ(E::toFloat(x[1]), v[1]);
  EXPECT_TRUE((attnc::MmaKindOf<float, 8>::value == attnc::MmaKind::Simt));
}

// fp32, two-stage pipelines both ways, 4 warps (bwd WN = 2).
TEST(CudaKernelsEmulated, Fp32D32Pipelined) {
  runEmulated<float, 32, 64, 32, 4, 2, 32, 32, 4, 2, EmuDense>(kLong, kTolFp32);
  runEmulated<float, 32, 64, 32, 4, 2, 32, 32, 4, 2, EmuMod>(kLong, kTolFp32);
}
// The sm_80 fp32 D = 32 defaults: 8 warps, 128 x 128 forward.
TEST(CudaKernelsEmulated, Fp32D32Defaults) {
  runEmulated<float, 32, 128, 128, 8, 2, 64, 64, 8, 2, EmuDense>(kLong, kTolFp32);
  runEmulated<float, 32, 128, 128, 8, 2, 64, 64, 8, 2, EmuMod>(kShort, kTolFp32);
}
// fp16, D = 80 (row chunks do not divide the threads), one-slot backward.
TEST(CudaKernelsEmulated, Fp16D80OneSlot) {
  runEmulated<__half, 80, 32, 16, 2, 1, 16, 16, 2, 0, EmuDense>(kShort, kTolFp16);
  runEmulated<__half, 80, 32, 16, 2, 1, 16, 16, 2, 0, EmuMod>(kLong, kTolFp16);
}
// bf16, one-warp forward, 8-warp single-stage backward.
TEST(CudaKernelsEmulated, Bf16D64) {
  runEmulated<__nv_bfloat16, 64, 16, 16, 1, 1, 64, 64, 8, 1, EmuDense>(kShort, kTolBf16);
  runEmulated<__nv_bfloat16, 64, 16, 16, 1, 1, 64, 64, 8, 1, EmuMod>(kShort, kTolBf16);
}
// Attention dropout: the forward weights V by the Philox masks (row sums
// and lse undropped), the backward redraws them (dS = P (z dP - delta),
// dV = (z P)^T dO), on the SIMT and the tensor-core paths.
TEST(CudaKernelsEmulated, DropoutFp32D32) {
  runEmulated<float, 32, 64, 32, 4, 2, 32, 32, 4, 2, EmuDenseDrop>(kLong, kTolFp32);
  runEmulated<float, 32, 64, 32, 4, 2, 32, 32, 4, 2, EmuModDrop>(kShort, kTolFp32);
}
TEST(CudaKernelsEmulated, DropoutFp16D64) {
  runEmulated<__half, 64, 32, 32, 2, 2, 32, 32, 4, 1, EmuModDrop>(kLong, kTolFp16);
}
TEST(CudaKernelsEmulated, DropoutBf16D64) {
  runEmulated<__nv_bfloat16, 64, 16, 16, 1, 1, 64, 64, 8, 1, EmuDenseDrop>(kShort, kTolBf16);
}

// The sm_75 fp32 D = 256 defaults (one-slot backward, 16-row tiles).
TEST(CudaKernelsEmulated, Fp32D256Turing) {
  runEmulated<float, 256, 16, 16, 1, 1, 16, 16, 2, 0, EmuMod>(kShort, kTolFp32);
}
// fp32 D = 96 with 3-stage pipelines and a 32 x 32 one-slot-free backward.
TEST(CudaKernelsEmulated, Fp32D96ThreeStages) {
  runEmulated<float, 96, 32, 32, 2, 3, 32, 32, 4, 3, EmuMod>(kLong, kTolFp32);
}
// Causal with more keys than queries, Nq a multiple of the backward's
// query tile: the key blocks past the last query are seen by no query
// block, so dK/dV's loop over query blocks never runs and its epilogue
// stages zeros in the shared memory its K/V copies land in (the barrier
// after the final wait_group keeps other threads' copies from landing on
// them). Plain causal (no dparams reduction, whose barriers would hide a
// missing one) and modified; pipelined and one-slot backward, and a
// default tile.
const EmuShape kKeysPastQueries{2, 2, 64, 140};
TEST(CudaKernelsEmulated, KeyBlocksPastTheQueries) {
  runEmulated<float, 32, 64, 32, 4, 2, 32, 32, 4, 2, EmuCausal>(kKeysPastQueries, kTolFp32);
  runEmulated<float, 32, 64, 32, 4, 2, 32, 32, 4, 2, EmuMod>(kKeysPastQueries, kTolFp32);
  runEmulated<__half, 80, 32, 16, 2, 1, 16, 16, 2, 0, EmuCausal>(kKeysPastQueries, kTolFp16);
  runDefaultTiles<__nv_bfloat16, 128, 90, EmuCausal>(kKeysPastQueries, kTolBf16);
}

// Every dense kernel at its shipped default tile (defaultTile: 64- to
// 128-row tiles, 4 or 8 warps, 1 or 2 stages), for fp32, fp16 and bf16 at
// head dims 64, 128 and 256: fp16 at sm_80's defaults, fp32 and bf16 at
// sm_90's (larger). 150 queries x 133 keys (a partial query and key tile),
// dense (every key block) and modified (causal, key padding, a score
// modifier, a window, dparams of two heads; batch 2 has no keys). (With
// one head, fp32 dparams at D = 256 comes within 3 % of its tolerance at
// every tile, the Turing one too: the slope's gradient sums ds (j - i),
// and ds sums to 0 along each row, so the data, not the tile, decides.)
const EmuShape kDefaultsDense{2, 1, 150, 133}, kDefaultsMod{3, 2, 150, 133};
template <class T, int D, int SM> void runDefaultTilesBoth(double tol) {
  runDefaultTiles<T, D, SM, EmuDense>(kDefaultsDense, tol);
  runDefaultTiles<T, D, SM, EmuMod>(kDefaultsMod, tol);
}
TEST(CudaKernelsEmulated, DefaultTilesFp32D64) { runDefaultTilesBoth<float, 64, 90>(kTolFp32); }
TEST(CudaKernelsEmulated, DefaultTilesFp32D128) { runDefaultTilesBoth<float, 128, 90>(kTolFp32); }
TEST(CudaKernelsEmulated, DefaultTilesFp32D256) { runDefaultTilesBoth<float, 256, 90>(kTolFp32); }
TEST(CudaKernelsEmulated, DefaultTilesFp16D64) { runDefaultTilesBoth<__half, 64, 80>(kTolFp16); }
TEST(CudaKernelsEmulated, DefaultTilesFp16D128) { runDefaultTilesBoth<__half, 128, 80>(kTolFp16); }
TEST(CudaKernelsEmulated, DefaultTilesFp16D256) { runDefaultTilesBoth<__half, 256, 80>(kTolFp16); }
TEST(CudaKernelsEmulated, DefaultTilesBf16D64) {
  runDefaultTilesBoth<__nv_bfloat16, 64, 90>(kTolBf16);
}
TEST(CudaKernelsEmulated, DefaultTilesBf16D128) {
  runDefaultTilesBoth<__nv_bfloat16, 128, 90>(kTolBf16);
}
TEST(CudaKernelsEmulated, DefaultTilesBf16D256) {
  runDefaultTilesBoth<__nv_bfloat16, 256, 90>(kTolBf16);
}

// Low-rank attention: the flash kernels (dense variant, as the low-rank
// emitter instantiates them) over k = 48 keys projected from 150
// positions, at the default tiles, for the same dtypes and head dims.
const EmuShape kLowRank{3, 1, 150, 48, 150};
TEST(CudaLowRankEmulated, DefaultTilesFp32D64) {
  runDefaultTiles<float, 64, 90, EmuDense>(kLowRank, kTolFp32);
}
TEST(CudaLowRankEmulated, DefaultTilesFp32D128) {
  runDefaultTiles<float, 128, 90, EmuDense>(kLowRank, kTolFp32);
}
TEST(CudaLowRankEmulated, DefaultTilesFp32D256) {
  runDefaultTiles<float, 256, 90, EmuDense>(kLowRank, kTolFp32);
}
TEST(CudaLowRankEmulated, DefaultTilesFp16D64) {
  runDefaultTiles<__half, 64, 80, EmuDense>(kLowRank, kTolFp16);
}
TEST(CudaLowRankEmulated, DefaultTilesFp16D128) {
  runDefaultTiles<__half, 128, 80, EmuDense>(kLowRank, kTolFp16);
}
TEST(CudaLowRankEmulated, DefaultTilesFp16D256) {
  runDefaultTiles<__half, 256, 80, EmuDense>(kLowRank, kTolFp16);
}
TEST(CudaLowRankEmulated, DefaultTilesBf16D64) {
  runDefaultTiles<__nv_bfloat16, 64, 90, EmuDense>(kLowRank, kTolBf16);
}
TEST(CudaLowRankEmulated, DefaultTilesBf16D128) {
  runDefaultTiles<__nv_bfloat16, 128, 90, EmuDense>(kLowRank, kTolBf16);
}
TEST(CudaLowRankEmulated, DefaultTilesBf16D256) {
  runDefaultTiles<__nv_bfloat16, 256, 90, EmuDense>(kLowRank, kTolBf16);
}

// B * H = 70,000 (over gridDim.y's 65535) at a tiny N: the runtime's flat
// grids reach every (b, h) slice once; batches 1 and 2 have 3 and no keys.
TEST(CudaKernelsEmulated, Fp32ManySlices) {
  runEmulated<float, 16, 16, 16, 1, 1, 16, 16, 1, 1, EmuMod>({35000, 2, 3, 16}, kTolFp32,
                                                             /*schedules=*/2);
}

} // namespace

// The emulator itself: barriers order shared-memory traffic across warps,
// shuffles exchange within a warp, a barrier some threads never reach is
// reported as a deadlock, and the launch after one runs normally (threads
// switch by long jumps, so a deadlocked block's stacks are abandoned).
TEST(CudaEmulator, BarriersShufflesAndDeadlocks) {
  struct Sums {
    float partial[4];
  };
  std::vector<float> out(2, 0.0f);
  auto blockSum = [&] {
    Sums &s = emu::shared<Sums>();
    const int t = int(threadIdx.x);
    float v = float(t + 1);
    for (int o = 16; o > 0; o >>= 1)
      v += __shfl_xor_sync(0xffffffffu, v, o);
    if (t % 32 == 0)
      s.partial[t / 32] = v;
    __syncthreads();
    if (t == 0)
      out[blockIdx.x] = s.partial[0] + s.partial[1] + s.partial[2] + s.partial[3];
  };
  ASSERT_TRUE(emu::launch(2, 1, 128, blockSum));
  EXPECT_EQ(out[0], 128.0f * 129.0f / 2.0f);
  EXPECT_EQ(out[1], 128.0f * 129.0f / 2.0f);

  // Lane 0 waits at the block barrier, the rest of its warp at a warp
  // barrier that needs lane 0 too: neither is ever released.
  EXPECT_FALSE(emu::launch(1, 1, 64, [] {
    if (threadIdx.x == 0)
      __syncthreads();
    else if (threadIdx.x < 32)
      __syncwarp();
    else
      __syncthreads();
  }));
  out.assign(2, 0.0f);
  ASSERT_TRUE(emu::launch(2, 1, 128, blockSum));
  EXPECT_EQ(out[1], 128.0f * 129.0f / 2.0f);
}
