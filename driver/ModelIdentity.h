//===- ModelIdentity.h - What makes a trained model the same ----*- C++ -*-===//
//
// A run (its checkpoints, pinned kernel choices and artifact) belongs to a
// model's meaning, not to the bytes of the spec it came from: comments,
// indentation, the order of declarations, the model's and the variant's
// names, and the spec's other models never matter. The identity is the
// SHA-256 of a canonical text: the model and the attention variant it uses,
// as parsed (before `auto` is resolved, so the tuning database cannot
// change it), printed without locations, with what leaves the parameters
// and the results unchanged taken out: tiles, FFN row chunks and the train
// block's recommendations.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_DRIVER_MODELIDENTITY_H
#define ATTNC_DRIVER_MODELIDENTITY_H

#include "dialect/AttnDialect.h"

#include <string>

namespace attnc::driver {

struct ModelIdentity {
  std::string text; ///< the canonical IR, one op per line
  std::string hash; ///< SHA-256 of `text`, versioned
};

/// `model`'s identity; `model` must not have been resolved yet.
ModelIdentity modelIdentity(attn::ModelOp model);

/// The lines of canonical text `was` and `now` that differ, as "  run:  ..."
/// and "  spec: ..." lines: what to show a person whose model changed.
std::string identityDifference(const std::string &was, const std::string &now);

} // namespace attnc::driver

#endif // ATTNC_DRIVER_MODELIDENTITY_H
