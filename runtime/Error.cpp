//===- Error.cpp - Result values of the runtime API -----------------------===//
#include "runtime/Error.h"

#include <cstdio>

namespace attnc {

void printWarning(const std::string &message) {
  // One fprintf so concurrent warnings do not interleave mid-line.
  std::fprintf(stderr, "attnc: warning: %s\n", message.c_str());
}

std::ostream &streamOrNull(std::ostream *stream) {
  // No buffer: every write fails quietly. One per thread, since a failed
  // write sets the stream's state.
  thread_local std::ostream nowhere(nullptr);
  return stream ? *stream : nowhere;
}

} // namespace attnc
