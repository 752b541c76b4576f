//===- AttentionFunction.cpp - One attention op as a function -------------===//
#include "codegen/AttentionFunction.h"

#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace attnc::attn;

namespace attnc::codegen {

FailureOr<func::FuncOp> buildAttentionFunction(ModuleOp module, VariantOp variant, StringRef name,
                                               const AttentionShape &s) {
  LshAttr lsh = variant.getLshAttr();
  if (lsh && (lsh.getBuckets() == kAuto || lsh.getRounds() == kAuto || lsh.getChunk() == kAuto))
    return variant.emitOpError("LSH buckets, rounds or chunk is still 'auto'; resolve "
                               "tunables first");
  // LSH decides its dense fallback from N.
  if (lsh && ShapedType::isDynamic(s.seq))
    return variant.emitOpError("LSH attention is compiled for a static sequence length");
  OpBuilder b(module.getContext());
  b.setInsertionPointToEnd(module.getBody());
  Location loc = variant.getLoc();
  auto qkv = RankedTensorType::get({s.batch, s.heads, s.seq, s.headDim}, s.elementType);
  auto lse = RankedTensorType::get({s.batch, s.heads, s.seq}, b.getF32Type());
  // Shared QK (LSH) has no key argument: the attention takes q as its key.
  SmallVector<Type> args = {qkv, qkv};
  if (!lsh)
    args.push_back(qkv);
  bool padding = s.withLengths && variant.getKeyPadding();
  if (padding)
    args.push_back(RankedTensorType::get({s.batch}, b.getI32Type()));
  unsigned numProj = 0;
  if (auto lr = variant.getLowrankAttr()) {
    if (lr.isAutoK())
      return variant.emitOpError("low-rank k is still 'auto'; resolve tunables first");
    SmallVector<int64_t> shape = {lr.getK(), s.maxSeq};
    if (lr.getShare() == ShareMode::none)
      shape.insert(shape.begin(), s.heads);
    numProj = (lr.getShare() == ShareMode::kv || lr.getShare() == ShareMode::layerwise) ? 1 : 2;
    for (unsigned i = 0; i < numProj; ++i)
      args.push_back(RankedTensorType::get(shape, s.elementType));
  }
  if (lsh)
    args.push_back(
        RankedTensorType::get({lsh.getRounds(), s.headDim, lsh.getBuckets() / 2}, b.getF32Type()));
  size_t numParams = variant.getParams() ? variant.getParams()->size() : 0;
  if (numParams)
    args.push_back(RankedTensorType::get({int64_t(numParams), s.heads}, b.getF32Type()));

  auto func = b.create<func::FuncOp>(loc, name, b.getFunctionType(args, {qkv, lse}));
  if (s.differentiate)
    func->setAttr("attn.differentiate", b.getUnitAttr());
  Block *entry = func.addEntryBlock();
  b.setInsertionPointToStart(entry);
  unsigned next = 0;
  Value q = entry->getArgument(next++);
  Value k = lsh ? q : entry->getArgument(next++);
  Value v = entry->getArgument(next++);
  Value lengths = padding ? entry->getArgument(next++) : Value();
  Value e = numProj ? entry->getArgument(next++) : Value();
  Value f = numProj == 2 ? entry->getArgument(next++) : Value();
  Value rotations = lsh ? entry->getArgument(next++) : Value();
  Value params = numParams ? entry->getArgument(next++) : Value();
  auto op = b.create<AttentionOp>(loc, TypeRange{qkv, lse},
                                  FlatSymbolRefAttr::get(variant.getSymNameAttr()), q, k, v,
                                  lengths, e, f, rotations, params);
  b.create<func::ReturnOp>(loc, op.getResults());
  return func;
}

} // namespace attnc::codegen
