//===- Report.h - Where the driver's words go -------------------*- C++ -*-===//
//
// The driver is a library: it never names std::cout or std::cerr. What it
// has to say goes to the current thread's Reporter, in two streams:
//   - results: tables, reports and progress lines (a tool's stdout);
//   - diagnostics: errors, warnings and notes (a tool's stderr).
// With none installed, a thread reports to the process's console. The C ABI
// installs one that keeps the words, per call and per thread, and returns
// them as the error's message; a tool could install one that writes a log.
// A driver call that starts threads hands its reporter to them.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_DRIVER_REPORT_H
#define ATTNC_DRIVER_REPORT_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/Support/LogicalResult.h"

#include <iosfwd>
#include <string>

namespace attnc::driver {

class Reporter {
public:
  Reporter(std::ostream &results, std::ostream &diagnostics)
      : results_(results), diagnostics_(diagnostics) {}
  std::ostream &results() const { return results_; }
  std::ostream &diagnostics() const { return diagnostics_; }

  /// The process's console: stdout and stderr.
  static Reporter &console();

private:
  std::ostream &results_;
  std::ostream &diagnostics_;
};

/// This thread's reporter: the innermost ScopedReporter's, else the console.
Reporter &reporter();

/// Installs `r` as this thread's reporter for the scope's lifetime.
class ScopedReporter {
public:
  explicit ScopedReporter(Reporter &r);
  ~ScopedReporter();
  ScopedReporter(const ScopedReporter &) = delete;
  ScopedReporter &operator=(const ScopedReporter &) = delete;

private:
  Reporter *previous_;
};

/// Shorthands for this thread's reporter's streams.
inline std::ostream &results() { return reporter().results(); }
inline std::ostream &diagnostics() { return reporter().diagnostics(); }

/// Writes an MLIR diagnostic as `file:line:col: kind: msg` (an error's
/// notes after it) to this thread's diagnostics. Contexts route theirs here
/// with reportDiagnosticsOf (Spec.h), which also serves the pass manager's
/// worker threads.
mlir::LogicalResult reportDiagnostic(mlir::Diagnostic &d);

/// Reports "attnc <cmd>: error: <msg>" to this thread's diagnostics and
/// returns failure(): how a command gives up on a user's input.
mlir::LogicalResult commandError(const char *cmd, const std::string &msg);

/// How a command that did not fail ended: it did all it was asked; all
/// this machine allows (no GPU to time on; what it did and what is missing
/// are reported); or it was interrupted and stopped cleanly (training: with
/// a checkpoint to resume from). The tools map each end, and a failure, to
/// an exit code; the driver never picks one.
enum class Outcome { Done, Unavailable, Interrupted };
using CommandResult = mlir::FailureOr<Outcome>;

} // namespace attnc::driver

#endif // ATTNC_DRIVER_REPORT_H
