//===- TrainLayersTest.cpp - test/reference/Layers.h against references ---===//
//
// Every op against a plain double-precision reference written here, on shapes
// that are multiples of nothing; the references' own gradients against
// central finite differences; directional finite differences of the fp32
// backward; the conventions (parameter gradients accumulate, input gradients
// are written unless asked to accumulate); chunked FFN == unchunked bit for
// bit; bit-identical results with 1 and 2 OpenMP threads.
//
//===----------------------------------------------------------------------===//
#include "test/reference/Layers.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

using namespace attnc::train;

namespace {

using VF = std::vector<float>;
using VD = std::vector<double>;

const int kRows[] = {1, 7, 37};
const int kDims[] = {8, 24, 40};
constexpr int kDff = 72;
const Activation kActs[] = {Activation::Relu, Activation::Gelu, Activation::Silu};

const char *actName(Activation a) {
  switch (a) {
  case Activation::Relu:
    return "relu";
  case Activation::Gelu:
    return "gelu";
  case Activation::Silu:
    return "silu";
  }
  return "?";
}

VF randn(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  VF v(n);
  for (float &x : v)
    x = d(g);
  return v;
}

VD toD(const VF &v) { return VD(v.begin(), v.end()); }

/// max |got − ref| ≤ tol·max(1, max |ref|).
void expectClose(const VF &got, const VD &ref, double tol, const std::string &what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double scale = 1.0, err = 0.0;
  size_t worst = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    scale = std::max(scale, std::fabs(ref[i]));
    double e = std::fabs(double(got[i]) - ref[i]);
    if (!(e <= err)) { // NaN-safe
      err = e;
      worst = i;
    }
  }
  EXPECT_LE(err, tol * scale) << what << ": worst at " << worst << " got " << got[worst] << " want "
                              << ref[worst];
}

bool sameBits(const VF &a, const VF &b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double dotD(const VF &a, const VF &b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i)
    s += double(a[i]) * b[i];
  return s;
}

//===----------------------------------------------------------------------===//
// Double references.
//===----------------------------------------------------------------------===//

// y = x·w (+ b)
VD refLinear(const VD &x, const VD &w, const VD *b, int rows, int in, int out) {
  VD y(size_t(rows) * out);
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < out; ++j) {
      double s = b ? (*b)[j] : 0.0;
      for (int k = 0; k < in; ++k)
        s += x[size_t(r) * in + k] * w[size_t(k) * out + j];
      y[size_t(r) * out + j] = s;
    }
  return y;
}

struct LinGrads {
  VD dx, dw, db;
};
LinGrads refLinearBwd(const VD &dy, const VD &x, const VD &w, int rows, int in, int out) {
  LinGrads g{VD(size_t(rows) * in, 0.0), VD(size_t(in) * out, 0.0), VD(out, 0.0)};
  for (int r = 0; r < rows; ++r)
    for (int j = 0; j < out; ++j) {
      double d = dy[size_t(r) * out + j];
      g.db[j] += d;
      for (int k = 0; k < in; ++k) {
        g.dx[size_t(r) * in + k] += d * w[size_t(k) * out + j];
        g.dw[size_t(k) * out + j] += x[size_t(r) * in + k] * d;
      }
    }
  return g;
}

double refAct(Activation a, double x) {
  switch (a) {
  case Activation::Relu:
    return x > 0 ? x : 0;
  case Activation::Gelu:
    return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
  case Activation::Silu:
    return x / (1 + std::exp(-x));
  }
  return x;
}
double refActGrad(Activation a, double x) {
  switch (a) {
  case Activation::Relu:
    return x > 0 ? 1 : 0;
  case Activation::Gelu: {
    double c = std::sqrt(2 / M_PI), t = std::tanh(c * (x + 0.044715 * x * x * x));
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * c * (1 + 3 * 0.044715 * x * x);
  }
  case Activation::Silu: {
    double s = 1 / (1 + std::exp(-x));
    return s * (1 + x * (1 - s));
  }
  }
  return 1;
}

struct FfnParams {
  VF x, w1, b1, w2, b2;
};
FfnParams makeFfn(int rows, int dim, int dff, unsigned seed) {
  return {randn(size_t(rows) * dim, seed), randn(size_t(dim) * dff, seed + 1, 0.3f),
          randn(dff, seed + 2, 0.2f), randn(size_t(dff) * dim, seed + 3, 0.2f),
          randn(dim, seed + 4, 0.2f)};
}

struct FfnD {
  VD x, w1, b1, w2, b2;
};
FfnD toD(const FfnParams &p) { return {toD(p.x), toD(p.w1), toD(p.b1), toD(p.w2), toD(p.b2)}; }

