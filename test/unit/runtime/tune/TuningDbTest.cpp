//===- TuningDbTest.cpp - The tuning database of `attnc tune` -------------===//
#include "runtime/tune/TuningDb.h"
#include "test/unit/support/ScopedEnv.h"

#include "runtime/CudaDriver.h"
#include "runtime/FileSystem.h"
#include "runtime/Version.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

using namespace attnc;
using namespace attnc::tune;

namespace {

class Scratch {
public:
  Scratch() {
    Expected<fs::TempDir> d = fs::TempDir::create("attnc-tunedb-test-");
    EXPECT_TRUE(d.ok()) << d.error();
    dir_.emplace_back(std::move(d).take());
  }
  std::string path(const std::string &rel) const { return dir_.front().path() + "/" + rel; }
  std::string write(const std::string &rel, const std::string &bytes) const {
    std::string p = path(rel);
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  std::string read(const std::string &rel) const {
    Expected<std::string> s = fs::readFile(path(rel));
    EXPECT_TRUE(s.ok()) << s.error();
    return s ? *s : "";
  }

private:
  std::vector<fs::TempDir> dir_;
};

DeviceKey gpu() {
  DeviceKey d;
  d.kind = "cuda";
  d.name = "NVIDIA H200";
  d.ccMajor = 9;
  d.smCount = 132;
  d.memoryBytes = int64_t(143771) << 20;
  return d;
}

DeviceKey cpu() {
  DeviceKey d;
  d.kind = "cpu";
  d.name = "Test CPU";
  d.logicalCpus = 8;
  d.isa = "avx2";
  return d;
}

KernelKey kernel(const std::string &bucket = "n4096-bh16") {
  return {"fwd f32 d64 causal pad mod=ab12", bucket};
}

const std::string kTc = "attnc 0.1.0; nvrtc 13.0";

Measurement meas(const std::string &config, double ms, int repeats = 10) {
  Measurement m;
  m.config = config;
  m.medianMs = ms;
  m.spread = ms / 100;
  m.repeats = repeats;
  return m;
}

TuningDb openOk(const std::string &path) {
  Expected<TuningDb> db = TuningDb::open(path);
  EXPECT_TRUE(db.ok()) << db.error();
  return db ? std::move(db).take() : TuningDb();
}

void tick() { std::this_thread::sleep_for(std::chrono::milliseconds(3)); }

using attnc::test::ScopedEnv;

} // namespace

TEST(TuningDb, MissingFileIsEmpty) {
  Scratch s;
  TuningDb db = openOk(s.path("nope/tuning.json"));
  EXPECT_TRUE(db.empty());
  EXPECT_EQ(db.find(gpu(), kernel(), kTc), nullptr);
  // The first save creates the directory and the file.
  ASSERT_TRUE(db.recordMeasurement(gpu(), kernel(), kTc, meas("bq=64", 1)).ok());
  Status st = db.save();
  ASSERT_TRUE(st.ok()) << st.error();
  EXPECT_EQ(openOk(s.path("nope/tuning.json")).size(), 1u);
}

TEST(TuningDb, RoundTrip) {
  Scratch s;
  std::string path = s.path("tuning.json");
  {
    TuningDb db = openOk(path);
    ASSERT_TRUE(db.recordMeasurement(gpu(), kernel(), kTc, meas("bq=64,w=4", 0.5)).ok());
    Measurement f = meas("bq=256,w=4", 0);
    f.error = "needs 300 KiB of shared memory";
    ASSERT_TRUE(db.recordMeasurement(gpu(), kernel(), kTc, f).ok());
    Measurement nan = meas("bq=32,w=2", std::nan(""));
    ASSERT_TRUE(db.recordMeasurement(gpu(), kernel(), kTc, nan).ok());
    EXPECT_TRUE(db.choose(gpu(), kernel(), kTc, "w=4, bq=64", 0.5, 0.01));
    EXPECT_TRUE(db.choose(cpu(), kernel("n1024-bh1"), "attnc 0.1.0; g++ 14", "bq=16", 3.25, 0.5));
    Status st = db.save();
    ASSERT_TRUE(st.ok()) << st.error();
  }
  TuningDb db = openOk(path);
  EXPECT_EQ(db.size(), 2u);
  const Entry *e = db.find(gpu(), kernel(), kTc);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->config, "bq=64,w=4");
  EXPECT_DOUBLE_EQ(e->medianMs, 0.5);
  EXPECT_DOUBLE_EQ(e->spread, 0.01);
  EXPECT_FALSE(e->pinned);
  EXPECT_FALSE(e->updated.empty());
  EXPECT_EQ(e->device.id(), gpu().id());
  EXPECT_EQ(e->device.memoryBytes, gpu().memoryBytes);
  ASSERT_EQ(e->measured.size(), 3u);
  const Measurement *m = db.measured(gpu(), kernel(), kTc, "bq=256,w=4");
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(m->failed());
  EXPECT_EQ(m->error, "needs 300 KiB of shared memory");
  m = db.measured(gpu(), kernel(), kTc, "bq=32,w=2");
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(std::isnan(m->medianMs));
  m = db.measured(gpu(), kernel(), kTc, "bq=64,w=4");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->repeats, 10);
  EXPECT_FALSE(m->at.empty());
  const Entry *c = db.find(cpu(), kernel("n1024-bh1"), "attnc 0.1.0; g++ 14");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->device.isa, "avx2");
  EXPECT_EQ(c->device.logicalCpus, 8);
  // The file is the documented schema.
  std::string text = s.read("tuning.json");
  EXPECT_NE(text.find("\"format_version\": 1"), std::string::npos);
  EXPECT_NE(text.find("\"shape_bucket\": \"n4096-bh16\""), std::string::npos);
}

