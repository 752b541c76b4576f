//===- SessionTest.cpp - The model-level commands on a session's spec ----===//
//
// driver/Session.h's train, evaluate, generate, fill and tune, on a spec
// given as text (no file on disk): each returns a value, prints nothing,
// and keeps its report in lastWords(); a failing call's error carries what
// the command said.
//
//===----------------------------------------------------------------------===//
#include "driver/Session.h"

#include "runtime/FileSystem.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <sstream>

using namespace attnc;
using namespace attnc::driver;

namespace {

// A causal model small enough to train two steps in a second.
const char *kCausal =
    "attention a { mask causal }\n"
    "model m { vocab 256 seq 32 d_model 32 heads 2 layers 1 layer { attention a ffn } }\n";
// A masked model, for fill.
const char *kMasked = "attention a { }\n"
                      "model m { vocab 256 seq 32 d_model 32 heads 2 layers 1 objective mlm layer "
                      "{ attention a ffn } }\n";

/// A run of two steps in `dir`, on a text file written there.
TrainCliOptions smallRun(const std::string &dir) {
  std::string text;
  for (int i = 0; i < 200; ++i)
    text += "the quick brown fox jumps over the lazy dog " + std::to_string(i) + "\n";
  EXPECT_TRUE(fs::writeFileAtomic(dir + "/text.txt", text));
  TrainCliOptions o;
  o.run.data = dir + "/text.txt";
  const std::string out = dir + "/run";
  o.run.out = out;
  o.run.flags.steps = 2;
  o.run.flags.batch = 2;
  o.batch = 2;
  o.run.evalBatches = 1;
  o.run.resume = false;
  return o;
}

/// Captures std::cout and std::cerr for the scope: the session must print
/// nothing.
struct Silence {
  std::ostringstream out, err;
  std::streambuf *oldOut = std::cout.rdbuf(out.rdbuf()), *oldErr = std::cerr.rdbuf(err.rdbuf());
  ~Silence() {
    std::cout.rdbuf(oldOut);
    std::cerr.rdbuf(oldErr);
  }
};

} // namespace

TEST(Session, TrainsEvaluatesAndGeneratesFromItsOwnText) {
  Expected<fs::TempDir> dir = fs::TempDir::create("attnc-session-");
  ASSERT_TRUE(dir) << dir.error();
  Expected<std::unique_ptr<Session>> s = Session::fromText(kCausal, "in-memory.attn");
  ASSERT_TRUE(s) << s.error();
  TrainCliOptions o = smallRun(dir->path());
  o.spec = "/no/such/file.attn"; // replaced by the session's text

  std::string printed;
  {
    Silence quiet;
    Expected<Outcome> trained = (*s)->train(o);
    ASSERT_TRUE(trained) << trained.error();
    EXPECT_EQ(*trained, Outcome::Done);
    printed = quiet.out.str() + quiet.err.str();
  }
  EXPECT_EQ(printed, "");
  EXPECT_NE((*s)->lastWords().find("trained m for steps 0..2"), std::string::npos)
      << (*s)->lastWords();
  EXPECT_TRUE(std::filesystem::exists(dir->path() + "/run/train.csv"));

  Status evaluated = (*s)->evaluate(o);
  ASSERT_TRUE(evaluated) << evaluated.error();
  EXPECT_NE((*s)->lastWords().find("m at step 2: loss"), std::string::npos) << (*s)->lastWords();

  TrainCliOptions g = o;
  g.prompt = "abc", g.bytes = 4;
  Status generated = (*s)->generate(g);
  ASSERT_TRUE(generated) << generated.error();
  EXPECT_FALSE((*s)->lastWords().empty());
}

TEST(Session, FillsWithAMaskedModel) {
  Expected<fs::TempDir> dir = fs::TempDir::create("attnc-session-");
  ASSERT_TRUE(dir) << dir.error();
  Expected<std::unique_ptr<Session>> s = Session::fromText(kMasked);
  ASSERT_TRUE(s) << s.error();
  TrainCliOptions o = smallRun(dir->path());
  ASSERT_TRUE((*s)->train(o));
  o.text = "ab_d";
  Status filled = (*s)->fill(o);
  ASSERT_TRUE(filled) << filled.error();
  EXPECT_FALSE((*s)->lastWords().empty());
}

TEST(Session, ACommandsFailureIsAValueThatSaysWhy) {
  Expected<fs::TempDir> dir = fs::TempDir::create("attnc-session-");
  ASSERT_TRUE(dir) << dir.error();
  Expected<std::unique_ptr<Session>> s = Session::fromText(kCausal, "in-memory.attn");
  ASSERT_TRUE(s) << s.error();
  // No run in the folder: eval has no checkpoint to read.
  TrainCliOptions o = smallRun(dir->path());
  o.run.out = dir->path() + "/empty";
  Status evaluated = (*s)->evaluate(o);
  ASSERT_FALSE(evaluated);
  EXPECT_NE(evaluated.error().find("evaluation failed"), std::string::npos) << evaluated.error();
  EXPECT_NE(evaluated.error().find("attnc eval: error:"), std::string::npos) << evaluated.error();
  // A model the spec lacks, named in the error.
  o.run.model = "nope";
  Expected<Outcome> trained = (*s)->train(o);
  ASSERT_FALSE(trained);
  EXPECT_NE(trained.error().find("no model 'nope'"), std::string::npos) << trained.error();
}

TEST(Session, TunesItsOwnText) {
  Expected<fs::TempDir> dir = fs::TempDir::create("attnc-session-");
  ASSERT_TRUE(dir) << dir.error();
  Expected<std::unique_ptr<Session>> s = Session::fromText(kCausal, "in-memory.attn");
  ASSERT_TRUE(s) << s.error();
  TuneOptions t;
  t.db = dir->path() + "/db.json";
  t.show = true; // the database's entries for this spec: none yet
  Expected<Outcome> shown = (*s)->tune(t);
  ASSERT_TRUE(shown) << shown.error();
  EXPECT_FALSE((*s)->lastWords().empty());
}
