//===- TrainSettings.cpp - Training settings from flags, the spec, defaults -===//
#include "runtime/train/TrainSettings.h"

#include "runtime/train/TrainSettingTable.h"

#include <nlohmann/json.hpp>

#include <sstream>
#include <variant>

namespace attnc::train {

namespace {

using Field = std::variant<std::optional<double> *, std::optional<int64_t> *>;

/// The field of `s` that keyword `key` names (runtime/train/TrainSettingTable.h).
Field field(TrainSettings &s, const std::string &key) {
  if (key == "lr")
    return &s.lr;
  if (key == "weight_decay")
    return &s.weightDecay;
  if (key == "clip")
    return &s.clip;
  if (key == "warmup")
    return &s.warmup;
  if (key == "batch")
    return &s.batch;
  if (key == "steps")
    return &s.steps;
  return &s.evalEvery; // eval_every: the table's last
}

/// Field `key` of `s` as a double, if set.
std::optional<double> value(const TrainSettings &s, const std::string &key) {
  return std::visit(
      [](auto *f) -> std::optional<double> {
        return *f ? std::optional<double>(double(**f)) : std::nullopt;
      },
      field(const_cast<TrainSettings &>(s), key));
}

} // namespace

TrainSettings TrainSettings::orElse(const TrainSettings &fallback) const {
  TrainSettings out = *this;
  for (const TrainSettingInfo &info : kTrainSettings)
    std::visit(
        [&](auto *mine) {
          using F = std::remove_pointer_t<decltype(mine)>;
          if (!*mine)
            *mine = *std::get<F *>(field(const_cast<TrainSettings &>(fallback), info.key));
        },
        field(out, info.key));
  return out;
}

bool TrainSettings::empty() const {
  for (const TrainSettingInfo &info : kTrainSettings)
    if (value(*this, info.key))
      return false;
  return true;
}

TrainSettings defaultTrainSettings() {
  TrainSettings d;
  d.lr = 1e-3, d.weightDecay = 0.01, d.clip = 1.0;
  d.warmup = 20, d.batch = 8, d.steps = 200, d.evalEvery = 0;
  return d;
}

std::string trainSettingsToJson(const TrainSettings &s) {
  nlohmann::json j = nlohmann::json::object();
  for (const TrainSettingInfo &info : kTrainSettings)
    if (std::optional<double> v = value(s, info.key))
      j[info.key] = info.integer ? nlohmann::json(int64_t(*v)) : nlohmann::json(*v);
  return j.dump();
}

Expected<TrainSettings> trainSettingsFromJson(const std::string &text, const std::string &where) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return makeError(where + ": expected an object of training settings");
  TrainSettings s;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const TrainSettingInfo *info = findTrainSetting(it.key().c_str());
    if (!info)
      return makeError(where + "." + it.key() + ": not a training setting");
    const nlohmann::json &v = it.value();
    if (info->integer ? !v.is_number_integer() : !v.is_number())
      return makeError(where + "." + it.key() + ": expected " +
                       (info->integer ? "an integer" : "a number") + ", found " + v.dump());
    const double x = v.get<double>();
    if (!trainSettingValid(*info, x))
      return makeError(where + "." + it.key() + ": " + v.dump() + " is out of range (" +
                       info->meaning + ")");
    std::visit(
        [&](auto *f) {
          using T = typename std::remove_pointer_t<decltype(f)>::value_type;
          *f = T(info->integer ? double(v.get<int64_t>()) : x);
        },
        field(s, info->key));
  }
  return s;
}

std::string describeTrainSettings(const TrainSettings &flags, const TrainSettings &spec,
                                  int64_t plannedBatch) {
  const TrainSettings defaults = defaultTrainSettings();
  std::ostringstream os;
  for (const TrainSettingInfo &info : kTrainSettings) {
    const char *source = "flag";
    std::optional<double> v = value(flags, info.key);
    if (!v)
      v = value(spec, info.key), source = "spec";
    if (!v)
      v = value(defaults, info.key), source = "default";
    if (std::string(info.key) == "batch" && !flags.batch && plannedBatch > 0 &&
        *v != double(plannedBatch))
      v = double(plannedBatch), source = "plan";
    os << (os.tellp() > 0 ? ", " : "") << info.key << " " << *v << " (" << source << ")";
  }
  return os.str();
}

} // namespace attnc::train
