//===- BenchCommon.h - Helpers shared by the attnc bench modes --*- C++ -*-===//
#ifndef ATTNC_TOOLS_ATTNC_BENCHCOMMON_H
#define ATTNC_TOOLS_ATTNC_BENCHCOMMON_H

#include "runtime/Safetensors.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace attnc::driver::bench {

using Clock = std::chrono::steady_clock;

/// Median wall time of `repeats` calls after one warm-up, in milliseconds.
template <typename Fn> double medianMs(int repeats, Fn &&fn) {
  fn(); // warm-up
  std::vector<double> t;
  for (int i = 0; i < repeats; ++i) {
    auto a = Clock::now();
    fn();
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

inline st::Tensor randomTensor(std::vector<int64_t> shape, std::mt19937 &rng, float scale) {
  std::normal_distribution<float> dist(0.f, scale);
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return st::Tensor::f32(std::move(shape), v);
}

inline std::string fmt(double v, int prec = 2) {
  if (std::isnan(v))
    return "-";
  std::ostringstream os;
  os << std::fixed << std::setprecision(prec) << v;
  return os.str();
}

} // namespace attnc::driver::bench

#endif // ATTNC_TOOLS_ATTNC_BENCHCOMMON_H
