//===- Optimizer.cpp - AdamW with warm-up, cosine decay, clipping ---------===//
//
// Arithmetic, per element, in fp32 (the state is fp32; the per-step
// constants are computed in double and rounded once):
//
//   g  ← g·(clipNorm/‖g‖)                 when clipNorm > 0 and ‖g‖ > clipNorm
//   p  ← p·(1 − lr·wd)                    only parameters with decay
//   m  ← β1·m + (1 − β1)·g
//   v  ← β2·v + (1 − β2)·g²
//   p  ← p − lr·( (m/(1−β1^t)) / (sqrt(v/(1−β2^t)) + eps) )
//
// i.e. decoupled weight decay applied first, as PyTorch's AdamW does. This is
// the same as p ← p − lr·(m̂/(√v̂ + eps) + wd·p_old) since the Adam term does
// not depend on p. t is step()+1; lr is learningRate(step()).
//
//===----------------------------------------------------------------------===//
#include "runtime/train/Optimizer.h"

#include <cmath>
#include <set>
#include <sstream>

namespace attnc::train {

float learningRate(const AdamWConfig &c, int64_t step) {
  if (step < 0)
    step = 0;
  const double lr = c.lr;
  if (c.warmupSteps > 0 && step < c.warmupSteps)
    return static_cast<float>(lr * static_cast<double>(step + 1) /
                              static_cast<double>(c.warmupSteps));
  const double minLr = lr * static_cast<double>(c.minLrRatio);
  const int64_t start = c.warmupSteps > 0 ? c.warmupSteps : 0;
  if (step >= c.totalSteps)
    return static_cast<float>(minLr);
  // Here start ≤ step < totalSteps, so the interval is not empty.
  const double progress =
      static_cast<double>(step - start) / static_cast<double>(c.totalSteps - start);
  const double pi = 3.14159265358979323846;
  return static_cast<float>(minLr + (lr - minLr) * 0.5 * (1.0 + std::cos(pi * progress)));
}

double AdamW::gradNorm(const std::vector<ParamRef> &params) {
  double sum = 0.0;
  for (const ParamRef &p : params)
    for (int64_t i = 0; i < p.size; ++i) {
      double g = p.grad[i];
      sum += g * g;
    }
  return std::sqrt(sum);
}

namespace {

std::string floatText(float f) {
  std::ostringstream os;
  os << f;
  return os.str();
}

} // namespace

Error nonFiniteGradientError(const std::vector<ParamRef> &params, int64_t step) {
  for (const ParamRef &p : params)
    for (int64_t i = 0; i < p.size; ++i)
      if (!std::isfinite(p.grad[i]))
        return makeError("AdamW step " + std::to_string(step) +
                         ": non-finite gradient in parameter '" + p.name + "' (element " +
                         std::to_string(i) + " is " + floatText(p.grad[i]) +
                         "); nothing was updated");
  return makeError("AdamW step " + std::to_string(step) +
                   ": the gradient norm overflowed; nothing was updated");
}

Expected<double> AdamW::step(const std::vector<ParamRef> &params) {
  // Validate everything before touching anything: a failed step changes no
  // parameter, gradient or state.
  std::set<std::string> names;
  for (const ParamRef &p : params) {
    if (p.size < 0 || (p.size > 0 && (!p.value || !p.grad)))
      return makeError("AdamW: parameter '" + p.name + "' has no value or gradient buffer (size " +
                       std::to_string(p.size) + ")");
    if (!names.insert(p.name).second)
      return makeError("AdamW: parameter '" + p.name + "' is listed twice");
    auto it = m_.find(p.name);
    if (it != m_.end() && static_cast<int64_t>(it->second.size()) != p.size)
      return makeError("AdamW: parameter '" + p.name + "' has " + std::to_string(p.size) +
                       " elements, its optimizer state has " + std::to_string(it->second.size()));
  }

  const double norm = gradNorm(params);
  if (!std::isfinite(norm))
    return nonFiniteGradientError(params, step_);

  if (config_.clipNorm > 0.0f && norm > static_cast<double>(config_.clipNorm)) {
    const float scale = static_cast<float>(static_cast<double>(config_.clipNorm) / norm);
    for (const ParamRef &p : params)
      for (int64_t i = 0; i < p.size; ++i)
        p.grad[i] *= scale;
  }

  const double lr = learningRate(config_, step_);
  const double t = static_cast<double>(step_ + 1);
  const float b1 = config_.beta1, b2 = config_.beta2;
  const float c1 = 1.0f - b1, c2 = 1.0f - b2;
  const float invBc1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b1), t)));
  const float invBc2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b2), t)));
  const float lrF = static_cast<float>(lr);
  const float eps = config_.eps;
  const float decayFactor = static_cast<float>(1.0 - lr * static_cast<double>(config_.weightDecay));

  for (const ParamRef &p : params) {
    std::vector<float> &mv = m_[p.name];
    std::vector<float> &vv = v_[p.name];
    if (mv.empty() && p.size > 0) {
      mv.assign(static_cast<size_t>(p.size), 0.0f);
      vv.assign(static_cast<size_t>(p.size), 0.0f);
    }
    float *__restrict w = p.value;
    const float *__restrict g = p.grad;
    float *__restrict m = mv.data();
    float *__restrict v = vv.data();
    const bool decay = p.decay && config_.weightDecay != 0.0f;
    for (int64_t i = 0; i < p.size; ++i) {
      const float gi = g[i];
      const float mi = b1 * m[i] + c1 * gi;
      const float vi = b2 * v[i] + c2 * (gi * gi);
      m[i] = mi;
      v[i] = vi;
      float wi = w[i];
      if (decay)
        wi *= decayFactor;
      const float update = (mi * invBc1) / (std::sqrt(vi * invBc2) + eps);
      w[i] = wi - lrF * update;
    }
  }
  ++step_;
  return norm;
}

