//===- CpuLshTest.cpp - CPU LSH attention kernels vs a double reference ---===//
//
// kernels/cpu/attnc/lsh.h (lsh_fwd, lsh_bwd) against a naive
// double-precision reference written here from docs/kernels.md "LSH kernels
// (Reformer)", independently of the kernels: per (b, h) the keys
// q / max(|q|, 1e-6), per round the buckets (argmax over [x·R; −x·R], first
// index on ties), std::stable_sort of the positions by bucket, then for each
// query slot a dense softmax over the kept keys of its chunk window, and the
// rounds combined by logsumexp; the backward by the analytic formulas (one
// softmax over the multiset union of the rounds' pairs, then the
// normalisation backward). The reference backward is itself validated by
// central finite differences in double, and the kernel's fp32 gradient by a
// directional finite difference.
//
// The hash is a discrete decision: the kernel computes x·R in fp32, the
// reference in double. Inputs are drawn so that no decision is ambiguous at
// fp32: a query row whose best and second-best hash value are closer than a
// rounding-error bound (4·D·2⁻²⁴·max_k Σ_d |x_d R_dk|) in some round is
// redrawn (rows that are exactly zero hash to bucket 0 in both).
//
// Tolerance: |kernel − reference| ≤ 1e-4·max(1, |reference|) for out, lse,
// dq, dv (lse can sit at −1e5 + log(rounds) when a row keeps only its own
// key, which fp32 holds to ~4e-3); lse = −inf must match exactly; no NaN.
// The reference backward takes the forward's saved out and lse from the
// kernel (fp32), as the kernel backward does: p = exp(s − lse) of a row at
// the −1e5 self score depends on lse's fp32 rounding (up to ~0.4%).
//
// Timing (not a check): --gtest_also_run_disabled_tests
// --gtest_filter='*Timing*' prints lsh_fwd / lsh_bwd per token at N = 4096
// and 16384 (B = 1, H = 4, D = 64, 4 rounds, 64 buckets, chunk 64, (1, 0)).
//
//===----------------------------------------------------------------------===//
#include "attnc/lsh.h"

#include "test/unit/support/DropoutReference.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;
using attnc::AttnLshArgs;
constexpr double kInfD = std::numeric_limits<double>::infinity();
constexpr double kTol = 1e-4;

//===----------------------------------------------------------------------===//
// Variants under test (in the form the emitter generates), each with the
// double-precision functions the reference uses (ref*).
//===----------------------------------------------------------------------===//

/// No score modifier, no user mask.
template <bool CAUSAL, bool PAD> struct Plain {
  static constexpr bool kCausal = CAUSAL;
  static constexpr bool kKeyPadding = PAD;
  static constexpr bool kHasScoreMod = false;
  static constexpr bool kHasMask = false;
  static constexpr int kNumParams = 0;
  static constexpr bool kHasMaxBack = false, kHasMaxAhead = false;
  static constexpr bool kDropout = false;
  static constexpr int kMaxBack = 0, kMaxAhead = 0;
  ATTNC_HD static float score(float s, int, int, int, int, const float *, int) { return s; }
  ATTNC_HD static float score_grad(float, int, int, int, int, const float *, int, float *) {
    return 1.0f;
  }
  ATTNC_HD static bool keep(int, int, int, int, const float *, int) { return true; }
  static double refScore(double s, int, int, int, int, const float *, int) { return s; }
  static double refGrad(double, int, int, int, int, const float *, int) { return 1.0; }
  static bool refKeep(int, int, int, int, const float *, int) { return true; }
};

/// ALiBi-like modifier with two const per-head parameters, temp = p[h] and
/// slope = p[H + h]: s·temp − slope·|q − kv|; user mask |q − kv| < 24.
template <bool CAUSAL, bool PAD> struct Alibi {
  static constexpr bool kCausal = CAUSAL;
  static constexpr bool kKeyPadding = PAD;
  static constexpr bool kHasScoreMod = true;
  static constexpr bool kHasMask = true;
  static constexpr int kNumParams = 2;
  static constexpr bool kHasMaxBack = false, kHasMaxAhead = false;
  static constexpr bool kDropout = false;
  static constexpr int kMaxBack = 0, kMaxAhead = 0;
  ATTNC_HD static int clampHead(int h, int H) { return h < 0 ? 0 : (h >= H ? H - 1 : h); }
  ATTNC_HD static float score(float s, int, int h, int q, int kv, const float *params, int H) {
    const int hh = clampHead(h, H);
    const int d = q - kv;
    return s * params[0 * H + hh] - params[1 * H + hh] * static_cast<float>(d < 0 ? -d : d);
  }
  ATTNC_HD static float score_grad(float s, int, int h, int q, int kv, const float *params, int H,
                                   float *dparams) {
    const int hh = clampHead(h, H);
    const int d = q - kv;
    dparams[0] = s;
    dparams[1] = -static_cast<float>(d < 0 ? -d : d);
    return params[0 * H + hh];
  }
  ATTNC_HD static bool keep(int, int, int q, int kv, const float *, int) {
    const int d = q - kv;
    return (d < 0 ? -d : d) < 24;
  }
  static double refScore(double s, int, int h, int q, int kv, const float *params, int H) {
    return s * double(params[h]) - double(params[H + h]) * std::abs(q - kv);
  }
  static double refGrad(double, int, int h, int, int, const float *params, int) {
    return double(params[h]);
  }
  static bool refKeep(int, int, int q, int kv, const float *, int) { return std::abs(q - kv) < 24; }
};

/// Rows q ≡ 1 (mod 3) keep nothing (not even their own key); key padding.
struct RowMask {
  static constexpr bool kCausal = false;
  static constexpr bool kKeyPadding = true;
  static constexpr bool kHasScoreMod = false;
  static constexpr bool kHasMask = true;
  static constexpr int kNumParams = 0;
  static constexpr bool kHasMaxBack = false, kHasMaxAhead = false;
  static constexpr bool kDropout = false;
  static constexpr int kMaxBack = 0, kMaxAhead = 0;
  ATTNC_HD static float score(float s, int, int, int, int, const float *, int) { return s; }
  ATTNC_HD static float score_grad(float, int, int, int, int, const float *, int, float *) {
    return 1.0f;
  }
  ATTNC_HD static bool keep(int, int, int q, int, const float *, int) { return q % 3 != 1; }
  static double refScore(double s, int, int, int, int, const float *, int) { return s; }
  static double refGrad(double, int, int, int, int, const float *, int) { return 1.0; }
  static bool refKeep(int, int, int q, int, const float *, int) { return q % 3 != 1; }
};

