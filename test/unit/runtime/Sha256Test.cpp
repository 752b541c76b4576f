//===- Sha256Test.cpp - SHA-256 against the FIPS 180-4 vectors ------------===//
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

} // namespace