VD refFfn(const FfnD &p, int rows, int dim, int dff, Activation a) {
  VD h = refLinear(p.x, p.w1, &p.b1, rows, dim, dff);
  for (double &v : h)
    v = refAct(a, v);
  return refLinear(h, p.w2, &p.b2, rows, dff, dim);
}

struct FfnGrads {
  VD dx, dw1, db1, dw2, db2;
};
FfnGrads refFfnBwd(const VD &dy, const FfnD &p, int rows, int dim, int dff, Activation a) {
  VD pre = refLinear(p.x, p.w1, &p.b1, rows, dim, dff), h = pre;
  for (double &v : h)
    v = refAct(a, v);
  LinGrads g2 = refLinearBwd(dy, h, p.w2, rows, dff, dim);
  for (size_t i = 0; i < pre.size(); ++i)
    g2.dx[i] *= refActGrad(a, pre[i]);
  LinGrads g1 = refLinearBwd(g2.dx, p.x, p.w1, rows, dim, dff);
  return {g1.dx, g1.dw, g1.db, g2.dw, g2.db};
}

void refLayerNorm(const VD &x, const VD &g, const VD &b, int rows, int dim, VD &y, VD &mean,
                  VD &rstd) {
  y.assign(size_t(rows) * dim, 0);
  mean.assign(rows, 0);
  rstd.assign(rows, 0);
  for (int r = 0; r < rows; ++r) {
    double m = 0, v = 0;
    for (int j = 0; j < dim; ++j)
      m += x[size_t(r) * dim + j];
    m /= dim;
    for (int j = 0; j < dim; ++j)
      v += (x[size_t(r) * dim + j] - m) * (x[size_t(r) * dim + j] - m);
    double rs = 1 / std::sqrt(v / dim + 1e-5);
    mean[r] = m;
    rstd[r] = rs;
    for (int j = 0; j < dim; ++j)
      y[size_t(r) * dim + j] = (x[size_t(r) * dim + j] - m) * rs * g[j] + b[j];
  }
}

struct LnGrads {
  VD dx, dg, db;
};
LnGrads refLayerNormBwd(const VD &dy, const VD &x, const VD &g, int rows, int dim) {
  VD y, mean, rstd;
  refLayerNorm(x, g, VD(dim, 0.0), rows, dim, y, mean, rstd);
  LnGrads out{VD(size_t(rows) * dim), VD(dim, 0.0), VD(dim, 0.0)};
  for (int r = 0; r < rows; ++r) {
    double sg = 0, sgx = 0;
    for (int j = 0; j < dim; ++j) {
      size_t i = size_t(r) * dim + j;
      double xh = (x[i] - mean[r]) * rstd[r], gg = dy[i] * g[j];
      sg += gg;
      sgx += gg * xh;
      out.dg[j] += dy[i] * xh;
      out.db[j] += dy[i];
    }
    for (int j = 0; j < dim; ++j) {
      size_t i = size_t(r) * dim + j;
      double xh = (x[i] - mean[r]) * rstd[r];
      out.dx[i] = rstd[r] * (dy[i] * g[j] - sg / dim - xh * sgx / dim);
    }
  }
  return out;
}

/// Σ −log softmax(l)[t] and the gradient of the sum (ignored rows: 0).
double refCrossEntropy(const VD &l, const std::vector<int32_t> &t, int rows, int vocab, VD *d) {
  double loss = 0;
  if (d)
    d->assign(size_t(rows) * vocab, 0.0);
  for (int r = 0; r < rows; ++r) {
    if (t[r] < 0)
      continue;
    double m = -INFINITY, s = 0;
    for (int j = 0; j < vocab; ++j)
      m = std::max(m, l[size_t(r) * vocab + j]);
    for (int j = 0; j < vocab; ++j)
      s += std::exp(l[size_t(r) * vocab + j] - m);
    loss += m + std::log(s) - l[size_t(r) * vocab + t[r]];
    if (d)
      for (int j = 0; j < vocab; ++j)
        (*d)[size_t(r) * vocab + j] =
            std::exp(l[size_t(r) * vocab + j] - m) / s - (j == t[r] ? 1.0 : 0.0);
  }
  return loss;
}

/// Central differences of f at x along every coordinate (double).
VD numericGrad(const std::function<double(const VD &)> &f, VD x, double eps = 1e-6) {
  VD g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    double keep = x[i];
    x[i] = keep + eps;
    double fp = f(x);
    x[i] = keep - eps;
    double fm = f(x);
    x[i] = keep;
    g[i] = (fp - fm) / (2 * eps);
  }
  return g;
}

void expectGradClose(const VD &num, const VD &ana, double tol, const std::string &what) {
  ASSERT_EQ(num.size(), ana.size());
  double scale = 1e-3, err = 0;
  for (size_t i = 0; i < num.size(); ++i) {
    scale = std::max(scale, std::fabs(ana[i]));
    err = std::max(err, std::fabs(num[i] - ana[i]));
  }
  EXPECT_LE(err, tol * scale) << what;
}

