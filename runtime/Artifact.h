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

namespace attnc {

/// Format version of manifest.json this runtime reads (codegen/Manifest.h
/// writes it).
inline constexpr int kManifestFormatVersion = 1;

/// One "kernels" entry of manifest.json.
struct ManifestKernel {
  KernelDesc desc;
  std::string dtype;    ///< f32, f16, bf16
  std::string function; ///< forward and backward of one op share it
  int64_t lowrankK = 0, maxSeq = 0;
  std::vector<ParamDecl> params;
};

/// One "models" entry: a compiled whole-model training step: its source in
/// the artifact (CPU: the step's C++; CUDA: the host code, with the kernels
/// in `stepKernels`), how it binds, and the model's training configuration
/// as JSON (runtime/train/ModelConfigJson.h reads it).
struct ManifestModel {
  std::string name, stepSource, stepSymbol, attentionFunction;
  std::string stepKernels; ///< CUDA target: the step's kernels (.cu)
  int stepAbi = 1;         ///< CUDA target: ATTNC_CUDA_STEP_ABI it was compiled for
  int batch = 0;
  int64_t arenaBytes = 0, keptBytes = 0;
  std::vector<std::string> args;
  std::vector<int> gradArgs;
  std::string configJson;
};

struct Manifest {
  int formatVersion = 0;
  std::string target, arch, source, specHash;
  std::vector<ManifestKernel> kernels;
  std::vector<ManifestModel> models; ///< absent in artifacts without models
};

/// Parses manifest.json; errors name the file and the offending field
/// ("kernels[1].tile.block_q: expected an integer").
Expected<Manifest> parseManifest(const std::string &text, const std::string &path);
/// Reads and parses DIR/manifest.json; the error says when DIR is not an
/// artifact.
Expected<Manifest> loadManifest(const std::string &dir);

struct ArtifactRunOptions {
  std::string dir;
  std::string kernel; ///< forward kernel name; empty: the only (or first) one
  std::string inputs, weights, grad, output;
  std::string target = "cpu";
  uint64_t seed = 0;
};

/// Runs one attention op of an artifact on safetensors inputs and writes the
/// outputs; a progress/result line goes to stderr.
Status runArtifactAttention(const ArtifactRunOptions &options);

} // namespace attnc

#endif // ATTNC_RUNTIME_ARTIFACT_H
