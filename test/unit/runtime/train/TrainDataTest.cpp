//===- TrainDataTest.cpp - Byte corpora, MLM masking, the duplication task ===//
#include "runtime/train/Data.h"

#include "runtime/FileSystem.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include <sys/stat.h>

using namespace attnc;
using namespace attnc::train;

namespace {

/// A temporary directory for corpus files.
class Scratch {
public:
  Scratch() {
    Expected<fs::TempDir> d = fs::TempDir::create("attnc-data-test-");
    EXPECT_TRUE(d.ok()) << d.error();
    dir_.emplace_back(std::move(d).take());
  }
  std::string path(const std::string &rel = "") const {
    return rel.empty() ? dir_.front().path() : dir_.front().path() + "/" + rel;
  }
  std::string write(const std::string &rel, const std::string &bytes) const {
    std::string p = path(rel);
    std::string parent = p.substr(0, p.rfind('/'));
    EXPECT_TRUE(fs::createDirectories(parent).ok());
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }

private:
  std::vector<fs::TempDir> dir_; // TempDir has no default constructor
};

/// `n` random bytes in [1, 255] (no separators, substrings of 17+ unique).
std::string randomBytes(size_t n, unsigned seed) {
  std::mt19937 g(seed);
  std::string s(n, '\0');
  for (char &c : s)
    c = char(1 + g() % 255);
  return s;
}

/// All corpus bytes, read back through a single-window causal batch
/// (heldOutFraction 0 and S = bytes − 1 leave exactly one start).
std::string contents(const ByteCorpus &c) {
  int S = int(c.trainBytes() - 1);
  Batch b = c.causalBatch(1, 0, 1, S);
  EXPECT_EQ(b.B, 1);
  std::string s;
  for (int t = 0; t < S; ++t)
    s.push_back(char(b.inputs[t]));
  s.push_back(char(b.targets[S - 1]));
  return s;
}

bool sameBatch(const Batch &a, const Batch &b) {
  return a.B == b.B && a.S == b.S && a.inputs == b.inputs && a.targets == b.targets;
}

} // namespace

TEST(TrainDataCorpus, SplitSizes) {
  Scratch s;
  std::string a = s.write("a", randomBytes(5000, 1)), b = s.write("b", randomBytes(5000, 2));
  // Two files and one separator: 10001 bytes.
  Expected<ByteCorpus> c = ByteCorpus::load({a, b}, 0.1, 64);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(c->trainBytes() + c->heldOutBytes(), 10001);
  EXPECT_EQ(c->heldOutBytes(), 1000); // round(1000.1)

  Expected<ByteCorpus> none = ByteCorpus::load({a, b}, 0.0, 64);
  ASSERT_TRUE(none.ok()) << none.error();
  EXPECT_EQ(none->trainBytes(), 10001);
  EXPECT_EQ(none->heldOutBytes(), 0);
  EXPECT_EQ(none->heldOutBatches(4, 64), 0);

  // A tiny fraction still holds out one window of seq+1 bytes.
  Expected<ByteCorpus> tiny = ByteCorpus::load({a, b}, 0.0001, 64);
  ASSERT_TRUE(tiny.ok()) << tiny.error();
  EXPECT_EQ(tiny->heldOutBytes(), 65);
  EXPECT_EQ(tiny->trainBytes(), 10001 - 65);
  EXPECT_EQ(tiny->heldOutBatches(4, 64), 1);
  EXPECT_EQ(tiny->heldOutCausalBatch(0, 4, 64).B, 1);
}

