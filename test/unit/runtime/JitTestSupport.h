//===- JitTestSupport.h - Helpers of the runtime JIT tests ------*- C++ -*-===//
//
// Scratch folders, a kernel cache that collects its warnings, file and
// environment helpers: what the runtime's JIT tests (Sha256Test.cpp,
// KernelCacheTest.cpp, NvrtcCompilerTest.cpp, HostCompilerTest.cpp,
// CudaDriverTest.cpp, ...) share.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_TEST_UNIT_RUNTIME_JITTESTSUPPORT_H
#define ATTNC_TEST_UNIT_RUNTIME_JITTESTSUPPORT_H

#include "runtime/Error.h"
#include "runtime/FileSystem.h"
#include "runtime/KernelCache.h"
#include "test/unit/support/ScopedEnv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#ifndef ATTNC_TEST_SCRATCH_DIR
#define ATTNC_TEST_SCRATCH_DIR "/tmp/attnc-runtime-jit-scratch"
#endif

namespace attnc::jittest {

namespace sfs = std::filesystem;

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// A fresh directory under the build tree's scratch space, removed after the
/// test.
inline fs::TempDir scratch() {
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
inline std::vector<std::string> listDir(const std::string &dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto &e : sfs::directory_iterator(dir, ec))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

inline bool hasTempFiles(const std::string &dir) {
  for (const std::string &n : listDir(dir))
    if (n.rfind(".tmp-", 0) == 0)
      return true;
  return false;
}

inline std::string readAll(const std::string &path) {
  Expected<std::string> b = fs::readFile(path);
  EXPECT_TRUE(b.ok()) << b.error();
  return b ? *b : std::string();
}

inline void writeRaw(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

inline bool contains(const std::string &haystack, const std::string &needle) {
  return haystack.find(needle) != std::string::npos;
}

using test::ScopedEnv;

/// A kernel in the single-struct-parameter style of docs/kernels.md, with
/// 1 KiB of static shared memory.
inline const char *kScaleKernel = R"(
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

} // namespace attnc::jittest

#endif // ATTNC_TEST_UNIT_RUNTIME_JITTESTSUPPORT_H
