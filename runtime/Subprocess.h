//===- Subprocess.h - Run a program without a shell -------------*- C++ -*-===//
//
// Runs the host C++ compiler: argv is passed as is (no shell, so no quoting
// or injection issues with paths), stdout and stderr are captured together,
// and a time limit kills the program and everything it started (it runs in
// its own process group).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_SUBPROCESS_H
#define ATTNC_RUNTIME_SUBPROCESS_H

#include "runtime/Error.h"

#include <string>
#include <vector>

namespace attnc {

struct ProcessResult {
  int exitCode = -1;     ///< exit status, or -1 when killed by a signal
  int signal = 0;        ///< the terminating signal, 0 if it exited
  bool timedOut = false; ///< killed because it ran past the time limit
  std::string output;    ///< stdout and stderr, interleaved as written
  double seconds = 0;    ///< wall time

  bool succeeded() const { return exitCode == 0 && !timedOut; }
  /// "exit status 1", "killed by signal 9", "timed out after 2.0 s".
  std::string describe() const;
};

/// Runs `argv[0]` (searched in $PATH when it has no '/') with stdin from
/// /dev/null. Fails only when the program cannot be started; a program that
/// fails or times out is a ProcessResult saying so. `timeoutSeconds` <= 0
/// means no limit. Output beyond `maxOutputBytes` is dropped (with a note).
Expected<ProcessResult> runProcess(const std::vector<std::string> &argv, double timeoutSeconds,
                                   size_t maxOutputBytes = 16u << 20);

/// The command line as a shell would need it, for messages.
std::string formatCommand(const std::vector<std::string> &argv);

} // namespace attnc

#endif // ATTNC_RUNTIME_SUBPROCESS_H
