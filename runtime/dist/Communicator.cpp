//===- Communicator.cpp - One process, or MPI's world ---------------------===//
#include "runtime/dist/Communicator.h"

#include "runtime/FileSystem.h"
#include "runtime/Sha256.h"

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

#ifdef ATTNC_HAVE_MPI
#include <mpi.h>
#endif

namespace attnc::dist {

namespace {

class SingleProcess final : public Communicator {
public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string describe() const override { return "one process"; }
  Status allGather(const void *mine, size_t bytes, void *all, const std::string &) override {
    if (bytes)
      std::memmove(all, mine, bytes);
    return {};
  }
  Status allToAll(const void *send, const std::vector<size_t> &sendBytes, void *recv,
                  const std::vector<size_t> &, const std::string &) override {
    if (sendBytes.at(0))
      std::memmove(recv, send, sendBytes[0]);
    return {};
  }
  Status allGatherV(const void *mine, void *all, const std::vector<size_t> &bytesOf,
                    const std::string &) override {
    if (bytesOf.at(0))
      std::memmove(all, mine, bytesOf[0]);
    return {};
  }
  [[noreturn]] void abort(const std::string &message, int code) override {
    std::cerr << message << "\n";
    std::exit(code);
  }
};

/// Whether a launcher (mpirun, srun) started this process as one rank of
/// several.
bool launchedAsRank() {
  for (const char *var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"})
    if (const char *v = std::getenv(var); v && *v)
      return true;
  return false;
}

#ifdef ATTNC_HAVE_MPI

std::string mpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, size_t(len));
}

class MpiWorld final : public Communicator {
public:
  explicit MpiWorld(bool serialized) : serialized_(serialized) {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    // Errors come back as codes, so a failed call names the exchange.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    library_ = mpiLibraryVersion();
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  bool callsFromAnyThread() const override { return serialized_; }
  std::string describe() const override {
    return "MPI (" + library_ + "), " + std::to_string(size_) + " ranks";
  }

  Status allGather(const void *mine, size_t bytes, void *all, const std::string &what) override {
    if (Status s = fitsInt(bytes, what); !s)
      return s;
    MPI_Request request = MPI_REQUEST_NULL;
    int rc = MPI_Iallgather(mine, int(bytes), MPI_BYTE, all, int(bytes), MPI_BYTE, MPI_COMM_WORLD,
                            &request);
    return wait(rc, request, "MPI_Iallgather", what);
  }

  Status allToAll(const void *send, const std::vector<size_t> &sendBytes, void *recv,
                  const std::vector<size_t> &recvBytes, const std::string &what) override {
    std::vector<int> sc, sd, rc, rd;
    if (Status s = countsAndOffsets(sendBytes, sc, sd, what); !s)
      return s;
    if (Status s = countsAndOffsets(recvBytes, rc, rd, what); !s)
      return s;
    MPI_Request request = MPI_REQUEST_NULL;
    int err = MPI_Ialltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(),
                             MPI_BYTE, MPI_COMM_WORLD, &request);
    return wait(err, request, "MPI_Ialltoallv", what);
  }

  Status allGatherV(const void *mine, void *all, const std::vector<size_t> &bytesOf,
                    const std::string &what) override {
    std::vector<int> counts, offsets;
    if (Status s = countsAndOffsets(bytesOf, counts, offsets, what); !s)
      return s;
    MPI_Request request = MPI_REQUEST_NULL;
    int err = MPI_Iallgatherv(mine, counts[size_t(rank_)], MPI_BYTE, all, counts.data(),
                              offsets.data(), MPI_BYTE, MPI_COMM_WORLD, &request);
    return wait(err, request, "MPI_Iallgatherv", what);
  }

  [[noreturn]] void abort(const std::string &message, int code) override {
    std::cerr << message << std::endl;
    MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code); // MPI_Abort does not return; this keeps [[noreturn]] honest
  }

private:
  static constexpr int kPingTag = 7301, kPongTag = 7302;

