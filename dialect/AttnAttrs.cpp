//===- AttnAttrs.cpp - attn attributes (AttnAttrs.td) -----------------------===//
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

LogicalResult LowRankAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t k,
                                  ShareMode) {
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
            return p.parseInteger(key == "before" ? before : key == "after" ? after : seed);
          }))
    return {};
  return p.getChecked<LshAttr>(loc, p.getContext(), buckets, rounds, chunk, before, after, seed,
                               denseFallback);
}

void LshAttr::print(AsmPrinter &p) const {
  p << "<buckets = ";
  printTunableValue(p, getBuckets());
  p << ", rounds = ";
  printTunableValue(p, getRounds());
  p << ", chunk = ";
  printTunableValue(p, getChunk());
  p << ", before = " << getBefore() << ", after = " << getAfter() << ", seed = " << getSeed()
    << ", dense_fallback = " << (getDenseFallback() ? "true" : "false") << ">";
}

LogicalResult LshAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t buckets,
                              int64_t rounds, int64_t chunk, int64_t before, int64_t after,
                              int64_t seed, bool) {
  if (buckets != kAuto && (buckets < 2 || buckets % 2 != 0))
    return emitError() << "LSH buckets must be even and at least 2, found " << buckets;
  if (!tunableIn(rounds, 1, 64))
    return emitError() << "LSH rounds must be in [1, 64], found " << rounds;
  if (!tunableIn(chunk, 1, int64_t(1) << 20))
    return emitError() << "LSH chunk must be at least 1, found " << chunk;
  if (before < 0 || before > 16 || after < 0 || after > 16)
    return emitError() << "LSH before/after must be in [0, 16], found " << before << "/" << after;
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

LogicalResult TileAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t blockQ,
                               int64_t blockKv, int64_t warps, int64_t stages) {
  if (!tunableIn(blockQ, 1, 1024) || !tunableIn(blockKv, 1, 1024))
    return emitError() << "tile block sizes must be in [1, 1024] or auto, found " << blockQ << "x"
                       << blockKv;
  if (warps != kAuto && warps != 1 && warps != 2 && warps != 4 && warps != 8 && warps != 16)
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
#include "dialect/AttnAttrs.cpp.inc"

void AttnDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialect/AttnAttrs.cpp.inc"
      >();
}
