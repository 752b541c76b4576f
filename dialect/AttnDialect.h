//===- AttnDialect.h - The attn dialect -------------------------*- C++ -*-===//
#ifndef ATTNC_DIALECT_ATTNDIALECT_H
#define ATTNC_DIALECT_ATTNDIALECT_H

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace attnc::attn {
/// Sentinel stored in integer tunables that the spec left as `auto`.
inline constexpr int64_t kAuto = -1;
} // namespace attnc::attn

#include "dialect/AttnDialect.h.inc"
#include "dialect/AttnEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "dialect/AttnAttrs.h.inc"

#define GET_OP_CLASSES
#include "dialect/AttnOps.h.inc"

namespace attnc::attn {
/// The per-head parameter declarations of a variant or fused op (or null).
mlir::ArrayAttr getParamDecls(mlir::Operation *op);
/// Row of parameter `name` in the params tensor, or -1.
int paramIndex(mlir::ArrayAttr decls, llvm::StringRef name);
/// "f32", "f16" or "bf16" for an attention element type ("unknown" else):
/// the spelling of kernel names and manifests.
llvm::StringRef elementTypeName(mlir::Type t);
/// Whether `op` is a row-local graph op: each output row depends only on the
/// same row of its row operands (plus whole parameters). attn-fuse-rows
/// fuses exactly these, and the step emitter evaluates them row by row.
bool isRowLocal(mlir::Operation *op);
} // namespace attnc::attn

#endif // ATTNC_DIALECT_ATTNDIALECT_H
