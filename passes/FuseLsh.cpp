//===- FuseLsh.cpp - One kernel op for the LSH attention chain ------------===//
//
// Matches normalise → hash → sort → chunk attention → unsort → combine (as
// attn-expand-lsh writes it, intermediates used nowhere else) and replaces it
// with attn.fused_lsh_attention, whose three kernels are hash + counting
// sort, chunk attention with the gather in its prologue and the unsort in
// its epilogue, and the round combination.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace attnc {
#define GEN_PASS_DEF_FUSELSH
#include "passes/Passes.h.inc"
} // namespace attnc

using namespace mlir;
using namespace attnc::attn;

namespace {

bool onlyUsedBy(Value v, ArrayRef<Operation *> users) {
  return llvm::all_of(v.getUsers(), [&](Operation *u) { return llvm::is_contained(users, u); });
}

struct FuseLshPass : public attnc::impl::FuseLshBase<FuseLshPass> {
  void runOnOperation() override {
    SymbolTableCollection symbols;
    SmallVector<LshCombineOp> combines;
    getOperation().walk([&](LshCombineOp op) { combines.push_back(op); });
    for (LshCombineOp combine : combines)
      fuse(combine, symbols);
  }

  void fuse(LshCombineOp combine, SymbolTableCollection &symbols) {
    auto unsort = combine.getRoundOut().getDefiningOp<LshUnsortOp>();
    if (!unsort || combine.getRoundLse() != unsort.getLse())
      return;
    auto chunk = unsort.getSortedOut().getDefiningOp<LshChunkAttentionOp>();
    if (!chunk || unsort.getSortedLse() != chunk.getLse() || unsort.getPerm() != chunk.getPerm())
      return;
    auto sort = chunk.getPerm().getDefiningOp<LshSortOp>();
    auto hash = sort ? sort.getBuckets().getDefiningOp<LshHashOp>() : LshHashOp();
    auto keys = chunk.getKeys().getDefiningOp<LshNormalizeOp>();
    if (!hash || !keys || hash.getQuery() != chunk.getQuery() ||
        keys.getQuery() != chunk.getQuery())
      return;
    if (!onlyUsedBy(unsort.getOut(), {combine}) || !onlyUsedBy(unsort.getLse(), {combine}) ||
        !onlyUsedBy(chunk.getOut(), {unsort}) || !onlyUsedBy(chunk.getLse(), {unsort}) ||
        !onlyUsedBy(sort.getPerm(), {chunk, unsort}) || !onlyUsedBy(hash.getBuckets(), {sort}) ||
        !onlyUsedBy(keys.getKeys(), {chunk}))
      return;
    auto variant = symbols.lookupNearestSymbolFrom<VariantOp>(chunk, chunk.getVariantAttr());
    if (!variant)
      return;
    OpBuilder b(combine);
    auto rounds = llvm::cast<RankedTensorType>(hash.getRotations().getType()).getDimSize(0);
    auto fused = b.create<FusedLshAttentionOp>(
        combine.getLoc(), combine.getOut().getType(), combine.getLse().getType(), chunk.getQuery(),
        chunk.getValue(), hash.getRotations(), chunk.getLengths(), chunk.getParams(),
        hash.getNumBucketsAttr(), b.getI64IntegerAttr(rounds), chunk.getChunkAttr(),
        chunk.getBeforeAttr(), chunk.getAfterAttr(), chunk.getScaleAttr(),
        variant.getCausal() ? b.getUnitAttr() : UnitAttr(),
        chunk.getLengths() ? b.getUnitAttr() : UnitAttr(), variant.getTile(), StringAttr(),
        variant.getParamsAttr(), b.getI64IntegerAttr(variant.getLshAttr().getSeed()),
        variant.getDropoutAttr());
    IRMapping map;
    if (!variant.getScore().empty())
      variant.getScore().cloneInto(&fused.getScore(), map);
    if (!variant.getMask().empty())
      variant.getMask().cloneInto(&fused.getMask(), map);
    combine.getOut().replaceAllUsesWith(fused.getOut());
    combine.getLse().replaceAllUsesWith(fused.getLse());
    for (Operation *op : {combine.getOperation(), unsort.getOperation(), chunk.getOperation(),
                          sort.getOperation(), hash.getOperation(), keys.getOperation()})
      op->erase();
  }
};

} // namespace
