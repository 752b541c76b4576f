//===- Version.h - attnc and toolkit versions -------------------*- C++ -*-===//
#ifndef ATTNC_RUNTIME_VERSION_H
#define ATTNC_RUNTIME_VERSION_H

#include <string>

namespace attnc {
/// attnc's own version.
const char *attncVersion();
/// The CUDA toolkit the runtime was built against, e.g. "13.0".
std::string cudaToolkitVersion();
} // namespace attnc

#endif // ATTNC_RUNTIME_VERSION_H
