//===- LowRankGemmTest.cpp - The low-rank GEMMs on the emulator ------------===//
//
// The three GEMMs of a low-rank variant (attnc/abi/ProjectionTileModel.h:
// K' = E·K, dK = Eᵀ·dK', dE = Σ dK'·Kᵀ), with E per head and shared, with
// and without key-padding lengths, on both kernels of
// kernels/cuda/attnc/device_support.cuh:
//
// - strided_gemm_mma<T> for fp16 and bf16, split or not (then
//   strided_gemm_reduce), against test/unit/support/StridedGemmReference.h
//   with the operands rounded to T as the host rounds (runtime/HalfFloat.h):
//   only the fp32 accumulation order differs, so 2e-5 of the largest
//   element is the bound;
// - strided_gemm (fp32) against the same reference unrounded, 1e-5.
//
// Each runs under three emulator schedules, which must agree bit for bit:
// the sums are deterministic. Built twice (test/unit/kernels/CMakeLists.txt):
// on the m16n8k16 path, and with ATTNC_EMULATE_ARCH=700 on Volta's (fp16 on
// m8n8k4, bf16 on SIMT).
//
//===----------------------------------------------------------------------===//
#include "runtime/HalfFloat.h"

#include <gtest/gtest.h>

#include "attnc/tensor_core_emulator.h"

#include "attnc/device_support.cuh"

#include "test/unit/support/StridedGemmReference.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace {

using attnc::StridedGemmArgs;
using attnc::test::randomFloats;
using namespace attnc::tile;

enum class Kernel { Simt, Fp16, Bf16 };

const char *nameOf(Kernel k) {
  return k == Kernel::Simt ? "fp32 SIMT" : k == Kernel::Fp16 ? "fp16" : "bf16";
}

float roundFor(Kernel k, float x) {
  if (k == Kernel::Fp16)
    return attnc::half::fromHalf(attnc::half::toHalf(x));
  if (k == Kernel::Bf16)
    return attnc::half::fromBf16(attnc::half::toBf16(x));
  return x;
}

/// strided_gemm_mma for g's layout, as the runtime picks its entry.
template <class T> void gemmMma(const StridedGemmArgs &g) {
  const std::string layout = projLayout(g);
  if (layout == "kk")
    attnc::strided_gemm_mma<T, true, true>(g);
  else if (layout == "kn")
    attnc::strided_gemm_mma<T, true, false>(g);
  else if (layout == "mk")
    attnc::strided_gemm_mma<T, false, true>(g);
  else
    attnc::strided_gemm_mma<T, false, false>(g);
}

/// One run of `g` on C = c with `kernel`: the mma GEMM and, split, the
/// reduction of its parts.
bool launch(Kernel kernel, StridedGemmArgs g, std::vector<float> &c) {
  g.c = c.data();
  if (kernel == Kernel::Simt)
    return emu::launch(simtGemmGrid(g), 1, attnc::kStridedGemmThreads,
                       [&] { attnc::strided_gemm(g); });
  std::vector<float> partial(size_t(std::max(projPartialFloats(g), 1LL)), std::nanf(""));
  g.partial = partial.data();
  const bool ok = emu::launch(projGrid(g), 1, kProjThreads, [&] {
    if (kernel == Kernel::Fp16)
      gemmMma<__half>(g);
    else
      gemmMma<__nv_bfloat16>(g);
  });
  if (!ok || g.splits <= 1)
    return ok;
  return emu::launch(projReduceGrid(g), 1, kProjReduceThreads,
                     [&] { attnc::strided_gemm_reduce(g); });
}

/// Runs `g` under three schedules: the first against the reference, the
/// others bit for bit with it. Returns the first result.
std::vector<float> check(Kernel kernel, const StridedGemmArgs &g, const std::vector<float> &cInit) {
  const std::vector<double> want = attnc::test::referenceGemm(
      g, g.batches, cInit, [kernel](float x) { return roundFor(kernel, x); });
  return attnc::test::checkUnderSchedules(
      want, cInit, kernel == Kernel::Simt ? 1e-5 : 2e-5,
      [&](std::vector<float> &c) { return launch(kernel, g, c); });
}

