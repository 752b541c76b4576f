//===- Layers.cpp - CPU building blocks of the training runtime -----------===//
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
// GEMMs. Two engines:
//   - `Gemm` below: a packed, register-blocked loop GEMM (OpenMP over
//     (row block, column panel) tiles; AVX2+FMA code path chosen at run time
//     on x86-64, portable vector-extension code otherwise). Every output
//     element is computed by the same instruction sequence (accumulator = 0,
//     then k = 0..K-1 in order, then + C if accumulating, then + bias), so a
//     row's result does not depend on how many rows the call has nor on the
//     thread count. The FFN uses it for its forward GEMMs: this is what makes
//     chunked and unchunked FFN bit-identical (Layers.h's promise).
//   - cblas_sgemm (OpenBLAS, when ATTNC_TRAIN_HAVE_CBLAS) for linearForward /
//     linearBackward and the FFN backward GEMMs. Measured on the reference
//     machine (OpenBLAS 0.3.21, Haswell kernels): cblas_sgemm results change
//     with OPENBLAS_NUM_THREADS (1 vs 2, for shapes from 37x40x72 up to
//     4096x256x1024) and a row's result changes with the call's M (one row at
//     a time vs 5 vs 37). So with CBLAS, linear and FFN-backward results are
//     bit-identical across runs and OpenMP thread counts only for a fixed
//     OpenBLAS thread count (the tests pin OPENBLAS_NUM_THREADS=1); without
//     CBLAS the loop GEMM is used everywhere and that caveat disappears.
//     runtime/train/CMakeLists.txt therefore does not define
//     ATTNC_TRAIN_HAVE_CBLAS: the training runtime uses the loop GEMM only
//     (the CBLAS path stays for measurements and the CBLAS test build).
//   Speed on the reference machine (AMD EPYC Zen 5, 2 cores; OpenBLAS picks
//   its Haswell kernels), linearForward 4096x256x1024: cblas ~125 GFLOP/s on
//   one thread, the loop GEMM ~122; on two, loop ~230-250, cblas ~160.
//
// Activations: ReLU (gradient 0 at 0), GELU in its tanh approximation
// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) (GPT-2 / BERT style; the exact
// erf form differs by < 1e-3), SiLU x·σ(x). tanh and σ go through a
// polynomial expf on vector types (expFast below), so they vectorise and cost less than the
// GEMMs; a few ulp from libm, deterministic.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/Layers.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <memory>

#if defined(ATTNC_TRAIN_HAVE_CBLAS)
#include <cblas.h>
#endif
#if defined(_OPENMP)
#include <omp.h>
#endif

namespace attnc::train {
namespace {

using std::int64_t;
using std::size_t;

/// Rows per block of the deterministic column reductions.
constexpr int64_t kRowBlock = 128;

//===----------------------------------------------------------------------===//
// Loop GEMM: C[M,N] (=|+=) A[M,K]·B[K,N] (+ bias), B given by strides so that
// transposed operands need no copy beyond the packing.
//===----------------------------------------------------------------------===//

constexpr int MR = 6;      // rows per micro tile
constexpr int NR = 16;     // columns per micro tile (= one packed panel)
constexpr int64_t MB = 96; // rows per OpenMP task

typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));

/// B packed in panels of NR columns: panel p holds B[k][p·NR + c] at
/// [p][k][c], zero-padded past N.
struct PackedB {
  int K = 0, N = 0, panels = 0;
  std::unique_ptr<float[]> data;
  const float *panel(int p) const { return data.get() + size_t(p) * K * NR; }
};

/// Packs B(k, j) = src[k·sk + j·sj] for k < K, j < N.
PackedB packB(const float *src, int64_t sk, int64_t sj, int K, int N) {
  PackedB b;
  b.K = K;
  b.N = N;
  b.panels = (N + NR - 1) / NR;
  b.data.reset(new float[size_t(b.panels) * K * NR + 8]);
  float *dst = b.data.get();
#pragma omp parallel for schedule(static) if (int64_t(K) * N > 32768)
  for (int p = 0; p < b.panels; ++p) {
    float *d = dst + size_t(p) * K * NR;
    int j0 = p * NR, nc = std::min(NR, N - j0);
    for (int k = 0; k < K; ++k)
      for (int c = 0; c < NR; ++c)
        d[size_t(k) * NR + c] = c < nc ? src[k * sk + (j0 + c) * sj] : 0.0f;
  }
  return b;
}

