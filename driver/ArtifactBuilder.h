//===- ArtifactBuilder.h - A resolved spec compiled into an artifact -*- C++ -*- ===//
//
// The one place an artifact is assembled: the attention kernels of each
// model (the kernel pipeline, emitted for the target), each model's
// compiled training step and inference function (the model-step pipeline),
// and the manifest that describes them (runtime/Manifest.h). `attnc compile
// -o DIR` writes what this builds; `attnc train` keeps it in memory and
// hands it to the runtime's trainArtifact, the same call `attnc-rt train
// DIR` makes, so both commands train the same thing.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_DRIVER_ARTIFACTBUILDER_H
#define ATTNC_DRIVER_ARTIFACTBUILDER_H

#include "driver/Compile.h"

#include "runtime/Artifact.h"

#include "mlir/IR/BuiltinOps.h"

#include <string>
#include <vector>

namespace attnc::driver {

struct ArtifactOptions {
  std::string target = "cpu"; ///< cpu or cuda
  std::string arch = "sm_80"; ///< cuda: the arch the kernels are tiled for
  int batch = 1;              ///< sequences per training step (the plan is per batch)
  int inferBatch = 0;         ///< sequences per inference call (0: batch)
  std::string model;          ///< only this model ("": every model of the spec)
  /// Standard layers keep only their inputs and are recomputed in the
  /// backward (what attnc train runs by default).
  bool recomputeLayers = true;
  /// cuda: also the same attention compiled for the CPU (the manifest's
  /// host_kernels), which the CUDA step calls on the SIMT emulator.
  bool hostKernels = true;
  /// cuda: the attention's CUDA kernels. false leaves the manifest's
  /// kernels empty: an artifact only the emulator runs (--engine cuda-sim,
  /// which needs the host kernels alone, for head dims the CUDA kernels lack too).
  bool deviceKernels = true;
};

/// What the model-step pipeline reported for one model of the artifact.
struct CompiledModelCounts {
  std::string name;
  int fusedKernels = 0, gemms = 0, attentionCalls = 0;
  std::string cudaSymbol; ///< the CUDA step's entry point
};

/// Each selected model's attention as one differentiable function
/// (<model>_attention; batch and sequence dynamic), built in a copy of the
/// resolved module, run through the kernel pipeline for `target` (at
/// options.arch) and emitted. `ir`, when given, receives the lowered
/// module. Returns an exit code; diagnostics are already printed.
mlir::LogicalResult compileModelKernels(mlir::ModuleOp resolved, const ArtifactOptions &options,
                                        const std::string &target, CompiledKernels &out,
                                        std::string *ir = nullptr);

/// Compiles `resolved` (a spec module after attn-resolve-pipeline, which
/// this leaves unchanged) into `out` in memory: manifest and files, no
/// directory. Returns an exit code; diagnostics are already printed.
mlir::LogicalResult buildArtifact(mlir::ModuleOp resolved, const std::string &specHash,
                                  const ArtifactOptions &options, Artifact &out,
                                  std::vector<CompiledModelCounts> *counts = nullptr);

/// Writes the artifact's files and then its manifest.json into `dir`, each
/// atomically: a reader never sees a partial file, and a directory with a
/// manifest is complete. Returns an exit code (the error printed).
mlir::LogicalResult writeArtifact(const std::string &dir, const Artifact &artifact);

} // namespace attnc::driver

#endif // ATTNC_DRIVER_ARTIFACTBUILDER_H
