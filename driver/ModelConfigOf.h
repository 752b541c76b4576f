//===- ModelConfigOf.h - A spec model as the training runtime's config -*- C++ -*- ===//
#ifndef ATTNC_DRIVER_MODELCONFIGOF_H
#define ATTNC_DRIVER_MODELCONFIGOF_H

#include "dialect/AttnDialect.h"
#include "runtime/train/Data.h"
#include "runtime/train/ModelConfig.h"
#include "runtime/train/TrainSettings.h"

#include "mlir/IR/BuiltinOps.h"

#include <ostream>
#include <set>
#include <string>

namespace attnc::driver {

/// The training runtime's configuration of `model` whose layers use
/// `variant` (dims, layer kind, FFN, objective; the variant's LSH, low-rank
/// and per-head parameters), after attn-resolve-tunables: what attnc train
/// trains, attnc bench --linformer-table times and attnc tune measures.
train::ModelConfig modelConfigOf(attn::ModelOp model, attn::LayerOp layer, attn::VariantOp variant);

/// The model's recommended training settings (its `train` attribute, the
/// spec's train block); empty when it has none.
train::TrainSettings trainSettingsOf(attn::ModelOp model);

/// The models whose FFN chunk the spec left `auto` (for the tuner); call
/// before attn-resolve-tunables replaces it.
std::set<std::string> modelsWithAutoFfnChunk(mlir::ModuleOp module);

/// B sequences of random bytes for `config` (targets the inputs; for MLM,
/// masked as the trainer masks), seeded: timing input for whole models.
train::Batch syntheticBatch(const train::ModelConfig &config, int B);

} // namespace attnc::driver

#endif // ATTNC_DRIVER_MODELCONFIGOF_H
