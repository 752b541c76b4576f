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
    SmallVector<FusedAttentionOp> fused;
    func.walk([&](FusedAttentionOp op) { fused.push_back(op); });
    for (FusedAttentionOp op : fused) {
      if (!llvm::is_contained(ret.getOperands(), op.getOut()))
        continue; // no cotangent reaches this op
      BlockArgument dout = entry.addArgument(op.getOut().getType(), op.getLoc());
      OpBuilder b(ret);
      auto typeOf = [](Value v) { return v ? v.getType() : Type(); };
      auto grad = b.create<FusedAttentionGradOp>(
          op.getLoc(), op.getQuery().getType(), op.getKey().getType(),
          op.getValue().getType(), typeOf(op.getProjE()), typeOf(op.getProjF()),
          typeOf(op.getParams()), op.getQuery(), op.getKey(), op.getValue(), op.getOut(),
          op.getLse(), dout, op.getLengths(), op.getProjE(), op.getProjF(), op.getParams(),
          op.getKvSourceAttr(), op.getShareAttr(), op.getScaleAttr(), op.getCausalAttr(),
          op.getKeyPaddingAttr(), deterministic ? b.getUnitAttr() : UnitAttr(),
          TileAttr::getAuto(b.getContext()), StringAttr(), op.getParamDeclsAttr());
      IRMapping map;
      op.getScore().cloneInto(&grad.getScore(), map);
      op.getMask().cloneInto(&grad.getMask(), map);

      std::pair<Value, Value> flows[] = {
          {op.getQuery(), grad.getDquery()}, {op.getKey(), grad.getDkey()},
          {op.getValue(), grad.getDvalue()}, {op.getProjE(), grad.getDprojE()},
          {op.getProjF(), grad.getDprojF()}, {op.getParams(), grad.getDparams()}};
      for (auto [primal, g] : flows) {
        auto arg = llvm::dyn_cast_or_null<BlockArgument>(primal);
        if (!arg || arg.getOwner() != &entry)
          continue; // computed inside the function: not differentiated here
        if (!argGrads.emplace(arg.getArgNumber(), g).second) {
          op.emitOpError("argument #") << arg.getArgNumber()
                                       << " feeds several operands; accumulating its "
                                          "gradient is not supported yet";
          return signalPassFailure();
        }
      }
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
    func.setType(FunctionType::get(&getContext(), entry.getArgumentTypes(),
                                   TypeRange(ValueRange(results))));
    func->removeAttr("attn.differentiate");
    func->setAttr("attn.grad_of", b.getArrayAttr(gradOf));
  }
};

} // namespace
