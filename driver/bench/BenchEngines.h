//===- BenchEngines.h - attnc bench --engines -------------------*- C++ -*-===//
#ifndef ATTNC_DRIVER_BENCH_BENCHENGINES_H
#define ATTNC_DRIVER_BENCH_BENCHENGINES_H

#include "driver/Train.h"

#include <string>

namespace attnc::driver {

/// attnc bench --engines SPEC: one training step of the model, interleaved, `repeats` times;
/// prints the medians and memory, appends a CSV row and draws a bar chart.
mlir::LogicalResult benchEngines(const TrainCliOptions &options, int repeats,
                                 const std::string &csvPath, const std::string &svgPath);

} // namespace attnc::driver

#endif // ATTNC_DRIVER_BENCH_BENCHENGINES_H
