//===- CudaKernelsTest.cpp - NVRTC builds of the CUDA attention kernels ---===//
//
// Every CUDA kernel body (codegen/kernels/cuda/attnc) is instantiated the
// way the emitter does it (generated Variant structs, extern "C" entry
// points) with the default tile of codegen/kernels/abi/attnc/abi/TileModel.h, compiled by NVRTC
// for sm_75, sm_80 and sm_90, and ptxas's resource report is checked: no
// spills, no stack frame, at most 255 registers, static + dynamic shared
// memory within the arch's limit, no warnings from the kernel headers.
// Matrix: {fp32, fp16, bf16} x head dim {32, 64, 80, 96, 128, 256} x arch,
// one test per cell (ctest -j spreads them), each compiling forward and
// backward of a dense variant and of one with causal + key padding + a
// two-parameter score modifier + a user mask (the matrix, the variants and
// the NVRTC/ptxas plumbing: test/unit/CudaTestSupport.h). No GPU is needed.
//
// The second half runs the same headers on the host: compiled by the host
// compiler they take the SIMT path for fp32 and, with ldmatrix, mma and
// cp.async from codegen/kernels/emulator/attnc/tensor_core_emulator.h
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

#include "CudaTestSupport.h"
#include "DropoutReference.h"

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

// The block emulator, what tests hand the kernels (CudaEmulator.h), then
// ldmatrix, mma and cp.async (tensor_core_emulator.h), then the kernels.
#include "CudaEmulator.h"

#include "attnc/tensor_core_emulator.h"

#include "attnc/flash_bwd.cuh"
#include "attnc/flash_fwd.cuh"

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

