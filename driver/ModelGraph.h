//===- ModelGraph.h - Whole-model compilation in the driver ----*- C++ -*-===//
//
// Runs the whole-model pipeline (attn-expand-model, attn-derive-model-
// backward, attn-fuse-rows, attn-plan-memory) on a copy of a resolved
// module for one model, and emits its C++ training step.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_DRIVER_MODELGRAPH_H
#define ATTNC_DRIVER_MODELGRAPH_H

#include "dialect/AttnDialect.h"
#include "runtime/train/CompiledStep.h"

#include "mlir/IR/BuiltinOps.h"

#include <ostream>
#include <string>

namespace attnc::driver {

struct ModelGraph {
  int64_t arenaBytes = 0, peakLiveBytes = 0, keptBytes = 0;
  int fusedKernels = 0, gemms = 0, attentionCalls = 0, rowChunks = 0;
  int64_t inferArenaBytes = 0;           ///< the inference function's arena (its memory plan)
  std::string peakWhere, inferPeakWhere; ///< the op where each plan peaks (attn.peak_where)
  std::string ir;                        ///< the planned functions, printed (training step first)
  train::CompiledStepDesc step;          ///< sources, symbols, arguments (when emitted)
};

/// What compileModelGraph builds.
struct ModelGraphOptions {
  int batch = 1;           ///< sequences per training step
  int layers = 0;          ///< > 0: overrides the model's depth (memory plans by depth)
  int seq = 0;             ///< > 0: overrides the model's sequence length (benches)
  std::string variant;     ///< non-empty: the layers' attention variant instead of the spec's
  bool emitSource = false; ///< also emit the C++ (and the CUDA step)
  /// Standard layers keep only their inputs and recompute the rest in the
  /// backward (attn-derive-model-backward{recompute-layers}).
  bool recomputeLayers = false;
  /// false keeps attn-fuse-rows out of chunked FFN bodies (attnc bench
  /// --engines measures what fusing there gains).
  bool fuseInChunks = true;
  /// >= 0: the FFN's row chunk instead of the spec's (0: all rows at once;
  /// chunking never changes the result, only speed and memory).
  int ffnChunk = -1;
  bool train = true;  ///< the training step @train_<model>
  bool infer = true;  ///< the inference function @infer_<model> (CPU C++ only)
  int inferBatch = 0; ///< its sequences per call (0: batch)
};

/// Compiles `model` (of a module after attn-resolve-tunables) with the
/// model-step pipeline. Counts (kernels, GEMMs, attention calls) and the
/// kept bytes are the training step's. Diagnostics go to the context's
/// handler; failure returns false.
bool compileModelGraph(mlir::ModuleOp resolved, attn::ModelOp model,
                       const ModelGraphOptions &options, ModelGraph &out);

/// attnc compile's report of the compiled plans: for every model the arena
/// at the spec's depth (what a training step allocates besides weights,
/// gradients and optimizer state) and at 2, 6 and 12 layers; for standard
/// layers also with each layer recomputed in the backward.
/// `attnc compile --check-nvrtc`, training steps: compiles each model's
/// CUDA step kernels with NVRTC for `arch` and checks every kernel's ptxas
/// report (no spills, shared memory within the arch's limit). Non-zero on
/// failure.
mlir::LogicalResult checkModelStepsWithNvrtc(mlir::ModuleOp resolved, const std::string &arch,
                                             int batch, std::ostream &os);

void reportCompiledPlans(mlir::ModuleOp resolved, int batch, std::ostream &os);

/// `attnc compile`'s memory plan of every model of a resolved module for
/// `batch` sequences, from the compiled functions as attnc train runs them
/// (fp32 CPU, standard layers recomputed): what the training step keeps for
/// the backward, the rest of its arena (one layer's recomputation and the
/// head), the weights and their gradients; the inference peak (its arena,
/// the weights, the batch) and the op where it is; the kept bytes at 2, 6
/// and 12 layers (flat for reversible layers, growing for standard ones).
void reportMemoryPlans(mlir::ModuleOp resolved, int batch, std::ostream &os);

} // namespace attnc::driver

#endif // ATTNC_DRIVER_MODELGRAPH_H
