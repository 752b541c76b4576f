//===- CrossEntropy.cpp - Softmax cross-entropy over logits ---------------===//
#include "runtime/train/CrossEntropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace attnc::train {

CrossEntropy softmaxCrossEntropy(const float *logits, const int32_t *targets, float *dlogits,
                                 int64_t rows, int vocab, float gradScale) {
  CrossEntropy ce;
  if (rows <= 0 || vocab <= 0)
    return ce;
  // Per-row losses, summed in row order afterwards. Targets outside
  // [0, vocab) (−1 by convention) are ignored rows.
  std::vector<double> loss(static_cast<size_t>(rows));
  std::vector<unsigned char> hit(static_cast<size_t>(rows));
#pragma omp parallel for schedule(static) if (rows * vocab > 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float *l = logits + r * vocab;
    int32_t t = targets[r];
    bool counted = t >= 0 && t < vocab;
    float *d = dlogits ? dlogits + r * vocab : nullptr;
    if (!counted) {
      loss[size_t(r)] = 0;
      hit[size_t(r)] = 0;
      if (d)
        std::fill(d, d + vocab, 0.0f);
      continue;
    }
    int am = 0;
    float m = l[0];
    for (int j = 1; j < vocab; ++j)
      if (l[j] > m) {
        m = l[j];
        am = j;
      }
    double s = 0;
    for (int j = 0; j < vocab; ++j)
      s += std::exp(double(l[j]) - m);
    loss[size_t(r)] = (double(m) + std::log(s)) - double(l[t]);
    hit[size_t(r)] = am == t;
    if (d) {
      double inv = 1.0 / s;
      for (int j = 0; j < vocab; ++j)
        d[j] = float(std::exp(double(l[j]) - m) * inv) * gradScale;
      d[t] = float(std::exp(double(l[t]) - m) * inv - 1.0) * gradScale;
    }
  }
  for (int64_t r = 0; r < rows; ++r) {
    if (!(targets[r] >= 0 && targets[r] < vocab))
      continue;
    ce.lossSum += loss[size_t(r)];
    ++ce.count;
    ce.correct += hit[size_t(r)];
  }
  return ce;
}

} // namespace attnc::train
