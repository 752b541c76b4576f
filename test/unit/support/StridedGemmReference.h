//===- StridedGemmReference.h - StridedGemmArgs' definition in double -----===//
//
// What the device support GEMMs (kernels/cuda/attnc/device_support.cuh)
// must compute, written from the comment on attnc/abi/KernelArgs.h's
// StridedGemmArgs, not from the kernels: C_z = beta·C_z + Σ_t A_(z,t)·B_(z,t)
// with the key-padding axis read as zero past its length. Each operand
// element passes through `round` first (the identity for the fp32 GEMM;
// the kernel type's rounding for the tensor-core one), then the sum runs in
// double. checkUnderSchedules runs a GEMM on the block emulator against it.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_TEST_UNIT_STRIDEDGEMMREFERENCE_H
#define ATTNC_TEST_UNIT_STRIDEDGEMMREFERENCE_H

#include "attnc/abi/KernelArgs.h"
#include "attnc/simt_emulator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace attnc::test {

/// C of `g` over `batches`, starting from cBefore (read only with beta != 0).
template <class Round>
std::vector<double> referenceGemm(const StridedGemmArgs &g, long long batches,
                                  const std::vector<float> &cBefore, Round round) {
  std::vector<double> c(cBefore.size());
  for (size_t i = 0; i < c.size(); ++i)
    c[i] = g.beta == 0.0f ? 0.0 : double(cBefore[i]);
  for (long long z = 0; z < batches; ++z)
    for (long long r = 0; r < g.m; ++r)
      for (long long col = 0; col < g.n; ++col) {
        double s = 0;
        for (long long t = 0; t < g.terms; ++t) {
          long long len = std::numeric_limits<long long>::max();
          if (g.seq_lengths)
            len = std::max(0, g.seq_lengths[(z * g.seq_z_scale + t) / g.seq_div]);
          if ((g.seq_axis == kGemmSeqRowsOfA && r >= len) ||
              (g.seq_axis == kGemmSeqColumnsOfB && col >= len))
            continue;
          const float *a = g.a + (z % g.a_batch_mod) * g.a_batch + t * g.a_term;
          const float *b = g.b + z * g.b_batch + t * g.b_term;
          const long long depth = g.seq_axis == kGemmSeqDepth ? std::min(g.k, len) : g.k;
          for (long long k = 0; k < depth; ++k)
            s += double(round(a[r * g.a_row + k * g.a_col])) *
                 double(round(b[k * g.b_row + col * g.b_col]));
        }
        double &dst = c[size_t(z * g.c_batch + r * g.c_row + col * g.c_col)];
        dst = g.beta * dst + s;
      }
  return c;
}

inline std::vector<float> randomFloats(size_t n, std::mt19937 &rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = nd(rng);
  return v;
}

/// Runs `launch(c)` (true on success; c starts as cInit) under three
/// emulator schedules: the first result against `want`, within `bound` of
/// its largest element, the others bit for bit with the first (the sums
/// are deterministic). Returns the first result.
template <class Launch>
std::vector<float> checkUnderSchedules(const std::vector<double> &want,
                                       const std::vector<float> &cInit, double bound,
                                       Launch launch) {
  std::vector<float> first;
  for (const emu::Schedule &s :
       {emu::indexSchedule(), emu::reverseSchedule(), emu::randomSchedule(7)}) {
    emu::ScheduleScope scope(s);
    std::vector<float> c = cInit;
    EXPECT_TRUE(launch(c)) << emu::lastError;
    if (first.empty()) {
      double worst = 0, largest = 1e-30;
      for (size_t i = 0; i < c.size(); ++i) {
        EXPECT_TRUE(std::isfinite(c[i])) << "C[" << i << "] = " << c[i];
        worst = std::max(worst, std::fabs(double(c[i]) - want[i]));
        largest = std::max(largest, std::fabs(want[i]));
      }
      EXPECT_LE(worst, bound * largest) << "worst error " << worst << " of largest " << largest;
      first = c;
    } else {
      EXPECT_EQ(0, std::memcmp(first.data(), c.data(), c.size() * 4))
          << "schedule " << s.name() << " differs from index";
    }
  }
  return first;
}

} // namespace attnc::test

#endif // ATTNC_TEST_UNIT_STRIDEDGEMMREFERENCE_H
