//===- CompiledStep.h - Running a compiled whole-model step ----*- C++ -*-===//
//
// The runtime half of whole-model compilation: loads the C++ the compiler
// emitted for a @train_<model> function (codegen/ModelEmitter.cpp), gives
// it one arena of the planned size, the model's parameters (bound by name)
// and the GEMM and attention it calls back into, and runs a training step:
// the loss, with every parameter gradient written into the model's
// gradient buffers (the step's planned outputs, never in the arena).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_COMPILEDSTEP_H
#define ATTNC_RUNTIME_TRAIN_COMPILEDSTEP_H

#include "runtime/HostCompiler.h"
#include "runtime/train/Model.h"

#include <memory>

struct attnc_model_env; // codegen/cpu/include/attnc/model_step.h

namespace attnc::train {

/// What the compiler says about a step besides its source.
struct CompiledStepDesc {
  std::string source, symbol;
  int64_t arenaBytes = 0;
  int64_t keptBytes = 0; ///< of the arena, what the forward keeps for the backward
  int batch = 0;
  /// The function's arguments in order: "tokens", "targets", then
  /// parameter names (Model's) or constants ("layers.L.attn.lsh_rotations").
  std::vector<std::string> args;
  /// The argument numbers whose gradients the step returns, in order.
  std::vector<int> gradArgs;
};

class CompiledStep {
public:
  /// Compiles the step and binds it to `model` (which must outlive it).
  static Expected<std::unique_ptr<CompiledStep>>
  create(CompiledStepDesc desc, Model &model, AttentionFn attention,
         const std::vector<std::string> &includeDirs, const HostCompiler &compiler);

  /// One step on `batch` (its B must be the compiled batch): returns the
  /// loss and writes the gradients into the model's gradient buffers. `step` keys the
  /// dropout masks (as Model::setDropout); `training` false turns them off.
  Expected<double> run(const Batch &batch, bool training, int64_t step);

  int64_t arenaBytes() const { return desc_.arenaBytes; }
  int64_t keptBytes() const { return desc_.keptBytes; }
  bool fromCache() const { return fromCache_; }

private:
  CompiledStep(CompiledStepDesc desc, Model &model, AttentionFn attention, SharedObject so);
  static int attentionCallback(void *ctx, int64_t layer, const float *const *in, float *out,
                               float *lse);
  static int attentionGradCallback(void *ctx, int64_t layer, const float *const *in,
                                   float *const *out);
  static int nonfiniteCallback(void *ctx, const char *what, int64_t index, int64_t width,
                               float value);
  int attend(int64_t layer, const float *const *in, const float *dout, float *const *out,
             const float *forwardOut, const float *forwardLse);

  using StepFn = int(const attnc_model_env *env, char *arena, void *const *args, float *const *grads,
                     float *loss);
  CompiledStepDesc desc_;
  Model &model_;
  AttentionFn attention_;
  SharedObject so_;
  StepFn *fn_ = nullptr;
  bool fromCache_ = false;
  std::vector<float> arena_; ///< the planned arena (floats, so it is aligned)
  std::vector<void *> args_; ///< parameter pointers; tokens/targets set per run
  std::vector<float *> grads_;
  bool training_ = false;
  int64_t step_ = 0;
  std::string error_; ///< the attention error behind a non-zero return
};

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_COMPILEDSTEP_H
