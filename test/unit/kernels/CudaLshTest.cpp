//===- CudaLshTest.cpp - The CUDA LSH attention kernels -------------------===//
//
// Two halves, no GPU needed:
//
// NVRTC builds. Every LSH entry point of kernels/cuda/attnc/lsh.cuh
// is instantiated the way the emitter does it (generated Variant structs,
// extern "C" __launch_bounds__(WARPS * 32, 1) entry points) with the
// default tile of kernels/abi/attnc/abi/LshTileModel.h, for two (chunk, before, after)
// configurations and two variants (dense; causal + key padding + a
// two-parameter score modifier + a user mask), compiled by NVRTC for sm_70
// (the CUDA 12 NVRTC), sm_75, sm_80 and sm_90, fp32/fp16/bf16, head dims 32..256; ptxas's report
// must show no spills, no stack frame, at most 255 registers and exactly the static shared memory
// LshTileModel.h computes (<= 48 KiB). The matrix, the variants and the NVRTC/ptxas plumbing are
// test/unit/support/CudaTestSupport.h's.
//
// Numerics. The same headers compiled by the host compiler run on the
// block emulator of test/unit/support/CudaEmulator.h (real barriers and warp
// intrinsics, checked masks), under several schedules that must agree bit
// for bit (docs/emulator.md), and are compared with a double-precision
// reference of
// docs/kernels.md's LSH semantics written here: buckets and permutation
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
    {"lsh_hash", "attnc_lsh_hash_", [](const LshTile &, int) { return lshHashSmemBytes(); }},
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
          os << "extern \"C\" __global__ void __launch_bounds__(" << t.warps * 32 << ", 1) " << name
             << "(attnc::AttnLshArgs a) {\n  attnc::" << k.body << "<" << cfg.chunk << ", "
             << cfg.before << ", " << cfg.after << ", " << D << ", " << t.blockQ << ", "
             << t.blockKv << ", " << t.warps << ", " << dt.cuda << ", " << v.type << ">(a);\n}\n";
          entries.push_back({name, k.smem(t, D)});
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

