//===- Layers.h - Building blocks of the whole-model reference --*- C++ -*-===//
//
// fp32 forward and backward of the pieces a model is made of, around the
// generated attention kernels: embeddings, layer norm, linear maps, the
// chunked feed-forward block (the loss is runtime/train/CrossEntropy.h).
// The hand-assembled reference model (Model.h) strings them together; the
// tests hold the compiled step to it. Its linear maps and feed-forward
// blocks multiply and sum in double (plain loops, std::exp), sharing no GEMM
// or exp with the system under test. All tensors are
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
#ifndef ATTNC_TEST_REFERENCE_LAYERS_H
#define ATTNC_TEST_REFERENCE_LAYERS_H

#include "runtime/train/CrossEntropy.h"
#include "runtime/train/ModelConfig.h"

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

/// y = x·w + b, x [rows, in], w [in, out], b [out] or null. `accumulate`
/// adds into y instead of overwriting it.
void linearForward(const float *x, const float *w, const float *b, float *y, int64_t rows, int in,
                   int out, bool accumulate = false);
/// dx = dy·wᵀ (written; or null to skip; `accumulateDx` adds instead),
/// dw += xᵀ·dy, db += Σ_rows dy (or null).
void linearBackward(const float *dy, const float *x, const float *w, float *dx, float *dw,
                    float *db, int64_t rows, int in, int out, bool accumulateDx = false);

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

} // namespace attnc::train

#endif // ATTNC_TEST_REFERENCE_LAYERS_H
