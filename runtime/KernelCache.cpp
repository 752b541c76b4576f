//===- KernelCache.cpp - On-disk cache of compiled kernels ----------------===//
#include "runtime/KernelCache.h"

#include "runtime/FileSystem.h"
#include "runtime/Version.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

namespace attnc {

namespace {

constexpr char kMagic[8] = {'A', 'T', 'T', 'N', 'C', 'K', 'C', '\0'};
constexpr const char *kTempPrefix = ".tmp-";
/// Entries above this size are treated as corrupt rather than read
/// (a shared object for one artifact is a few MiB).
constexpr uint64_t kMaxEntryBytes = uint64_t(1) << 31;

void putU32(std::string &out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out.push_back(char(v >> (8 * i)));
}
void putU64(std::string &out, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out.push_back(char(v >> (8 * i)));
}
uint32_t getU32(const char *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= uint32_t(uint8_t(p[i])) << (8 * i);
  return v;
}
uint64_t getU64(const char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= uint64_t(uint8_t(p[i])) << (8 * i);
  return v;
}

const char *envOrNull(const char *name) {
  const char *v = std::getenv(name);
  return v && *v ? v : nullptr;
}

} // namespace

//===----------------------------------------------------------------------===//
// CacheKey
//===----------------------------------------------------------------------===//

CacheKey::CacheKey(std::string kind) : kind_(std::move(kind)) {
  add("kind", kind_);
  add("attnc", attncVersion());
  add("format", std::to_string(KernelCache::kEntryFormatVersion));
}

CacheKey &CacheKey::add(std::string_view field, std::string_view value) {
  std::string head;
  head.push_back('F');
  putU64(head, field.size());
  head.append(field);
  putU64(head, value.size());
  hasher_.update(head);
  hasher_.update(value);
  return *this;
}

CacheKey &CacheKey::addList(std::string_view field, const std::vector<std::string> &values) {
  add(field, "list:" + std::to_string(values.size()));
  for (const std::string &v : values)
    add("item", v);
  return *this;
}

CacheKey &CacheKey::addSortedList(std::string_view field, std::vector<std::string> values) {
  std::sort(values.begin(), values.end());
  return addList(field, values);
}

namespace {

/// Files a preprocessor may plausibly #include: the usual header suffixes,
/// CUDA sources, and extensionless names (<vector>-style).
bool mayBeIncluded(const std::filesystem::path &p) {
  static const char *const kExts[] = {".h",   ".hh",  ".hpp", ".hxx", ".cuh", ".cu",
                                      ".inc", ".inl", ".ipp", ".def", ".tcc"};
  std::string ext = p.extension().string();
  if (ext.empty())
    return true;
  for (const char *e : kExts)
    if (ext == e)
      return true;
  return false;
}

/// Content is hashed up to this much per tree; past it, files are
/// fingerprinted by size and modification time (still catches edits).
constexpr uintmax_t kMaxHashedTreeBytes = 32u << 20;
constexpr uintmax_t kMaxHashedFileBytes = 1u << 20;

} // namespace

CacheKey &CacheKey::addDirectoryTree(std::string_view field, const std::string &dir) {
  namespace sfs = std::filesystem;
  std::error_code ec;
  if (!sfs::is_directory(dir, ec)) {
    add(field, "missing:" + dir);
    return *this;
  }
  std::vector<std::string> files;
  sfs::recursive_directory_iterator it(dir, sfs::directory_options::skip_permission_denied, ec),
      end;
  for (; !ec && it != end; it.increment(ec)) {
    const sfs::path &p = it->path();
    std::string name = p.filename().string();
    bool isDir = it->is_directory(ec);
    // Skip .git, editor droppings and CMake build trees (a source root
    // passed as an include directory must not cost a scan of its builds).
    if ((!name.empty() && name[0] == '.') || (isDir && sfs::exists(p / "CMakeCache.txt", ec))) {
      if (isDir)
        it.disable_recursion_pending();
      continue;
    }
    if (!isDir && it->is_regular_file(ec) && mayBeIncluded(p))
      files.push_back(sfs::relative(p, dir, ec).string());
  }
  std::sort(files.begin(), files.end());
  add(field, "tree:" + std::to_string(files.size()));
  uintmax_t hashed = 0;
  for (const std::string &rel : files) {
    std::string path = dir + "/" + rel;
    add("path", rel);
    uintmax_t size = sfs::file_size(path, ec);
    if (!ec && size <= kMaxHashedFileBytes && hashed + size <= kMaxHashedTreeBytes) {
      std::string bytes;
      // An unreadable file still changes the key through its error code.
      int err = fs::readFileErrno(path, bytes);
      add("data", err ? "unreadable:" + std::to_string(err) : bytes);
      hashed += size;
      continue;
    }
    auto mtime = sfs::last_write_time(path, ec).time_since_epoch().count();
    add("stat", std::to_string(size) + ":" + std::to_string(mtime));
  }
  return *this;
}

Sha256::Digest CacheKey::digest() const {
  Sha256 copy = hasher_;
  return copy.finish();
}

//===----------------------------------------------------------------------===//
// Entry encoding
//===----------------------------------------------------------------------===//

std::string KernelCache::encodeEntry(const Sha256::Digest &key, std::string_view payload) {
  std::string out;
  out.reserve(kHeaderBytes + payload.size());
  out.append(kMagic, sizeof(kMagic));
  putU32(out, kEntryFormatVersion);
  putU32(out, 0);
  putU64(out, payload.size());
  Sha256::Digest sum = Sha256::hash(payload);
  out.append(reinterpret_cast<const char *>(sum.data()), sum.size());
  out.append(reinterpret_cast<const char *>(key.data()), key.size());
  out.append(payload);
  return out;
}

Expected<std::string> KernelCache::decodeEntry(const Sha256::Digest &key, std::string_view bytes) {
  if (bytes.size() < kHeaderBytes)
    return makeError("truncated: " + std::to_string(bytes.size()) + " bytes, shorter than the " +
                     std::to_string(kHeaderBytes) + "-byte header");
  const char *p = bytes.data();
  if (std::memcmp(p, kMagic, sizeof(kMagic)) != 0)
    return makeError("not an attnc cache entry (bad magic)");
  uint32_t version = getU32(p + 8);
  if (version != kEntryFormatVersion)
    return makeError("entry format version " + std::to_string(version) +
                     ", this attnc reads version " + std::to_string(kEntryFormatVersion));
  if (std::memcmp(p + 56, key.data(), key.size()) != 0)
    return makeError("entry belongs to another key (foreign or renamed file)");
  uint64_t length = getU64(p + 16);
  uint64_t have = bytes.size() - kHeaderBytes;
  if (length != have)
    return makeError("header says " + std::to_string(length) + " payload bytes, file has " +
                     std::to_string(have) + (have < length ? " (truncated)" : " (trailing bytes)"));
  std::string_view payload = bytes.substr(kHeaderBytes);
  Sha256::Digest sum = Sha256::hash(payload);
  if (std::memcmp(p + 24, sum.data(), sum.size()) != 0)
    return makeError("payload checksum mismatch (corrupted)");
  return std::string(payload);
}

std::string KernelCache::packBlobs(const std::vector<std::string_view> &blobs) {
  std::string out;
  putU64(out, blobs.size());
  for (std::string_view b : blobs) {
    putU64(out, b.size());
    out.append(b);
  }
  return out;
}

Expected<std::vector<std::string>> KernelCache::unpackBlobs(std::string_view payload,
                                                            size_t count) {
  auto bad = [] { return makeError("malformed payload"); };
  if (payload.size() < 8 || getU64(payload.data()) != count)
    return bad();
  std::vector<std::string> out;
  size_t pos = 8;
  for (size_t i = 0; i < count; ++i) {
    if (payload.size() - pos < 8)
      return bad();
    uint64_t n = getU64(payload.data() + pos);
    pos += 8;
    if (payload.size() - pos < n)
      return bad();
    out.emplace_back(payload.substr(pos, n));
    pos += n;
  }
  if (pos != payload.size())
    return bad();
  return out;
}

//===----------------------------------------------------------------------===//
// KernelCache
//===----------------------------------------------------------------------===//

std::string KernelCache::defaultDirectory() { return fs::cacheFolder(); }

KernelCache &KernelCache::processDefault() {
  static KernelCache cache([] {
    const char *off = envOrNull("ATTNC_NO_CACHE");
    return off && std::string(off) != "0" ? std::string() : defaultDirectory();
  }());
  return cache;
}

KernelCache::KernelCache(std::string dir, WarningHandler warn)
    : dir_(std::move(dir)), warn_(std::move(warn)), enabled_(!dir_.empty()), writable_(enabled_) {
  while (dir_.size() > 1 && dir_.back() == '/')
    dir_.pop_back();
}

bool KernelCache::enabled() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return enabled_;
}

