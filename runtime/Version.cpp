//===- Version.cpp - attnc and toolkit versions ---------------------------===//
#include "runtime/Version.h"

#include <cuda.h>
#include <nvrtc.h>

namespace attnc {

const char *attncVersion() { return "0.1.0"; }

std::string cudaToolkitVersion() {
  return std::to_string(CUDA_VERSION / 1000) + "." + std::to_string((CUDA_VERSION % 1000) / 10);
}

std::string nvrtcVersion() {
  int major = 0, minor = 0;
  if (::nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
    return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

} // namespace attnc