double weighted(const VD &y, const VD &dy) {
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i)
    s += y[i] * dy[i];
  return s;
}

/// Directional check of an fp32 backward: (L(p+εu) − L(p−εu))/2ε against
/// Σ grad·u, L(p) = Σ dy·f(p) accumulated in double.
void expectDirectional(const std::function<double(float)> &lossAt, double analytic, double mag,
                       const std::string &what, float eps = 1e-2f) {
  double fd = (lossAt(eps) - lossAt(-eps)) / (2.0 * eps);
  EXPECT_NEAR(fd, analytic, 3e-2 * std::fabs(analytic) + 1e-3 * mag + 1e-4)
      << what << " fd " << fd << " analytic " << analytic;
}

void setThreads(int n) {
#if defined(_OPENMP)
  omp_set_num_threads(n);
#else
  (void)n;
#endif
}

//===----------------------------------------------------------------------===//
// Embedding.
//===----------------------------------------------------------------------===//

TEST(TrainLayersEmbedding, ForwardMatchesReference) {
  const int vocab = 11, seq = 5;
  for (int rows : kRows)
    for (int dim : kDims) {
      VF tok = randn(size_t(vocab) * dim, 1), pos = randn(size_t(seq) * dim, 2);
      std::vector<int32_t> t(rows);
      for (int r = 0; r < rows; ++r)
        t[r] = (r * 7 + 3) % vocab;
      VF y(size_t(rows) * dim, -7.0f);
      embeddingForward(t.data(), tok.data(), pos.data(), y.data(), rows, seq, dim);
      VD ref(y.size());
      for (int r = 0; r < rows; ++r)
        for (int j = 0; j < dim; ++j)
          ref[size_t(r) * dim + j] =
              double(tok[size_t(t[r]) * dim + j]) + pos[size_t(r % seq) * dim + j];
      expectClose(y, ref, 1e-6, "rows " + std::to_string(rows) + " dim " + std::to_string(dim));
    }
}

TEST(TrainLayersEmbedding, BackwardRepeatedTokensAccumulatesInRowOrder) {
  const int vocab = 13, seq = 6;
  for (int rows : {1, 7, 37, 300})
    for (int dim : kDims) {
      // Mostly one token, a few others, one unused table row.
      std::vector<int32_t> t(rows);
      for (int r = 0; r < rows; ++r)
        t[r] = r % 5 == 4 ? (r / 5) % (vocab - 1) : 3;
      VF dy = randn(size_t(rows) * dim, 3);
      VF dtok = randn(size_t(vocab) * dim, 4), dpos = randn(size_t(seq) * dim, 5);
      VD refTok = toD(dtok), refPos = toD(dpos);
      VF serialTok = dtok, serialPos = dpos; // the same sums, rows in order
      for (int r = 0; r < rows; ++r)
        for (int j = 0; j < dim; ++j) {
          float g = dy[size_t(r) * dim + j];
          refTok[size_t(t[r]) * dim + j] += g;
          refPos[size_t(r % seq) * dim + j] += g;
          serialTok[size_t(t[r]) * dim + j] += g;
          serialPos[size_t(r % seq) * dim + j] += g;
        }
      embeddingBackward(t.data(), dy.data(), dtok.data(), dpos.data(), rows, seq, dim, vocab);
      std::string what = "rows " + std::to_string(rows) + " dim " + std::to_string(dim);
      expectClose(dtok, refTok, 1e-5, what + " dtok");
      expectClose(dpos, refPos, 1e-5, what + " dpos");
      EXPECT_TRUE(sameBits(dtok, serialTok)) << what;
      EXPECT_TRUE(sameBits(dpos, serialPos)) << what;
    }
}

//===----------------------------------------------------------------------===//
// Layer norm.
//===----------------------------------------------------------------------===//

TEST(TrainLayersLayerNorm, ForwardMatchesReference) {
  for (int rows : kRows)
    for (int dim : kDims) {
      VF x = randn(size_t(rows) * dim, 10, 3.0f), g = randn(dim, 11), b = randn(dim, 12);
      for (float &v : x)
        v += 5.0f; // an offset the mean has to remove
      VF y(x.size()), mean(rows), rstd(rows);
      layerNormForward(x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(), rows, dim);
      VD ry, rm, rr;
      refLayerNorm(toD(x), toD(g), toD(b), rows, dim, ry, rm, rr);
      std::string what = "rows " + std::to_string(rows) + " dim " + std::to_string(dim);
      expectClose(y, ry, 2e-6 * 8, what + " y");
      expectClose(mean, rm, 1e-6, what + " mean");
      expectClose(rstd, rr, 1e-6, what + " rstd");
    }
}

