//===- ModelConfig.h - The byte-level Transformer's configuration -*- C++ -*-===//
//
// What the training runtime knows of a spec's model (docs/training.md):
// its dimensions, layer kind, feed-forward block, objective and attention
// variant. The driver derives it from the spec (driver/ModelConfigOf.h), an
// artifact carries it as JSON (ModelConfigJson.h); the parameter store
// (Parameters.h) allocates and initialises the weights it implies.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_MODELCONFIG_H
#define ATTNC_RUNTIME_TRAIN_MODELCONFIG_H

#include "attnc/abi/Activations.h"

#include <cstdint>
#include <string>
#include <vector>

namespace attnc::train {

/// The feed-forward block's activation (the kernels' encoding).
using Activation = ::attnc::act::Kind;

enum class Objective { CausalLm, Mlm, Duplicate };

/// A per-head parameter of the attention variant (AttentionIO's ParamDecl).
struct HeadParamInit {
  std::string name;
  bool alibi = false;
  float value = 0;
  bool learned = true;
};

struct ModelConfig {
  int vocab = 256, seq = 128, dModel = 64, heads = 2, dff = 256, layers = 1;
  bool reversible = false;
  bool ffn = true; ///< false: attention-only standard layers (no ffn clause)
  Activation act = Activation::Gelu;
  int ffnChunk = 0; ///< rows per FFN chunk; 0: all rows at once
  Objective objective = Objective::CausalLm;
  // The attention variant.
  bool sharedQk = false; ///< LSH: keys are the normalised queries
  int lshRounds = 0, lshBuckets = 0;
  uint64_t lshSeed = 0; ///< rotations of layer l: Philox stream l
  bool lowrank = false;
  std::string share; ///< none, headwise, kv, layerwise
  int lowrankK = 0;
  std::vector<HeadParamInit> headParams;
  /// Dropout on the residual branches (after attention, after the FFN)
  /// while training; masks from Philox (dropoutSeed, layer and branch,
  /// step, element), so a reversible backward replays them exactly.
  float dropout = 0;
  uint64_t dropoutSeed = 0;
  /// The attention variant's own dropout (applied by its kernels while
  /// training; their Philox offset is step * 4096 + layer).
  float attentionDropout = 0;
  /// Testing aid: reversible layers also store their inputs and the
  /// backward uses them instead of the rebuilt ones (the gradients must
  /// agree; memory then grows with depth like standard layers).
  bool storeReversibleInputs = false;
};

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_MODELCONFIG_H
