//===- SafetensorsTest.cpp - safetensors reader/writer --------------------===//
#include "runtime/Safetensors.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>

using namespace attnc;

namespace {

st::File sample() {
  st::File f;
  f.tensors["q"] = st::Tensor::f32({2, 3}, {1, 2, 3, 4, 5, 6});
  f.tensors["lengths"] = st::Tensor::i32({2}, {3, 1});
  f.metadata["format"] = "pt";
  return f;
}

/// A safetensors image with `header` as its JSON and `data` after it.
std::vector<uint8_t> image(const std::string &header, size_t dataBytes) {
  std::vector<uint8_t> b(8 + header.size() + dataBytes, 0);
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i)
    b[i] = static_cast<uint8_t>(n >> (8 * i));
  std::copy(header.begin(), header.end(), b.begin() + 8);
  return b;
}

std::string parseError(const std::vector<uint8_t> &bytes) {
  st::File f;
  std::string err;
  EXPECT_FALSE(st::parse(bytes, "in.safetensors", f, err));
  return err;
}

} // namespace

TEST(Safetensors, RoundTripsThroughMemory) {
  st::File f = sample();
  st::File g;
  std::string err;
  ASSERT_TRUE(st::parse(st::serialize(f), "mem", g, err)) << err;
  ASSERT_EQ(g.tensors.size(), 2u);
  EXPECT_EQ(g.tensors["q"].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(g.tensors["q"].asF32(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(g.tensors["lengths"].dtype, st::DType::I32);
  EXPECT_EQ(g.metadata["format"], "pt");
}

TEST(Safetensors, HeaderIsEightByteAligned) {
  std::vector<uint8_t> b = st::serialize(sample());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | b[i];
  EXPECT_EQ(n % 8, 0u);
}

TEST(Safetensors, AtomicWriteReplacesFile) {
  auto dir = std::filesystem::temp_directory_path() / "attnc-st-test";
  std::filesystem::create_directories(dir);
  std::string path = (dir / "t.safetensors").string();
  std::string err;
  ASSERT_TRUE(st::write(path, sample(), err)) << err;
  st::File g;
  ASSERT_TRUE(st::read(path, g, err)) << err;
  EXPECT_EQ(g.tensors["q"].numel(), 6);
  for (auto &e : std::filesystem::directory_iterator(dir))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos)
        << "temporary file left behind: " << e.path();
  std::filesystem::remove_all(dir);
}

TEST(Safetensors, MissingFileNamesThePath) {
  st::File f;
  std::string err;
  EXPECT_FALSE(st::read("/nonexistent/x.safetensors", f, err));
  EXPECT_NE(err.find("/nonexistent/x.safetensors"), std::string::npos);
}

TEST(Safetensors, RejectsTruncatedFile) {
  EXPECT_NE(parseError({1, 2, 3}).find("fewer than the 8-byte"), std::string::npos);
}

TEST(Safetensors, RejectsHeaderLongerThanFile) {
  std::vector<uint8_t> b = image("{}", 0);
  b[0] = 0xff;
  EXPECT_NE(parseError(b).find("exceeds the file size"), std::string::npos);
}

TEST(Safetensors, RejectsNonJsonHeader) {
  EXPECT_NE(parseError(image("{not json", 0)).find("not a JSON object"), std::string::npos);
}

TEST(Safetensors, RejectsSizeMismatchNamingTheTensor) {
  std::string err =
      parseError(image(R"({"q":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]}})", 12));
  EXPECT_NE(err.find("tensor 'q'"), std::string::npos) << err;
  EXPECT_NE(err.find("needs 16"), std::string::npos) << err;
}

TEST(Safetensors, RejectsOffsetsOutsideData) {
  std::string err =
      parseError(image(R"({"k":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8));
  EXPECT_NE(err.find("tensor 'k'"), std::string::npos) << err;
  EXPECT_NE(err.find("outside the data section"), std::string::npos) << err;
}

TEST(Safetensors, RejectsUnknownDtype) {
  std::string err =
      parseError(image(R"({"v":{"dtype":"F8_E9","shape":[1],"data_offsets":[0,1]}})", 1));
  EXPECT_NE(err.find("unsupported dtype"), std::string::npos) << err;
}

TEST(Safetensors, RejectsOverlappingTensors) {
  std::string err = parseError(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                     R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                     12));
  EXPECT_NE(err.find("overlap"), std::string::npos) << err;
}

TEST(Safetensors, RejectsNegativeDimension) {
  std::string err =
      parseError(image(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}})", 0));
  EXPECT_NE(err.find("invalid dimension"), std::string::npos) << err;
}
