//===- ParserFuzzer.cpp - Fuzz the .attn front end and MLIRGen ------------===//
//
// Properties checked on every input (a violation aborts, which libFuzzer
// reports as a finding):
//  - the front end never crashes or hangs (ASan/libFuzzer catch those);
//  - a rejected spec has at least one located error;
//  - an accepted spec lowers to IR that verifies (Sema catches everything the
//    verifiers would), and that IR survives print → parse → print unchanged,
//    with every op's attributes equal (not just their printed text: a printer
//    that rounds would print the same text twice).
//
//===----------------------------------------------------------------------===//
#include "dsl/MLIRGen.h"
#include "dsl/Parser.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <vector>

static std::string printModule(mlir::ModuleOp module) {
  std::string text;
  llvm::raw_string_ostream os(text);
  module.print(os);
  return os.str();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string buffer(reinterpret_cast<const char *>(data), size);
  std::ostringstream errors;
  attnc::DiagnosticEngine diag(buffer, errors);
  std::optional<attnc::ast::Spec> spec = attnc::parseAndCheck(buffer, "fuzz.attn", diag);
  if (!spec) {
    if (!diag.hasErrors() || errors.str().find("fuzz.attn:") != 0) {
      std::fprintf(stderr, "rejected without a located error:\n%s\n", errors.str().c_str());
      std::abort();
    }
    return 0;
  }
  static mlir::MLIRContext *context = [] {
    auto *ctx = new mlir::MLIRContext();
    attnc::registerAttncDialects(*ctx);
    ctx->printOpOnDiagnostic(false);
    return ctx;
  }();
  std::string verifierErrors;
  mlir::ScopedDiagnosticHandler handler(context, [&](mlir::Diagnostic &d) {
    verifierErrors += d.str() + "\n";
    return mlir::success();
  });
  mlir::OwningOpRef<mlir::ModuleOp> module = attnc::mlirGen(*context, *spec);
  if (!module) {
    std::fprintf(stderr, "Sema accepted a spec the verifier rejects:\n%s\n",
                 verifierErrors.c_str());
    std::abort();
  }
  std::string first = printModule(*module);
  mlir::OwningOpRef<mlir::ModuleOp> reparsed =
      mlir::parseSourceString<mlir::ModuleOp>(first, context);
  bool sameAttrs = reparsed && [&] {
    std::vector<mlir::Operation *> a, b;
    module->walk([&](mlir::Operation *op) { a.push_back(op); });
    (*reparsed)->walk([&](mlir::Operation *op) { b.push_back(op); });
    if (a.size() != b.size())
      return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (a[i]->getName() != b[i]->getName() ||
          a[i]->getAttrDictionary() != b[i]->getAttrDictionary())
        return false;
    return true;
  }();
  if (!reparsed || !sameAttrs || printModule(*reparsed) != first) {
    std::fprintf(stderr, "IR does not round-trip:\n%s\n%s\n", first.c_str(),
                 verifierErrors.c_str());
    std::abort();
  }
  return 0;
}
