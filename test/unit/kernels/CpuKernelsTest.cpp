//===- CpuKernelsTest.cpp - CPU attention kernels vs a double reference ---===//
//
// The CPU kernel headers (kernels/cpu/attnc/) against a naive
// double-precision reference written here, independently of the kernels:
// loops over (b, h, i, j) computing the scores in double, the masks, a
// max-subtracted softmax, the output and the log-sum-exp; the backward by the
// textbook softmax-Jacobian formulas (ds = p ∘ (dp − Σ p·dp)), and the
// low-rank projections by their definition. The reference backward itself is
// validated against central finite differences of Σ dout·out on tiny shapes.
//
// Tolerance: every compared element must satisfy
//   |kernel − reference| ≤ 1e-4 · max(1, |reference|)
// i.e. 1e-4 absolute where the reference is at most 1 in magnitude and 1e-4
// relative above (gradients summed over ~10^3 keys or over the batch, and
// the low-rank dE, F, reach magnitudes of 10–100). Inputs are N(0, 1) with
// scale 1/sqrt(D), so softmax rows are not degenerate. lse = -inf must match
// exactly; no NaN anywhere. The per-head parameter gradients are sums of
// B·Nq·Nk terms ds·∂score/∂param that cancel (exactly, when a row keeps a
// single key), so their fp32 rounding follows the size of the terms, not of
// the result: for them the bound is 1e-4·max(1, |reference|) + 1e-5·M with
// M = Σ p·(|dp| + |Σ p·dp|)·|∂score/∂param| (observed error ≤ 1.2e-6·M).
//
//===----------------------------------------------------------------------===//
#include "attnc/attention.h"
#include "attnc/unfused.h"

#include "test/unit/support/DropoutReference.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace {

using Vec = std::vector<float>;
using DVec = std::vector<double>;
constexpr double kInfD = std::numeric_limits<double>::infinity();
constexpr double kTol = 1e-4;

//===----------------------------------------------------------------------===//
// Variants under test (what the emitter would generate)
//===----------------------------------------------------------------------===//

/// Score modifier with two per-head parameters, temp = params[h] and
/// slope = params[H + h]: s·temp − slope·|q − kv|. Mask: rows q ≡ 2 (mod 5)
/// keep nothing, others drop (q + 2·kv + h + b) ≡ 0 (mod 3). BACK / AHEAD
/// (kNoBand: none) add the band q − kv ≤ BACK, kv − q ≤ AHEAD to the mask,
/// declared as attn-key-band would, so the kernels skip blocks outside it.
constexpr int kNoBand = std::numeric_limits<int>::min();
template <bool CAUSAL, bool PAD, bool MASK, bool MOD, int BACK = kNoBand, int AHEAD = kNoBand,
          int DROP_PERMIL = 0>
struct TV {
  /// Attention dropout (per mille): the kernels and the reference draw the
  /// same Philox masks (kernels/abi/attnc/abi/Philox.h).
  static constexpr bool kDropout = DROP_PERMIL > 0;
  static constexpr float kDropP = DROP_PERMIL / 1000.0f;
  static constexpr bool kCausal = CAUSAL;
  static constexpr bool kKeyPadding = PAD;
  static constexpr bool kHasScoreMod = MOD;
  static constexpr bool kPatternMask = MASK;
  static constexpr bool kHasMask = MASK || BACK != kNoBand || AHEAD != kNoBand;
  static constexpr int kNumParams = MOD ? 2 : 0;
  static constexpr bool kHasMaxBack = BACK != kNoBand, kHasMaxAhead = AHEAD != kNoBand;
  static constexpr int kMaxBack = kHasMaxBack ? BACK : 0, kMaxAhead = kHasMaxAhead ? AHEAD : 0;
  ATTNC_HD static float score(float s, int, int h, int q, int kv, const float *params, int H) {
    return s * params[h] - params[H + h] * std::fabs(static_cast<float>(q - kv));
  }
  ATTNC_HD static float score_grad(float s, int, int h, int q, int kv, const float *params, int H,
                                   float *dparams) {
    (void)H;
    if constexpr (MOD) {
      dparams[0] = s;
      dparams[1] = -std::fabs(static_cast<float>(q - kv));
    }
    return params[h];
  }
  ATTNC_HD static bool keep(int b, int h, int q, int kv, const float *, int) {
    bool k = !MASK || (q % 5 != 2 && (q + 2 * kv + h + b) % 3 != 0);
    if constexpr (kHasMaxBack)
      k = k && q - kv <= BACK;
    if constexpr (kHasMaxAhead)
      k = k && kv - q <= AHEAD;
    return k;
  }
};
using Dense = TV<false, false, false, false>;
using Causal = TV<true, false, false, false>;
using Pad = TV<false, true, false, false>;
using CausalPad = TV<true, true, false, false>;
using Mask = TV<false, false, true, false>;
using Mod = TV<false, false, false, true>;
using All = TV<true, true, true, true>;
using Window = TV<true, false, false, false, 20>;               // causal, 21 keys back
using BandAll = TV<false, true, true, true, 30, 5>;             // band plus everything
using PastBand = TV<false, false, false, false, 40, -10>;       // 10..40 keys back only
using Drop = TV<true, true, true, true, kNoBand, kNoBand, 250>; // everything + 25 % dropout
using DropWindow = TV<true, false, false, false, 20, kNoBand, 100>;
using DenseDrop = TV<false, false, false, false, kNoBand, kNoBand, 250>; // low-rank + dropout

//===----------------------------------------------------------------------===//
// Double-precision reference
//===----------------------------------------------------------------------===//

struct RefSpec {
  bool causal = false, padding = false, mask = false, mod = false;
  bool hasBack = false, hasAhead = false;
  int back = 0, ahead = 0;
  float dropout = 0; ///< with kDropoutSeed / kDropoutOffset
};
constexpr unsigned long long kDropoutSeed = 0x5eedull;
constexpr unsigned kDropoutOffset = 7;
template <class V> RefSpec specOf() {
  return {V::kCausal,      V::kKeyPadding, V::kPatternMask, V::kHasScoreMod, V::kHasMaxBack,
          V::kHasMaxAhead, V::kMaxBack,    V::kMaxAhead,    V::kDropP};
}

struct RefInputs {
  int B = 1, H = 1, Nq = 1, Nk = 1, D = 1;
  double scale = 1.0;
  std::vector<int> lengths; // empty: no padding
  DVec q, k, v, dout, params;
};

struct RefResult {
  DVec out, lse, dq, dk, dv, dparams;
  /// Σ p·(|dp| + |Σ p·dp|)·|∂score/∂param| per parameter: the size of the
  /// terms that cancel in dparams (sets its tolerance, see close()).
  DVec dparamsMag;
};

bool refKept(const RefSpec &sp, const RefInputs &in, int b, int h, int i, int j) {
  if (sp.causal && j > i)
    return false;
  if (sp.padding && j >= in.lengths[b])
    return false;
  if (sp.mask && (i % 5 == 2 || (i + 2 * j + h + b) % 3 == 0))
    return false;
  if ((sp.hasBack && i - j > sp.back) || (sp.hasAhead && j - i > sp.ahead))
    return false;
  return true;
}

