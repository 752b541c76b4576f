//===- CudaEmulatedLsh.h - The LSH kernels on the host --------------------===//
//
// The CUDA LSH kernels (kernels/cuda/attnc/lsh.cuh) compiled by the host
// compiler and run on the block emulator (simt_emulator.h,
// docs/emulator.md), with ldmatrix, mma and cp.async from
// tensor_core_emulator.h for the tensor-core forward, against a
// double-precision reference of docs/kernels.md's LSH semantics: runLsh.
// Included by CudaLshTest.cpp (the m16n8k16 path, cp.async) and, with
// ATTNC_EMULATE_ARCH=700 defined first, by CudaLshVoltaTest.cpp (Volta's
// m8n8k4 path, synchronous copies).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_TEST_UNIT_CUDAEMULATEDLSH_H
#define ATTNC_TEST_UNIT_CUDAEMULATEDLSH_H

#include "attnc/abi/LshTileModel.h"

#include "DropoutReference.h"

#include <gtest/gtest.h>

// The block emulator, what tests hand the kernels (CudaEmulator.h), then
// ldmatrix, mma and cp.async (tensor_core_emulator.h), then the kernels.
#include "CudaEmulator.h"

#include "attnc/tensor_core_emulator.h"

#include "attnc/lsh.cuh"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace {

using namespace attnc::tile;

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
  // The forward the emitter picks: on tensor cores with its own tile
  // where LshTileModel.h gives one (fp16/bf16, chunks of 16-row tiles).
  constexpr bool kMmaFwd = lshMmaFwd(CHUNK, D, int(sizeof(T)));
  constexpr bool kMmaBwd = lshMmaBwd(CHUNK, D, int(sizeof(T)));
  constexpr LshTile kFwdTile = lshFwdLaunchTile({BQ, BKV, WARPS}, CHUNK, D, int(sizeof(T)));
  constexpr LshTile kBwdTile = lshBwdLaunchTile({BQ, BKV, WARPS}, CHUNK, D, int(sizeof(T)));
  std::printf("%s D=%d chunk %d (-%d, +%d) tile %dx%d w%d, forward %s, %s, B=%d H=%d N=%d R=%d "
              "NB=%d\n",
              dtype, D, CHUNK, BEFORE, AFTER, BQ, BKV, WARPS, kMmaFwd ? "on tensor cores" : "SIMT",
              kMod ? "modified" : "dense", s.B, s.H, s.N, s.R, s.NB);
  if (kMmaFwd)
    std::printf("  tensor-core forward tile %dx%d w%d\n", kFwdTile.blockQ, kFwdTile.blockKv,
                kFwdTile.warps);
  if (kMmaBwd)
    std::printf("  tensor-core backward tile %dx%d w%d\n", kBwdTile.blockQ, kBwdTile.blockKv,
                kBwdTile.warps);
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
  const size_t sortCounts = size_t(lshSortCounts(s.N, WARPS * 32, s.NB, BH, s.R));
  Buffer<int> bcounts(sortCounts);
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
  a.sort_counts = bcounts.ptr();
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
  const LshGrid gh = lshHashTileGrid(s.N, NT, BH, s.R), gso = lshHashGrid(BH, s.R),
                gf = lshFwdGrid(kFwdTile, s.N, CHUNK, BH, s.R),
                gdq = lshBwdDqGrid(kBwdTile, s.N, CHUNK, BH, s.R),
                gdk = lshBwdDkdvGrid(kBwdTile, s.N, CHUNK, BH, s.R), grow = lshRowGrid(s.N, BH);
  for (const LshGrid &g : {gh, gso, gf, gdq, gdk, grow}) // what a GPU takes
    ASSERT_TRUE(g.y <= 65535 && g.x <= attnc::tile::kMaxGridX) << "grid " << g.x << " x " << g.y;