/// One MR x NR micro tile over rows i0..i0+mr-1 (mr ≤ MR) and columns
/// j0..j0+nc-1. Rows past mr reuse the last row's data and are discarded, so
/// every stored element went through the identical instruction sequence.
__attribute__((always_inline)) inline void microTile(const float *A, int64_t lda, int mr,
                                                     const float *Bp, int K, float *C, int64_t ldc,
                                                     int nc, const float *bias, bool accumulate) {
  const float *a[MR];
  for (int r = 0; r < MR; ++r)
    a[r] = A + (r < mr ? r : mr - 1) * lda;
  v8 acc[MR][2];
  for (int r = 0; r < MR; ++r)
    acc[r][0] = acc[r][1] = v8{};
  for (int k = 0; k < K; ++k) {
    v8 b0 = *reinterpret_cast<const v8u *>(Bp + size_t(k) * NR);
    v8 b1 = *reinterpret_cast<const v8u *>(Bp + size_t(k) * NR + 8);
    for (int r = 0; r < MR; ++r) {
      float s = a[r][k];
      acc[r][0] += b0 * s;
      acc[r][1] += b1 * s;
    }
  }
  alignas(32) float out[MR][NR];
  for (int r = 0; r < MR; ++r) {
    *reinterpret_cast<v8u *>(&out[r][0]) = acc[r][0];
    *reinterpret_cast<v8u *>(&out[r][8]) = acc[r][1];
  }
  for (int r = 0; r < mr; ++r) {
    float *c = C + r * ldc;
    if (accumulate)
      for (int j = 0; j < nc; ++j)
        out[r][j] = c[j] + out[r][j];
    if (bias)
      for (int j = 0; j < nc; ++j)
        out[r][j] = out[r][j] + bias[j];
    for (int j = 0; j < nc; ++j)
      c[j] = out[r][j];
  }
}

/// Rows [i0, i1) of panel p.
__attribute__((always_inline)) inline void macroTile(const float *A, int64_t lda, int64_t i0,
                                                     int64_t i1, const PackedB &B, int p, float *C,
                                                     int64_t ldc, const float *bias,
                                                     bool accumulate) {
  int j0 = p * NR, nc = std::min(NR, B.N - j0);
  const float *Bp = B.panel(p);
  for (int64_t i = i0; i < i1; i += MR)
    microTile(A + i * lda, lda, int(std::min<int64_t>(MR, i1 - i)), Bp, B.K, C + i * ldc + j0, ldc,
              nc, bias ? bias + j0 : nullptr, accumulate);
}

using MacroFn = void (*)(const float *, int64_t, int64_t, int64_t, const PackedB &, int, float *,
                         int64_t, const float *, bool);

void macroGeneric(const float *A, int64_t lda, int64_t i0, int64_t i1, const PackedB &B, int p,
                  float *C, int64_t ldc, const float *bias, bool accumulate) {
  macroTile(A, lda, i0, i1, B, p, C, ldc, bias, accumulate);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("avx2,fma"))) void macroAvx2(const float *A, int64_t lda, int64_t i0,
                                                   int64_t i1, const PackedB &B, int p, float *C,
                                                   int64_t ldc, const float *bias,
                                                   bool accumulate) {
  macroTile(A, lda, i0, i1, B, p, C, ldc, bias, accumulate);
}
#endif

MacroFn pickMacro() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return macroAvx2;
#endif
  return macroGeneric;
}

const MacroFn kMacro = pickMacro();

