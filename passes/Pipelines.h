//===- Pipelines.h - attnc's pass pipelines as library functions -*- C++ -*-===//
//
// The pipelines every attnc command runs, each behind an options struct, as
// CIRCT's firtool::populate... functions are: the driver builds its pass
// managers only through these, and attnc-opt registers each one as a named
// pipeline so that it runs alone on IR (test/passes/attn-*-pipeline.mlir).
//
//   attn-resolve-pipeline     attn-apply-tuning (with a database), then
//                             attn-resolve-tunables: every `auto` a number
//   attn-kernel-pipeline      one attention function to kernel ops: expand
//                             LSH, lower, order the low-rank projection,
//                             fuse, derive the backward, prove key bands, tile
//   attn-model-step-pipeline  one model to its planned training step: expand
//                             the model, derive its backward, fuse row-local
//                             chains, plan the arena
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_PASSES_PIPELINES_H
#define ATTNC_PASSES_PIPELINES_H

#include "mlir/Pass/PassManager.h"

#include <cstdint>
#include <string>
#include <vector>

namespace attnc {

/// attn-resolve-pipeline.
struct ResolvePipelineOptions {
  /// The tuning database to apply first (attn-apply-tuning); empty: none,
  /// the heuristics alone decide.
  std::string tuningDb;
  /// What the database's entries are looked up for (attn-apply-tuning's
  /// options of the same names).
  std::string target = "cpu";
  std::string arch = "sm_80";
  std::string device, toolchain, cudaToolchain;
  bool tuneAccuracy = true; ///< also k / LSH rounds and chunk
  /// A run folder's pinned choices, applied before the database
  /// (attn-apply-tuning's run-choices).
  std::vector<std::string> runChoices;
  /// Say what was chosen: remarks from attn-resolve-tunables, notes from
  /// attn-apply-tuning.
  bool report = false;
};
void populateResolvePipeline(mlir::OpPassManager &pm, const ResolvePipelineOptions &options);

/// attn-kernel-pipeline.
struct KernelPipelineOptions {
  std::string target = "cuda"; ///< cuda or cpu: attn-tile's limits
  std::string arch = "sm_80";
  bool reportLsh = true; ///< attn-expand-lsh says when it falls back to dense
};
void populateKernelPipeline(mlir::OpPassManager &pm, const KernelPipelineOptions &options);

/// attn-model-step-pipeline.
struct ModelStepPipelineOptions {
  int64_t batch = 1;            ///< sequences per step
  bool train = true;            ///< @train_<model>: the training step
  bool infer = true;            ///< @infer_<model>: the forward to the logits
  int64_t inferBatch = 0;       ///< sequences per inference call (0: batch)
  bool recomputeLayers = false; ///< standard layers recomputed in the backward
  bool fuseInChunks = true;     ///< attn-fuse-rows inside chunked FFN bodies
};
void populateModelStepPipeline(mlir::OpPassManager &pm, const ModelStepPipelineOptions &options);

/// Registers the three pipelines by name (for attnc-opt).
void registerAttnPipelines();

} // namespace attnc

#endif // ATTNC_PASSES_PIPELINES_H
