//===- AttnDialect.cpp - attn dialect, attributes and verifiers -----------===//
#include "dsl/AttnDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace attnc::attn;

#include "dsl/AttnDialect.cpp.inc"
#include "dsl/AttnEnums.cpp.inc"

void AttnDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dsl/AttnAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dsl/AttnOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Tunable integers: a number or `auto`
//===----------------------------------------------------------------------===//

static ParseResult parseTunableValue(AsmParser &p, int64_t &value) {
  if (succeeded(p.parseOptionalKeyword("auto"))) {
    value = kAuto;
    return success();
  }
  return p.parseInteger(value);
}

static void printTunableValue(AsmPrinter &p, int64_t value) {
  if (value == kAuto)
    p << "auto";
  else
    p << value;
}

/// Custom directive for op formats: `custom<Tunable>($attr)`.
static ParseResult parseTunable(OpAsmParser &p, IntegerAttr &attr) {
  int64_t v;
  if (parseTunableValue(p, v))
    return failure();
  attr = p.getBuilder().getI64IntegerAttr(v);
  return success();
}

static void printTunable(OpAsmPrinter &p, Operation *, IntegerAttr attr) {
  printTunableValue(p, attr.getInt());
}

static bool tunableIn(int64_t v, int64_t lo, int64_t hi) {
  return v == kAuto || (v >= lo && v <= hi);
}

/// Parses `< key = value, ... >`, calling `parseValue(key)` at each value.
/// Keys may come in any order; each must appear exactly once.
static ParseResult
parseKeyValues(AsmParser &p, ArrayRef<StringRef> keys,
               llvm::function_ref<ParseResult(StringRef)> parseValue) {
  llvm::StringSet<> seen;
  if (p.parseLess())
    return failure();
  do {
    StringRef key;
    SMLoc loc = p.getCurrentLocation();
    if (p.parseKeyword(&key))
      return failure();
    if (!llvm::is_contained(keys, key))
      return p.emitError(loc, "unknown key '") << key << "'";
    if (!seen.insert(key).second)
      return p.emitError(loc, "key '") << key << "' given twice";
    if (p.parseEqual() || parseValue(key))
      return failure();
  } while (succeeded(p.parseOptionalComma()));
  if (p.parseGreater())
    return failure();
  for (StringRef key : keys)
    if (!seen.contains(key))
      return p.emitError(p.getCurrentLocation(), "missing key '") << key << "'";
  return success();
}

//===----------------------------------------------------------------------===//
// #attn.lowrank
//===----------------------------------------------------------------------===//

Attribute LowRankAttr::parse(AsmParser &p, Type) {
  int64_t k = 0;
  ShareMode share = ShareMode::none;
  SMLoc loc = p.getCurrentLocation();
  if (parseKeyValues(p, {"k", "share"}, [&](StringRef key) -> ParseResult {
        if (key == "k")
          return parseTunableValue(p, k);
        StringRef word;
        SMLoc wordLoc = p.getCurrentLocation();
        if (p.parseKeyword(&word))
          return failure();
        auto mode = symbolizeShareMode(word);
        if (!mode)
          return p.emitError(wordLoc, "unknown sharing mode '") << word << "'";
        share = *mode;
        return success();
      }))
    return {};
  return p.getChecked<LowRankAttr>(loc, p.getContext(), k, share);
}

void LowRankAttr::print(AsmPrinter &p) const {
  p << "<k = ";
  printTunableValue(p, getK());
  p << ", share = " << stringifyShareMode(getShare()) << ">";
}

LogicalResult LowRankAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                  int64_t k, ShareMode) {
  if (!tunableIn(k, 1, int64_t(1) << 24))
    return emitError() << "low-rank k must be positive or auto, found " << k;
  return success();
}

//===----------------------------------------------------------------------===//
// #attn.lsh
//===----------------------------------------------------------------------===//