//===----------------------------------------------------------------------===//
// Problems
//===----------------------------------------------------------------------===//

struct Problem {
  int B = 2, H = 2, N = 1, D = 32, R = 1, NB = 2;
  int chunk = 4, before = 1, after = 0;
  float scale = 0.25f;
  bool causal = false, pad = false;
  int numParams = 0;
  Vec q, v, dout, rot, params; // rot: [R, D, NB/2]
  std::vector<int> lengths;
  float dropout = 0; ///< attention dropout (variants with kDropout), kLshDrop*
  unsigned long long dropoutSeed = 0;
  unsigned dropoutOffset = 0;
  int Npad() const { return (N + chunk - 1) / chunk * chunk; }
  std::size_t rows() const { return std::size_t(B) * H * N; }
};

/// Bucket of x (double) in round r, and whether the decision is unambiguous
/// at fp32 (margin above a rounding bound, or x exactly zero).
int refBucket(const double *x, const float *rotR, int D, int NB2, bool *clear) {
  DVec y(2 * NB2);
  double mag = 0.0;
  bool zero = true;
  for (int d = 0; d < D; ++d)
    zero = zero && x[d] == 0.0;
  for (int k = 0; k < NB2; ++k) {
    double acc = 0.0, a = 0.0;
    for (int d = 0; d < D; ++d) {
      acc += x[d] * double(rotR[std::size_t(d) * NB2 + k]);
      a += std::fabs(x[d] * double(rotR[std::size_t(d) * NB2 + k]));
    }
    y[k] = acc;
    y[NB2 + k] = -acc;
    mag = std::max(mag, a);
  }
  int best = 0;
  for (int k = 1; k < 2 * NB2; ++k)
    if (y[k] > y[best])
      best = k;
  // Exact ties (duplicated or negated rotation columns) are exact in fp32
  // too; the margin is to the best value that differs.
  double second = -kInfD;
  for (int k = 0; k < 2 * NB2; ++k)
    if (y[k] != y[best])
      second = std::max(second, y[k]);
  if (clear)
    *clear = zero || (y[best] - second) > 4.0 * D * std::ldexp(1.0, -24) * mag;
  return best;
}

Vec randn(std::size_t n, std::mt19937 &g) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Vec x(n);
  for (auto &e : x)
    e = nd(g);
  return x;
}

/// Random problem; query rows with an ambiguous hash in some round redrawn.
/// With `tiedRotations` (NB = 16), every round's column 4 repeats column 0
/// and column 5 is −column 1, so [y; −y] has exact ties (0, 4), (1, 13),
/// (5, 9), (8, 12), each pair with buckets in use in between.
Problem makeProblem(int B, int H, int N, int D, int R, int NB, int chunk, int before, int after,
                    bool causal, bool pad, int numParams, unsigned seed,
                    bool tiedRotations = false) {
  Problem p;
  p.B = B, p.H = H, p.N = N, p.D = D, p.R = R, p.NB = NB;
  p.chunk = chunk, p.before = before, p.after = after;
  p.causal = causal, p.pad = pad, p.numParams = numParams;
  p.scale = 2.0f / std::sqrt(float(D));
  std::mt19937 g(seed);
  p.rot = randn(std::size_t(R) * D * (NB / 2), g);
  if (tiedRotations) {
    EXPECT_EQ(NB, 16);
    for (int r = 0; r < R; ++r)
      for (int d = 0; d < D; ++d) {
        float *row = p.rot.data() + (std::size_t(r) * D + d) * 8;
        row[4] = row[0];
        row[5] = -row[1];
      }
  }
  p.q = randn(p.rows() * D, g);
  p.v = randn(p.rows() * D, g);
  p.dout = randn(p.rows() * D, g);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  DVec x(D);
  for (std::size_t row = 0; row < p.rows(); ++row) {
    float *qr = p.q.data() + row * D;
    for (int attempt = 0;; ++attempt) {
      for (int d = 0; d < D; ++d)
        x[d] = qr[d];
      bool ok = true;
      for (int r = 0; r < R && ok; ++r)
        refBucket(x.data(), p.rot.data() + std::size_t(r) * D * (NB / 2), D, NB / 2, &ok);
      if (ok)
        break;
      EXPECT_LT(attempt, 1000) << "cannot draw an unambiguous row";
      if (attempt >= 1000)
        break;
      for (int d = 0; d < D; ++d)
        qr[d] = nd(g);
    }
  }
  if (numParams > 0) {
    std::uniform_real_distribution<float> temp(0.5f, 1.5f), slope(0.0f, 0.1f);
    p.params.resize(std::size_t(numParams) * H);
    for (int h = 0; h < H; ++h) {
      p.params[h] = temp(g);
      p.params[H + h] = slope(g);
    }
  }
  // Key padding: lengths 0, partial and above N (clamped), cycling.
  for (int b = 0; b < B; ++b)
    p.lengths.push_back(b % 3 == 0 ? (N + 1) / 2 : (b % 3 == 1 ? 0 : N + 2));
  return p;
}

//===----------------------------------------------------------------------===//
// Double-precision reference
//===----------------------------------------------------------------------===//

struct RefResult {
  DVec out, lse, dq, dv;
  std::vector<int> perm; // [B, H, R, Npad]
};

/// Keys, buckets and the stably sorted permutation of one (b, h).
struct RefHead {
  DVec keys, norms;
  std::vector<std::vector<int>> perm; // [R][Npad]
};

RefHead refHead(const Problem &p, const DVec &q, int b, int h) {
  const int N = p.N, D = p.D, NB2 = p.NB / 2;
  RefHead rh;
  rh.keys.assign(std::size_t(N) * D, 0.0);
  rh.norms.assign(N, 0.0);
  const double *qb = q.data() + (std::size_t(b) * p.H + h) * N * D;
  for (int n = 0; n < N; ++n) {
    double ss = 0.0;
    for (int d = 0; d < D; ++d)
      ss += qb[n * D + d] * qb[n * D + d];
    rh.norms[n] = std::sqrt(ss);
    const double den = std::max(rh.norms[n], 1e-6);
    for (int d = 0; d < D; ++d)
      rh.keys[n * D + d] = qb[n * D + d] / den;
  }
  for (int r = 0; r < p.R; ++r) {
    std::vector<int> bucket(N);
    for (int n = 0; n < N; ++n)
      bucket[n] = refBucket(qb + std::size_t(n) * D, p.rot.data() + std::size_t(r) * D * NB2, D,
                            NB2, nullptr);
    std::vector<int> order(N);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int x, int y) { return bucket[x] < bucket[y]; });
    order.resize(p.Npad(), -1);
    rh.perm.push_back(order);
  }
  return rh;
}

