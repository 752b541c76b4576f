//===- BenchLsh.h - attnc bench: the LSH columns and sweep ------*- C++ -*-===//
#ifndef ATTNC_DRIVER_BENCH_BENCHLSH_H
#define ATTNC_DRIVER_BENCH_BENCHLSH_H

#include "driver/bench/Bench.h"

#include "runtime/CpuAttention.h"

#include "mlir/IR/BuiltinOps.h"

#include <optional>

namespace attnc::driver {

/// One compiled LSH variant of the benchmark and the rotations it uses.
struct LshBenchKernel {
  int rounds = 0, chunk = 0;
  std::optional<CpuAttention> kernels;
  st::Tensor rotations;
  std::string label() const {
    return "lsh_r" + std::to_string(rounds) + "_c" + std::to_string(chunk);
  }
};

/// Compiles every rounds x chunk configuration of `opt` for head dim D
/// (forward, and backward when `backward`). Returns an exit code.
mlir::LogicalResult compileLshBenchKernels(mlir::ModuleOp module, const BenchOptions &opt,
                                           int maxSeq, bool backward,
                                           std::vector<LshBenchKernel> &out);

/// The Reformer paper's sweep: B·N held at opt.sweepTokens while N grows,
/// dense vs LSH time per token; prints the table, writes CSV and SVG.
mlir::LogicalResult runLshSweep(mlir::ModuleOp module, const BenchOptions &opt);

} // namespace attnc::driver

#endif // ATTNC_DRIVER_BENCH_BENCHLSH_H
