//===- CApiTensor.h - attnc_tensor views for the C ABI's tests --*- C++ -*-===//
#ifndef ATTNC_TEST_UNIT_CAPITENSOR_H
#define ATTNC_TEST_UNIT_CAPITENSOR_H

#include "attnc/attnc.h"

#include <cstdint>
#include <random>
#include <vector>

namespace attnc::test {

/// A contiguous (row-major) view of `data` with `shape`.
inline attnc_tensor contiguousTensor(void *data, attnc_dtype dtype, attnc_device device,
                                     const std::vector<int64_t> &shape) {
  attnc_tensor t{};
  t.data = data, t.dtype = dtype, t.device = device;
  t.ndim = int(shape.size());
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.shape[d] = shape[size_t(d)], t.strides[d] = stride;
    stride *= shape[size_t(d)];
  }
  return t;
}

/// `n` draws of N(0, 1) from `seed`: the tests' inputs.
inline std::vector<float> randn(size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(n);
  for (float &x : v)
    x = nd(rng);
  return v;
}

} // namespace attnc::test

#endif // ATTNC_TEST_UNIT_CAPITENSOR_H