TEST(TuningDb, CorruptFileIsAnErrorNamingIt) {
  Scratch s;
  std::string path = s.write("tuning.json", "{\"format_version\": 1, \"entries\": [");
  Expected<TuningDb> db = TuningDb::open(path);
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.error().find(path), std::string::npos) << db.error();
  EXPECT_NE(db.error().find("not valid JSON"), std::string::npos) << db.error();

  path = s.write("notdb.json", "[1, 2]");
  db = TuningDb::open(path);
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.error().find(path), std::string::npos) << db.error();

  path = s.write("badentry.json",
                 R"({"format_version": 1, "entries": [{"toolchain": "x",
                     "kernel": {"signature": "s", "shape_bucket": "b"}}]})");
  db = TuningDb::open(path);
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.error().find(path), std::string::npos) << db.error();
  EXPECT_NE(db.error().find("entry 0"), std::string::npos) << db.error();
  EXPECT_NE(db.error().find("'device' is missing"), std::string::npos) << db.error();

  path = s.write("badtype.json",
                 R"({"format_version": 1, "entries": [{"toolchain": "x",
                     "device": {"kind": "cuda", "name": "g", "sm_count": "many"},
                     "kernel": {"signature": "s", "shape_bucket": "b"}}]})");
  db = TuningDb::open(path);
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.error().find("sm_count"), std::string::npos) << db.error();
}

TEST(TuningDb, WrongVersionIsAnErrorNamingIt) {
  Scratch s;
  std::string path = s.write("tuning.json", R"({"format_version": 2, "entries": []})");
  Expected<TuningDb> db = TuningDb::open(path);
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.error().find(path), std::string::npos) << db.error();
  EXPECT_NE(db.error().find("format_version 2"), std::string::npos) << db.error();

  path = s.write("noversion.json", R"({"entries": []})");
  db = TuningDb::open(path);
  ASSERT_FALSE(db.ok());
  EXPECT_NE(db.error().find(path), std::string::npos) << db.error();
  EXPECT_NE(db.error().find("format_version"), std::string::npos) << db.error();
}

TEST(TuningDb, SaveDoesNotOverwriteAFileItCannotRead) {
  Scratch s;
  std::string path = s.path("tuning.json");
  TuningDb db = openOk(path);
  db.choose(gpu(), kernel(), kTc, "bq=64", 1, 0);
  // Another (newer) attnc writes format 2 meanwhile.
  const std::string newer = R"({"format_version": 2, "entries": []})";
  s.write("tuning.json", newer);
  Status st = db.save();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().find(path), std::string::npos) << st.error();
  EXPECT_EQ(s.read("tuning.json"), newer);
}

