//===- Gemm.cpp - The training runtime's deterministic GEMMs -------------===//
//
// GEMMs. Two engines:
//   - the loop GEMM below: a packed, register-blocked loop GEMM (OpenMP over
//     (row block, column panel) tiles; AVX2+FMA code path chosen at run time
//     on x86-64, portable vector-extension code otherwise). Every output
//     element is computed by the same instruction sequence (accumulator = 0,
//     then k = 0..K-1 in order, then + C if accumulating, then + bias), so a
//     row's result does not depend on how many rows the call has nor on the
//     thread count. The FFN uses it for its forward GEMMs: this is what makes
//     chunked and unchunked FFN bit-identical (the reference layers' promise).
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
//===----------------------------------------------------------------------===//
#include "runtime/train/Gemm.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>

#if defined(ATTNC_TRAIN_HAVE_CBLAS)
#include <cblas.h>
#endif

namespace attnc::train {
namespace {

using std::int64_t;
using std::size_t;

//===----------------------------------------------------------------------===//
// Loop GEMM: C[M,N] (=|+=) A[M,K]·B[K,N] (+ bias), B given by strides so that
// transposed operands need no copy beyond the packing.
//===----------------------------------------------------------------------===//

constexpr int MR = 6;      // rows per micro tile
constexpr int64_t MB = 96; // rows per OpenMP task

typedef float v8 __attribute__((vector_size(32)));
typedef float v8u __attribute__((vector_size(32), aligned(4)));

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

} // namespace

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

} // namespace attnc::train
