//===- Measure.cpp - The tuner's measuring half ----------------------------===//
#include "runtime/tune/Measure.h"

#include <algorithm>

namespace attnc::tune {

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::optional<Finalists> chooseAmongFinalists(size_t n, const std::function<double(size_t)> &time) {
  std::vector<std::vector<double>> rounds(n);
  for (int r = 0; r < 3; ++r)
    for (size_t i = 0; i < n; ++i) {
      double ms = time(i);
      if (ms < 0)
        return std::nullopt;
      rounds[i].push_back(ms);
    }
  Finalists f;
  f.med.resize(n), f.spread.resize(n);
  for (size_t i = 0; i < n; ++i) {
    std::sort(rounds[i].begin(), rounds[i].end());
    f.med[i] = rounds[i][1];
    f.spread[i] = (rounds[i].back() - rounds[i].front()) / f.med[i];
  }
  for (size_t i = 1; i < n; ++i) {
    double margin = std::max({f.spread[0], f.spread[i], 0.02});
    if (f.med[i] < f.med[f.best] && f.med[i] < f.med[0] * (1 - margin))
      f.best = i;
  }
  return f;
}

st::Tensor randomTensor(std::vector<int64_t> shape, std::mt19937 &rng, float scale) {
  std::normal_distribution<float> dist(0.f, scale);
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return st::Tensor::f32(std::move(shape), v);
}

RandomAttentionInputs::RandomAttentionInputs(int64_t B, int64_t H, int64_t S, int64_t D,
                                             bool withDout, const AttentionExtras &x) {
  std::mt19937 rng(7);
  q_ = randomTensor({B, H, S, D}, rng, 1.f), k_ = randomTensor({B, H, S, D}, rng, 1.f);
  v_ = randomTensor({B, H, S, D}, rng, 1.f);
  lengths_ = st::Tensor::i32({B}, std::vector<int32_t>(size_t(B), int32_t(S)));
  in.q = &q_, in.k = &k_, in.v = &v_, in.lengths = &lengths_;
  if (withDout) {
    dout_ = randomTensor({B, H, S, D}, rng, 1.f);
    in.dout = &dout_;
  }
  if (x.lowrankK > 0) {
    std::vector<int64_t> shape = {x.lowrankK, S};
    if (x.share == "none")
      shape.insert(shape.begin(), H);
    E_ = randomTensor(shape, rng, 0.05f), F_ = randomTensor(shape, rng, 0.05f);
    in.E = &E_;
    if (x.share == "none" || x.share == "headwise")
      in.F = &F_;
  }
  if (x.numParams > 0) {
    P_ = randomTensor({x.numParams, H}, rng, 0.1f);
    in.params = &P_;
  }
  if (x.lshRounds > 0) {
    rotations_ = randomTensor({x.lshRounds, D, x.lshBuckets / 2}, rng, 1.f);
    in.rotations = &rotations_;
  }
}

} // namespace attnc::tune