TEST(TrainDataCorpus, DirectoryOrderAndSeparators) {
  Scratch s;
  s.write("corpus/b.txt", "BB");
  s.write("corpus/a.txt", "A");
  s.write("corpus/sub/c.txt", "CCC");
  s.write("corpus/empty", "");
  ASSERT_EQ(::mkfifo(s.path("corpus/pipe").c_str(), 0600), 0) << std::strerror(errno);
  std::string lone = s.write("lone.txt", "Z");

  // Sorted by path: a.txt, b.txt, empty, sub/c.txt; the FIFO is skipped; a 0
  // byte between consecutive files (also around the empty one), none at the end.
  Expected<ByteCorpus> c = ByteCorpus::load({s.path("corpus")}, 0.0, 1);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_EQ(contents(*c), std::string("A\0BB\0\0CCC", 9));

  // Explicit paths keep their order; a directory expands in place.
  Expected<ByteCorpus> d =
      ByteCorpus::load({lone, s.path("corpus/sub"), s.path("corpus/a.txt")}, 0.0, 1);
  ASSERT_TRUE(d.ok()) << d.error();
  EXPECT_EQ(contents(*d), std::string("Z\0CCC\0A", 7));

  // An explicit FIFO is an error (opening it would block), naming it.
  Expected<ByteCorpus> f = ByteCorpus::load({s.path("corpus/pipe")}, 0.0, 1);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.error().find("pipe"), std::string::npos) << f.error();
  EXPECT_NE(f.error().find("not a regular file"), std::string::npos) << f.error();
}

TEST(TrainDataCorpus, Errors) {
  Scratch s;
  std::string empty = s.write("empty", "");
  std::string small = s.write("small", std::string(15, 'x'));
  std::string hundred = s.write("hundred", std::string(100, 'x'));

  Expected<ByteCorpus> e = ByteCorpus::load({empty}, 0.1, 8);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().find("0 bytes"), std::string::npos) << e.error();
  EXPECT_NE(e.error().find("at least 9 bytes"), std::string::npos) << e.error();
  EXPECT_NE(e.error().find("empty"), std::string::npos) << e.error();

  // 15 bytes are one window, but not one to train on and one held out.
  EXPECT_TRUE(ByteCorpus::load({small}, 0.0, 8).ok());
  Expected<ByteCorpus> h = ByteCorpus::load({small}, 0.1, 8);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.error().find("15 bytes"), std::string::npos) << h.error();
  EXPECT_NE(h.error().find("at least 18 bytes"), std::string::npos) << h.error();

  // A large fraction leaves too little to train on; the error names the
  // smallest corpus that works, and that size does work (one byte less not).
  Expected<ByteCorpus> big = ByteCorpus::load({hundred}, 0.95, 8);
  ASSERT_FALSE(big.ok());
  std::string msg = big.error();
  size_t at = msg.find("a corpus of at least ");
  ASSERT_NE(at, std::string::npos) << msg;
  long need = std::stol(msg.substr(at + std::strlen("a corpus of at least ")));
  EXPECT_TRUE(ByteCorpus::load({s.write("need", std::string(need, 'x'))}, 0.95, 8).ok());
  EXPECT_FALSE(ByteCorpus::load({s.write("need1", std::string(need - 1, 'x'))}, 0.95, 8).ok());

  Expected<ByteCorpus> missing = ByteCorpus::load({s.path("no-such-file")}, 0.0, 8);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("no-such-file"), std::string::npos) << missing.error();

  EXPECT_FALSE(ByteCorpus::load({}, 0.0, 8).ok());
  EXPECT_FALSE(ByteCorpus::load({hundred}, 1.0, 8).ok());
  EXPECT_FALSE(ByteCorpus::load({hundred}, -0.1, 8).ok());
  EXPECT_FALSE(ByteCorpus::load({hundred}, 0.0, 0).ok());

  // An empty directory is an empty corpus.
  ASSERT_TRUE(fs::createDirectories(s.path("void")).ok());
  Expected<ByteCorpus> v = ByteCorpus::load({s.path("void")}, 0.0, 8);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.error().find("0 files, 0 bytes"), std::string::npos) << v.error();

  // An unreadable file inside a directory is an error, not skipped (unless
  // we are root, who reads it anyway).
  std::string locked = s.write("locked/x", "secret");
  ::chmod(locked.c_str(), 0);
  Expected<ByteCorpus> l = ByteCorpus::load({s.path("locked")}, 0.0, 1);
  if (!l.ok()) {
    EXPECT_NE(l.error().find("locked/x"), std::string::npos) << l.error();
  }
}