Attribute LshAttr::parse(AsmParser &p, Type) {
  int64_t buckets = 0, rounds = 0, chunk = 0, before = 0, after = 0, seed = 0;
  bool denseFallback = true;
  SMLoc loc = p.getCurrentLocation();
  if (parseKeyValues(
          p, {"buckets", "rounds", "chunk", "before", "after", "seed", "dense_fallback"},
          [&](StringRef key) -> ParseResult {
            if (key == "buckets")
              return parseTunableValue(p, buckets);
            if (key == "rounds")
              return parseTunableValue(p, rounds);
            if (key == "chunk")
              return parseTunableValue(p, chunk);
            if (key == "dense_fallback") {
              StringRef word;
              SMLoc wordLoc = p.getCurrentLocation();
              if (p.parseKeyword(&word))
                return failure();
              if (word != "true" && word != "false")
                return p.emitError(wordLoc, "expected true or false");
              denseFallback = word == "true";
              return success();
            }
            return p.parseInteger(key == "before" ? before
                                  : key == "after" ? after
                                                   : seed);
          }))
    return {};
  return p.getChecked<LshAttr>(loc, p.getContext(), buckets, rounds, chunk, before,
                               after, seed, denseFallback);
}

void LshAttr::print(AsmPrinter &p) const {
  p << "<buckets = ";
  printTunableValue(p, getBuckets());
  p << ", rounds = ";
  printTunableValue(p, getRounds());
  p << ", chunk = ";
  printTunableValue(p, getChunk());
  p << ", before = " << getBefore() << ", after = " << getAfter()
    << ", seed = " << getSeed()
    << ", dense_fallback = " << (getDenseFallback() ? "true" : "false") << ">";
}

LogicalResult LshAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                              int64_t buckets, int64_t rounds, int64_t chunk,
                              int64_t before, int64_t after, int64_t seed, bool) {
  if (buckets != kAuto && (buckets < 2 || buckets % 2 != 0))
    return emitError() << "LSH buckets must be even and at least 2, found " << buckets;
  if (!tunableIn(rounds, 1, 64))
    return emitError() << "LSH rounds must be in [1, 64], found " << rounds;
  if (!tunableIn(chunk, 1, int64_t(1) << 20))
    return emitError() << "LSH chunk must be at least 1, found " << chunk;
  if (before < 0 || before > 16 || after < 0 || after > 16)
    return emitError() << "LSH before/after must be in [0, 16], found " << before
                       << "/" << after;
  if (seed < 0)
    return emitError() << "LSH seed must be non-negative, found " << seed;
  return success();
}

//===----------------------------------------------------------------------===//
// #attn.tile
//===----------------------------------------------------------------------===//

Attribute TileAttr::parse(AsmParser &p, Type) {
  int64_t v[4] = {0, 0, 0, 0};
  static const StringRef keys[] = {"block_q", "block_kv", "warps", "stages"};
  SMLoc loc = p.getCurrentLocation();
  if (parseKeyValues(p, keys, [&](StringRef key) {
        return parseTunableValue(p, v[llvm::find(keys, key) - std::begin(keys)]);
      }))
    return {};
  return p.getChecked<TileAttr>(loc, p.getContext(), v[0], v[1], v[2], v[3]);
}

void TileAttr::print(AsmPrinter &p) const {
  p << "<block_q = ";
  printTunableValue(p, getBlockQ());
  p << ", block_kv = ";
  printTunableValue(p, getBlockKv());
  p << ", warps = ";
  printTunableValue(p, getWarps());
  p << ", stages = ";
  printTunableValue(p, getStages());
  p << ">";
}

LogicalResult TileAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               int64_t blockQ, int64_t blockKv, int64_t warps,
                               int64_t stages) {
  if (!tunableIn(blockQ, 1, 1024) || !tunableIn(blockKv, 1, 1024))
    return emitError() << "tile block sizes must be in [1, 1024] or auto, found "
                       << blockQ << "x" << blockKv;
  if (warps != kAuto && warps != 1 && warps != 2 && warps != 4 && warps != 8 &&
      warps != 16)
    return emitError() << "tile warps must be 1, 2, 4, 8 or 16, found " << warps;
  if (!tunableIn(stages, 1, 8))
    return emitError() << "tile stages must be in [1, 8], found " << stages;
  return success();
}

//===----------------------------------------------------------------------===//
// #attn.param
//===----------------------------------------------------------------------===//

Attribute HeadParamAttr::parse(AsmParser &p, Type) {
  std::string name;
  double value = 0;
  ParamInit init = ParamInit::constant;
  if (p.parseLess() || p.parseString(&name) || p.parseEqual())
    return {};
  llvm::APFloat apValue(0.0);
  if (succeeded(p.parseOptionalKeyword("alibi"))) {
    init = ParamInit::alibi;
  } else if (p.parseFloat(llvm::APFloat::IEEEdouble(), apValue)) {
    return {};
  }
  StringRef mode;
  SMLoc modeLoc = p.getCurrentLocation();
  if (p.parseComma() || p.parseKeyword(&mode))
    return {};
  if (mode != "learned" && mode != "fixed") {
    p.emitError(modeLoc, "expected 'learned' or 'fixed'");
    return {};
  }
  if (p.parseGreater())
    return {};
  (void)value;
  return HeadParamAttr::get(p.getContext(), name, init, apValue, mode == "learned");
}