/// One attended (query, key) pair of a round.
struct RefPair {
  int r, i, j;
  bool self;
  double sraw; // scale·q_i·k_j
  double s;    // modified score (−1e5 for the self pair)
};

/// All kept pairs of (b, h), grouped by (round, query), in slot order.
template <class V>
std::vector<RefPair> refPairs(const Problem &p, const DVec &q, const RefHead &rh, int b, int h) {
  const int N = p.N, D = p.D, C = p.Npad() / p.chunk;
  const double *qb = q.data() + (std::size_t(b) * p.H + h) * N * D;
  const int len = V::kKeyPadding ? std::min(N, std::max(0, p.lengths[b])) : N;
  const float *params = p.params.empty() ? nullptr : p.params.data();
  std::vector<RefPair> pairs;
  for (int r = 0; r < p.R; ++r) {
    const std::vector<int> &perm = rh.perm[r];
    for (int t = 0; t < N; ++t) {
      const int i = perm[t];
      const int c = t / p.chunk;
      const int c0 = std::max(0, c - p.before), c1 = std::min(C - 1, c + p.after);
      for (int u = c0 * p.chunk; u < (c1 + 1) * p.chunk; ++u) {
        const int j = perm[u];
        if (j < 0)
          continue;
        if (V::kCausal && j > i)
          continue;
        if (j >= len)
          continue;
        if (!V::refKeep(b, h, i, j, params, p.H))
          continue;
        double dot = 0.0;
        for (int d = 0; d < D; ++d)
          dot += qb[i * D + d] * rh.keys[j * D + d];
        RefPair pr;
        pr.r = r, pr.i = i, pr.j = j, pr.self = i == j;
        pr.sraw = double(p.scale) * dot;
        pr.s = pr.self ? -1e5 : V::refScore(pr.sraw, b, h, i, j, params, p.H);
        pairs.push_back(pr);
      }
    }
  }
  return pairs;
}

/// The dropout factor of pair (r, i, j) of head row bh: the mask of
/// AttnLshArgs (keyed by bh·R + r), or 1.
double refDropout(const Problem &p, int bh, int r, int i, int j) {
  return refDropoutFactor(p.dropoutSeed, p.dropoutOffset, bh * p.R + r, i, j, p.dropout);
}

/// Forward and (with `backward`) the analytic backward of L = Σ dout·out.
/// The backward uses the saved out and lse given by `saved` (as the kernel
/// does: p = exp(s − lse) with the forward's lse), or the reference's own.
template <class V>
RefResult refRun(const Problem &p, const DVec &q, const DVec &v, bool backward,
                 const RefResult *saved = nullptr) {
  const int N = p.N, D = p.D, R = p.R;
  const float *params = p.params.empty() ? nullptr : p.params.data();
  RefResult res;
  res.out.assign(p.rows() * D, 0.0);
  res.lse.assign(p.rows(), -kInfD);
  if (backward) {
    res.dq.assign(p.rows() * D, 0.0);
    res.dv.assign(p.rows() * D, 0.0);
  }
  for (int b = 0; b < p.B; ++b)
    for (int h = 0; h < p.H; ++h) {
      const std::size_t base = (std::size_t(b) * p.H + h) * N;
      const RefHead rh = refHead(p, q, b, h);
      for (int r = 0; r < R; ++r)
        res.perm.insert(res.perm.end(), rh.perm[r].begin(), rh.perm[r].end());
      const std::vector<RefPair> pairs = refPairs<V>(p, q, rh, b, h);
      const double *vb = v.data() + base * D;
      // Per round: lse_ir and o_ir.
      DVec lseR(std::size_t(R) * N, -kInfD), oR(std::size_t(R) * N * D, 0.0);
      for (std::size_t s0 = 0; s0 < pairs.size();) {
        std::size_t s1 = s0;
        while (s1 < pairs.size() && pairs[s1].r == pairs[s0].r && pairs[s1].i == pairs[s0].i)
          ++s1;
        const int r = pairs[s0].r, i = pairs[s0].i;
        double m = -kInfD;
        for (std::size_t s = s0; s < s1; ++s)
          m = std::max(m, pairs[s].s);
        double l = 0.0;
        for (std::size_t s = s0; s < s1; ++s)
          l += std::exp(pairs[s].s - m);
        const double lse = m + std::log(l);
        lseR[std::size_t(r) * N + i] = lse;
        for (std::size_t s = s0; s < s1; ++s) {
          const double w =
              std::exp(pairs[s].s - lse) * refDropout(p, b * p.H + h, r, i, pairs[s].j);
          for (int d = 0; d < D; ++d)
            oR[(std::size_t(r) * N + i) * D + d] += w * vb[pairs[s].j * D + d];
        }
        s0 = s1;
      }
      // Combine.
      for (int i = 0; i < N; ++i) {
        double m = -kInfD;
        for (int r = 0; r < R; ++r)
          m = std::max(m, lseR[std::size_t(r) * N + i]);
        if (m == -kInfD)
          continue; // out 0, lse -inf
        double sum = 0.0;
        for (int r = 0; r < R; ++r)
          sum += std::exp(lseR[std::size_t(r) * N + i] - m);
        const double lse = m + std::log(sum);
        res.lse[base + i] = lse;
        for (int r = 0; r < R; ++r) {
          const double w = std::exp(lseR[std::size_t(r) * N + i] - lse);
          for (int d = 0; d < D; ++d)
            res.out[(base + i) * D + d] += w * oR[(std::size_t(r) * N + i) * D + d];
        }
      }
      if (!backward)
        continue;
      // Backward: one softmax over the union of the rounds' pairs.
      const double *qb = q.data() + base * D;
      const DVec dout(p.dout.begin() + base * D, p.dout.begin() + (base + N) * D);
      const double *dob = dout.data();
      const DVec &outS = saved ? saved->out : res.out;
      const DVec &lseS = saved ? saved->lse : res.lse;
      DVec delta(N, 0.0), dk(std::size_t(N) * D, 0.0);
      for (int i = 0; i < N; ++i)
        for (int d = 0; d < D; ++d)
          delta[i] += dob[i * D + d] * outS[(base + i) * D + d];
      double *dq = res.dq.data() + base * D;
      double *dv = res.dv.data() + base * D;
      for (const RefPair &pr : pairs) {
        const int i = pr.i, j = pr.j;
        const double pij = std::exp(pr.s - lseS[base + i]);
        double dp = 0.0;
        for (int d = 0; d < D; ++d)
          dp += dob[i * D + d] * vb[j * D + d];
        const double z = refDropout(p, b * p.H + h, pr.r, i, j);
        const double ds = pij * (z * dp - delta[i]);
        const double g = pr.self ? 0.0 : ds * V::refGrad(pr.sraw, b, h, i, j, params, p.H);
        for (int d = 0; d < D; ++d) {
          dq[i * D + d] += double(p.scale) * g * rh.keys[j * D + d];
          dk[j * D + d] += double(p.scale) * g * qb[i * D + d];
          dv[j * D + d] += pij * z * dob[i * D + d];
        }
      }
      for (int j = 0; j < N; ++j) {
        const double n = rh.norms[j];
        if (n > 1e-6) {
          double kg = 0.0;
          for (int d = 0; d < D; ++d)
            kg += rh.keys[j * D + d] * dk[j * D + d];
          for (int d = 0; d < D; ++d)
            dq[j * D + d] += (dk[j * D + d] - rh.keys[j * D + d] * kg) / n;
        } else {
          for (int d = 0; d < D; ++d)
            dq[j * D + d] += dk[j * D + d] / 1e-6;
        }
      }
    }
  return res;
}

