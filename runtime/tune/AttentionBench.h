//===- AttentionBench.h - An artifact's CUDA attention kernels, timed -*- C++ -*-===//
//
// The GPU benchmark (attnc-rt bench DIR, attnc bench --target cuda): every
// forward kernel of a CUDA artifact (and its backward) on random inputs of
// the given shapes, timed by CUDA events around the kernels alone (uploads,
// downloads and the host's low-rank projections are outside), the median
// of `repeats` runs after a warm-up. TFLOP/s by docs/design.md, Measuring:
// dense forward 4*B*H*N^2*D (halved when causal), backward 2.5x the
// forward; low-rank 4*B*H*N*k*D (the attention over the k projected keys);
// LSH 4*B*H*N*(chunk*(1+before+after))*D per round. Against the device's
// datasheet peak for the kernels' dtype (tensor cores for fp16/bf16). On
// `cuda-sim` the same code runs on the SIMT emulator: its times are the
// host's, and only rehearse the mechanics.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TUNE_ATTENTIONBENCH_H
#define ATTNC_RUNTIME_TUNE_ATTENTIONBENCH_H

#include "runtime/Artifact.h"

#include <array>
#include <ostream>
#include <string>
#include <vector>

namespace attnc::tune {

struct AttentionBenchOptions {
  std::string target = "cuda"; ///< cuda, or cuda-sim (the SIMT emulator)
  /// [B, H, N] per row; N > a low-rank kernel's compiled maximum is skipped.
  std::vector<std::array<int64_t, 3>> shapes = {{4, 16, 1024}, {2, 16, 4096}};
  int repeats = 10;
  bool backward = true;
  std::string kernel; ///< only this forward kernel; empty: all
};

struct AttentionBenchRow {
  std::string kernel, kind, dtype; ///< kind: dense, lowrank k=K, lsh
  int64_t B = 0, H = 0, N = 0, D = 0;
  double fwdMs = 0, bwdMs = 0;         ///< bwdMs 0: not run
  double fwdTflops = 0, bwdTflops = 0; ///< achieved
  double peakTflops = 0;               ///< the device's datasheet figure (0: unknown)
  long long deviceBytes = 0;           ///< peak device memory of the run
  std::string device;
  std::string tile; ///< "128x128 w8 s2" as launched (re-tiled for the device)
};

/// Datasheet dense peak TFLOP/s of an SM version for a dtype: tensor cores
/// for f16/bf16, FMA for f32; 0 where unknown.
double datasheetPeakTflops(int sm, const std::string &dtype);

/// The kernels of `artifact` (a CUDA artifact) timed at every shape.
Expected<std::vector<AttentionBenchRow>> benchArtifactAttention(const Artifact &artifact,
                                                                const AttentionBenchOptions &opt);

/// The table people read, and the CSV (a header line, then one per row).
void printBenchTable(std::ostream &os, const std::vector<AttentionBenchRow> &rows);
Status writeBenchCsv(const std::string &path, const std::vector<AttentionBenchRow> &rows);

} // namespace attnc::tune

#endif // ATTNC_RUNTIME_TUNE_ATTENTIONBENCH_H
