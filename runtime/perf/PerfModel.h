//===- PerfModel.h - A kernel's time, predicted from its machine code -*- C++ -*-===//
//
// A throughput model (docs/perf-model.md): one iteration of a kernel's hot
// loop, counted per warp from its SASS (Sass.h), costs each SM unit some
// cycles; with every resident warp of the SM issuing at once, the unit
// that needs the most cycles sets the pace, unless one warp's own issue
// chain (the control words' stall counts) is longer still. Grid waves and
// loop trips scale that to the kernel. What it cannot see (latency the
// warps fail to hide, bank conflicts, L2, clocks that drop under load)
// docs/perf-model.md lists as its blind spots.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_PERF_PERFMODEL_H
#define ATTNC_RUNTIME_PERF_PERFMODEL_H

#include "runtime/Error.h"
#include "runtime/perf/Sass.h"

#include <string>
#include <vector>

namespace attnc::perf {

/// One GPU per arch: its per-SM rates and sizes. Every figure's source is
/// in PerfModel.cpp beside it and in docs/perf-model.md.
struct ArchRates {
  int sm = 0;
  const char *gpu = "";
  int sms = 0;
  double clockGhz = 0;       ///< boost clock
  double dramGBs = 0;        ///< HBM/GDDR bandwidth
  double tensorFlopsClk = 0; ///< dense fp16 mma.sync, fp32 accumulate, per SM
  double fp32Lanes = 0;      ///< FFMA lanes per SM per clock
  double aluLanes = 0;       ///< integer/logic lanes per SM per clock
  double mufuLanes = 0;      ///< special-function lanes per SM per clock
  double sharedBytesClk = 0; ///< shared-memory bandwidth per SM
  int registersPerSm = 65536;
  int sharedPerSm = 0; ///< bytes a kernel may use per SM
  int maxWarpsPerSm = 64;
  int maxBlocksPerSm = 32;
};

/// The table's entry for "sm_80" (sm_90a reads as sm_90), or an error
/// naming the archs it knows.
Expected<ArchRates> archRates(const std::string &arch);
/// The archs the table holds, oldest first.
std::vector<std::string> knownArchs();

/// How a kernel is launched and how often its hot loop runs.
struct LaunchShape {
  long long blocks = 0; ///< CTAs of the grid
  int warpsPerBlock = 0;
  double loopTrips = 0; ///< hot-loop iterations per CTA (0: run once, no loop)
  int registers = 0;    ///< per thread (ptxas)
  int sharedBytes = 0;  ///< per CTA, static plus dynamic
  /// Bytes the kernel must move to or from DRAM at the least (each input
  /// read once, each output written once): a floor under its time.
  double dramBytes = 0;
};

/// Resident CTAs per SM and what bounds them.
struct Occupancy {
  int blocks = 0;
  std::string limit; ///< "registers", "shared memory", "warps" or "blocks"
};
Occupancy occupancyOf(const ArchRates &rates, const LaunchShape &launch);

/// The cycles each SM unit needs for one iteration of every resident
/// warp's loop, and the prediction they make.
struct Prediction {
  Occupancy occupancy;
  double waves = 0; ///< grid waves over the SMs
  /// Per round (one loop iteration of all resident warps), SM cycles:
  double tensor = 0, shared = 0, mufu = 0, fma = 0, alu = 0, issue = 0;
  double latency = 0;     ///< one warp's stall-count chain (0: unknown)
  double dramSeconds = 0; ///< LaunchShape::dramBytes at the DRAM's bandwidth
  double roundCycles = 0;
  /// What sets the time: "tensor", "shared", "mufu", "fma", "alu", "issue",
  /// "latency" (one warp's own chain) or "dram".
  std::string limiter;
  double seconds = 0;
  double tensorUtilisation = 0; ///< tensor cycles / round cycles
};

/// `counts` (per warp, one pass of the loop or of the whole kernel) under
/// `launch` on `rates`.
Prediction predict(const ArchRates &rates, const PipeCounts &counts, const LaunchShape &launch);

} // namespace attnc::perf

#endif // ATTNC_RUNTIME_PERF_PERFMODEL_H
