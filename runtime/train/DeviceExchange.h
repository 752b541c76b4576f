//===- DeviceExchange.h - Moving gradients between device ranks -*- C++ -*-===//
//
// The two collectives the data-parallel exchange (DataParallel.h) is built
// from, on device buffers: a device-resident CUDA step of several ranks
// sends each rank its slice of every micro-batch's weighted gradient (an
// all-to-all), sums the slices in micro-batch order on the device
// (attnc_opt_ordered_sum) and hands every rank every sum (an all-gather).
// Three transports carry them:
//   - NCCL on the GPU (runtime/dist/Nccl.h), on the step's stream;
//   - the launcher's MPI world through host memory: each call downloads,
//     exchanges on the host and uploads. The emulated device (cuda-sim)
//     trains data-parallel through it, and a GPU without NCCL falls back to
//     it;
//   - device copies, for one process with several micro-batches.
// All move bytes only; the sums are the same kernel, so the transport
// changes no bit of the result. Every rank's block has the same size (the
// caller pads its buckets to a multiple of the rank count), which is what
// NCCL's all-gather takes.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TRAIN_DEVICEEXCHANGE_H
#define ATTNC_RUNTIME_TRAIN_DEVICEEXCHANGE_H

#include "runtime/Error.h"
#include "runtime/KernelDevice.h"
#include "runtime/dist/Communicator.h"

#include <memory>
#include <string>
#include <vector>

namespace attnc::train {

class DeviceCollectives {
public:
  virtual ~DeviceCollectives() = default;
  /// "NCCL 2.28.9 on the GPUs" or "MPI through host memory".
  virtual std::string describe() const = 0;
  /// Block q of `send` (`count` floats, blocks in rank order) goes to rank
  /// q; rank r's block for this rank lands at `recv` + r · count. Device
  /// pointers; `stream` the CUstream to enqueue on (null: the legacy
  /// default stream; the host-staged transport is synchronous on it).
  /// `what` names the exchange in errors.
  virtual Status allToAll(const float *send, float *recv, size_t count, void *stream,
                          const std::string &what) = 0;
  /// Rank r's `count` floats at `mine` land at `all` + r · count.
  virtual Status allGather(const float *mine, float *all, size_t count, void *stream,
                           const std::string &what) = 0;
  /// Whether the calls enqueue on `stream` without waiting (so they may
  /// overlap the step's own work): NCCL's do, the host-staged ones wait.
  virtual bool enqueues() const = 0;
};

/// Through `comm` on the host: downloads from and uploads to `device`
/// around each host collective (whose deadline then covers the ranks).
/// Both must outlive the object.
std::unique_ptr<DeviceCollectives> hostStagedCollectives(KernelDevice &device,
                                                         dist::Communicator &comm);

/// One process with several micro-batches: its blocks are its own, so
/// each call is a device copy (enqueued like the step's own copies).
std::unique_ptr<DeviceCollectives> deviceCopyCollectives(KernelDevice &device);

/// NCCL over `comm`'s ranks, each on the GPU whose context is current
/// (bootstrapped through `comm`). Errors: NCCL not found, no GPU, the
/// bootstrap.
Expected<std::unique_ptr<DeviceCollectives>> ncclCollectives(dist::Communicator &comm);

} // namespace attnc::train

#endif // ATTNC_RUNTIME_TRAIN_DEVICEEXCHANGE_H
