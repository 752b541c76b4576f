//===- AttnGraphOps.cpp - whole-model graph ops (AttnGraphOps.td) -----------===//
#include "dialect/AttnDetail.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace attnc::attn;
using namespace attnc::attn::dialect_detail;

//===----------------------------------------------------------------------===//
// Whole-model graph ops
//===----------------------------------------------------------------------===//

static RankedTensorType rankedOf(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

bool attnc::attn::isRowLocal(Operation *op) {
  return llvm::isa<EmbedOp, LayerNormOp, LayerNormGradOp, BiasAddOp, AddOp, SubOp, ActivationOp,
                   ActivationGradOp, DropoutOp, ConcatColsOp, SliceColsOp>(op);
}

LogicalResult EmbedOp::verify() {
  auto tok = rankedOf(getTokens()), table = rankedOf(getTable()), pos = rankedOf(getPositions()),
       y = rankedOf(getResult());
  if (tok.getRank() != 1 || !tok.getElementType().isInteger(32))
    return emitOpError("tokens must be [R] i32, found ") << tok;
  if (table.getRank() != 2 || pos.getRank() != 2 || y.getRank() != 2)
    return emitOpError("table, positions and result must be 2-D");
  if (table.getDimSize(1) != pos.getDimSize(1) || y.getDimSize(1) != table.getDimSize(1) ||
      y.getDimSize(0) != tok.getDimSize(0))
    return emitOpError("result ") << y << " does not match tokens " << tok << " and table "
                                  << table;
  if (pos.getDimSize(0) <= 0 || tok.getDimSize(0) % pos.getDimSize(0) != 0)
    return emitOpError("rows (") << tok.getDimSize(0) << ") must be a multiple of the positions ("
                                 << pos.getDimSize(0) << ")";
  return success();
}

LogicalResult LayerNormOp::verify() {
  auto x = rankedOf(getInput());
  if (x.getRank() != 2)
    return emitOpError("input must be [R, C], found ") << x;
  int64_t C = x.getDimSize(1), R = x.getDimSize(0);
  if (rankedOf(getGamma()).getShape() != ArrayRef<int64_t>{C} ||
      rankedOf(getBeta()).getShape() != ArrayRef<int64_t>{C})
    return emitOpError("gamma and beta must be [") << C << "]";
  if (rankedOf(getMean()).getShape() != ArrayRef<int64_t>{R} ||
      rankedOf(getRstd()).getShape() != ArrayRef<int64_t>{R})
    return emitOpError("mean and rstd must be [") << R << "]";
  if (getResult().getType() != x)
    return emitOpError("result must have the input's type ") << x;
  return success();
}

LogicalResult MatmulOp::verify() {
  auto a = rankedOf(getLhs()), b = rankedOf(getRhs()), c = rankedOf(getResult());
  if (a.getRank() != 2 || b.getRank() != 2 || c.getRank() != 2)
    return emitOpError("operands and result must be 2-D");
  int64_t M = a.getDimSize(getTransposeA() ? 1 : 0), K = a.getDimSize(getTransposeA() ? 0 : 1);
  int64_t K2 = b.getDimSize(getTransposeB() ? 1 : 0), N = b.getDimSize(getTransposeB() ? 0 : 1);
  if (K != K2)
    return emitOpError("inner dimensions differ: ") << K << " vs " << K2;
  if (c.getDimSize(0) != M || c.getDimSize(1) != N)
    return emitOpError("result must be [") << M << ", " << N << "], found " << c;
  return success();
}

/// Whether `rows` [B·S, H·D] and `heads` [B, H, S, D] hold the same values.
static bool sameHeadLayout(RankedTensorType rows, RankedTensorType heads) {
  return rows.getRank() == 2 && heads.getRank() == 4 &&
         heads.getDimSize(0) * heads.getDimSize(2) == rows.getDimSize(0) &&
         heads.getDimSize(1) * heads.getDimSize(3) == rows.getDimSize(1);
}

LogicalResult SplitHeadsOp::verify() {
  auto x = rankedOf(getInput()), y = rankedOf(getResult());
  if (!sameHeadLayout(x, y))
    return emitOpError("cannot split ") << x << " into " << y;
  return success();
}

LogicalResult MergeHeadsOp::verify() {
  auto x = rankedOf(getInput()), y = rankedOf(getResult());
  if (!sameHeadLayout(y, x))
    return emitOpError("cannot merge ") << x << " into " << y;
  return success();
}

LogicalResult AttentionGradOp::verify() {
  unsigned expected = (getProjE() ? 1 : 0) + (getProjF() ? 1 : 0) + (getParams() ? 1 : 0);
  if (getParamGrads().size() != expected)
    return emitOpError("expects ")
           << expected << " parameter gradients (E, F, params present), found "
           << getParamGrads().size();
  if (getDquery().getType() != getQuery().getType() || getDkey().getType() != getKey().getType() ||
      getDvalue().getType() != getValue().getType() || getDout().getType() != getOut().getType())
    return emitOpError("dq, dk and dv must have the types of q, k and v, and dout the output's");
  // Each parameter gradient has its parameter's type, in operand order.
  unsigned i = 0;
  for (Value p : {getProjE(), getProjF(), getParams()})
    if (p && getParamGrads()[i++].getType() != p.getType())
      return emitOpError("parameter gradient #")
             << i - 1 << " has type " << getParamGrads()[i - 1].getType() << ", its parameter "
             << p.getType();
  return success();
}

LogicalResult AttentionGradOp::verifySymbolUses(SymbolTableCollection &symbols) {
  if (!symbols.lookupNearestSymbolFrom<VariantOp>(*this, getVariantAttr()))
    return emitOpError("refers to unknown attention variant ") << getVariantAttr();
  return success();
}

LogicalResult FusedRowsOp::verify() {
  Block &body = getBody().front();
  if (body.getNumArguments() != getInputs().size())
    return emitOpError("body takes ")
           << body.getNumArguments() << " arguments for " << getInputs().size() << " inputs";
  // Row-indexed values (everything codegen reads or writes per row) have
  // `rows` rows; results always do.
  for (Type t : getResultTypes())
    if (llvm::cast<RankedTensorType>(t).getRank() < 1 ||
        llvm::cast<RankedTensorType>(t).getDimSize(0) != getRows())
      return emitOpError("result type ") << t << " does not have " << getRows() << " rows";
  for (auto [arg, in] : llvm::zip(body.getArguments(), getInputs()))
    if (arg.getType() != in.getType())
      return emitOpError("body argument type ")
             << arg.getType() << " differs from input " << in.getType();
  auto yield = llvm::cast<RowsYieldOp>(body.getTerminator());
  if (TypeRange(yield.getValues()) != getResultTypes())
    return emitOpError("yields types that differ from the results");
  return success();
}

LogicalResult RowChunksOp::verify() {
  Block &body = getBody().front();
  size_t n = getInputs().size();
  if (body.getNumArguments() != n || getSplit().size() != n)
    return emitOpError("needs one body argument and one split flag per input");
  if (getSums().size() != getNumResults())
    return emitOpError("needs one sums flag per result");
  if (getChunk() <= 0)
    return emitOpError("chunk must be positive, found ") << getChunk();
  auto yield = llvm::cast<ChunksYieldOp>(body.getTerminator());
  if (yield.getValues().size() != getNumResults())
    return emitOpError("body yields ")
           << yield.getValues().size() << " values for " << getNumResults() << " results";
  // Every split input has the same rows R, cut into chunks of `chunk` rows
  // (the body's types); concatenated results have R rows again.
  std::optional<int64_t> rows;
  for (auto [i, arg] : llvm::enumerate(body.getArguments())) {
    auto in = rankedOf(getInputs()[i]), a = rankedOf(arg);
    bool ok = getSplit()[i] ? (in.getRank() >= 1 && a.getRank() == in.getRank() &&
                               a.getShape().drop_front() == in.getShape().drop_front() &&
                               a.getDimSize(0) == getChunk())
                            : a == in;
    if (!ok)
      return emitOpError("body argument #")
             << i << " " << a << " does not fit input " << in << " (split inputs are chunks of "
             << getChunk() << " rows)";
    if (getSplit()[i]) {
      if (rows && *rows != in.getDimSize(0))
        return emitOpError("split inputs have different row counts: ")
               << *rows << " and " << in.getDimSize(0);
      rows = in.getDimSize(0);
    }
  }
  if (!rows)
    return emitOpError("needs at least one split input");
  for (auto [i, v] : llvm::enumerate(yield.getValues())) {
    auto r = rankedOf(getResult(i)), c = rankedOf(v);
    bool ok = getSums()[i] ? r == c
                           : r.getRank() == c.getRank() && r.getDimSize(0) == *rows &&
                                 c.getDimSize(0) == getChunk() &&
                                 r.getShape().drop_front() == c.getShape().drop_front();
    if (!ok)
      return emitOpError("result #") << i << " " << r << " does not fit the chunk value " << c;
  }
  return success();
}