/// Attention forward (and, with grad, backward) in double, by definition.
RefResult refAttention(const RefSpec &sp, const RefInputs &in, bool grad) {
  const int B = in.B, H = in.H, Nq = in.Nq, Nk = in.Nk, D = in.D;
  RefResult r;
  r.out.assign(std::size_t(B) * H * Nq * D, 0.0);
  r.lse.assign(std::size_t(B) * H * Nq, -kInfD);
  if (grad) {
    r.dq.assign(r.out.size(), 0.0);
    r.dk.assign(std::size_t(B) * H * Nk * D, 0.0);
    r.dv.assign(r.dk.size(), 0.0);
    r.dparams.assign(in.params.size(), 0.0);
    r.dparamsMag.assign(in.params.size(), 0.0);
  }
  DVec raw(Nk), s(Nk), p(Nk), dp(Nk), drop(Nk);
  std::vector<char> kept(Nk);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      auto Q = [&](int i, int d) { return in.q[((std::size_t(b) * H + h) * Nq + i) * D + d]; };
      auto K = [&](int j, int d) { return in.k[((std::size_t(b) * H + h) * Nk + j) * D + d]; };
      auto Vv = [&](int j, int d) { return in.v[((std::size_t(b) * H + h) * Nk + j) * D + d]; };
      for (int i = 0; i < Nq; ++i) {
        bool any = false;
        double m = -kInfD;
        for (int j = 0; j < Nk; ++j) {
          double dot = 0.0;
          for (int d = 0; d < D; ++d)
            dot += Q(i, d) * K(j, d);
          raw[j] = in.scale * dot;
          s[j] = sp.mod ? raw[j] * in.params[h] - in.params[H + h] * std::abs(i - j) : raw[j];
          kept[j] = refKept(sp, in, b, h, i, j);
          if (kept[j]) {
            any = true;
            m = std::max(m, s[j]);
          }
        }
        if (!any)
          continue; // out = 0, lse = -inf, no gradient
        double z = 0.0;
        for (int j = 0; j < Nk; ++j)
          z += kept[j] ? std::exp(s[j] - m) : 0.0;
        const std::size_t row = (std::size_t(b) * H + h) * Nq + i;
        r.lse[row] = m + std::log(z);
        // Dropout: the weights of V are p·mask/(1 − p_drop); lse is not.
        for (int j = 0; j < Nk; ++j)
          drop[j] = refDropoutFactor(kDropoutSeed, kDropoutOffset, b * H + h, i, j, sp.dropout);
        for (int j = 0; j < Nk; ++j) {
          p[j] = kept[j] ? std::exp(s[j] - m) / z : 0.0;
          for (int d = 0; d < D; ++d)
            r.out[row * D + d] += p[j] * drop[j] * Vv(j, d);
        }
        if (!grad)
          continue;
        double c = 0.0;
        for (int j = 0; j < Nk; ++j) {
          double acc = 0.0;
          for (int d = 0; d < D; ++d)
            acc += in.dout[row * D + d] * Vv(j, d);
          dp[j] = acc;
          c += p[j] * drop[j] * dp[j];
        }
        for (int j = 0; j < Nk; ++j) {
          if (!kept[j])
            continue;
          const double ds = p[j] * (drop[j] * dp[j] - c); // d loss / d (modified score)
          const double dsRaw = ds * (sp.mod ? in.params[h] : 1.0);
          const std::size_t krow = (std::size_t(b) * H + h) * Nk + j;
          for (int d = 0; d < D; ++d) {
            r.dq[row * D + d] += in.scale * dsRaw * K(j, d);
            r.dk[krow * D + d] += in.scale * dsRaw * Q(i, d);
            r.dv[krow * D + d] += p[j] * drop[j] * in.dout[row * D + d];
          }
          if (sp.mod) {
            r.dparams[h] += ds * raw[j];
            r.dparams[H + h] += -ds * std::abs(i - j);
            const double mag = p[j] * (std::fabs(dp[j]) + std::fabs(c));
            r.dparamsMag[h] += mag * std::fabs(raw[j]);
            r.dparamsMag[H + h] += mag * std::abs(i - j);
          }
        }
      }
    }
  return r;
}

double refLoss(const RefSpec &sp, const RefInputs &in) {
  const RefResult r = refAttention(sp, in, false);
  double l = 0.0;
  for (std::size_t t = 0; t < r.out.size(); ++t)
    l += r.out[t] * in.dout[t];
  return l;
}

/// Low-rank attention in double: K' = E_n·K̃, V' = F_n·Ṽ, dense attention
/// over the projected keys, and the backward through the projections.
struct RefLowRank {
  int B, H, Nq, N, Nmax, kp, D;
  bool perHead, sharedEF;
  double scale;
  std::vector<int> lengths; // empty: all N valid
  DVec q, k, v, E, F, dout; // F unused when sharedEF
  float dropout = 0;        ///< over the projected keys (kDropoutSeed / kDropoutOffset)

  int valid(int b) const { return lengths.empty() ? N : std::min(N, std::max(0, lengths[b])); }
  const double &e(const DVec &M, int h, int r, int j) const {
    return M[(perHead ? std::size_t(h) * kp * Nmax : 0) + std::size_t(r) * Nmax + j];
  }
  DVec project(const DVec &X, const DVec &M) const {
    DVec P(std::size_t(B) * H * kp * D, 0.0);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int r = 0; r < kp; ++r)
          for (int j = 0; j < valid(b); ++j)
            for (int d = 0; d < D; ++d)
              P[((std::size_t(b) * H + h) * kp + r) * D + d] +=
                  e(M, h, r, j) * X[((std::size_t(b) * H + h) * N + j) * D + d];
    return P;
  }
  RefInputs attnInputs() const {
    RefInputs in;
    in.B = B, in.H = H, in.Nq = Nq, in.Nk = kp, in.D = D, in.scale = scale;
    in.q = q;
    in.k = project(k, E);
    in.v = project(v, sharedEF ? E : F);
    in.dout = dout;
    return in;
  }
  struct Result {
    DVec out, lse, dq, dk, dv, dE, dF;
  };
  Result run(bool grad) const {
    const RefInputs in = attnInputs();
    RefSpec spec;
    spec.dropout = dropout;
    const RefResult a = refAttention(spec, in, grad);
    Result r;
    r.out = a.out;
    r.lse = a.lse;
    if (!grad)
      return r;
    r.dq = a.dq;
    const std::size_t eSize = (perHead ? std::size_t(H) : 1) * kp * Nmax;
    r.dE.assign(eSize, 0.0);
    r.dF.assign(eSize, 0.0);
    DVec &dFt = sharedEF ? r.dE : r.dF;
    r.dk.assign(k.size(), 0.0);
    r.dv.assign(v.size(), 0.0);
    const DVec &Fm = sharedEF ? E : F;
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h)
        for (int j = 0; j < valid(b); ++j)
          for (int rr = 0; rr < kp; ++rr) {
            const std::size_t pr = ((std::size_t(b) * H + h) * kp + rr) * D;
            const std::size_t xr = ((std::size_t(b) * H + h) * N + j) * D;
            double gE = 0.0, gF = 0.0;
            for (int d = 0; d < D; ++d) {
              r.dk[xr + d] += e(E, h, rr, j) * a.dk[pr + d];
              r.dv[xr + d] += e(Fm, h, rr, j) * a.dv[pr + d];
              gE += a.dk[pr + d] * k[xr + d];
              gF += a.dv[pr + d] * v[xr + d];
            }
            const std::size_t ei = (perHead ? std::size_t(h) * kp * Nmax : 0) + rr * Nmax + j;
            r.dE[ei] += gE;
            dFt[ei] += gF;
          }
    return r;
  }
  double loss() const {
    const Result r = run(false);
    double l = 0.0;
    for (std::size_t t = 0; t < r.out.size(); ++t)
      l += r.out[t] * dout[t];
    return l;
  }
};

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

