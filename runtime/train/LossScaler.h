//===- LossScaler.h - Dynamic loss scaling for fp16 training ----*- C++ -*-===//
//
// fp16's range (6e-5 .. 65504, subnormals to 6e-8) loses small gradients
// to underflow, so fp16 training multiplies the loss by a scale S before the
// backward pass and the gradients by 1/S before the optimizer
// (OptGradNormArgs::inv_scale). S is adjusted dynamically, as common
// practice has it:
//
//   start at initScale = 2^16;
//   a step whose unscaled gradients contain Inf/NaN is skipped (the device
//   AdamW does nothing, OptStepState::nonfinite) and S ← max(S·0.5, 1);
//   after growthInterval = 2000 consecutive finite steps, S ← min(S·2,
//   maxScale = 2^24) and the count restarts.
//
// S stays a power of two (factors 2 and 0.5, bounds powers of two), so
// scaling and unscaling are exact in fp32. fp32 and bf16 training (bf16 has
// fp32's range) do not scale: a disabled scaler has S = 1 forever and
// only counts skipped steps. The state goes into the checkpoint JSON
// (toJson / fromJson) so a resumed run continues with the same S.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_LOSSSCALER_H
#define ATTNC_RUNTIME_TRAIN_LOSSSCALER_H

#include "runtime/Cublas.h"
#include "runtime/Error.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace attnc::train {

struct LossScalerConfig {
  bool enabled = false;
  float initScale = 65536.0f; ///< 2^16
  float growthFactor = 2.0f;
  float backoffFactor = 0.5f;
  int64_t growthInterval = 2000; ///< consecutive finite steps before growing
  float minScale = 1.0f;
  float maxScale = 16777216.0f; ///< 2^24: growth stops there (never Inf)

  /// Enabled for fp16 GEMMs (and so fp16 activations), disabled for f32,
  /// tf32 and bf16.
  static LossScalerConfig forPrecision(cuda::GemmPrecision p);
  /// Ok, or an error naming the first bad field as "<where>.<field>: ...":
  /// growth > 1, 0 < backoff < 1, interval >= 1, 0 < min <= init <= max,
  /// all finite.
  Status check(const std::string &where = "loss_scaler") const;
};

class LossScaler {
public:
  /// `config` must pass check() (asserted).
  explicit LossScaler(LossScalerConfig config = {});

  bool enabled() const { return config_.enabled; }
  const LossScalerConfig &config() const { return config_; }
  /// The scale S to multiply the loss (the backward's seed) by; 1 when
  /// disabled.
  float scale() const { return scale_; }
  /// 1/S, exact (S is a power of two): OptGradNormArgs::inv_scale.
  float invScale() const { return 1.0f / scale_; }
  /// Finite steps since the last overflow or growth.
  int64_t goodSteps() const { return goodSteps_; }
  /// Steps skipped for non-finite gradients, in all.
  int64_t skippedSteps() const { return skippedSteps_; }

  /// After a step, with its OptStepState::nonfinite. Returns whether the
  /// step was applied (false: it was skipped, and the caller must not
  /// advance its step count). Disabled: S stays 1; a non-finite step is
  /// still reported skipped (in fp32/bf16 that is a real divergence the
  /// caller should treat as an error).
  bool update(bool foundNonFinite);

  /// {"enabled", "scale", "good_steps", "skipped_steps", "init_scale",
  /// "growth_factor", "backoff_factor", "growth_interval", "min_scale",
  /// "max_scale"}.
  nlohmann::json toJson() const;
  /// Restores what toJson wrote. Errors name the field ("<where>.scale:
  /// ..."): missing, of the wrong type, or out of range (a scale outside
  /// [min_scale, max_scale], or not 1 when disabled).
  static Expected<LossScaler> fromJson(const nlohmann::json &j,
                                       const std::string &where = "loss_scaler");

private:
  LossScalerConfig config_;
  float scale_ = 1.0f;
  int64_t goodSteps_ = 0;
  int64_t skippedSteps_ = 0;
};

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_LOSSSCALER_H