  static Status fitsInt(size_t bytes, const std::string &what) {
    if (bytes > size_t(INT32_MAX))
      return makeError(what + ": " + std::to_string(bytes) +
                       " bytes in one exchange; the caller buckets them below 2 GiB");
    return {};
  }
  /// MPI's int counts and displacements of blocks of `bytes` laid end to end.
  static Status countsAndOffsets(const std::vector<size_t> &bytes, std::vector<int> &counts,
                                 std::vector<int> &offsets, const std::string &what) {
    size_t at = 0;
    for (size_t b : bytes) {
      if (Status s = fitsInt(at + b, what); !s)
        return s;
      counts.push_back(int(b));
      offsets.push_back(int(at));
      at += b;
    }
    return {};
  }

  /// Waits for a started collective (`started`: its call's result) until
  /// it completes or the deadline passes. Polls with short sleeps: ranks
  /// often share cores (mpirun --oversubscribe), and a spinning waiter
  /// slows the rank it waits for. Rank 0 gives up first and names the
  /// missing ranks; the others wait longer, answering its roll call
  /// meanwhile.
  Status wait(int started, MPI_Request &request, const char *call, const std::string &what) {
    if (started != MPI_SUCCESS)
      return makeError("rank " + std::to_string(rank_) + ": " + what + ": " + call + ": " +
                       mpiError(started));
    using Clock = std::chrono::steady_clock;
    const double seconds = timeoutSeconds + (rank_ == 0 ? 0.0 : kRollCallSeconds + 5.0);
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    for (int done = 0;;) {
      if (int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE); rc != MPI_SUCCESS)
        return makeError("rank " + std::to_string(rank_) + ": " + what + ": " + mpiError(rc));
      if (done)
        return {};
      answerRollCall();
      if (Clock::now() > deadline)
        return timedOut(what);
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
  }
  static constexpr double kRollCallSeconds = 3;

