//===- AttentionIO.h - Inputs and outputs of one attention op ---*- C++ -*-===//
//
// Reads and checks the safetensors files of `attnc run` (q, k, v, lengths;
// E, F and per-head parameters; dout), fills the weights a file lacks from
// the seed, and writes out, lse and the gradients. Shared by `attnc run SPEC`
// (which knows the variant from the spec) and the MLIR-free artifact runner
// (which knows it from manifest.json). Every error names the file, the
// tensor and what was expected.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_ATTENTIONIO_H
#define ATTNC_RUNTIME_ATTENTIONIO_H

#include "runtime/CpuAttention.h"

#include <memory>

namespace attnc {

/// What the inputs must look like for one attention variant.
struct AttentionSignature {
  std::string name;
  bool lowrank = false;
  std::string share; ///< none, headwise, kv, layerwise
  int64_t k = 0;     ///< low-rank rows; 0: E's rows, else min(256, N)
  bool keyPadding = false;
  std::vector<ParamDecl> params;
  /// Shared QK (LSH and its dense fallback): no 'k' input, no 'dk' output.
  bool sharedQk = false;
  /// LSH: the rotations' shape [rounds, Dh, buckets/2] and the seed they
  /// are drawn from (runtime/PhiloxDraws.h) when 'lsh_rotations' is not given.
  int64_t lshRounds = 0, lshBuckets = 0;
  uint64_t lshSeed = 0;
};

/// Loaded tensors; `inputs` points into this object (keep it alive).
struct AttentionIO {
  st::File in, weights, grad;
  st::Tensor eStore, fStore, paramStore, rotationStore;
  bool rotationsDrawn = false; ///< drawn from the seed (written to the output)
  /// E (and F) drawn from the seed: written to the output, so a run without
  /// --weights can be repeated with the outputs as its weights.
  bool projectionsDrawn = false;
  AttentionInputs inputs;
  int64_t B = 0, H = 0, N = 0, D = 0;
  int64_t kRows = 0, nmax = 0; ///< low-rank only
};

/// A low-rank projection's initial value: Xavier-normal over its last two
/// dimensions [k, Nmax], as fairseq initialises Linformer's E, drawn from
/// (`seed`, `name`) so E and F differ and every run draws the same.
st::Tensor randomProjection(uint64_t seed, const std::string &name, std::vector<int64_t> shape);

/// Reads `inputsPath` (and `weightsPath`, `gradPath` when not empty).
/// Inputs the op ignores (k of a shared-QK op, lengths without key padding)
/// are reported to `warn`.
Expected<std::unique_ptr<AttentionIO>> loadAttentionIO(const std::string &inputsPath,
                                                       const std::string &weightsPath,
                                                       const std::string &gradPath,
                                                       const AttentionSignature &signature,
                                                       uint64_t seed, const WarningHandler &warn);

/// Writes out, lse and (after a backward) dq, dk, dv, dE, dF and
/// d<param> [H] for every learned parameter, atomically. Shared-QK variants
/// write no dk (dq holds the whole gradient of the shared input); LSH
/// rotations drawn from the seed are written as lsh_rotations.
Status writeAttentionOutputs(const std::string &path, AttentionOutputs outputs,
                             const AttentionIO &io, const AttentionSignature &signature);

} // namespace attnc

#endif // ATTNC_RUNTIME_ATTENTIONIO_H