void HeadParamAttr::print(AsmPrinter &p) const {
  p << "<\"" << getName() << "\" = ";
  if (getInit() == ParamInit::alibi)
    p << "alibi";
  else
    p.printFloat(getValue()); // exact: round-trips every double
  p << ", " << (getLearned() ? "learned" : "fixed") << ">";
}

#define GET_ATTRDEF_CLASSES
#include "dsl/AttnAttrs.cpp.inc"

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
static LogicalResult verifyScalarRegion(Operation *op, Region &region,
                                        StringRef name, TypeRange argTypes,
                                        Type resultType) {
  if (region.empty())
    return success();
  if (!region.hasOneBlock())
    return op->emitOpError() << "'" << name << "' region must have one block";
  Block &block = region.front();
  if (block.getArgumentTypes() != argTypes)
    return op->emitOpError() << "'" << name << "' region must take "
                            << argTypes.size() << " arguments of types ("
                            << argTypes << ")";
  auto yield = llvm::dyn_cast<YieldOp>(block.getTerminator());
  if (!yield || yield.getValues().size() != 1 ||
      yield.getValues()[0].getType() != resultType)
    return op->emitOpError() << "'" << name << "' region must yield one "
                            << resultType;
  return success();
}

/// Names score/mask region arguments after the spec's variables.
static void nameScalarRegionArgs(Region &region, bool isMask, OpAsmSetValueNameFn setName) {
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
static LogicalResult verifyScoreAndMask(Operation *op, Region &score, Region &mask) {
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
void FusedAttentionGradOp::getAsmBlockArgumentNames(Region &region,
                                                    OpAsmSetValueNameFn setName) {
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
    return emitOpError("heads (") << getHeads() << ") must divide d_model ("
                                  << getDModel() << ")";
  if (getObjective() == Objective::duplicate && getSeq() % 2 != 0)
    return emitOpError("the duplicate objective needs an even seq, found ") << getSeq();
  if (auto p = getDropout(); p && !(p->convertToDouble() >= 0 && p->convertToDouble() < 1))
    return emitOpError("dropout must be in [0, 1), found ") << p->convertToDouble();
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
  if (auto chunk = getFfnChunk(); chunk && !tunableIn(*chunk, 1, int64_t(1) << 24))
    return emitOpError("ffn chunk must be positive or auto, found ") << *chunk;
  return success();
}

LogicalResult LayerOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto variant = symbols.lookupNearestSymbolFrom<VariantOp>(*this, getAttentionAttr());
  if (!variant)
    return emitOpError("refers to unknown attention variant ") << getAttentionAttr();
  auto model = (*this)->getParentOfType<ModelOp>();
  if (auto lr = variant.getLowrankAttr(); lr && !lr.isAutoK() &&
                                          lr.getK() > static_cast<int64_t>(model.getSeq()))
    return emitOpError("low-rank k = ")
           << lr.getK() << " of " << getAttentionAttr() << " exceeds seq = "
           << model.getSeq();
  Objective obj = model.getObjective();
  if ((obj == Objective::causal_lm || obj == Objective::duplicate) && !variant.getCausal())
    return emitOpError("objective ") << stringifyObjective(obj)
                                     << " needs causal attention, but "
                                     << getAttentionAttr() << " is not causal";
  return success();
}

//===----------------------------------------------------------------------===//
// attn.attention
//===----------------------------------------------------------------------===//

static bool compatibleDim(int64_t a, int64_t b) {
  return ShapedType::isDynamic(a) || ShapedType::isDynamic(b) || a == b;
}

/// Shape rules shared by attn.attention and the fused ops: Q, K, V are
/// [B, H, N, D] of one float type, out has Q's type, lse is f32 [B, H, Nq],
/// lengths i32 [B], E/F [k, Nmax] or [H, k, Nmax].
static LogicalResult verifyAttentionShapes(Operation *op, Value query, Value key, Value value,
                                           Type outType, Type lseType, Value lengths,
                                           Value projE, Value projF) {
  auto q = llvm::cast<RankedTensorType>(query.getType());
  auto k = llvm::cast<RankedTensorType>(key.getType());
  auto v = llvm::cast<RankedTensorType>(value.getType());
  auto emitOpError = [&](const Twine &msg = {}) { return op->emitOpError(msg); };
  for (auto [name, t] : {std::pair<StringRef, RankedTensorType>{"query", q},
                         {"key", k}, {"value", v}})
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
    return emitOpError("result 'lse' must be f32 [B, H, N] matching the query, found ")
           << lse;
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
      return emitOpError("E must be [k, N] or [H, k, N] of the query's element type, found ")
             << te;
    if (!compatible(te.getDimSize(te.getRank() - 1), k.getDimSize(2)) &&
        !ShapedType::isDynamic(k.getDimSize(2)) &&
        te.getDimSize(te.getRank() - 1) < k.getDimSize(2))
      return emitOpError("E covers ") << te.getDimSize(te.getRank() - 1)
                                      << " positions, fewer than the key length "
                                      << k.getDimSize(2);
    if (Value f = projF; f && f.getType() != te)
      return emitOpError("F must have the type of E ") << te << ", found " << f.getType();
  }
  return success();
}

