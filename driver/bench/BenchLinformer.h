//===- BenchLinformer.h - attnc bench --linformer-table ---------*- C++ -*-===//
#ifndef ATTNC_DRIVER_BENCH_BENCHLINFORMER_H
#define ATTNC_DRIVER_BENCH_BENCHLINFORMER_H

#include "driver/bench/Bench.h"

namespace attnc::driver {

/// The Linformer paper's inference table (Wang et al. 2020, Table 3) on this
/// machine: for every N of opt.lengths and k of opt.ranks, the forward time
/// and the largest batch whose planned inference peak fits opt.memoryGiB of
/// a Linformer model (the spec opt.linformerTable's low-rank model, seq = N,
/// opt.layers layers) against the standard Transformer with the same dims,
/// both unfused (B·H·N·N scores, the paper's baseline) and fused (attnc's
/// dense kernel); the plan is checked against the measured peak RSS. Prints
/// the table beside the paper's numbers, writes a CSV and an SVG plot
/// (docs/benchmarks.md). Returns an exit code.
mlir::LogicalResult runLinformerTable(const BenchOptions &opt);

} // namespace attnc::driver

#endif // ATTNC_DRIVER_BENCH_BENCHLINFORMER_H
