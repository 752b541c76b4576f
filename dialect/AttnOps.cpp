//===- AttnOps.cpp - core attn ops and their verifiers (AttnOps.td) ---------===//
#include "dialect/AttnDetail.h"
#include "dialect/TrainBlock.h"

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
// attn.variant
//===----------------------------------------------------------------------===//

HeadParamAttr VariantOp::lookupParam(StringRef name) {
  if (auto params = getParams())
    for (Attribute a : *params)
      if (auto p = llvm::dyn_cast<HeadParamAttr>(a); p && p.getName() == name)
        return p;
  return {};
}

/// Checks that `region` is empty or one block with `argTypes` arguments whose
/// `attn.yield` returns one value of type `resultType`.
static LogicalResult verifyScalarRegion(Operation *op, Region &region, StringRef name,
                                        TypeRange argTypes, Type resultType) {
  if (region.empty())
    return success();
  if (!region.hasOneBlock())
    return op->emitOpError() << "'" << name << "' region must have one block";
  Block &block = region.front();
  if (block.getArgumentTypes() != argTypes)
    return op->emitOpError() << "'" << name << "' region must take " << argTypes.size()
                             << " arguments of types (" << argTypes << ")";
  auto yield = llvm::dyn_cast<YieldOp>(block.getTerminator());
  if (!yield || yield.getValues().size() != 1 || yield.getValues()[0].getType() != resultType)
    return op->emitOpError() << "'" << name << "' region must yield one " << resultType;
  return success();
}

/// Names score/mask region arguments after the spec's variables.
void dialect_detail::nameScalarRegionArgs(Region &region, bool isMask,
                                          OpAsmSetValueNameFn setName) {
  if (region.empty())
    return;
  static const char *const score[] = {"s", "b", "h", "q", "kv"};
  ArrayRef<const char *> names = score;
  if (isMask)
    names = names.drop_front();
  for (auto [arg, name] : llvm::zip(region.front().getArguments(), names))
    setName(arg, name);
}

/// Verifies a score region (f32, index x4) -> f32 and a mask region
/// (index x4) -> i1, either of which may be empty.
LogicalResult dialect_detail::verifyScoreAndMask(Operation *op, Region &score, Region &mask) {
  Builder b(op->getContext());
  Type idx = b.getIndexType();
  if (failed(verifyScalarRegion(op, score, "score", {b.getF32Type(), idx, idx, idx, idx},
                                b.getF32Type())))
    return failure();
  return verifyScalarRegion(op, mask, "mask", {idx, idx, idx, idx}, b.getI1Type());
}

void FusedAttentionOp::getAsmResultNames(OpAsmSetValueNameFn setName) {
  setName(getOut(), "out");
  setName(getLse(), "lse");
}
void FusedAttentionGradOp::getAsmResultNames(OpAsmSetValueNameFn setName) {
  setName(getDquery(), "dq");
  setName(getDkey(), "dk");
  setName(getDvalue(), "dv");
  if (Value v = getDprojE())
    setName(v, "dE");
  if (Value v = getDprojF())
    setName(v, "dF");
  if (Value v = getDparams())
    setName(v, "dparams");
}

void VariantOp::getAsmBlockArgumentNames(Region &region, OpAsmSetValueNameFn setName) {
  nameScalarRegionArgs(region, &region == &getMask(), setName);
}
void FusedAttentionOp::getAsmBlockArgumentNames(Region &region, OpAsmSetValueNameFn setName) {
  nameScalarRegionArgs(region, &region == &getMask(), setName);
}
void FusedAttentionGradOp::getAsmBlockArgumentNames(Region &region, OpAsmSetValueNameFn setName) {
  nameScalarRegionArgs(region, &region == &getMask(), setName);
}

