//===- HalfFloatTest.cpp - The runtime's 16-bit conversions ---------------===//
//
// runtime/HalfFloat.h against cuda_fp16.h / cuda_bf16.h's own host
// conversions (round to nearest even): normal values, ties, subnormals,
// overflow to Inf, NaN. And the emulated CUDA step's GEMM input rounding
// built on them (runtime/train/StepDevice.h).
//
//===----------------------------------------------------------------------===//
#include "runtime/HalfFloat.h"
#include "runtime/train/StepDevice.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace {

std::vector<float> probes() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.5f,
                          65504.0f,
                          65519.0f,
                          65520.0f,
                          70000.0f,
                          -1e9f,
                          6.1035156e-05f,
                          5.9604645e-08f,
                          2.9802322e-08f,
                          2.9802326e-08f,
                          1e-10f,
                          1.0009766f,
                          1.0004883f,
                          1.0014648f,
                          3.0e38f,
                          1.00390625f,
                          1.01171875f, // bf16 ties: to even
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()};
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 20000; ++i) { // every exponent, random mantissas
    uint32_t b = bits(rng);
    // A third of them exact ties: halfway between two bf16 values, or
    // between two fp16 values (exponents fp16 keeps normal).
    if (i % 3 == 1)
      b = (b & 0xffff0000u) | 0x8000u;
    if (i % 3 == 2)
      b = (b & 0x80000000u) | ((103u + b % 40u) << 23) | (b & 0x007fe000u) | 0x1000u;
    float f;
    std::memcpy(&f, &b, 4);
    if (!std::isnan(f))
      v.push_back(f);
  }
  return v;
}

bool same(float a, float b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 4) == 0;
}

TEST(HalfFloat, Fp16MatchesCudaFp16) {
  for (float x : probes()) {
    const float ours = attnc::half::fromHalf(attnc::half::toHalf(x));
    const float cuda = __half2float(__float2half_rn(x));
    EXPECT_TRUE(same(ours, cuda)) << x << ": ours " << ours << ", cuda_fp16.h " << cuda;
  }
  EXPECT_TRUE(std::isnan(attnc::half::fromHalf(attnc::half::toHalf(std::nanf("")))));
}

TEST(HalfFloat, Bf16MatchesCudaBf16) {
  for (float x : probes()) {
    const float ours = attnc::half::fromBf16(attnc::half::toBf16(x));
    const float cuda = __bfloat162float(__float2bfloat16_rn(x));
    EXPECT_TRUE(same(ours, cuda)) << x << ": ours " << ours << ", cuda_bf16.h " << cuda;
  }
  EXPECT_TRUE(std::isnan(attnc::half::fromBf16(attnc::half::toBf16(std::nanf("")))));
}

TEST(HalfFloat, EmulatedGemmInputs) {
  using GemmMode = attnc::cuda::GemmPrecision;
  using attnc::train::roundGemmInput;
  EXPECT_EQ(roundGemmInput(1.0001f, GemmMode::F32), 1.0001f);
  // fp16: past 65504 (ties at 65520 go up) is Inf, so a loss scale can overflow.
  EXPECT_EQ(roundGemmInput(65504.0f, GemmMode::Fp16), 65504.0f);
  EXPECT_TRUE(std::isinf(roundGemmInput(65520.0f, GemmMode::Fp16)));
  EXPECT_EQ(roundGemmInput(1e-9f, GemmMode::Fp16), 0.0f);
  // bf16 keeps fp32's range with 8 significant bits; tf32 with 11.
  EXPECT_EQ(roundGemmInput(1e30f, GemmMode::Bf16), __bfloat162float(__float2bfloat16_rn(1e30f)));
  EXPECT_EQ(roundGemmInput(1.0f + 1.0f / 2048, GemmMode::Tf32), 1.0f); // a tie: to even
  EXPECT_EQ(roundGemmInput(1.0f + 3.0f / 2048, GemmMode::Tf32), 1.0f + 4.0f / 2048);
}

} // namespace
