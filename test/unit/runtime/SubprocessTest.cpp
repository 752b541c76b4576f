//===- SubprocessTest.cpp - Subprocesses: output, exit status, timeouts ---===//
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

} // namespace
