//===- CudaLshTest.cpp - The CUDA LSH attention kernels -------------------===//
//
// Two halves, no GPU needed:
//
// NVRTC builds. Every LSH entry point of kernels/cuda/attnc/lsh.cuh
// is instantiated the way the emitter does it (generated Variant structs,
// extern "C" __launch_bounds__(WARPS * 32, 1) entry points) with the
// default tile of kernels/abi/attnc/abi/LshTileModel.h (the fp16/bf16
// forward: lsh_fwd_mma with lshMmaFwdTile, as the emitter picks it), for two (chunk, before, after)
// configurations and two variants (dense; causal + key padding + a
// two-parameter score modifier + a user mask), compiled by NVRTC for sm_70
// (the CUDA 12 NVRTC), sm_75, sm_80 and sm_90, fp32/fp16/bf16, head dims 32..256; ptxas's report
// must show no spills, no stack frame, at most 255 registers and exactly the static shared memory
// LshTileModel.h computes (<= 48 KiB). The matrix, the variants and the NVRTC/ptxas plumbing are
// test/unit/support/CudaTestSupport.h's.
//
// Numerics. The same headers compiled by the host compiler run on the
// block emulator of test/unit/support/CudaEmulator.h (real barriers and warp
// intrinsics, checked masks; the m16n8k16 tensor-core path and cp.async
// here, Volta's in CudaLshVoltaTest.cpp), under several schedules that must
// agree bit for bit (docs/emulator.md), and are compared with a
// double-precision reference of docs/kernels.md's LSH semantics
// (test/unit/support/CudaEmulatedLsh.h): buckets and permutation
// exactly (the hash is specified bit for bit), keys, out, lse, round_lse,
// dq, dv (the backward weighting the rounds from round_lse; rows that keep
// only their own key to 1e-6 in fp32). The reference's gradient is itself
// checked against finite differences.
//
//===----------------------------------------------------------------------===//
#include "attnc/abi/LshTileModel.h"

#include "test/unit/support/CudaTestSupport.h"
#include "test/unit/support/DropoutReference.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

using namespace attnc::tile;
using namespace cudatest;