DVec toD(const Vec &x) { return DVec(x.begin(), x.end()); }

double lossOf(const DVec &out, const Vec &dout) {
  double l = 0.0;
  for (std::size_t t = 0; t < out.size(); ++t)
    l += out[t] * double(dout[t]);
  return l;
}

//===----------------------------------------------------------------------===//
// Kernel runners and comparison
//===----------------------------------------------------------------------===//

struct KernelResult {
  int fwdStatus = -1, bwdStatus = -1;
  Vec out, lse, dq, dv, roundLse;
};

AttnLshArgs argsOf(const Problem &p) {
  AttnLshArgs a;
  std::memset(&a, 0, sizeof(a)); // workspace pointers stay null: the CPU ignores them
  a.q = p.q.data();
  a.v = p.v.data();
  a.dout = p.dout.data();
  a.lengths = p.pad ? p.lengths.data() : nullptr;
  a.params = p.params.empty() ? nullptr : p.params.data();
  a.rotations = p.rot.data();
  a.B = p.B, a.H = p.H, a.N = p.N, a.rounds = p.R, a.num_buckets = p.NB;
  a.scale = p.scale;
  a.dropout = p.dropout, a.dropout_seed = p.dropoutSeed, a.dropout_offset = p.dropoutOffset;
  return a;
}

/// Forward, then (with `backward`) the backward on the kernel's own out and
/// lse. Outputs start as NaN so that an unwritten element fails.
template <int CH, int BE, int AF, int D, class V>
KernelResult runKernel(const Problem &p, bool backward = true) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  KernelResult k;
  k.out.assign(p.rows() * D, nan);
  k.lse.assign(p.rows(), nan);
  k.roundLse.assign(p.rows() * p.R, nan);
  AttnLshArgs a = argsOf(p);
  a.out = k.out.data();
  a.lse = k.lse.data();
  a.round_lse = k.roundLse.data();
  k.fwdStatus = attnc::cpu::lsh_fwd<CH, BE, AF, D, V>(a);
  if (!backward)
    return k;
  k.dq.assign(p.rows() * D, nan);
  k.dv.assign(p.rows() * D, nan);
  a.dq = k.dq.data();
  a.dv = k.dv.data();
  k.bwdStatus = attnc::cpu::lsh_bwd<CH, BE, AF, D, V>(a);
  return k;
}

/// The reference forward and backward, all in double. (The kernel backward
/// weights the rounds from the forward's per-round lse, so it needs no
/// rounded combined lse from the reference's side either: rows that keep
/// only their own key, lse ≈ −1e5 + log R, are checked exactly too.)
template <class V> RefResult refFor(const Problem &p, const KernelResult &) {
  return refRun<V>(p, toD(p.q), toD(p.v), true, nullptr);
}

struct Err {
  double abs = 0.0;         // max |kernel − reference|
  double scaled = 0.0;      // max |kernel − reference| / max(1, |reference|)
  double absModerate = 0.0; // max |kernel − reference| where |reference| ≤ 100
  std::size_t n = 0;        // compared finite elements
  void merge(const Err &o) {
    abs = std::max(abs, o.abs);
    absModerate = std::max(absModerate, o.absModerate);
    scaled = std::max(scaled, o.scaled);
    n += o.n;
  }
};

::testing::AssertionResult close(const char *what, const Vec &a, const DVec &r, Err *err) {
  if (a.size() != r.size())
    return ::testing::AssertionFailure() << what << ": size " << a.size() << " vs " << r.size();
  Err e;
  std::size_t worst = 0;
  for (std::size_t t = 0; t < r.size(); ++t) {
    if (std::isnan(a[t]))
      return ::testing::AssertionFailure() << what << "[" << t << "] is NaN";
    if (std::isinf(r[t]) || std::isinf(a[t])) {
      if (double(a[t]) != r[t])
        return ::testing::AssertionFailure()
               << what << "[" << t << "] = " << a[t] << ", reference " << r[t];
      continue;
    }
    const double d = std::fabs(double(a[t]) - r[t]);
    const double sc = d / std::max(1.0, std::fabs(r[t]));
    e.abs = std::max(e.abs, d);
    if (std::fabs(r[t]) <= 100.0)
      e.absModerate = std::max(e.absModerate, d);
    ++e.n;
    if (sc > e.scaled) {
      e.scaled = sc;
      worst = t;
    }
  }
  if (err)
    err->merge(e);
  if (e.scaled > kTol)
    return ::testing::AssertionFailure()
           << what << ": max scaled error " << e.scaled << " at " << worst << " (kernel "
           << a[worst] << ", reference " << r[worst] << ")";
  return ::testing::AssertionSuccess();
}

void setThreads(int n) {
#ifdef _OPENMP
  omp_set_num_threads(n);
#else
  (void)n;
#endif
}

