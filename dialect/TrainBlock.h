//===- TrainBlock.h - What a model's train block may say --------*- C++ -*-===//
//
// What the parser (dsl/Parser.cpp) and the attn.model verifier both say
// about a model's `train { ... }` block, over the one table of its settings
// (runtime/train/TrainSettingTable.h). It lives with the dialect, the lower
// of its two readers, and has no MLIR: the front end builds without it.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_DIALECT_TRAINBLOCK_H
#define ATTNC_DIALECT_TRAINBLOCK_H

#include <cstddef>
#include <cstdio>
#include <string>

#include "runtime/train/TrainSettingTable.h"

namespace attnc {

/// The entry of `key`, or null.
inline const TrainSettingInfo *findTrainSetting(const std::string &key) {
  return findTrainSetting(key.c_str());
}

/// The keywords, comma-separated: what an error lists as expected.
inline std::string trainSettingKeys() {
  std::string out;
  for (const TrainSettingInfo &s : kTrainSettings)
    out += (out.empty() ? "" : ", ") + std::string(s.key);
  return out;
}

/// Empty when `value` is a valid `info` setting, else why not
/// ("lr must be in (0, 1], found 2").
inline std::string checkTrainSetting(const TrainSettingInfo &info, double value) {
  auto number = [](double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.10g", v);
    return std::string(buf);
  };
  if (trainSettingValid(info, value))
    return {};
  if (info.integer && value != double(static_cast<long long>(value)))
    return std::string(info.key) + " must be a whole number, found " + number(value);
  return std::string(info.key) + " must be in " + (info.minOpen ? "(" : "[") + number(info.min) +
         ", " + number(info.max) + "], found " + number(value);
}

} // namespace attnc

#endif // ATTNC_DIALECT_TRAINBLOCK_H
