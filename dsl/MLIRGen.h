//===- MLIRGen.h - Lower a checked spec to the attn dialect -----*- C++ -*-===//
#ifndef ATTNC_DSL_MLIRGEN_H
#define ATTNC_DSL_MLIRGEN_H

#include "dsl/AST.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

namespace mlir {
class MLIRContext;
} // namespace mlir

namespace attnc {

/// Builds a module of `attn.variant` and `attn.model` ops from a spec that
/// passed Sema, with `file:line:col` locations, and verifies it. Returns null
/// (after the verifier's diagnostics) if verification fails.
mlir::OwningOpRef<mlir::ModuleOp> mlirGen(mlir::MLIRContext &context, const ast::Spec &spec);

/// Registers the dialects a spec's IR uses (attn, arith, math, func).
void registerAttncDialects(mlir::MLIRContext &context);

} // namespace attnc

#endif // ATTNC_DSL_MLIRGEN_H
