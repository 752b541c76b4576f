//===- LowRankOrder.cpp - Project before or after the K/V map -------------===//
#include "passes/Passes.h"

#include "mlir/IR/Builders.h"

namespace attnc {
#define GEN_PASS_DEF_LOWRANKORDER
#include "passes/Passes.h.inc"
} // namespace attnc

using namespace mlir;
using namespace attnc::attn;

namespace {

struct LowRankOrderPass : public attnc::impl::LowRankOrderBase<LowRankOrderPass> {
  using LowRankOrderBase::LowRankOrderBase;

  void runOnOperation() override {
    SmallVector<SeqProjectOp> ops;
    getOperation().walk([&](SeqProjectOp op) {
      if (!op.getOrder())
        ops.push_back(op);
    });
    for (SeqProjectOp op : ops)
      decide(op);
  }

  void decide(SeqProjectOp op) {
    OpBuilder b(op);
    auto linear = op.getInput().getDefiningOp<LinearOp>();
    auto projType = llvm::cast<RankedTensorType>(op.getProj().getType());
    if (!linear || !linear->hasOneUse() || projType.getRank() != 2 ||
        llvm::cast<RankedTensorType>(op.getInput().getType()).getRank() != 4) {
      op.setOrderAttr(b.getStringAttr("after"));
      if (report)
        op.emitRemark("projecting after the K/V map: its input is not a linear map "
                      "used only here with a projection shared by heads");
      return;
    }
    auto x = llvm::cast<RankedTensorType>(linear.getInput().getType());
    auto y = llvm::cast<RankedTensorType>(linear.getResult().getType());
    if (!x.hasStaticShape() || !y.hasStaticShape() || !projType.hasStaticShape()) {
      op.setOrderAttr(b.getStringAttr("after"));
      return;
    }
    double B = x.getDimSize(0), N = x.getDimSize(1), C = x.getDimSize(2);
    double H = y.getDimSize(1), D = y.getDimSize(3), k = projType.getDimSize(0);
    double after = 2 * B * N * C * H * D + 2 * B * H * k * N * D;
    double before = 2 * B * k * N * C + 2 * B * k * C * H * D;
    bool moveBefore = before < after;
    if (report)
      op.emitRemark() << "projecting " << (moveBefore ? "before" : "after")
                      << " the K/V map: " << static_cast<int64_t>(before) << " FLOPs before vs "
                      << static_cast<int64_t>(after) << " after";
    if (!moveBefore) {
      op.setOrderAttr(b.getStringAttr("after"));
      return;
    }
    // (E·X)·W: project the layer input, then apply the map.
    b.setInsertionPoint(linear);
    auto exType = RankedTensorType::get({x.getDimSize(0), projType.getDimSize(0), x.getDimSize(2)},
                                        x.getElementType());
    Value ex = b.create<SeqProjectOp>(op.getLoc(), exType, op.getProj(), linear.getInput(),
                                      op.getLengths(), b.getStringAttr("before"));
    Value mapped =
        b.create<LinearOp>(linear.getLoc(), op.getResult().getType(), ex, linear.getWeight());
    op.getResult().replaceAllUsesWith(mapped);
    op.erase();
    linear.erase();
  }
};

} // namespace
