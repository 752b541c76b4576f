//===- TrainSettingTable.h - The settings a model's train block may hold -*- C++ -*- ===//
//
// A spec's model may recommend how to train it (`train { lr 2e-3; warmup
// 30; batch 8; steps 300 }`, docs/language.md). This table is the one
// list of those settings: keyword, whole number or not, and range. The
// parser and the attn.model verifier check written values against it, and
// the runtime checks the manifest's "train" object against it, so the
// compiler and the runtime accept the same values. No includes.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_TRAINSETTINGTABLE_H
#define ATTNC_RUNTIME_TRAIN_TRAINSETTINGTABLE_H

namespace attnc {

struct TrainSettingInfo {
  const char *key;
  bool integer;
  double min, max;
  bool minOpen; ///< the value must exceed min (lr > 0)
  const char *meaning;
};

inline constexpr TrainSettingInfo kTrainSettings[] = {
    {"lr", false, 0, 1, true, "peak learning rate"},
    {"warmup", true, 0, 1e9, false, "linear warm-up steps"},
    {"batch", true, 1, 65536, false, "sequences per step"},
    {"steps", true, 1, 1e9, false, "optimizer steps"},
    {"weight_decay", false, 0, 1, false, "AdamW weight decay"},
    {"clip", false, 0, 1e6, false, "gradient norm clip (0: off)"},
    {"eval_every", true, 0, 1e9, false, "steps between evaluations (0: at the end)"},
};

/// The entry of `key`, or null.
inline const TrainSettingInfo *findTrainSetting(const char *key) {
  for (const TrainSettingInfo &s : kTrainSettings) {
    const char *a = s.key, *b = key;
    while (*a && *a == *b)
      ++a, ++b;
    if (*a == *b)
      return &s;
  }
  return nullptr;
}

/// Whether `value` is a whole number where one is needed and lies in the range.
inline bool trainSettingValid(const TrainSettingInfo &info, double value) {
  if (info.integer && value != double(static_cast<long long>(value)))
    return false;
  return (info.minOpen ? value > info.min : value >= info.min) && value <= info.max;
}

} // namespace attnc

#endif // ATTNC_RUNTIME_TRAIN_TRAINSETTINGTABLE_H
