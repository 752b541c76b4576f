//===- Data.h - Training data: bytes, the duplication task, MLM --*- C++ -*-===//
//
// Deterministic batches: batch `step` of a run with seed `seed` is the same
// on every machine and after a resume, whatever came before (counter-based
// randomness, runtime/Philox.h, stream per purpose). Tokens are int32.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_DATA_H
#define ATTNC_RUNTIME_TRAIN_DATA_H

#include "runtime/Error.h"

#include <cstdint>
#include <string>
#include <vector>

namespace attnc::train {

/// A batch: inputs [B, S] and targets [B, S] (−1: no loss at that position).
struct Batch {
  int B = 0, S = 0;
  std::vector<int32_t> inputs, targets;
};

/// A byte-level text corpus: the files' bytes concatenated (a directory is
/// read recursively, files in name order; a 0 byte separates files). The last
/// `heldOutFraction` of the bytes is held out for evaluation.
class ByteCorpus {
public:
  /// `paths` are files or directories. Errors name an unreadable path, or
  /// say the corpus is shorter than one sequence.
  static Expected<ByteCorpus> load(const std::vector<std::string> &paths, double heldOutFraction,
                                   int seq);
  int64_t trainBytes() const;
  int64_t heldOutBytes() const;

  /// Causal LM batch from the training part: B windows of S+1 bytes at
  /// positions drawn from (seed, step); inputs = bytes[0..S), targets =
  /// bytes[1..S].
  Batch causalBatch(uint64_t seed, int64_t step, int B, int S) const;
  /// The held-out part cut into consecutive windows: batch `index` of
  /// heldOutBatches(B, S) (the last one may have fewer rows).
  Batch heldOutCausalBatch(int64_t index, int B, int S) const;
  int64_t heldOutBatches(int B, int S) const;
  /// MLM batches: the same windows (S bytes), then maskTokens().
  Batch mlmBatch(uint64_t seed, int64_t step, int B, int S, int maskToken, int vocab) const;
  Batch heldOutMlmBatch(int64_t index, int B, int S, uint64_t seed, int maskToken,
                        int vocab) const;

private:
  std::vector<uint8_t> bytes_;
  int64_t split_ = 0; ///< bytes_[0, split_) train, [split_, end) held out
};

/// BERT masking of `b.inputs` in place (DESIGN.md §4): each position is
/// chosen with probability 15%; a chosen one gets target = its token and
/// becomes maskToken (80%), a random byte in [0, vocab) excluding nothing
/// (10%) or stays (10%); targets of unchosen positions are −1. Draws come from
/// (seed, step, position).
void maskTokens(Batch &b, uint64_t seed, int64_t step, int maskToken, int vocab);

/// The Reformer duplication task: each row is 0 w 0 w with w of length
/// S/2 − 1 drawn uniformly from [1, vocab) (0 is the separator); the loss
/// and accuracy count only the second w (predicting token t+1 from the
/// prefix: targets set on positions S/2 .. S−2, i.e. predicting
/// positions S/2+1 .. S−1). S must be even and ≥ 4.
Batch duplicateBatch(uint64_t seed, int64_t step, int B, int S, int vocab);

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_DATA_H