TEST(TuningDb, ToolchainMismatchIsAMiss) {
  TuningDb db;
  ASSERT_TRUE(db.recordMeasurement(gpu(), kernel(), kTc, meas("bq=64", 1)).ok());
  db.choose(gpu(), kernel(), kTc, "bq=64", 1, 0);
  EXPECT_NE(db.find(gpu(), kernel(), kTc), nullptr);
  EXPECT_EQ(db.find(gpu(), kernel(), "attnc 0.2.0; nvrtc 13.0"), nullptr);
  EXPECT_EQ(db.measured(gpu(), kernel(), "attnc 0.2.0; nvrtc 13.0", "bq=64"), nullptr);
  // Other device, other bucket: misses too.
  DeviceKey other = gpu();
  other.smCount = 78;
  EXPECT_EQ(db.find(other, kernel(), kTc), nullptr);
  EXPECT_EQ(db.find(gpu(), kernel("n8192-bh16"), kTc), nullptr);
  // Measured but not chosen: entry() has it, find() does not.
  TuningDb db2;
  ASSERT_TRUE(db2.recordMeasurement(gpu(), kernel(), kTc, meas("bq=64", 1)).ok());
  EXPECT_EQ(db2.find(gpu(), kernel(), kTc), nullptr);
  EXPECT_NE(db2.entry(gpu(), kernel(), kTc), nullptr);
}

TEST(TuningDb, MeasurementsSurviveAnInterruption) {
  Scratch s;
  std::string path = s.path("tuning.json");
  const std::vector<std::string> space = {"bq=64,w=4", "bq=128,w=4", "bq=64,w=8", "bq=128,w=8",
                                          "bq=32,w=4"};
  {
    TuningDb db = openOk(path);
    db.setAutosave(std::chrono::milliseconds(0)); // save after every measurement
    for (size_t i = 0; i < 3; ++i) {
      Status st = db.recordMeasurement(gpu(), kernel(), kTc, meas(space[i], 1.0 + i));
      ASSERT_TRUE(st.ok()) << st.error();
    }
    // "Killed" here: no final save(), no choose().
  }
  TuningDb db = openOk(path);
  ASSERT_NE(db.entry(gpu(), kernel(), kTc), nullptr);
  EXPECT_EQ(db.entry(gpu(), kernel(), kTc)->measured.size(), 3u);
  // The resumed run measures only what is missing.
  std::vector<std::string> timed;
  for (const std::string &c : space) {
    if (db.measured(gpu(), kernel(), kTc, c))
      continue;
    timed.push_back(c);
    ASSERT_TRUE(db.recordMeasurement(gpu(), kernel(), kTc, meas(c, 0.5)).ok());
  }
  EXPECT_EQ(timed, (std::vector<std::string>{"bq=128,w=8", "bq=32,w=4"}));
  db.choose(gpu(), kernel(), kTc, "bq=32,w=4", 0.5, 0.005);
  ASSERT_TRUE(db.save().ok());
  TuningDb again = openOk(path);
  ASSERT_NE(again.find(gpu(), kernel(), kTc), nullptr);
  EXPECT_EQ(again.find(gpu(), kernel(), kTc)->measured.size(), 5u);
}

TEST(TuningDb, AutosaveInterval) {
  Scratch s;
  std::string path = s.path("tuning.json");
  TuningDb db = openOk(path);
  db.setAutosave(std::chrono::hours(1));
  ASSERT_TRUE(db.recordMeasurement(gpu(), kernel(), kTc, meas("bq=64", 1)).ok());
  EXPECT_TRUE(openOk(path).empty()); // not due yet
  db.setAutosave(std::nullopt);
  ASSERT_TRUE(db.recordMeasurement(gpu(), kernel(), kTc, meas("bq=32", 1)).ok());
  EXPECT_TRUE(openOk(path).empty());
}

TEST(TuningDb, ChangedSearchSpaceReusesMeasurements) {
  TuningDb db;
  for (const char *c : {"bq=64,w=4", "bq=128,w=4", "bq=128,w=8"})
    ASSERT_TRUE(db.recordMeasurement(gpu(), kernel(), kTc, meas(c, 1)).ok());
  // The new space lists parameters in another order and spelling and adds
  // configs; the overlap is reused.
  std::vector<std::string> reused, fresh;
  for (const char *c : {" w=4 , bq=64", "w=8,bq=128", "bq=256,w=8", "bq=64,w=2"})
    (db.measured(gpu(), kernel(), kTc, c) ? reused : fresh).push_back(c);
  EXPECT_EQ(reused.size(), 2u);
  EXPECT_EQ(fresh, (std::vector<std::string>{"bq=256,w=8", "bq=64,w=2"}));
  EXPECT_EQ(canonicalConfig(" w=4 , bq=64,,s=2 "), "bq=64,s=2,w=4");
  // Re-measuring a config replaces its measurement.
  ASSERT_TRUE(db.recordMeasurement(gpu(), kernel(), kTc, meas("w=4,bq=64", 0.25)).ok());
  EXPECT_EQ(db.entry(gpu(), kernel(), kTc)->measured.size(), 3u);
  EXPECT_DOUBLE_EQ(db.measured(gpu(), kernel(), kTc, "bq=64,w=4")->medianMs, 0.25);
}

