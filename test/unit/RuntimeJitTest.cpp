//===- RuntimeJitTest.cpp - SHA-256, kernel cache, NVRTC, host JIT, driver ===//
//
// Runs without a GPU: NVRTC compiles CUBINs here (it cannot run them), the
// host compiler builds and loads shared objects, and the CUDA driver loader
// must report a missing driver cleanly. Where a driver and a GPU are present
// the launch tests run as well. Every cache lives in a scratch directory in
// the build tree, never in the user's real cache.
//
//===----------------------------------------------------------------------===//
#include "runtime/CpuInfo.h"
#include "runtime/CudaDriver.h"
#include "runtime/Error.h"
#include "runtime/FileSystem.h"
#include "runtime/HostCompiler.h"
#include "runtime/KernelCache.h"
#include "runtime/NvrtcCompiler.h"
#include "runtime/NvrtcLibraries.h"
#include "runtime/Sha256.h"
#include "runtime/Subprocess.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace attnc;
using namespace std::string_literals;
namespace sfs = std::filesystem;

#ifndef ATTNC_TEST_SCRATCH_DIR
#define ATTNC_TEST_SCRATCH_DIR "/tmp/attnc-runtime-jit-scratch"
#endif

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// A fresh directory under the build tree's scratch space, removed after the
/// test.
fs::TempDir scratch() {
  std::string root = ATTNC_TEST_SCRATCH_DIR;
  EXPECT_TRUE(fs::createDirectories(root).ok());
  Expected<fs::TempDir> d = fs::TempDir::create("t-", root);
  EXPECT_TRUE(d.ok()) << d.error();
  return std::move(d).take();
}

/// A KernelCache whose warnings are collected instead of printed.
struct TestCache {
  explicit TestCache(const std::string &dir)
      : cache(dir, [this](const std::string &m) { warnings.push_back(m); }) {}
  std::vector<std::string> warnings;
  KernelCache cache;
};

/// Names in `dir` (not recursive).
std::vector<std::string> listDir(const std::string &dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto &e : sfs::directory_iterator(dir, ec))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

bool hasTempFiles(const std::string &dir) {
  for (const std::string &n : listDir(dir))
    if (n.rfind(".tmp-", 0) == 0)
      return true;
  return false;
}

std::string readAll(const std::string &path) {
  Expected<std::string> b = fs::readFile(path);
  EXPECT_TRUE(b.ok()) << b.error();
  return b ? *b : std::string();
}

void writeRaw(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

bool contains(const std::string &haystack, const std::string &needle) {
  return haystack.find(needle) != std::string::npos;
}

/// Sets an environment variable for one scope.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name_(name) {
    if (const char *old = std::getenv(name))
      old_ = old;
    had_ = std::getenv(name) != nullptr;
    if (value)
      ::setenv(name, value, 1);
    else
      ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (had_)
      ::setenv(name_.c_str(), old_.c_str(), 1);
    else
      ::unsetenv(name_.c_str());
  }

private:
  std::string name_, old_;
  bool had_ = false;
};

//===----------------------------------------------------------------------===//
// Result type
//===----------------------------------------------------------------------===//

TEST(JitExpected, ValueErrorAndStatus) {
  Expected<int> v = 42;
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 42);
  EXPECT_EQ(v.error(), "");
  Expected<int> e = makeError("nope");
  EXPECT_FALSE(e);
  EXPECT_EQ(e.error(), "nope");
  Expected<std::string> passed = e.takeError();
  EXPECT_EQ(passed.error(), "nope");
  Status ok;
  EXPECT_TRUE(ok);
  Status bad = makeError("broken");
  EXPECT_FALSE(bad);
  EXPECT_EQ(bad.error(), "broken");
  Expected<std::unique_ptr<int>> moveOnly = std::make_unique<int>(7);
  std::unique_ptr<int> p = std::move(moveOnly).take();
  EXPECT_EQ(*p, 7);
}

//===----------------------------------------------------------------------===//
// SHA-256 (FIPS 180-4 / NIST CAVP vectors)
//===----------------------------------------------------------------------===//

