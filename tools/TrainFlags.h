//===- TrainFlags.h - The training-setting flags attnc and attnc-rt share -*- C++ -*-===//
//
// --lr, --warmup, --weight-decay, --clip, --steps and --eval-every, bound
// to optional settings, and the flags that slice and continue a run: a flag that is not given
// leaves its setting to the model's train block, then to attnc's default (runtime/train/
// TrainSettings.h), so the help says so instead of printing a default.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_TOOLS_TRAINFLAGS_H
#define ATTNC_TOOLS_TRAINFLAGS_H

#include "runtime/dist/Communicator.h"
#include "runtime/train/TrainSettings.h"

#include <CLI/CLI.hpp>

#include <functional>
#include <iostream>
#include <sstream>
#include <string>

namespace attnc::tools {

inline void addTrainSettingFlags(CLI::App *cmd, train::TrainSettings &flags) {
  const train::TrainSettings d = train::defaultTrainSettings();
  auto help = [](const char *what, double fallback) {
    std::ostringstream os;
    os << what << " (default: the model's train block, else " << fallback << ")";
    return os.str();
  };
  cmd->add_option("--steps", flags.steps,
                  help("optimizer steps in all (a resumed run continues)", double(*d.steps)))
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  // Flags take any positive rate (tests drive runs into NaN on purpose);
  // the spec's train block keeps to (0, 1].
  cmd->add_option("--lr", flags.lr, help("peak learning rate (AdamW)", *d.lr))
      ->check(CLI::PositiveNumber);
  cmd->add_option("--warmup", flags.warmup,
                  help("linear warm-up steps, then cosine decay to 10 %", double(*d.warmup)))
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--weight-decay", flags.weightDecay, help("AdamW weight decay", *d.weightDecay))
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--clip", flags.clip, help("clip the global gradient norm (0: off)", *d.clip))
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--eval-every", flags.evalEvery,
                  help("evaluate every N steps (0: at the end)", double(*d.evalEvery)))
      ->check(CLI::NonNegativeNumber);
}

/// --checkpoint-every, --no-resume and --stop-after: how a run is sliced
/// and continued.
inline void addRunFlags(CLI::App *cmd, int64_t &checkpointEvery, bool &resume, int64_t &stopAfter,
                        std::string &initFrom) {
  cmd->add_option("--init-from", initFrom,
                  "start a fresh run from another run's weights (its newest intact checkpoint), "
                  "for the parameters whose names and shapes match; the others keep their "
                  "initialisation (no optimizer state)");
  cmd->add_option("--checkpoint-every", checkpointEvery,
                  "checkpoint every N steps (and at the end)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_flag("!--no-resume", resume, "start from scratch even if --out has a checkpoint");
  cmd->add_option("--stop-after", stopAfter,
                  "stop after this many steps of this invocation, with a checkpoint "
                  "(train in slices; the schedule still spans --steps)")
      ->check(CLI::PositiveNumber);
}

/// --micro-batches, --rank-timeout, --bucket-kib and --no-overlap:
/// data-parallel training under mpirun (docs/distributed.md).
inline void addDataParallelFlags(CLI::App *cmd, train::DataParallelFlags &flags) {
  cmd->add_option("--micro-batches", flags.microBatches,
                  "split each step's batch into this many micro-batches, spread over the "
                  "ranks of `mpirun -np N` in order and summed in that order, so any N that "
                  "divides it gives the same result bit for bit (default: one per rank)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--rank-timeout", flags.rankTimeout,
                  "under mpirun: seconds a gradient exchange waits for the slowest rank before "
                  "the job ends, naming the ranks that did not arrive")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--bucket-kib", flags.bucketKiB,
                  "under mpirun: KiB of gradient per exchange bucket; a bucket is sent as soon "
                  "as the backward has finished its gradients (the result does not depend on it)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->add_flag("!--no-overlap", flags.overlap,
                "under mpirun: exchange the gradients after the backward instead of during it "
                "(same result; to measure what the overlap saves)");
}

/// Runs `command` (a training command; its exit code) as this process's
/// rank. Under mpirun, ranks other than 0 keep their output to themselves
/// (it would repeat rank 0's), and a failure on any rank prints that
/// rank's error and ends the whole job (dist::Communicator::abort), so no
/// rank waits for one that has gone.
inline int runAsRank(const std::function<int()> &command) {
  dist::Communicator &world = dist::world();
  if (world.size() == 1) {
    const int rc = command();
    dist::finalize();
    return rc;
  }
  std::ostringstream quiet;
  std::streambuf *out = std::cout.rdbuf(), *err = std::cerr.rdbuf();
  if (world.rank() != 0) {
    std::cout.rdbuf(quiet.rdbuf());
    std::cerr.rdbuf(quiet.rdbuf());
  }
  const int rc = command();
  std::cout.rdbuf(out);
  std::cerr.rdbuf(err);
  if (rc != 0) {
    std::string said = quiet.str();
    while (!said.empty() && said.back() == '\n')
      said.pop_back();
    const size_t line = said.rfind('\n');
    world.abort(world.rank() == 0 ? "rank 0 failed; ending the job"
                                  : "rank " + std::to_string(world.rank()) + ": " +
                                        (line == std::string::npos ? said : said.substr(line + 1)),
                rc);
  }
  dist::finalize();
  return rc;
}

} // namespace attnc::tools

#endif // ATTNC_TOOLS_TRAINFLAGS_H
