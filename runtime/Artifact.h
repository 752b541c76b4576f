//===- Artifact.h - Load and run an attnc artifact directory ----*- C++ -*-===//
//
// An artifact is what `attnc compile -o DIR` writes: manifest.json, the
// kernel source and the IR. Loading and running one needs no MLIR, so the
// same code serves `attnc run DIR` and `attnc-rt run DIR` on machines that
// have only the runtime.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_ARTIFACT_H
#define ATTNC_RUNTIME_ARTIFACT_H

#include "runtime/AttentionIO.h"
#include "runtime/Manifest.h"

#include <map>
#include <ostream>
#include <string>

namespace attnc {

/// An artifact as the runtime reads it: its manifest and the files it
/// names, from memory (`files`, by name: what attnc train builds without
/// writing a directory) or else from `dir`. Messages name `dir`.
struct Artifact {
  std::string dir;
  Manifest manifest;
  std::map<std::string, std::string> files;
  /// The artifact's file `name` (manifest.json's file names).
  Expected<std::string> file(const std::string &name) const;
};
/// The artifact in `dir` (its manifest read and checked; files on demand).
Expected<Artifact> openArtifact(const std::string &dir);

/// What a forward kernel of a manifest takes besides q, k, v: its
/// low-rank, LSH and per-head parameters.
AttentionSignature signatureOf(const ManifestKernel &forward);

struct ArtifactRunOptions {
  std::string dir;
  std::string kernel; ///< forward kernel name; empty: the only (or first) one
  std::string inputs, weights, grad, output;
  std::string target = "cpu";
  uint64_t seed = 0;
  /// cuda, cuda-sim: run the kernels as this older arch's ("sm_70"): its
  /// code path and tiles. On a GPU they are compiled to its PTX, which the
  /// driver JITs (so a newer GPU runs the Volta kernels); on the emulator,
  /// emulated as it. Empty: the GPU's arch, or on cuda-sim the artifact's.
  std::string asArch;
  /// Where the result line, re-tiling notes and input warnings go (null:
  /// nowhere; the tools pass stderr).
  std::ostream *log = nullptr;
  /// What those lines begin with: the command that runs the artifact.
  std::string tool = "attnc-rt run";
};

/// Runs one attention op of an artifact on safetensors inputs and writes the
/// outputs; a result line goes to options.log.
Status runArtifactAttention(const ArtifactRunOptions &options);

} // namespace attnc

#endif // ATTNC_RUNTIME_ARTIFACT_H