TEST(Sha256, EmptyMessage) {
  EXPECT_EQ(Sha256::hexHash(""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(Sha256, Abc) {
  EXPECT_EQ(Sha256::hexHash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, TwoBlockMessage) {
  EXPECT_EQ(Sha256::hexHash("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, Message896Bits) {
  EXPECT_EQ(Sha256::hexHash("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmn"
                            "hijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
}

TEST(Sha256, MillionAsInOddChunks) {
  Sha256 h;
  std::string chunk(997, 'a');
  size_t left = 1000000;
  while (left) {
    size_t n = std::min(left, chunk.size());
    h.update(chunk.data(), n);
    left -= n;
  }
  EXPECT_EQ(Sha256::hex(h.finish()),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, IncrementalEqualsOneShotAtEverySplit) {
  std::string msg;
  for (int i = 0; i < 200; ++i)
    msg.push_back(char(i * 7 + 3));
  for (size_t len : {0u, 1u, 55u, 56u, 63u, 64u, 65u, 119u, 120u, 128u, 200u}) {
    std::string m = msg.substr(0, len);
    Sha256::Digest whole = Sha256::hash(m);
    for (size_t split = 0; split <= len; split += 13) {
      Sha256 h;
      h.update(m.substr(0, split)).update(m.substr(split));
      EXPECT_EQ(h.finish(), whole) << "len " << len << " split " << split;
    }
  }
}

TEST(Sha256, FinishResets) {
  Sha256 h;
  h.update("garbage");
  (void)h.finish();
  h.update("abc");
  EXPECT_EQ(Sha256::hex(h.finish()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

//===----------------------------------------------------------------------===//
// Kernel cache
//===----------------------------------------------------------------------===//

CacheKey sampleKey(const std::string &source = "kernel source", const std::string &arch = "sm_80") {
  CacheKey k("cubin");
  k.add("compiler", "nvrtc 13.0").add("arch", arch).addSortedList("options", {"-O3", "-DX=1"});
  k.add("source", source);
  return k;
}

TEST(KernelCache, DefaultDirectoryFollowsEnvironment) {
  {
    ScopedEnv a("ATTNC_CACHE_DIR", "/some/where");
    ScopedEnv x("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(KernelCache::defaultDirectory(), "/some/where");
  }
  {
    ScopedEnv a("ATTNC_CACHE_DIR", nullptr);
    ScopedEnv x("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(KernelCache::defaultDirectory(), "/xdg/attnc");
  }
  {
    ScopedEnv a("ATTNC_CACHE_DIR", "");
    ScopedEnv x("XDG_CACHE_HOME", nullptr);
    ScopedEnv h("HOME", "/home/u");
    EXPECT_EQ(KernelCache::defaultDirectory(), "/home/u/.cache/attnc");
  }
  {
    ScopedEnv a("ATTNC_CACHE_DIR", nullptr);
    ScopedEnv x("XDG_CACHE_HOME", nullptr);
    ScopedEnv h("HOME", nullptr);
    EXPECT_EQ(KernelCache::defaultDirectory(), "");
  }
}

TEST(KernelCache, MissStoreHitAndDirectoryCreatedOnDemand) {
  fs::TempDir tmp = scratch();
  std::string dir = tmp.path() + "/not/yet/there";
  TestCache t(dir);
  CacheKey key = sampleKey();
  EXPECT_FALSE(t.cache.lookup(key).has_value());
  EXPECT_FALSE(sfs::exists(dir)); // Lookups never create anything.
  t.cache.store(key, "payload bytes\0with nul"s);
  ASSERT_TRUE(sfs::exists(t.cache.entryPath(key)));
  std::optional<std::string> got = t.cache.lookup(key);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, "payload bytes\0with nul"s);
  KernelCache::Stats s = t.cache.stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.hits, 1u);
  EXPECT_EQ(s.stores, 1u);
  EXPECT_TRUE(t.warnings.empty());
  // The file name is the key's hex digest plus the kind.
  EXPECT_EQ(sfs::path(t.cache.entryPath(key)).filename().string(), key.hex() + ".cubin");
}

TEST(KernelCache, KeyIsSensitiveToEveryInput) {
  std::string base = sampleKey().hex();
  EXPECT_EQ(sampleKey().hex(), base);
  EXPECT_NE(sampleKey("kernel source ").hex(), base);
  EXPECT_NE(sampleKey("kernel source", "sm_90").hex(), base);
  EXPECT_NE(CacheKey("so").add("compiler", "nvrtc 13.0").hex(),
            CacheKey("cubin").add("compiler", "nvrtc 13.0").hex());
  EXPECT_NE(CacheKey("cubin").add("compiler", "nvrtc 13.0").hex(),
            CacheKey("cubin").add("compiler", "nvrtc 13.1").hex());
  // Field boundaries are part of the key: ("ab","c") is not ("a","bc").
  EXPECT_NE(CacheKey("k").add("ab", "c").hex(), CacheKey("k").add("a", "bc").hex());
  EXPECT_NE(CacheKey("k").addList("o", {"a", "b"}).hex(), CacheKey("k").addList("o", {"ab"}).hex());
  // Sorted lists ignore order; ordered lists do not.
  EXPECT_EQ(CacheKey("k").addSortedList("o", {"-DA", "-DB"}).hex(),
            CacheKey("k").addSortedList("o", {"-DB", "-DA"}).hex());
  EXPECT_NE(CacheKey("k").addList("i", {"a", "b"}).hex(),
            CacheKey("k").addList("i", {"b", "a"}).hex());
  EXPECT_NE(CacheKey("k").addSortedList("o", {"-DA"}).hex(),
            CacheKey("k").addSortedList("o", {"-DA", "-DB"}).hex());
}

TEST(KernelCache, DirectoryTreeContentsAreInTheKey) {
  fs::TempDir tmp = scratch();
  std::string inc = tmp.path() + "/include";
  ASSERT_TRUE(fs::createDirectories(inc + "/attnc").ok());
  writeRaw(inc + "/attnc/tile.cuh", "template <int N> struct Tile {};\n");
  writeRaw(inc + "/attnc/notes.txt", "not a header");
  auto key = [&] { return CacheKey("k").addDirectoryTree("inc", inc).hex(); };
  std::string before = key();
  EXPECT_EQ(key(), before);
  writeRaw(inc + "/attnc/notes.txt", "edited, but never #included");
  EXPECT_EQ(key(), before);
  writeRaw(inc + "/attnc/tile.cuh", "template <int N> struct Tile { int n; };\n");
  std::string edited = key();
  EXPECT_NE(edited, before);
  writeRaw(inc + "/attnc/extra.h", "");
  EXPECT_NE(key(), edited);
  // A nested build tree is not scanned.
  ASSERT_TRUE(fs::createDirectories(inc + "/build").ok());
  std::string withBuild = key();
  writeRaw(inc + "/build/CMakeCache.txt", "");
  writeRaw(inc + "/build/generated.h", "int x;");
  EXPECT_EQ(key(), withBuild);
  EXPECT_NE(CacheKey("k").addDirectoryTree("inc", inc + "/missing").hex(), withBuild);
}

/// Stores one entry and returns its path, for the corruption tests.
std::string storeSample(TestCache &t, const CacheKey &key,
                        const std::string &payload = std::string(300, 'p')) {
  t.cache.store(key, payload);
  std::string path = t.cache.entryPath(key);
  EXPECT_TRUE(sfs::exists(path));
  return path;
}

/// The entry at `path` must be rejected: a miss, one warning naming the
/// file and `why`, and the file deleted.
void expectRejected(TestCache &t, const CacheKey &key, const std::string &path,
                    const std::string &why) {
  t.warnings.clear();
  EXPECT_FALSE(t.cache.lookup(key).has_value());
  ASSERT_EQ(t.warnings.size(), 1u);
  EXPECT_TRUE(contains(t.warnings[0], path)) << t.warnings[0];
  EXPECT_TRUE(contains(t.warnings[0], why)) << t.warnings[0];
  EXPECT_FALSE(sfs::exists(path));
  EXPECT_TRUE(t.cache.enabled()); // A bad entry does not disable the cache.
  // The next store repairs it.
  t.cache.store(key, "fresh");
  std::optional<std::string> again = t.cache.lookup(key);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(*again, "fresh");
}

TEST(KernelCache, TruncatedEntryIsDetectedDeletedAndReplaced) {
  fs::TempDir tmp = scratch();
  TestCache t(tmp.path());
  CacheKey key = sampleKey();
  std::string path = storeSample(t, key);
  std::string bytes = readAll(path);
  writeRaw(path, bytes.substr(0, bytes.size() - 1));
  expectRejected(t, key, path, "truncated");
  // Cut inside the header too.
  path = storeSample(t, key);
  writeRaw(path, readAll(path).substr(0, 20));
  expectRejected(t, key, path, "truncated");
  // Empty file.
  path = storeSample(t, key);
  writeRaw(path, "");
  expectRejected(t, key, path, "truncated");
  EXPECT_EQ(t.cache.stats().corrupt, 3u);
}

TEST(KernelCache, FlippedByteIsDetected) {
  fs::TempDir tmp = scratch();
  TestCache t(tmp.path());
  CacheKey key = sampleKey();
  // In the payload: checksum mismatch.
  std::string path = storeSample(t, key);
  std::string bytes = readAll(path);
  bytes[KernelCache::kHeaderBytes + 100] ^= 0x01;
  writeRaw(path, bytes);
  expectRejected(t, key, path, "checksum");
  // In the stored checksum itself.
  path = storeSample(t, key);
  bytes = readAll(path);
  bytes[30] ^= 0x80;
  writeRaw(path, bytes);
  expectRejected(t, key, path, "checksum");
  // In the length field.
  path = storeSample(t, key);
  bytes = readAll(path);
  bytes[16] ^= 0x04;
  writeRaw(path, bytes);
  expectRejected(t, key, path, "payload bytes");
  // Trailing garbage.
  path = storeSample(t, key);
  writeRaw(path, readAll(path) + "x");
  expectRejected(t, key, path, "trailing");
}

TEST(KernelCache, WrongMagicVersionOrKeyIsDetected) {
  fs::TempDir tmp = scratch();
  TestCache t(tmp.path());
  CacheKey key = sampleKey();
  std::string path = storeSample(t, key);
  std::string bytes = readAll(path);
  bytes[0] = 'X';
  writeRaw(path, bytes);
  expectRejected(t, key, path, "bad magic");

  path = storeSample(t, key);
  bytes = readAll(path);
  bytes[8] = 99; // format version
  writeRaw(path, bytes);
  expectRejected(t, key, path, "format version 99");

  // A valid entry of another key copied under this key's name.
  CacheKey other = sampleKey("another kernel");
  std::string otherPath = storeSample(t, other);
  path = t.cache.entryPath(key);
  writeRaw(path, readAll(otherPath));
  expectRejected(t, key, path, "another key");
  EXPECT_TRUE(t.cache.lookup(other).has_value());

  // Something that is not a cache entry at all.
  writeRaw(path, "\x7f"
                 "ELF not ours, much longer than the header of an entry, "
                 "so the magic is what gives it away..............................");
  expectRejected(t, key, path, "bad magic");
}

TEST(KernelCache, EntryCodecRoundTrip) {
  CacheKey key = sampleKey();
  std::string payload = "abc\0def"s;
  std::string image = KernelCache::encodeEntry(key.digest(), payload);
  EXPECT_EQ(image.size(), KernelCache::kHeaderBytes + payload.size());
  EXPECT_EQ(image.substr(0, 8), "ATTNCKC\0"s);
  Expected<std::string> back = KernelCache::decodeEntry(key.digest(), image);
  ASSERT_TRUE(back.ok()) << back.error();
  EXPECT_EQ(*back, payload);
  EXPECT_FALSE(KernelCache::decodeEntry(sampleKey("x").digest(), image).ok());

  std::string packed = KernelCache::packBlobs({"cubin\0bytes"s, "", "log"});
  Expected<std::vector<std::string>> blobs = KernelCache::unpackBlobs(packed, 3);
  ASSERT_TRUE(blobs.ok());
  EXPECT_EQ((*blobs)[0], "cubin\0bytes"s);
  EXPECT_EQ((*blobs)[1], "");
  EXPECT_EQ((*blobs)[2], "log");
  EXPECT_FALSE(KernelCache::unpackBlobs(packed, 2).ok());
  EXPECT_FALSE(KernelCache::unpackBlobs(packed.substr(0, packed.size() - 1), 3).ok());
  EXPECT_FALSE(KernelCache::unpackBlobs(packed + "x", 3).ok());
}

TEST(KernelCache, AtomicWritesLeaveNoTemporaryFiles) {
  fs::TempDir tmp = scratch();
  TestCache t(tmp.path());
  for (int i = 0; i < 20; ++i)
    t.cache.store(sampleKey("k" + std::to_string(i)), std::string(1000 + i, 'z'));
  std::vector<std::string> names = listDir(tmp.path());
  EXPECT_EQ(names.size(), 20u);
  for (const std::string &n : names)
    EXPECT_EQ(n.size(), 64u + std::string(".cubin").size()) << n;
  EXPECT_FALSE(hasTempFiles(tmp.path()));
  // Entries are published readable by others (mkstemp creates 0600).
  struct stat st;
  ASSERT_EQ(::stat((tmp.path() + "/" + names[0]).c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

TEST(KernelCache, ConcurrentWritersAndReadersOfOneKey) {
  fs::TempDir tmp = scratch();
  CacheKey key = sampleKey();
  std::string payload(256 * 1024, 'q');
  for (size_t i = 0; i < payload.size(); i += 4096)
    payload[i] = char(i / 4096);
  std::atomic<int> badReads{0}, warnings{0}, hits{0};
  std::vector<std::thread> threads;
  // Separate KernelCache objects, like separate processes sharing a directory.
  for (int w = 0; w < 6; ++w)
    threads.emplace_back([&] {
      KernelCache c(tmp.path(), [&](const std::string &) { ++warnings; });
      for (int i = 0; i < 15; ++i) {
        c.store(key, payload);
        std::optional<std::string> got = c.lookup(key);
        if (got) {
          ++hits;
          if (*got != payload)
            ++badReads;
        }
      }
    });
  for (auto &th : threads)
    th.join();
  EXPECT_EQ(badReads.load(), 0);
  EXPECT_EQ(warnings.load(), 0);
  EXPECT_GT(hits.load(), 0);
  EXPECT_FALSE(hasTempFiles(tmp.path()));
  TestCache t(tmp.path());
  std::optional<std::string> got = t.cache.lookup(key);
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, payload);
}

TEST(KernelCache, UnusableDirectoryDegradesWithOneWarning) {
  fs::TempDir tmp = scratch();
  // A path below a regular file can never be created, even by root.
  writeRaw(tmp.path() + "/file", "x");
  TestCache t(tmp.path() + "/file/cache");
  CacheKey key = sampleKey();
  EXPECT_TRUE(t.cache.enabled());
  EXPECT_FALSE(t.cache.lookup(key).has_value());
  t.cache.store(key, "a");
  t.cache.store(key, "b");
  EXPECT_FALSE(t.cache.lookup(key).has_value());
  EXPECT_FALSE(t.cache.enabled());
  EXPECT_FALSE(t.cache.writable());
  ASSERT_EQ(t.warnings.size(), 1u);
  EXPECT_TRUE(contains(t.warnings[0], "kernel cache disabled")) << t.warnings[0];
  EXPECT_TRUE(contains(t.warnings[0], tmp.path() + "/file/cache")) << t.warnings[0];
}

TEST(KernelCache, ReadOnlyDirectoryStillServesHits) {
  if (::geteuid() == 0)
    GTEST_SKIP() << "root writes into read-only directories";
  fs::TempDir tmp = scratch();
  std::string dir = tmp.path() + "/ro";
  {
    TestCache writer(dir);
    writer.cache.store(sampleKey(), "cached");
  }
  ::chmod(dir.c_str(), 0555);
  TestCache t(dir);
  EXPECT_EQ(t.cache.lookup(sampleKey()).value_or(""), "cached");
  t.cache.store(sampleKey("other"), "b");
  t.cache.store(sampleKey("third"), "c");
  EXPECT_EQ(t.cache.lookup(sampleKey()).value_or(""), "cached");
  ::chmod(dir.c_str(), 0755);
  EXPECT_TRUE(t.cache.enabled());
  EXPECT_FALSE(t.cache.writable());
  ASSERT_EQ(t.warnings.size(), 1u);
  EXPECT_TRUE(contains(t.warnings[0], "read-only")) << t.warnings[0];
  EXPECT_EQ(listDir(dir).size(), 1u);
}

TEST(KernelCache, DisabledCacheNeverTouchesTheDisk) {
  TestCache t("");
  EXPECT_FALSE(t.cache.enabled());
  t.cache.store(sampleKey(), "x");
  EXPECT_FALSE(t.cache.lookup(sampleKey()).has_value());
  EXPECT_TRUE(t.warnings.empty());
}

TEST(KernelCache, StaleTemporaryFilesAreRemoved) {
  fs::TempDir tmp = scratch();
  std::string stale = tmp.path() + "/.tmp-0123456789abcdef-AAAAAA";
  std::string live = tmp.path() + "/.tmp-0123456789abcdef-BBBBBB";
  writeRaw(stale, "left by a crashed writer");
  writeRaw(live, "being written right now");
  auto old = sfs::file_time_type::clock::now() - std::chrono::hours(2);
  sfs::last_write_time(stale, old);
  TestCache t(tmp.path());
  t.cache.store(sampleKey(), "x");
  EXPECT_FALSE(sfs::exists(stale));
  EXPECT_TRUE(sfs::exists(live));
}

//===----------------------------------------------------------------------===//
// ptxas log parsing
//===----------------------------------------------------------------------===//

TEST(NvrtcPtxasLog, ParsesEntriesRegistersSpillsAndSmem) {
  const char *log =
      "ptxas info    : Overriding maximum register limit 256 for 'spilly' with  24 of maxrregcount "
      "option\n"
      "ptxas info    : 0 bytes gmem\n"
      "ptxas info    : Compiling entry function 'spilly' for 'sm_80'\n"
      "ptxas info    : Function properties for spilly\n"
      "ptxas         .     512 bytes stack frame, 936 bytes spill stores, 900 bytes spill loads\n"
      "ptxas info    : Used 24 registers, used 0 barriers, 512 bytes cumulative stack size, 372 "
      "bytes cmem[0]\n"
      "ptxas info    : Compile time = 21.709 ms\n"
      "ptxas info    : Function properties for _Z6helperf\n"
      "ptxas         .     8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads\n"
      "ptxas info    : Compiling entry function 'k1' for 'sm_80'\n"
      "ptxas info    : Function properties for k1\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 9 registers, used 1 barriers, 1024 bytes smem, 376 bytes cmem[0]\n";
  std::vector<KernelResources> ks = parsePtxasLog(log);
  ASSERT_EQ(ks.size(), 2u);
  EXPECT_EQ(ks[0].name, "spilly");
  EXPECT_EQ(ks[0].arch, "sm_80");
  EXPECT_EQ(ks[0].registers, 24);
  EXPECT_EQ(ks[0].stackFrameBytes, 512);
  EXPECT_EQ(ks[0].spillStoreBytes, 936);
  EXPECT_EQ(ks[0].spillLoadBytes, 900);
  EXPECT_EQ(ks[0].staticSmemBytes, 0);
  EXPECT_EQ(ks[0].constantBytes, 372);
  EXPECT_TRUE(ks[0].spills());
  EXPECT_EQ(ks[1].name, "k1");
  EXPECT_EQ(ks[1].registers, 9);
  EXPECT_EQ(ks[1].staticSmemBytes, 1024);
  EXPECT_FALSE(ks[1].spills());
  EXPECT_TRUE(parsePtxasLog("").empty());
  EXPECT_TRUE(parsePtxasLog("t.cu(3): error: expected a \";\"\n").empty());
}

//===----------------------------------------------------------------------===//
// NVRTC
//===----------------------------------------------------------------------===//

/// A kernel in the single-struct-parameter style of docs/kernels.md, with
/// 1 KiB of static shared memory.
const char *kScaleKernel = R"(
#include <cuda_fp16.h>
struct ScaleArgs { const float *x; float *y; int n; float scale; };
extern "C" __global__ void attnc_test_scale(ScaleArgs a) {
  __shared__ float tile[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  tile[threadIdx.x] = i < a.n ? a.x[i] : 0.f;
  __syncthreads();
  if (i < a.n)
    a.y[i] = tile[blockDim.x - 1 - threadIdx.x] * a.scale + __half2float(__float2half(0.f));
}
)";

/// Register pressure that spills under --maxrregcount=24.
const char *kSpillKernel = R"(
extern "C" __global__ void attnc_test_spill(const float *x, float *y, int n) {
  float acc[48];
#pragma unroll
  for (int j = 0; j < 48; ++j) acc[j] = x[j * n + threadIdx.x];
  for (int it = 0; it < n; ++it) {
#pragma unroll
    for (int j = 0; j < 48; ++j) acc[j] = acc[j] * acc[(j + 7) % 48] + x[it + j];
  }
  float s = 0;
#pragma unroll
  for (int j = 0; j < 48; ++j) s += acc[j] * (j + 1);
  y[threadIdx.x] = s;
}
)";

bool isElf(const std::string &image) {
  return image.size() > 4 && image.compare(0, 4,
                                           "\x7f"
                                           "ELF") == 0;
}

TEST(NvrtcCompiler, CompilesCubinForTuringAmpereHopper) {
  NvrtcCompiler nvrtc;
  for (const char *arch : {"sm_75", "sm_80", "sm_90"}) {
    NvrtcOptions o;
    o.arch = arch;
    Expected<Cubin> c = nvrtc.compile("attnc_test_scale.cu", kScaleKernel, o);
    ASSERT_TRUE(c.ok()) << c.error();
    EXPECT_TRUE(isElf(c->image)) << arch;
    EXPECT_FALSE(c->fromCache);
    const KernelResources *k = c->kernel("attnc_test_scale");
    ASSERT_NE(k, nullptr) << c->log;
    EXPECT_EQ(k->arch, arch);
    EXPECT_GT(k->registers, 0);
    EXPECT_LE(k->registers, 255);
    EXPECT_EQ(k->staticSmemBytes, 1024);
    EXPECT_FALSE(k->spills());
    EXPECT_TRUE(contains(c->log, "ptxas info")) << c->log;
  }
}

TEST(NvrtcCompiler, ReportsSpillsUnderARegisterLimit) {
  NvrtcCompiler nvrtc;
  NvrtcOptions o;
  o.arch = "sm_80";
  o.options = {"--maxrregcount=24"};
  Expected<Cubin> c = nvrtc.compile("attnc_test_spill.cu", kSpillKernel, o);
  ASSERT_TRUE(c.ok()) << c.error();
  const KernelResources *k = c->kernel("attnc_test_spill");
  ASSERT_NE(k, nullptr) << c->log;
  EXPECT_LE(k->registers, 24);
  EXPECT_TRUE(k->spills()) << c->log;
  EXPECT_GT(k->spillStoreBytes, 0);
  EXPECT_GT(k->spillLoadBytes, 0);
}

TEST(NvrtcCompiler, DefaultOptionsAreDocumented) {
  NvrtcOptions o;
  o.arch = "sm_90";
  o.includeDirs = {"/opt/kernels"};
  o.options = {"-DATTNC_D=64"};
  std::vector<std::string> opts = NvrtcCompiler::effectiveOptions(o);
  ASSERT_GE(opts.size(), 7u);
  EXPECT_EQ(opts[0], "--gpu-architecture=sm_90");
  EXPECT_EQ(opts[1], "--std=c++17");
  EXPECT_EQ(opts[2], "-default-device");
  EXPECT_EQ(opts[3], "--ptxas-options=-v");
  EXPECT_EQ(opts[4], "-I/opt/kernels");
  EXPECT_EQ(opts[5], "-I" + NvrtcCompiler::toolkitIncludeDir());
  EXPECT_EQ(opts[6], "-DATTNC_D=64");
  o.ptxasVerbose = false;
  EXPECT_EQ(NvrtcCompiler::effectiveOptions(o).size(), opts.size() - 1);
}

TEST(NvrtcCompiler, CacheHitsAndMissesOnEveryKeyChange) {
  fs::TempDir tmp = scratch();
  TestCache t(tmp.path());
  NvrtcCompiler nvrtc(&t.cache);
  NvrtcOptions o;
  o.arch = "sm_80";
  Expected<Cubin> first = nvrtc.compile("attnc_test_scale.cu", kScaleKernel, o);
  ASSERT_TRUE(first.ok()) << first.error();
  EXPECT_FALSE(first->fromCache);
  EXPECT_GT(first->compileSeconds, 0);

  Expected<Cubin> second = nvrtc.compile("attnc_test_scale.cu", kScaleKernel, o);
  ASSERT_TRUE(second.ok()) << second.error();
  EXPECT_TRUE(second->fromCache);
  EXPECT_EQ(second->image, first->image);
  EXPECT_EQ(second->cacheKey, first->cacheKey);
  // Resource usage survives the cache (the log is stored with the CUBIN).
  ASSERT_NE(second->kernel("attnc_test_scale"), nullptr);
  EXPECT_EQ(second->kernel("attnc_test_scale")->registers,
            first->kernel("attnc_test_scale")->registers);

  auto missesWith = [&](const std::string &source, NvrtcOptions opts) {
    Expected<Cubin> c = nvrtc.compile("attnc_test_scale.cu", source, opts);
    EXPECT_TRUE(c.ok()) << c.error();
    return c && !c->fromCache && c->cacheKey != first->cacheKey;
  };
  EXPECT_TRUE(missesWith(std::string(kScaleKernel) + "\n// edited\n", o));
  NvrtcOptions withDefine = o;
  withDefine.options = {"-DATTNC_UNUSED=1"};
  EXPECT_TRUE(missesWith(kScaleKernel, withDefine));
  NvrtcOptions hopper = o;
  hopper.arch = "sm_90";
  EXPECT_TRUE(missesWith(kScaleKernel, hopper));
  NvrtcOptions quiet = o;
  quiet.ptxasVerbose = false;
  EXPECT_TRUE(missesWith(kScaleKernel, quiet));
  // Option order does not matter for the key.
  NvrtcOptions ab = o, ba = o;
  ab.options = {"-DA=1", "-DB=2"};
  ba.options = {"-DB=2", "-DA=1"};
  Expected<Cubin> cab = nvrtc.compile("attnc_test_scale.cu", kScaleKernel, ab);
  Expected<Cubin> cba = nvrtc.compile("attnc_test_scale.cu", kScaleKernel, ba);
  ASSERT_TRUE(cab.ok() && cba.ok());
  EXPECT_TRUE(cba->fromCache);
  EXPECT_TRUE(t.warnings.empty());
  EXPECT_FALSE(hasTempFiles(tmp.path()));
}

TEST(NvrtcCompiler, IncludeDirsAndInMemoryHeaders) {
  fs::TempDir tmp = scratch();
  std::string inc = tmp.path() + "/include";
  ASSERT_TRUE(fs::createDirectories(inc + "/attnc").ok());
  writeRaw(inc + "/attnc/scale.cuh", "#define ATTNC_SCALE 2.0f\n");
  TestCache t(tmp.path() + "/cache");
  NvrtcCompiler nvrtc(&t.cache);
  NvrtcOptions o;
  o.arch = "sm_80";
  o.includeDirs = {inc};
  o.headers = {{"variant.h", "struct Variant { static constexpr int kParams = 3; };\n"}};
  const char *src = R"(
#include "attnc/scale.cuh"
#include "variant.h"
extern "C" __global__ void k(float *y) { y[threadIdx.x] = ATTNC_SCALE * Variant::kParams; }
)";
  Expected<Cubin> a = nvrtc.compile("with_headers.cu", src, o);
  ASSERT_TRUE(a.ok()) << a.error();
  Expected<Cubin> b = nvrtc.compile("with_headers.cu", src, o);
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(b->fromCache);
  // Editing an included header is a different kernel.
  writeRaw(inc + "/attnc/scale.cuh", "#define ATTNC_SCALE 3.0f\n");
  Expected<Cubin> c = nvrtc.compile("with_headers.cu", src, o);
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->fromCache);
  // So is editing an in-memory header.
  o.headers[0].second = "struct Variant { static constexpr int kParams = 4; };\n";
  Expected<Cubin> d = nvrtc.compile("with_headers.cu", src, o);
  ASSERT_TRUE(d.ok());
  EXPECT_FALSE(d->fromCache);
}

TEST(NvrtcCompiler, SyntaxErrorCarriesProgramOptionsAndLog) {
  NvrtcCompiler nvrtc;
  NvrtcOptions o;
  o.arch = "sm_80";
  o.options = {"-DATTNC_TEST_FLAG=1"};
  Expected<Cubin> c = nvrtc.compile("attnc_fwd_broken.cu",
                                    "extern \"C\" __global__ void k(float *y) {\n"
                                    "  y[0] = 1.0f\n"
                                    "}\n",
                                    o);
  ASSERT_FALSE(c.ok());
  const std::string &e = c.error();
  EXPECT_TRUE(contains(e, "attnc_fwd_broken.cu")) << e;
  EXPECT_TRUE(contains(e, "sm_80")) << e;
  EXPECT_TRUE(contains(e, "--gpu-architecture=sm_80")) << e;
  EXPECT_TRUE(contains(e, "-DATTNC_TEST_FLAG=1")) << e;
  EXPECT_TRUE(contains(e, "NVRTC_ERROR_COMPILATION")) << e;
  // The compiler's own diagnostic, with the line it refers to.
  EXPECT_TRUE(contains(e, "attnc_fwd_broken.cu(3)") || contains(e, "attnc_fwd_broken.cu(2)")) << e;
  EXPECT_TRUE(contains(e, "error")) << e;
}

TEST(NvrtcCompiler, CorruptCachedCubinIsRecompiled) {
  fs::TempDir tmp = scratch();
  TestCache t(tmp.path());
  NvrtcCompiler nvrtc(&t.cache);
  NvrtcOptions o;
  o.arch = "sm_75";
  Expected<Cubin> first = nvrtc.compile("attnc_test_scale.cu", kScaleKernel, o);
  ASSERT_TRUE(first.ok()) << first.error();
  std::string path = tmp.path() + "/" + first->cacheKey + ".cubin";
  std::string bytes = readAll(path);
  ASSERT_GT(bytes.size(), KernelCache::kHeaderBytes + 200);
  bytes[KernelCache::kHeaderBytes + 200] ^= 0x20;
  writeRaw(path, bytes);

  Expected<Cubin> second = nvrtc.compile("attnc_test_scale.cu", kScaleKernel, o);
  ASSERT_TRUE(second.ok()) << second.error();
  EXPECT_FALSE(second->fromCache);
  EXPECT_EQ(second->image, first->image);
  ASSERT_EQ(t.warnings.size(), 1u);
  EXPECT_TRUE(contains(t.warnings[0], path)) << t.warnings[0];

  Expected<Cubin> third = nvrtc.compile("attnc_test_scale.cu", kScaleKernel, o);
  ASSERT_TRUE(third.ok());
  EXPECT_TRUE(third->fromCache);
  EXPECT_EQ(t.warnings.size(), 1u);
}

TEST(NvrtcCompiler, VoltaCompilesWithTheCuda12Nvrtc) {
  // The rule itself, independent of the NVRTC installed here.
  Status s = checkGpuArchSupported("sm_70", 13);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error(), "sm_70 (Volta) needs a CUDA 12 NVRTC: CUDA 13.x dropped it");
  EXPECT_EQ(checkGpuArchSupported("sm_72", 13).error(),
            "sm_72 (Volta) needs a CUDA 12 NVRTC: CUDA 13.x dropped it");
  EXPECT_EQ(checkGpuArchSupported("sm_61", 13).error(),
            "sm_61 (Pascal) needs a CUDA 12 NVRTC: CUDA 13.x dropped it");
  EXPECT_EQ(checkGpuArchSupported("sm_35", 12).error(),
            "sm_35 (Kepler) needs a CUDA 11 NVRTC: CUDA 12.x dropped it");
  EXPECT_TRUE(checkGpuArchSupported("sm_70", 12).ok());
  EXPECT_TRUE(checkGpuArchSupported("sm_75", 13).ok());

  // Through the compiler: with only a CUDA 13 NVRTC, sm_70 is refused
  // before NVRTC is called, saying what to install; with the project's
  // CUDA 12 NVRTC (scripts/bootstrap.sh) it compiles, and the CUBIN says
  // which NVRTC made it.
  const std::vector<NvrtcLibrary> &libs = nvrtcLibraries();
  ASSERT_FALSE(libs.empty());
  if (libs[0].targets(70))
    GTEST_SKIP() << "the linked NVRTC " << libs[0].describe() << " still has sm_70";
  Expected<const NvrtcLibrary *> none = chooseNvrtc(70, {libs[0]});
  ASSERT_FALSE(none.ok());
  EXPECT_TRUE(contains(none.error(), "sm_70 needs a CUDA 12 NVRTC (CUDA 13.x dropped it)"))
      << none.error();
  EXPECT_TRUE(contains(none.error(), "scripts/bootstrap.sh")) << none.error();
  EXPECT_TRUE(contains(none.error(), "ATTNC_NVRTC12")) << none.error();
  NvrtcOptions o;
  o.arch = "sm_70";
  Expected<Cubin> c = NvrtcCompiler().compile("attnc_test_scale.cu", kScaleKernel, o);
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_TRUE(contains(c->compiler, "NVRTC 12.")) << c->compiler;
  EXPECT_TRUE(contains(c->compiler, "libnvrtc.so.12")) << c->compiler;
  EXPECT_FALSE(c->image.empty());
  o.arch = "sm_80";
  Expected<Cubin> ampere = NvrtcCompiler().compile("attnc_test_scale.cu", kScaleKernel, o);
  ASSERT_TRUE(ampere.ok()) << ampere.error();
  EXPECT_EQ(ampere->compiler, libs[0].identity());
}

TEST(NvrtcCompiler, PtxForAnOlderArchIsPtxTextForTheDriverToJit) {
  // attnc-rt run --as-arch sm_70 on a newer GPU: compute_70 PTX (through
  // the CUDA 12 NVRTC), NUL-terminated for cuModuleLoadData, no ptxas
  // report, cached apart from the CUBIN of the same source and arch.
  fs::TempDir tmp = scratch();
  TestCache t(tmp.path());
  NvrtcCompiler compiler(&t.cache);
  NvrtcOptions o;
  o.arch = "sm_70";
  o.ptx = true;
  std::vector<std::string> opts = NvrtcCompiler::effectiveOptions(o);
  EXPECT_EQ(opts[0], "--gpu-architecture=compute_70");
  EXPECT_EQ(std::count(opts.begin(), opts.end(), "--ptxas-options=-v"), 0);
  Expected<Cubin> ptx = compiler.compile("attnc_test_scale.cu", kScaleKernel, o);
  ASSERT_TRUE(ptx.ok()) << ptx.error();
  EXPECT_TRUE(ptx->ptx);
  ASSERT_FALSE(ptx->image.empty());
  EXPECT_EQ(ptx->image.back(), '\0');
  EXPECT_TRUE(contains(ptx->image, ".target sm_70")) << ptx->image.substr(0, 400);
  EXPECT_TRUE(contains(ptx->image, ".entry")) << ptx->image.substr(0, 400);
  EXPECT_TRUE(ptx->kernels.empty());
  Expected<Cubin> again = compiler.compile("attnc_test_scale.cu", kScaleKernel, o);
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_TRUE(again->fromCache);
  EXPECT_TRUE(again->ptx);
  EXPECT_EQ(again->image, ptx->image);
  o.ptx = false;
  Expected<Cubin> cubin = compiler.compile("attnc_test_scale.cu", kScaleKernel, o);
  ASSERT_TRUE(cubin.ok()) << cubin.error();
  EXPECT_FALSE(cubin->fromCache);
  EXPECT_FALSE(cubin->ptx);
  EXPECT_NE(cubin->cacheKey, ptx->cacheKey);
  EXPECT_FALSE(contains(cubin->image, ".target sm_70"));
}

// The NVRTCs a machine has: the linked toolkit's, and the CUDA
// 12 one that scripts/bootstrap.sh installs into .deps/nvrtc-cu12 (every
// build runs it first), which still targets Volta.
TEST(NvrtcLibraries, FindsTheToolkitsAndTheProjectsCuda12) {
  ::unsetenv("ATTNC_NVRTC12");
  std::vector<std::string> problems;
  std::vector<NvrtcLibrary> libs = findNvrtcLibraries(&problems);
  ASSERT_FALSE(libs.empty());
  EXPECT_EQ(libs[0].origin, "the CUDA toolkit");
  EXPECT_EQ(libs[0].major, NvrtcCompiler::versionMajor());
  EXPECT_TRUE(libs[0].targets(80));
  const NvrtcLibrary *volta = nullptr;
  for (const NvrtcLibrary &l : libs)
    if (l.major == 12 && l.targets(70))
      volta = &l;
  ASSERT_NE(volta, nullptr) << "no CUDA 12 NVRTC in " << projectNvrtc12Dir()
                            << " (scripts/bootstrap.sh installs it)";
  EXPECT_TRUE(contains(volta->path, "libnvrtc.so.12")) << volta->path;
  EXPECT_TRUE(contains(volta->describe(), "12.")) << volta->describe();
  EXPECT_TRUE(problems.empty()) << problems[0];

  // $ATTNC_NVRTC12 naming the same library lists it once; naming nothing
  // usable is said, naming the place.
  ::setenv("ATTNC_NVRTC12", projectNvrtc12Dir().c_str(), 1);
  EXPECT_EQ(findNvrtcLibraries().size(), libs.size());
  ::setenv("ATTNC_NVRTC12", "/nonexistent/nvrtc", 1);
  problems.clear();
  findNvrtcLibraries(&problems);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_TRUE(contains(problems[0], "$ATTNC_NVRTC12 = /nonexistent/nvrtc")) << problems[0];
  ::unsetenv("ATTNC_NVRTC12");
  Expected<NvrtcLibrary> notOne = probeNvrtcLibrary("/bin/sh", "a test");
  ASSERT_FALSE(notOne.ok());
  EXPECT_TRUE(contains(notOne.error(), "/bin/sh (a test)")) << notOne.error();
}

TEST(NvrtcCompiler, BadArchitecturesAreExplained) {
  Expected<GpuArch> a = parseGpuArch("sm_90a");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->sm, 90);
  EXPECT_EQ(a->suffix, "a");
  EXPECT_EQ(a->str(), "sm_90a");
  EXPECT_EQ(parseGpuArch("sm_100f")->sm, 100);
  EXPECT_TRUE(contains(parseGpuArch("compute_80").error(), "real one, sm_80"));
  for (const char *bad : {"sm_8", "80", "sm_90x", "sm_", "", "sm_1000"})
    EXPECT_FALSE(parseGpuArch(bad).ok()) << bad;
  // An arch this NVRTC does not know is named with the list it does know.
  NvrtcOptions o;
  o.arch = "sm_99";
  Expected<Cubin> c = NvrtcCompiler().compile("k.cu", "", o);
  ASSERT_FALSE(c.ok());
  EXPECT_TRUE(contains(c.error(), "sm_99 is not supported by NVRTC")) << c.error();
  EXPECT_TRUE(contains(c.error(), "sm_80")) << c.error();
  EXPECT_STREQ(gpuArchFamily(90), "Hopper");
  EXPECT_STREQ(gpuArchFamily(75), "Turing");
}

//===----------------------------------------------------------------------===//
// Subprocesses and the host compiler
//===----------------------------------------------------------------------===//

TEST(HostSubprocess, CapturesOutputAndExitStatus) {
  Expected<ProcessResult> r =
      runProcess({"sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3"}, 30);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->exitCode, 3);
  EXPECT_FALSE(r->succeeded());
  EXPECT_TRUE(contains(r->output, "to-stdout"));
  EXPECT_TRUE(contains(r->output, "to-stderr"));
  EXPECT_EQ(r->describe(), "exit status 3");
  // Arguments reach the program as they are: no shell in between.
  r = runProcess({"printf", "%s|", "a b", "$HOME", "'q'"}, 30);
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_EQ(r->output, "a b|$HOME|'q'|");
  EXPECT_EQ(formatCommand({"c++", "-DX=a b", "it's"}), "c++ '-DX=a b' 'it'\\''s'");
}

TEST(HostSubprocess, TimeoutKillsTheWholeProcessGroup) {
  auto start = std::chrono::steady_clock::now();
  // The background sleep keeps the output pipe open: only killing the group
  // ends this early.
  Expected<ProcessResult> r = runProcess({"sh", "-c", "sleep 30 & sleep 30"}, 0.3);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(r.ok()) << r.error();
  EXPECT_TRUE(r->timedOut);
  EXPECT_FALSE(r->succeeded());
  EXPECT_TRUE(contains(r->describe(), "timed out")) << r->describe();
  EXPECT_LT(s, 10.0);
}

TEST(HostSubprocess, MissingProgramIsAnError) {
  Expected<ProcessResult> r = runProcess({"/nonexistent/attnc-no-such-tool"}, 5);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error(), "/nonexistent/attnc-no-such-tool")) << r.error();
}

const char *kHostSource = R"(
#include <cstdint>
extern "C" int attnc_test_add(int a, int b) { return a + b; }
extern "C" double attnc_test_sum(const double *x, int n) {
  double s = 0;
#pragma omp parallel for reduction(+ : s)
  for (int i = 0; i < n; ++i)
    s += x[i];
  return s;
}
extern "C" int attnc_test_value() { return VALUE; }
)";

HostCompileOptions hostOptions(int value = 1) {
  HostCompileOptions o;
  o.flags = {"-DVALUE=" + std::to_string(value)};
  return o;
}

TEST(HostCompiler, BuildsLoadsAndCallsASharedObject) {
  fs::TempDir tmp = scratch();
  TestCache t(tmp.path());
  HostCompiler cc(&t.cache);
  Expected<SharedObject> so = cc.compileAndLoad("attnc_cpu_test.cpp", kHostSource, hostOptions(7));
  ASSERT_TRUE(so.ok()) << so.error();
  Expected<int (*)(int, int)> add = so->function<int(int, int)>("attnc_test_add");
  ASSERT_TRUE(add.ok()) << add.error();
  EXPECT_EQ((*add)(2, 40), 42);
  auto sum = so->function<double(const double *, int)>("attnc_test_sum");
  ASSERT_TRUE(sum.ok()) << sum.error();
  std::vector<double> xs(1000);
  for (int i = 0; i < 1000; ++i)
    xs[size_t(i)] = i;
  EXPECT_EQ((*sum)(xs.data(), 1000), 499500.0);
  EXPECT_EQ((*so->function<int()>("attnc_test_value"))(), 7);

  // A second build is a cache hit and loads just the same.
  Expected<SharedObjectImage> again = cc.compile("attnc_cpu_test.cpp", kHostSource, hostOptions(7));
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_TRUE(again->fromCache);
  Expected<SharedObject> so2 = SharedObject::load(again->image, "again.so");
  ASSERT_TRUE(so2.ok()) << so2.error();
  EXPECT_EQ((*so2->function<int(int, int)>("attnc_test_add"))(1, 2), 3);
  EXPECT_TRUE(t.warnings.empty());
}

TEST(HostCompiler, DefaultFlagsAndCompilerSelection) {
  EXPECT_EQ(HostCompiler::defaultFlags(),
            (std::vector<std::string>{"-O3", "-march=native", "-fPIC", "-shared", "-fopenmp",
                                      "-std=c++17"}));
  {
    ScopedEnv cxx("CXX", "ccache  g++-12");
    EXPECT_EQ(HostCompiler::compilerCommand({}), (std::vector<std::string>{"ccache", "g++-12"}));
    HostCompileOptions o;
    o.compiler = "clang++";
    EXPECT_EQ(HostCompiler::compilerCommand(o), std::vector<std::string>{"clang++"});
  }
  {
    ScopedEnv cxx("CXX", nullptr);
    EXPECT_EQ(HostCompiler::compilerCommand({}), std::vector<std::string>{"c++"});
  }
  Expected<std::string> id = HostCompiler::compilerIdentity({"c++"});
  ASSERT_TRUE(id.ok()) << id.error();
  EXPECT_FALSE(id->empty());
  EXPECT_FALSE(HostCompiler::cpuIdentity().empty());
}

// The one /proc/cpuinfo reader: each key's first line and value (the first
// CPU's), the processor count; the host's has this CPU's model or features.
TEST(CpuInfo, FirstLineOfEachKeyAndTheProcessorCount) {
  CpuInfo c = CpuInfo::parse("processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Xeon  X \n"
                             "flags\t\t: sse2 avx2\nvmx flags\t: ept\n\nprocessor\t: 1\n"
                             "model name\t: other\nno colon here\n");
  EXPECT_EQ(c.processors, 2);
  EXPECT_EQ(c.value("model name"), "Xeon  X");
  EXPECT_EQ(c.line("model name"), "model name\t: Xeon  X ");
  EXPECT_EQ(c.value("flags"), "sse2 avx2");
  EXPECT_EQ(c.value("vmx flags"), "ept");
  EXPECT_EQ(c.value("Features"), "");
  EXPECT_EQ(c.line("absent"), "");
  const CpuInfo &host = CpuInfo::host();
  EXPECT_GE(host.processors, 1);
  EXPECT_FALSE(host.value("model name").empty() && host.value("Features").empty());
  // HostCompiler's key holds the host's lines as written.
  EXPECT_NE(HostCompiler::cpuIdentity().find(host.line("model name")), std::string::npos);
}

TEST(HostCompiler, TwoObjectsDefiningTheSameSymbolStayApart) {
  HostCompiler cc;
  Expected<SharedObject> one = cc.compileAndLoad("one.cpp", kHostSource, hostOptions(1));
  Expected<SharedObject> two = cc.compileAndLoad("two.cpp", kHostSource, hostOptions(2));
  ASSERT_TRUE(one.ok()) << one.error();
  ASSERT_TRUE(two.ok()) << two.error();
  EXPECT_EQ((*one->function<int()>("attnc_test_value"))(), 1);
  EXPECT_EQ((*two->function<int()>("attnc_test_value"))(), 2);
}

TEST(HostCompiler, InlineStaticsStayPerObject) {
  // With GCC, a function-local static of an inline function would be an
  // STB_GNU_UNIQUE symbol shared by every object in the process.
  const char *src = R"(
inline int &attncCounter() { static int c = VALUE; return c; }
extern "C" int attnc_test_unique() { return attncCounter(); }
)";
  HostCompiler cc;
  Expected<SharedObject> one = cc.compileAndLoad("unique.cpp", src, hostOptions(1));
  Expected<SharedObject> two = cc.compileAndLoad("unique.cpp", src, hostOptions(2));
  ASSERT_TRUE(one.ok()) << one.error();
  ASSERT_TRUE(two.ok()) << two.error();
  EXPECT_EQ((*one->function<int()>("attnc_test_unique"))(), 1);
  EXPECT_EQ((*two->function<int()>("attnc_test_unique"))(), 2);
}

TEST(HostCompiler, PinnedObjectsDoNotShadowLaterOnes) {
  // An object that dlclose cannot unload keeps its load path; later loads
  // must still get their own object, not that one.
  HostCompiler cc;
  for (int value : {1, 2, 3}) {
    HostCompileOptions o = hostOptions(value);
    o.flags.push_back("-Wl,-z,nodelete");
    Expected<SharedObject> so = cc.compileAndLoad("pinned.cpp", kHostSource, o);
    ASSERT_TRUE(so.ok()) << so.error();
    EXPECT_EQ((*so->function<int()>("attnc_test_value"))(), value);
  }
}

TEST(HostCompiler, OpenMpObjectsCanBeUnloaded) {
  // Worker threads of a parallel region stay parked in the OpenMP runtime
  // after the object that started them is closed.
  HostCompiler cc;
  std::vector<double> xs(4096, 1.0);
  for (int round = 0; round < 3; ++round) {
    Expected<SharedObject> so = cc.compileAndLoad("omp.cpp", kHostSource, hostOptions(round));
    ASSERT_TRUE(so.ok()) << so.error();
    auto sum = so->function<double(const double *, int)>("attnc_test_sum");
    ASSERT_TRUE(sum.ok());
    EXPECT_EQ((*sum)(xs.data(), int(xs.size())), 4096.0);
  }
}

TEST(HostCompiler, CacheKeyFollowsSourceAndFlags) {
  fs::TempDir tmp = scratch();
  TestCache t(tmp.path());
  HostCompiler cc(&t.cache);
  Expected<SharedObjectImage> a = cc.compile("k.cpp", kHostSource, hostOptions(1));
  ASSERT_TRUE(a.ok()) << a.error();
  EXPECT_FALSE(a->fromCache);
  Expected<SharedObjectImage> b = cc.compile("k.cpp", kHostSource, hostOptions(2));
  ASSERT_TRUE(b.ok()) << b.error();
  EXPECT_FALSE(b->fromCache);
  EXPECT_NE(a->cacheKey, b->cacheKey);
  Expected<SharedObjectImage> c =
      cc.compile("k.cpp", std::string(kHostSource) + "// edit\n", hostOptions(1));
  ASSERT_TRUE(c.ok()) << c.error();
  EXPECT_FALSE(c->fromCache);
  Expected<SharedObjectImage> d = cc.compile("k.cpp", kHostSource, hostOptions(1));
  ASSERT_TRUE(d.ok()) << d.error();
  EXPECT_TRUE(d->fromCache);
  EXPECT_EQ(d->image, a->image);
  std::vector<std::string> names = listDir(tmp.path());
  EXPECT_EQ(names.size(), 3u);
  for (const std::string &n : names)
    EXPECT_EQ(sfs::path(n).extension(), ".so") << n;
}

TEST(HostCompiler, CorruptCachedObjectIsRebuilt) {
  fs::TempDir tmp = scratch();
  TestCache t(tmp.path());
  HostCompiler cc(&t.cache);
  Expected<SharedObjectImage> a = cc.compile("k.cpp", kHostSource, hostOptions(5));
  ASSERT_TRUE(a.ok()) << a.error();
  std::string path = tmp.path() + "/" + a->cacheKey + ".so";
  std::string bytes = readAll(path);
  bytes[bytes.size() / 2] ^= 0xff;
  writeRaw(path, bytes);
  Expected<SharedObject> so = cc.compileAndLoad("k.cpp", kHostSource, hostOptions(5));
  ASSERT_TRUE(so.ok()) << so.error();
  EXPECT_EQ((*so->function<int()>("attnc_test_value"))(), 5);
  ASSERT_EQ(t.warnings.size(), 1u);
  EXPECT_TRUE(contains(t.warnings[0], path)) << t.warnings[0];
}

TEST(HostCompiler, CompileErrorCarriesCommandAndLog) {
  fs::TempDir tmp = scratch();
  // A failed compile keeps its source for the log's line numbers: keep it
  // in the scratch directory.
  ScopedEnv tmpdir("TMPDIR", tmp.path().c_str());
  HostCompiler cc;
  Expected<SharedObjectImage> r =
      cc.compile("attnc_cpu_broken.cpp", "extern \"C\" int f() { return undeclared_name; }\n", {});
  ASSERT_FALSE(r.ok());
  const std::string &e = r.error();
  EXPECT_TRUE(contains(e, "attnc_cpu_broken.cpp")) << e;
  EXPECT_TRUE(contains(e, "command: ")) << e;
  EXPECT_TRUE(contains(e, "-march=native")) << e;
  EXPECT_TRUE(contains(e, "undeclared_name")) << e;
  EXPECT_TRUE(contains(e, "error")) << e;
  EXPECT_TRUE(contains(e, "source kept at " + tmp.path())) << e;
}

TEST(HostCompiler, MissingSymbolNamesSymbolAndObject) {
  HostCompiler cc;
  Expected<SharedObject> so = cc.compileAndLoad("attnc_cpu_test.cpp", kHostSource, hostOptions());
  ASSERT_TRUE(so.ok()) << so.error();
  EXPECT_EQ(so->name(), "attnc_cpu_test.so");
  Expected<void *> missing = so->symbol("attnc_cpu_fwd_nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(contains(missing.error(), "attnc_cpu_fwd_nope")) << missing.error();
  EXPECT_TRUE(contains(missing.error(), "attnc_cpu_test.so")) << missing.error();
}

TEST(HostCompiler, MissingCompilerIsReported) {
  HostCompileOptions o;
  o.compiler = "/nonexistent/attnc-c++";
  Expected<SharedObjectImage> r = HostCompiler().compile("k.cpp", kHostSource, o);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error(), "/nonexistent/attnc-c++")) << r.error();
  EXPECT_TRUE(contains(r.error(), "k.cpp")) << r.error();
}

TEST(HostCompiler, TimeoutIsReported) {
  fs::TempDir tmp = scratch();
  ScopedEnv tmpdir("TMPDIR", tmp.path().c_str()); // The source is kept.
  HostCompileOptions o;
  o.timeoutSeconds = 0.01; // Far less than any real compile.
  Expected<SharedObjectImage> r = HostCompiler().compile(
      "slow.cpp", "#include <regex>\n#include <iostream>\nint g() { return 1; }\n", o);
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(contains(r.error(), "timed out")) << r.error();
}

TEST(HostCompiler, LoadingGarbageFailsCleanly) {
  Expected<SharedObject> so = SharedObject::load("definitely not ELF", "garbage.so");
  ASSERT_FALSE(so.ok());
  EXPECT_TRUE(contains(so.error(), "garbage.so")) << so.error();
  EXPECT_FALSE(SharedObject::open("/nonexistent/lib.so").ok());
}

//===----------------------------------------------------------------------===//
// CUDA driver
//===----------------------------------------------------------------------===//

TEST(CudaDriver, MissingLibraryIsReportedClearly) {
  Expected<std::unique_ptr<cuda::Driver>> d = cuda::Driver::load("libattnc-no-such-driver.so.1");
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(contains(d.error(),
                       "libattnc-no-such-driver.so.1 not found: no NVIDIA driver on this machine"))
      << d.error();
}

TEST(CudaDriver, AvailabilityIsReportedNotFatal) {
  Status s = cuda::Driver::available();
  if (s) {
    Expected<const cuda::Driver *> d = cuda::Driver::get();
    ASSERT_TRUE(d.ok());
    EXPECT_GT((*d)->version(), 0);
    std::string e = (*d)->errorString(CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_TRUE(contains(e, "CUDA_ERROR_OUT_OF_MEMORY")) << e;
    return;
  }
  // No driver (or no usable device): every entry point says why, none crashes.
  EXPECT_FALSE(s.error().empty());
  EXPECT_TRUE(contains(s.error(), "libcuda.so.1 not found: no NVIDIA driver on this machine") ||
              contains(s.error(), "cuInit") || contains(s.error(), "driver"))
      << s.error();
  EXPECT_EQ(cuda::deviceCount().error(), s.error());
  EXPECT_EQ(cuda::queryDevice(0).error(), s.error());
  EXPECT_EQ(cuda::Context::create(0).error(), s.error());
  EXPECT_EQ(cuda::Module::load("x", "m").error(), s.error());
  EXPECT_EQ(cuda::DeviceBuffer::allocate(16).error(), s.error());
  EXPECT_EQ(cuda::Event::create().error(), s.error());
  EXPECT_EQ(cuda::synchronize(nullptr, "k").error(), s.error());
}

TEST(CudaDriver, DeviceInfoDescribesItself) {
  cuda::DeviceInfo info;
  info.name = "NVIDIA H200";
  info.ccMajor = 9;
  info.ccMinor = 0;
  info.smCount = 132;
  info.totalMemoryBytes = size_t(140) << 30;
  info.maxSmemPerBlockOptin = 227 * 1024;
  EXPECT_EQ(info.arch(), "sm_90");
  EXPECT_EQ(info.describe(), "NVIDIA H200 (sm_90, 132 SMs, 140.0 GiB, 227 KiB smem/block)");
}

/// Skips the calling test unless a driver and a device are present.
#define REQUIRE_GPU()                                                                              \
  do {                                                                                             \
    Status avail = cuda::Driver::available();                                                      \
    if (!avail)                                                                                    \
      GTEST_SKIP() << avail.error();                                                               \
    Expected<int> n = cuda::deviceCount();                                                         \
    if (!n || *n == 0)                                                                             \
      GTEST_SKIP() << "no CUDA device";                                                            \
  } while (0)

struct ScaleArgs {
  const float *x;
  float *y;
  int n;
  float scale;
};

TEST(CudaDriver, LaunchesAStructArgumentKernel) {
  REQUIRE_GPU();
  Expected<cuda::Context> ctx = cuda::Context::create(0);
  ASSERT_TRUE(ctx.ok()) << ctx.error();
  ASSERT_TRUE(ctx->makeCurrent().ok()); // this thread's, for the raw calls below
  NvrtcOptions o;
  o.arch = ctx->device().arch();
  if (!checkGpuArchSupported(o.arch))
    GTEST_SKIP() << checkGpuArchSupported(o.arch).error();
  Expected<Cubin> cubin = NvrtcCompiler().compile("attnc_test_scale.cu", kScaleKernel, o);
  ASSERT_TRUE(cubin.ok()) << cubin.error();
  Expected<cuda::Module> mod = cuda::Module::load(cubin->image, "attnc_test_scale.cu");
  ASSERT_TRUE(mod.ok()) << mod.error();
  Expected<cuda::Kernel> k = mod->kernel("attnc_test_scale");
  ASSERT_TRUE(k.ok()) << k.error();
  Expected<cuda::Kernel> missing = mod->kernel("attnc_no_such_kernel");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(contains(missing.error(), "attnc_no_such_kernel")) << missing.error();

  const int n = 1000;
  std::vector<float> x(n), y(n, -1.f);
  for (int i = 0; i < n; ++i)
    x[size_t(i)] = float(i);
  Expected<cuda::DeviceBuffer> dx = cuda::DeviceBuffer::allocate(n * sizeof(float));
  Expected<cuda::DeviceBuffer> dy = cuda::DeviceBuffer::allocate(n * sizeof(float));
  ASSERT_TRUE(dx.ok() && dy.ok());
  ASSERT_TRUE(dx->upload(x.data(), n * sizeof(float)).ok());
  ScaleArgs args{dx->as<float>(), dy->as<float>(), n, 3.f};
  Expected<cuda::Event> start = cuda::Event::create(), stop = cuda::Event::create();
  ASSERT_TRUE(start.ok() && stop.ok());
  ASSERT_TRUE(start->record().ok());
  Status launched = cuda::launch(*k, {(n + 255) / 256}, {256}, 0, nullptr, args);
  ASSERT_TRUE(launched.ok()) << launched.error();
  ASSERT_TRUE(stop->record().ok());
  ASSERT_TRUE(cuda::synchronize(nullptr, "attnc_test_scale").ok());
  Expected<float> ms = cuda::Event::elapsedMs(*start, *stop);
  ASSERT_TRUE(ms.ok()) << ms.error();
  EXPECT_GE(*ms, 0.f);
  ASSERT_TRUE(dy->download(y.data(), n * sizeof(float)).ok());
  // Each block reverses its 256-element tile (zero-filled past n).
  for (int i = 0; i < n; ++i) {
    int block = i / 256, lane = i % 256;
    int src = block * 256 + (255 - lane);
    float want = src < n ? 3.f * float(src) : 0.f;
    ASSERT_EQ(y[size_t(i)], want) << i;
  }
}

TEST(CudaDriver, OptsIntoLargeDynamicSharedMemory) {
  REQUIRE_GPU();
  Expected<cuda::Context> ctx = cuda::Context::create(0);
  ASSERT_TRUE(ctx.ok()) << ctx.error();
  ASSERT_TRUE(ctx->makeCurrent().ok()); // this thread's, for the raw calls below
  size_t optin = size_t(ctx->device().maxSmemPerBlockOptin);
  if (optin <= 48 * 1024)
    GTEST_SKIP() << "device has no opt-in shared memory";
  NvrtcOptions o;
  o.arch = ctx->device().arch();
  if (!checkGpuArchSupported(o.arch))
    GTEST_SKIP() << checkGpuArchSupported(o.arch).error();
  const char *src = R"(
struct Args { float *y; int words; };
extern "C" __global__ void attnc_test_dyn_smem(Args a) {
  extern __shared__ float buf[];
  for (int i = threadIdx.x; i < a.words; i += blockDim.x) buf[i] = float(i);
  __syncthreads();
  if (threadIdx.x == 0) a.y[0] = buf[a.words - 1];
}
)";
  Expected<Cubin> cubin = NvrtcCompiler().compile("dyn_smem.cu", src, o);
  ASSERT_TRUE(cubin.ok()) << cubin.error();
  Expected<cuda::Module> mod = cuda::Module::load(cubin->image, "dyn_smem.cu");
  ASSERT_TRUE(mod.ok()) << mod.error();
  Expected<cuda::Kernel> k = mod->kernel("attnc_test_dyn_smem");
  ASSERT_TRUE(k.ok()) << k.error();
  Expected<cuda::DeviceBuffer> dy = cuda::DeviceBuffer::allocate(sizeof(float));
  ASSERT_TRUE(dy.ok());
  struct {
    float *y;
    int words;
  } args{dy->as<float>(), int(optin / sizeof(float))};
  Status s = cuda::launch(*k, {1}, {256}, optin, nullptr, args);
  ASSERT_TRUE(s.ok()) << s.error();
  ASSERT_TRUE(cuda::synchronize(nullptr, "attnc_test_dyn_smem").ok());
  float y = 0;
  ASSERT_TRUE(dy->download(&y, sizeof(float)).ok());
  EXPECT_EQ(y, float(args.words - 1));
  // Beyond the device's limit: the error names the kernel and the limit.
  Status tooMuch = cuda::launch(*k, {1}, {256}, optin + 1024, nullptr, args);
  ASSERT_FALSE(tooMuch.ok());
  EXPECT_TRUE(contains(tooMuch.error(), "attnc_test_dyn_smem")) << tooMuch.error();
}

} // namespace
