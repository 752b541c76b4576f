//===- model_step.h - Skeleton of a generated whole-model step --*- C++ -*-===//
//
// What a generated `attnc_step_<model>` (codegen/ModelEmitterCpu.cpp) calls
// besides its own fused row kernels: the runtime's GEMM and attention
// (through attnc_model_env), and the fixed reductions over rows, written
// once here. Every reduction over rows runs rows in order (columns in
// parallel), so a step is bit-identical across runs and thread counts.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CPU_MODEL_STEP_H
#define ATTNC_CPU_MODEL_STEP_H

#include "attnc/abi/Activations.h"
#include "attnc/abi/Philox.h"
#include "attnc/abi/cpu_step_env.h"

#include "common.h" // expf_fast

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace attnc {
namespace model {

// Activations (kernels/abi/attnc/abi/Activations.h) through the kernels' branch-free
// expf_fast, so the row loops vectorise.
struct FastExp {
  ATTNC_FORCE_INLINE float operator()(float x) const { return cpu::expf_fast(x); }
};
ATTNC_FORCE_INLINE float activation(int kind, float x) { return act::apply(kind, x, FastExp()); }
ATTNC_FORCE_INLINE float activationGrad(int kind, float x) {
  return act::derivative(kind, x, FastExp());
}

/// The first NaN or Inf of x[0, n), or -1.
inline int64_t firstNonFinite(const float *x, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i]))
      return i;
  return -1;
}

/// y = (x − mean)·rstd·gamma + beta over one row (sums in double).
inline void layerNormRow(const float *x, const float *gamma, const float *beta, float *y,
                         float *mean, float *rstd, int64_t C, double eps) {
  double s = 0;
  for (int64_t j = 0; j < C; ++j)
    s += x[j];
  double m = s / double(C), v = 0;
  for (int64_t j = 0; j < C; ++j)
    v += (x[j] - m) * (x[j] - m);
  float mf = float(m), rs = float(1.0 / std::sqrt(v / double(C) + eps));
  *mean = mf, *rstd = rs;
  for (int64_t j = 0; j < C; ++j)
    y[j] = (x[j] - mf) * rs * gamma[j] + beta[j];
}

/// dx of a layer norm over one row.
inline void layerNormGradRow(const float *dy, const float *x, const float *gamma, float mean,
                             float rstd, float *dx, int64_t C) {
  double sg = 0, sgx = 0;
  for (int64_t j = 0; j < C; ++j) {
    float g = dy[j] * gamma[j], xh = (x[j] - mean) * rstd;
    sg += g, sgx += double(g) * xh;
  }
  float mg = float(sg / double(C)), mgx = float(sgx / double(C));
  for (int64_t j = 0; j < C; ++j) {
    float xh = (x[j] - mean) * rstd;
    dx[j] = rstd * (dy[j] * gamma[j] - mg - xh * mgx);
  }
}

// Reductions over rows go by blocks of columns: each thread owns a block
// and walks the rows in order over its contiguous columns (cache-friendly,
// and the sum order is fixed, so results do not depend on the threads).
constexpr int64_t kColumnBlock = 64;

/// out[c] = Σ_r x[r, c], rows in order.
inline void columnSum(const float *x, float *out, int64_t R, int64_t C) {
  const int64_t blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (R * C > 32768)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kColumnBlock, n = std::min(kColumnBlock, C - c0);
    double acc[kColumnBlock] = {};
    for (int64_t r = 0; r < R; ++r) {
      const float *row = x + r * C + c0;
      for (int64_t j = 0; j < n; ++j)
        acc[j] += row[j];
    }
    for (int64_t j = 0; j < n; ++j)
      out[c0 + j] = float(acc[j]);
  }
}

/// dgamma = Σ_r dy·x̂, dbeta = Σ_r dy, rows in order.
inline void layerNormParamGrad(const float *dy, const float *x, const float *mean,
                               const float *rstd, float *dgamma, float *dbeta, int64_t R,
                               int64_t C) {
  const int64_t blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (R * C > 32768)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kColumnBlock, n = std::min(kColumnBlock, C - c0);
    double sg[kColumnBlock] = {}, sb[kColumnBlock] = {};
    for (int64_t r = 0; r < R; ++r) {
      const float *d = dy + r * C + c0, *xr = x + r * C + c0;
      const float m = mean[r], rs = rstd[r];
      for (int64_t j = 0; j < n; ++j) {
        sg[j] += double(d[j]) * ((xr[j] - m) * rs);
        sb[j] += d[j];
      }
    }
    for (int64_t j = 0; j < n; ++j)
      dgamma[c0 + j] = float(sg[j]), dbeta[c0 + j] = float(sb[j]);
  }
}