Vec randn(std::size_t n, std::mt19937 &g, float mult = 1.0f) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  Vec x(n);
  for (auto &e : x)
    e = nd(g) * mult;
  return x;
}
DVec toD(const Vec &x) { return DVec(x.begin(), x.end()); }

struct Err {
  double abs = 0.0, scaled = 0.0;
};

/// Compares a kernel result with the reference: |a − r| ≤ kTol·max(1, |r|)
/// (+ kMagTol·mag[t] when the reference gives the magnitude of the terms
/// that cancel in element t), -inf must match exactly, NaN never passes.
/// Err::scaled reports |a − r| / max(1, |r|) (and, with mag, the ratio of
/// the error to its allowance times kTol).
constexpr double kMagTol = 1e-5;
::testing::AssertionResult close(const char *what, const float *a, const DVec &r, Err *err,
                                 const DVec *mag = nullptr) {
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
    double sc = d / std::max(1.0, std::fabs(r[t]));
    if (mag)
      sc = kTol * d / (kTol * std::max(1.0, std::fabs(r[t])) + kMagTol * (*mag)[t]);
    e.abs = std::max(e.abs, d);
    if (sc > e.scaled) {
      e.scaled = sc;
      worst = t;
    }
  }
  if (err)
    *err = e;
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

//===----------------------------------------------------------------------===//
// Fused kernels vs the reference
//===----------------------------------------------------------------------===//

struct AttnCase {
  int B = 2, H = 3, Nq = 7, Nk = 7;
  std::vector<int> lengths; // used by padding variants (size B)
  unsigned seed = 1;
  bool ownPartials = false; // pass dparams_partial = nullptr
};

struct AttnData {
  Vec q, k, v, dout, params;
  std::vector<int> lengths;
};

AttnData makeData(const AttnCase &c, int D, bool mod) {
  std::mt19937 g(c.seed);
  AttnData x;
  x.q = randn(std::size_t(c.B) * c.H * c.Nq * D, g);
  x.k = randn(std::size_t(c.B) * c.H * c.Nk * D, g);
  x.v = randn(std::size_t(c.B) * c.H * c.Nk * D, g);
  x.dout = randn(std::size_t(c.B) * c.H * c.Nq * D, g);
  if (mod) {
    std::uniform_real_distribution<float> temp(0.5f, 1.5f), slope(0.01f, 0.2f);
    x.params.resize(2 * c.H);
    for (int h = 0; h < c.H; ++h) {
      x.params[h] = temp(g);
      x.params[c.H + h] = slope(g);
    }
  }
  x.lengths = c.lengths;
  if (x.lengths.empty()) // default: first batch partial, second empty, rest full
    for (int b = 0; b < c.B; ++b)
      x.lengths.push_back(b == 0 ? std::max(1, (2 * c.Nk + 2) / 3) : (b == 1 ? 0 : c.Nk));
  return x;
}

RefInputs refInputsOf(const AttnCase &c, const AttnData &x, int D, float scale) {
  RefInputs in;
  in.B = c.B, in.H = c.H, in.Nq = c.Nq, in.Nk = c.Nk, in.D = D, in.scale = scale;
  in.lengths = x.lengths;
  in.q = toD(x.q), in.k = toD(x.k), in.v = toD(x.v), in.dout = toD(x.dout);
  in.params = toD(x.params);
  return in;
}

template <class V> const char *variantName();
template <> const char *variantName<Dense>() { return "Dense"; }
template <> const char *variantName<Causal>() { return "Causal"; }
template <> const char *variantName<Pad>() { return "Pad"; }
template <> const char *variantName<CausalPad>() { return "CausalPad"; }
template <> const char *variantName<Mask>() { return "Mask"; }
template <> const char *variantName<Mod>() { return "Mod"; }
template <> const char *variantName<All>() { return "All"; }
template <> const char *variantName<Window>() { return "Window"; }
template <> const char *variantName<BandAll>() { return "BandAll"; }
template <> const char *variantName<PastBand>() { return "PastBand"; }
template <> const char *variantName<Drop>() { return "Drop"; }
template <> const char *variantName<DropWindow>() { return "DropWindow"; }

struct KernelOutputs {
  Vec out, lse, dq, dk, dv, dparams;
};

/// Runs the fused forward and backward; dq/dk/dv start as NaN so that a
/// missed element fails the comparison ("fully written").
template <int BQ, int BKV, int D, class V>
KernelOutputs runFlash(const AttnCase &c, const AttnData &x, float scale) {
  constexpr int P = V::kNumParams;
  KernelOutputs o;
  const std::size_t nq = std::size_t(c.B) * c.H * c.Nq, nk = std::size_t(c.B) * c.H * c.Nk;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  o.out.assign(nq * D, nan);
  o.lse.assign(nq, nan);
  attnc::AttnFwdArgs f{};
  f.q = x.q.data(), f.k = x.k.data(), f.v = x.v.data();
  f.out = o.out.data(), f.lse = o.lse.data();
  f.lengths = V::kKeyPadding ? x.lengths.data() : nullptr;
  f.params = P ? x.params.data() : nullptr;
  f.B = c.B, f.H = c.H, f.Nq = c.Nq, f.Nk = c.Nk, f.scale = scale;
  f.dropout = V::kDropP, f.dropout_seed = kDropoutSeed, f.dropout_offset = kDropoutOffset;
  EXPECT_EQ((attnc::cpu::flash_fwd<BQ, BKV, D, V>(f)), 0);

  Vec delta(nq, nan);
  o.dq.assign(nq * D, nan);
  o.dk.assign(nk * D, nan);
  o.dv.assign(nk * D, nan);
  o.dparams.assign(std::size_t(P) * c.H, 0.0f);
  Vec partial(attnc::cpu::bwd_workspace_floats(c.B, c.H, c.Nq, BQ, P) + 1, nan);
  attnc::AttnBwdArgs g{};
  g.q = x.q.data(), g.k = x.k.data(), g.v = x.v.data();
  g.out = o.out.data(), g.dout = x.dout.data(), g.lse = o.lse.data();
  g.lengths = f.lengths, g.params = f.params;
  g.delta = delta.data();
  g.dq = o.dq.data(), g.dk = o.dk.data(), g.dv = o.dv.data();
  g.dparams = P ? o.dparams.data() : nullptr;
  g.dparams_partial = (P && !c.ownPartials) ? partial.data() : nullptr;
  g.B = c.B, g.H = c.H, g.Nq = c.Nq, g.Nk = c.Nk, g.scale = scale;
  g.dropout = f.dropout, g.dropout_seed = f.dropout_seed, g.dropout_offset = f.dropout_offset;
  EXPECT_EQ((attnc::cpu::flash_bwd<BQ, BKV, D, V>(g)), 0);
  return o;
}