namespace {

/// Dense attention, and the modified variant of the NVRTC test with a
/// narrower window (CudaEmulator.h).
constexpr int kEmuWindow = 20; ///< keep q - kv < 20: bites on small shapes
using EmuDense = emu::DenseVariant;
using EmuMod = emu::ModVariant<kEmuWindow>;
/// The two with attention dropout at kEmuDropout.
using EmuDenseDrop = emu::WithDropout<EmuDense>;
using EmuModDrop = emu::WithDropout<EmuMod>;
constexpr float kEmuDropout = 0.25f;
/// Plain causal attention: no parameters, so no dparams reduction (whose
/// barriers would order what the kernels' own barriers must).
struct EmuCausal : emu::DenseVariant {
  static constexpr bool kCausal = true;
};

//===-- Reference (double) ------------------------------------------------===//

struct Problem {
  int B, H, Nq, Nk, D;
  float scale;
  bool mod; ///< EmuMod (else EmuDense or EmuCausal)
  std::vector<int> lengths;
  std::vector<float> params;        ///< [2 * H]
  std::vector<float> q, k, v, dout; ///< already rounded to the kernel's T
  float dropout = 0;                ///< attention dropout (0: none)
  unsigned long long dropoutSeed = 0;
  unsigned dropoutOffset = 0;
  bool causal = false; ///< EmuCausal
};

/// The dropout factor of (b, h, i, j): 0 or 1 / (1 - p) by the mask of
/// codegen/kernels/abi/attnc/abi/Philox.h (docs/kernels.md), 1 without dropout.
double refDropout(const Problem &p, int b, int h, int i, int j) {
  return refDropoutFactor(p.dropoutSeed, p.dropoutOffset, b * p.H + h, i, j, p.dropout);
}

bool refKept(const Problem &p, int b, int i, int j) {
  if (!p.mod)
    return !p.causal || j <= i;
  return j <= i && j < p.lengths[b] && i - j < kEmuWindow;
}

/// score(s) and, with d != nullptr, d = {dscore/ds, dscore/dcap, dscore/dslope}.
double refScore(const Problem &p, double s, int h, int i, int j, double *d = nullptr) {
  if (!p.mod) {
    if (d)
      d[0] = 1, d[1] = d[2] = 0;
    return s;
  }
  const double cap = p.params[h], slope = p.params[p.H + h], th = std::tanh(s / cap);
  if (d) {
    d[0] = 1 - th * th;
    d[1] = th - s / cap * (1 - th * th);
    d[2] = j - i;
  }
  return cap * th + slope * (j - i);
}

double dot(const float *a, const float *b, int n) {
  double r = 0;
  for (int x = 0; x < n; ++x)
    r += double(a[x]) * b[x];
  return r;
}

void refForward(const Problem &p, std::vector<double> &out, std::vector<double> &lse) {
  const int D = p.D;
  out.assign(size_t(p.B) * p.H * p.Nq * D, 0);
  lse.assign(size_t(p.B) * p.H * p.Nq, -std::numeric_limits<double>::infinity());
  std::vector<double> s(p.Nk);
  for (int b = 0; b < p.B; ++b)
    for (int h = 0; h < p.H; ++h)
      for (int i = 0; i < p.Nq; ++i) {
        const size_t bh = size_t(b) * p.H + h, row = bh * p.Nq + i;
        double m = -std::numeric_limits<double>::infinity();
        for (int j = 0; j < p.Nk; ++j) {
          s[j] = -std::numeric_limits<double>::infinity();
          if (refKept(p, b, i, j))
            s[j] = refScore(p, p.scale * dot(&p.q[row * D], &p.k[(bh * p.Nk + j) * D], D), h, i, j);
          m = std::max(m, s[j]);
        }
        if (m == -std::numeric_limits<double>::infinity())
          continue;
        double l = 0;
        for (int j = 0; j < p.Nk; ++j)
          l += std::exp(s[j] - m);
        for (int j = 0; j < p.Nk; ++j) {
          const double w = std::exp(s[j] - m) / l * refDropout(p, b, h, i, j);
          for (int d = 0; d < D; ++d)
            out[row * D + d] += w * p.v[(bh * p.Nk + j) * D + d];
        }
        lse[row] = m + std::log(l);
      }
}

/// Gradients from the kernel's view of out (rounded) and lse (fp32).
void refBackward(const Problem &p, const std::vector<float> &out, const std::vector<float> &lse,
                 std::vector<double> &dq, std::vector<double> &dk, std::vector<double> &dv,
                 std::vector<double> &dparams) {
  const int D = p.D;
  dq.assign(p.q.size(), 0);
  dk.assign(p.k.size(), 0);
  dv.assign(p.v.size(), 0);
  dparams.assign(2 * p.H, 0);
  for (int b = 0; b < p.B; ++b)
    for (int h = 0; h < p.H; ++h)
      for (int i = 0; i < p.Nq; ++i) {
        const size_t bh = size_t(b) * p.H + h, row = bh * p.Nq + i;
        if (std::isinf(lse[row]))
          continue;
        const double delta = dot(&p.dout[row * D], &out[row * D], D);
        for (int j = 0; j < p.Nk; ++j) {
          if (!refKept(p, b, i, j))
            continue;
          const size_t col = bh * p.Nk + j;
          double d[3];
          const double sc = refScore(p, p.scale * dot(&p.q[row * D], &p.k[col * D], D), h, i, j, d);
          const double pr = std::exp(sc - lse[row]), z = refDropout(p, b, h, i, j);
          const double ds = pr * (z * dot(&p.dout[row * D], &p.v[col * D], D) - delta);
          const double g = ds * d[0];
          for (int x = 0; x < D; ++x) {
            dq[row * D + x] += p.scale * g * p.k[col * D + x];
            dk[col * D + x] += p.scale * g * p.q[row * D + x];
            dv[col * D + x] += pr * z * p.dout[row * D + x];
          }
          dparams[h] += ds * d[1];
          dparams[p.H + h] += ds * d[2];
        }
      }
}

//===-- Running the kernels -----------------------------------------------===//

using emu::Buffer;

/// Runs a kernel body over a grid with `smem` bytes of dynamic shared
/// memory, one emulated block at a time under emu::schedule, with shared
/// memory reset to NaNs for each block; false (and a test failure naming
/// the check) when the emulator finds a fault.
bool launch(long long gx, int gy, int threads, size_t smem, const std::function<void()> &body) {
  // What a GPU takes: the grids are the runtime's (TileModel.h), flat in x.
  EXPECT_LE(gy, 65535) << "gridDim.y over CUDA's limit";
  EXPECT_LE(gx, attnc::tile::kMaxGridX) << "gridDim.x over CUDA's limit";
  if (emu::launchSmem(gx, gy, threads, smem, body))
    return true;
  ADD_FAILURE() << "schedule " << emu::schedule.name() << ": " << emu::lastError;
  return false;
}

/// max |got - ref| <= tol * max |ref|; infinities must match exactly and
/// everything else be finite (NaN marks an element never written).
void expectClose(const char *what, const std::vector<float> &got, const std::vector<double> &ref,
                 double tol) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double maxRef = 0, maxErr = 0;
  size_t worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    if (std::isinf(ref[i])) {
      ASSERT_EQ(double(got[i]), ref[i]) << what << "[" << i << "]";
      continue;
    }
    ASSERT_TRUE(std::isfinite(got[i])) << what << "[" << i << "] = " << got[i];
    maxRef = std::max(maxRef, std::fabs(ref[i]));
    const double err = std::fabs(got[i] - ref[i]);
    if (err > maxErr)
      maxErr = err, worst = i;
  }
  std::printf("  %-8s max |err| / max |ref| = %.2e (tolerance %.0e)\n", what,
              maxErr / std::max(maxRef, 1e-3), tol);
  EXPECT_LE(maxErr, tol * std::max(maxRef, 1e-3))
      << what << ": worst element " << worst << " got " << got[worst] << " want " << ref[worst]
      << " (max |ref| " << maxRef << ")";
}