TEST(TrainLayersLayerNorm, ReferenceGradientMatchesFiniteDifferences) {
  const int rows = 3, dim = 8;
  VD x = toD(randn(rows * dim, 20)), g = toD(randn(dim, 21)), b = toD(randn(dim, 22)),
     dy = toD(randn(rows * dim, 23));
  LnGrads ana = refLayerNormBwd(dy, x, g, rows, dim);
  auto loss = [&](const VD &xx, const VD &gg, const VD &bb) {
    VD y, m, r;
    refLayerNorm(xx, gg, bb, rows, dim, y, m, r);
    return weighted(y, dy);
  };
  expectGradClose(numericGrad([&](const VD &v) { return loss(v, g, b); }, x), ana.dx, 1e-6, "dx");
  expectGradClose(numericGrad([&](const VD &v) { return loss(x, v, b); }, g), ana.dg, 1e-6, "dg");
  expectGradClose(numericGrad([&](const VD &v) { return loss(x, g, v); }, b), ana.db, 1e-6, "db");
}

TEST(TrainLayersLayerNorm, BackwardMatchesReference) {
  for (int rows : {1, 7, 37, 300})
    for (int dim : kDims) {
      VF x = randn(size_t(rows) * dim, 30, 2.0f), g = randn(dim, 31), b = randn(dim, 32),
         dy = randn(size_t(rows) * dim, 33);
      VF y(x.size()), mean(rows), rstd(rows);
      layerNormForward(x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(), rows, dim);
      VF dx(x.size(), 123.0f); // written, not accumulated
      VF dg = randn(dim, 34), db = randn(dim, 35);
      VD refDg = toD(dg), refDb = toD(db);
      layerNormBackward(dy.data(), x.data(), g.data(), mean.data(), rstd.data(), dx.data(),
                        dg.data(), db.data(), rows, dim);
      LnGrads ref = refLayerNormBwd(toD(dy), toD(x), toD(g), rows, dim);
      for (int j = 0; j < dim; ++j) {
        refDg[j] += ref.dg[j];
        refDb[j] += ref.db[j];
      }
      std::string what = "rows " + std::to_string(rows) + " dim " + std::to_string(dim);
      expectClose(dx, ref.dx, 1e-5, what + " dx");
      expectClose(dg, refDg, 1e-5, what + " dgamma");
      expectClose(db, refDb, 1e-5, what + " dbeta");
    }
}

TEST(TrainLayersLayerNorm, DirectionalFiniteDifferenceOfFp32Backward) {
  const int rows = 7, dim = 24;
  VF x = randn(rows * dim, 40), g = randn(dim, 41), b = randn(dim, 42), dy = randn(rows * dim, 43);
  VF ux = randn(rows * dim, 44), ug = randn(dim, 45), ub = randn(dim, 46);
  VF y(x.size()), mean(rows), rstd(rows), dx(x.size()), dg(dim, 0.0f), db(dim, 0.0f);
  layerNormForward(x.data(), g.data(), b.data(), y.data(), mean.data(), rstd.data(), rows, dim);
  layerNormBackward(dy.data(), x.data(), g.data(), mean.data(), rstd.data(), dx.data(), dg.data(),
                    db.data(), rows, dim);
  double ana = dotD(dx, ux) + dotD(dg, ug) + dotD(db, ub);
  auto lossAt = [&](float e) {
    VF xx = x, gg = g, bb = b, yy(x.size()), m(rows), r(rows);
    for (size_t i = 0; i < xx.size(); ++i)
      xx[i] += e * ux[i];
    for (int j = 0; j < dim; ++j) {
      gg[j] += e * ug[j];
      bb[j] += e * ub[j];
    }
    layerNormForward(xx.data(), gg.data(), bb.data(), yy.data(), m.data(), r.data(), rows, dim);
    return dotD(yy, dy);
  };
  expectDirectional(lossAt, ana, std::sqrt(dotD(dx, dx) * dotD(ux, ux)), "layernorm");
}

//===----------------------------------------------------------------------===//
// Linear.
//===----------------------------------------------------------------------===//

TEST(TrainLayersLinear, ForwardMatchesReference) {
  for (int rows : kRows)
    for (int in : kDims)
      for (int out : {8, 40, kDff})
        for (bool bias : {false, true})
          for (bool acc : {false, true}) {
            VF x = randn(size_t(rows) * in, 50), w = randn(size_t(in) * out, 51),
               b = randn(out, 52), y0 = randn(size_t(rows) * out, 53);
            VF y = acc ? y0 : VF(y0.size(), 99.0f);
            linearForward(x.data(), w.data(), bias ? b.data() : nullptr, y.data(), rows, in, out,
                          acc);
            VD bd = toD(b);
            VD ref = refLinear(toD(x), toD(w), bias ? &bd : nullptr, rows, in, out);
            if (acc)
              for (size_t i = 0; i < ref.size(); ++i)
                ref[i] += y0[i];
            expectClose(y, ref, 1e-5,
                        "rows " + std::to_string(rows) + " in " + std::to_string(in) + " out " +
                            std::to_string(out) + (bias ? " bias" : "") + (acc ? " acc" : ""));
          }
}

