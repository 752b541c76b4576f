//===- Gemm.h - The training runtime's deterministic GEMMs ------*- C++ -*-===//
//
// The packed, register-blocked loop GEMM a compiled model step sends its
// matrix products to (attnc_model_env::gemm), and its building blocks, which
// the whole-model reference (test/reference/Layers.cpp) shares so the two
// round alike. Every output element goes through the same instruction
// sequence whatever the call's row count and the thread count, so results
// are bit-identical across runs, OpenMP thread counts and chunkings
// (docs/training.md, Determinism; the file comment of Gemm.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_GEMM_H
#define ATTNC_RUNTIME_TRAIN_GEMM_H

#include <cstddef>
#include <cstdint>
#include <memory>

namespace attnc::train {

/// Rows per block of the deterministic column reductions.
inline constexpr int64_t kRowBlock = 128;
/// Columns per micro tile (= one packed panel).
inline constexpr int NR = 16;

/// C[M, N] = op(A)·op(B), row-major, op transposing when ta / tb is set
/// (the compiled model step's GEMM).
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, const float *B,
          float *C);

/// B packed in panels of NR columns: panel p holds B[k][p·NR + c] at
/// [p][k][c], zero-padded past N.
struct PackedB {
  int K = 0, N = 0, panels = 0;
  std::unique_ptr<float[]> data;
  const float *panel(int p) const { return data.get() + std::size_t(p) * K * NR; }
};
/// Packs B(k, j) = src[k·sk + j·sj] for k < K, j < N.
PackedB packB(const float *src, int64_t sk, int64_t sj, int K, int N);
/// C[M, N] (=|+=) A[M, K]·B (+ bias[N]), A row-major with leading dim lda.
void gemmPacked(const float *A, int64_t lda, int64_t M, const PackedB &B, float *C, int64_t ldc,
                const float *bias, bool accumulate);
/// y[M, N] (=|+=) x[M, K]·w[K, N] (+ b) with the loop GEMM (row-invariant).
void gemmLoopNN(const float *x, const float *w, const float *b, float *y, int64_t M, int K, int N,
                bool accumulate);
/// y[M, N] (=|+=) x[M, K]·w[K, N] (CBLAS when ATTNC_TRAIN_HAVE_CBLAS).
void gemmNN(const float *x, const float *w, float *y, int64_t M, int K, int N, bool accumulate);
/// dx[M, K] (=|+=) dy[M, N]·w[K, N]ᵀ.
void gemmNT(const float *dy, const float *w, float *dx, int64_t M, int K, int N, bool accumulate);
/// dw[K, N] += x[M, K]ᵀ·dy[M, N] (sum over rows in order).
void gemmTN(const float *x, const float *dy, float *dw, int64_t M, int K, int N);
/// out[j] += Σ_r a[r·cols + j], rows in fixed blocks of kRowBlock.
void columnSums(const float *a, int64_t rows, int cols, float *out);
/// y[r] += b for every row (b may be null).
void addBias(float *y, const float *b, int64_t rows, int n);

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_GEMM_H
