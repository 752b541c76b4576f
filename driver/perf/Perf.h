//===- Perf.h - attnc perf: kernels' time, predicted from their SASS -*- C++ -*-===//
//
// The performance model's command (docs/perf-model.md): compiles a spec's
// CUDA attention kernels with NVRTC for each arch, reads their machine code
// (runtime/perf), and predicts each kernel's time and each pass's TFLOP/s
// at a shape, naming what limits it. No GPU needed.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_DRIVER_PERF_PERF_H
#define ATTNC_DRIVER_PERF_PERF_H

#include "runtime/Error.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/LogicalResult.h"

#include <string>
#include <vector>

namespace attnc::driver {

struct PerfOptions {
  std::string spec;
  std::vector<std::string> archs = {"sm_80", "sm_90"};
  long long batch = 2, heads = 16, seqLen = 8192;
  std::string csv;     ///< write every row here
  std::string compare; ///< an earlier --csv: print the ratios against it
};

/// attnc perf: a table per arch of the kernels' loop counts by pipe,
/// resources, predicted time and limiter, then each pass's TFLOP/s.
mlir::LogicalResult runPerf(const PerfOptions &options);

/// One fused op's pass, predicted: every kernel of it summed (complete:
/// each had a prediction).
struct PredictedPass {
  std::string variant;
  bool backward = false;
  double seconds = 0;
  bool complete = false;
};

/// The passes of the CUDA kernels `attnc compile --target cuda --arch ARCH`
/// builds from `module` (which stays as it is), predicted at B x H x N.
/// An empty error message: the front end reported it already.
Expected<std::vector<PredictedPass>> predictPasses(mlir::ModuleOp module, const std::string &arch,
                                                   long long batch, long long heads,
                                                   long long seqLen);

} // namespace attnc::driver

#endif // ATTNC_DRIVER_PERF_PERF_H