template <int BQ, int BKV, int D, class V> void checkFlashCase(const AttnCase &c) {
  const float scale = 1.0f / std::sqrt(float(D));
  const AttnData x = makeData(c, D, V::kHasScoreMod);
  const RefInputs in = refInputsOf(c, x, D, scale);
  const RefResult ref = refAttention(specOf<V>(), in, true);
  const KernelOutputs o = runFlash<BQ, BKV, D, V>(c, x, scale);

  Err eo, el, edq, edk, edv, edp;
  EXPECT_TRUE(close("out", o.out.data(), ref.out, &eo));
  EXPECT_TRUE(close("lse", o.lse.data(), ref.lse, &el));
  EXPECT_TRUE(close("dq", o.dq.data(), ref.dq, &edq));
  EXPECT_TRUE(close("dk", o.dk.data(), ref.dk, &edk));
  EXPECT_TRUE(close("dv", o.dv.data(), ref.dv, &edv));
  if (V::kNumParams) {
    EXPECT_TRUE(close("dparams", o.dparams.data(), ref.dparams, &edp, &ref.dparamsMag));
    Err raw;
    close("dparams", o.dparams.data(), ref.dparams, &raw);
    std::printf("[cpu-kernels] dparams relative error %.1e, error/magnitude %.1e\n", raw.scaled,
                [&] {
                  double m = 0;
                  for (std::size_t t = 0; t < ref.dparams.size(); ++t)
                    m = std::max(m, std::fabs(o.dparams[t] - ref.dparams[t]) /
                                        std::max(1e-30, ref.dparamsMag[t]));
                  return m;
                }());
  }
  // Fully masked rows: out exactly 0 (and lse -inf, checked above).
  int emptyRows = 0;
  for (std::size_t r = 0; r < ref.lse.size(); ++r)
    if (ref.lse[r] == -kInfD) {
      ++emptyRows;
      for (int d = 0; d < D; ++d)
        ASSERT_EQ(o.out[r * D + d], 0.0f) << "row " << r;
    }
  std::printf("[cpu-kernels] %-9s D=%-3d tile %3dx%-3d B=%d H=%d Nq=%-4d Nk=%-4d empty=%-4d "
              "err out %.1e lse %.1e dq %.1e dk %.1e dv %.1e dparams %.1e (abs: dq %.1e dk %.1e)\n",
              variantName<V>(), D, BQ, BKV, c.B, c.H, c.Nq, c.Nk, emptyRows, eo.scaled, el.scaled,
              edq.scaled, edk.scaled, edv.scaled, edp.scaled, edq.abs, edk.abs);
}

struct NamedCase {
  std::string name;
  std::function<void()> run;
};
std::ostream &operator<<(std::ostream &os, const NamedCase &c) { return os << c.name; }

template <int BQ, int BKV, int D, class V>
void addFlash(std::vector<NamedCase> &cs, std::initializer_list<int> Ns, int B = 2, int H = 3) {
  for (int N : Ns) {
    AttnCase c;
    c.B = B, c.H = H, c.Nq = N, c.Nk = N;
    c.seed = 1000u * D + 10u * N + BQ + BKV;
    std::string name = std::string(variantName<V>()) + "_D" + std::to_string(D) + "_T" +
                       std::to_string(BQ) + "x" + std::to_string(BKV) + "_N" + std::to_string(N);
    cs.push_back({name, [c] { checkFlashCase<BQ, BKV, D, V>(c); }});
  }
}

template <int BQ, int BKV, int D>
void addAllVariants(std::vector<NamedCase> &cs, std::initializer_list<int> Ns) {
  addFlash<BQ, BKV, D, Dense>(cs, Ns);
  addFlash<BQ, BKV, D, Causal>(cs, Ns);
  addFlash<BQ, BKV, D, Pad>(cs, Ns);
  addFlash<BQ, BKV, D, CausalPad>(cs, Ns);
  addFlash<BQ, BKV, D, Mask>(cs, Ns);
  addFlash<BQ, BKV, D, Mod>(cs, Ns);
  addFlash<BQ, BKV, D, All>(cs, Ns);
}

std::vector<NamedCase> flashGrid() {
  std::vector<NamedCase> cs;
#ifndef ATTNC_TEST_REDUCED_GRID
  // Every variant × head dim × N with 64×64 tiles.
  addAllVariants<64, 64, 32>(cs, {1, 7, 257});
  addAllVariants<64, 64, 64>(cs, {1, 7, 257});
  addAllVariants<64, 64, 80>(cs, {1, 7, 257});
  addAllVariants<64, 64, 128>(cs, {1, 7, 257});
  // Small, unequal tiles.
  addAllVariants<16, 32, 32>(cs, {7, 257});
  addAllVariants<16, 32, 80>(cs, {7, 257});
  addFlash<32, 16, 64, Causal>(cs, {7, 257});
  addFlash<32, 16, 64, Mod>(cs, {7, 257});
  addFlash<32, 16, 64, All>(cs, {7, 257});
  // Tiles that are not multiples of the SIMD width, and the other head dims.
  addFlash<24, 40, 96, All>(cs, {7, 257});
  addFlash<32, 32, 256, CausalPad>(cs, {7, 100});
  // N = 1000 for a few configurations (B·H = 2 to keep the reference cheap).
  addFlash<64, 64, 64, Dense>(cs, {1000}, 1, 2);
  addFlash<64, 64, 128, CausalPad>(cs, {1000}, 2, 1);
  addFlash<16, 32, 80, All>(cs, {1000}, 1, 2);
  // Key bands (block skipping): windows narrower and wider than the tiles.
  addFlash<16, 16, 32, Window>(cs, {7, 257});
  addFlash<64, 64, 64, Window>(cs, {257});
  addFlash<64, 64, 64, Window>(cs, {1000}, 1, 2);
  addFlash<16, 32, 80, BandAll>(cs, {7, 257});
  addFlash<32, 16, 64, PastBand>(cs, {7, 257});
  addFlash<24, 40, 96, BandAll>(cs, {257});
  // Attention dropout: the kernels' masks are the reference's.
  addFlash<16, 32, 32, Drop>(cs, {7, 257});
  addFlash<64, 64, 64, Drop>(cs, {257});
  addFlash<32, 16, 80, DropWindow>(cs, {257});
#else
  // Secondary builds (no OpenMP / portable / loop GEMMs): a smaller grid.
  addAllVariants<16, 32, 80>(cs, {1, 7, 257});
  addFlash<64, 64, 64, Causal>(cs, {7, 257});
  addFlash<64, 64, 64, All>(cs, {7, 257});
  addFlash<16, 32, 80, BandAll>(cs, {257});
  addFlash<16, 32, 32, Drop>(cs, {257});
#endif
  return cs;
}

class CpuFlash : public ::testing::TestWithParam<NamedCase> {};
TEST_P(CpuFlash, FwdBwdMatchReference) { GetParam().run(); }
INSTANTIATE_TEST_SUITE_P(Grid, CpuFlash, ::testing::ValuesIn(flashGrid()),
                         [](const ::testing::TestParamInfo<NamedCase> &i) { return i.param.name; });