  /// A waiting rank answers rank 0's roll call (sent when an exchange
  /// timed out there), so rank 0 can tell the waiting ranks from the dead
  /// or hung ones.
  void answerRollCall() {
    if (rank_ == 0)
      return;
    int pending = 0;
    MPI_Iprobe(0, kPingTag, MPI_COMM_WORLD, &pending, MPI_STATUS_IGNORE);
    if (!pending)
      return;
    int ping = 0, pong = rank_;
    MPI_Recv(&ping, 1, MPI_INT, 0, kPingTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(&pong, 1, MPI_INT, 0, kPongTag, MPI_COMM_WORLD);
  }

  Error timedOut(const std::string &what) {
    const std::string waited = std::to_string(int(timeoutSeconds)) + " s";
    if (rank_ != 0)
      return makeError("rank " + std::to_string(rank_) + ": " + what + " did not complete within " +
                       waited + ": another rank is dead or hung");
    // Roll call: the ranks that answer within kRollCallSeconds are waiting
    // in this exchange; the others never reached it.
    std::vector<MPI_Request> sent(size_t(size_), MPI_REQUEST_NULL),
        answers(size_t(size_), MPI_REQUEST_NULL);
    std::vector<int> ping(size_t(size_), 0), pong(size_t(size_), -1);
    for (int r = 1; r < size_; ++r) {
      MPI_Isend(&ping[size_t(r)], 1, MPI_INT, r, kPingTag, MPI_COMM_WORLD, &sent[size_t(r)]);
      MPI_Irecv(&pong[size_t(r)], 1, MPI_INT, r, kPongTag, MPI_COMM_WORLD, &answers[size_t(r)]);
    }
    std::vector<int> answered(size_t(size_), 0);
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::duration<double>(kRollCallSeconds);
    while (std::chrono::steady_clock::now() < until) {
      bool all = true;
      for (int r = 1; r < size_; ++r) {
        if (!answered[size_t(r)])
          MPI_Test(&answers[size_t(r)], &answered[size_t(r)], MPI_STATUS_IGNORE);
        all = all && answered[size_t(r)];
      }
      if (all)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    std::string missing;
    int count = 0;
    for (int r = 1; r < size_; ++r)
      if (!answered[size_t(r)]) {
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        ++count;
      }
    if (missing.empty())
      return makeError("rank 0: " + what + " did not complete within " + waited +
                       " although every rank is waiting in it (a network problem?)");
    return makeError(std::string(count == 1 ? "rank " : "ranks ") + missing + " did not reach " +
                     what + " within " + waited + ": dead or hung (--rank-timeout sets the wait)");
  }

  int rank_ = 0, size_ = 1;
  bool serialized_ = false;
  std::string library_;
};

#endif // ATTNC_HAVE_MPI

struct WorldState {
  std::unique_ptr<Communicator> comm;
  bool mpi = false;
};
WorldState &state() {
  static WorldState s;
  return s;
}

} // namespace

bool builtWithMpi() {
#ifdef ATTNC_HAVE_MPI
  return true;
#else
  return false;
#endif
}

std::string mpiLibraryVersion() {
#ifdef ATTNC_HAVE_MPI
  char version[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(version, &len);
  std::string v(version, size_t(len));
  if (size_t end = v.find_first_of("\n,"); end != std::string::npos)
    v.resize(end);
  return v;
#else
  return "";
#endif
}

std::unique_ptr<Communicator> singleProcess() { return std::make_unique<SingleProcess>(); }

Status initialize(int *argc, char ***argv) {
  WorldState &s = state();
  if (s.comm)
    return {};
  if (!launchedAsRank()) {
    s.comm = singleProcess();
    return {};
  }
#ifdef ATTNC_HAVE_MPI
  // Serialized: the gradient exchange runs on its own thread while the
  // backward runs, never two threads in MPI at once.
  int provided = 0;
  if (int rc = MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided); rc != MPI_SUCCESS)
    return makeError("MPI_Init failed: " + mpiError(rc));
  s.mpi = true;
  s.comm = std::make_unique<MpiWorld>(provided >= MPI_THREAD_SERIALIZED);
  return {};
#else
  (void)argc, (void)argv;
  s.comm = singleProcess();
  return makeError("started by mpirun, but this attnc was built without MPI; install "
                   "libopenmpi-dev (scripts/bootstrap.sh does) and rebuild");
#endif
}

void finalize() {
#ifdef ATTNC_HAVE_MPI
  if (state().mpi) {
    MPI_Finalize();
    state().mpi = false;
  }
#endif
}

Communicator &world() {
  WorldState &s = state();
  if (!s.comm)
    s.comm = singleProcess();
  return *s.comm;
}

Status checkRanksAgree(Communicator &comm, const std::vector<Setting> &settings) {
  if (comm.size() == 1)
    return {};
  // One text per rank, "name\tvalue\n" lines, gathered at a common length.
  std::string mine;
  for (const Setting &s : settings)
    mine += s.name + "\t" + s.value + "\n";
  uint64_t length = mine.size();
  std::vector<uint64_t> lengths(size_t(comm.size()));
  if (Status s = comm.allGather(&length, sizeof length, lengths.data(), "the start-up check"); !s)
    return s;
  uint64_t longest = 0;
  for (uint64_t l : lengths)
    longest = std::max(longest, l);
  mine.resize(longest, '\0');
  std::string all(longest * size_t(comm.size()), '\0');
  if (Status s = comm.allGather(mine.data(), longest, all.data(), "the start-up check"); !s)
    return s;
  auto parse = [&](int r) {
    std::vector<Setting> out;
    std::string text = all.substr(size_t(r) * longest, lengths[size_t(r)]);
    for (size_t at = 0; at < text.size();) {
      size_t tab = text.find('\t', at), nl = text.find('\n', at);
      if (tab == std::string::npos || nl == std::string::npos || tab > nl)
        break;
      out.push_back({text.substr(at, tab - at), text.substr(tab + 1, nl - tab - 1)});
      at = nl + 1;
    }
    return out;
  };
  const std::vector<Setting> root = parse(0);
  std::string differences;
  for (int r = 1; r < comm.size(); ++r) {
    const std::vector<Setting> other = parse(r);
    for (size_t i = 0; i < std::max(root.size(), other.size()); ++i) {
      const std::string name = i < root.size() ? root[i].name : other[i].name;
      const std::string a = i < root.size() ? root[i].value : "(none)";
      const std::string b = i < other.size() && other[i].name == name ? other[i].value : "(none)";
      if (a != b)
        differences +=
            "\n  rank " + std::to_string(r) + ": " + name + " is " + b + ", rank 0's is " + a;
    }
  }
  if (!differences.empty())
    return makeError("the ranks were started differently, so their training would diverge:" +
                     differences);
  return {};
}

std::string executableDigest() {
  Expected<std::string> bytes = fs::readFile("/proc/self/exe");
  return bytes ? Sha256::hexHash(*bytes) : std::string();
}

} // namespace attnc::dist