LogicalResult VariantOp::verify() {
  if (getLowrank() && getLsh())
    return emitOpError("cannot be both low-rank and LSH-bucketed");
  if (getLsh() && !getSharedQk())
    return emitOpError("LSH attention needs shared_qk");
  if (getLowrank() && getCausal())
    return emitOpError("causal low-rank attention is not supported");
  if (auto scale = getScale(); scale && !(scale->convertToDouble() > 0))
    return emitOpError("scale must be positive, found ") << scale->convertToDouble();
  if (auto p = getDropout(); p && !(p->convertToDouble() >= 0 && p->convertToDouble() < 1))
    return emitOpError("dropout must be in [0, 1), found ") << p->convertToDouble();
  llvm::StringSet<> names;
  if (auto params = getParams())
    for (Attribute a : *params)
      if (!names.insert(llvm::cast<HeadParamAttr>(a).getName()).second)
        return emitOpError("declares parameter '")
               << llvm::cast<HeadParamAttr>(a).getName() << "' twice";
  return verifyScoreAndMask(*this, getScore(), getMask());
}

ArrayAttr attnc::attn::getParamDecls(Operation *op) {
  if (auto v = llvm::dyn_cast<VariantOp>(op))
    return v.getParamsAttr();
  if (auto f = llvm::dyn_cast<FusedAttentionOp>(op))
    return f.getParamDeclsAttr();
  if (auto g = llvm::dyn_cast<FusedAttentionGradOp>(op))
    return g.getParamDeclsAttr();
  if (auto f = llvm::dyn_cast<FusedLshAttentionOp>(op))
    return f.getParamDeclsAttr();
  if (auto g = llvm::dyn_cast<FusedLshAttentionGradOp>(op))
    return g.getParamDeclsAttr();
  return {};
}

int attnc::attn::paramIndex(ArrayAttr decls, StringRef name) {
  if (decls)
    for (auto [i, a] : llvm::enumerate(decls))
      if (llvm::cast<HeadParamAttr>(a).getName() == name)
        return static_cast<int>(i);
  return -1;
}

StringRef attnc::attn::elementTypeName(Type t) {
  return t.isF32() ? "f32" : t.isF16() ? "f16" : t.isBF16() ? "bf16" : "unknown";
}

LogicalResult HeadParamOp::verify() {
  Operation *parent = (*this)->getParentOp();
  while (parent && !llvm::isa<VariantOp, FusedAttentionOp, FusedAttentionGradOp,
                              FusedLshAttentionOp, FusedLshAttentionGradOp>(parent))
    parent = parent->getParentOp();
  if (!parent)
    return emitOpError("must be inside an attn.variant or a fused attention op");
  if (paramIndex(getParamDecls(parent), getName()) < 0)
    return emitOpError("reads undeclared per-head parameter '") << getName() << "'";
  return success();
}

//===----------------------------------------------------------------------===//
// attn.model / attn.layer
//===----------------------------------------------------------------------===//

LogicalResult ModelOp::verify() {
  if (getDModel() % getHeads() != 0)
    return emitOpError("heads (") << getHeads() << ") must divide d_model (" << getDModel() << ")";
  if (getObjective() == Objective::duplicate && getSeq() % 2 != 0)
    return emitOpError("the duplicate objective needs an even seq, found ") << getSeq();
  if (auto p = getDropout(); p && !(p->convertToDouble() >= 0 && p->convertToDouble() < 1))
    return emitOpError("dropout must be in [0, 1), found ") << p->convertToDouble();
  if (DictionaryAttr train = getTrainAttr())
    for (NamedAttribute setting : train) {
      const std::string key = setting.getName().str();
      const TrainSettingInfo *info = findTrainSetting(key);
      if (!info)
        return emitOpError("train: unknown setting '")
               << key << "' (expected " << trainSettingKeys() << ")";
      auto i = llvm::dyn_cast<IntegerAttr>(setting.getValue());
      auto f = llvm::dyn_cast<FloatAttr>(setting.getValue());
      if (info->integer ? !i || !i.getType().isInteger(64) : !f || !f.getType().isF64())
        return emitOpError("train: ")
               << key << " must be " << (info->integer ? "an i64" : "an f64");
      const double value = i ? double(i.getInt()) : f.getValueAsDouble();
      if (std::string why = checkTrainSetting(*info, value); !why.empty())
        return emitOpError("train: ") << why;
    }
  auto layers = getBody().getOps<LayerOp>();
  size_t count = std::distance(layers.begin(), layers.end());
  if (count != 1 || getBody().front().getOperations().size() != 1)
    return emitOpError("body must hold exactly one attn.layer (the template "
                       "repeated 'layers' times), found ")
           << getBody().front().getOperations().size() << " operations";
  return success();
}

