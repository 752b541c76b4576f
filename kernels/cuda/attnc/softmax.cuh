//===- softmax.cuh - Online softmax over accumulator rows -----------------===//
//
// A thread holds two rows of each score tile (its lo and hi rows, at the
// places the tile's accumulator layout L says, see mma.cuh); the four lanes
// holding a row agree on its running maximum after every tile and keep the
// running sum split into four thread-local parts, summed once at the end
// (FlashAttention-2). Scores are in log2 units (x = s * log2 e) so
// each probability is one exp2f.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_SOFTMAX_CUH
#define ATTNC_CUDA_SOFTMAX_CUH

#include "attnc/common.cuh"

namespace attnc {

template <class L> struct OnlineSoftmax {
  float m[2]; ///< running row maximum (log2 units), -inf while nothing kept
  float l[2]; ///< this thread's part of the row's sum of 2^(x - m)

  ATTNC_HD void init() {
    m[0] = m[1] = negInf();
    l[0] = l[1] = 0.f;
  }

  /// Folds in a score tile x (log2 units, masked entries -inf): rescales the
  /// output accumulator o and the sums to the new maximum and replaces x by
  /// the unnormalised probabilities 2^(x - m).
  template <int NS, int NO> ATTNC_HD void update(float (&x)[NS][4], float (&o)[NO][4]) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = m[r];
#pragma unroll
      for (int n = 0; n < NS; ++n)
        mx = fmaxf(mx, fmaxf(x[n][2 * r], x[n][2 * r + 1]));
      mx = L::rowMax(mx);
      // While a row has no kept key its maximum stays -inf; subtracting 0
      // then avoids -inf - -inf = NaN (every term is 2^-inf = 0 anyway).
      const float base = mx == negInf() ? 0.f : mx;
      const float alpha = exp2f(m[r] - base); // 0 for the first kept tile
      m[r] = mx;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < NS; ++n) {
        x[n][2 * r] = exp2f(x[n][2 * r] - base);
        x[n][2 * r + 1] = exp2f(x[n][2 * r + 1] - base);
        sum += x[n][2 * r] + x[n][2 * r + 1];
      }
      l[r] = l[r] * alpha + sum;
#pragma unroll
      for (int n = 0; n < NO; ++n) {
        o[n][2 * r] *= alpha;
        o[n][2 * r + 1] *= alpha;
      }
    }
  }

  /// The rows' final scale for O (1 / sum; 0 for a row with no kept key,
  /// whose O is 0) and log-sum-exp (natural log; -inf for such a row).
  ATTNC_HD void finish(float (&inv)[2], float (&lse)[2]) const {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const float sum = L::rowSum(l[r]);
      const bool any = sum > 0.f;
      inv[r] = any ? 1.f / sum : 0.f;
      lse[r] = any ? (m[r] + log2f(sum)) * kLn2 : negInf();
    }
  }
};

} // namespace attnc

#endif // ATTNC_CUDA_SOFTMAX_CUH
