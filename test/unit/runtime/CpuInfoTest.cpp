//===- CpuInfoTest.cpp - The one /proc/cpuinfo reader ---------------------===//
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

} // namespace
