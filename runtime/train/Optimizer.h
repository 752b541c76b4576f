//===- Optimizer.h - AdamW with warm-up, cosine decay, clipping -*- C++ -*-===//
//
// fp32 AdamW (decoupled weight decay, Loshchilov & Hutter) over named
// parameter tensors, with linear warm-up then cosine decay of the learning
// rate to minLrRatio·lr, and clipping of the global gradient L2 norm.
// Deterministic (fixed summation order). Its state serialises to tensors
// (m and v per parameter) and JSON (step, config) for checkpoints.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_OPTIMIZER_H
#define ATTNC_RUNTIME_TRAIN_OPTIMIZER_H

#include "runtime/Error.h"
#include "runtime/Safetensors.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace attnc::train {

struct AdamWConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float weightDecay = 0.01f; ///< applied to parameters with ParamRef::decay
  int64_t warmupSteps = 0;
  int64_t totalSteps = 1;  ///< cosine decay ends here
  float minLrRatio = 0.1f; ///< final lr = minLrRatio · lr
  float clipNorm = 1.0f;   ///< ≤ 0: no clipping
};

/// lr at `step` (0-based): lr·(step+1)/warmup during warm-up, then cosine to
/// minLrRatio·lr at totalSteps, constant after.
float learningRate(const AdamWConfig &c, int64_t step);

/// One parameter: its values and gradient (same size), and whether weight
/// decay applies (not to biases, norms and embeddings' positions, by the
/// caller's choice).
struct ParamRef {
  std::string name;
  float *value = nullptr;
  float *grad = nullptr;
  int64_t size = 0;
  bool decay = true;
};

/// The error of update `step` whose gradient norm is not finite: names
/// the first parameter (in order) with a non-finite gradient element, or
/// says the norm overflowed. AdamW::step's, and the device AdamW's.
Error nonFiniteGradientError(const std::vector<ParamRef> &params, int64_t step);

class AdamW {
public:
  explicit AdamW(AdamWConfig config = {}) : config_(config) {}

  /// Global L2 norm of the gradients (double accumulation, parameters in
  /// the given order).
  static double gradNorm(const std::vector<ParamRef> &params);

  /// One update: clips the gradients (scaling them in place) when their norm
  /// exceeds clipNorm, then applies AdamW with learningRate(step()) and
  /// advances step(). Returns the norm before clipping. State is created on
  /// the first call; a parameter whose size changed is an error. Weight
  /// decay is decoupled as in PyTorch's AdamW: p ← p·(1 − lr·wd), then the
  /// Adam update. A non-finite gradient norm is an error naming the first
  /// parameter with a non-finite gradient; a failed step changes nothing
  /// (parameters, gradients, state, step count).
  Expected<double> step(const std::vector<ParamRef> &params);

  int64_t stepCount() const { return step_; }
  const AdamWConfig &config() const { return config_; }

  /// For an AdamW that runs elsewhere (the device's, which applies the
  /// same update): the moments by parameter name, empty before a
  /// parameter's first update; and the state it has reached, taken back.
  const std::map<std::string, std::vector<float>> &firstMoments() const { return m_; }
  const std::map<std::string, std::vector<float>> &secondMoments() const { return v_; }
  void importState(int64_t step, std::map<std::string, std::vector<float>> m,
                   std::map<std::string, std::vector<float>> v) {
    step_ = step, m_ = std::move(m), v_ = std::move(v);
  }
  /// Counts an update applied elsewhere.
  void countStep() { ++step_; }

  /// m and v as "adam.m.<name>", "adam.v.<name>" tensors (F32, 1-D), and
  /// the step as metadata "adam.step". The config is not saved.
  void saveState(st::File &out) const;
  /// Restores what saveState wrote; errors name a missing or mis-sized
  /// tensor.
  Status loadState(const st::File &in, const std::vector<ParamRef> &params);

private:
  AdamWConfig config_;
  int64_t step_ = 0;
  std::map<std::string, std::vector<float>> m_, v_;
};

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_OPTIMIZER_H