LogicalResult LayerOp::verify() {
  if (getReversible() && !getFfnAct())
    return emitOpError("a reversible layer needs a feed-forward block");
  if (auto chunk = getFfnChunk(); chunk && !tunableIn(*chunk, 0, int64_t(1) << 24))
    return emitOpError("ffn chunk must be positive, 0 (all rows) or auto, found ") << *chunk;
  return success();
}

LogicalResult LayerOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto variant = symbols.lookupNearestSymbolFrom<VariantOp>(*this, getAttentionAttr());
  if (!variant)
    return emitOpError("refers to unknown attention variant ") << getAttentionAttr();
  auto model = (*this)->getParentOfType<ModelOp>();
  if (auto lr = variant.getLowrankAttr();
      lr && !lr.isAutoK() && lr.getK() > static_cast<int64_t>(model.getSeq()))
    return emitOpError("low-rank k = ")
           << lr.getK() << " of " << getAttentionAttr() << " exceeds seq = " << model.getSeq();
  Objective obj = model.getObjective();
  if ((obj == Objective::causal_lm || obj == Objective::duplicate) && !variant.getCausal())
    return emitOpError("objective ") << stringifyObjective(obj) << " needs causal attention, but "
                                     << getAttentionAttr() << " is not causal";
  return success();
}

//===----------------------------------------------------------------------===//
// attn.attention
//===----------------------------------------------------------------------===//