TEST(TuningDb, TwoProcessesSavingDifferentKeysBothSurvive) {
  Scratch s;
  std::string path = s.path("tuning.json");
  TuningDb a = openOk(path), b = openOk(path);
  ASSERT_TRUE(a.recordMeasurement(gpu(), kernel("n1024-bh16"), kTc, meas("bq=64", 1)).ok());
  a.choose(gpu(), kernel("n1024-bh16"), kTc, "bq=64", 1, 0);
  ASSERT_TRUE(b.recordMeasurement(gpu(), kernel("n8192-bh16"), kTc, meas("bq=128", 2)).ok());
  b.choose(gpu(), kernel("n8192-bh16"), kTc, "bq=128", 2, 0);
  // Both touch a shared key with different measurements.
  ASSERT_TRUE(a.recordMeasurement(cpu(), kernel(), kTc, meas("bq=16", 3)).ok());
  ASSERT_TRUE(b.recordMeasurement(cpu(), kernel(), kTc, meas("bq=32", 4)).ok());
  ASSERT_TRUE(a.save().ok());
  ASSERT_TRUE(b.save().ok());
  ASSERT_TRUE(a.save().ok()); // again, after b: still nothing lost
  TuningDb db = openOk(path);
  EXPECT_EQ(db.size(), 3u);
  ASSERT_NE(db.find(gpu(), kernel("n1024-bh16"), kTc), nullptr);
  ASSERT_NE(db.find(gpu(), kernel("n8192-bh16"), kTc), nullptr);
  EXPECT_EQ(db.find(gpu(), kernel("n8192-bh16"), kTc)->config, "bq=128");
  EXPECT_NE(db.measured(cpu(), kernel(), kTc, "bq=16"), nullptr);
  EXPECT_NE(db.measured(cpu(), kernel(), kTc, "bq=32"), nullptr);
}

TEST(TuningDb, MergeNewestChoiceWinsAndStaleCopiesDoNotRevert) {
  Scratch s;
  std::string path = s.path("tuning.json");
  TuningDb a = openOk(path), b = openOk(path), idle = openOk(path);
  a.choose(gpu(), kernel(), kTc, "bq=64", 1, 0);
  tick();
  b.choose(gpu(), kernel(), kTc, "bq=128", 0.9, 0);
  ASSERT_TRUE(b.save().ok());
  ASSERT_TRUE(a.save().ok()); // saved last, chosen first: b's newer choice stays
  EXPECT_EQ(openOk(path).find(gpu(), kernel(), kTc)->config, "bq=128");
  // A process that changed nothing does not write back its stale copy.
  ASSERT_TRUE(idle.save().ok());
  EXPECT_EQ(openOk(path).find(gpu(), kernel(), kTc)->config, "bq=128");
  TuningDb c = openOk(path);
  tick();
  b.choose(gpu(), kernel(), kTc, "bq=32", 0.8, 0);
  ASSERT_TRUE(b.save().ok());
  ASSERT_TRUE(c.save().ok()); // c's copy says bq=128 but c did not change it
  EXPECT_EQ(openOk(path).find(gpu(), kernel(), kTc)->config, "bq=32");
}

