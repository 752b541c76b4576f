//===- Interrupt.h - Ctrl-C ends a training run cleanly ---------*- C++ -*-===//
//
// The first SIGINT or SIGTERM sets a flag the trainer reads after each step
// (TrainOptions::stop): the run finishes that step, writes a checkpoint,
// says how to resume, and the tool exits 128 + the signal's number. The
// handler is one-shot (SA_RESETHAND), so a second Ctrl-C stops the process
// at once. Under mpirun the ranks would see the flag at different steps,
// so data-parallel runs keep the default behaviour (the job ends).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_TOOLS_INTERRUPT_H
#define ATTNC_TOOLS_INTERRUPT_H

#include <atomic>
#include <csignal>
#include <cstring>

#include <unistd.h>

namespace attnc::tools {

inline std::atomic<bool> &stopRequested() {
  static std::atomic<bool> flag{false};
  return flag;
}

inline std::atomic<int> &stopSignal() {
  static std::atomic<int> signo{0};
  return signo;
}

/// The exit code of a run that `stopRequested` ended: 128 + the signal.
inline int interruptedExitCode() {
  return 128 + (stopSignal().load() ? stopSignal().load() : SIGINT);
}

/// Installs the one-shot SIGINT/SIGTERM handlers; returns the flag they set.
/// `tool` begins the line the handler writes ("attnc train").
inline const std::atomic<bool> *stopOnInterrupt(const char *tool) {
  static const char *name = tool;
  stopRequested(), stopSignal(); // constructed here, not inside the handler
  struct sigaction sa;
  std::memset(&sa, 0, sizeof sa);
  sa.sa_handler = [](int signo) {
    stopSignal().store(signo);
    stopRequested().store(true);
    // Only async-signal-safe calls here: write(2), no streams.
    const char *a = "\n", *b = ": stopping after this step to write a checkpoint "
                               "(interrupt again to stop at once)\n";
    (void)!write(STDERR_FILENO, a, std::strlen(a));
    (void)!write(STDERR_FILENO, name, std::strlen(name));
    (void)!write(STDERR_FILENO, b, std::strlen(b));
  };
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  return &stopRequested();
}

} // namespace attnc::tools

#endif // ATTNC_TOOLS_INTERRUPT_H
