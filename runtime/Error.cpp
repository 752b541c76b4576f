//===- Error.cpp - Result values of the runtime API -----------------------===//
#include "runtime/Error.h"

#include <cstdio>

namespace attnc {

void printWarning(const std::string &message) {
  // One fprintf so concurrent warnings do not interleave mid-line.
  std::fprintf(stderr, "attnc: warning: %s\n", message.c_str());
}

} // namespace attnc