/// Nq ≠ Nk, lengths beyond Nk, and the kernel-allocated dparams partials.
TEST(CpuFlashShapes, UnequalLengths) {
  for (auto [nq, nk] : {std::pair<int, int>{100, 37}, {37, 100}, {1, 65}, {65, 1}}) {
    AttnCase c;
    c.B = 2, c.H = 2, c.Nq = nq, c.Nk = nk;
    c.lengths = {nk + 5, 3};
    c.seed = 77u + nq;
    c.ownPartials = true;
    checkFlashCase<16, 32, 32, All>(c);
    checkFlashCase<64, 64, 32, CausalPad>(c);
    checkFlashCase<64, 64, 32, Mod>(c);
  }
}

/// No NaN in any gradient when whole batches are padded out (lengths 0).
TEST(CpuFlashShapes, ZeroLengthsGiveZeroGradients) {
  AttnCase c;
  c.B = 2, c.H = 2, c.Nq = 33, c.Nk = 33;
  c.lengths = {0, 0};
  const AttnData x = makeData(c, 32, true);
  const KernelOutputs o = runFlash<16, 32, 32, All>(c, x, 0.25f);
  for (float e : o.out)
    ASSERT_EQ(e, 0.0f);
  for (float e : o.lse)
    ASSERT_EQ(e, -std::numeric_limits<float>::infinity());
  for (const Vec *g : {&o.dq, &o.dk, &o.dv, &o.dparams})
    for (float e : *g)
      ASSERT_EQ(e, 0.0f);
}

//===----------------------------------------------------------------------===//
// The reference itself: finite differences
//===----------------------------------------------------------------------===//

TEST(CpuReference, AttentionBackwardMatchesFiniteDifferences) {
  RefSpec dropped{true, true, true, true};
  dropped.dropout = 0.3f; // fixed masks: the loss is a function of q, k, v
  for (RefSpec sp :
       {RefSpec{}, RefSpec{true, true, true, true}, RefSpec{false, true, false, true}, dropped}) {
    RefInputs in;
    in.B = 2, in.H = 2, in.Nq = 6, in.Nk = 5, in.D = 3, in.scale = 0.7;
    in.lengths = {4, 5};
    std::mt19937 g(5);
    in.q = toD(randn(std::size_t(in.B) * in.H * in.Nq * in.D, g));
    in.k = toD(randn(std::size_t(in.B) * in.H * in.Nk * in.D, g));
    in.v = toD(randn(std::size_t(in.B) * in.H * in.Nk * in.D, g));
    in.dout = toD(randn(std::size_t(in.B) * in.H * in.Nq * in.D, g));
    in.params = {1.2, 0.8, 0.1, 0.3};
    const RefResult r = refAttention(sp, in, true);
    const double eps = 1e-6;
    auto fd = [&](DVec &x, const DVec &analytic, const char *what) {
      for (std::size_t t = 0; t < x.size(); ++t) {
        const double x0 = x[t];
        x[t] = x0 + eps;
        const double lp = refLoss(sp, in);
        x[t] = x0 - eps;
        const double lm = refLoss(sp, in);
        x[t] = x0;
        const double num = (lp - lm) / (2 * eps);
        ASSERT_NEAR(num, analytic[t], 1e-6 * std::max(1.0, std::fabs(num)))
            << what << "[" << t << "]";
      }
    };
    fd(in.q, r.dq, "dq");
    fd(in.k, r.dk, "dk");
    fd(in.v, r.dv, "dv");
    if (sp.mod)
      fd(in.params, r.dparams, "dparams");
  }
}

TEST(CpuReference, LowRankBackwardMatchesFiniteDifferences) {
  for (int mode = 0; mode < 3; ++mode) { // 0: none (per head), 1: headwise, 2: kv (E = F)
    RefLowRank L;
    L.B = 2, L.H = 2, L.Nq = 3, L.N = 4, L.Nmax = 6, L.kp = 3, L.D = 2;
    L.perHead = mode == 0, L.sharedEF = mode == 2, L.scale = 0.8;
    L.lengths = {3, 4};
    std::mt19937 g(11 + mode);
    L.q = toD(randn(std::size_t(L.B) * L.H * L.Nq * L.D, g));
    L.k = toD(randn(std::size_t(L.B) * L.H * L.N * L.D, g));
    L.v = toD(randn(std::size_t(L.B) * L.H * L.N * L.D, g));
    L.dout = toD(randn(std::size_t(L.B) * L.H * L.Nq * L.D, g));
    const std::size_t eSize = (L.perHead ? std::size_t(L.H) : 1) * L.kp * L.Nmax;
    L.E = toD(randn(eSize, g, 0.5f));
    L.F = toD(randn(eSize, g, 0.5f));
    const auto r = L.run(true);
    const double eps = 1e-6;
    auto fd = [&](DVec &x, const DVec &analytic, const char *what) {
      for (std::size_t t = 0; t < x.size(); ++t) {
        const double x0 = x[t];
        x[t] = x0 + eps;
        const double lp = L.loss();
        x[t] = x0 - eps;
        const double lm = L.loss();
        x[t] = x0;
        const double num = (lp - lm) / (2 * eps);
        ASSERT_NEAR(num, analytic[t], 1e-6 * std::max(1.0, std::fabs(num)))
            << what << "[" << t << "] mode " << mode;
      }
    };
    fd(L.q, r.dq, "dq");
    fd(L.k, r.dk, "dk");
    fd(L.v, r.dv, "dv");
    fd(L.E, r.dE, "dE");
    if (!L.sharedEF)
      fd(L.F, r.dF, "dF");
  }
}

//===----------------------------------------------------------------------===//
// Low-rank (Linformer) projection + attention vs the reference
//===----------------------------------------------------------------------===//

enum class Share { None, Headwise, Kv, Layerwise };
const char *shareName(Share s) {
  switch (s) {
  case Share::None:
    return "none";
  case Share::Headwise:
    return "headwise";
  case Share::Kv:
    return "kv";
  default:
    return "layerwise";
  }
}

struct LowRankCase {
  Share share;
  int B, H, Nq, N, Nmax, kp;
  std::vector<int> lengths; // empty: none
  unsigned seed;
};

