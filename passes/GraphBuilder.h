//===- GraphBuilder.h - Building whole-model graph ops ---------*- C++ -*-===//
//
// Small helpers shared by the model passes (attn-expand-model,
// attn-derive-model-backward): create graph ops with their result types
// worked out from the operands, tagged with the layer they belong to.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_PASSES_GRAPHBUILDER_H
#define ATTNC_PASSES_GRAPHBUILDER_H

#include "dialect/AttnDialect.h"

#include "mlir/IR/Builders.h"

namespace attnc {

class GraphBuilder {
public:
  GraphBuilder(mlir::OpBuilder &b, mlir::Location loc) : b(b), loc(loc) {}

  mlir::OpBuilder &b;
  mlir::Location loc;
  /// Layer tag (`attn.layer`) of the ops created next; -1 for none.
  int64_t layer = -1;

  mlir::RankedTensorType f32(llvm::ArrayRef<int64_t> shape) {
    return mlir::RankedTensorType::get(shape, b.getF32Type());
  }
  static llvm::ArrayRef<int64_t> shape(mlir::Value v) {
    return llvm::cast<mlir::RankedTensorType>(v.getType()).getShape();
  }

  /// Tags `op` with the current layer and returns it.
  template <typename OpT> OpT tag(OpT op) {
    if (layer >= 0)
      op->setAttr("attn.layer", b.getI64IntegerAttr(layer));
    return op;
  }
  template <typename OpT, typename... Args> OpT make(Args &&...args) {
    return tag(b.create<OpT>(loc, std::forward<Args>(args)...));
  }

  mlir::Value matmul(mlir::Value a, mlir::Value w, bool ta = false, bool tb = false) {
    auto sa = shape(a), sw = shape(w);
    int64_t M = ta ? sa[1] : sa[0], N = tb ? sw[0] : sw[1];
    auto op = make<attn::MatmulOp>(f32({M, N}), a, w);
    if (ta)
      op.setTransposeA(true);
    if (tb)
      op.setTransposeB(true);
    return op;
  }
  mlir::Value biasAdd(mlir::Value x, mlir::Value bias) {
    return make<attn::BiasAddOp>(x.getType(), x, bias);
  }
  /// x·w + bias.
  mlir::Value linear(mlir::Value x, mlir::Value w, mlir::Value bias) {
    return biasAdd(matmul(x, w), bias);
  }
  mlir::Value add(mlir::Value a, mlir::Value c) { return make<attn::AddOp>(a.getType(), a, c); }
  mlir::Value sub(mlir::Value a, mlir::Value c) { return make<attn::SubOp>(a.getType(), a, c); }
  /// y of a layer norm (mean and rstd are its other results).
  attn::LayerNormOp layerNorm(mlir::Value x, mlir::Value g, mlir::Value beta) {
    int64_t R = shape(x)[0];
    return make<attn::LayerNormOp>(x.getType(), f32({R}), f32({R}), x, g, beta,
                                   b.getF64FloatAttr(1e-5));
  }
  mlir::Value columnSum(mlir::Value x) { return make<attn::ColumnSumOp>(f32({shape(x)[1]}), x); }
  mlir::Value splitHeads(mlir::Value x, int64_t batch, int64_t heads) {
    auto s = shape(x);
    return make<attn::SplitHeadsOp>(f32({batch, heads, s[0] / batch, s[1] / heads}), x);
  }
  mlir::Value mergeHeads(mlir::Value x) {
    auto s = shape(x);
    return make<attn::MergeHeadsOp>(f32({s[0] * s[2], s[1] * s[3]}), x);
  }
};

} // namespace attnc

#endif // ATTNC_PASSES_GRAPHBUILDER_H
