//===- FuseAttention.cpp - One kernel op for the attention chain ----------===//
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

namespace attnc {
#define GEN_PASS_DEF_FUSEATTENTION
#include "passes/Passes.h.inc"
} // namespace attnc

using namespace mlir;
using namespace attnc::attn;

namespace {

/// The pieces of one matched chain.
struct Chain {
  WeightedSumOp sum;
  SoftmaxOp softmax;
  MaskOp mask;         // optional
  SelfScoreOp self;    // optional (dense fallback of LSH)
  ScoreModOp scoreMod; // optional
  LshNormalizeOp keys; // optional: shared-QK keys, the normalised query
  ScoresOp scores;
  SeqProjectOp projK, projV; // both or neither
};

bool usedOnlyBy(Value v, Operation *user) {
  return llvm::all_of(v.getUsers(), [&](Operation *u) { return u == user; });
}

/// Matches the chain ending at `sum`; intermediates must not escape.
std::optional<Chain> match(WeightedSumOp sum) {
  Chain c;
  c.sum = sum;
  c.softmax = sum.getProbs().getDefiningOp<SoftmaxOp>();
  if (!c.softmax || !usedOnlyBy(c.softmax.getProbs(), sum))
    return std::nullopt;
  Value s = c.softmax.getScores();
  Operation *user = c.softmax;
  if ((c.mask = s.getDefiningOp<MaskOp>())) {
    if (!usedOnlyBy(s, user))
      return std::nullopt;
    user = c.mask;
    s = c.mask.getScores();
  }
  if ((c.self = s.getDefiningOp<SelfScoreOp>())) {
    if (!usedOnlyBy(s, user))
      return std::nullopt;
    user = c.self;
    s = c.self.getScores();
  }
  if ((c.scoreMod = s.getDefiningOp<ScoreModOp>())) {
    if (!usedOnlyBy(s, user))
      return std::nullopt;
    user = c.scoreMod;
    s = c.scoreMod.getScores();
  }
  c.scores = s.getDefiningOp<ScoresOp>();
  if (!c.scores || !usedOnlyBy(s, user))
    return std::nullopt;
  if (c.mask && c.scoreMod && c.mask.getVariantAttr() != c.scoreMod.getVariantAttr())
    return std::nullopt;
  c.keys = c.scores.getKey().getDefiningOp<LshNormalizeOp>();
  if (c.keys &&
      (c.keys.getQuery() != c.scores.getQuery() || !usedOnlyBy(c.keys.getKeys(), c.scores)))
    return std::nullopt;
  c.projK = c.scores.getKey().getDefiningOp<SeqProjectOp>();
  c.projV = sum.getValue().getDefiningOp<SeqProjectOp>();
  if (bool(c.projK) != bool(c.projV))
    return std::nullopt;
  if (c.projK &&
      (!usedOnlyBy(c.projK.getResult(), c.scores) || !usedOnlyBy(c.projV.getResult(), sum) ||
       c.projK.getLengths() != c.projV.getLengths() ||
       llvm::cast<RankedTensorType>(c.projK.getInput().getType()).getRank() != 4))
    return std::nullopt;
  return c;
}

struct FuseAttentionPass : public attnc::impl::FuseAttentionBase<FuseAttentionPass> {
  void runOnOperation() override {
    SymbolTableCollection symbols;
    SmallVector<WeightedSumOp> sums;
    getOperation().walk([&](WeightedSumOp op) { sums.push_back(op); });
    for (WeightedSumOp sum : sums)
      if (std::optional<Chain> chain = match(sum))
        fuse(*chain, symbols);
  }

  void fuse(Chain &c, SymbolTableCollection &symbols) {
    OpBuilder b(c.sum);
    MLIRContext *ctx = b.getContext();
    FlatSymbolRefAttr ref = c.mask       ? c.mask.getVariantAttr()
                            : c.scoreMod ? c.scoreMod.getVariantAttr()
                                         : FlatSymbolRefAttr();
    VariantOp variant = ref ? symbols.lookupNearestSymbolFrom<VariantOp>(c.sum, ref) : nullptr;

    Value key = c.keys ? c.scores.getQuery() : c.scores.getKey(), value = c.sum.getValue(), e, f,
          lengths;
    KvSource source = KvSource::direct;
    ShareModeAttr share;
    if (c.projK) {
      source = KvSource::lowrank;
      key = c.projK.getInput();
      value = c.projV.getInput();
      e = c.projK.getProj();
      lengths = c.projK.getLengths();
      bool perHead = llvm::cast<RankedTensorType>(e.getType()).getRank() == 3;
      bool sameMatrix = c.projV.getProj() == e;
      if (!sameMatrix || perHead) // per-head projections always carry F
        f = c.projV.getProj();
      share = ShareModeAttr::get(ctx, perHead      ? ShareMode::none
                                      : sameMatrix ? ShareMode::kv
                                                   : ShareMode::headwise);
    } else if (c.mask) {
      lengths = c.mask.getLengths();
    }
    Value params = c.scoreMod ? c.scoreMod.getParams() : c.mask ? c.mask.getParams() : Value();
    TileAttr tile = variant ? variant.getTile() : TileAttr::getAuto(ctx);

    auto fused = b.create<FusedAttentionOp>(
        c.sum.getLoc(), c.sum.getOut().getType(), c.softmax.getLse().getType(), c.scores.getQuery(),
        key, value, lengths, e, f, params, KvSourceAttr::get(ctx, source), share,
        c.scores.getScaleAttr(),
        c.mask && variant && variant.getCausal() ? b.getUnitAttr() : UnitAttr(),
        lengths ? b.getUnitAttr() : UnitAttr(), c.keys ? b.getUnitAttr() : UnitAttr(),
        c.self ? c.self.getValueAttr() : FloatAttr(), IntegerAttr(), IntegerAttr(), tile,
        StringAttr(), variant ? variant.getParamsAttr() : ArrayAttr(), c.softmax.getDropoutAttr());
    if (variant && c.scoreMod && !variant.getScore().empty()) {
      IRMapping map;
      variant.getScore().cloneInto(&fused.getScore(), map);
    }
    if (variant && c.mask && !variant.getMask().empty()) {
      IRMapping map;
      variant.getMask().cloneInto(&fused.getMask(), map);
    }
    c.sum.getOut().replaceAllUsesWith(fused.getOut());
    c.softmax.getLse().replaceAllUsesWith(fused.getLse());
    c.sum.erase();
    c.softmax.erase();
    if (c.mask)
      c.mask.erase();
    if (c.self)
      c.self.erase();
    if (c.scoreMod)
      c.scoreMod.erase();
    c.scores.erase();
    if (c.keys)
      c.keys.erase();
    if (c.projK) {
      c.projK.erase();
      c.projV.erase();
    }
  }
};

} // namespace