template <int BQ, int BKV, int D, class V = Dense> void checkLowRank(const LowRankCase &c) {
  const bool perHead = c.share == Share::None;
  const bool shared = c.share == Share::Kv || c.share == Share::Layerwise;
  const float scale = 1.0f / std::sqrt(float(D));
  std::mt19937 g(c.seed);
  const std::size_t nq = std::size_t(c.B) * c.H * c.Nq, nk = std::size_t(c.B) * c.H * c.N;
  const std::size_t eSize = (perHead ? std::size_t(c.H) : 1) * c.kp * c.Nmax;
  const Vec q = randn(nq * D, g), k = randn(nk * D, g), v = randn(nk * D, g);
  const Vec dout = randn(nq * D, g);
  const float eMult = 1.0f / std::sqrt(float(c.N));
  const Vec E = randn(eSize, g, eMult);
  const Vec F = shared ? E : randn(eSize, g, eMult);

  RefLowRank L;
  L.B = c.B, L.H = c.H, L.Nq = c.Nq, L.N = c.N, L.Nmax = c.Nmax, L.kp = c.kp, L.D = D;
  L.perHead = perHead, L.sharedEF = shared, L.scale = scale, L.lengths = c.lengths;
  L.q = toD(q), L.k = toD(k), L.v = toD(v), L.dout = toD(dout), L.E = toD(E), L.F = toD(F);
  L.dropout = V::kDropP;
  const auto ref = L.run(true);

  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::size_t np = std::size_t(c.B) * c.H * c.kp * D;
  Vec kpb(np, nan), vpb(np, nan), out(nq * D, nan), lse(nq, nan);
  attnc::cpu::LowRankFwdArgs fa{};
  fa.q = q.data(), fa.k = k.data(), fa.v = v.data(), fa.E = E.data(),
  fa.F = shared ? E.data() : F.data();
  fa.kp = kpb.data(), fa.vp = vpb.data(), fa.out = out.data(), fa.lse = lse.data();
  fa.lengths = c.lengths.empty() ? nullptr : c.lengths.data();
  fa.params = nullptr;
  fa.B = c.B, fa.H = c.H, fa.Nq = c.Nq, fa.N = c.N, fa.Nmax = c.Nmax, fa.kProj = c.kp;
  fa.perHead = perHead, fa.scale = scale;
  fa.dropout = V::kDropP, fa.dropout_seed = kDropoutSeed, fa.dropout_offset = kDropoutOffset;
  ASSERT_EQ((attnc::cpu::lowrank_fwd<BQ, BKV, D, V>(fa)), 0);

  Vec delta(nq), dkp(np, nan), dvp(np, nan), dq(nq * D, nan), dk(nk * D, nan), dv(nk * D, nan);
  // dE[:, n:] must stay untouched: start from a known value there.
  Vec dE(eSize, 0.0f), dF(eSize, 0.0f);
  attnc::cpu::LowRankBwdArgs ba{};
  ba.q = q.data(), ba.k = k.data(), ba.v = v.data(), ba.E = fa.E, ba.F = fa.F;
  ba.kp = kpb.data(), ba.vp = vpb.data(), ba.out = out.data(), ba.dout = dout.data();
  ba.lse = lse.data(), ba.lengths = fa.lengths, ba.params = nullptr, ba.delta = delta.data();
  ba.dkp = dkp.data(), ba.dvp = dvp.data(), ba.dq = dq.data(), ba.dk = dk.data(), ba.dv = dv.data();
  ba.dE = dE.data(), ba.dF = shared ? dE.data() : dF.data();
  ba.dparams = nullptr, ba.dparams_partial = nullptr;
  ba.B = c.B, ba.H = c.H, ba.Nq = c.Nq, ba.N = c.N, ba.Nmax = c.Nmax, ba.kProj = c.kp;
  ba.perHead = perHead, ba.scale = scale;
  ba.dropout = fa.dropout, ba.dropout_seed = fa.dropout_seed, ba.dropout_offset = fa.dropout_offset;
  ASSERT_EQ((attnc::cpu::lowrank_bwd<BQ, BKV, D, V>(ba)), 0);

  Err eo, el, edq, edk, edv, edE, edF;
  EXPECT_TRUE(close("out", out.data(), ref.out, &eo));
  EXPECT_TRUE(close("lse", lse.data(), ref.lse, &el));
  EXPECT_TRUE(close("dq", dq.data(), ref.dq, &edq));
  EXPECT_TRUE(close("dk", dk.data(), ref.dk, &edk));
  EXPECT_TRUE(close("dv", dv.data(), ref.dv, &edv));
  EXPECT_TRUE(close("dE", dE.data(), ref.dE, &edE));
  if (!shared) {
    EXPECT_TRUE(close("dF", dF.data(), ref.dF, &edF));
  }
  // Columns n..Nmax of dE / dF receive nothing (the reference has 0 there).
  for (int r = 0; r < (perHead ? c.H : 1) * c.kp; ++r)
    for (int j = c.N; j < c.Nmax; ++j) {
      ASSERT_EQ(dE[std::size_t(r) * c.Nmax + j], 0.0f);
      ASSERT_EQ(dF[std::size_t(r) * c.Nmax + j], 0.0f);
    }
  std::printf("[cpu-kernels] lowrank %-9s%s D=%-3d tile %3dx%-3d B=%d H=%d N=%-4d Nmax=%-4d k=%-3d "
              "err out %.1e lse %.1e dq %.1e dk %.1e dv %.1e dE %.1e dF %.1e\n",
              shareName(c.share), V::kDropout ? " dropout" : "", D, BQ, BKV, c.B, c.H, c.N, c.Nmax,
              c.kp, eo.scaled, el.scaled, edq.scaled, edk.scaled, edv.scaled, edE.scaled,
              edF.scaled);
}

std::vector<NamedCase> lowRankGrid() {
  std::vector<NamedCase> cs;
  unsigned seed = 500;
  for (Share s : {Share::None, Share::Headwise, Share::Kv, Share::Layerwise}) {
    const std::string sn = shareName(s);
    // n < Nmax with padding (one batch fully padded), N < k, N = Nmax without lengths.
    LowRankCase a{s, 2, 3, 257, 257, 300, 64, {200, 0}, seed++};
    LowRankCase b{s, 2, 3, 7, 7, 10, 16, {5, 7}, seed++};
    LowRankCase c{s, 2, 2, 100, 100, 100, 32, {}, seed++};
    cs.push_back({sn + "_D64_T64x64_N257_Nmax300_k64", [a] { checkLowRank<64, 64, 64>(a); }});
    cs.push_back({sn + "_D32_T16x32_N7_Nmax10_k16", [b] { checkLowRank<16, 32, 32>(b); }});
    cs.push_back({sn + "_D80_T16x32_N100_k32", [c] { checkLowRank<16, 32, 80>(c); }});
    // Attention dropout over the projected keys (25 %).
    cs.push_back({sn + "_D64_T64x64_N257_Nmax300_k64_dropout",
                  [a] { checkLowRank<64, 64, 64, DenseDrop>(a); }});
  }
  return cs;
}

class CpuLowRank : public ::testing::TestWithParam<NamedCase> {};
TEST_P(CpuLowRank, FwdBwdMatchReference) { GetParam().run(); }
INSTANTIATE_TEST_SUITE_P(Grid, CpuLowRank, ::testing::ValuesIn(lowRankGrid()),
                         [](const ::testing::TestParamInfo<NamedCase> &i) { return i.param.name; });

//===----------------------------------------------------------------------===//
// Unfused baseline (benchmarks) vs the reference
//===----------------------------------------------------------------------===//

