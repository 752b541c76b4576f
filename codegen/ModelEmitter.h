//===- ModelEmitter.h - C++ for a compiled whole-model step ----*- C++ -*-===//
//
// Emits a planned @train_<model> function (attn-expand-model →
// attn-derive-model-backward → attn-fuse-rows → attn-plan-memory) for the
// CPU: one `static` row kernel per attn.fused_rows, and `extern "C" int
// attnc_step_<model>(env, arena, args, grads, loss)` that runs every op in
// program order on the planned arena offsets, sending GEMMs and attention
// to the runtime (attnc/model_step.h); or for CUDA: the same order as host
// code launching generated kernels.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_MODELEMITTER_H
#define ATTNC_CODEGEN_MODELEMITTER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <string>
#include <vector>

namespace attnc::codegen {

/// The entry point's name for `func`: attnc_step_<model> for @train_<model>,
/// attnc_infer_<model> for @infer_<model> (attn.inference).
std::string modelStepSymbol(mlir::func::FuncOp func);

/// The C++ source of `func`'s step, or failure (with a diagnostic on the
/// op that cannot be emitted, e.g. one the memory plan did not place). An
/// inference function's entry is `extern "C" int attnc_infer_<model>(env,
/// arena, args, logits)`: the forward, the logits copied to `logits`.
mlir::FailureOr<std::string> emitModelStepCpp(mlir::func::FuncOp func);

/// The CUDA step of `func` (docs/model-compilation.md): kernels for NVRTC
/// (one block per row for each row kernel, plus the fixed kernels of
/// attnc/model_step.cuh) and host code `attnc_cuda_step_<model>` that
/// orders them through an attnc_cuda_env (attnc/model_step_env.h).
struct CudaModelStep {
  std::string deviceSource, hostSource, symbol;
  std::vector<std::string> kernels; ///< the generated row kernels' names
};
/// `rowSmemLimit`: the shared memory a row kernel may use (static
/// __shared__ tops out at 48 KiB on every arch); the rest of a row goes to
/// the runtime's scratch.
mlir::FailureOr<CudaModelStep> emitModelStepCuda(mlir::func::FuncOp func,
                                                 int64_t rowSmemLimit = 48 * 1024);

} // namespace attnc::codegen

#endif // ATTNC_CODEGEN_MODELEMITTER_H
