//===- ModelEmitter.h - C++ for a compiled whole-model step ----*- C++ -*-===//
//
// Emits the CPU translation unit of a planned @train_<model> function
// (attn-expand-model → attn-derive-model-backward → attn-fuse-rows →
// attn-plan-memory): one `static` row kernel per attn.fused_rows, and
// `extern "C" int attnc_step_<model>(env, arena, args, grads, loss)` that
// runs every op in program order on the planned arena offsets, sending
// GEMMs and attention to the runtime (attnc/model_step.h).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_MODELEMITTER_H
#define ATTNC_CODEGEN_MODELEMITTER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <string>

namespace attnc::codegen {

/// The entry point's name for `func` (@train_<model>): attnc_step_<model>.
std::string modelStepSymbol(mlir::func::FuncOp func);

/// The C++ source of `func`'s step, or failure (with a diagnostic on the
/// op that cannot be emitted, e.g. one the memory plan did not place).
mlir::FailureOr<std::string> emitModelStepCpp(mlir::func::FuncOp func);

} // namespace attnc::codegen

#endif // ATTNC_CODEGEN_MODELEMITTER_H
