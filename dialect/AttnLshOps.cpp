//===- AttnLshOps.cpp - LSH ops and their verifiers (AttnLshOps.td) ---------===//
#include "dialect/AttnDetail.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace attnc::attn;
using namespace attnc::attn::dialect_detail;

//===----------------------------------------------------------------------===//
// LSH ops (AttnLshOps.td)
//===----------------------------------------------------------------------===//

/// A static [B, H, ...] prefix check shared by the LSH ops: `t` has `rank`
/// and agrees with the query on B and H.
static bool sameBatchHeads(RankedTensorType t, RankedTensorType q, int64_t rank) {
  return t.getRank() == rank && compatibleDim(t.getDimSize(0), q.getDimSize(0)) &&
         compatibleDim(t.getDimSize(1), q.getDimSize(1));
}

static LogicalResult verifyQuery4d(Operation *op, RankedTensorType q) {
  if (q.getRank() != 4)
    return op->emitOpError("query must be [B, H, N, Dh], found ") << q;
  Type elt = q.getElementType();
  if (!elt.isF32() && !elt.isF16() && !elt.isBF16())
    return op->emitOpError("element type must be f32, f16 or bf16, found ") << elt;
  return success();
}

LogicalResult LshNormalizeOp::verify() {
  auto q = tensorType(getQuery()), k = tensorType(getKeys());
  if (failed(verifyQuery4d(*this, q)))
    return failure();
  if (k != q)
    return emitOpError("keys must have the query's type ") << q << ", found " << k;
  return success();
}

LogicalResult LshHashOp::verify() {
  auto q = tensorType(getQuery()), r = tensorType(getRotations()), out = tensorType(getBuckets());
  if (failed(verifyQuery4d(*this, q)))
    return failure();
  int64_t nb = getNumBuckets();
  if (nb < 2 || nb % 2)
    return emitOpError("num_buckets must be even and at least 2, found ") << nb;
  if (r.getRank() != 3 || !r.getElementType().isF32() ||
      !compatibleDim(r.getDimSize(1), q.getDimSize(3)) || !compatibleDim(r.getDimSize(2), nb / 2))
    return emitOpError("rotations must be f32 [rounds, Dh, num_buckets/2], found ") << r;
  if (!sameBatchHeads(out, q, 4) || !out.getElementType().isInteger(32) ||
      !compatibleDim(out.getDimSize(2), r.getDimSize(0)) ||
      !compatibleDim(out.getDimSize(3), q.getDimSize(2)))
    return emitOpError("buckets must be i32 [B, H, rounds, N], found ") << out;
  return success();
}

/// ceil(n / chunk) * chunk, or dynamic.
static int64_t paddedLength(int64_t n, int64_t chunk) {
  return ShapedType::isDynamic(n) ? n : (n + chunk - 1) / chunk * chunk;
}

LogicalResult LshSortOp::verify() {
  auto in = tensorType(getBuckets()), out = tensorType(getPerm());
  if (getChunk() < 1)
    return emitOpError("chunk must be positive, found ") << getChunk();
  if (in.getRank() != 4 || !in.getElementType().isInteger(32))
    return emitOpError("buckets must be i32 [B, H, rounds, N], found ") << in;
  if (!sameBatchHeads(out, in, 4) || !out.getElementType().isInteger(32) ||
      !compatibleDim(out.getDimSize(2), in.getDimSize(2)) ||
      !compatibleDim(out.getDimSize(3), paddedLength(in.getDimSize(3), getChunk())))
    return emitOpError("perm must be i32 [B, H, rounds, ceil(N/chunk)*chunk], found ") << out;
  return success();
}

LogicalResult LshChunkAttentionOp::verify() {
  auto q = tensorType(getQuery()), k = tensorType(getKeys()), v = tensorType(getValue()),
       perm = tensorType(getPerm()), out = tensorType(getOut()), lse = tensorType(getLse());
  if (failed(verifyQuery4d(*this, q)))
    return failure();
  if (k.getShape() != q.getShape() || v.getShape() != q.getShape())
    return emitOpError("query, keys and value must have one shape");
  if (getChunk() < 1 || getBefore() < 0 || getAfter() < 0)
    return emitOpError("chunk must be positive and before/after non-negative");
  if (!sameBatchHeads(perm, q, 4) || !perm.getElementType().isInteger(32) ||
      !compatibleDim(perm.getDimSize(3), paddedLength(q.getDimSize(2), getChunk())))
    return emitOpError("perm must be i32 [B, H, rounds, Npad], found ") << perm;
  if (!sameBatchHeads(out, q, 5) || out.getElementType() != q.getElementType() ||
      !compatibleDim(out.getDimSize(2), perm.getDimSize(2)) ||
      !compatibleDim(out.getDimSize(3), perm.getDimSize(3)) ||
      !compatibleDim(out.getDimSize(4), q.getDimSize(3)))
    return emitOpError("out must be [B, H, rounds, Npad, Dh], found ") << out;
  if (!sameBatchHeads(lse, q, 4) || !lse.getElementType().isF32() ||
      !compatibleDim(lse.getDimSize(3), perm.getDimSize(3)))
    return emitOpError("lse must be f32 [B, H, rounds, Npad], found ") << lse;
  return verifyParams(*this, getParams(), getQuery());
}