TEST(TrainDataCorpus, CausalWindowsInsideTrainPart) {
  Scratch s;
  std::string text = randomBytes(2000, 3);
  Expected<ByteCorpus> c = ByteCorpus::load({s.write("t", text)}, 0.25, 16);
  ASSERT_TRUE(c.ok()) << c.error();
  const int S = 16;
  const int64_t train = c->trainBytes();
  EXPECT_EQ(train, 1500);
  int64_t lo = train, hi = -1;
  for (int64_t step = 0; step < 200; ++step) {
    Batch b = c->causalBatch(7, step, 8, S);
    ASSERT_EQ(b.B, 8);
    ASSERT_EQ(b.S, S);
    ASSERT_EQ(b.inputs.size(), 8u * S);
    ASSERT_EQ(b.targets.size(), 8u * S);
    for (int r = 0; r < b.B; ++r) {
      std::string w;
      for (int t = 0; t < S; ++t) {
        w.push_back(char(b.inputs[r * S + t]));
        if (t > 0) {
          ASSERT_EQ(b.targets[r * S + t - 1], b.inputs[r * S + t]);
        }
      }
      w.push_back(char(b.targets[r * S + S - 1]));
      size_t at = text.find(w);
      ASSERT_NE(at, std::string::npos);
      ASSERT_EQ(text.find(w, at + 1), std::string::npos); // random text: unique
      ASSERT_LE(int64_t(at) + S + 1, train) << "window crosses into the held-out part";
      lo = std::min<int64_t>(lo, at);
      hi = std::max<int64_t>(hi, at);
    }
  }
  // 1600 uniform draws over 1484 starts reach both ends.
  EXPECT_LT(lo, 20);
  EXPECT_GT(hi, train - S - 1 - 20);
}

TEST(TrainDataCorpus, Determinism) {
  Scratch s;
  std::string p = s.write("t", randomBytes(4000, 4));
  Expected<ByteCorpus> c1 = ByteCorpus::load({p}, 0.1, 32);
  Expected<ByteCorpus> c2 = ByteCorpus::load({p}, 0.1, 32);
  ASSERT_TRUE(c1.ok() && c2.ok());
  // The same (seed, step) gives the same batch, from another corpus object
  // and whatever was drawn before.
  Batch a = c1->causalBatch(42, 17, 4, 32);
  for (int step = 0; step < 17; ++step)
    (void)c2->causalBatch(42, step, 4, 32);
  EXPECT_TRUE(sameBatch(a, c2->causalBatch(42, 17, 4, 32)));
  EXPECT_FALSE(sameBatch(a, c1->causalBatch(42, 18, 4, 32)));
  EXPECT_FALSE(sameBatch(a, c1->causalBatch(43, 17, 4, 32)));
  // Rows of one batch differ (distinct draws per row).
  EXPECT_FALSE(std::equal(a.inputs.begin(), a.inputs.begin() + 32, a.inputs.begin() + 32));

  Batch m = c1->mlmBatch(42, 17, 4, 32, 256, 256);
  EXPECT_TRUE(sameBatch(m, c2->mlmBatch(42, 17, 4, 32, 256, 256)));
  EXPECT_FALSE(sameBatch(m, c1->mlmBatch(42, 18, 4, 32, 256, 256)));

  Batch hm = c1->heldOutMlmBatch(0, 4, 32, 42, 256, 256);
  EXPECT_TRUE(sameBatch(hm, c2->heldOutMlmBatch(0, 4, 32, 42, 256, 256)));
  EXPECT_FALSE(sameBatch(hm, c1->heldOutMlmBatch(0, 4, 32, 43, 256, 256)));

  Batch d = duplicateBatch(42, 17, 4, 32, 256);
  EXPECT_TRUE(sameBatch(d, duplicateBatch(42, 17, 4, 32, 256)));
  EXPECT_FALSE(sameBatch(d, duplicateBatch(42, 18, 4, 32, 256)));
  EXPECT_FALSE(sameBatch(d, duplicateBatch(41, 17, 4, 32, 256)));
}