Problem makeProblem(int B, int H, int Nq, int Nk, int D, bool mod, bool roundHalf, bool roundBf16) {
  Problem p{B, H, Nq, Nk, D, 1.0f / std::sqrt(float(D)), mod, {}, {}, {}, {}, {}, {}};
  for (int b = 0; b < B; ++b) // full, partial and empty (b = 2) key sets
    p.lengths.push_back(b == 0 ? Nk : b == 1 ? Nk - 13 : 0);
  for (int h = 0; h < H; ++h)
    p.params.push_back(2.5f + h);
  for (int h = 0; h < H; ++h)
    p.params.push_back(0.03f * (h + 1));
  unsigned state = 12345u;
  auto rnd = [&] {
    state = state * 1664525u + 1013904223u;
    float x = float(state >> 8) / float(1 << 24) * 2.0f - 1.0f;
    if (roundHalf)
      x = __half2float(__float2half_rn(x));
    if (roundBf16)
      x = __bfloat162float(__float2bfloat16_rn(x));
    return x;
  };
  for (auto *t : {&p.q, &p.k, &p.v})
    for (size_t i = 0; i < size_t(B) * H * (t == &p.q ? Nq : Nk) * D; ++i)
      t->push_back(rnd() * 2.0f); // scores of a few units
  for (size_t i = 0; i < size_t(B) * H * Nq * D; ++i)
    p.dout.push_back(rnd());
  return p;
}