bool KernelCache::writable() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return enabled_ && writable_;
}

std::string KernelCache::entryPath(const CacheKey &key) const {
  return dir_ + "/" + key.hex() + "." + key.kind();
}

void KernelCache::setWarningHandler(WarningHandler warn) {
  std::lock_guard<std::mutex> lock(mutex_);
  warn_ = std::move(warn);
}

KernelCache::Stats KernelCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void KernelCache::warn(const std::string &message) {
  WarningHandler w;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    w = warn_;
  }
  if (w)
    w(message);
}

void KernelCache::degrade(const std::string &why, bool readsToo) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    bool warned = !enabled_ || !writable_; // One warning per cache, ever.
    writable_ = false;
    if (readsToo)
      enabled_ = false;
    if (warned)
      return;
  }
  warn(readsToo ? "kernel cache disabled: " + why + "; compiling without a cache"
                : "kernel cache is read-only: " + why + "; new kernels will not be cached");
}

std::optional<std::string> KernelCache::lookup(const CacheKey &key) {
  if (!enabled())
    return std::nullopt;
  std::string path = entryPath(key);
  std::string bytes;
  int err = fs::readFileErrno(path, bytes);
  auto miss = [&] {
    std::lock_guard<std::mutex> lock(mutex_);
    ++stats_.misses;
    return std::nullopt;
  };
  if (err == ENOENT || err == ENOTDIR)
    return miss();
  if (err) {
    degrade("cannot read '" + path + "': " + std::strerror(err), /*readsToo=*/true);
    return miss();
  }
  Expected<std::string> payload = bytes.size() > kMaxEntryBytes
                                      ? Expected<std::string>(makeError("implausibly large entry"))
                                      : decodeEntry(key.digest(), bytes);
  if (!payload) {
    // Never load a damaged entry: drop it so the recompiled one replaces it.
    std::string msg = "ignoring bad kernel cache entry '" + path + "': " + payload.error();
    if (::unlink(path.c_str()) != 0 && errno != ENOENT)
      msg += std::string(" (and could not delete it: ") + std::strerror(errno) + ")";
    else
      msg += "; deleted, recompiling";
    warn(msg);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.corrupt;
    }
    return miss();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.hits;
  return std::move(*payload);
}

