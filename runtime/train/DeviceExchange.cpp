//===- DeviceExchange.cpp - Moving gradients between device ranks ---------===//
#include "runtime/train/DeviceExchange.h"

#include "runtime/dist/Nccl.h"

namespace attnc::train {

namespace {

class HostStagedCollectives final : public DeviceCollectives {
public:
  HostStagedCollectives(KernelDevice &device, dist::Communicator &comm)
      : device_(device), comm_(comm) {}
  std::string describe() const override { return "MPI through host memory"; }

  bool enqueues() const override { return false; }
  Status allToAll(const float *send, float *recv, size_t count, void *,
                  const std::string &what) override {
    const size_t n = count * size_t(comm_.size());
    const std::vector<size_t> blocks(size_t(comm_.size()), count * sizeof(float));
    send_.resize(n), recv_.resize(n);
    if (Status s = device_.download(send_.data(), send, n * sizeof(float)); !s)
      return s;
    if (Status s = comm_.allToAll(send_.data(), blocks, recv_.data(), blocks, what); !s)
      return s;
    return device_.upload(recv, recv_.data(), n * sizeof(float));
  }

  Status allGather(const float *mine, float *all, size_t count, void *,
                   const std::string &what) override {
    send_.resize(count), recv_.resize(count * size_t(comm_.size()));
    if (Status s = device_.download(send_.data(), mine, count * sizeof(float)); !s)
      return s;
    if (Status s = comm_.allGather(send_.data(), count * sizeof(float), recv_.data(), what); !s)
      return s;
    return device_.upload(all, recv_.data(), recv_.size() * sizeof(float));
  }

private:
  KernelDevice &device_;
  dist::Communicator &comm_;
  std::vector<float> send_, recv_; ///< host staging, kept between calls
};

class DeviceCopyCollectives final : public DeviceCollectives {
public:
  explicit DeviceCopyCollectives(KernelDevice &device) : device_(device) {}
  std::string describe() const override { return "device copies (one process)"; }
  bool enqueues() const override { return true; }
  Status allToAll(const float *send, float *recv, size_t count, void *,
                  const std::string &) override {
    return device_.copy(recv, send, count * sizeof(float));
  }
  Status allGather(const float *mine, float *all, size_t count, void *,
                   const std::string &) override {
    return device_.copy(all, mine, count * sizeof(float));
  }

private:
  KernelDevice &device_;
};

class NcclCollectives final : public DeviceCollectives {
public:
  NcclCollectives(std::string version, std::unique_ptr<dist::NcclComm> comm)
      : version_(std::move(version)), comm_(std::move(comm)) {}
  std::string describe() const override { return "NCCL " + version_ + " on the GPUs"; }

  // Enqueued on the caller's stream behind the kernels that wrote `send`,
  // and the sum kernel behind them, with no host wait in between.
  bool enqueues() const override { return true; }
  Status allToAll(const float *send, float *recv, size_t count, void *stream,
                  const std::string &what) override {
    const std::vector<size_t> counts(size_t(comm_->size()), count);
    return named(comm_->allToAll(send, counts, recv, counts, stream), what);
  }
  Status allGather(const float *mine, float *all, size_t count, void *stream,
                   const std::string &what) override {
    return named(comm_->allGather(mine, all, count, stream), what);
  }

private:
  static Status named(Status s, const std::string &what) {
    return s ? std::move(s) : makeError(what + ": " + s.error());
  }
  std::string version_;
  std::unique_ptr<dist::NcclComm> comm_;
};

} // namespace

std::unique_ptr<DeviceCollectives> hostStagedCollectives(KernelDevice &device,
                                                         dist::Communicator &comm) {
  return std::make_unique<HostStagedCollectives>(device, comm);
}

std::unique_ptr<DeviceCollectives> deviceCopyCollectives(KernelDevice &device) {
  return std::make_unique<DeviceCopyCollectives>(device);
}

Expected<std::unique_ptr<DeviceCollectives>> ncclCollectives(dist::Communicator &comm) {
  Expected<const dist::NcclLibrary *> nccl = dist::loadNccl();
  if (!nccl)
    return nccl.takeError();
  Expected<std::unique_ptr<dist::NcclComm>> c = dist::NcclComm::create(**nccl, comm);
  if (!c)
    return c.takeError();
  return std::unique_ptr<DeviceCollectives>(
      new NcclCollectives((*nccl)->versionString(), std::move(*c)));
}

} // namespace attnc::train
