//===- CrossEntropy.h - Softmax cross-entropy over logits -------*- C++ -*-===//
//
// The objective's metric on a model's logits: what evaluations compute from
// a compiled inference function's output (runtime/train/Trainer.h), and the
// whole-model reference's loss (test/reference/Model.cpp). Rows are summed
// in order, in double, so the result does not depend on the thread count.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_CROSSENTROPY_H
#define ATTNC_RUNTIME_TRAIN_CROSSENTROPY_H

#include <cstdint>

namespace attnc::train {

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

#endif // ATTNC_RUNTIME_TRAIN_CROSSENTROPY_H