std::vector<std::pair<int, const DType *>> nvrtcCells() {
  std::vector<std::pair<int, const DType *>> cells;
  for (int sm : kArchs)
    for (const DType &dt : kDTypes)
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

#include "test/unit/support/CudaEmulator.h"

#include "attnc/lsh.cuh"

namespace {

//===-- Variants ----------------------------------------------------------===//

// Dense, and causal + key padding + cap[h] tanh(s / cap[h]) + slope[h]
// (kv - q) + a window (CudaEmulator.h).
constexpr int kEmuWindow = 24; ///< keep q - kv < 24: bites on small shapes
using EmuDense = emu::DenseVariant;
using EmuMod = emu::ModVariant<kEmuWindow>;

//===-- Reference (double) ------------------------------------------------===//

constexpr double kInf = std::numeric_limits<double>::infinity();

/// Everything but the differentiable inputs.
struct LshSetup {
  int B, H, N, D, R, NB, chunk, before, after;
  double scale;
  bool mod;
  std::vector<int> lengths;   ///< [B]
  std::vector<double> params; ///< [2 * H]: caps, slopes
  std::vector<int> perm;      ///< [B, H, R, Npad]
  float dropout = 0;          ///< attention dropout (0: none)
  unsigned long long dropoutSeed = 0;
  unsigned dropoutOffset = 0;
  int npad() const { return lshPaddedLength(N, chunk); }
  /// The dropout factor of pair (i, j) of round r of head row bh
  /// (AttnLshArgs: the mask of bh * R + r), 1 without dropout.
  double dropoutFactor(int bh, int r, int i, int j) const {
    return refDropoutFactor(dropoutSeed, dropoutOffset, bh * R + r, i, j, dropout);
  }
};

/// Buckets as the kernels compute them (docs/kernels.md: fp32, fmaf in
/// order d = 0..D-1, argmax of [y; -y], first on ties), then the stable
/// counting sort. q is already rounded to the kernel's T.
void refHash(LshSetup &s, const std::vector<float> &q, const std::vector<float> &rot,
             std::vector<int> &buckets) {
  const int half = s.NB / 2, npad = s.npad();
  buckets.assign(size_t(s.B) * s.H * s.R * s.N, 0);
  s.perm.assign(size_t(s.B) * s.H * s.R * npad, -1);
  for (int bh = 0; bh < s.B * s.H; ++bh)
    for (int r = 0; r < s.R; ++r) {
      int *bk = &buckets[(size_t(bh) * s.R + r) * s.N];
      for (int j = 0; j < s.N; ++j) {
        std::vector<float> y(half, 0.f);
        for (int k = 0; k < half; ++k)
          for (int d = 0; d < s.D; ++d)
            y[k] = std::fma(q[(size_t(bh) * s.N + j) * s.D + d],
                            rot[(size_t(r) * s.D + d) * half + k], y[k]);
        int best = 0;
        float bestV = y[0];
        for (int m = 1; m < s.NB; ++m) {
          const float v = m < half ? y[m] : -y[m - half];
          if (v > bestV)
            bestV = v, best = m;
        }
        bk[j] = best;
      }
      int *p = &s.perm[(size_t(bh) * s.R + r) * npad];
      int t = 0;
      for (int b = 0; b < s.NB; ++b)
        for (int j = 0; j < s.N; ++j)
          if (bk[j] == b)
            p[t++] = j;
    }
}

std::vector<double> refKeys(const LshSetup &s, const std::vector<double> &q,
                            std::vector<double> *norms = nullptr) {
  std::vector<double> k(q.size());
  if (norms)
    norms->assign(q.size() / s.D, 0);
  for (size_t row = 0; row < q.size() / s.D; ++row) {
    double n = 0;
    for (int d = 0; d < s.D; ++d)
      n += q[row * s.D + d] * q[row * s.D + d];
    n = std::sqrt(n);
    if (norms)
      (*norms)[row] = n;
    for (int d = 0; d < s.D; ++d)
      k[row * s.D + d] = q[row * s.D + d] / std::max(n, 1e-6);
  }
  return k;
}

/// Calls f(bh, r, i, j) for every kept (query, key) pair of every round.
template <class F> void forPairs(const LshSetup &s, F f) {
  const int npad = s.npad(), C = npad / s.chunk;
  for (int bh = 0; bh < s.B * s.H; ++bh) {
    const int b = bh / s.H;
    for (int r = 0; r < s.R; ++r) {
      const int *p = &s.perm[(size_t(bh) * s.R + r) * npad];
      for (int t = 0; t < s.N; ++t) {
        const int i = p[t], c = t / s.chunk;
        const int u0 = std::max(0, c - s.before) * s.chunk;
        const int u1 = (std::min(C - 1, c + s.after) + 1) * s.chunk;
        for (int u = u0; u < u1; ++u) {
          const int j = p[u];
          if (j < 0)
            continue;
          if (s.mod && (j > i || j >= std::min(s.lengths[b], s.N) || i - j >= kEmuWindow))
            continue;
          f(bh, r, i, j);
        }
      }
    }
  }
}

double dotD(const double *a, const double *b, int n) {
  double r = 0;
  for (int x = 0; x < n; ++x)
    r += a[x] * b[x];
  return r;
}

/// The score of a kept pair and dscore/d(q.k).
double refScore(const LshSetup &s, int bh, int i, int j, double qk, double *dqk = nullptr) {
  if (i == j) {
    if (dqk)
      *dqk = 0;
    return -1e5;
  }
  const double raw = s.scale * qk;
  if (!s.mod) {
    if (dqk)
      *dqk = s.scale;
    return raw;
  }
  const int h = bh % s.H;
  const double cap = s.params[h], slope = s.params[s.H + h], th = std::tanh(raw / cap);
  if (dqk)
    *dqk = (1 - th * th) * s.scale;
  return cap * th + slope * (j - i);
}

/// out, lse (combined over rounds) of the fixed permutation, and each
/// round's lse [B, H, R, N] (-inf where the round keeps nothing).
void refForward(const LshSetup &s, const std::vector<double> &q, const std::vector<double> &v,
                std::vector<double> &out, std::vector<double> &lse,
                std::vector<double> *roundLse = nullptr) {
  const int D = s.D;
  const std::vector<double> k = refKeys(s, q);
  const size_t rows = size_t(s.B) * s.H * s.N;
  // Per round: max, sum and unnormalised output of every row.
  std::vector<double> m(rows * s.R, -kInf), l(rows * s.R, 0), o(rows * s.R * D, 0);
  for (int pass = 0; pass < 2; ++pass)
    forPairs(s, [&](int bh, int r, int i, int j) {
      const size_t qi = size_t(bh) * s.N + i, kj = size_t(bh) * s.N + j;
      const size_t ri = (size_t(bh) * s.R + r) * s.N + i;
      const double sc = refScore(s, bh, i, j, dotD(&q[qi * D], &k[kj * D], D));
      if (pass == 0) {
        m[ri] = std::max(m[ri], sc);
      } else {
        const double p = std::exp(sc - m[ri]), z = s.dropoutFactor(bh, r, i, j);
        l[ri] += p; // the sums keep every probability, V's weights are dropped
        for (int d = 0; d < D; ++d)
          o[ri * D + d] += p * z * v[kj * D + d];
      }
    });
  out.assign(rows * D, 0);
  lse.assign(rows, -kInf);
  if (roundLse)
    roundLse->assign(rows * s.R, -kInf);
  for (int bh = 0; bh < s.B * s.H; ++bh)
    for (int i = 0; i < s.N; ++i) {
      const size_t row = size_t(bh) * s.N + i;
      double mx = -kInf;
      std::vector<double> lr(s.R, -kInf);
      for (int r = 0; r < s.R; ++r) {
        const size_t ri = (size_t(bh) * s.R + r) * s.N + i;
        if (l[ri] > 0)
          lr[r] = m[ri] + std::log(l[ri]);
        if (roundLse)
          (*roundLse)[ri] = lr[r];
        mx = std::max(mx, lr[r]);
      }
      if (mx == -kInf)
        continue;
      double sum = 0;
      for (int r = 0; r < s.R; ++r)
        sum += std::exp(lr[r] - mx);
      lse[row] = mx + std::log(sum);
      for (int r = 0; r < s.R; ++r) {
        if (lr[r] == -kInf)
          continue;
        const size_t ri = (size_t(bh) * s.R + r) * s.N + i;
        const double w = std::exp(lr[r] - lse[row]) / l[ri];
        for (int d = 0; d < D; ++d)
          out[row * D + d] += w * o[ri * D + d];
      }
    }
}

/// Round weights w_ir = exp(lse_ir - M_i) / sum_r' exp(lse_ir' - M_i), M_i =
/// max_r' lse_ir' ([B, H, R, N]; 0 for empty rounds and rows).
std::vector<double> refRoundWeights(const LshSetup &s, const std::vector<double> &roundLse) {
  std::vector<double> w(roundLse.size(), 0);
  for (int bh = 0; bh < s.B * s.H; ++bh)
    for (int i = 0; i < s.N; ++i) {
      auto at = [&](int r) { return (size_t(bh) * s.R + r) * s.N + i; };
      double mx = -kInf, sum = 0;
      for (int r = 0; r < s.R; ++r)
        mx = std::max(mx, roundLse[at(r)]);
      if (mx == -kInf)
        continue;
      for (int r = 0; r < s.R; ++r)
        sum += std::exp(roundLse[at(r)] - mx);
      for (int r = 0; r < s.R; ++r)
        w[at(r)] = std::exp(roundLse[at(r)] - mx) / sum;
    }
  return w;
}

/// dq (through scores and the key normalisation) and dv, from the given
/// out and per-round lse (the kernels' inputs), docs/kernels.md's formulas:
/// p_ijr = exp(s_ij - lse_ir) w_ir, which is exp(s_ij - lse_i) with the
/// combined lse (exactly, in double).
void refBackward(const LshSetup &s, const std::vector<double> &q, const std::vector<double> &v,
                 const std::vector<double> &dout, const std::vector<double> &out,
                 const std::vector<double> &roundLse, std::vector<double> &dq,
                 std::vector<double> &dv) {
  const int D = s.D;
  std::vector<double> norms;
  const std::vector<double> k = refKeys(s, q, &norms);
  const std::vector<double> w = refRoundWeights(s, roundLse);
  const size_t rows = size_t(s.B) * s.H * s.N;
  std::vector<double> delta(rows), dk(rows * D, 0);
  for (size_t row = 0; row < rows; ++row)
    delta[row] = dotD(&dout[row * D], &out[row * D], D);
  dq.assign(rows * D, 0);
  dv.assign(rows * D, 0);
  forPairs(s, [&](int bh, int r, int i, int j) {
    const size_t qi = size_t(bh) * s.N + i, kj = size_t(bh) * s.N + j;
    const size_t ri = (size_t(bh) * s.R + r) * s.N + i;
    if (roundLse[ri] == -kInf)
      return;
    double dsc;
    const double sc = refScore(s, bh, i, j, dotD(&q[qi * D], &k[kj * D], D), &dsc);
    const double p = std::exp(sc - roundLse[ri]) * w[ri], z = s.dropoutFactor(bh, r, i, j);
    const double ds = p * (z * dotD(&dout[qi * D], &v[kj * D], D) - delta[qi]);
    const double g = ds * dsc;
    for (int d = 0; d < D; ++d) {
      dq[qi * D + d] += g * k[kj * D + d];
      dk[kj * D + d] += g * q[qi * D + d];
      dv[kj * D + d] += p * z * dout[qi * D + d];
    }
  });
  for (size_t row = 0; row < rows; ++row) {
    const double kdk = dotD(&k[row * D], &dk[row * D], D);
    for (int d = 0; d < D; ++d)
      dq[row * D + d] += norms[row] > 1e-6 ? (dk[row * D + d] - k[row * D + d] * kdk) / norms[row]
                                           : dk[row * D + d] / 1e-6;
  }
}

//===-- Inputs and buffers ------------------------------------------------===//

using emu::Buffer;
using emu::HostElem;

template <class T> float roundTo(float x) { return HostElem<T>::from(HostElem<T>::to(x)); }

/// Largest |got - ref| / max(1, |ref|) over the elements (absolute error
/// for values up to 1, relative beyond: lse is ~ -1e5 for rows that keep
/// only their own key, where fp32's spacing is 2^-7); infinities must match
/// exactly, everything else be finite (NaN marks an element never written).
double maxError(const char *what, const std::vector<float> &got, const std::vector<double> &ref) {
  EXPECT_EQ(got.size(), ref.size()) << what;
  double maxRef = 0, maxErr = 0, maxAbs = 0;
  size_t worst = 0;
  for (size_t i = 0; i < std::min(got.size(), ref.size()); ++i) {
    if (std::isinf(ref[i])) {
      EXPECT_EQ(double(got[i]), ref[i]) << what << "[" << i << "]";
      continue;
    }
    if (!std::isfinite(got[i])) {
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", want " << ref[i];
      return kInf;
    }
    maxRef = std::max(maxRef, std::fabs(ref[i]));
    const double abs = std::fabs(got[i] - ref[i]), err = abs / std::max(1.0, std::fabs(ref[i]));
    if (std::fabs(ref[i]) <= 1.0)
      maxAbs = std::max(maxAbs, abs);
    if (err > maxErr)
      maxErr = err, worst = i;
  }
  std::printf("  %-6s max |err| / max(1, |ref|) %.2e (at %zu: got %.9g want %.9g), max "
              "|err| where |ref| <= 1 %.2e, max |ref| %.4g\n",
              what, maxErr, worst, worst < got.size() ? got[worst] : 0.0,
              worst < ref.size() ? ref[worst] : 0.0, maxAbs, maxRef);
  return maxErr;
}

struct Shape {
  int B, H, N, R, NB;
  float scale;
};

/// Hash, forward and backward of one (T, config, tile, variant) against
/// the reference, on the emulator, under `schedules` schedules
/// (emu::testSchedules) whose results must agree bit for bit.
template <class T, int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS, class V>
void runLsh(const Shape &shape, double tol, const char *dtype, size_t *selfOnlyRows = nullptr,
            int schedules = 3) {
  constexpr bool kMod = V::kNumParams > 0;
  LshSetup s{shape.B, shape.H, shape.N,     D,    shape.R, shape.NB, CHUNK,
             BEFORE,  AFTER,   shape.scale, kMod, {},      {},       {}};
  std::printf("%s D=%d chunk %d (-%d, +%d) tile %dx%d w%d, %s, B=%d H=%d N=%d R=%d NB=%d\n", dtype,
              D, CHUNK, BEFORE, AFTER, BQ, BKV, WARPS, kMod ? "modified" : "dense", s.B, s.H, s.N,
              s.R, s.NB);
  for (int b = 0; b < s.B; ++b) // full, partial and empty key sets
    s.lengths.push_back(b == 0 ? s.N : b == 1 ? s.N - 13 : 0);
  for (int h = 0; h < s.H; ++h)
    s.params.push_back(roundTo<float>(2.5f + h));
  for (int h = 0; h < s.H; ++h)
    s.params.push_back(double(0.03f * (h + 1)));

  unsigned state = 12345u + unsigned(s.N * 7 + D);
  auto rnd = [&] {
    state = state * 1664525u + 1013904223u;
    return float(state >> 8) / float(1 << 24) * 2.0f - 1.0f;
  };
  const size_t rows = size_t(s.B) * s.H * s.N, elems = rows * D;
  std::vector<float> qf(elems), vf(elems), doutf(elems);
  for (auto *t : {&qf, &vf, &doutf})
    for (float &x : *t)
      x = roundTo<T>(rnd());
  std::vector<float> rot(size_t(s.R) * D * (s.NB / 2));
  for (float &x : rot)
    x = rnd() * 1.7f; // any distribution: only the argmax matters
  // A repeated position: equal buckets in every round (ties in the sort).
  if (s.N > 9)
    for (int d = 0; d < D; ++d)
      qf[size_t(9) * D + d] = qf[size_t(2) * D + d];

  std::vector<int> refBuckets;
  refHash(s, qf, rot, refBuckets);
  const std::vector<double> q(qf.begin(), qf.end()), v(vf.begin(), vf.end()),
      dout(doutf.begin(), doutf.end());

  const int npad = s.npad(), BH = s.B * s.H;
  Buffer<T> bq(qf), bv(vf), bdout(doutf), bout(elems), bdq(elems), bdv(elems);
  Buffer<float> blse(rows), brot(rot), bparams(std::vector<double>(s.params)), bkeys(elems),
      bround(size_t(s.R) * elems), broundLse(size_t(s.R) * rows), bdelta(rows),
      brdq(size_t(s.R) * elems), brdk(size_t(s.R) * elems), brdv(size_t(s.R) * elems);
  Buffer<int> blengths(s.lengths), bbuckets(size_t(BH) * s.R * s.N), bperm(size_t(BH) * s.R * npad);
  attnc::AttnLshArgs a{};
  a.q = bq.ptr();
  a.v = bv.ptr();
  a.out = bout.ptr();
  a.lse = blse.ptr();
  a.dout = bdout.ptr();
  a.dq = bdq.ptr();
  a.dv = bdv.ptr();
  a.lengths = kMod ? blengths.ptr() : nullptr;
  a.params = kMod ? bparams.ptr() : nullptr;
  a.rotations = brot.ptr();
  a.buckets = bbuckets.ptr();
  a.perm = bperm.ptr();
  a.keys = bkeys.ptr();
  a.round_out = bround.ptr();
  a.round_lse = broundLse.ptr();
  a.delta = bdelta.ptr();
  a.round_dq = brdq.ptr();
  a.round_dk = brdk.ptr();
  a.round_dv = brdv.ptr();
  a.B = s.B;
  a.H = s.H;
  a.N = s.N;
  a.rounds = s.R;
  a.num_buckets = s.NB;
  a.scale = shape.scale;
  if (V::kDropout) {
    s.dropout = 0.25f, s.dropoutSeed = 0xd20b5eedull, s.dropoutOffset = 3;
    a.dropout = s.dropout, a.dropout_seed = s.dropoutSeed, a.dropout_offset = s.dropoutOffset;
  }

  constexpr int NT = WARPS * 32;
  const LshTile tile{BQ, BKV, WARPS};
  const LshGrid gh = lshHashGrid(BH, s.R), gf = lshFwdGrid(tile, s.N, CHUNK, BH, s.R),
                gdq = lshBwdDqGrid(tile, s.N, CHUNK, BH, s.R),
                gdk = lshBwdDkdvGrid(tile, s.N, CHUNK, BH, s.R), grow = lshRowGrid(s.N, BH);
  for (const LshGrid &g : {gh, gf, gdq, gdk, grow}) // what a GPU takes
    ASSERT_TRUE(g.y <= 65535 && g.x <= attnc::tile::kMaxGridX) << "grid " << g.x << " x " << g.y;
#define ATTNC_LSH_ARGS CHUNK, BEFORE, AFTER, D, BQ, BKV, WARPS, T, V
  // Hash, forward and combine; then (after `a` points at the backward's
  // inputs) hash, preprocess, dq, dk/dv and combine. False when the
  // emulator finds a fault (the test failure says which).
  auto launched = [](bool ok, const char *kernel) {
    if (!ok)
      ADD_FAILURE() << kernel << " under schedule " << emu::schedule.name() << ": "
                    << emu::lastError;
    return ok;
  };
  auto forward = [&](const attnc::AttnLshArgs &x) {
    return launched(emu::launch(gh.x, gh.y, NT, [&] { attnc::lsh_hash<ATTNC_LSH_ARGS>(x); }),
                    "hash") &&
           launched(emu::launch(gf.x, gf.y, NT, [&] { attnc::lsh_fwd<ATTNC_LSH_ARGS>(x); }),
                    "forward") &&
           launched(emu::launch(grow.x, grow.y, NT, [&] { attnc::lsh_combine<ATTNC_LSH_ARGS>(x); }),
                    "combine");
  };
  auto backward = [&](const attnc::AttnLshArgs &x) {
    return launched(emu::launch(gh.x, gh.y, NT, [&] { attnc::lsh_hash<ATTNC_LSH_ARGS>(x); }),
                    "hash") &&
           launched(emu::launch(grow.x, grow.y, NT,
                                [&] { attnc::lsh_bwd_preprocess<ATTNC_LSH_ARGS>(x); }),
                    "backward preprocess") &&
           launched(emu::launch(gdq.x, gdq.y, NT, [&] { attnc::lsh_bwd_dq<ATTNC_LSH_ARGS>(x); }),
                    "dq") &&
           launched(emu::launch(gdk.x, gdk.y, NT, [&] { attnc::lsh_bwd_dkdv<ATTNC_LSH_ARGS>(x); }),
                    "dkdv") &&
           launched(
               emu::launch(grow.x, grow.y, NT, [&] { attnc::lsh_bwd_combine<ATTNC_LSH_ARGS>(x); }),
               "backward combine");
  };
#undef ATTNC_LSH_ARGS
  const std::vector<emu::Schedule> scheds = emu::testSchedules(schedules, 7u + unsigned(D + BQ));
  std::optional<emu::ScheduleScope> first(std::in_place, scheds[0]);
  ASSERT_TRUE(forward(a));

  // Hash and sort: exact.
  {
    std::vector<float> got = bbuckets.values();
    size_t bad = 0;
    for (size_t x = 0; x < refBuckets.size(); ++x)
      bad += got[x] != float(refBuckets[x]);
    EXPECT_EQ(bad, 0u) << "buckets differ";
    got = bperm.values();
    bad = 0;
    for (size_t x = 0; x < s.perm.size(); ++x)
      bad += got[x] != float(s.perm[x]);
    EXPECT_EQ(bad, 0u) << "permutation differs";
    const std::vector<double> keys = refKeys(s, q);
    EXPECT_LE(maxError("keys", bkeys.values(), keys), 1e-6);
  }

  std::vector<double> refOut, refLse, refRoundLse;
  refForward(s, q, v, refOut, refLse, &refRoundLse);
  const double eOut = maxError("out", bout.values(), refOut);
  const double eLse = maxError("lse", blse.values(), refLse);
  const double eRoundLse = maxError("rlse", broundLse.values(), refRoundLse);
  EXPECT_LE(eOut, tol);
  EXPECT_LE(eLse, tol);
  EXPECT_LE(eRoundLse, tol);

  // Backward from the reference's out (rounded to T), lse and per-round lse
  // (fp32; the backward reads round_lse, the combined lse is passed as the
  // runtime does).
  Buffer<T> bout2(refOut);
  Buffer<float> blse2(refLse), broundLse2(refRoundLse);
  a.out = bout2.ptr();
  a.lse = blse2.ptr();
  a.round_lse = broundLse2.ptr();
  const std::vector<float> roundLseIn = broundLse2.values();
  std::vector<double> outT, roundLseF(roundLseIn.begin(), roundLseIn.end());
  for (float x : bout2.values())
    outT.push_back(x);
  ASSERT_TRUE(backward(a));
  first.reset();
  std::vector<double> rdq, rdv;
  refBackward(s, q, v, dout, outT, roundLseF, rdq, rdv);
  std::vector<double> refDelta(rows);
  for (size_t row = 0; row < rows; ++row)
    refDelta[row] = dotD(&dout[row * D], &outT[row * D], D);
  const double eDelta = maxError("delta", bdelta.values(), refDelta);
  const double eDq = maxError("dq", bdq.values(), rdq);
  const double eDv = maxError("dv", bdv.values(), rdv);
  EXPECT_LE(eDelta, tol);
  EXPECT_LE(eDq, tol);
  EXPECT_LE(eDv, tol);
  EXPECT_TRUE(broundLse2.values() == roundLseIn) << "the backward changed round_lse";

  // Rows whose only kept key, in two rounds or more, is their own (self
  // score -1e5, lse_i = -1e5 + log(rounds)): their p must not go through
  // the fp32 rounding of lse_i (~4e-3 at 1e5). In fp32, dq and dv of these
  // rows match to 1e-6.
  {
    std::vector<int> selfPairs(rows, 0), otherPairs(rows, 0);
    forPairs(s, [&](int bh, int, int i, int j) {
      (i == j ? selfPairs : otherPairs)[size_t(bh) * s.N + i]++;
    });
    std::vector<float> gotDq = bdq.values(), gotDv = bdv.values(), selfDq, selfDv;
    std::vector<double> refSelfDq, refSelfDv;
    size_t count = 0;
    for (size_t row = 0; row < rows; ++row) {
      if (selfPairs[row] < 2 || otherPairs[row] != 0)
        continue;
      ++count;
      for (int d = 0; d < D; ++d) {
        selfDq.push_back(gotDq[row * D + d]);
        selfDv.push_back(gotDv[row * D + d]);
        refSelfDq.push_back(rdq[row * D + d]);
        refSelfDv.push_back(rdv[row * D + d]);
      }
    }
    if (selfOnlyRows)
      *selfOnlyRows = count;
    if (count > 0) {
      std::printf("  %zu self-only rows:\n", count);
      const double selfTol = std::is_same_v<T, float> ? 1e-6 : tol;
      EXPECT_LE(maxError("dq[s]", selfDq, refSelfDq), selfTol);
      EXPECT_LE(maxError("dv[s]", selfDv, refSelfDv), selfTol);
    }
  }

  for (bool ok :
       {bq.guardsIntact(), bv.guardsIntact(), bdout.guardsIntact(), bout.guardsIntact(),
        bdq.guardsIntact(), bdv.guardsIntact(), blse.guardsIntact(), bkeys.guardsIntact(),
        bround.guardsIntact(), broundLse.guardsIntact(), bdelta.guardsIntact(), brdq.guardsIntact(),
        brdk.guardsIntact(), brdv.guardsIntact(), bbuckets.guardsIntact(), bperm.guardsIntact(),
        bout2.guardsIntact(), blse2.guardsIntact(), broundLse2.guardsIntact()})
    EXPECT_TRUE(ok) << "a kernel wrote out of bounds";

  // The other schedules: the same launches into fresh outputs. A race makes
  // the result depend on the schedule.
  const std::vector<float> want[] = {bbuckets.values(), bperm.values(), bkeys.values(),
                                     bout.values(),     blse.values(),  broundLse.values(),
                                     bdelta.values(),   bdq.values(),   bdv.values()};
  for (size_t i = 1; i < scheds.size(); ++i) {
    emu::ScheduleScope scope(scheds[i]);
    Buffer<T> out(elems), dq(elems), dv(elems);
    Buffer<float> lse(rows), keys(elems), round(size_t(s.R) * elems), roundLse(size_t(s.R) * rows),
        delta(rows), rdq(size_t(s.R) * elems), rdk(size_t(s.R) * elems), rdv(size_t(s.R) * elems);
    Buffer<int> buckets(size_t(BH) * s.R * s.N), perm(size_t(BH) * s.R * npad);
    attnc::AttnLshArgs x = a;
    x.out = out.ptr();
    x.lse = lse.ptr();
    x.keys = keys.ptr();
    x.round_out = round.ptr();
    x.round_lse = roundLse.ptr();
    x.buckets = buckets.ptr();
    x.perm = perm.ptr();
    ASSERT_TRUE(forward(x));
    const std::vector<float> fwdOut = out.values(), fwdLse = lse.values(),
                             fwdRoundLse = roundLse.values();
    x.out = bout2.ptr();
    x.lse = blse2.ptr();
    x.round_lse = broundLse2.ptr();
    x.delta = delta.ptr();
    x.dq = dq.ptr();
    x.dv = dv.ptr();
    x.round_dq = rdq.ptr();
    x.round_dk = rdk.ptr();
    x.round_dv = rdv.ptr();
    ASSERT_TRUE(backward(x));
    const std::vector<float> got[] = {buckets.values(), perm.values(), keys.values(),
                                      fwdOut,           fwdLse,        fwdRoundLse,
                                      delta.values(),   dq.values(),   dv.values()};
    const char *names[] = {"buckets", "perm", "keys", "out", "lse", "rlse", "delta", "dq", "dv"};
    bool same = true;
    for (size_t k = 0; k < std::size(names); ++k) {
      const long long at = emu::firstBitDifference(got[k], want[k]);
      if (at >= 0) {
        same = false;
        ADD_FAILURE() << names[k] << " under schedule " << scheds[i].name()
                      << " differs from schedule " << scheds[0].name() << " at element " << at
                      << ": " << got[k][size_t(at)] << " vs " << want[k][size_t(at)];
      }
    }
    if (same)
      std::printf("  schedule %s: bit-identical to %s\n", scheds[i].name().c_str(),
                  scheds[0].name().c_str());
  }
}

// Tolerances on max |err| / max(1, |ref|): fp32 computes in fp32
// throughout; fp16/bf16 round out, dq and dv to T at the end.
constexpr double kTolFp32 = 1e-5, kTolFp16 = 2e-3, kTolBf16 = 1.6e-2;

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