void AdamW::saveState(st::File &out) const {
  for (const auto &[name, m] : m_)
    out.tensors["adam.m." + name] = st::Tensor::f32({static_cast<int64_t>(m.size())}, m);
  for (const auto &[name, v] : v_)
    out.tensors["adam.v." + name] = st::Tensor::f32({static_cast<int64_t>(v.size())}, v);
  out.metadata["adam.step"] = std::to_string(step_);
}

Status AdamW::loadState(const st::File &in, const std::vector<ParamRef> &params) {
  auto stepIt = in.metadata.find("adam.step");
  if (stepIt == in.metadata.end())
    return makeError("optimizer state: metadata 'adam.step' is missing");
  int64_t step = 0;
  try {
    size_t used = 0;
    step = std::stoll(stepIt->second, &used);
    if (used != stepIt->second.size() || step < 0)
      throw std::invalid_argument("bad");
  } catch (const std::exception &) {
    return makeError("optimizer state: metadata 'adam.step' is not a step count: '" +
                     stepIt->second + "'");
  }

  std::map<std::string, std::vector<float>> m, v;
  for (const ParamRef &p : params) {
    for (int which = 0; which < 2; ++which) {
      const std::string key = (which == 0 ? "adam.m." : "adam.v.") + p.name;
      auto it = in.tensors.find(key);
      if (it == in.tensors.end()) {
        // Before the first step there is no state to restore.
        if (step == 0)
          continue;
        return makeError("optimizer state: tensor '" + key + "' is missing (step " +
                         std::to_string(step) + ")");
      }
      const st::Tensor &t = it->second;
      if (t.dtype != st::DType::F32)
        return makeError("optimizer state: tensor '" + key + "' has dtype " +
                         st::dtypeName(t.dtype) + ", expected F32");
      if (t.numel() != p.size)
        return makeError("optimizer state: tensor '" + key + "' has " + std::to_string(t.numel()) +
                         " elements " + t.shapeStr() + ", parameter '" + p.name + "' has " +
                         std::to_string(p.size));
      (which == 0 ? m : v)[p.name] = t.asF32();
    }
    if (m.count(p.name) != v.count(p.name))
      return makeError("optimizer state: parameter '" + p.name + "' has only one of " +
                       "adam.m and adam.v");
  }
  m_ = std::move(m);
  v_ = std::move(v);
  step_ = step;
  return {};
}

} // namespace attnc::train