TEST(TrainLayersLinear, BackwardConventions) {
  for (int rows : {1, 7, 37, 300})
    for (int in : kDims)
      for (int out : {8, kDff})
        for (bool accDx : {false, true}) {
          VF x = randn(size_t(rows) * in, 60), w = randn(size_t(in) * out, 61),
             dy = randn(size_t(rows) * out, 62);
          VF dx0 = randn(size_t(rows) * in, 63), dw0 = randn(size_t(in) * out, 64),
             db0 = randn(out, 65);
          VF dx = accDx ? dx0 : VF(dx0.size(), 77.0f), dw = dw0, db = db0;
          linearBackward(dy.data(), x.data(), w.data(), dx.data(), dw.data(), db.data(), rows, in,
                         out, accDx);
          LinGrads ref = refLinearBwd(toD(dy), toD(x), toD(w), rows, in, out);
          for (size_t i = 0; i < ref.dx.size(); ++i)
            ref.dx[i] += accDx ? dx0[i] : 0.0;
          for (size_t i = 0; i < ref.dw.size(); ++i)
            ref.dw[i] += dw0[i];
          for (int j = 0; j < out; ++j)
            ref.db[j] += db0[j];
          std::string what = "rows " + std::to_string(rows) + " in " + std::to_string(in) +
                             " out " + std::to_string(out) + (accDx ? " accDx" : "");
          expectClose(dx, ref.dx, 1e-5, what + " dx");
          expectClose(dw, ref.dw, 1e-5, what + " dw");
          expectClose(db, ref.db, 1e-5, what + " db");
          // Null dx and db are skipped; dw alone still accumulates.
          VF dw2 = dw0;
          linearBackward(dy.data(), x.data(), w.data(), nullptr, dw2.data(), nullptr, rows, in, out,
                         accDx);
          expectClose(dw2, ref.dw, 1e-5, what + " dw (dx, db null)");
        }
}

//===----------------------------------------------------------------------===//
// Chunked FFN.
//===----------------------------------------------------------------------===//

TEST(TrainLayersFfn, ForwardMatchesReference) {
  for (Activation a : kActs)
    for (int rows : kRows)
      for (int dim : kDims)
        for (int chunk : {1, 5, rows, rows + 3}) {
          FfnParams p = makeFfn(rows, dim, kDff, 70);
          VF y(size_t(rows) * dim, 55.0f);
          ffnForward(p.x.data(), p.w1.data(), p.b1.data(), p.w2.data(), p.b2.data(), y.data(), rows,
                     dim, kDff, chunk, a);
          VD ref = refFfn(toD(p), rows, dim, kDff, a);
          expectClose(y, ref, 1e-5,
                      std::string(actName(a)) + " rows " + std::to_string(rows) + " dim " +
                          std::to_string(dim) + " chunk " + std::to_string(chunk));
        }
}

TEST(TrainLayersFfn, ChunkedEqualsUnchunkedBitForBit) {
  for (Activation a : kActs)
    for (int rows : {1, 7, 37, 200})
      for (int dim : kDims)
        for (bool acc : {false, true}) {
          FfnParams p = makeFfn(rows, dim, kDff, 80);
          VF y0 = randn(size_t(rows) * dim, 81);
          VF whole = y0;
          ffnForward(p.x.data(), p.w1.data(), p.b1.data(), p.w2.data(), p.b2.data(), whole.data(),
                     rows, dim, kDff, rows, a, acc);
          for (int chunk : {1, 5, 13, rows, rows + 3, 0}) {
            VF y = y0;
            ffnForward(p.x.data(), p.w1.data(), p.b1.data(), p.w2.data(), p.b2.data(), y.data(),
                       rows, dim, kDff, chunk, a, acc);
            EXPECT_TRUE(sameBits(y, whole)) << actName(a) << " rows " << rows << " dim " << dim
                                            << " chunk " << chunk << (acc ? " acc" : "");
          }
        }
}

