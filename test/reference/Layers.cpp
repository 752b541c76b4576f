//===- Layers.cpp - Building blocks of the whole-model reference ----------===//
//
// Implementation notes (see Layers.h for the interface):
//
// Determinism. Every reduction has an order fixed by the shapes: per-row
// sums run over the row in index order (in double); the linear maps' and the
// feed-forward block's parameter gradients sum over all rows in order (in
// double); the layer-norm gain/shift gradients use fixed blocks of kRowBlock
// rows, each summed in row order, then the block partials in block order; the
// embedding backward walks, for every table row, the rows that use it in
// order. OpenMP only decides which thread does which fixed piece, so results
// are bit-identical across runs and OMP_NUM_THREADS.
//
// Independent of the system under test: the linear maps and the feed-forward
// block are plain loops that multiply and sum in double and round to float
// once per output; nothing here calls the runtime's GEMM or the kernels'
// polynomial exp.
//
// Activations: ReLU (gradient 0 at 0), GELU in its tanh approximation
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (GPT-2 / BERT style; the exact
// erf form differs by < 1e-3), SiLU x·σ(x), with std::tanh and std::exp in
// double.
//
//===----------------------------------------------------------------------===//
#include "test/reference/Layers.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace attnc::train {
namespace {

using std::int64_t;
using std::size_t;

/// Rows per block of the layer norm's column sums.
constexpr int64_t kRowBlock = 128;

//===----------------------------------------------------------------------===//
// Activations and GEMMs, in double.
//===----------------------------------------------------------------------===//

constexpr double kGeluC = 0.7978845608028654; // √(2/π)
constexpr double kGeluA = 0.044715;

double actValue(Activation a, double x) {
  switch (a) {
  case Activation::Relu:
    return x > 0 ? x : 0.0;
  case Activation::Gelu:
    return 0.5 * x * (1.0 + std::tanh(kGeluC * (x + kGeluA * x * x * x)));
  case Activation::Silu:
    return x / (1.0 + std::exp(-x));
  }
  return 0.0;
}

/// d act(x) / dx (ReLU: 0 at 0).
double actSlope(Activation a, double x) {
  switch (a) {
  case Activation::Relu:
    return x > 0 ? 1.0 : 0.0;
  case Activation::Gelu: {
    const double t = std::tanh(kGeluC * (x + kGeluA * x * x * x));
    return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluC * (1.0 + 3.0 * kGeluA * x * x);
  }
  case Activation::Silu: {
    const double s = 1.0 / (1.0 + std::exp(-x));
    return s * (1.0 + x * (1.0 - s));
  }
  }
  return 0.0;
}

/// y[r, o] = Σ_i x[r, i]·w[i, o] (+ b[o]), every product and sum in double.
template <class X>
void matmulRows(const X *x, const float *w, const float *b, double *y, int64_t rows, int in,
                int out) {
#pragma omp parallel for schedule(static) if (rows * in * out > 65536)
  for (int64_t r = 0; r < rows; ++r)
    for (int o = 0; o < out; ++o) {
      double sum = b ? double(b[o]) : 0.0;
      for (int i = 0; i < in; ++i)
        sum += double(x[r * in + i]) * double(w[int64_t(i) * out + o]);
      y[r * out + o] = sum;
    }
}

/// dx[r, i] = Σ_o dy[r, o]·w[i, o], in double.
template <class G>
void matmulRowsByTransposed(const G *dy, const float *w, double *dx, int64_t rows, int in,
                            int out) {
#pragma omp parallel for schedule(static) if (rows * in * out > 65536)
  for (int64_t r = 0; r < rows; ++r)
    for (int i = 0; i < in; ++i) {
      double sum = 0;
      for (int o = 0; o < out; ++o)
        sum += double(dy[r * out + o]) * double(w[int64_t(i) * out + o]);
      dx[r * in + i] = sum;
    }
}

/// dw[i, o] += Σ_r x[r, i]·dy[r, o] (rows in order) and db[o] += Σ_r dy[r, o],
/// in double (dw, db: [in·out] and [out] double sums).
template <class X, class G>
void addOuterSums(const X *x, const G *dy, double *dw, double *db, int64_t rows, int in, int out) {
#pragma omp parallel for schedule(static) if (rows * in * out > 65536)
  for (int i = 0; i < in; ++i)
    for (int o = 0; o < out; ++o) {
      // Row by row onto the running sum: the same additions in the same
      // order however the rows are split into calls.
      double sum = dw[int64_t(i) * out + o];
      for (int64_t r = 0; r < rows; ++r)
        sum += double(x[r * in + i]) * double(dy[r * out + o]);
      dw[int64_t(i) * out + o] = sum;
    }
  if (db)
    for (int o = 0; o < out; ++o) {
      double sum = db[o];
      for (int64_t r = 0; r < rows; ++r)
        sum += double(dy[r * out + o]);
      db[o] = sum;
    }
}

/// dst[j] = float(src[j]) (or dst[j] = float(dst[j] + src[j]) with `add`).
void storeRounded(const double *src, float *dst, int64_t n, bool add) {
  for (int64_t j = 0; j < n; ++j)
    dst[j] = add ? float(double(dst[j]) + src[j]) : float(src[j]);
}

} // namespace

//===----------------------------------------------------------------------===//
// Embedding.
//===----------------------------------------------------------------------===//

void embeddingForward(const int32_t *tokens, const float *tok, const float *pos, float *y,
                      int64_t rows, int seq, int dim) {
#pragma omp parallel for schedule(static) if (rows * dim > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    const float *t = tok + int64_t(tokens[r]) * dim;
    const float *p = pos + (r % seq) * int64_t(dim);
    float *o = y + r * dim;
    for (int j = 0; j < dim; ++j)
      o[j] = t[j] + p[j];
  }
}

