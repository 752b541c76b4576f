//===- Tune.h - attnc tune: measured tile configs per machine ---*- C++ -*-===//
#ifndef ATTNC_DRIVER_TUNE_TUNE_H
#define ATTNC_DRIVER_TUNE_TUNE_H

#include "driver/Report.h"
#include "dialect/AttnDialect.h"

#include "mlir/IR/BuiltinOps.h"

#include "runtime/CpuAttention.h"
#include "runtime/train/Data.h"
#include "runtime/train/ModelConfig.h"
#include "runtime/tune/Measure.h"
#include "runtime/tune/TuningDb.h"

#include <functional>
#include <iosfwd>
#include <optional>
#include <vector>
#include <string>

namespace attnc::driver {

struct TuneOptions {
  std::string spec, model;
  std::string specText; ///< the spec's text (a Session's): then `spec` only names it
  std::string target = "cpu";
  std::string db;      ///< tuning database; "" = the user's (TuningDb::defaultPath)
  double budget = 120; ///< seconds of measuring per run (a rerun continues)
  int batch = 4;
  int repeats = 5;
  bool show = false;
  /// CPU: per-thread kernel workspace limit in KiB (0: none); configs over
  /// it are dropped before compiling.
  long long maxWorkspaceKib = 0;
  /// CUDA: the architecture whose limits apply, and a shared-memory limit
  /// in bytes overriding the arch's (0: the arch's).
  std::string arch; ///< empty: defaultCudaArch()
  int smemLimit = 0;
  /// > 0: choose k (low-rank) or LSH rounds and chunk instead of tiles: the
  /// fastest whose relative output error against exact attention is at
  /// most this, on calibration inputs.
  double maxError = 0;
  int jobs = 0; ///< host compilers in parallel; 0: one per CPU
  /// With --max-error on LSH: calibrate on layer 0's attention inputs of
  /// this trained run directory (attnc train --out) on --data.
  std::string checkpoint, data;
};

/// attnc tune: measures the CPU attention kernels' tile candidates for each
/// model of the spec, re-times the best few interleaved, and records the
/// choice in the tuning database. With --show, lists the database.
CommandResult runTune(const TuneOptions &options);

/// attnc tune --max-error for one model: times and measures the error of
/// each k (low-rank) or rounds x chunk (LSH) candidate, prints the
/// error-time frontier, compares with exact attention, and records the
/// choice. `budgetLeft` (seconds) is decreased by the time spent.
mlir::LogicalResult tuneAccuracy(mlir::ModuleOp module, attn::ModelOp model,
                                 attn::VariantOp variant, const TuneOptions &options,
                                 const std::string &dbPath, const std::string &toolchain,
                                 double &budgetLeft);

/// What `variant`'s attention takes besides q, k, v (for
/// tune::RandomAttentionInputs).
tune::AttentionExtras attentionExtras(attn::VariantOp variant);

using tune::chooseAmongFinalists;
using tune::Finalists;
using tune::RandomAttentionInputs;

/// One layer's compiled training step of a spec model (its compiled
/// attention, a synthetic batch), timed per FFN chunk.
class FfnBench {
public:
  FfnBench(attn::ModelOp model, int batch, int repeats);
  /// Compiles the attention; an exit code (errors printed).
  mlir::LogicalResult compile(mlir::ModuleOp module);
  const train::ModelConfig &config() const { return cfg_; }
  /// Median ms of forward + backward with `chunk` rows (0: all), or < 0
  /// when the step fails.
  double time(int chunk);

private:
  int batch_, repeats_;
  attn::ModelOp model_;
  mlir::ModuleOp module_;
  attn::VariantOp variant_;
  train::ModelConfig cfg_;
  std::optional<CpuAttention> attention_;
  train::Batch data_;
};

/// The database key of a model's FFN chunk.
tune::KernelKey ffnKey(const train::ModelConfig &config);

/// attnc tune for the FFN row chunk of one model whose spec left it `auto`
/// (chunking never changes the result): one layer's training step timed
/// per chunk, the interleaved final round, the choice in `db`.
mlir::LogicalResult tuneFfnChunk(mlir::ModuleOp module, attn::ModelOp model,
                                 const TuneOptions &options, const std::string &dbPath,
                                 const std::string &toolchain, double &budgetLeft);

/// attnc tune --target cuda: the forward tile space for --arch, compiled
/// with NVRTC on --jobs threads and filtered by ptxas's report, then timed
/// on the GPU when there is one (exit 2 when there is not).
CommandResult tuneCuda(mlir::ModuleOp module, const TuneOptions &options,
                       const std::string &dbPath);

/// attnc bench --tuned: every kernel of the spec's models that has a tuning
/// entry, timed with the heuristic config and with the tuned one
/// (interleaved, three rounds); a table, a CSV and an SVG bar chart.
mlir::LogicalResult compareTuned(const TuneOptions &options, const std::string &csvPath,
                                 const std::string &svgPath);

} // namespace attnc::driver

#endif // ATTNC_DRIVER_TUNE_TUNE_H
