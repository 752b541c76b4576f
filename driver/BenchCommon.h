//===- BenchCommon.h - Helpers shared by the attnc bench modes --*- C++ -*-===//
#ifndef ATTNC_DRIVER_BENCHCOMMON_H
#define ATTNC_DRIVER_BENCHCOMMON_H

#include "runtime/KernelHeaders.h"
#include "runtime/Plot.h"
#include "runtime/CpuAttention.h"
#include "runtime/HostCompiler.h"
#include "runtime/KernelCache.h"
#include "runtime/Safetensors.h"
#include "runtime/tune/Measure.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <fstream>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace attnc::driver::bench {

using Clock = std::chrono::steady_clock;

// The measuring half is the runtime's (runtime/tune/Measure.h).
using tune::median;
using tune::medianMs;
using tune::randomTensor;

inline std::string fmt(double v, int prec = 2) {
  if (std::isnan(v))
    return "-";
  std::ostringstream os;
  os << std::fixed << std::setprecision(prec) << v;
  return os.str();
}

/// Compiles and loads a benchmark's own C++ (baselines, probes) like the
/// generated kernels: same compiler, flags, kernel headers and cache, with
/// OpenBLAS for the GEMMs.
inline Expected<SharedObject> compileBenchSource(const std::string &programName,
                                                 const std::string &source) {
  static HostCompiler compiler(&KernelCache::processDefault());
  Expected<std::vector<std::string>> dirs = kernelIncludeDirs(KernelFamily::Cpu);
  if (!dirs)
    return dirs.takeError();
  HostCompileOptions options;
  options.includeDirs = *dirs;
  options.flags = {"-DATTNC_USE_CBLAS", "-lopenblas"};
  return compiler.compileAndLoad(programName, source, options);
}

} // namespace attnc::driver::bench

#endif // ATTNC_DRIVER_BENCHCOMMON_H