/// Low-rank (Linformer) attention reaches the flash kernels as dense
/// attention over k projected keys (docs/kernels.md): K' = E_n K~, V' =
/// F_n V~, where K~, V~ are the n keys and values with rows past
/// lengths[b] (n, n - 13, 0) zeroed and E, F are [k, n]. Replaces p's keys
/// and values (p.Nk = k keys) by such projections, rounded to the kernel's
/// element type; the projection GEMMs themselves are cuBLAS's.
void projectLowRank(Problem &p, int n, bool roundHalf, bool roundBf16) {
  const int k = p.Nk, D = p.D;
  unsigned state = 777u;
  auto rnd = [&] {
    state = state * 1664525u + 1013904223u;
    return double(state >> 8) / double(1 << 24) * 2.0 - 1.0;
  };
  auto round = [&](double x) {
    float f = float(x);
    if (roundHalf)
      f = __half2float(__float2half_rn(f));
    if (roundBf16)
      f = __bfloat162float(__float2bfloat16_rn(f));
    return f;
  };
  std::vector<double> E(size_t(k) * n), F(size_t(k) * n);
  for (double &x : E)
    x = rnd() * 2.0 / std::sqrt(double(n)); // projected scores of a few units
  for (double &x : F)
    x = rnd() * 2.0 / std::sqrt(double(n));
  for (std::vector<float> *t : {&p.k, &p.v}) {
    const std::vector<double> &P = t == &p.k ? E : F;
    t->assign(size_t(p.B) * p.H * k * D, 0.f);
    for (int b = 0; b < p.B; ++b) {
      const int len = b == 0 ? n : b == 1 ? n - 13 : 0;
      for (int h = 0; h < p.H; ++h) {
        std::vector<double> x(size_t(n) * D, 0.0); // K~ or V~ of (b, h)
        for (int j = 0; j < len; ++j)
          for (int d = 0; d < D; ++d)
            x[size_t(j) * D + d] = rnd() * 2.0;
        float *out = &(*t)[(size_t(b) * p.H + h) * k * D];
        for (int r = 0; r < k; ++r)
          for (int d = 0; d < D; ++d) {
            double sum = 0;
            for (int j = 0; j < n; ++j)
              sum += P[size_t(r) * n + j] * x[size_t(j) * D + d];
            out[size_t(r) * D + d] = round(sum);
          }
      }
    }
  }
}

struct EmuShape {
  int B, H, Nq, Nk;
  int lowRankN = 0; ///< > 0: Nk keys projected from this many (projectLowRank)
};

/// What one run of the five kernels writes.
struct EmuOutputs {
  std::vector<float> out, lse, delta, dq, dk, dv, dparams;
  bool guardsIntact = true;
};

