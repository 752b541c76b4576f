//===- ErrorTest.cpp - Errors as values: Expected and Status --------------===//
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

} // namespace
