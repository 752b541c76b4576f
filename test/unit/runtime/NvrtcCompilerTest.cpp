//===- NvrtcCompilerTest.cpp - NVRTC: ptxas log, caching, archs -----------===//
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

} // namespace
