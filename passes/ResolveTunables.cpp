//===- ResolveTunables.cpp - Heuristic values for `auto` tunables ---------===//
#include "passes/Passes.h"

#include "llvm/ADT/DenseMap.h"

#include <algorithm>

namespace attnc {
#define GEN_PASS_DEF_RESOLVETUNABLES
#include "passes/Passes.h.inc"
} // namespace attnc

using namespace mlir;
using namespace attnc;
using namespace attnc::attn;

namespace {

struct ResolveTunablesPass : public attnc::impl::ResolveTunablesBase<ResolveTunablesPass> {
  using ResolveTunablesBase::ResolveTunablesBase;

  /// Returns `value`, or `fallback` when it is `auto` (reporting the choice).
  int64_t pick(Operation *op, StringRef what, int64_t value, int64_t fallback) {
    if (value != kAuto)
      return value;
    if (report)
      op->emitRemark() << what << " = auto resolved to " << fallback << " (heuristic)";
    return fallback;
  }

  void runOnOperation() override {
    ModuleOp module = getOperation();
    // Smallest sequence length among the models using each variant.
    llvm::DenseMap<StringAttr, int64_t> seqOf;
    module.walk([&](LayerOp layer) {
      auto model = layer->getParentOfType<ModelOp>();
      StringAttr name = layer.getAttentionAttr().getAttr();
      int64_t seq = static_cast<int64_t>(model.getSeq());
      auto [it, inserted] = seqOf.try_emplace(name, seq);
      if (!inserted)
        it->second = std::min(it->second, seq);
      if (auto chunk = layer.getFfnChunk(); chunk && static_cast<int64_t>(*chunk) == kAuto)
        layer.setFfnChunkAttr(
            IntegerAttr::get(IntegerType::get(&getContext(), 64),
                             pick(layer, "ffn chunk", kAuto, std::min<int64_t>(seq, 128))));
    });

    MLIRContext *ctx = &getContext();
    for (VariantOp v : module.getOps<VariantOp>()) {
      auto it = seqOf.find(v.getSymNameAttr());
      int64_t seq = it == seqOf.end() ? int64_t(defaultSeq) : it->second;
      if (auto lr = v.getLowrankAttr())
        v.setLowrankAttr(LowRankAttr::get(
            ctx, pick(v, "low-rank k", lr.getK(), std::min<int64_t>(256, seq)), lr.getShare()));
      if (auto lsh = v.getLshAttr()) {
        int64_t chunk = pick(v, "LSH chunk", lsh.getChunk(), 64);
        int64_t rounds = pick(v, "LSH rounds", lsh.getRounds(), 4);
        int64_t buckets = std::clamp<int64_t>(((2 * seq / chunk) + 1) / 2 * 2, 2, int64_t(1) << 16);
        buckets = pick(v, "LSH buckets", lsh.getBuckets(), buckets);
        v.setLshAttr(LshAttr::get(ctx, buckets, rounds, chunk, lsh.getBefore(), lsh.getAfter(),
                                  lsh.getSeed(), lsh.getDenseFallback()));
      }
    }
  }
};

} // namespace