std::string describe(const Problem &p) {
  char buf[256];
  std::snprintf(buf, sizeof(buf),
                "B=%d H=%d N=%d D=%d rounds=%d buckets=%d chunk=%d before=%d after=%d causal=%d "
                "pad=%d params=%d",
                p.B, p.H, p.N, p.D, p.R, p.NB, p.chunk, p.before, p.after, int(p.causal),
                int(p.pad), p.numParams);
  return buf;
}

//===----------------------------------------------------------------------===//
// The grid: one test per compile-time configuration, each over sequence
// lengths that do and do not divide into chunks, rounds and bucket counts.
//===----------------------------------------------------------------------===//

struct GridErrs {
  Err out, lse, dq, dv;
  int cases = 0, emptyRows = 0, selfOnlyRows = 0;
};

template <int CH, int BE, int AF, int D, class V> void runGrid(int g, int B, int H) {
  static const int kNs[] = {1, 5, 37, 64, 100, 257};
  static const int kRounds[] = {1, 2, 4, 8};
  static const int kBuckets[] = {2, 8, 32, 128};
  GridErrs ge;
  for (int ni = 0; ni < 6; ++ni)
    for (int e = 0; e < 4; ++e) { // every rounds value at every length
      const int N = kNs[ni];
      int R = kRounds[(ni + 2 * e + g) % 4];
      const int NB = kBuckets[(ni + 3 * e + 2 * g) % 4];
      if (N * R * D > 257 * 4 * 64) // keep the double reference quick
        R = std::max(1, R / 2);
      Problem p = makeProblem(B, H, N, D, R, NB, CH, BE, AF, V::kCausal, V::kKeyPadding,
                              V::kNumParams, 1000u * g + 10u * ni + e);
      if (V::kDropout) // 25 %, a different offset per case
        p.dropout = 0.25f, p.dropoutSeed = 0xd20bull, p.dropoutOffset = unsigned(ni * 4 + e);
      SCOPED_TRACE(describe(p));
      const KernelResult k = runKernel<CH, BE, AF, D, V>(p);
      ASSERT_EQ(k.fwdStatus, 0);
      ASSERT_EQ(k.bwdStatus, 0);
      const RefResult ref = refFor<V>(p, k);
      EXPECT_TRUE(close("out", k.out, ref.out, &ge.out));
      EXPECT_TRUE(close("lse", k.lse, ref.lse, &ge.lse));
      EXPECT_TRUE(close("dq", k.dq, ref.dq, &ge.dq));
      EXPECT_TRUE(close("dv", k.dv, ref.dv, &ge.dv));
      ++ge.cases;
      for (double l : ref.lse) {
        ge.emptyRows += l == -kInfD;
        ge.selfOnlyRows += l < -5e4 && l != -kInfD;
      }
    }
  EXPECT_GT(ge.out.n, 0u);
  EXPECT_GT(ge.dq.n, 0u);
  std::printf("[ grid %2d ] CHUNK=%d BEFORE=%d AFTER=%d D=%d: %d cases (%d empty rows, %d "
              "self-only rows); max abs (scaled) error out %.2e (%.2e) lse %.2e [%.2e where "
              "|lse| <= 100] (%.2e) dq %.2e (%.2e) dv %.2e (%.2e)\n",
              g, CH, BE, AF, D, ge.cases, ge.emptyRows, ge.selfOnlyRows, ge.out.abs, ge.out.scaled,
              ge.lse.abs, ge.lse.absModerate, ge.lse.scaled, ge.dq.abs, ge.dq.scaled, ge.dv.abs,
              ge.dv.scaled);
}

using Dense = Plain<false, false>;
using Causal = Plain<true, false>;
using Pad = Plain<false, true>;
using CausalPad = Plain<true, true>;

TEST(CpuLshGrid, Chunk4_B1A0_D32_Dense) { runGrid<4, 1, 0, 32, Dense>(0, 2, 2); }
TEST(CpuLshGrid, Chunk8_B1A1_D64_Dense) { runGrid<8, 1, 1, 64, Dense>(1, 2, 2); }
TEST(CpuLshGrid, Chunk16_B0A0_D32_Dense) { runGrid<16, 0, 0, 32, Dense>(2, 2, 2); }
TEST(CpuLshGrid, Chunk32_B1A0_D128_Dense) { runGrid<32, 1, 0, 128, Dense>(3, 1, 3); }
TEST(CpuLshGrid, Chunk4_B1A1_D64_Causal) { runGrid<4, 1, 1, 64, Causal>(4, 2, 2); }
TEST(CpuLshGrid, Chunk16_B1A0_D64_Causal) { runGrid<16, 1, 0, 64, Causal>(5, 2, 2); }
TEST(CpuLshGrid, Chunk8_B0A0_D128_Pad) { runGrid<8, 0, 0, 128, Pad>(6, 3, 1); }
TEST(CpuLshGrid, Chunk32_B1A1_D32_CausalPad) { runGrid<32, 1, 1, 32, CausalPad>(7, 3, 2); }
TEST(CpuLshGrid, Chunk16_B1A1_D64_Alibi) { runGrid<16, 1, 1, 64, Alibi<false, false>>(8, 2, 2); }
TEST(CpuLshGrid, Chunk8_B1A0_D32_AlibiCausalPad) {
  runGrid<8, 1, 0, 32, Alibi<true, true>>(9, 3, 2);
}
TEST(CpuLshGrid, Chunk4_B0A0_D128_AlibiCausal) {
  runGrid<4, 0, 0, 128, Alibi<true, false>>(10, 1, 2);
}
// Chunks above the 64-query sub-block (a partial last sub-block with 96).
TEST(CpuLshGrid, Chunk96_B1A0_D32_Dense) { runGrid<96, 1, 0, 32, Dense>(11, 2, 2); }
TEST(CpuLshGrid, Chunk128_B1A1_D64_AlibiPad) {
  runGrid<128, 1, 1, 64, Alibi<false, true>>(12, 3, 1);
}
TEST(CpuLshGrid, Chunk64_B1A0_D64_Causal) { runGrid<64, 1, 0, 64, Causal>(13, 2, 2); }
// Attention dropout: each round's probabilities masked on the original
// positions (rows sums and lse undropped), the backward redrawing them.
template <class Base> struct WithDropout : Base { static constexpr bool kDropout = true; };
TEST(CpuLshGrid, Chunk8_B1A0_D32_CausalDropout) {
  runGrid<8, 1, 0, 32, WithDropout<Causal>>(14, 2, 2);
}
TEST(CpuLshGrid, Chunk16_B1A1_D64_AlibiPadDropout) {
  runGrid<16, 1, 1, 64, WithDropout<Alibi<false, true>>>(15, 2, 2);
}