void embeddingBackward(const int32_t *tokens, const float *dy, float *dtok, float *dpos,
                       int64_t rows, int seq, int dim, int vocab) {
  if (rows <= 0 || dim <= 0)
    return;
  if (dtok && vocab > 0) {
    // Counting sort of the rows by token (stable: rows stay in order), then
    // one table row per iteration. Tokens outside [0, vocab) are skipped.
    std::vector<int64_t> start(size_t(vocab) + 1, 0), order(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r)
      if (tokens[r] >= 0 && tokens[r] < vocab)
        ++start[size_t(tokens[r]) + 1];
    for (int v = 0; v < vocab; ++v)
      start[size_t(v) + 1] += start[size_t(v)];
    std::vector<int64_t> fill(start.begin(), start.end() - 1);
    for (int64_t r = 0; r < rows; ++r)
      if (tokens[r] >= 0 && tokens[r] < vocab)
        order[size_t(fill[size_t(tokens[r])]++)] = r;
#pragma omp parallel for schedule(dynamic, 16) if (rows * dim > 32768)
    for (int v = 0; v < vocab; ++v) {
      float *d = dtok + int64_t(v) * dim;
      for (int64_t i = start[size_t(v)]; i < start[size_t(v) + 1]; ++i) {
        const float *g = dy + order[size_t(i)] * dim;
        for (int j = 0; j < dim; ++j)
          d[j] += g[j];
      }
    }
  }
  if (dpos && seq > 0) {
#pragma omp parallel for schedule(static) if (rows * dim > 32768)
    for (int p = 0; p < seq; ++p) {
      float *d = dpos + int64_t(p) * dim;
      for (int64_t r = p; r < rows; r += seq) {
        const float *g = dy + r * dim;
        for (int j = 0; j < dim; ++j)
          d[j] += g[j];
      }
    }
  }
}

//===----------------------------------------------------------------------===//
// Layer norm.
//===----------------------------------------------------------------------===//

void layerNormForward(const float *x, const float *gamma, const float *beta, float *y, float *mean,
                      float *rstd, int64_t rows, int dim) {
#pragma omp parallel for schedule(static) if (rows * dim > 32768)
  for (int64_t r = 0; r < rows; ++r) {
    const float *xr = x + r * dim;
    double s = 0;
    for (int j = 0; j < dim; ++j)
      s += xr[j];
    double m = s / dim;
    double v = 0;
    for (int j = 0; j < dim; ++j) {
      double d = xr[j] - m;
      v += d * d;
    }
    float mf = float(m);
    float rs = float(1.0 / std::sqrt(v / dim + 1e-5));
    if (mean)
      mean[r] = mf;
    if (rstd)
      rstd[r] = rs;
    float *yr = y + r * dim;
    for (int j = 0; j < dim; ++j)
      yr[j] = (xr[j] - mf) * rs * gamma[j] + beta[j];
  }
}

