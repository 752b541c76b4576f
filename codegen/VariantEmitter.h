//===- VariantEmitter.h - Variant policy structs from IR regions -*- C++ -*-===//
//
// Turns a fused attention op's score and mask regions into the C++ "variant
// policy" struct that both kernel header sets instantiate (docs/kernels.md):
// score(), score_grad() (forward-mode derivatives w.r.t. the score and each
// per-head parameter) and keep(). The same text compiles under NVRTC and
// the host compiler: it only uses ATTNC_HD and float/int arithmetic.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_VARIANTEMITTER_H
#define ATTNC_CODEGEN_VARIANTEMITTER_H

#include "mlir/IR/Operation.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/Support/raw_ostream.h"

namespace attnc::codegen {

/// Helper functions the generated structs call (NaN-propagating min/max,
/// integer abs, index clamping); emitted once per translation unit.
void emitVariantHelpers(llvm::raw_ostream &os);

/// Emits `struct <structName> { ... };` for a FusedAttentionOp or
/// FusedAttentionGradOp. Fails (with a diagnostic on the op) for an operation
/// in a region that has no C++ lowering.
mlir::LogicalResult emitVariantStruct(mlir::Operation *fusedOp, llvm::StringRef structName,
                                      llvm::raw_ostream &os);

} // namespace attnc::codegen

#endif // ATTNC_CODEGEN_VARIANTEMITTER_H