//===----------------------------------------------------------------------===//
// The reference's own gradient against finite differences (double)
//===----------------------------------------------------------------------===//

TEST(CpuLshReference, GradientMatchesFiniteDifferences) {
  using V = Alibi<true, true>;
  const Problem p = makeProblem(2, 2, 13, 32, 2, 8, 4, 1, 1, true, true, 2, 77u);
  const DVec q = toD(p.q), v = toD(p.v);
  const RefResult ref = refRun<V>(p, q, v, true);
  const double h = 1e-6;
  double worst = 0.0;
  int checked = 0;
  for (int which = 0; which < 2; ++which) {
    const DVec &x0 = which == 0 ? q : v;
    const DVec &grad = which == 0 ? ref.dq : ref.dv;
    for (std::size_t t = 0; t < x0.size(); ++t) {
      DVec xp = x0, xm = x0;
      xp[t] += h;
      xm[t] -= h;
      const RefResult rp = which == 0 ? refRun<V>(p, xp, v, false) : refRun<V>(p, q, xp, false);
      const RefResult rm = which == 0 ? refRun<V>(p, xm, v, false) : refRun<V>(p, q, xm, false);
      ASSERT_EQ(rp.perm, ref.perm) << "the perturbation changed a bucket";
      ASSERT_EQ(rm.perm, ref.perm) << "the perturbation changed a bucket";
      const double fd = (lossOf(rp.out, p.dout) - lossOf(rm.out, p.dout)) / (2 * h);
      const double err = std::fabs(fd - grad[t]) / std::max(1.0, std::fabs(grad[t]));
      worst = std::max(worst, err);
      ++checked;
      EXPECT_LT(err, 1e-6) << (which == 0 ? "dq" : "dv") << "[" << t << "]: analytic " << grad[t]
                           << ", finite difference " << fd;
    }
  }
  // The shape has kept pairs, masked rows and a non-trivial key path.
  double gq = 0.0;
  for (double x : ref.dq)
    gq = std::max(gq, std::fabs(x));
  EXPECT_GT(gq, 1e-3);
  std::printf("[ ref fd ] %d elements, max scaled error %.2e\n", checked, worst);
}

//===----------------------------------------------------------------------===//
// The kernel's fp32 gradient against a directional finite difference
//===----------------------------------------------------------------------===//

TEST(CpuLshKernel, GradientMatchesDirectionalFiniteDifference) {
  using V = Alibi<false, true>;
  constexpr int CH = 8, BE = 1, AF = 1, D = 32;
  int done = 0;
  for (unsigned seed = 1; seed < 40 && done < 3; ++seed) {
    const Problem p = makeProblem(3, 2, 37, D, 2, 8, CH, BE, AF, false, true, 2, 500u + seed);
    const KernelResult k0 = runKernel<CH, BE, AF, D, V>(p);
    ASSERT_EQ(k0.fwdStatus, 0);
    ASSERT_EQ(k0.bwdStatus, 0);
    std::mt19937 g(seed);
    const Vec uq = randn(p.q.size(), g), uv = randn(p.v.size(), g);
    const double eps = 2e-2 / std::sqrt(double(uq.size() + uv.size()));
    Problem pp = p, pm = p;
    for (std::size_t t = 0; t < uq.size(); ++t) {
      pp.q[t] = float(p.q[t] + eps * uq[t]);
      pm.q[t] = float(p.q[t] - eps * uq[t]);
    }
    for (std::size_t t = 0; t < uv.size(); ++t) {
      pp.v[t] = float(p.v[t] + eps * uv[t]);
      pm.v[t] = float(p.v[t] - eps * uv[t]);
    }
    // The buckets must not move (and be unambiguous) at both ends.
    const RefResult r0 = refRun<V>(p, toD(p.q), toD(p.v), false);
    const RefResult rp = refRun<V>(pp, toD(pp.q), toD(pp.v), false);
    const RefResult rm = refRun<V>(pm, toD(pm.q), toD(pm.v), false);
    if (rp.perm != r0.perm || rm.perm != r0.perm)
      continue;
    bool clear = true;
    for (const Problem *x : {&pp, &pm})
      for (std::size_t row = 0; row < x->rows() && clear; ++row) {
        DVec xr(x->q.begin() + row * D, x->q.begin() + (row + 1) * D);
        for (int r = 0; r < x->R && clear; ++r)
          refBucket(xr.data(), x->rot.data() + std::size_t(r) * D * (x->NB / 2), D, x->NB / 2,
                    &clear);
      }
    if (!clear)
      continue;
    const KernelResult kp = runKernel<CH, BE, AF, D, V>(pp, false);
    const KernelResult km = runKernel<CH, BE, AF, D, V>(pm, false);
    double lp = 0.0, lm = 0.0, pred = 0.0;
    for (std::size_t t = 0; t < kp.out.size(); ++t) {
      lp += double(kp.out[t]) * p.dout[t];
      lm += double(km.out[t]) * p.dout[t];
    }
    for (std::size_t t = 0; t < uq.size(); ++t)
      pred += double(k0.dq[t]) * (double(pp.q[t]) - double(pm.q[t]));
    for (std::size_t t = 0; t < uv.size(); ++t)
      pred += double(k0.dv[t]) * (double(pp.v[t]) - double(pm.v[t]));
    const double fd = lp - lm;
    const double rel = std::fabs(fd - pred) / std::max(1e-12, std::fabs(pred));
    EXPECT_LT(rel, 1e-2) << "seed " << seed << ": directional derivative " << pred / (2 * eps)
                         << ", finite difference " << fd / (2 * eps);
    std::printf("[ kernel fd ] seed %u: derivative %.6f, finite difference %.6f, rel %.2e\n", seed,
                pred / (2 * eps), fd / (2 * eps), rel);
    ++done;
  }
  EXPECT_EQ(done, 3) << "too few directions kept every bucket";
}

//===----------------------------------------------------------------------===//
// Determinism, empty rows, zero-norm rows, bad arguments
//===----------------------------------------------------------------------===//

