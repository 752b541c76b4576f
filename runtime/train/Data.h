//===- Data.h - Training data: bytes, the duplication task, MLM --*- C++ -*-===//
//
// Deterministic batches: batch `step` of a run with seed `seed` is the same
// on every machine and after a resume, whatever came before (counter-based
// randomness, runtime/PhiloxDraws.h, stream per purpose). Tokens are int32.
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
///
/// Preconditions of the batch functions (checked by assert; a release build
/// returns a batch with B = 0 and no rows instead): B ≥ 1, S ≥ 1, a part of
/// at least S+1 bytes (load() guarantees that for S ≤ its `seq`: always for
/// the training part, for the held-out part when heldOutFraction > 0), and
/// for the held-out batches 0 ≤ index < heldOutBatches(B, S).
class ByteCorpus {
public:
  /// `paths` are files or directories, in the order given; a directory
  /// contributes its regular files (recursively, symbolic links to files
  /// followed, to directories not) sorted by path in byte order, skipping
  /// FIFOs, sockets and devices. A 0 byte goes between consecutive files
  /// (none after the last). `heldOutFraction` is in [0, 1); when positive,
  /// the held-out part is round(fraction · bytes) but at least seq+1 bytes,
  /// and the training part must keep seq+1 bytes too. Errors name an
  /// unreadable path (or an explicit path that is not a regular file or a
  /// directory), or say the corpus is too small, with its byte count and the
  /// count needed.
  static Expected<ByteCorpus> load(const std::vector<std::string> &paths, double heldOutFraction,
                                   int seq);
  int64_t trainBytes() const;
  int64_t heldOutBytes() const;

  /// Causal LM batch from the training part: B windows of S+1 bytes at
  /// positions drawn from (seed, step); inputs = bytes[0..S), targets =
  /// bytes[1..S].
  Batch causalBatch(uint64_t seed, int64_t step, int B, int S) const;
  /// The held-out part cut into consecutive windows: batch `index` of
  /// heldOutBatches(B, S) (the last one may have fewer rows). Window i has
  /// inputs = held-out bytes [iS, iS+S) and targets = [iS+1, iS+S], so every
  /// held-out byte after the first is predicted once, in order; there are
  /// (heldOutBytes() − 1) / S windows (a shorter tail is left out).
  Batch heldOutCausalBatch(int64_t index, int B, int S) const;
  int64_t heldOutBatches(int B, int S) const;
  /// MLM batches: the same windows (S bytes), then maskTokens(); held-out
  /// batch `index` is masked with step −1 − index (never a training step).
  Batch mlmBatch(uint64_t seed, int64_t step, int B, int S, int maskToken, int vocab) const;
  Batch heldOutMlmBatch(int64_t index, int B, int S, uint64_t seed, int maskToken, int vocab) const;

private:
  std::vector<uint8_t> bytes_;
  int64_t split_ = 0; ///< bytes_[0, split_) train, [split_, end) held out
};

/// BERT masking of `b.inputs` in place (docs/design.md, Semantics): each position is
/// chosen with probability 15%; a chosen one gets target = its token and
/// becomes maskToken (80%), a random byte in [0, vocab) excluding nothing
/// (10%) or stays (10%); targets of unchosen positions are −1. Draws come from
/// (seed, step, position), position = row·S + t, so a batch's masks do not
/// depend on the tokens.
void maskTokens(Batch &b, uint64_t seed, int64_t step, int maskToken, int vocab);

/// The Reformer duplication task: each row is 0 w 0 w with w of length
/// S/2 − 1 drawn uniformly from [1, vocab) (0 is the separator); the loss
/// and accuracy count only the second w (predicting token t+1 from the
/// prefix: targets set on positions S/2 .. S−2, i.e. predicting
/// positions S/2+1 .. S−1). S must be even and ≥ 4, B ≥ 1 and vocab ≥ 2: the
/// caller validates them (assert; a release build returns B = 0, no rows).
Batch duplicateBatch(uint64_t seed, int64_t step, int B, int S, int vocab);

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_DATA_H
