//===- Layers.cpp - Building blocks of the whole-model reference ----------===//
//
// Implementation notes (see Layers.h for the interface):
//
// Determinism. Every reduction has an order fixed by the shapes: per-row
// sums run over the row in index order (in double); column sums over rows
// (bias, layer-norm gain/shift gradients) use fixed blocks of kRowBlock rows,
// each summed in row order, then the block partials in block order; the
// embedding backward walks, for every table row, the rows that use it in
// order. OpenMP only decides which thread does which fixed piece, so results
// are bit-identical across runs and OMP_NUM_THREADS.
//
// GEMMs: the training runtime's loop GEMM (runtime/train/Gemm.{h,cpp}, with
// its optional CBLAS path for the CBLAS test build), the one a compiled step
// calls, so reference and compiled step round their products alike.
//
// Activations: ReLU (gradient 0 at 0), GELU in its tanh approximation
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (GPT-2 / BERT style; the exact
// erf form differs by < 1e-3), SiLU x·σ(x). tanh and σ go through a
// polynomial expf on vector types (expFast below), so they vectorise and cost less than the
// GEMMs; a few ulp from libm, deterministic.
//
//===----------------------------------------------------------------------===//
#include "test/reference/Layers.h"

#include "runtime/train/Gemm.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace attnc::train {
namespace {

using std::int64_t;
using std::size_t;

//===----------------------------------------------------------------------===//
// Activations.
//===----------------------------------------------------------------------===//

constexpr float kGeluC = 0.7978845608028654f; // √(2/π)
constexpr float kGeluA = 0.044715f;

typedef float v4 __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

inline v4 splat(float c) { return v4{c, c, c, c}; }

/// e^x on 4 lanes (SSE width: no ABI change without AVX): Cephes' polynomial with the 1.5·2^23
/// rounding trick (the scheme of kernels/cpu/attnc/common.h's expf_fast), a few ulp.
/// Written on vector types because the scalar form does not vectorise
/// without -fno-trapping-math, and libm's tanhf/expf calls cost more than
/// the FFN's GEMMs. Inputs clamp to [−87.3, 88]; below, 0.
inline v4 expFast(v4 x) {
  const v4 lo = splat(-87.33654f), hi = splat(88.0f), magic = splat(12582912.0f);
  v4 xc = x < lo ? lo : x;
  xc = xc > hi ? hi : xc;
  const v4 t = xc * 1.44269504088896341f + magic;
  const v4 fx = t - magic;
  const v4i n = (v4i)t - 0x4B400000;
  v4 r = xc - fx * 0.693359375f;
  r = r + fx * 2.12194440e-4f;
  const v4 z = r * r;
  v4 y = splat(1.9875691500e-4f);
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  const v4 p2 = (v4)((n + 127) << 23);
  return x < lo ? splat(0.0f) : y * p2;
}

/// tanh(u) = 1 − 2/(e^{2u} + 1): exact limits ±1, absolute error ~1e-7.
inline v4 tanhFast(v4 u) { return 1.0f - 2.0f / (expFast(2.0f * u) + 1.0f); }
inline v4 sigmoidFast(v4 x) { return 1.0f / (1.0f + expFast(-x)); }

inline v4 gelu(v4 x) { return 0.5f * x * (1.0f + tanhFast(kGeluC * (x + kGeluA * x * x * x))); }
inline v4 geluGrad(v4 x) {
  v4 t = tanhFast(kGeluC * (x + kGeluA * x * x * x));
  return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kGeluC * (1.0f + 3.0f * kGeluA * x * x);
}
inline v4 silu(v4 x) { return x * sigmoidFast(x); }
inline v4 siluGrad(v4 x) {
  v4 s = sigmoidFast(x);
  return s * (1.0f + x * (1.0f - s));
}
inline v4 relu(v4 x) { return x > 0.0f ? x : splat(0.0f); }
inline v4 reluGrad(v4 x) { return x > 0.0f ? splat(1.0f) : splat(0.0f); }

/// out[i] = f(in[i]) (mul: out[i] *= f(in[i])) 4 lanes at a time; the tail
/// goes through the same vector code (zero-padded), so every element gets
/// the same arithmetic wherever it sits.
template <bool Mul, class F> void mapLanes(F f, const float *in, float *out, int64_t n) {
  int64_t blocks = (n + 3) / 4;
#pragma omp parallel for schedule(static) if (n > 16384)
  for (int64_t b = 0; b < blocks; ++b) {
    int64_t i = b * 4, m = std::min<int64_t>(4, n - i);
    v4 x{}, o{};
    std::memcpy(&x, in + i, sizeof(float) * m);
    if (Mul)
      std::memcpy(&o, out + i, sizeof(float) * m);
    v4 y = Mul ? o * f(x) : f(x);
    std::memcpy(out + i, &y, sizeof(float) * m);
  }
}

/// out[i] = act(in[i]) (in == out allowed).
void applyAct(Activation a, const float *in, float *out, int64_t n) {
  switch (a) {
  case Activation::Relu:
    return mapLanes<false>([](v4 x) { return relu(x); }, in, out, n);
  case Activation::Gelu:
    return mapLanes<false>([](v4 x) { return gelu(x); }, in, out, n);
  case Activation::Silu:
    return mapLanes<false>([](v4 x) { return silu(x); }, in, out, n);
  }
}

/// g[i] *= act'(pre[i]).
void mulActGrad(Activation a, const float *pre, float *g, int64_t n) {
  switch (a) {
  case Activation::Relu:
    return mapLanes<true>([](v4 x) { return reluGrad(x); }, pre, g, n);
  case Activation::Gelu:
    return mapLanes<true>([](v4 x) { return geluGrad(x); }, pre, g, n);
  case Activation::Silu:
    return mapLanes<true>([](v4 x) { return siluGrad(x); }, pre, g, n);
  }
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
  gemmNN(x, w, y, rows, in, out, accumulate);
  addBias(y, b, rows, out);
}

void linearBackward(const float *dy, const float *x, const float *w, float *dx, float *dw,
                    float *db, int64_t rows, int in, int out, bool accumulateDx) {
  if (rows <= 0)
    return;
  if (dx && in > 0) {
    if (out > 0)
      gemmNT(dy, w, dx, rows, in, out, accumulateDx);
    else if (!accumulateDx)
      std::fill(dx, dx + rows * in, 0.0f);
  }
  if (dw && in > 0 && out > 0)
    gemmTN(x, dy, dw, rows, in, out);
  if (db)
    columnSums(dy, rows, out, db);
}

//===----------------------------------------------------------------------===//
// Chunked feed-forward.
//===----------------------------------------------------------------------===//

void ffnForward(const float *x, const float *w1, const float *b1, const float *w2, const float *b2,
                float *y, int64_t rows, int dim, int dff, int chunk, Activation act,
                bool accumulate) {
  if (rows <= 0 || dim <= 0)
    return;
  int64_t ch = chunk <= 0 ? rows : std::min<int64_t>(chunk, rows);
  // Always the loop GEMM: its per-row arithmetic is independent of the number
  // of rows in the call, so chunking does not change a bit.
  PackedB p1 = packB(w1, dff, 1, dim, dff);
  PackedB p2 = packB(w2, dim, 1, dff, dim);
  std::unique_ptr<float[]> h(new float[size_t(ch) * size_t(std::max(dff, 1))]);
  for (int64_t r0 = 0; r0 < rows; r0 += ch) {
    int64_t n = std::min(ch, rows - r0);
    gemmPacked(x + r0 * dim, dim, n, p1, h.get(), dff, b1, false);
    applyAct(act, h.get(), h.get(), n * dff);
    gemmPacked(h.get(), dff, n, p2, y + r0 * dim, dim, b2, accumulate);
  }
}

void ffnBackward(const float *dy, const float *x, const float *w1, const float *b1, const float *w2,
                 float *dx, float *dw1, float *db1, float *dw2, float *db2, int64_t rows, int dim,
                 int dff, int chunk, Activation act, bool accumulateDx) {
  if (rows <= 0 || dim <= 0)
    return;
  int64_t ch = chunk <= 0 ? rows : std::min<int64_t>(chunk, rows);
  PackedB p1 = packB(w1, dff, 1, dim, dff);
  size_t buf = size_t(ch) * size_t(std::max(dff, 1));
  std::unique_ptr<float[]> pre(new float[buf]), a(new float[buf]), da(new float[buf]);
  for (int64_t r0 = 0; r0 < rows; r0 += ch) {
    int64_t n = std::min(ch, rows - r0);
    const float *xc = x + r0 * dim, *dyc = dy + r0 * dim;
    // Recompute the chunk's intermediate exactly as the forward did.
    gemmPacked(xc, dim, n, p1, pre.get(), dff, b1, false);
    int64_t nh = n * dff;
    float *pp = pre.get(), *ap = a.get(), *dp = da.get();
    applyAct(act, pp, ap, nh);
    // y = a·w2 + b2: da = dy·w2ᵀ, dw2 += aᵀ·dy, db2 += Σ dy.
    linearBackward(dyc, ap, w2, dp, dw2, db2, n, dff, dim, false);
    mulActGrad(act, pp, dp, nh);
    // pre = x·w1 + b1: dx = dpre·w1ᵀ, dw1 += xᵀ·dpre, db1 += Σ dpre.
    linearBackward(dp, xc, w1, dx ? dx + r0 * dim : nullptr, dw1, db1, n, dim, dff, accumulateDx);
  }
}

} // namespace attnc::train
