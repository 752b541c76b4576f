//===- BenchCommon.h - Helpers shared by the attnc bench modes --*- C++ -*-===//
#ifndef ATTNC_DRIVER_BENCH_BENCHCOMMON_H
#define ATTNC_DRIVER_BENCH_BENCHCOMMON_H

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

/// The benches' figure of a quantity against the sequence length N: a log
/// x axis ticked at `lengths`, a linear y axis from 0 (a caller may make it
/// logarithmic), the legend beside the frame.
inline plot::LinePlot sequenceLengthPlot(const std::string &title, const std::string &yLabel,
                                         const std::vector<int> &lengths) {
  plot::LinePlot p;
  p.title = title;
  p.xLabel = "sequence length N";
  p.yLabel = yLabel;
  p.xScale = plot::Scale::Log;
  p.yFromZero = true;
  p.legendOutside = true;
  p.xTicks.assign(lengths.begin(), lengths.end());
  return p;
}

} // namespace attnc::driver::bench

#endif // ATTNC_DRIVER_BENCH_BENCHCOMMON_H