namespace {

//===----------------------------------------------------------------------===//
// NVRTC builds
//===----------------------------------------------------------------------===//

// The dtypes, head dims, archs and variants: CudaTestSupport.h.

struct LshConfig {
  int chunk, before, after;
};
/// Reformer's default (chunk 64, one chunk back) and a two-sided window.
const LshConfig kConfigs[] = {{64, 1, 0}, {32, 1, 1}};

/// One entry point and the static shared memory it must use.
struct Entry {
  std::string name;
  int staticSmem;
};

/// The kernel bodies, their entry-point prefixes and static shared memory.
struct Kernel {
  const char *body, *prefix;
  int (*smem)(const LshTile &, int D);
};
const Kernel kKernels[] = {
    {"lsh_hash", "attnc_lsh_hash_",
     [](const LshTile &t, int) { return lshHashBlockSmemBytes(t.warps * 32); }},
    {"lsh_sort_offsets", "attnc_lsh_sort_offsets_",
     [](const LshTile &, int) { return lshScanSmemBytes(); }},
    {"lsh_sort_scatter", "attnc_lsh_sort_scatter_",
     [](const LshTile &, int) { return lshHashSmemBytes(); }},
    {"lsh_fwd", "attnc_lsh_fwd_",
     [](const LshTile &t, int D) { return lshFwdSmemBytes(t.blockQ, t.blockKv, D); }},
    {"lsh_combine", "attnc_lsh_combine_", [](const LshTile &, int) { return 0; }},
    {"lsh_bwd_preprocess", "attnc_lsh_bwd_preprocess_", [](const LshTile &, int) { return 0; }},
    {"lsh_bwd_dq", "attnc_lsh_bwd_dq_",
     [](const LshTile &t, int D) { return lshBwdDqSmemBytes(t.blockQ, t.blockKv, D); }},
    {"lsh_bwd_dkdv", "attnc_lsh_bwd_dkdv_",
     [](const LshTile &t, int D) { return lshBwdDkdvSmemBytes(t.blockQ, t.blockKv, D); }},
    {"lsh_bwd_combine", "attnc_lsh_bwd_combine_", [](const LshTile &, int) { return 0; }},
};

/// A set of instantiations: head dims x one config, every kernel or only
/// those whose code depends on the window (fwd, dq, dk/dv).
struct Part {
  std::vector<int> dims;
  LshConfig cfg;
  bool allKernels;
};

bool dependsOnWindow(const Kernel &k) {
  const std::string b = k.body;
  return b == "lsh_fwd" || b == "lsh_bwd_dq" || b == "lsh_bwd_dkdv";
}

/// The generated translation unit of one (arch, dtype) cell: variants, then
/// the entry points of every (part, variant) as the emitter writes them.
std::string generate(const DType &dt, const std::vector<Part> &parts, std::vector<Entry> &entries) {
  std::ostringstream os;
  os << "// Generated for CudaLshTest: " << dt.name << ".\n#include \"attnc/lsh.cuh\"\n\n";
  writeVariants(os);
  for (const Part &part : parts)
    for (int D : part.dims) {
      const LshConfig &cfg = part.cfg;
      const LshTile t = lshDefaultTile(cfg.chunk, D);
      for (const VariantCase &v : kVariants) {
        const std::string op = std::string(v.op) + "_d" + std::to_string(D) + "_c" +
                               std::to_string(cfg.chunk) + "_" + std::to_string(cfg.before) + "_" +
                               std::to_string(cfg.after);
        for (const Kernel &k : kKernels) {
          if (!part.allKernels && !dependsOnWindow(k))
            continue;
          const std::string name = k.prefix + op;
          // The forward on tensor cores where the emitter picks it, with
          // its own tile (codegen/KernelEmitter.cpp).
          const std::string body = k.body;
          const LshTile ft = lshMmaFwdTile(cfg.chunk, D, dt.bytes);
          const LshTile bt = lshMmaBwdTile(cfg.chunk, D, dt.bytes);
          const bool mmaFwd = body == "lsh_fwd" && ft.warps > 0;
          const bool mmaBwd = (body == "lsh_bwd_dq" || body == "lsh_bwd_dkdv") && bt.warps > 0;
          const LshTile kt = mmaFwd ? ft : mmaBwd ? bt : t;
          os << "extern \"C\" __global__ void __launch_bounds__(" << kt.warps * 32 << ", 1) "
             << name << "(attnc::AttnLshArgs a) {\n  attnc::" << body
             << (mmaFwd || mmaBwd ? "_mma" : "") << "<" << cfg.chunk << ", " << cfg.before << ", "
             << cfg.after << ", " << D << ", " << kt.blockQ << ", " << kt.blockKv << ", "
             << kt.warps << ", " << dt.cuda << ", " << v.type << ">(a);\n}\n";
          entries.push_back({name, mmaFwd   ? lshMmaFwdSmemBytes(ft.blockQ, ft.blockKv, D, dt.bytes)
                                   : mmaBwd ? lshMmaBwdSmemBytes(bt.blockQ, D, dt.bytes)
                                            : k.smem(t, D)});
        }
      }
    }
  return os.str();
}

/// Compiles and checks every entry point; prints the resource report.
void compileAndCheck(const DType &dt, int sm, const std::vector<Part> &parts) {
  std::vector<Entry> entries;
  const std::string source = generate(dt, parts, entries);
  const Compiled c = compile(source, sm, "attnc_lsh.cu");
  ASSERT_TRUE(c.ok) << c.log << "\n--- source ---\n" << source;
  expectNoHeaderWarnings(c.log);
  std::printf("sm_%d %s: %zu entry points, %.1f s\n", sm, dt.name, entries.size(), c.seconds);
  forEachReport(c.log, entries, [](const Entry &e, const Usage &u) {
    std::printf("  %-44s %3d regs  %d spill st  %d spill ld  %d stack  smem %d\n", e.name.c_str(),
                u.registers, u.spillStores, u.spillLoads, u.stackFrame, u.staticSmem);
    expectNoSpills(u, 255);
    EXPECT_EQ(u.staticSmem, e.staticSmem);
    EXPECT_LE(u.staticSmem, kLshSmemLimitBytes);
  });
}

//===-- Tile model --------------------------------------------------------===//

TEST(CudaLshTileModel, DefaultTiles) {
  static_assert(lshDefaultTile(64, 64).blockQ == 32 && lshDefaultTile(64, 64).warps == 4);
  static_assert(lshDefaultTile(64, 128).blockQ == 16 && lshDefaultTile(64, 256).blockQ == 8);
  static_assert(lshDefaultTile(64, 32).blockQ == 32 && lshDefaultTile(16, 64).blockQ == 16);
  static_assert(lshFwdSmemBytes(32, 32, 64) == 4 * (32 * 65 * 2 + 32 * 33 + 64));
  // dK/dV: K, V, Q, dO rows; P^T, G^T; round lse, weight, delta, positions.
  static_assert(lshBwdDkdvSmemBytes(32, 32, 64) == 4 * (4 * 32 * 65 + 2 * 32 * 33 + 5 * 32));
  static_assert(lshBwdDqSmemBytes(32, 32, 64) == 4 * (4 * 32 * 65 + 32 * 33 + 4 * 32));
  for (int chunk = 1; chunk <= 256; ++chunk)
    for (int D : {16, 32, 48, 64, 80, 96, 128, 160, 192, 256}) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + " D " + std::to_string(D));
      const LshTile t = lshDefaultTile(chunk, D);
      EXPECT_TRUE(lshValidTile(t, chunk, D));
      EXPECT_LE(lshSmemBytes(t, D), kLshSmemLimitBytes);
      EXPECT_EQ(chunk % t.blockQ, 0);
      EXPECT_EQ(chunk % t.blockKv, 0);
    }
  // Invalid shapes.
  EXPECT_FALSE(lshValidTile({32, 32, 4}, 48, 64));  // 32 does not divide 48
  EXPECT_FALSE(lshValidTile({2, 2, 4}, 64, 64));    // 64 lanes per row
  EXPECT_FALSE(lshValidTile({64, 64, 4}, 64, 128)); // shared memory
  EXPECT_FALSE(lshValidTile({24, 24, 4}, 48, 64));  // 128 threads / 24
  EXPECT_EQ(lshPaddedLength(1, 64), 64);
  EXPECT_EQ(lshPaddedLength(128, 64), 128);
  EXPECT_EQ(lshPaddedLength(129, 64), 192);
  // Grids are tiles x rows flattened into x (gridDim.y stops at 65535).
  const LshGrid g = lshFwdGrid({32, 32, 4}, 100, 64, 6, 2);
  EXPECT_EQ(g.x, 4 * 12); // 128 padded slots / 32, B*H*R = 12
  EXPECT_EQ(g.y, 1);
  EXPECT_EQ(lshBwdDkdvGrid({32, 16, 4}, 100, 64, 6, 2).x, 8 * 12);
  EXPECT_EQ(lshRowGrid(129, 3).x, 3 * 3);
  EXPECT_EQ(lshHashGrid(6, 4).x, 4 * 6);
  EXPECT_EQ(lshFwdGrid({32, 32, 4}, 100, 64, 70000, 2).y, 1); // B*H*R = 140000
}

