//===- Version.cpp - attnc and toolkit versions ---------------------------===//
#include "runtime/Version.h"

#include <cuda.h>

namespace attnc {

const char *attncVersion() { return "0.1.0"; }

std::string cudaToolkitVersion() {
  return std::to_string(CUDA_VERSION / 1000) + "." + std::to_string((CUDA_VERSION % 1000) / 10);
}

} // namespace attnc