/// Per-head parameters are f32 [P, H].
static LogicalResult verifyParams(Operation *op, Value params, Value query) {
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
  if (failed(verifyAttentionShapes(*this, getQuery(), getKey(), getValue(),
                                   getOut().getType(), getLse().getType(), getLengths(),
                                   getProjE(), getProjF())))
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
      return emitOpError("with share = ") << stringifyShareMode(lr.getShare())
                                          << " E must be " << (perHead ? "[H, k, N]" : "[k, N]")
                                          << ", found " << te;
    int64_t kDim = te.getDimSize(te.getRank() - 2);
    if (!lr.isAutoK() && !ShapedType::isDynamic(kDim) && kDim != lr.getK())
      return emitOpError("E has ") << kDim << " rows but the variant's k is " << lr.getK();
    bool shared = lr.getShare() == ShareMode::kv || lr.getShare() == ShareMode::layerwise;
    if (shared && getProjF())
      return emitOpError("with share = ") << stringifyShareMode(lr.getShare())
                                          << " only E is given (E = F)";
    if (!shared && !getProjF())
      return emitOpError("with share = ") << stringifyShareMode(lr.getShare()) << " F is needed";
  } else if (getProjE()) {
    return emitOpError("E/F given to non-low-rank variant ") << getVariantAttr();
  }
  if (auto lsh = variant.getLshAttr()) {
    if (getKey() != getQuery())
      return emitOpError("shared-QK variant ") << getVariantAttr()
                                               << " takes the query as its key operand";
    if (Value r = getRotations()) {
      auto t = llvm::cast<RankedTensorType>(r.getType());
      int64_t rounds = lsh.getRounds(), half = lsh.getBuckets() == kAuto ? kAuto : lsh.getBuckets() / 2;
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
      return emitOpError("params has ") << rows << " rows but " << getVariantAttr()
                                        << " declares " << numParams << " parameter(s)";
  } else if (numParams) {
    return emitOpError() << getVariantAttr() << " declares " << numParams
                         << " per-head parameter(s); pass them as params(...)";
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Tensor-level ops
//===----------------------------------------------------------------------===//

static RankedTensorType tensorType(Value v) {
  return llvm::cast<RankedTensorType>(v.getType());
}

LogicalResult LinearOp::verify() {
  RankedTensorType x = tensorType(getInput()), w = tensorType(getWeight());
  auto r = llvm::cast<RankedTensorType>(getResult().getType());
  if (x.getRank() != 3 || w.getRank() != 2 || r.getRank() != 4)
    return emitOpError("expects [B, N, C] × [C, H·D] → [B, H, N, D]");
  if (!compatibleDim(x.getDimSize(2), w.getDimSize(0)))
    return emitOpError("input width ") << x.getDimSize(2) << " does not match weight rows "
                                       << w.getDimSize(0);
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
    return emitOpError("per-head projection has ") << p.getDimSize(0) << " heads, input "
                                                   << x.getDimSize(1);
  int64_t nmax = p.getDimSize(p.getRank() - 1), n = x.getDimSize(2);
  if (!ShapedType::isDynamic(nmax) && !ShapedType::isDynamic(n) && nmax < n)
    return emitOpError("projection covers ") << nmax << " positions, fewer than the input's "
                                             << n;
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
    return emitOpError("probabilities have ") << p.getDimSize(3) << " keys, values "
                                              << v.getDimSize(2);
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

/// A fused op's params operand agrees with its param_decls.
template <typename OpTy> static LogicalResult verifyFusedParams(OpTy op) {
  ArrayAttr decls = op.getParamDeclsAttr();
  size_t numParams = decls ? decls.size() : 0;
  if (Value p = op.getParams()) {
    if (failed(verifyParams(op, p, op.getQuery())))
      return failure();
    int64_t rows = tensorType(p).getDimSize(0);
    if (!ShapedType::isDynamic(rows) && rows != static_cast<int64_t>(numParams))
      return op.emitOpError("params has ") << rows << " rows, param_decls " << numParams;
  } else if (numParams) {
    return op.emitOpError("declares per-head parameters but has no params operand");
  }
  return success();
}

/// Rules shared by the fused op and its gradient.
template <typename OpTy>
static LogicalResult verifyFusedCommon(OpTy op) {
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
  if (failed(verifyAttentionShapes(*this, getQuery(), getKey(), getValue(),
                                   getOut().getType(), getLse().getType(), getLengths(),
                                   getProjE(), getProjF())))
    return failure();
  return verifyFusedCommon(*this);
}

LogicalResult FusedAttentionGradOp::verify() {
  if (failed(verifyAttentionShapes(*this, getQuery(), getKey(), getValue(),
                                   getOut().getType(), getLse().getType(), getLengths(),
                                   getProjE(), getProjF())))
    return failure();
  if (getDout().getType() != getOut().getType())
    return emitOpError("dout must have out's type");
  if (getDquery().getType() != getQuery().getType() ||
      getDkey().getType() != getKey().getType() ||
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
  auto q = tensorType(getQuery()), r = tensorType(getRotations()),
       out = tensorType(getBuckets());
  if (failed(verifyQuery4d(*this, q)))
    return failure();
  int64_t nb = getNumBuckets();
  if (nb < 2 || nb % 2)
    return emitOpError("num_buckets must be even and at least 2, found ") << nb;
  if (r.getRank() != 3 || !r.getElementType().isF32() ||
      !compatibleDim(r.getDimSize(1), q.getDimSize(3)) ||
      !compatibleDim(r.getDimSize(2), nb / 2))
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
  auto ro = tensorType(getRoundOut()), rl = tensorType(getRoundLse()),
       o = tensorType(getOut()), l = tensorType(getLse());
  if (ro.getRank() != 5 || rl.getRank() != 4 || o.getRank() != 4 || l.getRank() != 3 ||
      !compatibleDim(ro.getDimSize(3), o.getDimSize(2)) ||
      !compatibleDim(ro.getDimSize(4), o.getDimSize(3)) ||
      !compatibleDim(rl.getDimSize(3), l.getDimSize(2)) || !l.getElementType().isF32())
    return emitOpError("expects [B, H, R, N, Dh] and f32 [B, H, R, N] rounds, giving "
                       "[B, H, N, Dh] and f32 [B, H, N]");
  return success();
}

/// Rules shared by the fused LSH op and its gradient.
template <typename OpTy>
static LogicalResult verifyFusedLsh(OpTy op) {
  auto q = tensorType(op.getQuery());
  if (failed(verifyAttentionShapes(op, op.getQuery(), op.getQuery(), op.getValue(),
                                   op.getOut().getType(), op.getLse().getType(),
                                   op.getLengths(), Value(), Value())))
    return failure();
  int64_t nb = op.getNumBuckets(), rounds = op.getRounds();
  if (nb < 2 || nb % 2)
    return op.emitOpError("num_buckets must be even and at least 2, found ") << nb;
  if (rounds < 1 || op.getChunk() < 1 || op.getBefore() < 0 || op.getAfter() < 0)
    return op.emitOpError("rounds and chunk must be positive, before/after non-negative");
  auto r = tensorType(op.getRotations());
  if (r.getRank() != 3 || !r.getElementType().isF32() ||
      !compatibleDim(r.getDimSize(0), rounds) || !compatibleDim(r.getDimSize(1), q.getDimSize(3)) ||
      !compatibleDim(r.getDimSize(2), nb / 2))
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

//===----------------------------------------------------------------------===//
// Whole-model graph ops
//===----------------------------------------------------------------------===//

static RankedTensorType rankedOf(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

bool attnc::attn::isRowLocal(Operation *op) {
  return llvm::isa<EmbedOp, LayerNormOp, LayerNormGradOp, BiasAddOp, AddOp, SubOp, ActivationOp,
                   ActivationGradOp, DropoutOp, ConcatColsOp, SliceColsOp>(op);
}

LogicalResult EmbedOp::verify() {
  auto tok = rankedOf(getTokens()), table = rankedOf(getTable()), pos = rankedOf(getPositions()),
       y = rankedOf(getResult());
  if (tok.getRank() != 1 || !tok.getElementType().isInteger(32))
    return emitOpError("tokens must be [R] i32, found ") << tok;
  if (table.getRank() != 2 || pos.getRank() != 2 || y.getRank() != 2)
    return emitOpError("table, positions and result must be 2-D");
  if (table.getDimSize(1) != pos.getDimSize(1) || y.getDimSize(1) != table.getDimSize(1) ||
      y.getDimSize(0) != tok.getDimSize(0))
    return emitOpError("result ") << y << " does not match tokens " << tok << " and table "
                                  << table;
  if (pos.getDimSize(0) <= 0 || tok.getDimSize(0) % pos.getDimSize(0) != 0)
    return emitOpError("rows (") << tok.getDimSize(0) << ") must be a multiple of the positions ("
                                 << pos.getDimSize(0) << ")";
  return success();
}

LogicalResult LayerNormOp::verify() {
  auto x = rankedOf(getInput());
  if (x.getRank() != 2)
    return emitOpError("input must be [R, C], found ") << x;
  int64_t C = x.getDimSize(1), R = x.getDimSize(0);
  if (rankedOf(getGamma()).getShape() != ArrayRef<int64_t>{C} ||
      rankedOf(getBeta()).getShape() != ArrayRef<int64_t>{C})
    return emitOpError("gamma and beta must be [") << C << "]";
  if (rankedOf(getMean()).getShape() != ArrayRef<int64_t>{R} ||
      rankedOf(getRstd()).getShape() != ArrayRef<int64_t>{R})
    return emitOpError("mean and rstd must be [") << R << "]";
  if (getResult().getType() != x)
    return emitOpError("result must have the input's type ") << x;
  return success();
}

LogicalResult MatmulOp::verify() {
  auto a = rankedOf(getLhs()), b = rankedOf(getRhs()), c = rankedOf(getResult());
  if (a.getRank() != 2 || b.getRank() != 2 || c.getRank() != 2)
    return emitOpError("operands and result must be 2-D");
  int64_t M = a.getDimSize(getTransposeA() ? 1 : 0), K = a.getDimSize(getTransposeA() ? 0 : 1);
  int64_t K2 = b.getDimSize(getTransposeB() ? 1 : 0), N = b.getDimSize(getTransposeB() ? 0 : 1);
  if (K != K2)
    return emitOpError("inner dimensions differ: ") << K << " vs " << K2;
  if (c.getDimSize(0) != M || c.getDimSize(1) != N)
    return emitOpError("result must be [") << M << ", " << N << "], found " << c;
  return success();
}

/// Whether `rows` [B·S, H·D] and `heads` [B, H, S, D] hold the same values.
static bool sameHeadLayout(RankedTensorType rows, RankedTensorType heads) {
  return rows.getRank() == 2 && heads.getRank() == 4 &&
         heads.getDimSize(0) * heads.getDimSize(2) == rows.getDimSize(0) &&
         heads.getDimSize(1) * heads.getDimSize(3) == rows.getDimSize(1);
}

LogicalResult SplitHeadsOp::verify() {
  auto x = rankedOf(getInput()), y = rankedOf(getResult());
  if (!sameHeadLayout(x, y))
    return emitOpError("cannot split ") << x << " into " << y;
  return success();
}

LogicalResult MergeHeadsOp::verify() {
  auto x = rankedOf(getInput()), y = rankedOf(getResult());
  if (!sameHeadLayout(y, x))
    return emitOpError("cannot merge ") << x << " into " << y;
  return success();
}

LogicalResult AttentionGradOp::verify() {
  unsigned expected = (getProjE() ? 1 : 0) + (getProjF() ? 1 : 0) + (getParams() ? 1 : 0);
  if (getParamGrads().size() != expected)
    return emitOpError("expects ") << expected << " parameter gradients (E, F, params present), found "
                                   << getParamGrads().size();
  if (getDquery().getType() != getQuery().getType() || getDkey().getType() != getKey().getType() ||
      getDvalue().getType() != getValue().getType() || getDout().getType() != getOut().getType())
    return emitOpError("dq, dk and dv must have the types of q, k and v, and dout the output's");
  // Each parameter gradient has its parameter's type, in operand order.
  unsigned i = 0;
  for (Value p : {getProjE(), getProjF(), getParams()})
    if (p && getParamGrads()[i++].getType() != p.getType())
      return emitOpError("parameter gradient #") << i - 1 << " has type "
                                                 << getParamGrads()[i - 1].getType()
                                                 << ", its parameter " << p.getType();
  return success();
}

LogicalResult AttentionGradOp::verifySymbolUses(SymbolTableCollection &symbols) {
  if (!symbols.lookupNearestSymbolFrom<VariantOp>(*this, getVariantAttr()))
    return emitOpError("refers to unknown attention variant ") << getVariantAttr();
  return success();
}

LogicalResult FusedRowsOp::verify() {
  Block &body = getBody().front();
  if (body.getNumArguments() != getInputs().size())
    return emitOpError("body takes ") << body.getNumArguments() << " arguments for "
                                      << getInputs().size() << " inputs";
  // Row-indexed values (everything codegen reads or writes per row) have
  // `rows` rows; results always do.
  for (Type t : getResultTypes())
    if (llvm::cast<RankedTensorType>(t).getRank() < 1 ||
        llvm::cast<RankedTensorType>(t).getDimSize(0) != getRows())
      return emitOpError("result type ") << t << " does not have " << getRows() << " rows";
  for (auto [arg, in] : llvm::zip(body.getArguments(), getInputs()))
    if (arg.getType() != in.getType())
      return emitOpError("body argument type ") << arg.getType() << " differs from input "
                                                << in.getType();
  auto yield = llvm::cast<RowsYieldOp>(body.getTerminator());
  if (TypeRange(yield.getValues()) != getResultTypes())
    return emitOpError("yields types that differ from the results");
  return success();
}

LogicalResult RowChunksOp::verify() {
  Block &body = getBody().front();
  size_t n = getInputs().size();
  if (body.getNumArguments() != n || getSplit().size() != n)
    return emitOpError("needs one body argument and one split flag per input");
  if (getSums().size() != getNumResults())
    return emitOpError("needs one sums flag per result");
  if (getChunk() <= 0)
    return emitOpError("chunk must be positive, found ") << getChunk();
  auto yield = llvm::cast<ChunksYieldOp>(body.getTerminator());
  if (yield.getValues().size() != getNumResults())
    return emitOpError("body yields ") << yield.getValues().size() << " values for "
                                       << getNumResults() << " results";
  // Every split input has the same rows R, cut into chunks of `chunk` rows
  // (the body's types); concatenated results have R rows again.
  std::optional<int64_t> rows;
  for (auto [i, arg] : llvm::enumerate(body.getArguments())) {
    auto in = rankedOf(getInputs()[i]), a = rankedOf(arg);
    bool ok = getSplit()[i] ? (in.getRank() >= 1 && a.getRank() == in.getRank() &&
                               a.getShape().drop_front() == in.getShape().drop_front() &&
                               a.getDimSize(0) == getChunk())
                            : a == in;
    if (!ok)
      return emitOpError("body argument #") << i << " " << a << " does not fit input " << in
                                            << " (split inputs are chunks of " << getChunk()
                                            << " rows)";
    if (getSplit()[i]) {
      if (rows && *rows != in.getDimSize(0))
        return emitOpError("split inputs have different row counts: ")
               << *rows << " and " << in.getDimSize(0);
      rows = in.getDimSize(0);
    }
  }
  if (!rows)
    return emitOpError("needs at least one split input");
  for (auto [i, v] : llvm::enumerate(yield.getValues())) {
    auto r = rankedOf(getResult(i)), c = rankedOf(v);
    bool ok = getSums()[i] ? r == c
                           : r.getRank() == c.getRank() && r.getDimSize(0) == *rows &&
                                 c.getDimSize(0) == getChunk() &&
                                 r.getShape().drop_front() == c.getShape().drop_front();
    if (!ok)
      return emitOpError("result #") << i << " " << r << " does not fit the chunk value " << c;
  }
  return success();
}

#define GET_OP_CLASSES
#include "dsl/AttnOps.cpp.inc"