void layerNormBackward(const float *dy, const float *x, const float *gamma, const float *mean,
                       const float *rstd, float *dx, float *dgamma, float *dbeta, int64_t rows,
                       int dim) {
  if (rows <= 0 || dim <= 0)
    return;
  if (dx) {
    // dx = rstd·(g − mean(g) − x̂·mean(g·x̂)), g = dy·γ, x̂ = (x − μ)·rstd.
#pragma omp parallel for schedule(static) if (rows * dim > 32768)
    for (int64_t r = 0; r < rows; ++r) {
      const float *xr = x + r * dim, *gr = dy + r * dim;
      float m = mean[r], rs = rstd[r];
      double sg = 0, sgx = 0;
      for (int j = 0; j < dim; ++j) {
        float g = gr[j] * gamma[j];
        float xh = (xr[j] - m) * rs;
        sg += g;
        sgx += double(g) * xh;
      }
      float mg = float(sg / dim), mgx = float(sgx / dim);
      float *o = dx + r * dim;
      for (int j = 0; j < dim; ++j) {
        float g = gr[j] * gamma[j];
        float xh = (xr[j] - m) * rs;
        o[j] = rs * (g - mg - xh * mgx);
      }
    }
  }
  if (!dgamma && !dbeta)
    return;
  // dγ += Σ dy·x̂, dβ += Σ dy, in fixed row blocks.
  int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  std::unique_ptr<float[]> pg(new float[size_t(blocks) * dim]);
  std::unique_ptr<float[]> pb(new float[size_t(blocks) * dim]);
#pragma omp parallel for schedule(static) if (rows * dim > 32768)
  for (int64_t b = 0; b < blocks; ++b) {
    float *g = pg.get() + b * dim, *bb = pb.get() + b * dim;
    for (int j = 0; j < dim; ++j)
      g[j] = bb[j] = 0.0f;
    int64_t r0 = b * kRowBlock, r1 = std::min(rows, r0 + kRowBlock);
    for (int64_t r = r0; r < r1; ++r) {
      const float *xr = x + r * dim, *gr = dy + r * dim;
      float m = mean[r], rs = rstd[r];
      for (int j = 0; j < dim; ++j) {
        g[j] += gr[j] * ((xr[j] - m) * rs);
        bb[j] += gr[j];
      }
    }
  }
  for (int j = 0; j < dim; ++j) {
    float sg = 0.0f, sb = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) {
      sg += pg[b * dim + j];
      sb += pb[b * dim + j];
    }
    if (dgamma)
      dgamma[j] += sg;
    if (dbeta)
      dbeta[j] += sb;
  }
}

//===----------------------------------------------------------------------===//
// Linear.
//===----------------------------------------------------------------------===//

void linearForward(const float *x, const float *w, const float *b, float *y, int64_t rows, int in,
                   int out, bool accumulate) {
  if (rows <= 0 || out <= 0)
    return;
  std::vector<double> sum(size_t(rows) * size_t(out));
  matmulRows(x, w, b, sum.data(), rows, in, out);
  storeRounded(sum.data(), y, rows * out, accumulate);
}

void linearBackward(const float *dy, const float *x, const float *w, float *dx, float *dw,
                    float *db, int64_t rows, int in, int out, bool accumulateDx) {
  if (rows <= 0)
    return;
  if (dx && in > 0) {
    std::vector<double> g(size_t(rows) * size_t(in), 0.0);
    if (out > 0)
      matmulRowsByTransposed(dy, w, g.data(), rows, in, out);
    storeRounded(g.data(), dx, rows * in, accumulateDx);
  }
  if ((dw && in > 0 && out > 0) || db) {
    std::vector<double> gw(size_t(std::max(in, 0)) * size_t(std::max(out, 0)), 0.0),
        gb(size_t(std::max(out, 0)), 0.0);
    addOuterSums(x, dy, gw.data(), gb.data(), rows, dw ? in : 0, out);
    if (dw)
      storeRounded(gw.data(), dw, int64_t(gw.size()), true);
    if (db)
      storeRounded(gb.data(), db, out, true);
  }
}

