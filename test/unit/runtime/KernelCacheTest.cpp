//===- KernelCacheTest.cpp - Keys, entries, atomic writes, damage ---------===//
#include "test/unit/runtime/JitTestSupport.h"

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
using namespace attnc::jittest;
using namespace std::string_literals;

namespace {

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

} // namespace