/// dtable[tokens[r]] += dy[r], dpos[r mod S] += dy[r] (written from zero).
inline void embedGrad(const int32_t *tokens, const float *dy, float *dtable, float *dpos, int64_t R,
                      int64_t V, int64_t S, int64_t C) {
  std::memset(dtable, 0, sizeof(float) * size_t(V * C));
  std::memset(dpos, 0, sizeof(float) * size_t(S * C));
  const int64_t blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static) if (R * C > 32768)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t c0 = b * kColumnBlock, n = std::min(kColumnBlock, C - c0);
    for (int64_t r = 0; r < R; ++r) {
      const float *g = dy + r * C + c0;
      float *t = dtable + int64_t(tokens[r]) * C + c0, *p = dpos + (r % S) * C + c0;
      for (int64_t j = 0; j < n; ++j)
        t[j] += g[j], p[j] += g[j];
    }
  }
}

/// [B·S, H·D] ↔ [B, H, S, D].
inline void splitHeads(const float *x, float *y, int64_t B, int64_t H, int64_t S, int64_t D) {
#pragma omp parallel for schedule(static) if (B * H * S * D > 32768)
  for (int64_t r = 0; r < B * S; ++r)
    for (int64_t h = 0; h < H; ++h)
      std::memcpy(y + (((r / S) * H + h) * S + r % S) * D, x + (r * H + h) * D,
                  sizeof(float) * size_t(D));
}
inline void mergeHeads(const float *x, float *y, int64_t B, int64_t H, int64_t S, int64_t D) {
#pragma omp parallel for schedule(static) if (B * H * S * D > 32768)
  for (int64_t r = 0; r < B * S; ++r)
    for (int64_t h = 0; h < H; ++h)
      std::memcpy(y + (r * H + h) * D, x + (((r / S) * H + h) * S + r % S) * D,
                  sizeof(float) * size_t(D));
}

/// Σ_j exp(l[j] − max) over a row of logits, with the max in `mx`.
inline double sumExp(const float *l, int64_t V, float &mx) {
  mx = l[0];
  for (int64_t j = 1; j < V; ++j)
    mx = l[j] > mx ? l[j] : mx;
  double s = 0;
  for (int64_t j = 0; j < V; ++j)
    s += std::exp(double(l[j] - mx));
  return s;
}

/// Mean cross-entropy over rows with a target (≥ 0); writes loss and count.
inline void crossEntropy(const float *logits, const int32_t *targets, float *loss, float *count,
                         int64_t R, int64_t V) {
  double sum = 0;
  int64_t n = 0;
  for (int64_t r = 0; r < R; ++r) {
    if (targets[r] < 0)
      continue;
    const float *l = logits + r * V;
    float mx;
    double s = sumExp(l, V, mx);
    sum += std::log(s) + mx - l[targets[r]];
    ++n;
  }
  *loss = n ? float(sum / double(n)) : 0.0f;
  *count = float(n);
}

/// dlogits = dloss·(softmax − onehot)/count on rows with a target.
inline void crossEntropyGrad(const float *logits, const int32_t *targets, const float *count,
                             const float *dloss, float *dl, int64_t R, int64_t V) {
  const float scale = *count > 0 ? *dloss / *count : 0.0f;
#pragma omp parallel for schedule(static) if (R * V > 32768)
  for (int64_t r = 0; r < R; ++r) {
    const float *l = logits + r * V;
    float *d = dl + r * V;
    if (targets[r] < 0) {
      std::memset(d, 0, sizeof(float) * size_t(V));
      continue;
    }
    float mx;
    double s = sumExp(l, V, mx);
    for (int64_t j = 0; j < V; ++j)
      d[j] = float(std::exp(double(l[j] - mx)) / s) * scale;
    d[targets[r]] -= scale;
  }
}

} // namespace model
} // namespace attnc

#endif // ATTNC_CPU_MODEL_STEP_H
