//===- ModelConfigJson.h - A model's training config as JSON ---*- C++ -*-===//
//
// The "config" object of an artifact's compiled model (manifest.json), so
// attnc-rt can build and train the model without the spec or MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_MODELCONFIGJSON_H
#define ATTNC_RUNTIME_TRAIN_MODELCONFIGJSON_H

#include "runtime/Error.h"
#include "runtime/train/ModelConfig.h"

#include <string>

namespace attnc::train {

/// The configuration as a JSON object's text.
std::string modelConfigToJson(const ModelConfig &config);
/// Parses it back; errors name the field (`where` prefixes them).
Expected<ModelConfig> modelConfigFromJson(const std::string &text, const std::string &where);

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_MODELCONFIGJSON_H