bool dialect_detail::compatibleDim(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

/// Shape rules shared by attn.attention and the fused ops: Q, K, V are
/// [B, H, N, D] of one float type, out has Q's type, lse is f32 [B, H, Nq],
/// lengths i32 [B], E/F [k, Nmax] or [H, k, Nmax].
LogicalResult dialect_detail::verifyAttentionShapes(Operation *op, Value query, Value key,
                                                    Value value, Type outType, Type lseType,
                                                    Value lengths, Value projE, Value projF) {
  auto q = llvm::cast<RankedTensorType>(query.getType());
  auto k = llvm::cast<RankedTensorType>(key.getType());
  auto v = llvm::cast<RankedTensorType>(value.getType());
  auto emitOpError = [&](const Twine &msg = {}) { return op->emitOpError(msg); };
  for (auto [name, t] :
       {std::pair<StringRef, RankedTensorType>{"query", q}, {"key", k}, {"value", v}})
    if (t.getRank() != 4)
      return emitOpError() << name << " must be [B, H, N, Dh], found " << t;
  Type elt = q.getElementType();
  if (!elt.isF32() && !elt.isF16() && !elt.isBF16())
    return emitOpError("element type must be f32, f16 or bf16, found ") << elt;
  if (k.getElementType() != elt || v.getElementType() != elt)
    return emitOpError("query, key and value must share one element type");
  auto compatible = compatibleDim;
  for (unsigned d : {0u, 1u, 3u})
    if (!compatible(q.getDimSize(d), k.getDimSize(d)) ||
        !compatible(q.getDimSize(d), v.getDimSize(d)))
      return emitOpError("query, key and value must agree on B, H and Dh; found ")
             << q << ", " << k << ", " << v;
  if (!compatible(k.getDimSize(2), v.getDimSize(2)))
    return emitOpError("key and value must have the same length N; found ")
           << k.getDimSize(2) << " and " << v.getDimSize(2);
  if (outType != q)
    return emitOpError("result 'out' must have the query's type ") << q;
  auto lse = llvm::cast<RankedTensorType>(lseType);
  if (lse.getRank() != 3 || !lse.getElementType().isF32() ||
      !compatible(lse.getDimSize(0), q.getDimSize(0)) ||
      !compatible(lse.getDimSize(1), q.getDimSize(1)) ||
      !compatible(lse.getDimSize(2), q.getDimSize(2)))
    return emitOpError("result 'lse' must be f32 [B, H, N] matching the query, found ") << lse;
  if (Value len = lengths) {
    auto t = llvm::cast<RankedTensorType>(len.getType());
    if (t.getRank() != 1 || !t.getElementType().isInteger(32) ||
        !compatible(t.getDimSize(0), q.getDimSize(0)))
      return emitOpError("lengths must be i32 [B], found ") << t;
  }
  if (Value f = projF; f && !projE)
    return emitOpError("F given without E");
  if (Value e = projE) {
    auto te = llvm::cast<RankedTensorType>(e.getType());
    if ((te.getRank() != 2 && te.getRank() != 3) || te.getElementType() != elt)
      return emitOpError("E must be [k, N] or [H, k, N] of the query's element type, found ") << te;
    if (!compatible(te.getDimSize(te.getRank() - 1), k.getDimSize(2)) &&
        !ShapedType::isDynamic(k.getDimSize(2)) &&
        te.getDimSize(te.getRank() - 1) < k.getDimSize(2))
      return emitOpError("E covers ")
             << te.getDimSize(te.getRank() - 1) << " positions, fewer than the key length "
             << k.getDimSize(2);
    if (Value f = projF; f && f.getType() != te)
      return emitOpError("F must have the type of E ") << te << ", found " << f.getType();
  }
  return success();
}

/// Per-head parameters are f32 [P, H].
LogicalResult dialect_detail::verifyParams(Operation *op, Value params, Value query) {
  if (!params)
    return success();
  auto t = llvm::cast<RankedTensorType>(params.getType());
  auto q = llvm::cast<RankedTensorType>(query.getType());
  if (t.getRank() != 2 || !t.getElementType().isF32() ||
      !compatibleDim(t.getDimSize(1), q.getDimSize(1)))
    return op->emitOpError("params must be f32 [P, H], found ") << t;
  return success();
}

LogicalResult AttentionOp::verify() {
  if (failed(verifyAttentionShapes(*this, getQuery(), getKey(), getValue(), getOut().getType(),
                                   getLse().getType(), getLengths(), getProjE(), getProjF())))
    return failure();
  return verifyParams(*this, getParams(), getQuery());
}

LogicalResult AttentionOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto variant = symbols.lookupNearestSymbolFrom<VariantOp>(*this, getVariantAttr());
  if (!variant)
    return emitOpError("refers to unknown attention variant ") << getVariantAttr();
  auto q = llvm::cast<RankedTensorType>(getQuery().getType());
  if (auto lr = variant.getLowrankAttr()) {
    Value e = getProjE();
    if (!e)
      return emitOpError("low-rank variant ") << getVariantAttr() << " needs E";
    auto te = llvm::cast<RankedTensorType>(e.getType());
    bool perHead = lr.getShare() == ShareMode::none;
    if (te.getRank() != (perHead ? 3 : 2))
      return emitOpError("with share = ") << stringifyShareMode(lr.getShare()) << " E must be "
                                          << (perHead ? "[H, k, N]" : "[k, N]") << ", found " << te;
    int64_t kDim = te.getDimSize(te.getRank() - 2);
    if (!lr.isAutoK() && !ShapedType::isDynamic(kDim) && kDim != lr.getK())
      return emitOpError("E has ") << kDim << " rows but the variant's k is " << lr.getK();
    bool shared = lr.getShare() == ShareMode::kv || lr.getShare() == ShareMode::layerwise;
    if (shared && getProjF())
      return emitOpError("with share = ")
             << stringifyShareMode(lr.getShare()) << " only E is given (E = F)";
    if (!shared && !getProjF())
      return emitOpError("with share = ") << stringifyShareMode(lr.getShare()) << " F is needed";
  } else if (getProjE()) {
    return emitOpError("E/F given to non-low-rank variant ") << getVariantAttr();
  }
  if (auto lsh = variant.getLshAttr()) {
    if (getKey() != getQuery())
      return emitOpError("shared-QK variant ")
             << getVariantAttr() << " takes the query as its key operand";
    if (Value r = getRotations()) {
      auto t = llvm::cast<RankedTensorType>(r.getType());
      int64_t rounds = lsh.getRounds(),
              half = lsh.getBuckets() == kAuto ? kAuto : lsh.getBuckets() / 2;
      auto ok = [](int64_t dim, int64_t want) {
        return want == kAuto || ShapedType::isDynamic(dim) || dim == want;
      };
      if (t.getRank() != 3 || !t.getElementType().isF32() || !ok(t.getDimSize(0), rounds) ||
          !ok(t.getDimSize(1), q.getDimSize(3)) || !ok(t.getDimSize(2), half))
        return emitOpError("rotations must be f32 [rounds, Dh, buckets/2], found ") << t;
    }
  } else if (getRotations()) {
    return emitOpError("rotations given to non-LSH variant ") << getVariantAttr();
  }
  size_t numParams = variant.getParams() ? variant.getParams()->size() : 0;
  if (Value p = getParams()) {
    int64_t rows = llvm::cast<RankedTensorType>(p.getType()).getDimSize(0);
    if (!ShapedType::isDynamic(rows) && rows != static_cast<int64_t>(numParams))
      return emitOpError("params has ") << rows << " rows but " << getVariantAttr() << " declares "
                                        << numParams << " parameter(s)";
  } else if (numParams) {
    return emitOpError() << getVariantAttr() << " declares " << numParams
                         << " per-head parameter(s); pass them as params(...)";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Tensor-level ops
//===----------------------------------------------------------------------===//

RankedTensorType dialect_detail::tensorType(Value v) {
  return llvm::cast<RankedTensorType>(v.getType());
}

LogicalResult LinearOp::verify() {
  RankedTensorType x = tensorType(getInput()), w = tensorType(getWeight());
  auto r = llvm::cast<RankedTensorType>(getResult().getType());
  if (x.getRank() != 3 || w.getRank() != 2 || r.getRank() != 4)
    return emitOpError("expects [B, N, C] × [C, H·D] → [B, H, N, D]");
  if (!compatibleDim(x.getDimSize(2), w.getDimSize(0)))
    return emitOpError("input width ")
           << x.getDimSize(2) << " does not match weight rows " << w.getDimSize(0);
  if (!compatibleDim(r.getDimSize(0), x.getDimSize(0)) ||
      !compatibleDim(r.getDimSize(2), x.getDimSize(1)) ||
      (!r.isDynamicDim(1) && !r.isDynamicDim(3) && !w.isDynamicDim(1) &&
       r.getDimSize(1) * r.getDimSize(3) != w.getDimSize(1)))
    return emitOpError("result ") << r << " does not split the weight's " << w.getDimSize(1)
                                  << " columns into [B, H, N, D]";
  return success();
}

LogicalResult SeqProjectOp::verify() {
  RankedTensorType p = tensorType(getProj()), x = tensorType(getInput());
  auto r = llvm::cast<RankedTensorType>(getResult().getType());
  if (x.getRank() == 3) { // [B, N, C] → [B, k, C], projections shared by heads only
    if (p.getRank() != 2)
      return emitOpError("a head-less input needs a [k, Nmax] projection");
    if (r.getRank() != 3 || !compatibleDim(r.getDimSize(1), p.getDimSize(0)) ||
        !compatibleDim(r.getDimSize(2), x.getDimSize(2)))
      return emitOpError("result must be [B, k, C], found ") << r;
    return success();
  }
  if (x.getRank() != 4)
    return emitOpError("input must be [B, H, N, D] or [B, N, C], found ") << x;
  if (p.getRank() != 2 && p.getRank() != 3)
    return emitOpError("projection must be [k, Nmax] or [H, k, Nmax], found ") << p;
  if (p.getElementType() != x.getElementType() || r.getElementType() != x.getElementType())
    return emitOpError("projection, input and result must share one element type");
  if (p.getRank() == 3 && !compatibleDim(p.getDimSize(0), x.getDimSize(1)))
    return emitOpError("per-head projection has ")
           << p.getDimSize(0) << " heads, input " << x.getDimSize(1);
  int64_t nmax = p.getDimSize(p.getRank() - 1), n = x.getDimSize(2);
  if (!ShapedType::isDynamic(nmax) && !ShapedType::isDynamic(n) && nmax < n)
    return emitOpError("projection covers ") << nmax << " positions, fewer than the input's " << n;
  int64_t k = p.getDimSize(p.getRank() - 2);
  if (r.getRank() != 4 || !compatibleDim(r.getDimSize(0), x.getDimSize(0)) ||
      !compatibleDim(r.getDimSize(1), x.getDimSize(1)) || !compatibleDim(r.getDimSize(2), k) ||
      !compatibleDim(r.getDimSize(3), x.getDimSize(3)))
    return emitOpError("result must be [B, H, k, D], found ") << r;
  if (auto order = getOrder(); order && *order != "before" && *order != "after")
    return emitOpError("order must be \"before\" or \"after\", found \"") << *order << "\"";
  return success();
}

LogicalResult ScoresOp::verify() {
  RankedTensorType q = tensorType(getQuery()), k = tensorType(getKey());
  auto s = llvm::cast<RankedTensorType>(getScores().getType());
  if (q.getRank() != 4 || k.getRank() != 4 || q.getElementType() != k.getElementType())
    return emitOpError("query and key must be [B, H, N, D] of one element type");
  for (unsigned d : {0u, 1u, 3u})
    if (!compatibleDim(q.getDimSize(d), k.getDimSize(d)))
      return emitOpError("query and key must agree on B, H and D");
  if (s.getRank() != 4 || !s.getElementType().isF32() ||
      !compatibleDim(s.getDimSize(0), q.getDimSize(0)) ||
      !compatibleDim(s.getDimSize(1), q.getDimSize(1)) ||
      !compatibleDim(s.getDimSize(2), q.getDimSize(2)) ||
      !compatibleDim(s.getDimSize(3), k.getDimSize(2)))
    return emitOpError("scores must be f32 [B, H, Nq, Nk], found ") << s;
  return success();
}

LogicalResult SoftmaxOp::verify() {
  RankedTensorType s = tensorType(getScores());
  if (s.getRank() != 4 || !s.getElementType().isF32() || getProbs().getType() != s)
    return emitOpError("scores and probabilities must be the same f32 [B, H, Nq, Nk]");
  auto lse = llvm::cast<RankedTensorType>(getLse().getType());
  if (lse.getRank() != 3 || !lse.getElementType().isF32() ||
      lse.getShape() != s.getShape().drop_back())
    return emitOpError("lse must be f32 [B, H, Nq], found ") << lse;
  return success();
}

LogicalResult WeightedSumOp::verify() {
  RankedTensorType p = tensorType(getProbs()), v = tensorType(getValue());
  auto o = llvm::cast<RankedTensorType>(getOut().getType());
  if (p.getRank() != 4 || v.getRank() != 4 || o.getRank() != 4)
    return emitOpError("operands must be rank 4");
  if (!compatibleDim(p.getDimSize(3), v.getDimSize(2)))
    return emitOpError("probabilities have ")
           << p.getDimSize(3) << " keys, values " << v.getDimSize(2);
  if (o.getElementType() != v.getElementType() ||
      !compatibleDim(o.getDimSize(2), p.getDimSize(2)) ||
      !compatibleDim(o.getDimSize(3), v.getDimSize(3)))
    return emitOpError("result must be [B, H, Nq, D] of the value's type, found ") << o;
  return success();
}

/// score_mod and mask refer to a variant and keep the scores' type.
template <typename OpTy>
static LogicalResult verifyElementwiseVariantUse(OpTy op, SymbolTableCollection &symbols) {
  auto variant = symbols.lookupNearestSymbolFrom<VariantOp>(op, op.getVariantAttr());
  if (!variant)
    return op.emitOpError("refers to unknown attention variant ") << op.getVariantAttr();
  if (op.getResult().getType() != op.getScores().getType())
    return op.emitOpError("result must have the scores' type");
  return success();
}

LogicalResult ScoreModOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyElementwiseVariantUse(*this, symbols);
}

LogicalResult MaskOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyElementwiseVariantUse(*this, symbols);
}