TEST(TuningDb, ExportImportPinned) {
  Scratch s;
  TuningDb a = openOk(s.path("a.json"));
  a.choose(gpu(), kernel(), kTc, "bq=64,w=4", 0.5, 0.01);
  a.choose(gpu(), kernel("n1024-bh16"), kTc, "bq=32,w=4", 0.2, 0.01);
  ASSERT_TRUE(a.recordMeasurement(gpu(), kernel(), kTc, meas("bq=64,w=4", 0.5)).ok());
  EXPECT_TRUE(a.pin(gpu(), kernel(), kTc));
  EXPECT_FALSE(a.pin(cpu(), kernel(), kTc)); // nothing chosen there
  Expected<std::string> pinnedOnly = a.exportPinned();
  ASSERT_TRUE(pinnedOnly.ok()) << pinnedOnly.error();
  EXPECT_NE(pinnedOnly->find("bq=64,w=4"), std::string::npos);
  EXPECT_EQ(pinnedOnly->find("bq=32,w=4"), std::string::npos);
  EXPECT_NE(pinnedOnly->find("\"measured\": []"), std::string::npos);
  Expected<std::string> all = a.exportPinned(/*allChosen=*/true);
  ASSERT_TRUE(all.ok());
  EXPECT_NE(all->find("bq=32,w=4"), std::string::npos);

  // Machine B measured its own choice for the same key; the import wins.
  std::string pathB = s.path("b.json");
  TuningDb b = openOk(pathB);
  ASSERT_TRUE(b.recordMeasurement(gpu(), kernel(), kTc, meas("bq=128,w=8", 0.45)).ok());
  b.choose(gpu(), kernel(), kTc, "bq=128,w=8", 0.45, 0.01);
  ASSERT_TRUE(b.save().ok());
  TuningDb tuner = openOk(pathB); // a tuning run that started before the import
  Expected<size_t> n = b.importPinned(*all, "team.json");
  ASSERT_TRUE(n.ok()) << n.error();
  EXPECT_EQ(*n, 2u);
  const Entry *e = b.find(gpu(), kernel(), kTc);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->config, "bq=64,w=4");
  EXPECT_TRUE(e->pinned);
  EXPECT_EQ(e->measured.size(), 1u); // B's own measurements are kept
  // A tuning run does not replace a pin ...
  EXPECT_FALSE(b.choose(gpu(), kernel(), kTc, "bq=128,w=8", 0.4, 0.01));
  ASSERT_TRUE(b.save().ok());
  // ... nor does one that chose before it knew of the pin, saving later.
  tick();
  tuner.choose(gpu(), kernel(), kTc, "bq=128,w=8", 0.4, 0.01);
  ASSERT_TRUE(tuner.save().ok());
  TuningDb reopened = openOk(pathB);
  e = reopened.find(gpu(), kernel(), kTc);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->config, "bq=64,w=4");
  EXPECT_TRUE(e->pinned);
  // Explicit unpin does, and survives the merge.
  EXPECT_TRUE(reopened.unpin(gpu(), kernel(), kTc));
  ASSERT_TRUE(reopened.save().ok());
  EXPECT_FALSE(openOk(pathB).find(gpu(), kernel(), kTc)->pinned);
  // Pinned entries hit only on the same toolchain.
  EXPECT_EQ(reopened.find(gpu(), kernel("n1024-bh16"), "attnc 9; nvrtc 99"), nullptr);
}

TEST(TuningDb, ImportErrorsImportNothing) {
  TuningDb db;
  Expected<size_t> n = db.importPinned("{oops", "team.json");
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.error().find("team.json"), std::string::npos) << n.error();
  n = db.importPinned(R"({"format_version": 7, "entries": []})", "team.json");
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.error().find("format_version 7"), std::string::npos) << n.error();
  // One good entry and one without a config: all or nothing.
  TuningDb src;
  src.choose(gpu(), kernel(), kTc, "bq=64", 1, 0);
  src.pin(gpu(), kernel(), kTc);
  std::string doc = *src.exportPinned();
  size_t at = doc.find("\"entries\": [");
  ASSERT_NE(at, std::string::npos);
  doc.insert(at + 12, R"({"device": {"kind": "cpu", "name": "x"}, "toolchain": "t",
    "kernel": {"signature": "s", "shape_bucket": "b"}, "config": ""},)");
  n = db.importPinned(doc, "team.json");
  ASSERT_FALSE(n.ok());
  EXPECT_NE(n.error().find("has no config"), std::string::npos) << n.error();
  EXPECT_TRUE(db.empty());
}

