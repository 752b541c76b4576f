//===- Nccl.h - NCCL, loaded at run time, bootstrapped over MPI -*- C++ -*-===//
//
// GPU ranks exchange gradients through NCCL (docs/distributed.md),
// which attnc loads with dlopen, as it loads cuBLAS and NVRTC: a build
// needs no NCCL, and a machine without one trains on the CPU or one GPU.
// The library is looked for at $ATTNC_NCCL (a file, or a folder holding
// libnccl.so.2; lib/ and nvidia/nccl/lib/ below it are searched too, which
// is where the nvidia-nccl-cu13 wheel puts it), then the CUDA toolkit's
// library folder ($CUDA_HOME/lib64, /usr/local/cuda/lib64), then the
// loader's search.
//
// A communicator is bootstrapped through the launcher's world: rank 0 asks
// NCCL for a unique id and every rank receives it through one MPI
// all-gather, then joins (ncclCommInitRank) on the GPU that is current.
// Its collectives take device pointers and a CUDA stream; the exchange
// that keeps the sum order fixed is built from them (allToAll: grouped
// sends and receives; allGather) as DataParallelStep's host one is.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_DIST_NCCL_H
#define ATTNC_RUNTIME_DIST_NCCL_H

#include "runtime/dist/Communicator.h"

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace attnc::dist {

struct NcclApi; // the entry points, resolved from the library

/// One loaded NCCL library.
struct NcclLibrary {
  std::string path;   ///< as loaded
  std::string origin; ///< "$ATTNC_NCCL", "the CUDA toolkit", "the loader's search"
  int version = 0;    ///< ncclGetVersion: 22809 for 2.28.9
  std::shared_ptr<const NcclApi> api;
  /// "2.28.9".
  std::string versionString() const;
};

/// Where loadNccl looks, in order: (path, what the place is called).
///   1. $ATTNC_NCCL (a library, or a folder holding libnccl.so.2, lib/ or
///      nvidia/nccl/lib/); when set, nothing else;
///   2. a libnccl.so.2 this process has loaded already (PyTorch's);
///   3. $CUDA_HOME/lib64, then /usr/local/cuda/lib64;
///   4. the dynamic loader's search (LD_LIBRARY_PATH, ldconfig);
///   5. the nvidia-nccl wheel of a Python environment: $VIRTUAL_ENV,
///      $CONDA_PREFIX, then that of the first python3 on PATH
///      (PREFIX/lib/python3.*/{site,dist}-packages/nvidia/nccl/lib).
std::vector<std::pair<std::string, std::string>> ncclCandidates();

/// Loads NCCL (once per process; later calls return the same library or
/// error) from the first of ncclCandidates() that loads. The error lists
/// every place looked at and why each failed.
Expected<const NcclLibrary *> loadNccl();

/// NCCL's unique id, opaque (NCCL_UNIQUE_ID_BYTES).
struct NcclUniqueId {
  char bytes[128];
};
/// A fresh unique id from `nccl` (what rank 0 does). It opens NCCL's
/// bootstrap socket; no GPU is needed.
Expected<NcclUniqueId> ncclUniqueId(const NcclLibrary &nccl);

/// A communicator of every rank of `world`, each on its current GPU.
/// Collectives are enqueued on `stream` (a CUstream; null: the default
/// stream) and return once enqueued; errors name the call and rank.
class NcclComm {
public:
  /// Rank 0's unique id reaches every rank through `world`'s all-gather;
  /// then every rank joins. Needs a current CUDA context on every rank.
  static Expected<std::unique_ptr<NcclComm>> create(const NcclLibrary &nccl, Communicator &world);
  ~NcclComm();
  NcclComm(const NcclComm &) = delete;
  NcclComm &operator=(const NcclComm &) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  /// fp32 `count` elements summed over the ranks into `recv` (NCCL's ring
  /// or tree: the order of the sum is NCCL's, not fixed).
  Status allReduceSum(const float *send, float *recv, size_t count, void *stream);
  /// Every rank's `count` floats at `send`, in rank order, into `recv`.
  Status allGather(const float *send, float *recv, size_t count, void *stream);
  /// Rank q's `counts[q]` floats from `send` (blocks in rank order) go to
  /// rank q, and rank r's block for this rank lands in `recv` after those
  /// of ranks below r (`recvCounts`): grouped sends and receives.
  Status allToAll(const float *send, const std::vector<size_t> &counts, float *recv,
                  const std::vector<size_t> &recvCounts, void *stream);

private:
  NcclComm() = default;
  Status check(int result, const char *call) const;
  const NcclLibrary *nccl_ = nullptr;
  void *comm_ = nullptr; ///< ncclComm_t
  int rank_ = 0, size_ = 1;
};

/// The collectives on the GPUs of `world`'s ranks (each on
/// cuda::processDevice(): its local rank mod the count): NCCL loaded, a
/// communicator bootstrapped through `world`, then an all-reduce, an all-gather and an all-to-all
/// of device buffers checked against values computed on the host (exact in fp32). Returns a
/// one-line report ("NCCL 2.28.9: 2 ranks, all-reduce, all-gather and
/// all-to-all of 1 MiB correct, all-reduce 0.41 ms"); errors name what
/// failed. `attnc-rt info --collectives` runs it (under mpirun: every
/// rank), and the device script with one rank.
Expected<std::string> checkCollectives(Communicator &world);

} // namespace attnc::dist

#endif // ATTNC_RUNTIME_DIST_NCCL_H
