//===- Communicator.h - The processes of a data-parallel run ---*- C++ -*-===//
//
// Data-parallel training (docs/distributed.md) runs one process
// per rank, launched by `mpirun -np N attnc train ...`. This is what the
// trainer needs of them: its rank and the rank count, an all-gather (the
// gradient exchange, bucketed by the caller) and an agreement check at
// start-up. MPI is the engine (OpenMPI from Debian); attnc writes no
// collective of its own.
//
// Every collective has a deadline: a rank that died or hangs leaves the
// others waiting, so after `timeoutSeconds` rank 0 calls the roll (every
// rank waiting in an exchange answers it), and the wait ends with an error
// naming the ranks that did not answer; the caller then aborts the job
// (abort(): MPI_Abort, which mpirun turns into every rank's end). The
// other ranks wait a few seconds longer, so rank 0 speaks first. A rank
// that dies outright is seen by mpirun itself, which ends the job.
//
// Without mpirun (or in a build without MPI) the world is one process and
// every collective is a copy.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_DIST_COMMUNICATOR_H
#define ATTNC_RUNTIME_DIST_COMMUNICATOR_H

#include "runtime/Error.h"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace attnc::dist {

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// "MPI (OpenMPI 4.1.4), 2 ranks" or "one process".
  virtual std::string describe() const = 0;
  /// Whether collectives may be called from a thread other than main's
  /// (one thread at a time): the exchange then overlaps the backward.
  virtual bool callsFromAnyThread() const { return true; }
  /// Every rank's `bytes` at `mine`, in rank order, into `all` (size() ·
  /// bytes). `what` names the exchange in a timeout's message ("step 12's
  /// gradients").
  virtual Status allGather(const void *mine, size_t bytes, void *all, const std::string &what) = 0;
  /// Personalised exchange: `send` holds size() blocks in rank order, block
  /// q (sendBytes[q] bytes) for rank q; `recv` receives size() blocks in
  /// rank order, block r (recvBytes[r] bytes) from rank r.
  virtual Status allToAll(const void *send, const std::vector<size_t> &sendBytes, void *recv,
                          const std::vector<size_t> &recvBytes, const std::string &what) = 0;
  /// allGather with a size per rank: rank r's `bytesOf[r]` bytes land in
  /// `all` after those of ranks 0 … r−1.
  virtual Status allGatherV(const void *mine, void *all, const std::vector<size_t> &bytesOf,
                            const std::string &what) = 0;
  /// Ends every rank of the job with exit code `code` after printing
  /// `message` (prefixed with this rank). Does not return.
  [[noreturn]] virtual void abort(const std::string &message, int code) = 0;
  /// How long a collective may wait for the slowest rank.
  double timeoutSeconds = 300;
};

/// The world this process belongs to: MPI's when it was started by mpirun
/// (or srun) and attnc was built with MPI, else one process. initialize()
/// must have run (first thing in main).
Communicator &world();

/// Starts MPI when the environment says a launcher started this process
/// (OMPI_COMM_WORLD_SIZE, PMIX_RANK, PMI_SIZE); a no-op otherwise. An
/// mpirun launch of a build without MPI is an error saying so. Call once,
/// before anything else, with main's arguments.
Status initialize(int *argc, char ***argv);
/// Shuts MPI down at a normal exit (after the last collective).
void finalize();
/// Whether this build has MPI (ATTNC_HAVE_MPI).
bool builtWithMpi();
/// The MPI library's version line ("Open MPI v4.1.4, ..."), or "" without
/// MPI. Callable before initialize().
std::string mpiLibraryVersion();

/// A communicator whose collectives are copies: the world of one process.
std::unique_ptr<Communicator> singleProcess();

/// Named settings every rank must share, checked at start-up: each rank's
/// list is gathered and compared with rank 0's. The error (the same on every
/// rank) names each rank and setting that differs, with both values.
struct Setting {
  std::string name, value;
};
Status checkRanksAgree(Communicator &comm, const std::vector<Setting> &settings);

/// The SHA-256 of this process's executable (/proc/self/exe), so ranks
/// started from different binaries are told apart; "" if unreadable.
std::string executableDigest();

} // namespace attnc::dist

#endif // ATTNC_RUNTIME_DIST_COMMUNICATOR_H