/// Forward, then the four backward kernels, of one (T, D, tiles, variant)
/// against the reference, under `schedules` schedules (emu::testSchedules)
/// whose results must agree bit for bit.
template <class T, int D, int FQ, int FKV, int FW, int FS, int BQ, int BKV, int BW, int BS, class V>
void runEmulated(const EmuShape &shape, double tol, int schedules = 3) {
  constexpr bool kHalf = std::is_same_v<T, __half>, kBf16 = std::is_same_v<T, __nv_bfloat16>;
  using namespace attnc::tile;
  Problem p = makeProblem(shape.B, shape.H, shape.Nq, shape.Nk, D, V::kNumParams > 0, kHalf, kBf16);
  if (V::kDropout)
    p.dropout = kEmuDropout, p.dropoutSeed = 0x5eed1234abcdull, p.dropoutOffset = 7;
  if (shape.lowRankN > 0)
    projectLowRank(p, shape.lowRankN, kHalf, kBf16);
  p.causal = V::kCausal && V::kNumParams == 0;
  std::printf("D=%d fwd %dx%d w%d s%d, bwd %dx%d w%d s%d, %s%s%s, B=%d H=%d Nq=%d Nk=%d\n", D, FQ,
              FKV, FW, FS, BQ, BKV, BW, BS,
              V::kNumParams > 0 ? "modified"
              : p.causal        ? "causal"
                                : "dense",
              V::kDropout ? " with dropout" : "",
              shape.lowRankN > 0 ? (" low-rank from " + std::to_string(shape.lowRankN)).c_str()
                                 : "",
              p.B, p.H, p.Nq, p.Nk);
  const int BH = p.B * p.H;
  Buffer<T> q(p.q), k(p.k), v(p.v), dout(p.dout);
  Buffer<int> lengths(0);
  lengths.data.assign(p.lengths.begin(), p.lengths.end());
  lengths.data.insert(lengths.data.begin(), Buffer<int>::kGuard, -1);
  lengths.n = p.lengths.size();
  Buffer<float> params(p.params);

  std::vector<double> refOut, refLse;
  refForward(p, refOut, refLse);
  // Backward from the reference's out (rounded to T) and lse (fp32).
  Buffer<T> bOut(std::vector<float>(refOut.begin(), refOut.end()));
  std::vector<float> lseF(refLse.begin(), refLse.end());
  Buffer<float> bLse(lseF);
  const std::vector<float> outT = bOut.values();
  std::vector<double> rdq, rdk, rdv, rdp;
  refBackward(p, outT, lseF, rdq, rdk, rdv, rdp);
  std::vector<double> refDelta(size_t(BH) * p.Nq);
  for (size_t r = 0; r < refDelta.size(); ++r)
    refDelta[r] = dot(&p.dout[r * D], &outT[r * D], D);
  for (double &x : rdp)
    x += 0.25;

  // The five kernels, into fresh (NaN-filled) outputs.
  auto run = [&](EmuOutputs &o) {
    Buffer<T> out(p.q.size());
    Buffer<float> lse(size_t(BH) * p.Nq);
    attnc::AttnFwdArgs fa{q.ptr(),
                          k.ptr(),
                          v.ptr(),
                          out.ptr(),
                          lse.ptr(),
                          lengths.ptr(),
                          V::kNumParams ? params.ptr() : nullptr,
                          p.B,
                          p.H,
                          p.Nq,
                          p.Nk,
                          p.scale,
                          p.dropout,
                          p.dropoutOffset,
                          p.dropoutSeed};
    if (!launch(attnc::tile::queryTileBlocks(p.Nq, FQ, BH), 1, FW * 32,
                fwdSmemBytes(FQ, FKV, D, FS, int(sizeof(T))),
                [&] { attnc::flash_fwd<FQ, FKV, D, FW, FS, T, V>(fa); }))
      return false;
    Buffer<float> delta(size_t(BH) * p.Nq);
    Buffer<T> dq(p.q.size()), dk(p.k.size()), dv(p.v.size());
    Buffer<float> dparams(std::vector<float>(2 * p.H, 0.25f)); // accumulated into
    const long long ws = bwd_workspace_floats(p.B, p.H, p.Nq, p.Nk, V::kNumParams, BKV);
    Buffer<float> partial(size_t(std::max(ws, 1LL)));
    attnc::AttnBwdArgs ba{q.ptr(),
                          k.ptr(),
                          v.ptr(),
                          bOut.ptr(),
                          dout.ptr(),
                          bLse.ptr(),
                          lengths.ptr(),
                          V::kNumParams ? params.ptr() : nullptr,
                          delta.ptr(),
                          dq.ptr(),
                          dk.ptr(),
                          dv.ptr(),
                          V::kNumParams ? dparams.ptr() : nullptr,
                          V::kNumParams ? partial.ptr() : nullptr,
                          p.B,
                          p.H,
                          p.Nq,
                          p.Nk,
                          p.scale,
                          p.dropout,
                          p.dropoutOffset,
                          p.dropoutSeed};
    const long long qBlocks = attnc::tile::queryTileBlocks(p.Nq, BQ, BH),
                    kvBlocks = attnc::tile::keyTileBlocks(p.Nk, BKV, BH);
    const int e = int(sizeof(T));
    if (!launch(qBlocks, 1, BW * 32, 0,
                [&] { attnc::flash_bwd_preprocess<BQ, BKV, D, BW, BS, T, V>(ba); }) ||
        !launch(kvBlocks, 1, BW * 32, bwdDkdvSmemBytes(BQ, BKV, D, BS, e),
                [&] { attnc::flash_bwd_dkdv<BQ, BKV, D, BW, BS, T, V>(ba); }) ||
        !launch(qBlocks, 1, BW * 32, bwdDqSmemBytes(BQ, BKV, D, BS, e),
                [&] { attnc::flash_bwd_dq<BQ, BKV, D, BW, BS, T, V>(ba); }))
      return false;
    if (V::kNumParams > 0 && !launch(V::kNumParams * p.H, 1, BW * 32, 0, [&] {
          attnc::flash_bwd_dparams<BQ, BKV, D, BW, BS, T, V>(ba);
        }))
      return false;
    o = {out.values(), lse.values(), delta.values(), dq.values(), dk.values(), dv.values(),
         {},           true};
    if (V::kNumParams > 0)
      o.dparams = dparams.values();
    o.guardsIntact = out.guardsIntact() && lse.guardsIntact() && delta.guardsIntact() &&
                     dq.guardsIntact() && dk.guardsIntact() && dv.guardsIntact() &&
                     dparams.guardsIntact() && partial.guardsIntact();
    return true;
  };

  EmuOutputs first;
  const std::vector<emu::Schedule> scheds = emu::testSchedules(schedules, 1 + D + FQ + BKV);
  for (size_t s = 0; s < scheds.size(); ++s) {
    emu::ScheduleScope scope(scheds[s]);
    EmuOutputs o;
    if (!run(o))
      return; // the launch reported why
    EXPECT_TRUE(o.guardsIntact) << scheds[s].name() << ": a kernel wrote out of bounds";
    if (s == 0) {
      expectClose("out", o.out, refOut, tol);
      expectClose("lse", o.lse, refLse, tol);
      expectClose("delta", o.delta, refDelta, tol);
      expectClose("dq", o.dq, rdq, tol);
      expectClose("dk", o.dk, rdk, tol);
      expectClose("dv", o.dv, rdv, tol);
      if (V::kNumParams > 0)
        expectClose("dparams", o.dparams, rdp, tol);
      first = std::move(o);
      continue;
    }
    // A race makes the result depend on the schedule.
    const std::pair<const char *, const std::vector<float> *> got[] = {
        {"out", &o.out}, {"lse", &o.lse}, {"delta", &o.delta},    {"dq", &o.dq},
        {"dk", &o.dk},   {"dv", &o.dv},   {"dparams", &o.dparams}};
    const std::vector<float> *want[] = {&first.out, &first.lse, &first.delta,  &first.dq,
                                        &first.dk,  &first.dv,  &first.dparams};
    bool same = true;
    for (size_t i = 0; i < std::size(got); ++i) {
      const long long at = emu::firstBitDifference(*got[i].second, *want[i]);
      if (at >= 0) {
        same = false;
        ADD_FAILURE() << got[i].first << " under schedule " << scheds[s].name()
                      << " differs from schedule " << scheds[0].name() << " at element " << at
                      << ": " << (*got[i].second)[size_t(at)] << " vs " << (*want[i])[size_t(at)];
      }
    }
    if (same)
      std::printf("  schedule %s: bit-identical to %s\n", scheds[s].name().c_str(),
                  scheds[0].name().c_str());
  }
}