/// The tensor-core forward's tiles: 16 query rows per warp, within the
/// chunk, the accumulator budget and 48 KiB; none for fp32 or chunks that
/// are not a multiple of 16.
TEST(CudaLshTileModel, MmaForwardTiles) {
  static_assert(lshMmaFwdTile(64, 64, 2).blockQ == 64 && lshMmaFwdTile(64, 64, 2).blockKv == 64 &&
                lshMmaFwdTile(64, 64, 2).warps == 4);
  static_assert(lshMmaFwdTile(64, 128, 2).blockQ == 64 && lshMmaFwdTile(64, 128, 2).blockKv == 32);
  static_assert(lshMmaFwdTile(64, 256, 2).blockQ == 32 && lshMmaFwdTile(64, 256, 2).blockKv == 16);
  static_assert(lshMmaFwdTile(32, 64, 2).blockQ == 32 && lshMmaFwdTile(32, 64, 2).warps == 2);
  // Q, K, V rows of 64 halves + 16 bytes pad; key factors and positions.
  static_assert(lshMmaFwdSmemBytes(64, 64, 64, 2) == 3 * 64 * 144 + 4 * 64 + 4 * 128);
  EXPECT_FALSE(lshMmaFwd(64, 64, 4)); // fp32 keeps lsh_fwd
  EXPECT_FALSE(lshMmaFwd(24, 64, 2)); // 16 does not divide 24
  EXPECT_FALSE(lshMmaFwd(8, 64, 2));  // chunks under 16
  EXPECT_FALSE(lshMmaFwd(64, 72, 2)); // head dims that are not k16 steps
  for (int chunk = 1; chunk <= 256; ++chunk)
    for (int D : kHeadDims) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + " D " + std::to_string(D));
      const LshTile t = lshMmaFwdTile(chunk, D, 2);
      EXPECT_EQ(t.warps > 0, chunk % 16 == 0);
      if (t.warps == 0)
        continue;
      EXPECT_TRUE(lshMmaFwdValidTile(t, chunk, D, 2));
      EXPECT_EQ(t.blockQ, 16 * t.warps);
      EXPECT_LE(lshMmaFwdSmemBytes(t.blockQ, t.blockKv, D, 2), kLshSmemLimitBytes);
    }
}

