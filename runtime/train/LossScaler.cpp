//===- LossScaler.cpp - Dynamic loss scaling for fp16 training ------------===//
#include "runtime/train/LossScaler.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <sstream>
#include <type_traits>

namespace attnc::train {

using nlohmann::json;

namespace {

std::string num(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

} // namespace

LossScalerConfig LossScalerConfig::forPrecision(cuda::GemmPrecision p) {
  LossScalerConfig c;
  c.enabled = p == cuda::GemmPrecision::Fp16;
  return c;
}

Status LossScalerConfig::check(const std::string &where) const {
  auto bad = [&](const char *field, const std::string &why) {
    return makeError(where + "." + field + ": " + why);
  };
  for (auto [field, x] : {std::pair<const char *, float>{"init_scale", initScale},
                          {"growth_factor", growthFactor},
                          {"backoff_factor", backoffFactor},
                          {"min_scale", minScale},
                          {"max_scale", maxScale}})
    if (!std::isfinite(x) || x <= 0.0f)
      return bad(field, "must be a positive finite number, not " + num(x));
  if (growthFactor <= 1.0f)
    return bad("growth_factor", "must be greater than 1, not " + num(growthFactor));
  if (backoffFactor >= 1.0f)
    return bad("backoff_factor", "must be less than 1, not " + num(backoffFactor));
  if (growthInterval < 1)
    return bad("growth_interval", "must be at least 1, not " + std::to_string(growthInterval));
  if (minScale > maxScale)
    return bad("min_scale", num(minScale) + " exceeds max_scale " + num(maxScale));
  if (initScale < minScale || initScale > maxScale)
    return bad("init_scale", num(initScale) + " is outside [min_scale, max_scale] = [" +
                                 num(minScale) + ", " + num(maxScale) + "]");
  return {};
}

LossScaler::LossScaler(LossScalerConfig config) : config_(config) {
  assert(config_.check().ok() && "invalid LossScalerConfig");
  scale_ = config_.enabled ? config_.initScale : 1.0f;
}

bool LossScaler::update(bool foundNonFinite) {
  if (foundNonFinite) {
    ++skippedSteps_;
    goodSteps_ = 0;
    if (config_.enabled)
      scale_ = std::max(scale_ * config_.backoffFactor, config_.minScale);
    return false;
  }
  if (!config_.enabled)
    return true;
  if (++goodSteps_ >= config_.growthInterval) {
    scale_ = std::min(scale_ * config_.growthFactor, config_.maxScale);
    goodSteps_ = 0;
  }
  return true;
}

json LossScaler::toJson() const {
  return json{{"enabled", config_.enabled},
              {"scale", scale_},
              {"good_steps", goodSteps_},
              {"skipped_steps", skippedSteps_},
              {"init_scale", config_.initScale},
              {"growth_factor", config_.growthFactor},
              {"backoff_factor", config_.backoffFactor},
              {"growth_interval", config_.growthInterval},
              {"min_scale", config_.minScale},
              {"max_scale", config_.maxScale}};
}

Expected<LossScaler> LossScaler::fromJson(const json &j, const std::string &where) {
  if (!j.is_object())
    return makeError(where + ": expected a JSON object, got " + j.dump());
  std::string error;
  // Reads j[key] into `out` when it has out's type; else records the first
  // error, naming the field.
  auto get = [&](const char *key, auto &out) {
    using T = std::decay_t<decltype(out)>;
    if (!error.empty())
      return;
    auto it = j.find(key);
    if (it == j.end()) {
      error = where + "." + key + ": missing";
      return;
    }
    const bool ok = std::is_same_v<T, bool>       ? it->is_boolean()
                    : std::is_floating_point_v<T> ? it->is_number()
                                                  : it->is_number_integer();
    if (!ok) {
      error = where + "." + key + ": unexpected value " + it->dump();
      return;
    }
    out = it->template get<T>();
  };
  LossScalerConfig c;
  float scale = 1.0f;
  int64_t good = 0, skipped = 0;
  get("enabled", c.enabled), get("scale", scale), get("good_steps", good);
  get("skipped_steps", skipped), get("init_scale", c.initScale);
  get("growth_factor", c.growthFactor), get("backoff_factor", c.backoffFactor);
  get("growth_interval", c.growthInterval), get("min_scale", c.minScale);
  get("max_scale", c.maxScale);
  if (!error.empty())
    return makeError(error);
  if (Status s = c.check(where); !s)
    return s.takeError();
  if (!c.enabled && scale != 1.0f)
    return makeError(where + ".scale: " + num(scale) + " but the scaler is disabled (scale 1)");
  if (c.enabled && (!std::isfinite(scale) || scale < c.minScale || scale > c.maxScale))
    return makeError(where + ".scale: " + num(scale) + " is outside [min_scale, max_scale] = [" +
                     num(c.minScale) + ", " + num(c.maxScale) + "]");
  if (good < 0 || good >= c.growthInterval)
    return makeError(where + ".good_steps: " + std::to_string(good) +
                     " is outside [0, growth_interval) = [0, " + std::to_string(c.growthInterval) +
                     ")");
  if (skipped < 0)
    return makeError(where + ".skipped_steps: " + std::to_string(skipped) + " is negative");
  LossScaler s(c);
  s.scale_ = scale;
  s.goodSteps_ = good;
  s.skippedSteps_ = skipped;
  return s;
}

} // namespace attnc::train