TEST(TrainDataCorpus, HeldOutCoversInOrder) {
  Scratch s;
  std::string text = randomBytes(1000, 5);
  Expected<ByteCorpus> c = ByteCorpus::load({s.write("t", text)}, 0.3, 7);
  ASSERT_TRUE(c.ok()) << c.error();
  const int B = 3, S = 7;
  const int64_t H = c->heldOutBytes();
  EXPECT_EQ(H, 300);
  const std::string held = text.substr(size_t(c->trainBytes()));
  const int64_t windows = (H - 1) / S; // 42
  const int64_t batches = c->heldOutBatches(B, S);
  EXPECT_EQ(batches, (windows + B - 1) / B);
  std::string inputs, targets;
  for (int64_t i = 0; i < batches; ++i) {
    Batch b = c->heldOutCausalBatch(i, B, S);
    ASSERT_EQ(b.S, S);
    ASSERT_EQ(b.B, i + 1 < batches ? B : windows - B * (batches - 1));
    ASSERT_EQ(b.inputs.size(), size_t(b.B) * S);
    for (int k = 0; k < b.B * S; ++k) {
      inputs.push_back(char(b.inputs[k]));
      targets.push_back(char(b.targets[k]));
    }
    // Its MLM version masks the same windows.
    Batch m = c->heldOutMlmBatch(i, B, S, 9, 256, 256);
    ASSERT_EQ(m.B, b.B);
    for (int k = 0; k < b.B * S; ++k) {
      if (m.targets[k] >= 0) {
        ASSERT_EQ(m.targets[k], b.inputs[k]);
      } else {
        ASSERT_EQ(m.inputs[k], b.inputs[k]);
      }
    }
  }
  EXPECT_EQ(inputs, held.substr(0, size_t(windows * S)));
  EXPECT_EQ(targets, held.substr(1, size_t(windows * S)));
}

TEST(TrainDataMask, Statistics) {
  Scratch s;
  std::string text = randomBytes(100000, 6);
  Expected<ByteCorpus> c = ByteCorpus::load({s.write("t", text)}, 0.0, 512);
  ASSERT_TRUE(c.ok()) << c.error();
  const int B = 64, S = 512, vocab = 256, mask = vocab;
  int64_t total = 0, chosen = 0, masked = 0, kept = 0, random = 0;
  for (int64_t step = 0; step < 4; ++step) {
    Batch orig = c->causalBatch(11, step, B, S);
    Batch m = c->mlmBatch(11, step, B, S, mask, vocab);
    ASSERT_EQ(m.B, B);
    ASSERT_EQ(m.targets.size(), size_t(B) * S);
    for (size_t k = 0; k < m.inputs.size(); ++k) {
      ++total;
      if (m.targets[k] == -1) {
        ASSERT_EQ(m.inputs[k], orig.inputs[k]) << "an unchosen position changed";
        continue;
      }
      ++chosen;
      ASSERT_EQ(m.targets[k], orig.inputs[k]);
      if (m.inputs[k] == mask)
        ++masked;
      else if (m.inputs[k] == orig.inputs[k])
        ++kept; // includes random draws of the same byte (1/256 of 10 %)
      else {
        ASSERT_GE(m.inputs[k], 0);
        ASSERT_LT(m.inputs[k], vocab);
        ++random;
      }
    }
  }
  // 131072 positions: σ of the chosen share is 0.1 %; ~19700 chosen: σ of the
  // 80 / 10 / 10 shares under 0.3 %.
  EXPECT_NEAR(double(chosen) / total, 0.15, 0.005);
  EXPECT_NEAR(double(masked) / chosen, 0.80, 0.015);
  EXPECT_NEAR(double(random) / chosen, 0.10, 0.012);
  EXPECT_NEAR(double(kept) / chosen, 0.10 + 0.10 / 256, 0.012);
}