/// The tensor-core backward's square tiles: S + D accumulator floats (dK,
/// dV, S^T, dP^T) within the budget, so D = 256 keeps the SIMT backward.
TEST(CudaLshTileModel, MmaBackwardTiles) {
  static_assert(lshMmaBwdTile(64, 64, 2).blockQ == 64 && lshMmaBwdTile(64, 64, 2).warps == 4);
  static_assert(lshMmaBwdTile(64, 128, 2).blockQ == 32 && lshMmaBwdTile(64, 128, 2).blockKv == 32);
  static_assert(lshMmaBwdTile(64, 96, 2).blockQ == 32); // 4 rows of 208 bytes x 64 > 48 KiB
  static_assert(lshMmaBwdSmemBytes(64, 64, 2) == 4 * 64 * 144 + 24 * 64);
  EXPECT_FALSE(lshMmaBwdTile(64, 256, 2).warps > 0);
  EXPECT_FALSE(lshMmaBwdTile(64, 64, 4).warps > 0);
  EXPECT_FALSE(lshMmaBwdTile(24, 64, 2).warps > 0);
  for (int chunk = 1; chunk <= 256; ++chunk)
    for (int D : kHeadDims) {
      SCOPED_TRACE("chunk " + std::to_string(chunk) + " D " + std::to_string(D));
      const LshTile t = lshMmaBwdTile(chunk, D, 2);
      EXPECT_EQ(t.warps > 0, chunk % 16 == 0 && D < 256);
      if (t.warps == 0)
        continue;
      EXPECT_TRUE(lshMmaBwdValidTile(t, chunk, D, 2));
      EXPECT_LE(t.blockQ + D, 160);
      EXPECT_LE(lshMmaBwdSmemBytes(t.blockQ, D, 2), kLshSmemLimitBytes);
    }
}

