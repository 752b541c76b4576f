//===- DeviceOptimizer.cpp - Host side of the device AdamW kernels --------===//
#include "runtime/train/DeviceOptimizer.h"

#include <algorithm>
#include <cmath>

namespace attnc::train {

OptAdamWArgs adamWStepArgs(const AdamWConfig &c, int64_t step) {
  // The same expressions, types and rounding as AdamW::step.
  const double lr = learningRate(c, step);
  const double t = static_cast<double>(step + 1);
  OptAdamWArgs a{};
  a.lr = static_cast<float>(lr);
  a.beta1 = c.beta1;
  a.beta2 = c.beta2;
  a.one_minus_beta1 = 1.0f - c.beta1;
  a.one_minus_beta2 = 1.0f - c.beta2;
  a.inv_bias_correction1 =
      static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(c.beta1), t)));
  a.inv_bias_correction2 =
      static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(c.beta2), t)));
  a.eps = c.eps;
  a.decay_factor = static_cast<float>(1.0 - lr * static_cast<double>(c.weightDecay));
  a.copy_type = opt::kCopyNone;
  return a;
}

Expected<std::vector<long long>> decayRanges(const std::vector<FlatSegment> &segments, int64_t n) {
  std::vector<const FlatSegment *> sorted;
  for (const FlatSegment &s : segments) {
    if (s.size < 0 || s.offset < 0 || s.offset > n || s.size > n - s.offset)
      return makeError("parameter '" + s.name + "' at elements [" + std::to_string(s.offset) +
                       ", " + std::to_string(s.offset + s.size) +
                       ") is outside the flat buffer of " + std::to_string(n) + " elements");
    if (s.size > 0)
      sorted.push_back(&s);
  }
  std::stable_sort(sorted.begin(), sorted.end(), [](const FlatSegment *a, const FlatSegment *b) {
    return a->offset < b->offset;
  });
  std::vector<long long> ranges;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const FlatSegment &s = *sorted[i];
    if (i > 0 && sorted[i - 1]->offset + sorted[i - 1]->size > s.offset)
      return makeError("parameters '" + sorted[i - 1]->name + "' and '" + s.name +
                       "' overlap in the flat buffer");
    if (!s.decay)
      continue;
    if (!ranges.empty() && ranges.back() == s.offset)
      ranges.back() = s.offset + s.size; // adjacent: one range
    else {
      ranges.push_back(s.offset);
      ranges.push_back(s.offset + s.size);
    }
  }
  return ranges;
}

} // namespace attnc::train
