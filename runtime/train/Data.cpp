//===- Data.cpp - Training data: bytes, the duplication task, MLM ---------===//
//
// Randomness: Philox4x32-10 (runtime/PhiloxDraws.h) with key = the run's seed and
// counter = (step low, step high, stream, index), one stream per purpose so
// the draws of different purposes never share a counter:
//
//   kWindowStream     index = row           start of a causal/MLM window
//   kMaskStream       index = row·S + t     MLM choice, 80/10/10, random byte
//   kDuplicateStream  index = row·S + j     token j of a duplication row's w
//
// Integers in [0, n) come from the high bits of a fixed-point product
// (r·n >> 32, or 64 bits of r with a 128-bit product for corpus offsets),
// which is uniform up to n/2^32 (n/2^64); no rejection loop, so every value is
// a fixed function of its counter.
//
//===----------------------------------------------------------------------===//
#include "runtime/train/Data.h"

#include "runtime/FileSystem.h"
#include "runtime/PhiloxDraws.h"

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <system_error>

#include <sys/stat.h>

namespace attnc::train {
namespace {

constexpr uint32_t kWindowStream = 0xDA7A0001u;
constexpr uint32_t kMaskStream = 0xDA7A0002u;
constexpr uint32_t kDuplicateStream = 0xDA7A0003u;

philox::Block draw(uint64_t seed, uint32_t stream, int64_t step, uint32_t index) {
  uint64_t s = uint64_t(step);
  return philox::philox4x32({uint32_t(s), uint32_t(s >> 32), stream, index}, seed);
}

/// [0, n) from 32 random bits, n ≤ 2^32.
uint32_t below32(uint32_t r, uint64_t n) { return uint32_t((uint64_t(r) * n) >> 32); }

/// [0, n) from 64 random bits.
uint64_t below64(uint32_t lo, uint32_t hi, uint64_t n) {
  unsigned __int128 r = (unsigned __int128)((uint64_t(hi) << 32) | lo);
  return uint64_t((r * n) >> 64);
}

// 15 % of 2^32, and 80 % / 90 % of it for the replacement kind.
constexpr uint64_t kTwo32 = uint64_t(1) << 32;
constexpr uint32_t kChooseBelow = uint32_t(kTwo32 * 15 / 100);
constexpr uint32_t kMaskBelow = uint32_t(kTwo32 * 80 / 100);
constexpr uint32_t kRandomBelow = uint32_t(kTwo32 * 90 / 100);

/// The masking step of held-out batch `index`: negative, so held-out masks
/// never repeat a training step's (steps count from 0).
int64_t heldOutMaskStep(int64_t index) { return -1 - index; }

std::string describePaths(const std::vector<std::string> &paths) {
  std::string s = "'" + paths.front() + "'";
  if (paths.size() > 1)
    s += " and " + std::to_string(paths.size() - 1) + " more path" + (paths.size() > 2 ? "s" : "");
  return s;
}

std::string fractionText(double f) {
  std::ostringstream os;
  os << f;
  return os.str();
}

/// The regular files under `dir` (recursively; symbolic links to files are
/// followed, links to directories are not), sorted by path; special files
/// (FIFOs, sockets, devices) are skipped.
Status listDirectory(const std::string &dir, std::vector<std::string> &files) {
  namespace sfs = std::filesystem;
  std::error_code ec;
  std::vector<std::string> found;
  sfs::recursive_directory_iterator it(dir, ec), end;
  if (ec)
    return makeError("cannot read corpus directory '" + dir + "': " + ec.message());
  for (; it != end; it.increment(ec)) {
    if (ec)
      break;
    std::error_code sec;
    // is_regular_file follows a symbolic link; a dangling one is skipped.
    if (it->is_regular_file(sec))
      found.push_back(it->path().string());
  }
  if (ec)
    return makeError("cannot read corpus directory '" + dir + "' (at '" +
                     (it != end ? it->path().string() : dir) + "'): " + ec.message());
  std::sort(found.begin(), found.end());
  files.insert(files.end(), found.begin(), found.end());
  return {};
}

} // namespace

Expected<ByteCorpus> ByteCorpus::load(const std::vector<std::string> &paths, double heldOutFraction,
                                      int seq) {
  if (paths.empty())
    return makeError("no corpus paths given");
  if (!(heldOutFraction >= 0.0 && heldOutFraction < 1.0))
    return makeError("the held-out fraction must be in [0, 1), not " +
                     fractionText(heldOutFraction));
  if (seq < 1)
    return makeError("the sequence length must be positive, not " + std::to_string(seq));

  // Files in order: each explicit path in the order given, a directory
  // expanded to its regular files sorted by path.
  std::vector<std::string> files;
  for (const std::string &path : paths) {
    struct stat st;
    if (::stat(path.c_str(), &st) != 0)
      return makeError("cannot read corpus path '" + path + "': " + std::strerror(errno));
    if (S_ISDIR(st.st_mode)) {
      if (Status s = listDirectory(path, files); !s)
        return s.takeError();
    } else if (S_ISREG(st.st_mode)) {
      files.push_back(path);
    } else {
      // Opening a FIFO would block; a device is not a corpus.
      return makeError("cannot read corpus path '" + path + "': not a regular file or a directory");
    }
  }

  ByteCorpus c;
  for (size_t i = 0; i < files.size(); ++i) {
    Expected<std::string> text = fs::readFile(files[i]);
    if (!text)
      return makeError("corpus: " + text.error());
    if (i > 0)
      c.bytes_.push_back(0);
    c.bytes_.insert(c.bytes_.end(), text->begin(), text->end());
  }

  const int64_t n = int64_t(c.bytes_.size());
  const int64_t window = int64_t(seq) + 1;
  const std::string what = "corpus " + describePaths(paths) + " (" + std::to_string(files.size()) +
                           " file" + (files.size() == 1 ? "" : "s") + ", " + std::to_string(n) +
                           " bytes)";
  if (n < window)
    return makeError(what + " is shorter than one sequence: seq " + std::to_string(seq) +
                     " needs at least " + std::to_string(window) + " bytes");
  if (heldOutFraction == 0.0) {
    c.split_ = n;
    return c;
  }
  if (n < 2 * window)
    return makeError(what + " is too small to hold out a part for evaluation: seq " +
                     std::to_string(seq) + " needs at least " + std::to_string(2 * window) +
                     " bytes (" + std::to_string(window) + " to train on and " +
                     std::to_string(window) +
                     " held out); use a larger corpus or a held-out fraction of 0");
  // The held-out part is the fraction's share, but at least one window.
  auto heldFor = [&](int64_t total) {
    return std::max<int64_t>(int64_t(std::llround(double(total) * heldOutFraction)), window);
  };
  int64_t held = heldFor(n);
  if (n - held < window) {
    // The smallest corpus whose training part holds one window: total −
    // held is non-decreasing in total, and total·(1 − f) + 1/2 ≥ window
    // bounds it from below.
    int64_t need = std::max<int64_t>(
        2 * window, int64_t(std::floor(double(window - 1) / (1.0 - heldOutFraction))));
    while (need - heldFor(need) < window)
      ++need;
    return makeError(what + " leaves " + std::to_string(n - held) +
                     " bytes to train on with held-out fraction " + fractionText(heldOutFraction) +
                     ": seq " + std::to_string(seq) + " needs at least " + std::to_string(window) +
                     ", i.e. a corpus of at least " + std::to_string(need) +
                     " bytes or a smaller held-out fraction");
  }
  c.split_ = n - held;
  return c;
}

int64_t ByteCorpus::trainBytes() const { return split_; }
int64_t ByteCorpus::heldOutBytes() const { return int64_t(bytes_.size()) - split_; }

Batch ByteCorpus::causalBatch(uint64_t seed, int64_t step, int B, int S) const {
  assert(B >= 0 && S >= 1 && "causalBatch: B ≥ 0 and S ≥ 1");
  assert(trainBytes() >= int64_t(S) + 1 && "causalBatch: the training part is shorter than S+1");
  Batch b;
  b.S = S;
  if (B <= 0 || S < 1 || trainBytes() < int64_t(S) + 1)
    return b;
  b.B = B;
  b.inputs.resize(size_t(B) * S);
  b.targets.resize(size_t(B) * S);
  const uint64_t starts = uint64_t(trainBytes() - S); // windows of S+1 bytes
  for (int r = 0; r < B; ++r) {
    philox::Block x = draw(seed, kWindowStream, step, uint32_t(r));
    const uint8_t *w = bytes_.data() + below64(x[0], x[1], starts);
    int32_t *in = b.inputs.data() + size_t(r) * S, *tg = b.targets.data() + size_t(r) * S;
    for (int t = 0; t < S; ++t) {
      in[t] = w[t];
      tg[t] = w[t + 1];
    }
  }
  return b;
}

int64_t ByteCorpus::heldOutBatches(int B, int S) const {
  if (B <= 0 || S < 1 || heldOutBytes() < int64_t(S) + 1)
    return 0;
  int64_t windows = (heldOutBytes() - 1) / S;
  return (windows + B - 1) / B;
}

Batch ByteCorpus::heldOutCausalBatch(int64_t index, int B, int S) const {
  assert(index >= 0 && index < heldOutBatches(B, S) && "heldOutCausalBatch: index out of range");
  Batch b;
  b.S = S;
  if (index < 0 || index >= heldOutBatches(B, S))
    return b;
  const int64_t windows = (heldOutBytes() - 1) / S;
  const int64_t first = index * B;
  b.B = int(std::min<int64_t>(B, windows - first));
  b.inputs.resize(size_t(b.B) * S);
  b.targets.resize(size_t(b.B) * S);
  for (int r = 0; r < b.B; ++r) {
    const uint8_t *w = bytes_.data() + split_ + (first + r) * S;
    int32_t *in = b.inputs.data() + size_t(r) * S, *tg = b.targets.data() + size_t(r) * S;
    for (int t = 0; t < S; ++t) {
      in[t] = w[t];
      tg[t] = w[t + 1];
    }
  }
  return b;
}

Batch ByteCorpus::mlmBatch(uint64_t seed, int64_t step, int B, int S, int maskToken,
                           int vocab) const {
  Batch b = causalBatch(seed, step, B, S);
  maskTokens(b, seed, step, maskToken, vocab);
  return b;
}

Batch ByteCorpus::heldOutMlmBatch(int64_t index, int B, int S, uint64_t seed, int maskToken,
                                  int vocab) const {
  Batch b = heldOutCausalBatch(index, B, S);
  maskTokens(b, seed, heldOutMaskStep(index), maskToken, vocab);
  return b;
}

void maskTokens(Batch &b, uint64_t seed, int64_t step, int maskToken, int vocab) {
  assert(vocab >= 1 && "maskTokens: vocab ≥ 1");
  assert(b.inputs.size() == size_t(b.B) * b.S && "maskTokens: inputs are not [B, S]");
  b.targets.assign(b.inputs.size(), -1);
  for (size_t i = 0; i < b.inputs.size(); ++i) {
    philox::Block x = draw(seed, kMaskStream, step, uint32_t(i));
    if (x[0] >= kChooseBelow)
      continue;
    b.targets[i] = b.inputs[i];
    if (x[1] < kMaskBelow)
      b.inputs[i] = maskToken;
    else if (x[1] < kRandomBelow)
      b.inputs[i] = int32_t(below32(x[2], uint64_t(std::max(vocab, 1))));
    // else: the token stays.
  }
}

Batch duplicateBatch(uint64_t seed, int64_t step, int B, int S, int vocab) {
  assert(S >= 4 && S % 2 == 0 && "duplicateBatch: S must be even and ≥ 4");
  assert(vocab >= 2 && "duplicateBatch: vocab ≥ 2 (0 is the separator)");
  Batch b;
  b.S = S;
  if (B <= 0 || S < 4 || S % 2 != 0 || vocab < 2)
    return b;
  b.B = B;
  b.inputs.assign(size_t(B) * S, 0);
  b.targets.assign(size_t(B) * S, -1);
  const int half = S / 2;
  for (int r = 0; r < B; ++r) {
    int32_t *in = b.inputs.data() + size_t(r) * S, *tg = b.targets.data() + size_t(r) * S;
    for (int j = 1; j < half; ++j) {
      philox::Block x = draw(seed, kDuplicateStream, step, uint32_t(size_t(r) * S + j));
      int32_t w = 1 + int32_t(below32(x[0], uint64_t(vocab - 1)));
      in[j] = w;
      in[half + j] = w;
    }
    for (int t = half; t <= S - 2; ++t)
      tg[t] = in[t + 1];
  }
  return b;
}

} // namespace attnc::train
