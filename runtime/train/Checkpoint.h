//===- Checkpoint.h - Atomic training checkpoints ---------------*- C++ -*-===//
//
// A checkpoint is a directory entry pair in the run directory:
//   ckpt-<step>.safetensors  weights and optimizer tensors (adam.m.*, ...)
//   ckpt-<step>.json         step, spec hash, RNG state, optimizer config,
//                            data position, metrics; names the .safetensors
//                            file and its SHA-256
// and `latest.json`, which names the newest complete checkpoint. Each file
// is written to a temporary name, fsynced, and renamed (then the directory
// is fsynced); `latest.json` is replaced last. A process killed at any
// point leaves the previous latest checkpoint readable. Loading verifies
// the SHA-256 and the spec hash, and refuses a mismatch with a message
// naming both hashes. Older checkpoints beyond `keep` are deleted after a
// successful write. One writer per run directory: a save removes the
// temporary files a killed writer left (Checkpoint.cpp has the details).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_CHECKPOINT_H
#define ATTNC_RUNTIME_TRAIN_CHECKPOINT_H

#include "runtime/Error.h"
#include "runtime/Safetensors.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

namespace attnc::train {

struct Checkpoint {
  int64_t step = 0;
  std::string specHash;
  st::File tensors;     ///< weights and optimizer state
  nlohmann::json state; ///< anything else the trainer needs to resume exactly
  /// Non-empty when the latest checkpoint could not be loaded and this is
  /// the newest intact older one: why, and which was loaded instead.
  std::string recovered;
};

/// Writes `ckpt` into `dir` (created if missing) atomically and makes it the
/// latest; keeps the newest `keep` checkpoints (≥ 1).
Status saveCheckpoint(const std::string &dir, const Checkpoint &ckpt, int keep = 2);

/// Loads the latest checkpoint of `dir`. `expectedSpecHash` non-empty:
/// refuse a checkpoint of another spec. A missing latest.json is an error
/// saying there is nothing to resume; a corrupt one, or a checkpoint whose
/// data does not match its recorded SHA-256, names the file.
Expected<Checkpoint> loadLatestCheckpoint(const std::string &dir,
                                          const std::string &expectedSpecHash);

/// loadLatestCheckpoint, but when the latest checkpoint is corrupt
/// (latest.json, its JSON, or tensors that do not match their SHA-256),
/// the newest intact older one of the same spec, with `recovered` saying
/// which failed and which was loaded; with none intact, the latest's error.
/// What training resumes from and the commands evaluate.
Expected<Checkpoint> loadNewestIntactCheckpoint(const std::string &dir,
                                                const std::string &expectedSpecHash);

/// The spec hash of `dir`'s latest checkpoint, from its JSON alone (the
/// tensors are not read); empty when there is none or it cannot be read.
std::string latestCheckpointSpecHash(const std::string &dir);

/// Whether `dir` has a latest checkpoint (latest.json exists).
bool hasCheckpoint(const std::string &dir);

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_CHECKPOINT_H