/// C[M, N] (=|+=) A[M, K]·B (+ bias[N]), A row-major with leading dim lda.
void gemmPacked(const float *A, int64_t lda, int64_t M, const PackedB &B, float *C, int64_t ldc,
                const float *bias, bool accumulate) {
  if (M <= 0 || B.N <= 0)
    return;
  if (B.K == 0) { // empty sum: C = (C +) 0 (+ bias)
    for (int64_t i = 0; i < M; ++i)
      for (int j = 0; j < B.N; ++j)
        C[i * ldc + j] = (accumulate ? C[i * ldc + j] + 0.0f : 0.0f) + (bias ? bias[j] : 0.0f);
    return;
  }
  int64_t rowBlocks = (M + MB - 1) / MB;
  int64_t tasks = rowBlocks * B.panels;
  MacroFn fn = kMacro;
#pragma omp parallel for schedule(static) if (tasks > 1 && M * B.N * int64_t(B.K) > 65536)
  for (int64_t t = 0; t < tasks; ++t) {
    int64_t rb = t / B.panels;
    int p = int(t % B.panels);
    int64_t i0 = rb * MB, i1 = std::min(M, i0 + MB);
    fn(A, lda, i0, i1, B, p, C, ldc, bias, accumulate);
  }
}

//===----------------------------------------------------------------------===//
// Deterministic column sums.
//===----------------------------------------------------------------------===//

/// out[j] += Σ_r a[r·cols + j], rows in fixed blocks (see the file comment).
void columnSums(const float *a, int64_t rows, int cols, float *out) {
  if (!out || rows <= 0 || cols <= 0)
    return;
  int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
  std::unique_ptr<float[]> part(new float[size_t(blocks) * cols]);
#pragma omp parallel for schedule(static) if (rows * cols > 32768)
  for (int64_t b = 0; b < blocks; ++b) {
    float *p = part.get() + b * cols;
    int64_t r0 = b * kRowBlock, r1 = std::min(rows, r0 + kRowBlock);
    std::memcpy(p, a + r0 * cols, sizeof(float) * cols);
    for (int64_t r = r0 + 1; r < r1; ++r)
      for (int j = 0; j < cols; ++j)
        p[j] += a[r * cols + j];
  }
  for (int j = 0; j < cols; ++j) {
    float s = part[j];
    for (int64_t b = 1; b < blocks; ++b)
      s += part[b * cols + j];
    out[j] += s;
  }
}

//===----------------------------------------------------------------------===//
// GEMM front ends (CBLAS or loop GEMM).
//===----------------------------------------------------------------------===//

/// y[M, N] (=|+=) x[M, K]·w[K, N] with the loop GEMM (row-invariant).
void gemmLoopNN(const float *x, const float *w, const float *b, float *y, int64_t M, int K, int N,
                bool accumulate) {
  PackedB pw = packB(w, N, 1, K, N);
  gemmPacked(x, K, M, pw, y, N, b, accumulate);
}

void gemmNN(const float *x, const float *w, float *y, int64_t M, int K, int N, bool accumulate) {
#if defined(ATTNC_TRAIN_HAVE_CBLAS)
  if (K > 0) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(M), N, K, 1.0f, x, K, w, N,
                accumulate ? 1.0f : 0.0f, y, N);
    return;
  }
#endif
  gemmLoopNN(x, w, nullptr, y, M, K, N, accumulate);
}

/// dx[M, K] (=|+=) dy[M, N]·w[K, N]ᵀ.
void gemmNT(const float *dy, const float *w, float *dx, int64_t M, int K, int N, bool accumulate) {
#if defined(ATTNC_TRAIN_HAVE_CBLAS)
  if (N > 0) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(M), K, N, 1.0f, dy, N, w, N,
                accumulate ? 1.0f : 0.0f, dx, K);
    return;
  }
#endif
  PackedB pw = packB(w, 1, N, N, K); // B(n, k) = w[k·N + n]
  gemmPacked(dy, N, M, pw, dx, K, nullptr, accumulate);
}

/// dw[K, N] += x[M, K]ᵀ·dy[M, N] (sum over rows in order).
void gemmTN(const float *x, const float *dy, float *dw, int64_t M, int K, int N) {
  if (M <= 0)
    return;
#if defined(ATTNC_TRAIN_HAVE_CBLAS)
  cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, N, int(M), 1.0f, x, K, dy, N, 1.0f, dw,
              N);
#else
  // A = xᵀ [K, M] (copied), B = dy [M, N] packed.
  std::unique_ptr<float[]> xt(new float[size_t(K) * size_t(M)]);
