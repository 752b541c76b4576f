//===- AttentionFunction.h - One attention op as a function -----*- C++ -*-===//
//
// Builds `func.func @NAME(q, k, v, [lengths], [E], [F], [params])` (LSH:
// `(q, v, [lengths], rotations, [params])`, shared QK) holding one
// attn.attention of a variant, the unit the kernel pipeline (passes/Pipelines.h) compiles for
// `attnc compile` (per model) and `attnc run` (per input shapes).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_ATTENTIONFUNCTION_H
#define ATTNC_CODEGEN_ATTENTIONFUNCTION_H

#include "dialect/AttnDialect.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace attnc::codegen {

struct AttentionShape {
  int64_t batch = mlir::ShapedType::kDynamic;
  int64_t heads = 0;
  int64_t seq = mlir::ShapedType::kDynamic; ///< query and key length
  int64_t maxSeq = 0;                       ///< E/F columns (low-rank)
  int64_t headDim = 0;
  mlir::Type elementType;
  bool withLengths = false;   ///< add a key-padding lengths argument
  bool differentiate = false; ///< mark for attn-derive-backward
};

/// Appends the function to `module`. The variant's tunables must be resolved
/// (no `auto` k). Fails with a diagnostic for variants without kernels yet.
mlir::FailureOr<mlir::func::FuncOp> buildAttentionFunction(mlir::ModuleOp module,
                                                           attn::VariantOp variant,
                                                           llvm::StringRef name,
                                                           const AttentionShape &shape);

} // namespace attnc::codegen

#endif // ATTNC_CODEGEN_ATTENTIONFUNCTION_H