TEST(CpuLshKernel, BitIdenticalAcrossThreadCounts) {
  using V = Alibi<true, true>;
  constexpr int CH = 16, BE = 1, AF = 1, D = 64;
  const Problem p = makeProblem(3, 2, 257, D, 4, 32, CH, BE, AF, true, true, 2, 4242u);
  int threads0 = 1;
#ifdef _OPENMP
  threads0 = omp_get_max_threads();
#endif
  setThreads(1);
  const KernelResult k1 = runKernel<CH, BE, AF, D, V>(p);
  std::vector<KernelResult> others;
  for (int t : {2, 3}) {
    setThreads(t);
    others.push_back(runKernel<CH, BE, AF, D, V>(p));
  }
  setThreads(threads0);
  ASSERT_EQ(k1.fwdStatus, 0);
  ASSERT_EQ(k1.bwdStatus, 0);
  for (const KernelResult &k : others) {
    ASSERT_EQ(k.fwdStatus, 0);
    ASSERT_EQ(k.bwdStatus, 0);
    EXPECT_EQ(0, std::memcmp(k.out.data(), k1.out.data(), k.out.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(k.lse.data(), k1.lse.data(), k.lse.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(k.dq.data(), k1.dq.data(), k.dq.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(k.dv.data(), k1.dv.data(), k.dv.size() * sizeof(float)));
  }
  // And a second run with the same thread count.
  const KernelResult k2 = runKernel<CH, BE, AF, D, V>(p);
  EXPECT_EQ(0, std::memcmp(k2.dq.data(), k1.dq.data(), k2.dq.size() * sizeof(float)));
  // The result is the reference's, too.
  const RefResult ref = refFor<V>(p, k1);
  EXPECT_TRUE(close("out", k1.out, ref.out, nullptr));
  EXPECT_TRUE(close("dq", k1.dq, ref.dq, nullptr));
}

TEST(CpuLshKernel, EmptyRowsAreZeroWithMinusInfLse) {
  // Rows q ≡ 1 (mod 3) keep nothing; batch 1 has length 0 (nothing kept at
  // all); batch 0 keeps keys below (N + 1) / 2 only.
  using V = RowMask;
  constexpr int CH = 8, BE = 1, AF = 0, D = 32;
  const Problem p = makeProblem(3, 2, 37, D, 4, 8, CH, BE, AF, false, true, 0, 99u);
  const KernelResult k = runKernel<CH, BE, AF, D, V>(p);
  ASSERT_EQ(k.fwdStatus, 0);
  ASSERT_EQ(k.bwdStatus, 0);
  int emptyRows = 0;
  for (int b = 0; b < p.B; ++b)
    for (int h = 0; h < p.H; ++h)
      for (int n = 0; n < p.N; ++n) {
        const std::size_t row = (std::size_t(b) * p.H + h) * p.N + n;
        const bool empty = n % 3 == 1 || b == 1;
        for (int d = 0; d < D; ++d) {
          ASSERT_FALSE(std::isnan(k.out[row * D + d]));
          ASSERT_FALSE(std::isnan(k.dq[row * D + d]));
          ASSERT_FALSE(std::isnan(k.dv[row * D + d]));
        }
        if (!empty) {
          EXPECT_TRUE(std::isfinite(k.lse[row])) << "row " << row;
          continue;
        }
        ++emptyRows;
        EXPECT_EQ(k.lse[row], -std::numeric_limits<float>::infinity()) << "row " << row;
        for (int d = 0; d < D; ++d)
          EXPECT_EQ(k.out[row * D + d], 0.0f) << "row " << row;
        if (b == 1) // no kept pair anywhere in this batch
          for (int d = 0; d < D; ++d) {
            EXPECT_EQ(k.dq[row * D + d], 0.0f);
            EXPECT_EQ(k.dv[row * D + d], 0.0f);
          }
      }
  EXPECT_GT(emptyRows, p.H * p.N);
  const RefResult ref = refFor<V>(p, k);
  EXPECT_TRUE(close("out", k.out, ref.out, nullptr));
  EXPECT_TRUE(close("lse", k.lse, ref.lse, nullptr));
  EXPECT_TRUE(close("dq", k.dq, ref.dq, nullptr));
  EXPECT_TRUE(close("dv", k.dv, ref.dv, nullptr));
}

TEST(CpuLshKernel, HashTiesTakeTheFirstIndex) {
  // y_4 = y_0 and y_5 = −y_1 exactly: a row's bucket is 0 (not 4), 1 (not
  // 13), 5 (not 9) or 8 (not 12); another bucket in use lies between each
  // pair, and small windows make the slot order matter.
  using V = Dense;
  constexpr int CH = 4, BE = 1, AF = 0, D = 32;
  for (unsigned seed : {11u, 12u}) {
    const Problem p = makeProblem(2, 2, 64, D, 3, 16, CH, BE, AF, false, false, 0, seed, true);
    const KernelResult k = runKernel<CH, BE, AF, D, V>(p);
    ASSERT_EQ(k.fwdStatus, 0);
    ASSERT_EQ(k.bwdStatus, 0);
    const RefResult ref = refFor<V>(p, k);
    EXPECT_TRUE(close("out", k.out, ref.out, nullptr));
    EXPECT_TRUE(close("lse", k.lse, ref.lse, nullptr));
    EXPECT_TRUE(close("dq", k.dq, ref.dq, nullptr));
    EXPECT_TRUE(close("dv", k.dv, ref.dv, nullptr));
  }
}

TEST(CpuLshKernel, ZeroNormQueryRow) {
  // Zero rows: key 0 (|q| below 1e-6), bucket 0 in every round (every hash
  // value ties at 0), and the key path of the gradient scaled by 1 / 1e-6.
  using V = Dense;
  constexpr int CH = 4, BE = 1, AF = 0, D = 32;
  Problem p = makeProblem(1, 2, 37, D, 2, 8, CH, BE, AF, false, false, 0, 7u);
  for (int row : {3, 20, 37 + 5, 37 + 30})
    std::fill(p.q.begin() + row * D, p.q.begin() + (row + 1) * D, 0.0f);
  const KernelResult k = runKernel<CH, BE, AF, D, V>(p);
  ASSERT_EQ(k.fwdStatus, 0);
  ASSERT_EQ(k.bwdStatus, 0);
  const RefResult ref = refFor<V>(p, k);
  EXPECT_TRUE(close("out", k.out, ref.out, nullptr));
  EXPECT_TRUE(close("lse", k.lse, ref.lse, nullptr));
  EXPECT_TRUE(close("dq", k.dq, ref.dq, nullptr));
  EXPECT_TRUE(close("dv", k.dv, ref.dv, nullptr));
}

TEST(CpuLshKernel, BadArguments) {
  constexpr int CH = 4, BE = 1, AF = 0, D = 32;
  Problem p = makeProblem(1, 2, 9, D, 2, 8, CH, BE, AF, false, true, 2, 5u);
  Vec out(p.rows() * D), lse(p.rows()), dq(p.rows() * D), dv(p.rows() * D),
      roundLse(p.rows() * p.R);
  auto good = [&] {
    AttnLshArgs a = argsOf(p);
    a.lengths = p.lengths.data();
    a.out = out.data(), a.lse = lse.data(), a.dq = dq.data(), a.dv = dv.data();
    a.round_lse = roundLse.data();
    return a;
  };
  auto fwd = [](const AttnLshArgs &a) { return attnc::cpu::lsh_fwd<CH, BE, AF, D, Dense>(a); };
  auto bwd = [](const AttnLshArgs &a) { return attnc::cpu::lsh_bwd<CH, BE, AF, D, Dense>(a); };
  auto fwdPad = [](const AttnLshArgs &a) {
    return attnc::cpu::lsh_fwd<CH, BE, AF, D, Alibi<false, true>>(a);
  };
  auto bwdPad = [](const AttnLshArgs &a) {
    return attnc::cpu::lsh_bwd<CH, BE, AF, D, Alibi<false, true>>(a);
  };
  using attnc::cpu::kErrBadSize;
  using attnc::cpu::kErrNullPointer;
  ASSERT_EQ(fwd(good()), 0);
  ASSERT_EQ(bwd(good()), 0);
  ASSERT_EQ(fwdPad(good()), 0);
  ASSERT_EQ(bwdPad(good()), 0);

  struct Mut {
    const char *name;
    void (*f)(AttnLshArgs &);
    int code;
  };
  const Mut muts[] = {
      {"q null", [](AttnLshArgs &a) { a.q = nullptr; }, kErrNullPointer},
      {"v null", [](AttnLshArgs &a) { a.v = nullptr; }, kErrNullPointer},
      {"out null", [](AttnLshArgs &a) { a.out = nullptr; }, kErrNullPointer},
      {"lse null", [](AttnLshArgs &a) { a.lse = nullptr; }, kErrNullPointer},
      {"rotations null", [](AttnLshArgs &a) { a.rotations = nullptr; }, kErrNullPointer},
      {"B = 0", [](AttnLshArgs &a) { a.B = 0; }, kErrBadSize},
      {"H = -1", [](AttnLshArgs &a) { a.H = -1; }, kErrBadSize},
      {"N = 0", [](AttnLshArgs &a) { a.N = 0; }, kErrBadSize},
      {"rounds = 0", [](AttnLshArgs &a) { a.rounds = 0; }, kErrBadSize},
      {"buckets = 7", [](AttnLshArgs &a) { a.num_buckets = 7; }, kErrBadSize},
      {"buckets = 1", [](AttnLshArgs &a) { a.num_buckets = 1; }, kErrBadSize},
      {"buckets = 0", [](AttnLshArgs &a) { a.num_buckets = 0; }, kErrBadSize},
      {"buckets = -2", [](AttnLshArgs &a) { a.num_buckets = -2; }, kErrBadSize},
  };
  for (const Mut &m : muts) {
    AttnLshArgs a = good();
    m.f(a);
    EXPECT_EQ(fwd(a), m.code) << m.name;
    EXPECT_EQ(bwd(a), m.code) << m.name;
    EXPECT_EQ(fwdPad(a), m.code) << m.name;
    EXPECT_EQ(bwdPad(a), m.code) << m.name;
  }
  const Mut bwdOnly[] = {
      {"dout null", [](AttnLshArgs &a) { a.dout = nullptr; }, kErrNullPointer},
      {"dq null", [](AttnLshArgs &a) { a.dq = nullptr; }, kErrNullPointer},
      {"dv null", [](AttnLshArgs &a) { a.dv = nullptr; }, kErrNullPointer},
      {"round_lse null", [](AttnLshArgs &a) { a.round_lse = nullptr; }, kErrNullPointer},
  };
  for (const Mut &m : bwdOnly) {
    AttnLshArgs a = good();
    m.f(a);
    EXPECT_EQ(fwd(a), 0) << m.name; // the forward does not read them
    EXPECT_EQ(bwd(a), m.code) << m.name;
  }
  // Key padding needs lengths; parameters need params (not the dense variant).
  {
    AttnLshArgs a = good();
    a.lengths = nullptr;
    EXPECT_EQ(fwd(a), 0);
    EXPECT_EQ(fwdPad(a), kErrNullPointer);
    EXPECT_EQ(bwdPad(a), kErrNullPointer);
    a = good();
    a.params = nullptr;
    EXPECT_EQ(fwd(a), 0);
    EXPECT_EQ(fwdPad(a), kErrNullPointer);
    EXPECT_EQ(bwdPad(a), kErrNullPointer);
  }
}

TEST(CpuLshKernel, DISABLED_TimingPerToken) {
  using V = Dense;
  constexpr int CH = 64, BE = 1, AF = 0, D = 64;
  for (int N : {4096, 16384}) {
    const Problem p = [&] {
      Problem x;
      x.B = 1, x.H = 4, x.N = N, x.D = D, x.R = 4, x.NB = 64, x.chunk = CH;
      x.scale = 0.125f;
      std::mt19937 g(3);
      x.q = randn(x.rows() * D, g);
      x.v = randn(x.rows() * D, g);
      x.dout = randn(x.rows() * D, g);
      x.rot = randn(std::size_t(x.R) * D * (x.NB / 2), g);
      return x;
    }();
    Vec out(p.rows() * D), lse(p.rows()), dq(p.rows() * D), dv(p.rows() * D);
    AttnLshArgs a = argsOf(p);
    a.out = out.data(), a.lse = lse.data(), a.dq = dq.data(), a.dv = dv.data();
    auto best = [&](auto f, int reps) {
      double t = 1e30;
      for (int i = 0; i < reps; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        ASSERT_EQ(f(), 0);
        t = std::min(t,
                     std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::printf("    %.2f ms, %.0f ns/token\n", t * 1e3, t * 1e9 / double(p.rows()));
    };
    std::printf("N = %d lsh_fwd:\n", N);
    best([&] { return attnc::cpu::lsh_fwd<CH, BE, AF, D, V>(a); }, 5);
    std::printf("N = %d lsh_bwd:\n", N);
    best([&] { return attnc::cpu::lsh_bwd<CH, BE, AF, D, V>(a); }, 3);
  }
}

} // namespace