/// A low-rank variant's three GEMMs on random operands, C NaN-filled where
/// beta 0 must not read it; dE accumulates into random values, and its
/// columns past N stay as they were.
void checkLowRank(Kernel kernel, const LowRankShape &s, const std::vector<int> &lengths,
                  unsigned seed) {
  SCOPED_TRACE(std::string(nameOf(kernel)) + (s.perHead ? ", E per head" : ", E shared") +
               (lengths.empty() ? "" : ", key padding") + ", N " + std::to_string(s.N) +
               ", kProj " + std::to_string(s.kProj) + ", D " + std::to_string(s.D));
  std::mt19937 rng(seed);
  const long long eRows = (s.perHead ? s.H : 1) * s.kProj;
  const std::vector<float> e = randomFloats(size_t(eRows * s.Nmax), rng);
  const std::vector<float> x = randomFloats(size_t(s.B * s.H * s.N * s.D), rng);
  const std::vector<float> dxp = randomFloats(size_t(s.B * s.H * s.kProj * s.D), rng);
  const int *len = lengths.empty() ? nullptr : lengths.data();
  {
    SCOPED_TRACE("K' = E·K");
    StridedGemmArgs g = lowRankProject(s);
    g.a = e.data(), g.b = x.data(), g.seq_lengths = len;
    check(kernel, g, std::vector<float>(size_t(s.B * s.H * s.kProj * s.D), std::nanf("")));
  }
  {
    SCOPED_TRACE("dK = Eᵀ·dK'");
    StridedGemmArgs g = lowRankProjectBack(s);
    g.a = e.data(), g.b = dxp.data(), g.seq_lengths = len;
    const std::vector<float> dx =
        check(kernel, g, std::vector<float>(size_t(s.B * s.H * s.N * s.D), std::nanf("")));
    for (long long b = 0; len && b < s.B; ++b) // padded rows are written as zeros
      for (long long i = std::max(0, len[b]); i < s.N; ++i)
        ASSERT_EQ(dx[size_t((b * s.H * s.N + i) * s.D)], 0.0f) << "batch " << b << " row " << i;
  }
  {
    SCOPED_TRACE("dE += Σ dK'·Kᵀ");
    StridedGemmArgs g = lowRankWeightGrad(s);
    g.a = dxp.data(), g.b = x.data(), g.seq_lengths = len;
    const std::vector<float> before = randomFloats(size_t(eRows * s.Nmax), rng);
    const std::vector<float> after = check(kernel, g, before);
    for (long long r = 0; r < eRows; ++r)
      for (long long col = s.N; col < s.Nmax; ++col)
        ASSERT_EQ(after[size_t(r * s.Nmax + col)], before[size_t(r * s.Nmax + col)])
            << "column " << col << " was written";
  }
}

const Kernel kAll[] = {Kernel::Simt, Kernel::Fp16, Kernel::Bf16};

// Sizes of none of the tiles' or depth's multiples.
TEST(LowRankGemm, SmallShapesEveryKernel) {
  for (Kernel k : kAll)
    for (bool perHead : {true, false})
      checkLowRank(k, {2, 3, 37, 24, 11, 40, perHead}, {}, 1);
}

// Rows past a batch row's length take no part (one row fully padded, one
// partly, one not at all).
TEST(LowRankGemm, KeyPaddingEveryKernel) {
  for (Kernel k : kAll)
    for (bool perHead : {true, false})
      checkLowRank(k, {3, 2, 70, 40, 19, 72, perHead}, {70, 33, 0}, 2);
}

// K' = E·K at a long N and one (b, h): too few tiles, so the depth is split
// (the test's own check that it is) and the parts summed in order.
TEST(LowRankGemm, SplitDepthTensorCores) {
  const LowRankShape s{1, 1, 2100, 64, 70, 2112, false};
  ASSERT_GT(lowRankProject(s).splits, 1);
  ASSERT_GT(lowRankWeightGrad(s).splits, 0);
  for (Kernel k : {Kernel::Fp16, Kernel::Bf16})
    checkLowRank(k, s, {}, 3);
  checkLowRank(Kernel::Fp16, {2, 1, 2100, 64, 70, 2112, true}, {2100, 1500}, 4);
}

} // namespace