TEST(TrainLayersFfn, ReferenceGradientMatchesFiniteDifferences) {
  const int rows = 3, dim = 5, dff = 7;
  for (Activation a : kActs) {
    FfnD p = toD(makeFfn(rows, dim, dff, 90));
    VD dy = toD(randn(rows * dim, 91));
    FfnGrads g = refFfnBwd(dy, p, rows, dim, dff, a);
    auto at = [&](VD FfnD::*field) {
      return [&, field](const VD &v) {
        FfnD q = p;
        q.*field = v;
        return weighted(refFfn(q, rows, dim, dff, a), dy);
      };
    };
    std::string n = actName(a);
    expectGradClose(numericGrad(at(&FfnD::x), p.x), g.dx, 1e-6, n + " dx");
    expectGradClose(numericGrad(at(&FfnD::w1), p.w1), g.dw1, 1e-6, n + " dw1");
    expectGradClose(numericGrad(at(&FfnD::b1), p.b1), g.db1, 1e-6, n + " db1");
    expectGradClose(numericGrad(at(&FfnD::w2), p.w2), g.dw2, 1e-6, n + " dw2");
    expectGradClose(numericGrad(at(&FfnD::b2), p.b2), g.db2, 1e-6, n + " db2");
  }
}

TEST(TrainLayersFfn, BackwardMatchesReference) {
  for (Activation a : kActs)
    for (int rows : kRows)
      for (int dim : {8, 40})
        for (int chunk : {1, 5, rows, rows + 3})
          for (bool accDx : {false, true}) {
            FfnParams p = makeFfn(rows, dim, kDff, 100);
            VF dy = randn(size_t(rows) * dim, 101);
            VF dx0 = randn(p.x.size(), 102), dw10 = randn(p.w1.size(), 103),
               db10 = randn(p.b1.size(), 104), dw20 = randn(p.w2.size(), 105),
               db20 = randn(p.b2.size(), 106);
            VF dx = accDx ? dx0 : VF(dx0.size(), -3.0f), dw1 = dw10, db1 = db10, dw2 = dw20,
               db2 = db20;
            ffnBackward(dy.data(), p.x.data(), p.w1.data(), p.b1.data(), p.w2.data(), dx.data(),
                        dw1.data(), db1.data(), dw2.data(), db2.data(), rows, dim, kDff, chunk, a,
                        accDx);
            FfnGrads g = refFfnBwd(toD(dy), toD(p), rows, dim, kDff, a);
            auto plus = [](VD v, const VF &base) {
              for (size_t i = 0; i < v.size(); ++i)
                v[i] += base[i];
              return v;
            };
            std::string what = std::string(actName(a)) + " rows " + std::to_string(rows) + " dim " +
                               std::to_string(dim) + " chunk " + std::to_string(chunk) +
                               (accDx ? " accDx" : "");
            expectClose(dx, accDx ? plus(g.dx, dx0) : g.dx, 2e-5, what + " dx");
            expectClose(dw1, plus(g.dw1, dw10), 2e-5, what + " dw1");
            expectClose(db1, plus(g.db1, db10), 2e-5, what + " db1");
            expectClose(dw2, plus(g.dw2, dw20), 2e-5, what + " dw2");
            expectClose(db2, plus(g.db2, db20), 2e-5, what + " db2");
          }
}

TEST(TrainLayersFfn, DirectionalFiniteDifferenceOfFp32Backward) {
  const int rows = 7, dim = 24, chunk = 5;
  for (Activation a : kActs) {
    FfnParams p = makeFfn(rows, dim, kDff, 110), u = makeFfn(rows, dim, kDff, 120);
    VF dy = randn(size_t(rows) * dim, 111);
    VF dx(p.x.size()), dw1(p.w1.size(), 0.0f), db1(p.b1.size(), 0.0f), dw2(p.w2.size(), 0.0f),
        db2(p.b2.size(), 0.0f);
    ffnBackward(dy.data(), p.x.data(), p.w1.data(), p.b1.data(), p.w2.data(), dx.data(), dw1.data(),
                db1.data(), dw2.data(), db2.data(), rows, dim, kDff, chunk, a);
    double ana =
        dotD(dx, u.x) + dotD(dw1, u.w1) + dotD(db1, u.b1) + dotD(dw2, u.w2) + dotD(db2, u.b2);
    auto lossAt = [&](float e) {
      FfnParams q = p;
      auto shift = [e](VF &v, const VF &d) {
        for (size_t i = 0; i < v.size(); ++i)
          v[i] += e * d[i];
      };
      shift(q.x, u.x);
      shift(q.w1, u.w1);
      shift(q.b1, u.b1);
      shift(q.w2, u.w2);
      shift(q.b2, u.b2);
      VF y(p.x.size());
      ffnForward(q.x.data(), q.w1.data(), q.b1.data(), q.w2.data(), q.b2.data(), y.data(), rows,
                 dim, kDff, chunk, a);
      return dotD(y, dy);
    };
    // A small step: ReLU's kinks sit inside a large one.
    expectDirectional(lossAt, ana, std::sqrt(dotD(dx, dx) * dotD(u.x, u.x)), actName(a), 2e-3f);
  }
}

