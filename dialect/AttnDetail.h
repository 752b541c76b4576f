//===- AttnDetail.h - What the attn dialect's source files share -*- C++ -*-===//
//
// Private to dsl/Attn*.cpp: the tunable syntax (attributes and the ops'
// `custom<Tunable>` directive) and the shape and region checks that the
// core, LSH and graph ops' verifiers have in common.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_DIALECT_ATTNDETAIL_H
#define ATTNC_DIALECT_ATTNDETAIL_H

#include "dialect/AttnDialect.h"

#include "mlir/IR/OpImplementation.h"

namespace attnc::attn::dialect_detail {

/// A number or `auto` (kAuto).
mlir::ParseResult parseTunableValue(mlir::AsmParser &p, int64_t &value);
void printTunableValue(mlir::AsmPrinter &p, int64_t value);
/// The ops' `custom<Tunable>($attr)` directive.
mlir::ParseResult parseTunable(mlir::OpAsmParser &p, mlir::IntegerAttr &attr);
void printTunable(mlir::OpAsmPrinter &p, mlir::Operation *, mlir::IntegerAttr attr);
/// `auto`, or a value in [lo, hi].
bool tunableIn(int64_t v, int64_t lo, int64_t hi);
/// Parses `< key = value, ... >`, calling `parseValue(key)` at each value.
/// Keys may come in any order; each must appear exactly once.
mlir::ParseResult parseKeyValues(mlir::AsmParser &p, llvm::ArrayRef<llvm::StringRef> keys,
                                 llvm::function_ref<mlir::ParseResult(llvm::StringRef)> parseValue);

/// Names score/mask region arguments after the spec's variables.
void nameScalarRegionArgs(mlir::Region &region, bool isMask, mlir::OpAsmSetValueNameFn setName);
/// A score region (f32, index x4) -> f32 and a mask region (index x4) -> i1,
/// either of which may be empty.
mlir::LogicalResult verifyScoreAndMask(mlir::Operation *op, mlir::Region &score,
                                       mlir::Region &mask);
/// Two dimensions that may be equal (either dynamic, or the same).
bool compatibleDim(int64_t a, int64_t b);
/// Q, K, V, out, lse, lengths and projections of one attention agree.
mlir::LogicalResult verifyAttentionShapes(mlir::Operation *op, mlir::Value query, mlir::Value key,
                                          mlir::Value value, mlir::Type outType, mlir::Type lseType,
                                          mlir::Value lengths, mlir::Value projE,
                                          mlir::Value projF);
/// Per-head parameters are f32 [P, H].
mlir::LogicalResult verifyParams(mlir::Operation *op, mlir::Value params, mlir::Value query);
mlir::RankedTensorType tensorType(mlir::Value v);

/// A fused op's params operand agrees with its param_decls.
template <typename OpTy> mlir::LogicalResult verifyFusedParams(OpTy op) {
  mlir::ArrayAttr decls = op.getParamDeclsAttr();
  size_t numParams = decls ? decls.size() : 0;
  if (mlir::Value p = op.getParams()) {
    if (failed(verifyParams(op, p, op.getQuery())))
      return mlir::failure();
    int64_t rows = tensorType(p).getDimSize(0);
    if (!mlir::ShapedType::isDynamic(rows) && rows != static_cast<int64_t>(numParams))
      return op.emitOpError("params has ") << rows << " rows, param_decls " << numParams;
  } else if (numParams) {
    return op.emitOpError("declares per-head parameters but has no params operand");
  }
  return mlir::success();
}

} // namespace attnc::attn::dialect_detail

#endif // ATTNC_DIALECT_ATTNDETAIL_H