void KernelCache::store(const CacheKey &key, std::string_view payload) {
  bool prepare;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!enabled_ || !writable_)
      return;
    prepare = !dirReady_;
  }
  if (prepare) {
    if (Status s = fs::createDirectories(dir_); !s) {
      degrade(s.error(), /*readsToo=*/true); // No directory, nothing to read.
      return;
    }
    removeStaleTempFiles();
    std::lock_guard<std::mutex> lock(mutex_);
    dirReady_ = true;
  }
  // The key in the temp name only helps a person reading the directory.
  std::string prefix = std::string(kTempPrefix) + key.hex().substr(0, 16) + "-";
  Status s = fs::writeFileAtomic(entryPath(key), encodeEntry(key.digest(), payload), prefix);
  if (!s) {
    // A read-only cache (e.g. one prepared for a cluster) still serves hits.
    degrade(s.error(), /*readsToo=*/false);
    return;
  }
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.stores;
}

void KernelCache::removeStaleTempFiles() {
  DIR *d = ::opendir(dir_.c_str());
  if (!d)
    return;
  // Old enough that no live writer can still own it (a write takes
  // milliseconds; an hour covers a stopped process being resumed).
  const time_t cutoff = ::time(nullptr) - 3600;
  while (struct dirent *e = ::readdir(d)) {
    if (std::strncmp(e->d_name, kTempPrefix, std::strlen(kTempPrefix)) != 0)
      continue;
    std::string path = dir_ + "/" + e->d_name;
    struct stat st;
    if (::lstat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_mtime < cutoff)
      ::unlink(path.c_str());
  }
  ::closedir(d);
}

} // namespace attnc