TEST(TrainLayersFfn, GeluIsTheTanhApproximation) {
  // 0.5·x·(1 + tanh(√(2/π)(x + 0.044715x³))) at x = 1: 0.8411920 (erf form:
  // 0.8413447); one row through an identity FFN picks the activation out.
  const int dim = 1, dff = 1;
  float x = 1.0f, w1 = 1.0f, b1 = 0.0f, w2 = 1.0f, b2 = 0.0f, y = 0.0f;
  ffnForward(&x, &w1, &b1, &w2, &b2, &y, 1, dim, dff, 1, Activation::Gelu);
  EXPECT_NEAR(y, 0.8411920, 2e-7);
}

//===----------------------------------------------------------------------===//
// Softmax cross-entropy.
//===----------------------------------------------------------------------===//

TEST(TrainLayersCrossEntropy, MatchesReferenceWithIgnoredRows) {
  for (int rows : kRows)
    for (int vocab : {8, 40, 259}) {
      VF l = randn(size_t(rows) * vocab, 130, 3.0f);
      for (float &v : l)
        v += 50.0f; // large logits: the log-sum-exp must be stable
      std::vector<int32_t> t(rows);
      for (int r = 0; r < rows; ++r)
        t[r] = r % 3 == 1 ? -1 : (r * 5 + 1) % vocab;
      const float scale = 0.25f;
      VF d(l.size(), 42.0f);
      CrossEntropy ce = softmaxCrossEntropy(l.data(), t.data(), d.data(), rows, vocab, scale);
      VD refD;
      double ref = refCrossEntropy(toD(l), t, rows, vocab, &refD);
      for (double &v : refD)
        v *= scale;
      int64_t count = 0, correct = 0;
      for (int r = 0; r < rows; ++r) {
        if (t[r] < 0)
          continue;
        ++count;
        const float *lr = l.data() + size_t(r) * vocab;
        correct += std::max_element(lr, lr + vocab) - lr == t[r];
      }
      std::string what = "rows " + std::to_string(rows) + " vocab " + std::to_string(vocab);
      EXPECT_NEAR(ce.lossSum, ref, 1e-9 * std::max(1.0, std::fabs(ref))) << what;
      EXPECT_EQ(ce.count, count) << what;
      EXPECT_EQ(ce.correct, correct) << what;
      expectClose(d, refD, 1e-6, what + " dlogits");
      for (int r = 0; r < rows; ++r) {
        if (t[r] >= 0)
          continue;
        for (int j = 0; j < vocab; ++j)
          EXPECT_EQ(d[size_t(r) * vocab + j], 0.0f) << what << " ignored row " << r;
      }
      // Without dlogits: the same numbers.
      CrossEntropy ce2 = softmaxCrossEntropy(l.data(), t.data(), nullptr, rows, vocab, scale);
      EXPECT_EQ(ce2.lossSum, ce.lossSum);
      EXPECT_EQ(ce2.count, ce.count);
      EXPECT_EQ(ce2.correct, ce.correct);
    }
}

TEST(TrainLayersCrossEntropy, ArgmaxTiesPickTheFirst) {
  const int vocab = 5;
  VF l = {1, 3, 3, 0, 3,  // tie among 1, 2, 4: argmax 1
          2, 2, 2, 2, 2,  // all equal: argmax 0
          0, 7, 1, 7, 7}; // argmax 1
  std::vector<int32_t> t = {1, 0, 3};
  CrossEntropy ce = softmaxCrossEntropy(l.data(), t.data(), nullptr, 3, vocab, 1.0f);
  EXPECT_EQ(ce.count, 3);
  EXPECT_EQ(ce.correct, 2); // rows 0 and 1; row 2's target 3 ties but is not first
  EXPECT_NEAR(ce.lossSum, refCrossEntropy(toD(l), t, 3, vocab, nullptr), 1e-12);
  std::vector<int32_t> none = {-1, -1, -1};
  CrossEntropy ce0 = softmaxCrossEntropy(l.data(), none.data(), nullptr, 3, vocab, 1.0f);
  EXPECT_EQ(ce0.count, 0);
  EXPECT_EQ(ce0.correct, 0);
  EXPECT_EQ(ce0.lossSum, 0.0);
}