#define ATTNC_LSH_ARGS CHUNK, BEFORE, AFTER, D, BQ, BKV, WARPS, T, V
#define ATTNC_LSH_MMA_BWD_ARGS                                                                     \
  CHUNK, BEFORE, AFTER, D, kBwdTile.blockQ, kBwdTile.blockKv, kBwdTile.warps, T, V
  // Hash, forward and combine; then (after `a` points at the backward's
  // inputs) hash, preprocess, dq, dk/dv and combine. False when the
  // emulator finds a fault (the test failure says which).
  auto launched = [](bool ok, const char *kernel) {
    if (!ok)
      ADD_FAILURE() << kernel << " under schedule " << emu::schedule.name() << ": "
                    << emu::lastError;
    return ok;
  };
  // The hash and the multi-block sort (lsh_hash.cuh).
  auto sorted = [&](const attnc::AttnLshArgs &x) {
    return launched(emu::launch(gh.x, gh.y, NT, [&] { attnc::lsh_hash<ATTNC_LSH_ARGS>(x); }),
                    "hash") &&
           launched(
               emu::launch(gso.x, gso.y, NT, [&] { attnc::lsh_sort_offsets<ATTNC_LSH_ARGS>(x); }),
               "sort offsets") &&
           launched(
               emu::launch(gh.x, gh.y, NT, [&] { attnc::lsh_sort_scatter<ATTNC_LSH_ARGS>(x); }),
               "sort scatter");
  };
  auto forward = [&](const attnc::AttnLshArgs &x) {
    return sorted(x) &&
           launched(emu::launch(gf.x, gf.y, kFwdTile.warps * 32,
                                [&] {
                                  if constexpr (kMmaFwd)
                                    attnc::lsh_fwd_mma<CHUNK, BEFORE, AFTER, D, kFwdTile.blockQ,
                                                       kFwdTile.blockKv, kFwdTile.warps, T, V>(x);
                                  else
                                    attnc::lsh_fwd<ATTNC_LSH_ARGS>(x);
                                }),
                    "forward") &&
           launched(emu::launch(grow.x, grow.y, NT, [&] { attnc::lsh_combine<ATTNC_LSH_ARGS>(x); }),
                    "combine");
  };
  auto backward = [&](const attnc::AttnLshArgs &x) {
    return sorted(x) &&
           launched(emu::launch(grow.x, grow.y, NT,
                                [&] { attnc::lsh_bwd_preprocess<ATTNC_LSH_ARGS>(x); }),
                    "backward preprocess") &&
           launched(emu::launch(gdq.x, gdq.y, kBwdTile.warps * 32,
                                [&] {
                                  if constexpr (kMmaBwd)
                                    attnc::lsh_bwd_dq_mma<ATTNC_LSH_MMA_BWD_ARGS>(x);
                                  else
                                    attnc::lsh_bwd_dq<ATTNC_LSH_ARGS>(x);
                                }),
                    "dq") &&
           launched(emu::launch(gdk.x, gdk.y, kBwdTile.warps * 32,
                                [&] {
                                  if constexpr (kMmaBwd)
                                    attnc::lsh_bwd_dkdv_mma<ATTNC_LSH_MMA_BWD_ARGS>(x);
                                  else
                                    attnc::lsh_bwd_dkdv<ATTNC_LSH_ARGS>(x);
                                }),
                    "dkdv") &&
           launched(
               emu::launch(grow.x, grow.y, NT, [&] { attnc::lsh_bwd_combine<ATTNC_LSH_ARGS>(x); }),
               "backward combine");
  };
#undef ATTNC_LSH_ARGS
#undef ATTNC_LSH_MMA_BWD_ARGS
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
    const std::vector<float> gotRoundLse = broundLse.values();
    std::vector<double> refSelfDq, refSelfDv;
    size_t count = 0;
    for (size_t row = 0; row < rows; ++row) {
      if (selfPairs[row] < 2 || otherPairs[row] != 0)
        continue;
      ++count;
      // The forward's round lse of such a row is the self score exactly,
      // in every dtype (the backward's p = exp(s - lse_ir) is then 1).
      const size_t bh = row / size_t(s.N), i = row % size_t(s.N);
      for (int r = 0; r < s.R; ++r) {
        const size_t ri = (bh * s.R + r) * s.N + i;
        EXPECT_EQ(double(gotRoundLse[ri]), refRoundLse[ri]) << "round_lse of self-only row " << row;
      }
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

  for (bool ok : {bq.guardsIntact(),        bv.guardsIntact(),        bdout.guardsIntact(),
                  bout.guardsIntact(),      bdq.guardsIntact(),       bdv.guardsIntact(),
                  blse.guardsIntact(),      bkeys.guardsIntact(),     bround.guardsIntact(),
                  broundLse.guardsIntact(), bdelta.guardsIntact(),    brdq.guardsIntact(),
                  brdk.guardsIntact(),      brdv.guardsIntact(),      bbuckets.guardsIntact(),
                  bperm.guardsIntact(),     bcounts.guardsIntact(),   bout2.guardsIntact(),
                  blse2.guardsIntact(),     broundLse2.guardsIntact()})
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
    Buffer<int> buckets(size_t(BH) * s.R * s.N), perm(size_t(BH) * s.R * npad), counts(sortCounts);
    attnc::AttnLshArgs x = a;
    x.out = out.ptr();
    x.lse = lse.ptr();
    x.keys = keys.ptr();
    x.round_out = round.ptr();
    x.round_lse = roundLse.ptr();
    x.buckets = buckets.ptr();
    x.perm = perm.ptr();
    x.sort_counts = counts.ptr();
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

} // namespace

#endif // ATTNC_TEST_UNIT_CUDAEMULATEDLSH_H