TEST(TuningDb, ShowListsEntries) {
  TuningDb db;
  EXPECT_NE(db.show().find("0 entries"), std::string::npos);
  db.choose(gpu(), kernel(), kTc, "bq=64,w=4", 0.41234, 0.006);
  db.pin(gpu(), kernel(), kTc);
  Measurement f = meas("bq=256", 0);
  f.error = "too much shared memory";
  ASSERT_TRUE(db.recordMeasurement(cpu(), kernel("n512-bh1"), kTc, f).ok());
  std::string t = db.show();
  EXPECT_NE(t.find("2 entries"), std::string::npos) << t;
  EXPECT_NE(t.find("DEVICE"), std::string::npos) << t;
  EXPECT_NE(t.find("cuda:NVIDIA H200:sm_90:132sm:143771MiB"), std::string::npos) << t;
  EXPECT_NE(t.find("fwd f32 d64 causal pad mod=ab12"), std::string::npos) << t;
  EXPECT_NE(t.find("bq=64,w=4"), std::string::npos) << t;
  EXPECT_NE(t.find("0.4123"), std::string::npos) << t;
  EXPECT_NE(t.find("yes"), std::string::npos) << t;
  EXPECT_NE(t.find("1 (1 failed)"), std::string::npos) << t;
  EXPECT_NE(db.find(gpu(), kernel(), kTc)->describe().find("pinned"), std::string::npos);
}

TEST(TuningDb, LayeredLookupPrefersTheProject) {
  Scratch s;
  std::string user = s.path("user.json"), project = TuningDb::projectPath(s.path(""));
  EXPECT_EQ(project, s.path("attnc-tuning.json"));
  {
    TuningDb u = openOk(user);
    u.choose(gpu(), kernel(), kTc, "bq=64", 1, 0);
    u.choose(gpu(), kernel("n1024-bh16"), kTc, "bq=32", 1, 0);
    ASSERT_TRUE(u.save().ok());
    TuningDb p = openOk(project);
    p.choose(gpu(), kernel(), kTc, "bq=128", 1, 0);
    ASSERT_TRUE(p.save().ok());
  }
  Expected<LayeredTuningDb> l = LayeredTuningDb::open(project, user);
  ASSERT_TRUE(l.ok()) << l.error();
  LayeredTuningDb::Hit h = l->find(gpu(), kernel(), kTc);
  ASSERT_TRUE(h);
  EXPECT_EQ(h.entry->config, "bq=128");
  EXPECT_EQ(h.db->path(), project);
  h = l->find(gpu(), kernel("n1024-bh16"), kTc);
  ASSERT_TRUE(h);
  EXPECT_EQ(h.entry->config, "bq=32");
  EXPECT_EQ(h.db->path(), user);
  EXPECT_FALSE(l->find(gpu(), kernel("n2048-bh16"), kTc));
  // No project layer at all.
  Expected<LayeredTuningDb> u = LayeredTuningDb::open("", user);
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->project(), nullptr);
  EXPECT_EQ(u->find(gpu(), kernel(), kTc).entry->config, "bq=64");
  // A broken layer is an error naming it.
  std::string broken = s.write("broken.json", "nope");
  Expected<LayeredTuningDb> bad = LayeredTuningDb::open(broken, user);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find(broken), std::string::npos);
}

TEST(TuningDb, DefaultPath) {
  ScopedEnv db("ATTNC_TUNING_DB", "/x/tune.json"), cache("ATTNC_CACHE_DIR", "/c"),
      xdg("XDG_CACHE_HOME", "/xdg"), home("HOME", "/home/u");
  EXPECT_EQ(TuningDb::defaultPath(), "/x/tune.json");
  ::unsetenv("ATTNC_TUNING_DB");
  EXPECT_EQ(TuningDb::defaultPath(), "/c/tuning.json");
  ::unsetenv("ATTNC_CACHE_DIR");
  EXPECT_EQ(TuningDb::defaultPath(), "/xdg/attnc/tuning.json");
  ::setenv("XDG_CACHE_HOME", "", 1);
  EXPECT_EQ(TuningDb::defaultPath(), "/home/u/.cache/attnc/tuning.json");
  ::unsetenv("HOME");
  EXPECT_EQ(TuningDb::defaultPath(), "");
  EXPECT_FALSE(TuningDb::open("").ok());
}

TEST(TuningDb, CpuDeviceOfThisMachine) {
  DeviceKey d = cpuDevice();
  EXPECT_EQ(d.kind, "cpu");
  EXPECT_FALSE(d.name.empty());
  EXPECT_GT(d.logicalCpus, 0);
  EXPECT_EQ(d.id().rfind("cpu:", 0), 0u) << d.id();
#if defined(__x86_64__)
  EXPECT_FALSE(d.isa.empty());
#endif
}

