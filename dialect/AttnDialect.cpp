//===- AttnDialect.cpp - the attn dialect and its tunable syntax ------------===//
//
// The dialect's registration and what its attributes and ops share; each
// ODS family has its own file (AttnAttrs.cpp, AttnOps.cpp, AttnLshOps.cpp,
// AttnGraphOps.cpp), as CIRCT's dialects have one .cpp per .td.
//
//===----------------------------------------------------------------------===//
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

#include "dialect/AttnDialect.cpp.inc"
#include "dialect/AttnEnums.cpp.inc"

void AttnDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "dialect/AttnOps.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// Tunable integers: a number or `auto`
//===----------------------------------------------------------------------===//

ParseResult dialect_detail::parseTunableValue(AsmParser &p, int64_t &value) {
  if (succeeded(p.parseOptionalKeyword("auto"))) {
    value = kAuto;
    return success();
  }
  return p.parseInteger(value);
}

void dialect_detail::printTunableValue(AsmPrinter &p, int64_t value) {
  if (value == kAuto)
    p << "auto";
  else
    p << value;
}

/// Custom directive for op formats: `custom<Tunable>($attr)`.
ParseResult dialect_detail::parseTunable(OpAsmParser &p, IntegerAttr &attr) {
  int64_t v;
  if (parseTunableValue(p, v))
    return failure();
  attr = p.getBuilder().getI64IntegerAttr(v);
  return success();
}

void dialect_detail::printTunable(OpAsmPrinter &p, Operation *, IntegerAttr attr) {
  printTunableValue(p, attr.getInt());
}

bool dialect_detail::tunableIn(int64_t v, int64_t lo, int64_t hi) {
  return v == kAuto || (v >= lo && v <= hi);
}

/// Parses `< key = value, ... >`, calling `parseValue(key)` at each value.
/// Keys may come in any order; each must appear exactly once.
ParseResult dialect_detail::parseKeyValues(AsmParser &p, ArrayRef<StringRef> keys,
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
