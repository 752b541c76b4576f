//===- ExpandLsh.cpp - LSH attn.attention to hash/sort/chunk/combine ------===//
//
// Expands an LSH attn.attention into the steps its semantics are written in
// (docs/kernels.md "LSH kernels"): normalised keys, hash, counting sort,
// chunked attention in sorted order, unsort, round combination. When every
// query's chunk window covers every chunk (ceil(N/chunk) ≤ min(before,
// after) + 1) the buckets change nothing, so, unless the spec says
// dense_fallback = false, it emits dense attention with the same masks and
// the self score instead, and says so.
//
//===----------------------------------------------------------------------===//
#include "passes/Passes.h"

#include "attnc/abi/SharedQk.h"

#include "mlir/IR/Builders.h"

namespace attnc {
#define GEN_PASS_DEF_EXPANDLSH
#include "passes/Passes.h.inc"
} // namespace attnc

using namespace mlir;
using namespace attnc::attn;

namespace {

struct ExpandLshPass : public attnc::impl::ExpandLshBase<ExpandLshPass> {
  using ExpandLshBase::ExpandLshBase;

  void runOnOperation() override {
    SymbolTableCollection symbols;
    SmallVector<AttentionOp> ops;
    getOperation().walk([&](AttentionOp op) { ops.push_back(op); });
    for (AttentionOp op : ops) {
      auto variant = symbols.lookupNearestSymbolFrom<VariantOp>(op, op.getVariantAttr());
      if (!variant || !variant.getLsh())
        continue;
      if (failed(expand(op, variant)))
        return signalPassFailure();
    }
  }

  LogicalResult expand(AttentionOp op, VariantOp variant) {
    LshAttr lsh = variant.getLshAttr();
    if (lsh.getBuckets() == kAuto || lsh.getRounds() == kAuto || lsh.getChunk() == kAuto)
      return op.emitOpError("LSH buckets, rounds and chunk must be resolved first "
                            "(run attn-resolve-tunables)");
    auto qType = llvm::cast<RankedTensorType>(op.getQuery().getType());
    int64_t n = qType.getDimSize(2);
    if (ShapedType::isDynamic(n))
      return op.emitOpError("LSH attention needs a static sequence length");
    OpBuilder b(op);
    Location loc = op.getLoc();
    FlatSymbolRefAttr ref = op.getVariantAttr();
    Value q = op.getQuery(), v = op.getValue(), params = op.getParams();
    Value lengths = variant.getKeyPadding() ? op.getLengths() : Value();
    double scale = variant.getScale() ? variant.getScale()->convertToDouble() : 1.0;
    int64_t chunk = lsh.getChunk(), rounds = lsh.getRounds();
    int64_t numChunks = (n + chunk - 1) / chunk;
    Value keys = b.create<LshNormalizeOp>(loc, qType, q);

    if (lsh.getDenseFallback() && numChunks - 1 <= std::min(lsh.getBefore(), lsh.getAfter())) {
      if (report)
        op.emitRemark() << "LSH attention " << ref << " at N = " << n << " with chunk = " << chunk
                        << " has " << numChunks
                        << " chunk(s), within min(before, after) + 1, so every query sees "
                           "every key: emitting dense attention with the same masks "
                           "(dense_fallback = false keeps LSH)";
      auto scoresType =
          RankedTensorType::get({qType.getDimSize(0), qType.getDimSize(1), n, n}, b.getF32Type());
      Value s = b.create<ScoresOp>(loc, scoresType, q, keys, b.getF64FloatAttr(scale));
      if (!variant.getScore().empty())
        s = b.create<ScoreModOp>(loc, scoresType, ref, s, params);
      s = b.create<SelfScoreOp>(loc, scoresType, s,
                                b.getF64FloatAttr(double(attnc::kLshSelfScore)));
      if (variant.getCausal() || lengths || !variant.getMask().empty())
        s = b.create<MaskOp>(loc, scoresType, ref, s, lengths, params);
      auto softmax =
          b.create<SoftmaxOp>(loc, scoresType, op.getLse().getType(), s, variant.getDropoutAttr());
      Value out = b.create<WeightedSumOp>(loc, op.getOut().getType(), softmax.getProbs(), v);
      op.getOut().replaceAllUsesWith(out);
      op.getLse().replaceAllUsesWith(softmax.getLse());
      op.erase();
      return success();
    }

    Value rotations = op.getRotations();
    if (!rotations)
      return op.emitOpError("LSH attention needs its rotations operand");
    int64_t B = qType.getDimSize(0), H = qType.getDimSize(1), D = qType.getDimSize(3);
    int64_t npad = numChunks * chunk;
    Type i32 = b.getI32Type(), f32 = b.getF32Type();
    Type elt = qType.getElementType();
    Value buckets = b.create<LshHashOp>(loc, RankedTensorType::get({B, H, rounds, n}, i32), q,
                                        rotations, b.getI64IntegerAttr(lsh.getBuckets()));
    Value perm =
        b.create<LshSortOp>(loc, RankedTensorType::get({B, H, rounds, npad}, i32), buckets,
                            b.getI64IntegerAttr(lsh.getBuckets()), b.getI64IntegerAttr(chunk));
    auto sorted = b.create<LshChunkAttentionOp>(
        loc, RankedTensorType::get({B, H, rounds, npad, D}, elt),
        RankedTensorType::get({B, H, rounds, npad}, f32), ref, q, keys, v, perm, lengths, params,
        b.getI64IntegerAttr(chunk), b.getI64IntegerAttr(lsh.getBefore()),
        b.getI64IntegerAttr(lsh.getAfter()), b.getF64FloatAttr(scale));
    auto unsorted = b.create<LshUnsortOp>(loc, RankedTensorType::get({B, H, rounds, n, D}, elt),
                                          RankedTensorType::get({B, H, rounds, n}, f32),
                                          sorted.getOut(), sorted.getLse(), perm);
    auto combined = b.create<LshCombineOp>(loc, op.getOut().getType(), op.getLse().getType(),
                                           unsorted.getOut(), unsorted.getLse());
    op.getOut().replaceAllUsesWith(combined.getOut());
    op.getLse().replaceAllUsesWith(combined.getLse());
    op.erase();
    return success();
  }
};

} // namespace
