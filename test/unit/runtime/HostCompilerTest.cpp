//===- HostCompilerTest.cpp - Host compiler: objects, flags, errors -------===//
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

} // namespace