template <int D, class V> void checkUnfused(const AttnCase &c) {
  constexpr int P = V::kNumParams;
  const float scale = 1.0f / std::sqrt(float(D));
  const AttnData x = makeData(c, D, V::kHasScoreMod);
  const RefResult ref = refAttention(specOf<V>(), refInputsOf(c, x, D, scale), true);
  const std::size_t nq = std::size_t(c.B) * c.H * c.Nq, nk = std::size_t(c.B) * c.H * c.Nk;
  Vec out(nq * D), lse(nq), delta(nq), dq(nq * D), dk(nk * D), dv(nk * D), dp(P * c.H, 0.0f);
  attnc::AttnFwdArgs f{};
  f.q = x.q.data(), f.k = x.k.data(), f.v = x.v.data(), f.out = out.data(), f.lse = lse.data();
  f.lengths = V::kKeyPadding ? x.lengths.data() : nullptr;
  f.params = P ? x.params.data() : nullptr;
  f.B = c.B, f.H = c.H, f.Nq = c.Nq, f.Nk = c.Nk, f.scale = scale;
  f.dropout = V::kDropP, f.dropout_seed = kDropoutSeed, f.dropout_offset = kDropoutOffset;
  ASSERT_EQ((attnc::cpu::unfused_fwd<D, V>(f)), 0);
  attnc::AttnBwdArgs g{};
  g.q = f.q, g.k = f.k, g.v = f.v, g.out = out.data(), g.dout = x.dout.data(), g.lse = lse.data();
  g.lengths = f.lengths, g.params = f.params, g.delta = delta.data();
  g.dq = dq.data(), g.dk = dk.data(), g.dv = dv.data(), g.dparams = P ? dp.data() : nullptr;
  g.B = c.B, g.H = c.H, g.Nq = c.Nq, g.Nk = c.Nk, g.scale = scale;
  g.dropout = f.dropout, g.dropout_seed = f.dropout_seed, g.dropout_offset = f.dropout_offset;
  ASSERT_EQ((attnc::cpu::unfused_bwd<D, V>(g)), 0);
  EXPECT_TRUE(close("out", out.data(), ref.out, nullptr));
  EXPECT_TRUE(close("lse", lse.data(), ref.lse, nullptr));
  EXPECT_TRUE(close("dq", dq.data(), ref.dq, nullptr));
  EXPECT_TRUE(close("dk", dk.data(), ref.dk, nullptr));
  EXPECT_TRUE(close("dv", dv.data(), ref.dv, nullptr));
  if (P) {
    EXPECT_TRUE(close("dparams", dp.data(), ref.dparams, nullptr, &ref.dparamsMag));
  }
}

TEST(CpuUnfused, MatchesReference) {
  for (int n : {1, 7, 130}) {
    AttnCase c;
    c.Nq = c.Nk = n;
    c.seed = 900u + n;
    checkUnfused<64, Dense>(c);
    checkUnfused<64, All>(c);
    checkUnfused<32, CausalPad>(c);
  }
  AttnCase c;
  c.B = 1, c.H = 2, c.Nq = 50, c.Nk = 90, c.lengths = {70};
  checkUnfused<80, Mod>(c);
}

TEST(CpuBuild, Configuration) {
  std::printf("[cpu-kernels] SIMD width %d floats, CBLAS %s, OpenMP %s\n", attnc::cpu::kVecWidth,
#ifdef ATTNC_CPU_HAVE_CBLAS
              "yes",
#else
              "no",
#endif
#ifdef _OPENMP
              "yes"
#else
              "no"
#endif
  );
  EXPECT_GE(attnc::cpu::kVecWidth, 1);
}

//===----------------------------------------------------------------------===//
// Determinism and argument checks
//===----------------------------------------------------------------------===//