class CudaLshNvrtc : public testing::TestWithParam<std::pair<int, const DType *>> {};

/// One NVRTC program per (arch, dtype): every kernel of every head dim with
/// the first config, the window-dependent kernels of head dims 32, 64, 128
/// with the second (the rest would compile the same code again).
TEST_P(CudaLshNvrtc, CompileWithoutSpills) {
  const int sm = GetParam().first;
  const DType &dt = *GetParam().second;
  compileAndCheck(
      dt, sm,
      {{std::vector<int>(std::begin(kHeadDims), std::end(kHeadDims)), kConfigs[0], true},
       {{32, 64, 128}, kConfigs[1], false}});
}

/// The cells: in CI, each arch's fp16 (its tensor-core path: m8n8k4,
/// m16n8k8, m16n8k16) and every dtype on sm_80; with ATTNC_LONG_TESTS set
/// (scripts/test-long.sh), every arch x dtype.
std::vector<std::pair<int, const DType *>> nvrtcCells() {
  const bool every = std::getenv("ATTNC_LONG_TESTS") != nullptr;
  std::vector<std::pair<int, const DType *>> cells;
  for (int sm : kArchs)
    for (const DType &dt : kDTypes)
      if (every || sm == 80 || std::string(dt.name) == "fp16")
        cells.push_back({sm, &dt});
  return cells;
}

INSTANTIATE_TEST_SUITE_P(Matrix, CudaLshNvrtc, testing::ValuesIn(nvrtcCells()),
                         [](const auto &info) {
                           return "sm" + std::to_string(info.param.first) + "_" +
                                  info.param.second->name;
                         });

/// Tiles the defaults do not reach for chunks 64/32: small and odd chunks
/// (tiles of 8, 4, 1 rows; 32 lanes per row).
TEST(CudaLshNvrtcSmallChunks, CompileWithoutSpills) {
  compileAndCheck(kDTypes[1], 90,
                  {{{64, 128}, {24, 1, 0}, true},
                   {{64, 128}, {20, 2, 1}, false},
                   {{64, 128}, {17, 1, 0}, false}});
}

} // namespace

//===----------------------------------------------------------------------===//
// Host emulation
//===----------------------------------------------------------------------===//

#include "test/unit/support/CudaEmulatedLsh.h"