TEST(TrainDataMask, PositionsDependOnlyOnSeedStepPosition) {
  // maskTokens on a hand-made batch: a different content gets the same
  // chosen positions; random replacements stay in [0, vocab) for a small
  // vocab; the whole range is reached.
  Batch a, b;
  a.B = b.B = 8;
  a.S = b.S = 128;
  a.inputs.assign(1024, 1);
  b.inputs.assign(1024, 2);
  maskTokens(a, 5, 3, 99, 4);
  maskTokens(b, 5, 3, 99, 4);
  std::vector<int> seen(4, 0);
  for (size_t k = 0; k < 1024; ++k) {
    ASSERT_EQ(a.targets[k] == -1, b.targets[k] == -1);
    if (a.targets[k] == -1) {
      ASSERT_EQ(a.inputs[k], 1);
      continue;
    }
    ASSERT_EQ(a.targets[k], 1);
    ASSERT_EQ(b.targets[k], 2);
    ASSERT_TRUE(a.inputs[k] == 99 || (a.inputs[k] >= 0 && a.inputs[k] < 4)) << a.inputs[k];
    if (a.inputs[k] != 99)
      ++seen[a.inputs[k]];
  }
  // Pre-existing targets are replaced, not merged.
  Batch c = a;
  c.targets.assign(1024, 7);
  c.inputs.assign(1024, 1);
  maskTokens(c, 5, 3, 99, 4);
  EXPECT_EQ(c.targets, a.targets);
  EXPECT_GT(seen[1], 0);
  // A different step chooses different positions.
  Batch d = b;
  d.inputs.assign(1024, 2);
  maskTokens(d, 5, 4, 99, 4);
  EXPECT_NE(d.targets, b.targets);
}

TEST(TrainDataDuplicate, Structure) {
  const int B = 16, S = 64, vocab = 256, half = S / 2;
  Batch d = duplicateBatch(3, 0, B, S, vocab);
  ASSERT_EQ(d.B, B);
  ASSERT_EQ(d.S, S);
  ASSERT_EQ(d.inputs.size(), size_t(B) * S);
  ASSERT_EQ(d.targets.size(), size_t(B) * S);
  for (int r = 0; r < B; ++r) {
    const int32_t *in = d.inputs.data() + r * S, *tg = d.targets.data() + r * S;
    EXPECT_EQ(in[0], 0);
    EXPECT_EQ(in[half], 0);
    for (int j = 1; j < half; ++j) {
      EXPECT_GE(in[j], 1);
      EXPECT_LT(in[j], vocab);
      EXPECT_EQ(in[half + j], in[j]);
    }
    int targetsSet = 0;
    for (int t = 0; t < S; ++t) {
      if (t >= half && t <= S - 2) {
        EXPECT_EQ(tg[t], in[t + 1]) << "row " << r << " position " << t;
        ++targetsSet;
      } else {
        EXPECT_EQ(tg[t], -1) << "row " << r << " position " << t;
      }
    }
    EXPECT_EQ(targetsSet, half - 1);
  }
  // Rows differ.
  EXPECT_FALSE(std::equal(d.inputs.begin(), d.inputs.begin() + S, d.inputs.begin() + S));

  // The smallest task: 0 w 0 w with one token, one target.
  Batch m = duplicateBatch(3, 1, 2, 4, vocab);
  ASSERT_EQ(m.B, 2);
  for (int r = 0; r < 2; ++r) {
    const int32_t *in = m.inputs.data() + r * 4, *tg = m.targets.data() + r * 4;
    EXPECT_EQ(in[0], 0);
    EXPECT_EQ(in[2], 0);
    EXPECT_NE(in[1], 0);
    EXPECT_EQ(in[3], in[1]);
    EXPECT_EQ(std::vector<int32_t>(tg, tg + 4), (std::vector<int32_t>{-1, -1, in[3], -1}));
  }

  // vocab 3: tokens 1 and 2 about equally often, never 0.
  Batch v = duplicateBatch(8, 0, 64, 128, 3);
  int ones = 0, twos = 0;
  for (int r = 0; r < 64; ++r)
    for (int j = 1; j < 64; ++j) {
      int32_t w = v.inputs[r * 128 + j];
      ASSERT_TRUE(w == 1 || w == 2) << w;
      (w == 1 ? ones : twos)++;
    }
  EXPECT_NEAR(double(ones) / (ones + twos), 0.5, 0.03);
}