//===----------------------------------------------------------------------===//
// Fused kernel ops
//===----------------------------------------------------------------------===//

/// Rules shared by the fused op and its gradient.
template <typename OpTy> static LogicalResult verifyFusedCommon(OpTy op) {
  bool lowrank = op.getKvSource() == KvSource::lowrank;
  if (lowrank && (!op.getProjE() || !op.getShare()))
    return op.emitOpError("kv_source = lowrank needs E and a share mode");
  if (!lowrank && (op.getProjE() || op.getProjF()))
    return op.emitOpError("E/F given with kv_source = direct");
  if (lowrank && op.getCausal())
    return op.emitOpError("causal low-rank attention is not supported");
  if (!(op.getScale().convertToDouble() > 0))
    return op.emitOpError("scale must be positive");
  if (op.getSharedQk() && (lowrank || op.getKey() != op.getQuery()))
    return op.emitOpError("shared_qk needs kv_source = direct and the query as the key operand");
  if (failed(verifyFusedParams(op)))
    return failure();
  return verifyScoreAndMask(op, op.getScore(), op.getMask());
}

LogicalResult FusedAttentionOp::verify() {
  if (failed(verifyAttentionShapes(*this, getQuery(), getKey(), getValue(), getOut().getType(),
                                   getLse().getType(), getLengths(), getProjE(), getProjF())))
    return failure();
  return verifyFusedCommon(*this);
}

LogicalResult FusedAttentionGradOp::verify() {
  if (failed(verifyAttentionShapes(*this, getQuery(), getKey(), getValue(), getOut().getType(),
                                   getLse().getType(), getLengths(), getProjE(), getProjF())))
    return failure();
  if (getDout().getType() != getOut().getType())
    return emitOpError("dout must have out's type");
  if (getDquery().getType() != getQuery().getType() || getDkey().getType() != getKey().getType() ||
      getDvalue().getType() != getValue().getType())
    return emitOpError("dq, dk, dv must have the types of q, k, v");
  auto sameOptional = [](Value grad, Value primal) {
    return (!grad && !primal) || (grad && primal && grad.getType() == primal.getType());
  };
  if (!sameOptional(getDprojE(), getProjE()) || !sameOptional(getDprojF(), getProjF()) ||
      !sameOptional(getDparams(), getParams()))
    return emitOpError("dE, dF, dparams must be present exactly when E, F, params are, "
                       "with their types");
  return verifyFusedCommon(*this);
}

#define GET_OP_CLASSES
#include "dialect/AttnOps.cpp.inc"