namespace {

// The reference's gradient (docs/kernels.md's backward, used to check the
// kernels) is the derivative of sum(dout * out) for fixed buckets.
TEST(CudaLshReference, GradientMatchesFiniteDifferences) {
  for (bool mod : {false, true}) {
    LshSetup s{2, 1, 23, 8, 2, 6, 4, 1, 1, 0.7, mod, {23, 17}, {1.5, 0.05}, {}};
    unsigned state = 99u;
    auto rnd = [&] {
      state = state * 1664525u + 1013904223u;
      return float(state >> 8) / float(1 << 24) * 2.0f - 1.0f;
    };
    const size_t elems = size_t(s.B) * s.H * s.N * s.D;
    std::vector<float> qf(elems), rot(size_t(s.R) * s.D * s.NB / 2);
    for (float &x : qf)
      x = rnd();
    for (float &x : rot)
      x = rnd();
    std::vector<int> buckets;
    refHash(s, qf, rot, buckets);
    std::vector<double> q(qf.begin(), qf.end()), v(elems), dout(elems);
    for (double &x : v)
      x = rnd();
    for (double &x : dout)
      x = rnd();
    std::vector<double> out, lse, roundLse, dq, dv;
    refForward(s, q, v, out, lse, &roundLse);
    refBackward(s, q, v, dout, out, roundLse, dq, dv);
    auto loss = [&](const std::vector<double> &qq, const std::vector<double> &vv) {
      std::vector<double> o, l;
      refForward(s, qq, vv, o, l);
      return dotD(o.data(), dout.data(), int(o.size()));
    };
    const double eps = 1e-6;
    double worst = 0;
    for (size_t x = 0; x < elems; ++x) {
      std::vector<double> qp = q, qm = q, vp = v, vm = v;
      qp[x] += eps;
      qm[x] -= eps;
      vp[x] += eps;
      vm[x] -= eps;
      const double fq = (loss(qp, v) - loss(qm, v)) / (2 * eps);
      const double fv = (loss(q, vp) - loss(q, vm)) / (2 * eps);
      worst = std::max({worst, std::fabs(fq - dq[x]), std::fabs(fv - dv[x])});
    }
    std::printf("%s: max |analytic - finite difference| = %.2e\n", mod ? "modified" : "dense",
                worst);
    EXPECT_LE(worst, 1e-6);
  }
}

// Dense, the default tile for chunk 16 / D = 32 (16 x 16, 4 warps, 8 lanes
// per row), one chunk back; N not a multiple of the chunk, two rounds.
TEST(CudaLshEmulated, Fp32D32Chunk16) {
  runLsh<float, 16, 1, 0, 32, 16, 16, 4, EmuDense>({1, 2, 50, 2, 4, 1.0f}, kTolFp32, "fp32");
}
// Causal + key padding (lengths N, N - 13, 0) + score modifier + mask,
// several query and key tiles per chunk (16 x 8, 2 warps), a two-sided
// window, three rounds.
TEST(CudaLshEmulated, Fp32D64ModTiles) {
  runLsh<float, 32, 1, 1, 64, 16, 8, 2, EmuMod>({3, 2, 77, 3, 8, 0.125f}, kTolFp32, "fp32");
}
// The defaults for chunk 64 / D = 64 (32 x 32, 4 warps) and N > the hash
// block's 128 threads (several scatter tiles), 10 rotation columns (two
// groups of 8 in the hash), four heads.
TEST(CudaLshEmulated, Fp32D64Defaults) {
  runLsh<float, 64, 1, 0, 64, 32, 32, 4, EmuDense>({1, 4, 300, 2, 20, 0.5f}, kTolFp32, "fp32");
  runLsh<float, 64, 1, 0, 64, 32, 32, 4, EmuMod>({2, 1, 150, 2, 16, 0.5f}, kTolFp32, "fp32");
}
// D = 80 with 32 lanes per query row (4 x 8 tiles, 4 warps): columns and
// keys do not divide among the lanes; two chunks back.
TEST(CudaLshEmulated, Fp32D80Guards) {
  runLsh<float, 16, 2, 0, 80, 4, 8, 4, EmuMod>({2, 1, 40, 2, 6, 0.3f}, kTolFp32, "fp32");
}
// Fewer positions than a chunk (one chunk, mostly pad slots), N = 1.
TEST(CudaLshEmulated, Fp32Tiny) {
  runLsh<float, 16, 1, 0, 32, 16, 16, 4, EmuDense>({1, 2, 5, 2, 4, 1.0f}, kTolFp32, "fp32");
  runLsh<float, 16, 1, 0, 32, 16, 16, 4, EmuDense>({2, 1, 1, 3, 2, 1.0f}, kTolFp32, "fp32");
  runLsh<float, 16, 1, 1, 32, 8, 16, 2, EmuMod>({2, 1, 14, 2, 4, 1.0f}, kTolFp32, "fp32");
}
// Rows that keep only their own key (self score -1e5) in every round, with
// two rounds or more: the combined lse -1e5 + log(rounds) is not an fp32
// number (spacing 2^-7 there), so the backward must not use it (before the
// fix, dv of N = 1, rounds = 2 was 0.9978 dout). N = 1 (dense), and causal
// rows 0 (key padding keeps row 0 of the first two batches).
TEST(CudaLshEmulated, Fp32SelfOnlyRows) {
  size_t selfRows = 0;
  runLsh<float, 16, 1, 0, 32, 16, 16, 4, EmuDense>({1, 1, 1, 2, 2, 1.0f}, kTolFp32, "fp32",
                                                   &selfRows);
  EXPECT_EQ(selfRows, 1u);
  runLsh<float, 16, 1, 0, 32, 16, 16, 4, EmuDense>({2, 2, 1, 3, 4, 1.0f}, kTolFp32, "fp32",
                                                   &selfRows);
  EXPECT_EQ(selfRows, 4u);
  runLsh<float, 16, 1, 0, 32, 16, 16, 4, EmuMod>({2, 1, 20, 2, 4, 0.5f}, kTolFp32, "fp32",
                                                 &selfRows);
  EXPECT_GE(selfRows, 2u);
  runLsh<float, 64, 1, 0, 64, 32, 32, 4, EmuMod>({2, 2, 70, 5, 8, 0.5f}, kTolFp32, "fp32",
                                                 &selfRows);
  EXPECT_GE(selfRows, 4u);
}
// D = 128 / 256 defaults (16 x 16 and 8 x 8 tiles).
TEST(CudaLshEmulated, Fp32LargeHeads) {
  runLsh<float, 32, 1, 0, 128, 16, 16, 4, EmuMod>({2, 1, 45, 2, 4, 0.2f}, kTolFp32, "fp32");
  runLsh<float, 16, 1, 0, 256, 8, 8, 4, EmuDense>({1, 1, 40, 2, 4, 0.1f}, kTolFp32, "fp32");
}
TEST(CudaLshEmulated, Fp16D64) {
  runLsh<__half, 32, 1, 0, 64, 32, 32, 4, EmuMod>({2, 2, 70, 2, 8, 0.5f}, kTolFp16, "fp16");
  runLsh<__half, 32, 1, 0, 64, 32, 32, 4, EmuDense>({1, 1, 64, 2, 8, 0.5f}, kTolFp16, "fp16");
}
// Attention dropout: each round's P masked on the original positions (the
// CPU kernels' masks), sums and lse undropped; the backward redraws them.
TEST(CudaLshEmulated, Fp32Dropout) {
  runLsh<float, 16, 1, 0, 32, 16, 16, 4, emu::WithDropout<EmuDense>>({1, 2, 50, 2, 4, 1.0f},
                                                                     kTolFp32, "fp32");
  runLsh<float, 32, 1, 1, 64, 16, 8, 2, emu::WithDropout<EmuMod>>({3, 2, 77, 3, 8, 0.125f},
                                                                  kTolFp32, "fp32");
}
TEST(CudaLshEmulated, Fp16Dropout) {
  runLsh<__half, 32, 1, 0, 64, 32, 32, 4, emu::WithDropout<EmuMod>>({2, 2, 70, 2, 8, 0.5f},
                                                                    kTolFp16, "fp16");
}
// The tensor-core forward (fp16/bf16, chunks of 16-row tiles) on rows that
// keep only their own key: round_lse is the self score exactly (runLsh
// checks it), so the backward's p is 1 there. One-warp tiles (chunk 16).
TEST(CudaLshEmulated, Fp16SelfOnlyRows) {
  size_t selfRows = 0;
  runLsh<__half, 16, 1, 0, 32, 16, 16, 4, EmuDense>({2, 2, 1, 3, 4, 1.0f}, kTolFp16, "fp16",
                                                    &selfRows);
  EXPECT_EQ(selfRows, 4u);
  runLsh<__half, 64, 1, 0, 64, 32, 32, 4, EmuMod>({2, 2, 70, 5, 8, 0.5f}, kTolFp16, "fp16",
                                                  &selfRows);
  EXPECT_GE(selfRows, 4u);
}
// Several query and key tiles of the tensor-core forward per chunk (64 x
// 64 tiles of a 128-slot chunk), a two-sided window: six key tiles per
// block, N not a multiple of the chunk.
TEST(CudaLshEmulated, Fp16Chunk128TwoSided) {
  runLsh<__half, 128, 1, 1, 64, 32, 32, 4, EmuMod>({2, 1, 300, 2, 4, 0.5f}, kTolFp16, "fp16");
}
// fp16 with a chunk that is not a multiple of 16 keeps the SIMT forward.
TEST(CudaLshEmulated, Fp16Chunk24Simt) {
  static_assert(!lshMmaFwd(24, 64, 2));
  constexpr LshTile t = lshDefaultTile(24, 64);
  runLsh<__half, 24, 1, 0, 64, t.blockQ, t.blockKv, t.warps, EmuMod>({2, 1, 70, 2, 8, 0.5f},
                                                                     kTolFp16, "fp16");
}
TEST(CudaLshEmulated, Bf16D32) {
  runLsh<__nv_bfloat16, 32, 1, 1, 32, 32, 32, 4, EmuMod>({3, 1, 61, 3, 6, 1.0f}, kTolBf16, "bf16");
}
// Every LSH kernel at its shipped default tile (lshDefaultTile for
// Reformer's chunk of 64, one chunk back: 32 x 32 tiles at D = 64, 16 x 16
// at 128, 8 x 8 at 256, 4 warps) for fp32, fp16 and bf16: 150 positions
// (two whole chunks and a partial one), two rounds of 8 buckets, dense on
// two heads and modified (causal, key padding with lengths 150, 137, 0, a
// score modifier, a window) on three batches.
template <class T, int D> void runLshDefaultTiles(double tol, const char *dtype) {
  constexpr LshTile t = lshDefaultTile(64, D);
  std::printf("default tile for chunk 64, D = %d:\n", D);
  runLsh<T, 64, 1, 0, D, t.blockQ, t.blockKv, t.warps, EmuDense>({1, 2, 150, 2, 8, 0.5f}, tol,
                                                                 dtype);
  runLsh<T, 64, 1, 0, D, t.blockQ, t.blockKv, t.warps, EmuMod>({3, 1, 150, 2, 8, 0.5f}, tol, dtype);
}
TEST(CudaLshEmulated, DefaultTilesFp32D64) { runLshDefaultTiles<float, 64>(kTolFp32, "fp32"); }
TEST(CudaLshEmulated, DefaultTilesFp32D128) { runLshDefaultTiles<float, 128>(kTolFp32, "fp32"); }
TEST(CudaLshEmulated, DefaultTilesFp32D256) { runLshDefaultTiles<float, 256>(kTolFp32, "fp32"); }
TEST(CudaLshEmulated, DefaultTilesFp16D64) { runLshDefaultTiles<__half, 64>(kTolFp16, "fp16"); }
TEST(CudaLshEmulated, DefaultTilesFp16D128) { runLshDefaultTiles<__half, 128>(kTolFp16, "fp16"); }
TEST(CudaLshEmulated, DefaultTilesFp16D256) { runLshDefaultTiles<__half, 256>(kTolFp16, "fp16"); }
TEST(CudaLshEmulated, DefaultTilesBf16D64) {
  runLshDefaultTiles<__nv_bfloat16, 64>(kTolBf16, "bf16");
}
TEST(CudaLshEmulated, DefaultTilesBf16D128) {
  runLshDefaultTiles<__nv_bfloat16, 128>(kTolBf16, "bf16");
}
TEST(CudaLshEmulated, DefaultTilesBf16D256) {
  runLshDefaultTiles<__nv_bfloat16, 256>(kTolBf16, "bf16");
}

// B * H * rounds = 70,000 (over gridDim.y's 65535) at a tiny N: the flat
// grids of LshTileModel.h reach every (b, h, round) once.
TEST(CudaLshEmulated, Fp32ManySlices) {
  runLsh<float, 4, 1, 0, 16, 4, 4, 1, EmuMod>({35000, 1, 3, 2, 2, 1.0f}, kTolFp32, "fp32", nullptr,
                                              /*schedules=*/2);
}

} // namespace
