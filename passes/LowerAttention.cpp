//===- LowerAttention.cpp - attn.attention to tensor-level ops ------------===//
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

#include <cmath>

namespace attnc {
#define GEN_PASS_DEF_LOWERATTENTION
#include "passes/Passes.h.inc"
} // namespace attnc

using namespace mlir;
using namespace attnc::attn;

namespace {

/// [B, H, N, D] with N replaced by `n`.
RankedTensorType withSeq(RankedTensorType t, int64_t n) {
  SmallVector<int64_t> shape(t.getShape());
  shape[2] = n;
  return RankedTensorType::get(shape, t.getElementType());
}

struct LowerAttentionPass : public attnc::impl::LowerAttentionBase<LowerAttentionPass> {
  void runOnOperation() override {
    SymbolTableCollection symbols;
    SmallVector<AttentionOp> ops;
    getOperation().walk([&](AttentionOp op) { ops.push_back(op); });
    for (AttentionOp op : ops)
      if (failed(lower(op, symbols)))
        return signalPassFailure();
  }

  LogicalResult lower(AttentionOp op, SymbolTableCollection &symbols) {
    auto variant = symbols.lookupNearestSymbolFrom<VariantOp>(op, op.getVariantAttr());
    if (!variant)
      return op.emitOpError("refers to unknown attention variant ") << op.getVariantAttr();
    if (variant.getLsh())
      return success(); // LSH has its own expansion
    OpBuilder b(op);
    Location loc = op.getLoc();
    auto qType = llvm::cast<RankedTensorType>(op.getQuery().getType());
    Value key = op.getKey(), value = op.getValue(), lengths = op.getLengths();

    if (variant.getLowrank()) {
      // Sharing: kv and layerwise use E for both projections.
      Value e = op.getProjE();
      Value f = op.getProjF() ? op.getProjF() : e;
      auto eType = llvm::cast<RankedTensorType>(e.getType());
      int64_t k = eType.getDimSize(eType.getRank() - 2);
      auto kType = llvm::cast<RankedTensorType>(key.getType());
      auto vType = llvm::cast<RankedTensorType>(value.getType());
      key = b.create<SeqProjectOp>(loc, withSeq(kType, k), e, key, lengths, StringAttr());
      value = b.create<SeqProjectOp>(loc, withSeq(vType, k), f, value, lengths, StringAttr());
      lengths = Value(); // projected keys are all valid
    }

    double scale = variant.getScale() ? variant.getScale()->convertToDouble()
                                      : 1.0 / std::sqrt(double(qType.getDimSize(3)));
    int64_t nk = llvm::cast<RankedTensorType>(key.getType()).getDimSize(2);
    auto scoresType = RankedTensorType::get(
        {qType.getDimSize(0), qType.getDimSize(1), qType.getDimSize(2), nk}, b.getF32Type());
    Value s = b.create<ScoresOp>(loc, scoresType, op.getQuery(), key, b.getF64FloatAttr(scale));
    FlatSymbolRefAttr ref = op.getVariantAttr();
    if (!variant.getScore().empty())
      s = b.create<ScoreModOp>(loc, scoresType, ref, s, op.getParams());
    bool padding = variant.getKeyPadding() && lengths;
    if (variant.getCausal() || padding || !variant.getMask().empty())
      s = b.create<MaskOp>(loc, scoresType, ref, s, padding ? lengths : Value(), op.getParams());
    auto softmax =
        b.create<SoftmaxOp>(loc, scoresType, op.getLse().getType(), s, variant.getDropoutAttr());
    Value out = b.create<WeightedSumOp>(loc, op.getOut().getType(), softmax.getProbs(), value);
    op.getOut().replaceAllUsesWith(out);
    op.getLse().replaceAllUsesWith(softmax.getLse());
    op.erase();
    return success();
  }
};

} // namespace