// Out-of-contract arguments: assert in a debug build; a release build returns
// a batch with B = 0 and no rows.
TEST(TrainDataArguments, BadShapes) {
  Scratch s;
  Expected<ByteCorpus> c = ByteCorpus::load({s.write("t", randomBytes(200, 7))}, 0.5, 16);
  ASSERT_TRUE(c.ok()) << c.error();
#ifdef NDEBUG
  auto empty = [](const Batch &b) { return b.B == 0 && b.inputs.empty() && b.targets.empty(); };
  EXPECT_TRUE(empty(duplicateBatch(1, 0, 4, 7, 256))); // odd S
  EXPECT_TRUE(empty(duplicateBatch(1, 0, 4, 2, 256))); // S < 4
  EXPECT_TRUE(empty(duplicateBatch(1, 0, 4, 8, 1)));   // no token besides 0
  EXPECT_TRUE(empty(duplicateBatch(1, 0, 0, 8, 256))); // no rows
  EXPECT_TRUE(empty(c->causalBatch(1, 0, 4, 100)));    // S+1 > training part
  EXPECT_TRUE(empty(c->mlmBatch(1, 0, 4, 100, 256, 256)));
  EXPECT_TRUE(empty(c->heldOutCausalBatch(c->heldOutBatches(4, 16), 4, 16)));
  EXPECT_TRUE(empty(c->heldOutCausalBatch(-1, 4, 16)));
  EXPECT_TRUE(empty(c->heldOutMlmBatch(99, 4, 16, 1, 256, 256)));
  EXPECT_EQ(c->heldOutBatches(4, 100), 0);
#else
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH((void)duplicateBatch(1, 0, 4, 7, 256), "even");
  EXPECT_DEATH((void)duplicateBatch(1, 0, 4, 8, 1), "vocab");
  EXPECT_DEATH((void)c->causalBatch(1, 0, 4, 100), "shorter");
  EXPECT_DEATH((void)c->heldOutCausalBatch(-1, 4, 16), "out of range");
#endif
}

// A real directory corpus: Debian's licence texts.
TEST(TrainDataCorpus, CommonLicenses) {
  const std::string dir = "/usr/share/common-licenses";
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    GTEST_SKIP() << dir << " is missing";
  Expected<ByteCorpus> c = ByteCorpus::load({dir}, 0.05, 256);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_GT(c->trainBytes(), 100000);
  EXPECT_GE(c->heldOutBytes(), 257);
  Batch b = c->causalBatch(1, 0, 8, 256);
  ASSERT_EQ(b.B, 8);
  // Text: mostly printable ASCII or whitespace.
  int printable = 0;
  for (int32_t x : b.inputs) {
    ASSERT_GE(x, 0);
    ASSERT_LT(x, 256);
    printable += (x >= 32 && x < 127) || x == '\n' || x == '\t';
  }
  EXPECT_GT(printable, int(b.inputs.size()) * 9 / 10);
  ASSERT_GT(c->heldOutBatches(8, 256), 0);
  Batch h = c->heldOutMlmBatch(c->heldOutBatches(8, 256) - 1, 8, 256, 1, 256, 256);
  EXPECT_GT(h.B, 0);
}
