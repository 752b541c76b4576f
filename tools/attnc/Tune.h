//===- Tune.h - attnc tune: measured tile configs per machine ---*- C++ -*-===//
#ifndef ATTNC_TOOLS_ATTNC_TUNE_H
#define ATTNC_TOOLS_ATTNC_TUNE_H

#include "dsl/AttnDialect.h"

#include "mlir/IR/BuiltinOps.h"

#include <iosfwd>
#include <string>

namespace attnc::driver {

struct TuneOptions {
  std::string spec, model;
  std::string target = "cpu";
  std::string db;       ///< tuning database; "" = the user's (TuningDb::defaultPath)
  double budget = 120;  ///< seconds of measuring per run (a rerun continues)
  int batch = 4;
  int repeats = 5;
  bool show = false;
  /// CPU: per-thread kernel workspace limit in KiB (0: none); configs over
  /// it are dropped before compiling.
  long long maxWorkspaceKib = 0;
  /// CUDA: the architecture whose limits apply, and a shared-memory limit
  /// in bytes overriding the arch's (0: the arch's).
  std::string arch = "sm_90";
  int smemLimit = 0;
  /// > 0: choose k (low-rank) or LSH rounds and chunk instead of tiles: the
  /// fastest whose relative output error against exact attention is at
  /// most this, on calibration inputs.
  double maxError = 0;
};

/// attnc tune: measures the CPU attention kernels' tile candidates for each
/// model of the spec, re-times the best few interleaved, and records the
/// choice in the tuning database. With --show, lists the database.
int runTune(const TuneOptions &options);

/// attnc tune --max-error for one model: times and measures the error of
/// each k (low-rank) or rounds x chunk (LSH) candidate, prints the
/// error-time frontier, compares with exact attention, and records the
/// choice. `budgetLeft` (seconds) is decreased by the time spent.
int tuneAccuracy(mlir::ModuleOp module, attn::ModelOp model, attn::VariantOp variant,
                 const TuneOptions &options, const std::string &dbPath,
                 const std::string &toolchain, double &budgetLeft);

/// Gives `variant` the tuned tile for a model shape from the tuning database
/// ($ATTNC_TUNING_DB or the user's), when the spec left its tile `auto` and
/// an entry exists for this CPU and toolchain; says which entry it used, or
/// that it fell back to the heuristic, on `log`.
void applyTunedCpuTile(attn::VariantOp variant, int64_t headDim, int64_t seq, int64_t heads,
                       std::ostream &log);

} // namespace attnc::driver

#endif // ATTNC_TOOLS_ATTNC_TUNE_H
