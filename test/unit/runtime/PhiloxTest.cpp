//===- PhiloxTest.cpp - The counter-based generator behind LSH rotations --===//
#include "runtime/PhiloxDraws.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using attnc::philox::Block;

namespace {

Block kat(Block ctr, uint32_t k0, uint32_t k1) {
  return attnc::philox::philox4x32(ctr, (uint64_t(k1) << 32) | k0);
}

} // namespace

// Known-answer vectors of Philox4x32-10 (Random123's kat_vectors).
TEST(Philox, KnownAnswers) {
  EXPECT_EQ(kat({0, 0, 0, 0}, 0, 0), (Block{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(kat({0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, 0xffffffffu, 0xffffffffu),
            (Block{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(kat({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0xa4093822u, 0x299f31d0u),
            (Block{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

// The same (seed, stream, index) gives the same value in any order; seeds
// and streams give different values; the samples look standard normal.
TEST(Philox, NormalSamples) {
  std::vector<float> a(4096), b(4096);
  attnc::philox::lshRotations(7, 0, a);
  for (size_t i = a.size(); i-- > 0;)
    b[i] = attnc::philox::normal(7, 0, i);
  EXPECT_EQ(a, b);
  EXPECT_NE(attnc::philox::normal(7, 0, 3), attnc::philox::normal(8, 0, 3));
  EXPECT_NE(attnc::philox::normal(7, 0, 3), attnc::philox::normal(7, 1, 3));
  double mean = 0, var = 0;
  for (float x : a) {
    ASSERT_TRUE(std::isfinite(x));
    mean += x;
  }
  mean /= a.size();
  for (float x : a)
    var += (x - mean) * (x - mean);
  var /= a.size();
  EXPECT_NEAR(mean, 0.0, 0.06); // 4 standard errors
  EXPECT_NEAR(var, 1.0, 0.1);
}
