//===- CpuInfo.h - The one reader of /proc/cpuinfo ---------------*- C++ -*-===//
//
// Two parts of the runtime describe the host CPU: the kernel cache keys
// host-compiled kernels by it (HostCompiler::cpuIdentity: -march=native
// code is the CPU's), and the tuning database keys measurements by it
// (tune::cpuDevice). Both read this parse of /proc/cpuinfo.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_CPUINFO_H
#define ATTNC_RUNTIME_CPUINFO_H

#include <map>
#include <string>

namespace attnc {

/// The first line of every key of a /proc/cpuinfo text (the first CPU's
/// description; x86 and AArch64 spell some keys differently) and the count
/// of "processor" lines.
struct CpuInfo {
  int processors = 0;

  /// The parse of `text` (a /proc/cpuinfo).
  static CpuInfo parse(const std::string &text);
  /// This machine's, read once (empty where there is no /proc/cpuinfo).
  static const CpuInfo &host();

  /// `key`'s first line as written ("model name\t: AMD EPYC ..."), or "".
  std::string line(const std::string &key) const;
  /// `key`'s first value, trimmed, or "".
  std::string value(const std::string &key) const;

private:
  std::map<std::string, std::pair<std::string, std::string>> first_; ///< key -> line, value
};

} // namespace attnc

#endif // ATTNC_RUNTIME_CPUINFO_H