//===----------------------------------------------------------------------===//
// Chunked feed-forward.
//===----------------------------------------------------------------------===//

void ffnForward(const float *x, const float *w1, const float *b1, const float *w2, const float *b2,
                float *y, int64_t rows, int dim, int dff, int chunk, Activation act,
                bool accumulate) {
  if (rows <= 0 || dim <= 0)
    return;
  const int64_t ch = chunk <= 0 ? rows : std::min<int64_t>(chunk, rows);
  // Each row's arithmetic is its own, so chunking does not change a bit.
  std::vector<double> h(size_t(ch) * size_t(std::max(dff, 1))), out(size_t(ch) * size_t(dim));
  for (int64_t r0 = 0; r0 < rows; r0 += ch) {
    const int64_t n = std::min(ch, rows - r0);
    matmulRows(x + r0 * dim, w1, b1, h.data(), n, dim, dff);
    for (int64_t j = 0; j < n * dff; ++j)
      h[size_t(j)] = actValue(act, h[size_t(j)]);
    matmulRows(h.data(), w2, b2, out.data(), n, dff, dim);
    storeRounded(out.data(), y + r0 * dim, n * dim, accumulate);
  }
}

void ffnBackward(const float *dy, const float *x, const float *w1, const float *b1, const float *w2,
                 float *dx, float *dw1, float *db1, float *dw2, float *db2, int64_t rows, int dim,
                 int dff, int chunk, Activation act, bool accumulateDx) {
  if (rows <= 0 || dim <= 0)
    return;
  const int64_t ch = chunk <= 0 ? rows : std::min<int64_t>(chunk, rows);
  const size_t buf = size_t(ch) * size_t(std::max(dff, 1));
  std::vector<double> pre(buf), a(buf), da(buf), g(size_t(ch) * size_t(dim));
  // The parameter gradients are summed over every row in double and rounded
  // once, so the chunk size does not change them either.
  std::vector<double> gw1(size_t(dim) * size_t(dff), 0.0), gb1(size_t(dff), 0.0),
      gw2(size_t(dff) * size_t(dim), 0.0), gb2(size_t(dim), 0.0);
  for (int64_t r0 = 0; r0 < rows; r0 += ch) {
    const int64_t n = std::min(ch, rows - r0), nh = n * dff;
    const float *xc = x + r0 * dim, *dyc = dy + r0 * dim;
    // Recompute the chunk's intermediate as the forward did.
    matmulRows(xc, w1, b1, pre.data(), n, dim, dff);
    for (int64_t j = 0; j < nh; ++j)
      a[size_t(j)] = actValue(act, pre[size_t(j)]);
    // y = a·w2 + b2: da = dy·w2ᵀ, dw2 += aᵀ·dy, db2 += Σ dy.
    matmulRowsByTransposed(dyc, w2, da.data(), n, dff, dim);
    addOuterSums(a.data(), dyc, gw2.data(), gb2.data(), n, dff, dim);
    for (int64_t j = 0; j < nh; ++j)
      da[size_t(j)] *= actSlope(act, pre[size_t(j)]);
    // pre = x·w1 + b1: dx = dpre·w1ᵀ, dw1 += xᵀ·dpre, db1 += Σ dpre.
    addOuterSums(xc, da.data(), gw1.data(), gb1.data(), n, dim, dff);
    if (dx) {
      matmulRowsByTransposed(da.data(), w1, g.data(), n, dim, dff);
      storeRounded(g.data(), dx + r0 * dim, n * dim, accumulateDx);
    }
  }
  if (dw1)
    storeRounded(gw1.data(), dw1, int64_t(gw1.size()), true);
  if (db1)
    storeRounded(gb1.data(), db1, dff, true);
  if (dw2)
    storeRounded(gw2.data(), dw2, int64_t(gw2.size()), true);
  if (db2)
    storeRounded(gb2.data(), db2, dim, true);
}

} // namespace attnc::train