/// runEmulated at the shipped default tiles of (T, D, sm_SM): TileModel.h's
/// defaultTile, forward and backward, as the runtime launches them.
template <class T, int D, int SM, class V>
void runDefaultTiles(const EmuShape &shape, double tol, int schedules = 3) {
  constexpr attnc::tile::TileConfig f = attnc::tile::defaultTile(int(sizeof(T)), D, SM, false);
  constexpr attnc::tile::TileConfig b = attnc::tile::defaultTile(int(sizeof(T)), D, SM, true);
  std::printf("sm_%d default tiles:\n", SM);
  runEmulated<T, D, f.blockQ, f.blockKv, f.warps, f.stages, b.blockQ, b.blockKv, b.warps, b.stages,
              V>(shape, tol, schedules);
}

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
  EXPECT_FALSE((attnc::UseTensorCores<float>::value));
}

// Tolerances relative to the tensor's largest magnitude: fp32 accumulates in
// fp32; fp16 and bf16 also round P and dS to T for the second GEMMs.
constexpr double kTolFp32 = 2e-5, kTolFp16 = 1e-2, kTolBf16 = 4e-2;
const EmuShape kLong{2, 2, 150, 133}; // several blocks each way, Nq > Nk
const EmuShape kShort{3, 2, 37, 45};  // batch 2 has no keys (length 0)

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
