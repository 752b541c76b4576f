//===- DeviceSupportTest.cpp - The kernels around the attention kernels ---===//
//
// kernels/cuda/attnc/device_support.cuh, no GPU needed:
//
// NVRTC builds. The runtime's module of the header
// (CudaAttention::deviceSupportSource), for sm_70 (CUDA 12 NVRTC), sm_75,
// sm_80 and sm_90: ptxas must report no spills and no stack frame.
//
// Numerics on the SIMT emulator. strided_gemm against a double-precision
// evaluation of StridedGemmArgs' definition, in each of the shapes the
// low-rank projections use it (E·K with E shared and per head, Eᵀ·dK',
// dE summed over the batch as terms, accumulated into with beta 1), on
// sizes that are not multiples of its tile or depth, under three
// schedules compared bit for bit; beta 0 must not read C (NaN-filled).
// convert against the host's fp16 / bf16 rounding (runtime/HalfFloat.h),
// bit for bit, on a count that is not a multiple of a block.
//
//===----------------------------------------------------------------------===//
#include "runtime/CudaAttention.h"
#include "runtime/HalfFloat.h"
#include "runtime/NvrtcCompiler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

using namespace attnc;

namespace {

//===----------------------------------------------------------------------===//
// NVRTC builds
//===----------------------------------------------------------------------===//

class DeviceSupportNvrtc : public testing::TestWithParam<const char *> {};

TEST_P(DeviceSupportNvrtc, CompilesWithoutSpills) {
  NvrtcCompiler nvrtc; // no cache: always a real compile
  NvrtcOptions o;
  o.arch = GetParam();
  o.includeDirs = {std::string(ATTNC_SOURCE_DIR) + "/kernels/abi",
                   std::string(ATTNC_SOURCE_DIR) + "/kernels/common",
                   std::string(ATTNC_SOURCE_DIR) + "/kernels/cuda"};
  // The module the runtime builds.
  Expected<Cubin> c =
      nvrtc.compile("attnc_device_support.cu", CudaAttention::deviceSupportSource(), o);
  ASSERT_TRUE(c.ok()) << c.error();
  for (const char *name :
       {"attnc_strided_gemm", "attnc_strided_gemm_mma_f16_kk", "attnc_strided_gemm_mma_f16_kn",
        "attnc_strided_gemm_mma_f16_mk", "attnc_strided_gemm_mma_f16_mn",
        "attnc_strided_gemm_mma_bf16_kk", "attnc_strided_gemm_mma_bf16_kn",
        "attnc_strided_gemm_mma_bf16_mk", "attnc_strided_gemm_mma_bf16_mn",
        "attnc_strided_gemm_reduce", "attnc_convert_f32_f16", "attnc_convert_f16_f32",
        "attnc_convert_f32_bf16", "attnc_convert_bf16_f32"}) {
    SCOPED_TRACE(name);
    const KernelResources *k = c->kernel(name);
    ASSERT_NE(k, nullptr) << c->log;
    std::printf("%s %-24s %3d regs  %d spill st  %d spill ld  %d stack  smem %d\n", GetParam(),
                name, k->registers, k->spillStoreBytes, k->spillLoadBytes, k->stackFrameBytes,
                k->staticSmemBytes);
    EXPECT_FALSE(k->spills());
    EXPECT_EQ(k->stackFrameBytes, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Archs, DeviceSupportNvrtc,
                         testing::Values("sm_70", "sm_75", "sm_80", "sm_90"),
                         [](const testing::TestParamInfo<const char *> &i) {
                           return std::string(i.param);
                         });

} // namespace

//===----------------------------------------------------------------------===//
// The kernels on the emulator
//===----------------------------------------------------------------------===//

#include "attnc/tensor_core_emulator.h" // mma.cuh (device_support.cuh includes it)

#include "attnc/device_support.cuh"

#include "test/unit/support/StridedGemmReference.h"

namespace {

using attnc::ConvertArgs;
using attnc::StridedGemmArgs;

using attnc::test::randomFloats;

/// Runs `g` over `batches` on C = `cInit` under three schedules: the first
/// against the reference (1e-5 of the largest), the others bit for bit
/// with the first. Returns the first result.
std::vector<float> checkGemm(StridedGemmArgs g, long long batches,
                             const std::vector<float> &cInit) {
  const std::vector<double> want =
      attnc::test::referenceGemm(g, batches, cInit, [](float x) { return x; });
  g.batches = batches;
  return attnc::test::checkUnderSchedules(want, cInit, 1e-5, [&](std::vector<float> &c) {
    g.c = c.data();
    return emu::launch(attnc::tile::simtGemmGrid(g), 1, attnc::kStridedGemmThreads,
                       [&] { attnc::strided_gemm(g); });
  });
}

// Sizes of none of the tile's or depth's multiples: B batch, H heads, N
// keys of E's Nmax columns, K projected rows, D head dim.
constexpr long long B = 2, H = 3, N = 37, Nmax = 40, K = 11, D = 24;

TEST(DeviceSupportEmu, ProjectsKeysWithEPerHeadAndShared) {
  std::mt19937 rng(1);
  for (bool perHead : {true, false}) {
    SCOPED_TRACE(perHead ? "E per head" : "E shared");
    const std::vector<float> e = randomFloats(size_t((perHead ? H : 1) * K * Nmax), rng);
    const std::vector<float> x = randomFloats(size_t(B * H * N * D), rng);
    StridedGemmArgs g{}; // xp[b, h] = E_h[:, :N] · x[b, h]
    g.a = e.data(), g.b = x.data();
    g.m = K, g.n = D, g.k = N;
    g.a_row = Nmax, g.a_col = 1, g.b_row = D, g.b_col = 1, g.c_row = D, g.c_col = 1;
    g.a_batch = perHead ? K * Nmax : 0, g.a_batch_mod = H, g.b_batch = N * D, g.c_batch = K * D;
    g.terms = 1, g.beta = 0;
    // beta 0 writes C without reading it: NaN before must not matter.
    checkGemm(g, B * H, std::vector<float>(size_t(B * H * K * D), std::nanf("")));
  }
}

TEST(DeviceSupportEmu, ProjectsGradientsBackThroughETransposed) {
  std::mt19937 rng(2);
  const std::vector<float> e = randomFloats(size_t(H * K * Nmax), rng);
  const std::vector<float> dxp = randomFloats(size_t(B * H * K * D), rng);
  StridedGemmArgs g{}; // dx[b, h] = E_h[:, :N]ᵀ · dxp[b, h]
  g.a = e.data(), g.b = dxp.data();
  g.m = N, g.n = D, g.k = K;
  g.a_row = 1, g.a_col = Nmax, g.b_row = D, g.b_col = 1, g.c_row = D, g.c_col = 1;
  g.a_batch = K * Nmax, g.a_batch_mod = H, g.b_batch = K * D, g.c_batch = N * D;
  g.terms = 1, g.beta = 0;
  checkGemm(g, B * H, std::vector<float>(size_t(B * H * N * D), std::nanf("")));
}

TEST(DeviceSupportEmu, SumsTheWeightGradientOverTheBatch) {
  std::mt19937 rng(3);
  const std::vector<float> dxp = randomFloats(size_t(B * H * K * D), rng);
  const std::vector<float> x = randomFloats(size_t(B * H * N * D), rng);
  for (bool perHead : {true, false}) {
    SCOPED_TRACE(perHead ? "dE per head" : "dE shared");
    StridedGemmArgs g{}; // dE_g[:, :N] += Σ dxp[b, h] · x[b, h]ᵀ
    g.a = dxp.data(), g.b = x.data();
    g.m = K, g.n = N, g.k = D;
    g.a_row = D, g.a_col = 1, g.b_row = 1, g.b_col = D, g.c_row = Nmax, g.c_col = 1;
    g.beta = 1;
    long long batches = 1;
    if (perHead) { // batch h, term b
      g.a_batch = K * D, g.a_batch_mod = H, g.b_batch = N * D, g.c_batch = K * Nmax;
      g.terms = int(B), g.a_term = H * K * D, g.b_term = H * N * D;
      batches = H;
    } else { // one batch, a term per (b, h)
      g.a_batch_mod = 1, g.terms = int(B * H), g.a_term = K * D, g.b_term = N * D;
    }
    // Accumulated into what is there; columns N..Nmax-1 untouched.
    const std::vector<float> before = randomFloats(size_t(batches * K * Nmax), rng);
    const std::vector<float> after = checkGemm(g, batches, before);
    for (long long z = 0; z < batches; ++z)
      for (long long r = 0; r < K; ++r)
        for (long long col = N; col < Nmax; ++col) {
          const size_t i = size_t(z * K * Nmax + r * Nmax + col);
          EXPECT_EQ(after[i], before[i]) << "column " << col << " was written";
        }
  }
}

/// convert<In, Out> over n elements on the emulator.
template <class In, class Out> void convertOnEmulator(const In *in, Out *out, long long n) {
  ConvertArgs a{in, out, n};
  const long long perBlock = attnc::kConvertThreads * attnc::kConvertPerThread;
  ASSERT_TRUE(emu::launch((n + perBlock - 1) / perBlock, 1, attnc::kConvertThreads, [&] {
    attnc::convert<In, Out>(a);
  })) << emu::lastError;
}

TEST(DeviceSupportEmu, ConvertsAsTheHostRounds) {
  std::mt19937 rng(4);
  const long long n = 2 * 1024 + 37; // a partial last block
  std::vector<float> x = randomFloats(size_t(n), rng);
  x[0] = 70000.0f; // beyond fp16: inf
  x[1] = 1e-6f;    // an fp16 subnormal
  x[2] = std::numeric_limits<float>::quiet_NaN();
  // fp16
  std::vector<__half> h(static_cast<size_t>(n));
  std::vector<float> back(static_cast<size_t>(n));
  convertOnEmulator(x.data(), h.data(), n);
  convertOnEmulator(h.data(), back.data(), n);
  for (long long i = 0; i < n; ++i) {
    uint16_t bits;
    std::memcpy(&bits, &h[size_t(i)], 2);
    if (i == 2) { // NaN stays NaN; its payload is each side's business
      ASSERT_TRUE(std::isnan(back[size_t(i)]));
      continue;
    }
    ASSERT_EQ(bits, attnc::half::toHalf(x[size_t(i)])) << "element " << i << " = " << x[size_t(i)];
    ASSERT_EQ(back[size_t(i)], attnc::half::fromHalf(bits)) << "element " << i;
  }
  EXPECT_TRUE(std::isinf(back[0])) << "70000 is beyond fp16";
  EXPECT_GT(back[1], 0.0f) << "1e-6 is an fp16 subnormal";
  // bf16
  std::vector<__nv_bfloat16> bf(static_cast<size_t>(n));
  convertOnEmulator(x.data(), bf.data(), n);
  convertOnEmulator(bf.data(), back.data(), n);
  for (long long i = 0; i < n; ++i) {
    uint16_t bits;
    std::memcpy(&bits, &bf[size_t(i)], 2);
    if (i == 2) { // NaN stays NaN; its payload is each side's business
      ASSERT_TRUE(std::isnan(back[size_t(i)]));
      continue;
    }
    ASSERT_EQ(bits, attnc::half::toBf16(x[size_t(i)])) << "element " << i;
    ASSERT_EQ(back[size_t(i)], attnc::half::fromBf16(bits)) << "element " << i;
  }
}

} // namespace
