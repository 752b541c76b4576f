//===- ModelSession.h - A spec's model prepared for training ---*- C++ -*-===//
//
// What the model-level commands (attnc train, eval, generate, fill, tune's
// FFN chunk, the benches) and the test tools share: the spec loaded and
// resolved (tuning database, heuristics, the run directory's pinned kernel
// choices), the training runtime's configuration, the variant's attention
// kernels compiled for the model's shape, and the model compiled whole
// (its training step and inference function, driver/ModelGraph.h) into a
// runtime CompiledStep bound to a parameter store.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_DRIVER_MODELSESSION_H
#define ATTNC_DRIVER_MODELSESSION_H

#include "driver/Train.h"
#include "dialect/AttnDialect.h"

#include "runtime/CpuAttention.h"
#include "runtime/CudaAttention.h"
#include "runtime/train/CompiledStep.h"
#include "runtime/train/ModelConfig.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"

#include <memory>
#include <optional>
#include <string>

namespace attnc::driver {

/// A spec's model ready to compile: the resolved module, the training
/// configuration, and the variant's attention compiled for its shape.
struct PreparedModel {
  PreparedModel() = default;
  PreparedModel(const PreparedModel &) = delete;
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::optional<CpuAttention> kernels;
  /// --target cuda: the attention on the GPU (host in, host out), which the
  /// compiled step and inference function call instead of `kernels`.
  std::shared_ptr<CudaAttention> cudaKernels;
  std::string target = "cpu", precision = "f32";
  float lossScale = 0;
  train::ModelConfig config;
  /// The model's identity (driver/ModelIdentity.h), which its run's
  /// checkpoints and pins carry, and the canonical text it hashes.
  std::string specHash, modelText, name;

  /// The prepared model's op in `module`.
  attn::ModelOp model();
};

/// What a command does with the run directory's kernel choices.
enum class Pin { None, Read, ReadWrite };

/// Prepares `opt.spec`'s model (opt.model, or the only one) for command
/// `cmd` ("train", "eval", ...): errors are printed as `attnc <cmd>: error:`
/// and the exit code returned (0: ready). `pin`: how the run directory's
/// kernel choices (--out/kernel-choices.json) apply, written into the
/// module. `compileKernels` false leaves the attention kernels uncompiled
/// (attnc train compiles the model into an artifact instead).
mlir::LogicalResult prepare(const char *cmd, const TrainCliOptions &opt, PreparedModel &p,
                            Pin pin = Pin::Read, bool compileKernels = true);

/// The prepared attention: the GPU's with --target cuda, else the CPU's.
train::AttentionFn attentionOf(PreparedModel &p);

/// What to compile of the prepared model: its training step for `batch`
/// sequences (0: none) and its inference function for `inferBatch` (0: none).
struct StepPlan {
  int batch = 0, inferBatch = 0;
  bool recomputeLayers = true; ///< standard layers recomputed in the backward
  bool fuseInChunks = true;
  std::string engine = "compiled"; ///< or cuda-sim
  train::AttentionFn attention;    ///< empty: the prepared kernels (attentionOf)
};

/// Compiles what `plan` asks for and binds it to `store` (which must
/// outlive it): a step that trains and infers, or (batch 0) one that only
/// infers. Prints the step's plan to stderr.
Expected<std::unique_ptr<train::CompiledStep>>
compiledStep(PreparedModel &p, train::ParameterStore &store, const StepPlan &plan);

} // namespace attnc::driver

#endif // ATTNC_DRIVER_MODELSESSION_H
