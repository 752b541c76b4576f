//===- PlotRuns.h - attnc plot: training runs side by side ------*- C++ -*-===//
#ifndef ATTNC_DRIVER_PLOTRUNS_H
#define ATTNC_DRIVER_PLOTRUNS_H

#include "mlir/Support/LogicalResult.h"

#include <string>
#include <vector>

namespace attnc::driver {

struct PlotCliOptions {
  std::vector<std::string> runs;   ///< run directories (attnc train --out)
  std::vector<std::string> labels; ///< one per run (default: the directory's name)
  std::string output = "runs.svg";
  std::string title;
  std::string what = "held-out"; ///< held-out, training or both
};

/// attnc plot: the held-out loss at each evaluation (eval.csv) and/or the
/// smoothed training loss (train.csv) of several runs in one SVG, so runs
/// compare at a glance. Returns an exit code; errors name the file.
mlir::LogicalResult runPlot(const PlotCliOptions &options);

} // namespace attnc::driver

#endif // ATTNC_DRIVER_PLOTRUNS_H
