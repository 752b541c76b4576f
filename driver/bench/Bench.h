//===- Bench.h - attnc bench: attention kernels side by side ----*- C++ -*-===//
#ifndef ATTNC_DRIVER_BENCH_BENCH_H
#define ATTNC_DRIVER_BENCH_BENCH_H

#include "mlir/Support/LogicalResult.h"

#include <string>
#include <vector>

namespace attnc::driver {

struct BenchOptions {
  std::string target = "cpu"; ///< cpu, cuda, or cuda-sim (the GPU program on the emulator)
  std::string dtype = "f16";  ///< cuda, cuda-sim: the kernels' element type
  std::vector<int> lengths = {512, 1024, 2048, 4096, 8192, 16384};
  std::vector<int> ranks = {128, 256};
  int batch = 1, heads = 4, headDim = 64;
  int repeats = 3;
  bool backward = true;
  int maxBackwardN = 8192; ///< fwd+bwd is timed up to this N
  int maxUnfusedN = 8192;  ///< the unfused baseline materialises N x N scores
  std::string csv = "attnc-bench.csv";
  std::string svg = "attnc-bench.svg";
  /// LSH (Reformer) configurations: every rounds x chunk pair, non-causal,
  /// one chunk back (before = 1, after = 0), never the dense fallback.
  std::vector<int> lshRounds = {1, 2, 4, 8};
  std::vector<int> lshChunks = {64, 128};
  int lshBuckets = 64;
  /// The Reformer sweep: B·N = sweepTokens held fixed while N grows (0: skip).
  int sweepTokens = 16384;
  std::vector<int> sweepLengths = {1024, 2048, 4096, 8192, 16384};
  std::string sweepCsv = "attnc-bench-lsh-sweep.csv";
  std::string sweepSvg = "attnc-bench-lsh-sweep.svg";
  /// --linformer-table SPEC: only the Linformer paper's inference table
  /// (BenchLinformer.h) for the spec's low-rank model.
  std::string linformerTable;
  /// --tuned SPEC: only the tuned-vs-heuristic comparison of this spec's
  /// kernels that have tuning entries (attnc-tuned.csv / .svg by default).
  std::string tunedSpec;
  /// --engines SPEC: only the runtime vs compiled training step of the
  /// spec's model (--model picks one); attnc-engines.csv / .svg by default.
  std::string enginesSpec, model;
  int layers = 1;        ///< layers of the table's models (the spec's dims otherwise)
  double memoryGiB = 16; ///< the max-batch search's budget (the paper's 16 GB V100)
  bool csvGiven = false, svgGiven = false; ///< --csv / --svg were passed (else mode defaults)
};

/// Times dense fused, unfused (GEMM + softmax + GEMM), low-rank and LSH
/// attention over the lengths, prints a table with ratios and GFLOP/s against
/// the machine's measured peak, and writes a CSV and an SVG plot; then the
/// fixed-total-tokens LSH sweep (its own table, CSV and plot). With
/// --linformer-table, the Linformer table instead (runLinformerTable).
mlir::LogicalResult runBench(const BenchOptions &options);

/// --target cuda / cuda-sim: the dense, causal, low-rank and LSH kernels
/// for the GPU present (or on the SIMT emulator) at --n x --batch x
/// --heads x --head-dim in --dtype, timed by the runtime's GPU benchmark
/// (runtime/tune/AttentionBench.h); a table and --csv.
mlir::LogicalResult runCudaBench(const BenchOptions &options);

} // namespace attnc::driver

#endif // ATTNC_DRIVER_BENCH_BENCH_H
