//===- ModelGraph.h - Whole-model compilation in the driver ----*- C++ -*-===//
//
// Runs the whole-model pipeline (attn-expand-model, attn-derive-model-
// backward, attn-fuse-rows, attn-plan-memory) on a copy of a resolved
// module for one model, and emits its C++ training step.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_DRIVER_MODELGRAPH_H
#define ATTNC_DRIVER_MODELGRAPH_H

#include "dsl/AttnDialect.h"
#include "runtime/train/CompiledStep.h"

#include "mlir/IR/BuiltinOps.h"

#include <ostream>
#include <string>

namespace attnc::driver {

struct ModelGraph {
  int64_t arenaBytes = 0, peakLiveBytes = 0, keptBytes = 0;
  int fusedKernels = 0, gemms = 0, attentionCalls = 0, rowChunks = 0;
  std::string ir;               ///< the planned function, printed
  train::CompiledStepDesc step; ///< source, symbol, arguments (when emitted)
};

/// Compiles `model` (of a module after attn-resolve-tunables) for `batch`
/// sequences; `layers` > 0 overrides the model's depth (memory plans by
/// depth). Diagnostics go to the context's handler; failure returns false.
/// `recomputeLayers`: standard layers keep only their inputs and recompute
/// the rest in the backward (attn-derive-model-backward{recompute-layers}).
/// `fuseInChunks` false keeps attn-fuse-rows out of chunked FFN bodies
/// (attnc bench --engines measures what fusing there gains).
bool compileModelGraph(mlir::ModuleOp resolved, attn::ModelOp model, int batch, int layers,
                       bool emitSource, ModelGraph &out, bool recomputeLayers = false,
                       bool fuseInChunks = true);

/// attnc compile's report of the compiled plans: for every model the arena
/// at the spec's depth (what a training step allocates besides weights,
/// gradients and optimizer state) and at 2, 6 and 12 layers; for standard
/// layers also with each layer recomputed in the backward.
/// `attnc compile --check-nvrtc`, training steps: compiles each model's
/// CUDA step kernels with NVRTC for `arch` and checks every kernel's ptxas
/// report (no spills, shared memory within the arch's limit). Non-zero on
/// failure.
int checkModelStepsWithNvrtc(mlir::ModuleOp resolved, const std::string &arch, int batch,
                             std::ostream &os);

void reportCompiledPlans(mlir::ModuleOp resolved, int batch, std::ostream &os);

} // namespace attnc::driver

#endif // ATTNC_DRIVER_MODELGRAPH_H