TEST(TuningDb, CpuDeviceFromCpuinfo) {
  DeviceKey x = cpuDeviceFromCpuinfo("processor\t: 0\nmodel name\t: Intel(R)  Xeon(R)   Gold\n"
                                     "flags\t\t: fpu sse2 sse4_2 avx avx2 fma\n"
                                     "processor\t: 1\nmodel name\t: Intel(R)  Xeon(R)   Gold\n",
                                     0);
  EXPECT_EQ(x.name, "Intel(R) Xeon(R) Gold");
  EXPECT_EQ(x.isa, "avx2");
  EXPECT_EQ(x.logicalCpus, 2);
  EXPECT_EQ(x.id(), "cpu:Intel(R) Xeon(R) Gold:avx2:2cpus");
  DeviceKey z = cpuDeviceFromCpuinfo("model name: Z\nflags: sse2 avx512f avx2\n", 96);
  EXPECT_EQ(z.isa, "avx512f");
  EXPECT_EQ(z.logicalCpus, 96);
  DeviceKey arm = cpuDeviceFromCpuinfo("processor\t: 0\nFeatures\t: fp asimd sve\n"
                                       "CPU part\t: 0xd4f\n",
                                       4);
  EXPECT_EQ(arm.name, "arm cpu part 0xd4f");
  EXPECT_EQ(arm.isa, "sve");
  EXPECT_EQ(cpuDeviceFromCpuinfo("", 0).name, "unknown cpu");
}

TEST(TuningDb, CudaDevice) {
  cuda::DeviceInfo info;
  info.name = "NVIDIA H200";
  info.ccMajor = 9;
  info.ccMinor = 0;
  info.smCount = 132;
  info.totalMemoryBytes = size_t(150754820096ull);
  DeviceKey d = cudaDevice(info);
  EXPECT_EQ(d.kind, "cuda");
  EXPECT_EQ(d.memoryBytes, int64_t(150754820096ll));
  EXPECT_EQ(d.id(), "cuda:NVIDIA H200:sm_90:132sm:143771MiB");
}

TEST(TuningDb, ShapeBucket) {
  EXPECT_EQ(shapeBucket(3000, 12), "n4096-bh16");
  EXPECT_EQ(shapeBucket(4096, 1), "n4096-bh1");
  EXPECT_EQ(shapeBucket(4097, 32), "n8192-bh32");
  EXPECT_EQ(shapeBucket(1, 33), "n1-bh64");
  EXPECT_EQ(shapeBucket(0, 0), "n1-bh1");
  EXPECT_EQ(shapeBucket(-5, 3), "n1-bh4");
  EXPECT_EQ(shapeBucket(int64_t(1) << 62, 1), "n4611686018427387904-bh1");
  EXPECT_EQ(shapeBucket((int64_t(1) << 62) + 1, 1), "n4611686018427387904-bh1");
}

TEST(TuningDb, ToolchainId) {
  EXPECT_EQ(toolchainId("nvrtc  13.0"), std::string("attnc ") + attncVersion() + "; nvrtc 13.0");
  EXPECT_EQ(toolchainId(""), std::string("attnc ") + attncVersion());
}

TEST(TuningDb, ConcurrentProcessesLoseNothing) {
  // Real processes saving at the same time: the lock around read-merge-write
  // keeps every key.
  Scratch s;
  std::string path = s.path("tuning.json");
  const int kProcs = 4, kKeys = 5;
  std::vector<pid_t> kids;
  for (int p = 0; p < kProcs; ++p) {
    pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      Expected<TuningDb> db = TuningDb::open(path);
      if (!db)
        ::_exit(2);
      db->setAutosave(std::chrono::milliseconds(0));
      for (int k = 0; k < kKeys; ++k) {
        KernelKey kk = kernel("n" + std::to_string(1 << k) + "-bh" + std::to_string(p));
        if (!db->recordMeasurement(gpu(), kk, kTc, meas("bq=64", 1)).ok())
          ::_exit(3);
      }
      ::_exit(0);
    }
    kids.push_back(pid);
  }
  for (pid_t pid : kids) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
  EXPECT_EQ(openOk(path).size(), size_t(kProcs * kKeys));
}