TEST(TrainLayersCrossEntropy, GradientMatchesFiniteDifferences) {
  const int rows = 4, vocab = 6;
  VD l = toD(randn(rows * vocab, 140));
  std::vector<int32_t> t = {2, -1, 0, 5};
  VD ana;
  refCrossEntropy(l, t, rows, vocab, &ana);
  VD num = numericGrad([&](const VD &v) { return refCrossEntropy(v, t, rows, vocab, nullptr); }, l);
  expectGradClose(num, ana, 1e-6, "reference");
  // fp32 backward, directional.
  VF lf(l.begin(), l.end()), u = randn(lf.size(), 141), d(lf.size());
  const float scale = 0.5f;
  softmaxCrossEntropy(lf.data(), t.data(), d.data(), rows, vocab, scale);
  auto lossAt = [&](float e) {
    VF q = lf;
    for (size_t i = 0; i < q.size(); ++i)
      q[i] += e * u[i];
    return softmaxCrossEntropy(q.data(), t.data(), nullptr, rows, vocab, scale).lossSum * scale;
  };
  expectDirectional(lossAt, dotD(d, u), std::sqrt(dotD(d, d) * dotD(u, u)), "cross-entropy");
}

//===----------------------------------------------------------------------===//
// Determinism across OpenMP thread counts.
//===----------------------------------------------------------------------===//

struct AllOutputs {
  std::vector<VF> v;
  double loss = 0;
};

AllOutputs runAll(int threads) {
  setThreads(threads);
  const int rows = 1000, dim = 64, dff = 200, vocab = 300, seq = 50, chunk = 256;
  AllOutputs o;
  std::vector<int32_t> tokens(rows), targets(rows);
  for (int r = 0; r < rows; ++r) {
    tokens[r] = (r * r + 7) % 17; // heavily repeated
    targets[r] = r % 9 == 0 ? -1 : (r * 31) % vocab;
  }
  VF tok = randn(size_t(vocab) * dim, 200), pos = randn(size_t(seq) * dim, 201);
  VF emb(size_t(rows) * dim);
  embeddingForward(tokens.data(), tok.data(), pos.data(), emb.data(), rows, seq, dim);
  VF dy = randn(size_t(rows) * dim, 202);
  VF dtok(tok.size(), 0.0f), dpos(pos.size(), 0.0f);
  embeddingBackward(tokens.data(), dy.data(), dtok.data(), dpos.data(), rows, seq, dim, vocab);
  VF g = randn(dim, 203), b = randn(dim, 204), ln(emb.size()), mean(rows), rstd(rows);
  layerNormForward(emb.data(), g.data(), b.data(), ln.data(), mean.data(), rstd.data(), rows, dim);
  VF dln(emb.size()), dg(dim, 0.0f), db(dim, 0.0f);
  layerNormBackward(dy.data(), emb.data(), g.data(), mean.data(), rstd.data(), dln.data(),
                    dg.data(), db.data(), rows, dim);
  FfnParams p = makeFfn(rows, dim, dff, 205);
  VF ffn(emb.size());
  ffnForward(ln.data(), p.w1.data(), p.b1.data(), p.w2.data(), p.b2.data(), ffn.data(), rows, dim,
             dff, chunk, Activation::Gelu);
  VF fdx(emb.size()), dw1(p.w1.size(), 0.0f), db1(p.b1.size(), 0.0f), dw2(p.w2.size(), 0.0f),
      db2(p.b2.size(), 0.0f);
  ffnBackward(dy.data(), ln.data(), p.w1.data(), p.b1.data(), p.w2.data(), fdx.data(), dw1.data(),
              db1.data(), dw2.data(), db2.data(), rows, dim, dff, chunk, Activation::Silu);
  VF wout = randn(size_t(dim) * vocab, 206), bout = randn(vocab, 207), logits(size_t(rows) * vocab);
  linearForward(ffn.data(), wout.data(), bout.data(), logits.data(), rows, dim, vocab);
  VF dlogits(logits.size());
  CrossEntropy ce =
      softmaxCrossEntropy(logits.data(), targets.data(), dlogits.data(), rows, vocab, 1e-3f);
  VF dh(ffn.size()), dwout(wout.size(), 0.0f), dbout(vocab, 0.0f);
  linearBackward(dlogits.data(), ffn.data(), wout.data(), dh.data(), dwout.data(), dbout.data(),
                 rows, dim, vocab);
  o.v = {emb, dtok, dpos, ln,  mean, rstd,   dln,     dg, db,    ffn,
         fdx, dw1,  db1,  dw2, db2,  logits, dlogits, dh, dwout, dbout};
  o.loss = ce.lossSum;
  setThreads(2);
  return o;
}

TEST(TrainLayersDeterminism, OneVsTwoThreadsBitIdentical) {
  AllOutputs a = runAll(1), b = runAll(2), c = runAll(2);
  ASSERT_EQ(a.v.size(), b.v.size());
  for (size_t i = 0; i < a.v.size(); ++i) {
    EXPECT_TRUE(sameBits(a.v[i], b.v[i])) << "output " << i << " differs, 1 vs 2 threads";
    EXPECT_TRUE(sameBits(b.v[i], c.v[i])) << "output " << i << " differs between runs";
  }
  EXPECT_EQ(std::memcmp(&a.loss, &b.loss, sizeof(double)), 0);
}

} // namespace
