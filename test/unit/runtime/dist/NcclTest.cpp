//===- NcclTest.cpp - NCCL loaded at run time -----------------------------===//
//
// The NCCL path of data-parallel GPU training (runtime/dist/Nccl.h): the
// entry points attnc restates are NCCL's (checked against the toolkit's
// nccl.h where the build found one), the loader finds a library or says
// where it looked, a unique id comes without a GPU, and, where there is a
// GPU, a one-rank communicator bootstrapped through the launcher's world
// all-reduces, all-gathers and exchanges device buffers.
//
//===----------------------------------------------------------------------===//
#include "runtime/CudaDriver.h"
#include "runtime/dist/Nccl.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <vector>

#ifdef ATTNC_HAVE_NCCL_H
#include <nccl.h>
// What Nccl.cpp restates, as the header declares it.
static_assert(sizeof(ncclUniqueId) == sizeof(attnc::dist::NcclUniqueId));
static_assert(int(ncclFloat32) == 7 && int(ncclSum) == 0 && int(ncclSuccess) == 0);
static_assert(sizeof(ncclDataType_t) == sizeof(int) && sizeof(ncclRedOp_t) == sizeof(int));
#endif

using namespace attnc;
using namespace attnc::cuda;

namespace {

bool contains(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}

} // namespace

// The search order (Nccl.h): a Python environment's nvidia-nccl wheel is
// found through the first python3 on PATH (the device machine keeps NCCL
// only there) and through $VIRTUAL_ENV, after the toolkit and the loader;
// $ATTNC_NCCL, when set, is the only place.
TEST(Nccl, SearchOrderEndsWithPythonEnvironmentsWheels) {
  namespace fs = std::filesystem;
  const fs::path root =
      fs::temp_directory_path() / ("attnc-nccl-search-" + std::to_string(::getpid()));
  const fs::path onPath = root / "venv", virtualEnv = root / "other";
  for (const fs::path &env : {onPath, virtualEnv}) {
    fs::create_directories(env / "bin");
    fs::create_directories(env / "lib/python3.12/site-packages/nvidia/nccl/lib");
    std::ofstream(env / "bin/python3") << "#!/bin/sh\n";
    std::ofstream(env / "lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2") << "";
  }
  const std::string oldPath = std::getenv("PATH") ? std::getenv("PATH") : "";
  const char *oldNccl = std::getenv("ATTNC_NCCL");
  const std::string savedNccl = oldNccl ? oldNccl : "";
  ::unsetenv("ATTNC_NCCL");
  ::setenv("PATH", ((onPath / "bin").string() + ":" + oldPath).c_str(), 1);
  ::setenv("VIRTUAL_ENV", virtualEnv.c_str(), 1);
  std::vector<std::pair<std::string, std::string>> found = dist::ncclCandidates();
  ::setenv("ATTNC_NCCL", "/nowhere/libnccl.so.2", 1);
  std::vector<std::pair<std::string, std::string>> named = dist::ncclCandidates();
  ::setenv("PATH", oldPath.c_str(), 1);
  ::unsetenv("VIRTUAL_ENV");
  if (oldNccl)
    ::setenv("ATTNC_NCCL", savedNccl.c_str(), 1);
  else
    ::unsetenv("ATTNC_NCCL");
  fs::remove_all(root);

  ASSERT_GE(found.size(), 4u);
  const auto &venv = found[found.size() - 2], &path = found.back();
  EXPECT_EQ(venv.first,
            (virtualEnv / "lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2").string());
  EXPECT_TRUE(contains(venv.second, "$VIRTUAL_ENV")) << venv.second;
  EXPECT_EQ(path.first,
            (onPath / "lib/python3.12/site-packages/nvidia/nccl/lib/libnccl.so.2").string());
  EXPECT_TRUE(contains(path.second, "first on PATH")) << path.second;
  // The toolkit and the loader come before the wheels.
  size_t loader = found.size();
  for (size_t i = 0; i < found.size(); ++i)
    if (found[i].second == "the loader's search")
      loader = i;
  EXPECT_LT(loader, found.size() - 2);
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].first, "/nowhere/libnccl.so.2");
}

// Where the toolkit has NCCL (this machine's does), it loads and a unique
// id comes from its bootstrap; without one, the error says where it looked.
TEST(Nccl, LoadsOrSaysWhereItLooked) {
  Expected<const dist::NcclLibrary *> nccl = dist::loadNccl();
  if (!nccl) {
    EXPECT_TRUE(contains(nccl.error(), "NCCL not found")) << nccl.error();
    EXPECT_TRUE(contains(nccl.error(), "ATTNC_NCCL")) << nccl.error();
    GTEST_SKIP() << nccl.error();
  }
  const dist::NcclLibrary &lib = **nccl;
  EXPECT_GE(lib.version, 2700);
  EXPECT_EQ(lib.versionString().substr(0, 2), "2.") << lib.versionString();
  EXPECT_FALSE(lib.path.empty());
#ifdef ATTNC_HAVE_NCCL_H
  if (lib.origin.find("toolkit") != std::string::npos) {
    EXPECT_EQ(lib.version, NCCL_VERSION_CODE);
  }
#endif
  Expected<dist::NcclUniqueId> a = dist::ncclUniqueId(lib), b = dist::ncclUniqueId(lib);
  if (!a)
    GTEST_SKIP() << "no unique id on this machine: " << a.error();
  ASSERT_TRUE(b.ok()) << b.error();
  EXPECT_NE(std::memcmp(a->bytes, b->bytes, sizeof a->bytes), 0) << "two ids are the same";
}

TEST(Nccl, VersionStrings) {
  dist::NcclLibrary l;
  l.version = 22809;
  EXPECT_EQ(l.versionString(), "2.28.9");
  l.version = 2708; // before 2.9: X·1000 + Y·100 + Z
  EXPECT_EQ(l.versionString(), "2.7.8");
}

// A one-rank world on the GPU: the id goes through the world's all-gather,
// then each collective on device buffers against values computed on the
// host (dist::checkCollectives, which `attnc-rt info --collectives` runs).
TEST(NcclGpu, OneRankCollectives) {
  if (!Driver::available() || *deviceCount() == 0)
    GTEST_SKIP() << "no GPU: " << Driver::available().error();
  std::unique_ptr<dist::Communicator> world = dist::singleProcess();
  Expected<std::string> report = dist::checkCollectives(*world);
  ASSERT_TRUE(report.ok()) << report.error();
  EXPECT_TRUE(contains(*report, "1 rank, all-reduce, all-gather and all-to-all of 1 MiB correct"))
      << *report;
}

// Without a GPU the check says so (and what it needs) instead of failing
// somewhere inside NCCL.
TEST(Nccl, CollectivesWithoutAGpuSaySo) {
  if (Driver::available() && *deviceCount() > 0)
    GTEST_SKIP() << "a GPU is present";
  std::unique_ptr<dist::Communicator> world = dist::singleProcess();
  Expected<std::string> report = dist::checkCollectives(*world);
  ASSERT_FALSE(report.ok());
  EXPECT_TRUE(contains(report.error(), "no GPU") || contains(report.error(), "NCCL not found"))
      << report.error();
}