#pragma omp parallel for schedule(static) if (M * K > 32768)
  for (int k = 0; k < K; ++k)
    for (int64_t i = 0; i < M; ++i)
      xt[size_t(k) * M + i] = x[i * K + k];
  PackedB pdy = packB(dy, N, 1, int(M), N);
  gemmPacked(xt.get(), M, K, pdy, dw, N, nullptr, true);
#endif
}

void addBias(float *y, const float *b, int64_t rows, int n) {
  if (!b)
    return;
#pragma omp parallel for schedule(static) if (rows * n > 32768)
  for (int64_t r = 0; r < rows; ++r)
    for (int j = 0; j < n; ++j)
      y[r * n + j] += b[j];
}

//===----------------------------------------------------------------------===//
// Activations.
//===----------------------------------------------------------------------===//

constexpr float kGeluC = 0.7978845608028654f; // √(2/π)
constexpr float kGeluA = 0.044715f;

typedef float v4 __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

inline v4 splat(float c) { return v4{c, c, c, c}; }

/// e^x on 4 lanes (SSE width: no ABI change without AVX): Cephes' polynomial with the 1.5·2^23
/// rounding trick (the scheme of codegen/kernels/cpu/attnc/common.h's expf_fast), a few ulp.
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

void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, const float *B,
          float *C) {
  if (!ta && !tb)
    return gemmNN(A, B, C, M, int(K), int(N), false);
  if (!ta && tb) // C[M, N] = A[M, K]·B[N, K]ᵀ
    return gemmNT(A, B, C, M, int(N), int(K), false);
  if (ta && !tb) { // C[M, N] = A[K, M]ᵀ·B[K, N], summed over K in order
    std::fill(C, C + M * N, 0.0f);
    return gemmTN(A, B, C, K, int(M), int(N));
  }
  // Both transposed: C = (B·A)ᵀ, rare enough for a plain loop.
#pragma omp parallel for schedule(static) if (M * N * K > 32768)
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      float s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += A[k * M + i] * B[j * K + k];
      C[i * N + j] = s;
    }
}

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

//===----------------------------------------------------------------------===//
// Softmax cross-entropy.
//===----------------------------------------------------------------------===//

CrossEntropy softmaxCrossEntropy(const float *logits, const int32_t *targets, float *dlogits,
                                 int64_t rows, int vocab, float gradScale) {
  CrossEntropy ce;
  if (rows <= 0 || vocab <= 0)
    return ce;
  // Per-row losses, summed in row order afterwards. Targets outside
  // [0, vocab) (−1 by convention) are ignored rows.
  std::vector<double> loss(static_cast<size_t>(rows));
  std::vector<unsigned char> hit(static_cast<size_t>(rows));
#pragma omp parallel for schedule(static) if (rows * vocab > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float *l = logits + r * vocab;
    int32_t t = targets[r];
    bool counted = t >= 0 && t < vocab;
    float *d = dlogits ? dlogits + r * vocab : nullptr;
    if (!counted) {
      loss[size_t(r)] = 0;
      hit[size_t(r)] = 0;
      if (d)
        std::fill(d, d + vocab, 0.0f);
      continue;
    }
    int am = 0;
    float m = l[0];
    for (int j = 1; j < vocab; ++j)
      if (l[j] > m) {
        m = l[j];
        am = j;
      }
    double s = 0;
    for (int j = 0; j < vocab; ++j)
      s += std::exp(double(l[j]) - m);
    loss[size_t(r)] = (double(m) + std::log(s)) - double(l[t]);
    hit[size_t(r)] = am == t;
    if (d) {
      double inv = 1.0 / s;
      for (int j = 0; j < vocab; ++j)
        d[j] = float(std::exp(double(l[j]) - m) * inv) * gradScale;
      d[t] = float(std::exp(double(l[t]) - m) * inv - 1.0) * gradScale;
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (!(targets[r] >= 0 && targets[r] < vocab))
      continue;
    ce.lossSum += loss[size_t(r)];
    ++ce.count;
    ce.correct += hit[size_t(r)];
  }
  return ce;
}

} // namespace attnc::train
