//===- Nccl.cpp - NCCL, loaded at run time, bootstrapped over MPI ---------===//
#include "runtime/dist/Nccl.h"

#include "runtime/CudaDriver.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <mutex>

namespace attnc::dist {

// NCCL's C API as nccl.h declares it (2.x; stable since 2.0), restated so a
// build needs no NCCL: the enums are ints, a communicator and a stream are
// pointers, the unique id is passed by value. test/unit/runtime/dist/NcclTest.cpp checks
// these against the toolkit's nccl.h where it has one.
namespace nccl {
constexpr int kSuccess = 0;
constexpr int kFloat32 = 7; ///< ncclFloat32
constexpr int kSum = 0;     ///< ncclSum
} // namespace nccl

struct NcclApi {
  void *library = nullptr;
  int (*getVersion)(int *);
  int (*getUniqueId)(NcclUniqueId *);
  int (*commInitRank)(void **, int, NcclUniqueId, int);
  int (*commDestroy)(void *);
  int (*commAbort)(void *);
  const char *(*getErrorString)(int);
  int (*allReduce)(const void *, void *, size_t, int, int, void *, void *);
  int (*allGather)(const void *, void *, size_t, int, void *, void *);
  int (*send)(const void *, size_t, int, int, void *, void *);
  int (*recv)(void *, size_t, int, int, void *, void *);
  int (*groupStart)();
  int (*groupEnd)();
};

std::string NcclLibrary::versionString() const {
  // NCCL_VERSION(X, Y, Z): X·10000 + Y·100 + Z since 2.9 (X·1000 + Y·100 + Z before).
  const int major = version >= 10000 ? version / 10000 : version / 1000;
  const int minor = version >= 10000 ? version / 100 % 100 : version / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(version % 100);
}

namespace {

/// dlopens `path` and resolves the entry points; the error says why not.
Expected<NcclLibrary> open(const std::string &path, const std::string &origin) {
  void *lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = ::dlerror();
    return makeError(path + ": " + (why ? why : "dlopen failed"));
  }
  auto api = std::make_shared<NcclApi>();
  api->library = lib;
  std::string missing;
  auto resolve = [&](auto &fn, const char *name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(lib, name));
    if (!fn)
      missing += std::string(missing.empty() ? "" : ", ") + name;
  };
  resolve(api->getVersion, "ncclGetVersion");
  resolve(api->getUniqueId, "ncclGetUniqueId");
  resolve(api->commInitRank, "ncclCommInitRank");
  resolve(api->commDestroy, "ncclCommDestroy");
  resolve(api->commAbort, "ncclCommAbort");
  resolve(api->getErrorString, "ncclGetErrorString");
  resolve(api->allReduce, "ncclAllReduce");
  resolve(api->allGather, "ncclAllGather");
  resolve(api->send, "ncclSend");
  resolve(api->recv, "ncclRecv");
  resolve(api->groupStart, "ncclGroupStart");
  resolve(api->groupEnd, "ncclGroupEnd");
  if (!missing.empty()) {
    ::dlclose(lib);
    return makeError(path + " lacks " + missing + " (attnc needs NCCL 2.7 or newer)");
  }
  NcclLibrary n;
  n.path = path, n.origin = origin;
  if (api->getVersion(&n.version) != nccl::kSuccess)
    return makeError(path + ": ncclGetVersion failed");
  if (n.version < 2700)
    return makeError(path + " is NCCL " + n.versionString() +
                     "; attnc needs 2.7 or newer (send and receive)");
  n.api = std::move(api);
  return n;
}

