//===- DeriveBackward.cpp - Reverse mode over fused attention ops ---------===//
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"

#include <map>

namespace attnc {
#define GEN_PASS_DEF_DERIVEBACKWARD
#include "passes/Passes.h.inc"
} // namespace attnc

using namespace mlir;
using namespace attnc::attn;

namespace {

struct DeriveBackwardPass : public attnc::impl::DeriveBackwardBase<DeriveBackwardPass> {
  using DeriveBackwardBase::DeriveBackwardBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (!func->hasAttr("attn.differentiate"))
      return;
    if (!func.getBody().hasOneBlock()) {
      func.emitOpError("attn.differentiate needs a single-block function");
      return signalPassFailure();
    }
    Block &entry = func.getBody().front();
    auto ret = llvm::cast<func::ReturnOp>(entry.getTerminator());
    // Gradient of each function argument, by argument number.
    std::map<unsigned, Value> argGrads;
    // Records `g` as the gradient of `primal` when that is a function argument.
    auto flow = [&](Operation *op, Value primal, Value g) -> LogicalResult {
      auto arg = llvm::dyn_cast_or_null<BlockArgument>(primal);
      if (!arg || arg.getOwner() != &entry)
        return success(); // computed inside the function: not differentiated here
      if (argGrads.emplace(arg.getArgNumber(), g).second)
        return success();
      return op->emitOpError("argument #") << arg.getArgNumber()
                                           << " feeds several operands; accumulating its "
                                              "gradient is not supported yet";
    };
    SmallVector<Operation *> fused;
    func.walk([&](Operation *op) {
      if (llvm::isa<FusedAttentionOp, FusedLshAttentionOp>(op))
        fused.push_back(op);
    });
    for (Operation *fop : fused) {
      Value out = fop->getResult(0);
      if (!llvm::is_contained(ret.getOperands(), out))
        continue; // no cotangent reaches this op
      BlockArgument dout = entry.addArgument(out.getType(), fop->getLoc());
      OpBuilder b(ret);
      auto typeOf = [](Value v) { return v ? v.getType() : Type(); };
      UnitAttr det = deterministic ? b.getUnitAttr() : UnitAttr();
      if (auto op = llvm::dyn_cast<FusedLshAttentionOp>(fop)) {
        auto grad = b.create<FusedLshAttentionGradOp>(
            op.getLoc(), op.getQuery().getType(), op.getValue().getType(), op.getQuery(),
            op.getValue(), op.getRotations(), op.getOut(), op.getLse(), dout, op.getLengths(),
            op.getParams(), op.getNumBucketsAttr(), op.getRoundsAttr(), op.getChunkAttr(),
            op.getBeforeAttr(), op.getAfterAttr(), op.getScaleAttr(), op.getCausalAttr(),
            op.getKeyPaddingAttr(), det, TileAttr::getAuto(b.getContext()), StringAttr(),
            op.getParamDeclsAttr(), op.getDropoutAttr());
        IRMapping map;
        op.getScore().cloneInto(&grad.getScore(), map);
        op.getMask().cloneInto(&grad.getMask(), map);
        // dq includes the path through the normalised keys; rotations and
        // the (constant) parameters get no gradient.
        if (failed(flow(op, op.getQuery(), grad.getDquery())) ||
            failed(flow(op, op.getValue(), grad.getDvalue())))
          return signalPassFailure();
        continue;
      }
      auto op = llvm::cast<FusedAttentionOp>(fop);
      auto grad = b.create<FusedAttentionGradOp>(
          op.getLoc(), op.getQuery().getType(), op.getKey().getType(), op.getValue().getType(),
          typeOf(op.getProjE()), typeOf(op.getProjF()), typeOf(op.getParams()), op.getQuery(),
          op.getKey(), op.getValue(), op.getOut(), op.getLse(), dout, op.getLengths(),
          op.getProjE(), op.getProjF(), op.getParams(), op.getKvSourceAttr(), op.getShareAttr(),
          op.getScaleAttr(), op.getCausalAttr(), op.getKeyPaddingAttr(), op.getSharedQkAttr(),
          op.getSelfScoreAttr(), det, op.getMaxBackAttr(), op.getMaxAheadAttr(),
          TileAttr::getAuto(b.getContext()), StringAttr(), op.getParamDeclsAttr(),
          op.getDropoutAttr());
      IRMapping map;
      op.getScore().cloneInto(&grad.getScore(), map);
      op.getMask().cloneInto(&grad.getMask(), map);

      // With shared QK the key operand is the query: the kernels fold dk
      // (through the normalisation) into dq.
      std::pair<Value, Value> flows[] = {{op.getQuery(), grad.getDquery()},
                                         {op.getSharedQk() ? Value() : op.getKey(), grad.getDkey()},
                                         {op.getValue(), grad.getDvalue()},
                                         {op.getProjE(), grad.getDprojE()},
                                         {op.getProjF(), grad.getDprojF()},
                                         {op.getParams(), grad.getDparams()}};
      for (auto [primal, g] : flows)
        if (failed(flow(op, primal, g)))
          return signalPassFailure();
    }
    SmallVector<Value> results(ret.getOperands());
    SmallVector<Attribute> gradOf;
    OpBuilder b(ret);
    for (auto &[index, g] : argGrads) {
      results.push_back(g);
      gradOf.push_back(b.getI64IntegerAttr(index));
    }
    b.create<func::ReturnOp>(ret.getLoc(), results);
    ret.erase();
    func.setType(
        FunctionType::get(&getContext(), entry.getArgumentTypes(), TypeRange(ValueRange(results))));
    func->removeAttr("attn.differentiate");
    func->setAttr("attn.grad_of", b.getArrayAttr(gradOf));
  }
};

} // namespace