LogicalResult LshChunkAttentionOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto variant = symbols.lookupNearestSymbolFrom<VariantOp>(*this, getVariantAttr());
  if (!variant)
    return emitOpError("refers to unknown attention variant ") << getVariantAttr();
  if (!variant.getLsh())
    return emitOpError("variant ") << getVariantAttr() << " is not LSH-bucketed";
  return success();
}

LogicalResult LshUnsortOp::verify() {
  auto so = tensorType(getSortedOut()), sl = tensorType(getSortedLse()),
       perm = tensorType(getPerm()), o = tensorType(getOut()), l = tensorType(getLse());
  if (so.getRank() != 5 || sl.getRank() != 4 || perm.getRank() != 4 || o.getRank() != 5 ||
      l.getRank() != 4)
    return emitOpError("expects [B, H, R, Npad, Dh], [B, H, R, Npad] and perm [B, H, R, Npad]");
  if (!compatibleDim(so.getDimSize(3), perm.getDimSize(3)) ||
      !compatibleDim(o.getDimSize(3), l.getDimSize(3)) ||
      !compatibleDim(o.getDimSize(4), so.getDimSize(4)) ||
      (!ShapedType::isDynamic(o.getDimSize(3)) && !ShapedType::isDynamic(so.getDimSize(3)) &&
       o.getDimSize(3) > so.getDimSize(3)))
    return emitOpError("unsorted results must be [B, H, R, N, Dh] with N <= Npad");
  return success();
}

LogicalResult LshCombineOp::verify() {
  auto ro = tensorType(getRoundOut()), rl = tensorType(getRoundLse()), o = tensorType(getOut()),
       l = tensorType(getLse());
  if (ro.getRank() != 5 || rl.getRank() != 4 || o.getRank() != 4 || l.getRank() != 3 ||
      !compatibleDim(ro.getDimSize(3), o.getDimSize(2)) ||
      !compatibleDim(ro.getDimSize(4), o.getDimSize(3)) ||
      !compatibleDim(rl.getDimSize(3), l.getDimSize(2)) || !l.getElementType().isF32())
    return emitOpError("expects [B, H, R, N, Dh] and f32 [B, H, R, N] rounds, giving "
                       "[B, H, N, Dh] and f32 [B, H, N]");
  return success();
}

/// Rules shared by the fused LSH op and its gradient.
template <typename OpTy> static LogicalResult verifyFusedLsh(OpTy op) {
  auto q = tensorType(op.getQuery());
  if (failed(verifyAttentionShapes(op, op.getQuery(), op.getQuery(), op.getValue(),
                                   op.getOut().getType(), op.getLse().getType(), op.getLengths(),
                                   Value(), Value())))
    return failure();
  int64_t nb = op.getNumBuckets(), rounds = op.getRounds();
  if (nb < 2 || nb % 2)
    return op.emitOpError("num_buckets must be even and at least 2, found ") << nb;
  if (rounds < 1 || op.getChunk() < 1 || op.getBefore() < 0 || op.getAfter() < 0)
    return op.emitOpError("rounds and chunk must be positive, before/after non-negative");
  auto r = tensorType(op.getRotations());
  if (r.getRank() != 3 || !r.getElementType().isF32() || !compatibleDim(r.getDimSize(0), rounds) ||
      !compatibleDim(r.getDimSize(1), q.getDimSize(3)) || !compatibleDim(r.getDimSize(2), nb / 2))
    return op.emitOpError("rotations must be f32 [rounds, Dh, num_buckets/2] = [")
           << rounds << ", " << q.getDimSize(3) << ", " << nb / 2 << "], found " << r;
  if (!(op.getScale().convertToDouble() > 0))
    return op.emitOpError("scale must be positive");
  if (failed(verifyFusedParams(op)))
    return failure();
  if (ArrayAttr decls = op.getParamDeclsAttr())
    for (Attribute a : decls)
      if (llvm::cast<HeadParamAttr>(a).getLearned())
        return op.emitOpError("learned per-head parameters are not supported with LSH");
  return verifyScoreAndMask(op, op.getScore(), op.getMask());
}

LogicalResult FusedLshAttentionOp::verify() { return verifyFusedLsh(*this); }

LogicalResult FusedLshAttentionGradOp::verify() {
  if (getDout().getType() != getOut().getType())
    return emitOpError("dout must have out's type");
  if (getDquery().getType() != getQuery().getType() ||
      getDvalue().getType() != getValue().getType())
    return emitOpError("dq, dv must have the types of q, v");
  return verifyFusedLsh(*this);
}

void FusedLshAttentionOp::getAsmResultNames(OpAsmSetValueNameFn setName) {
  setName(getOut(), "out");
  setName(getLse(), "lse");
}
void FusedLshAttentionGradOp::getAsmResultNames(OpAsmSetValueNameFn setName) {
  setName(getDquery(), "dq");
  setName(getDvalue(), "dv");
}
void FusedLshAttentionOp::getAsmBlockArgumentNames(Region &region, OpAsmSetValueNameFn setName) {
  nameScalarRegionArgs(region, &region == &getMask(), setName);
}
void FusedLshAttentionGradOp::getAsmBlockArgumentNames(Region &region,
                                                       OpAsmSetValueNameFn setName) {
  nameScalarRegionArgs(region, &region == &getMask(), setName);
}
