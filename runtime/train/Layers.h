//===- Layers.h - CPU building blocks of the training runtime ---*- C++ -*-===//
//
// fp32 forward and backward of the pieces a model is made of, around the
// generated attention kernels: embeddings, layer norm, linear maps (CBLAS),
// the chunked feed-forward block and softmax cross-entropy. All tensors are
// contiguous row-major float arrays; `rows` is the number of token rows
// (B·S). Conventions:
//   - backward functions *accumulate* into parameter gradients (d_w += ...)
//     and *write* input gradients (dx = ...), unless a comment says so;
//   - every reduction runs in an order fixed by the shapes, so results are
//     bit-identical across runs and OpenMP thread counts (no float atomics);
//   - pointers marked "or null" may be nullptr.
// Semantics: docs/design.md, Semantics (chunked feed-forward) and docs/training.md.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_LAYERS_H
#define ATTNC_RUNTIME_TRAIN_LAYERS_H

#include <cstdint>
#include <vector>

namespace attnc::train {

/// y[r] = tok[tokens[r]] + pos[r % seq]; tokens are in [0, vocab).
void embeddingForward(const int32_t *tokens, const float *tok, const float *pos, float *y,
                      int64_t rows, int seq, int dim);
/// dtok[tokens[r]] += dy[r], dpos[r % seq] += dy[r] (deterministic: rows in
/// order for every table row, no atomics).
void embeddingBackward(const int32_t *tokens, const float *dy, float *dtok, float *dpos,
                       int64_t rows, int seq, int dim, int vocab);

/// y = (x − mean)·rstd·gamma + beta per row (eps 1e-5); saves mean and rstd
/// ([rows] each) for the backward.
void layerNormForward(const float *x, const float *gamma, const float *beta, float *y, float *mean,
                      float *rstd, int64_t rows, int dim);
/// dx = ∂/∂x (written), dgamma, dbeta accumulated.
void layerNormBackward(const float *dy, const float *x, const float *gamma, const float *mean,
                       const float *rstd, float *dx, float *dgamma, float *dbeta, int64_t rows,
                       int dim);

/// C[M, N] = op(A)·op(B), row-major, op transposing when ta / tb is set
/// (the compiled model step's GEMM; the same loops as the layers use).
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A, const float *B,
          float *C);

/// y = x·w + b, x [rows, in], w [in, out], b [out] or null. `accumulate`
/// adds into y instead of overwriting it.
void linearForward(const float *x, const float *w, const float *b, float *y, int64_t rows, int in,
                   int out, bool accumulate = false);
/// dx = dy·wᵀ (written; or null to skip; `accumulateDx` adds instead),
/// dw += xᵀ·dy, db += Σ_rows dy (or null).
void linearBackward(const float *dy, const float *x, const float *w, float *dx, float *dw,
                    float *db, int64_t rows, int in, int out, bool accumulateDx = false);

enum class Activation { Relu, Gelu, Silu };

/// FFN(x) = act(x·w1 + b1)·w2 + b2 over chunks of `chunk` rows, so the
/// intermediate is chunk × dff, never rows × dff. Writes (or, with
/// `accumulate`, adds) the result into y. The result equals the unchunked
/// one bit for bit (each row's arithmetic does not depend on the chunk).
void ffnForward(const float *x, const float *w1, const float *b1, const float *w2, const float *b2,
                float *y, int64_t rows, int dim, int dff, int chunk, Activation act,
                bool accumulate = false);
/// Backward of ffnForward, recomputing each chunk's intermediate: dx written
/// (or added with `accumulateDx`), dw1/db1/dw2/db2 accumulated.
void ffnBackward(const float *dy, const float *x, const float *w1, const float *b1, const float *w2,
                 float *dx, float *dw1, float *db1, float *dw2, float *db2, int64_t rows, int dim,
                 int dff, int chunk, Activation act, bool accumulateDx = false);

/// The result of a cross-entropy evaluation.
struct CrossEntropy {
  double lossSum = 0;  ///< Σ −log p(target) over counted rows (natural log)
  int64_t count = 0;   ///< rows with a target ≥ 0
  int64_t correct = 0; ///< counted rows whose argmax (first on ties) is the target
};
/// Softmax cross-entropy of logits [rows, vocab] against targets (−1:
/// ignored). With dlogits non-null writes ∂(lossSum · gradScale)/∂logits
/// (0 on ignored rows).
CrossEntropy softmaxCrossEntropy(const float *logits, const int32_t *targets, float *dlogits,
                                 int64_t rows, int vocab, float gradScale);

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_LAYERS_H
