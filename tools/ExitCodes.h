//===- ExitCodes.h - How attnc's commands end, as exit codes ----*- C++ -*-===//
//
// The driver returns what happened (driver/Report.h); the tools alone turn
// it into a process's exit code:
//   0  the command did what it was asked;
//   1  a problem with the user's input (spec, flags, files), already reported;
//   2  all this machine allows: no GPU to time on;
//   128 + the signal: interrupted, and stopped cleanly (tools/Interrupt.h).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_TOOLS_EXITCODES_H
#define ATTNC_TOOLS_EXITCODES_H

#include "driver/Report.h"
#include "tools/Interrupt.h"

namespace attnc::tools {

constexpr int kExitOk = 0;
constexpr int kExitInput = 1;
constexpr int kExitUnavailable = 2;

inline int exitCode(mlir::LogicalResult result) {
  return mlir::succeeded(result) ? kExitOk : kExitInput;
}

inline int exitCode(const driver::CommandResult &result) {
  if (mlir::failed(result))
    return kExitInput;
  switch (*result) {
  case driver::Outcome::Done:
    return kExitOk;
  case driver::Outcome::Unavailable:
    return kExitUnavailable;
  case driver::Outcome::Interrupted:
    return interruptedExitCode();
  }
  return kExitInput;
}

} // namespace attnc::tools

#endif // ATTNC_TOOLS_EXITCODES_H
