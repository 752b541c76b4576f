//===- Report.cpp - Where the driver's words go ---------------------------===//
#include "driver/Report.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Location.h"
#include "llvm/Support/raw_ostream.h"

#include <iostream>
#include <string>

namespace attnc::driver {

namespace {
thread_local Reporter *current = nullptr;
} // namespace

// The one place the driver names the console.
Reporter &Reporter::console() {
  static Reporter r(std::cout, std::cerr);
  return r;
}

Reporter &reporter() { return current ? *current : Reporter::console(); }

ScopedReporter::ScopedReporter(Reporter &r) : previous_(current) { current = &r; }
ScopedReporter::~ScopedReporter() { current = previous_; }

mlir::LogicalResult reportDiagnostic(mlir::Diagnostic &d) {
  using mlir::DiagnosticSeverity;
  const char *kind = d.getSeverity() == DiagnosticSeverity::Error     ? "error"
                     : d.getSeverity() == DiagnosticSeverity::Warning ? "warning"
                     : d.getSeverity() == DiagnosticSeverity::Remark  ? "remark"
                                                                      : "note";
  std::string loc;
  llvm::raw_string_ostream ls(loc);
  d.getLocation().print(ls);
  if (auto flc = llvm::dyn_cast<mlir::FileLineColLoc>(d.getLocation()))
    loc = (flc.getFilename().str() + ":" + std::to_string(flc.getLine()) + ":" +
           std::to_string(flc.getColumn()));
  diagnostics() << loc << ": " << kind << ": " << d.str() << "\n";
  // An error's notes say where else to look; a remark's are not needed.
  if (d.getSeverity() == DiagnosticSeverity::Error)
    for (mlir::Diagnostic &note : d.getNotes())
      reportDiagnostic(note);
  return mlir::success();
}

mlir::LogicalResult commandError(const char *cmd, const std::string &msg) {
  diagnostics() << "attnc " << cmd << ": error: " << msg << "\n";
  return mlir::failure();
}

} // namespace attnc::driver