template <int BQ, int BKV, int D, class V> void checkDeterministic(AttnCase c) {
  const AttnData x = makeData(c, D, V::kHasScoreMod);
  std::vector<KernelOutputs> runs;
  for (int threads : {1, 2, 3, 2}) {
    setThreads(threads);
    runs.push_back(runFlash<BQ, BKV, D, V>(c, x, 0.125f));
  }
  setThreads(2);
  auto same = [](const Vec &a, const Vec &b) {
    return a.size() == b.size() &&
           (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
  };
  for (std::size_t r = 1; r < runs.size(); ++r) {
    EXPECT_TRUE(same(runs[0].out, runs[r].out)) << "out, run " << r;
    EXPECT_TRUE(same(runs[0].lse, runs[r].lse)) << "lse, run " << r;
    EXPECT_TRUE(same(runs[0].dq, runs[r].dq)) << "dq, run " << r;
    EXPECT_TRUE(same(runs[0].dk, runs[r].dk)) << "dk, run " << r;
    EXPECT_TRUE(same(runs[0].dv, runs[r].dv)) << "dv, run " << r;
    EXPECT_TRUE(same(runs[0].dparams, runs[r].dparams)) << "dparams, run " << r;
  }
}

TEST(CpuDeterminism, BackwardBitIdenticalAcrossThreadCounts) {
  AttnCase c;
  c.B = 2, c.H = 3, c.Nq = c.Nk = 300, c.seed = 4242;
  c.lengths = {250, 300};
  checkDeterministic<64, 64, 64, All>(c);
  checkDeterministic<16, 32, 80, Mod>(c);
  checkDeterministic<64, 64, 128, Dense>(c);
}

TEST(CpuDeterminism, LowRankBitIdenticalAcrossThreadCounts) {
  const int B = 2, H = 2, N = 150, Nmax = 160, kp = 48, Nq = 150;
  constexpr int D = 32;
  std::mt19937 g(3);
  const Vec q = randn(std::size_t(B) * H * Nq * D, g), k = randn(std::size_t(B) * H * N * D, g);
  const Vec v = randn(k.size(), g), dout = randn(q.size(), g),
            E = randn(std::size_t(kp) * Nmax, g, 0.1f);
  const std::vector<int> lengths = {120, 150};
  std::vector<Vec> dEs, dks;
  for (int threads : {1, 2, 3}) {
    setThreads(threads);
    const std::size_t np = std::size_t(B) * H * kp * D;
    Vec kpb(np), vpb(np), out(q.size()), lse(std::size_t(B) * H * Nq), delta(lse.size());
    Vec dkp(np), dvp(np), dq(q.size()), dk(k.size()), dv(k.size()), dE(E.size(), 0.0f);
    attnc::cpu::LowRankFwdArgs fa{q.data(),   k.data(),   v.data(),   E.data(),   E.data(),
                                  kpb.data(), vpb.data(), out.data(), lse.data(), lengths.data(),
                                  nullptr,    B,          H,          Nq,         N,
                                  Nmax,       kp,         false,      0.2f};
    ASSERT_EQ((attnc::cpu::lowrank_fwd<64, 64, D, Dense>(fa)), 0);
    attnc::cpu::LowRankBwdArgs ba{q.data(),
                                  k.data(),
                                  v.data(),
                                  E.data(),
                                  E.data(),
                                  kpb.data(),
                                  vpb.data(),
                                  out.data(),
                                  dout.data(),
                                  lse.data(),
                                  lengths.data(),
                                  nullptr,
                                  delta.data(),
                                  dkp.data(),
                                  dvp.data(),
                                  dq.data(),
                                  dk.data(),
                                  dv.data(),
                                  dE.data(),
                                  dE.data(),
                                  nullptr,
                                  nullptr,
                                  B,
                                  H,
                                  Nq,
                                  N,
                                  Nmax,
                                  kp,
                                  false,
                                  0.2f};
    ASSERT_EQ((attnc::cpu::lowrank_bwd<64, 64, D, Dense>(ba)), 0);
    dEs.push_back(dE);
    dks.push_back(dk);
  }
  setThreads(2);
  for (std::size_t r = 1; r < dEs.size(); ++r) {
    EXPECT_EQ(std::memcmp(dEs[0].data(), dEs[r].data(), dEs[0].size() * 4), 0) << "dE run " << r;
    EXPECT_EQ(std::memcmp(dks[0].data(), dks[r].data(), dks[0].size() * 4), 0) << "dk run " << r;
  }
}

/// The loop projections (used without CBLAS) in every build: bit-identical
/// across OpenMP thread counts, and equal to the selected projection
/// (CBLAS in the main test build) within fp32 rounding.
TEST(CpuDeterminism, LowRankLoopProjectionsAcrossThreadCounts) {
  using namespace attnc::cpu;
  for (bool perHead : {false, true}) {
    const int B = 3, H = 2, N = 200, Nmax = 230, kp = 70, D = 48;
    std::mt19937 g(8 + perHead);
    const Vec x = randn(std::size_t(B) * H * N * D, g);
    const Vec E = randn((perHead ? H : 1) * std::size_t(kp) * Nmax, g, 0.07f);
    const Vec dxp = randn(std::size_t(B) * H * kp * D, g);
    const std::vector<int> lengths = {130, 0, 250};
    std::vector<Vec> runs;
    for (int threads : {1, 2, 3}) {
      setThreads(threads);
      Vec xp(dxp.size()), dx(x.size()), dE(E.size(), 0.5f);
      ASSERT_EQ(lowrank_project_fwd_loops(x.data(), E.data(), xp.data(), lengths.data(), B, H, N, D,
                                          kp, Nmax, perHead),
                0);
      ASSERT_EQ(lowrank_project_bwd_loops(x.data(), E.data(), dxp.data(), dx.data(), dE.data(),
                                          lengths.data(), B, H, N, D, kp, Nmax, perHead),
                0);
      Vec all = xp;
      all.insert(all.end(), dx.begin(), dx.end());
      all.insert(all.end(), dE.begin(), dE.end());
      runs.push_back(all);
    }
    setThreads(2);
    for (std::size_t r = 1; r < runs.size(); ++r)
      EXPECT_EQ(std::memcmp(runs[0].data(), runs[r].data(), runs[0].size() * 4), 0)
          << "run " << r << " perHead " << perHead;
    // Against the selected implementation.
    Vec xp(dxp.size()), dx(x.size()), dE(E.size(), 0.5f);
    ASSERT_EQ(lowrank_project_fwd(x.data(), E.data(), xp.data(), lengths.data(), B, H, N, D, kp,
                                  Nmax, perHead),
              0);
    ASSERT_EQ(lowrank_project_bwd(x.data(), E.data(), dxp.data(), dx.data(), dE.data(),
                                  lengths.data(), B, H, N, D, kp, Nmax, perHead),
              0);
    Vec sel = xp;
    sel.insert(sel.end(), dx.begin(), dx.end());
    sel.insert(sel.end(), dE.begin(), dE.end());
    EXPECT_TRUE(close("loops vs selected projection", runs[0].data(), toD(sel), nullptr));
    // dE columns >= max length (230 > N = 200, and past the longest valid
    // row) stay untouched.
    for (std::size_t r = 0; r < E.size() / Nmax; ++r)
      for (int j = N; j < Nmax; ++j)
        ASSERT_EQ(runs[0][xp.size() + dx.size() + r * Nmax + j], 0.5f);
  }
}

TEST(CpuArgs, InvalidArgumentsAreRejected) {
  using namespace attnc::cpu;
  Vec buf(4096, 0.0f);
  int lens[2] = {1, 1};
  float params[8] = {1, 1, 1, 1, 0, 0, 0, 0};
  attnc::AttnFwdArgs f{buf.data(), buf.data(), buf.data(), buf.data(), buf.data(), lens,
                       params,     1,          1,          4,          4,          1.0f};
  EXPECT_EQ((flash_fwd<16, 16, 32, Dense>(f)), kOk);
  auto fwdWith = [&](auto mutate) {
    attnc::AttnFwdArgs g = f;
    mutate(g);
    return flash_fwd<16, 16, 32, All>(g);
  };
  EXPECT_EQ(fwdWith([](attnc::AttnFwdArgs &g) { g.q = nullptr; }), kErrNullPointer);
  EXPECT_EQ(fwdWith([](attnc::AttnFwdArgs &g) { g.out = nullptr; }), kErrNullPointer);
  EXPECT_EQ(fwdWith([](attnc::AttnFwdArgs &g) { g.lse = nullptr; }), kErrNullPointer);
  EXPECT_EQ(fwdWith([](attnc::AttnFwdArgs &g) { g.lengths = nullptr; }), kErrNullPointer);
  EXPECT_EQ(fwdWith([](attnc::AttnFwdArgs &g) { g.params = nullptr; }), kErrNullPointer);
  EXPECT_EQ(fwdWith([](attnc::AttnFwdArgs &g) { g.B = 0; }), kErrBadSize);
  EXPECT_EQ(fwdWith([](attnc::AttnFwdArgs &g) { g.H = -1; }), kErrBadSize);
  EXPECT_EQ(fwdWith([](attnc::AttnFwdArgs &g) { g.Nq = 0; }), kErrBadSize);
  EXPECT_EQ(fwdWith([](attnc::AttnFwdArgs &g) { g.Nk = 0; }), kErrBadSize);

  float dparams[2] = {0, 0};
  attnc::AttnBwdArgs b{buf.data(), buf.data(), buf.data(), buf.data(), buf.data(),
                       buf.data(), lens,       params,     buf.data(), buf.data(),
                       buf.data(), buf.data(), dparams,    nullptr,    1,
                       1,          4,          4,          1.0f};
  EXPECT_EQ((flash_bwd<16, 16, 32, All>(b)), kOk);
  auto bwdWith = [&](auto mutate) {
    attnc::AttnBwdArgs g = b;
    mutate(g);
    return flash_bwd<16, 16, 32, All>(g);
  };
  EXPECT_EQ(bwdWith([](attnc::AttnBwdArgs &g) { g.delta = nullptr; }), kErrNullPointer);
  EXPECT_EQ(bwdWith([](attnc::AttnBwdArgs &g) { g.dk = nullptr; }), kErrNullPointer);
  EXPECT_EQ(bwdWith([](attnc::AttnBwdArgs &g) { g.dparams = nullptr; }), kErrNullPointer);
  EXPECT_EQ(bwdWith([](attnc::AttnBwdArgs &g) { g.Nk = -3; }), kErrBadSize);
  EXPECT_EQ((unfused_fwd<32, Dense>(attnc::AttnFwdArgs{})), kErrNullPointer);

  // Low-rank: N > Nmax, non-positive k.
  EXPECT_EQ(
      lowrank_project_fwd(buf.data(), buf.data(), buf.data(), nullptr, 1, 1, 8, 4, 2, 6, false),
      kErrBadSize);
  EXPECT_EQ(
      lowrank_project_fwd(buf.data(), buf.data(), buf.data(), nullptr, 1, 1, 8, 4, 0, 8, false),
      kErrBadSize);
  EXPECT_EQ(lowrank_project_fwd(nullptr, buf.data(), buf.data(), nullptr, 1, 1, 8, 4, 2, 8, false),
            kErrNullPointer);
}

} // namespace