/// Python environments whose nvidia-nccl wheel may hold NCCL (PyPI's
/// NCCL lives only there on many machines): $VIRTUAL_ENV, $CONDA_PREFIX
/// and the environment of the first python3 on PATH (PATH's entry, not
/// its link target: a venv's bin/python3 links out of the venv).
std::vector<std::pair<std::string, std::string>> pythonPrefixes() {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, std::string>> out;
  for (const char *var : {"VIRTUAL_ENV", "CONDA_PREFIX"})
    if (const char *v = std::getenv(var); v && *v)
      out.push_back({v, std::string("$") + var});
  if (const char *path = std::getenv("PATH")) {
    std::string rest = path;
    for (size_t at = 0; at <= rest.size();) {
      size_t end = rest.find(':', at);
      if (end == std::string::npos)
        end = rest.size();
      const fs::path dir = rest.substr(at, end - at);
      std::error_code ec;
      if (!dir.empty() && fs::exists(dir / "python3", ec)) {
        out.push_back(
            {dir.parent_path().string(), (dir / "python3").string() + " (first on PATH)"});
        break;
      }
      at = end + 1;
    }
  }
  return out;
}

/// `prefix`/lib/python3.*/{site,dist}-packages/nvidia/nccl/lib/libnccl.so.2.
std::vector<std::string> ncclWheelsUnder(const std::string &prefix) {
  namespace fs = std::filesystem;
  std::vector<std::string> out;
  std::error_code ec;
  for (fs::directory_iterator it(fs::path(prefix) / "lib", ec), end; !ec && it != end;
       it.increment(ec)) {
    if (it->path().filename().string().rfind("python3", 0) != 0)
      continue;
    for (const char *packages : {"site-packages", "dist-packages"})
      if (fs::path f = it->path() / packages / "nvidia/nccl/lib/libnccl.so.2"; fs::exists(f, ec))
        out.push_back(f.string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

} // namespace

std::vector<std::pair<std::string, std::string>> ncclCandidates() {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, std::string>> out;
  if (const char *env = std::getenv("ATTNC_NCCL"); env && *env) {
    const fs::path p(env);
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (const char *sub : {"", "lib", "nvidia/nccl/lib"})
        if (fs::path f = p / sub / "libnccl.so.2"; fs::exists(f, ec))
          out.push_back({f.string(), "$ATTNC_NCCL"});
      if (out.empty())
        out.push_back({(p / "libnccl.so.2").string(), "$ATTNC_NCCL"});
    } else {
      out.push_back({p.string(), "$ATTNC_NCCL"});
    }
    return out; // a named library is the one wanted: no fallback
  }
  // A copy the process has loaded already (PyTorch's): two NCCLs in one
  // process would be two sets of communicators.
  if (void *loaded = ::dlopen("libnccl.so.2", RTLD_NOW | RTLD_NOLOAD)) {
    ::dlclose(loaded);
    out.push_back({"libnccl.so.2", "the copy this process has loaded"});
  }
  if (const char *home = std::getenv("CUDA_HOME"); home && *home)
    out.push_back({std::string(home) + "/lib64/libnccl.so.2", "the CUDA toolkit ($CUDA_HOME)"});
  out.push_back({"/usr/local/cuda/lib64/libnccl.so.2", "the CUDA toolkit"});
  out.push_back({"libnccl.so.2", "the loader's search"});
  for (const auto &[prefix, origin] : pythonPrefixes())
    for (const std::string &lib : ncclWheelsUnder(prefix))
      out.push_back({lib, "the nvidia-nccl wheel of " + origin});
  return out;
}

Expected<const NcclLibrary *> loadNccl() {
  static std::once_flag once;
  static Expected<NcclLibrary> loaded = makeError("");
  std::call_once(once, [] {
    std::string tried;
    for (const auto &[path, origin] : ncclCandidates()) {
      Expected<NcclLibrary> n = open(path, origin);
      if (n) {
        loaded = std::move(n);
        return;
      }
      tried += "\n  " + n.error();
    }
    loaded = makeError("NCCL not found (GPU ranks exchange gradients through it; set "
                       "ATTNC_NCCL to libnccl.so.2 or the folder of the nvidia-nccl-cu13 "
                       "wheel). Tried:" +
                       tried);
  });
  if (!loaded)
    return makeError(loaded.error());
  return &*loaded;
}

Expected<NcclUniqueId> ncclUniqueId(const NcclLibrary &nccl) {
  NcclUniqueId id{};
  if (int rc = nccl.api->getUniqueId(&id); rc != nccl::kSuccess)
    return makeError(std::string("ncclGetUniqueId failed: ") + nccl.api->getErrorString(rc));
  return id;
}

Expected<std::unique_ptr<NcclComm>> NcclComm::create(const NcclLibrary &nccl, Communicator &world) {
  // Rank 0's id, to every rank: an all-gather of everyone's (only rank 0's
  // is filled) is the broadcast the Communicator offers, with its deadline.
  NcclUniqueId mine{};
  if (world.rank() == 0) {
    Expected<NcclUniqueId> id = ncclUniqueId(nccl);
    if (!id)
      return id.takeError();
    mine = *id;
  }
  std::vector<NcclUniqueId> all(size_t(world.size()));
  if (Status s = world.allGather(&mine, sizeof mine, all.data(), "NCCL's unique id"); !s)
    return s.takeError();
  std::unique_ptr<NcclComm> c(new NcclComm());
  c->nccl_ = &nccl;
  c->rank_ = world.rank(), c->size_ = world.size();
  if (Status s = c->check(nccl.api->commInitRank(&c->comm_, c->size_, all[0], c->rank_),
                          "ncclCommInitRank");
      !s)
    return s.takeError();
  return c;
}

NcclComm::~NcclComm() {
  if (comm_)
    nccl_->api->commDestroy(comm_);
}

Status NcclComm::check(int result, const char *call) const {
  if (result == nccl::kSuccess)
    return {};
  return makeError(std::string(call) + " failed on rank " + std::to_string(rank_) + " of " +
                   std::to_string(size_) + ": " + nccl_->api->getErrorString(result) + " (NCCL " +
                   nccl_->versionString() + ", " + nccl_->path + ")");
}

Status NcclComm::allReduceSum(const float *send, float *recv, size_t count, void *stream) {
  return check(nccl_->api->allReduce(send, recv, count, nccl::kFloat32, nccl::kSum, comm_, stream),
               "ncclAllReduce");
}

Status NcclComm::allGather(const float *send, float *recv, size_t count, void *stream) {
  return check(nccl_->api->allGather(send, recv, count, nccl::kFloat32, comm_, stream),
               "ncclAllGather");
}

Status NcclComm::allToAll(const float *send, const std::vector<size_t> &counts, float *recv,
                          const std::vector<size_t> &recvCounts, void *stream) {
  if (counts.size() != size_t(size_) || recvCounts.size() != size_t(size_))
    return makeError("NCCL all-to-all: " + std::to_string(counts.size()) + " send and " +
                     std::to_string(recvCounts.size()) + " receive blocks for " +
                     std::to_string(size_) + " ranks");
  if (Status s = check(nccl_->api->groupStart(), "ncclGroupStart"); !s)
    return s;
  Status first;
  for (int q = 0; q < size_ && first; ++q) {
    if (counts[size_t(q)] > 0)
      first = check(nccl_->api->send(send, counts[size_t(q)], nccl::kFloat32, q, comm_, stream),
                    "ncclSend");
    if (first && recvCounts[size_t(q)] > 0)
      first = check(nccl_->api->recv(recv, recvCounts[size_t(q)], nccl::kFloat32, q, comm_, stream),
                    "ncclRecv");
    send += counts[size_t(q)], recv += recvCounts[size_t(q)];
  }
  // The group is closed even after an error, so NCCL's state stays sane.
  Status end = check(nccl_->api->groupEnd(), "ncclGroupEnd");
  return first ? std::move(end) : std::move(first);
}

Expected<std::string> checkCollectives(Communicator &world) {
  Expected<const NcclLibrary *> nccl = loadNccl();
  if (!nccl)
    return nccl.takeError();
  if (Status s = cuda::Driver::available(); !s)
    return makeError("no GPU: " + s.error());
  Expected<int> gpu = cuda::processDevice();
  if (!gpu)
    return makeError("no GPU: " + gpu.error());
  Expected<cuda::Context> ctx = cuda::Context::create(*gpu);
  if (!ctx)
    return ctx.takeError();
  Expected<cuda::ContextScope> scope = ctx->enter();
  if (!scope)
    return scope.takeError();
  Expected<std::unique_ptr<NcclComm>> comm = NcclComm::create(**nccl, world);
  if (!comm)
    return comm.takeError();
  const int ranks = world.size(), me = world.rank();
  const size_t n = size_t(1) << 18; // 1 MiB of fp32 per rank
  // Small integers (and halves): every sum is exact in fp32, whatever
  // order NCCL adds in.
  auto value = [](int rank, size_t i) { return float(int(i % 1024) - 512) * 0.5f + float(rank); };
  std::vector<float> mine(n), back(n * size_t(ranks));
  for (size_t i = 0; i < n; ++i)
    mine[i] = value(me, i);
  Expected<cuda::DeviceBuffer> src = cuda::DeviceBuffer::allocate(n * 4),
                               dst = cuda::DeviceBuffer::allocate(n * 4 * size_t(ranks));
  if (!src)
    return src.takeError();
  if (!dst)
    return dst.takeError();
  if (Status s = src->upload(mine.data(), n * 4); !s)
    return s.takeError();
  auto fetch = [&](size_t count) -> Status {
    if (Status s = ctx->synchronize(); !s)
      return s;
    return dst->download(back.data(), count * 4);
  };
  auto mismatch = [&](const char *what, size_t i, float got, float want) {
    return makeError(std::string("NCCL ") + what + " on rank " + std::to_string(me) + ": element " +
                     std::to_string(i) + " is " + std::to_string(got) + ", expected " +
                     std::to_string(want));
  };
  const auto t0 = std::chrono::steady_clock::now();
  if (Status s = (*comm)->allReduceSum(src->as<float>(), dst->as<float>(), n, nullptr); !s)
    return s.takeError();
  if (Status s = fetch(n); !s)
    return s.takeError();
  const double reduceMs =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  for (size_t i = 0; i < n; ++i) {
    float want = 0;
    for (int r = 0; r < ranks; ++r)
      want += value(r, i);
    if (back[i] != want)
      return mismatch("all-reduce", i, back[i], want);
  }
  if (Status s = (*comm)->allGather(src->as<float>(), dst->as<float>(), n, nullptr); !s)
    return s.takeError();
  if (Status s = fetch(n * size_t(ranks)); !s)
    return s.takeError();
  for (int r = 0; r < ranks; ++r)
    for (size_t i = 0; i < n; ++i)
      if (back[size_t(r) * n + i] != value(r, i))
        return mismatch("all-gather", size_t(r) * n + i, back[size_t(r) * n + i], value(r, i));
  // All-to-all: rank q gets block q of every rank's buffer (n / ranks each).
  const size_t block = n / size_t(ranks);
  const std::vector<size_t> counts(size_t(ranks), block);
  if (Status s = (*comm)->allToAll(src->as<float>(), counts, dst->as<float>(), counts, nullptr); !s)
    return s.takeError();
  if (Status s = fetch(block * size_t(ranks)); !s)
    return s.takeError();
  for (int r = 0; r < ranks; ++r)
    for (size_t i = 0; i < block; ++i) {
      const float want = value(r, size_t(me) * block + i);
      if (back[size_t(r) * block + i] != want)
        return mismatch("all-to-all", size_t(r) * block + i, back[size_t(r) * block + i], want);
    }
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.2f", reduceMs);
  return "NCCL " + (*nccl)->versionString() + ": " + std::to_string(ranks) + " rank" +
         (ranks == 1 ? "" : "s") +
         ", all-reduce, all-gather and all-to-all of 1 MiB correct, first all-reduce " + ms + " ms";
}

} // namespace attnc::dist
