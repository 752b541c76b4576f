//===- FileSystem.cpp - Small file helpers for the runtime ----------------===//
#include "runtime/FileSystem.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

namespace attnc::fs {

namespace {

std::string errnoText(int err) { return std::strerror(err); }

std::string dirName(const std::string &path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

} // namespace

std::vector<std::string> splitPathList(const std::string &list) {
  std::vector<std::string> out;
  for (size_t start = 0; start <= list.size();) {
    size_t end = list.find(':', start);
    if (end == std::string::npos)
      end = list.size();
    if (end > start)
      out.push_back(list.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

bool writeAll(int fd, const char *p, size_t n) {
  while (n) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR)
      continue;
    if (w <= 0)
      return false;
    p += w;
    n -= size_t(w);
  }
  return true;
}

int readFileErrno(const std::string &path, std::string &out) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return errno;
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return err;
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return EISDIR;
  }
  out.clear();
  out.reserve(size_t(st.st_size));
  char buf[1 << 16];
  for (;;) {
    ssize_t r = ::read(fd, buf, sizeof(buf));
    if (r < 0 && errno == EINTR)
      continue;
    if (r < 0) {
      int err = errno;
      ::close(fd);
      return err;
    }
    if (r == 0)
      break;
    out.append(buf, size_t(r));
  }
  ::close(fd);
  return 0;
}

Expected<std::string> readFile(const std::string &path) {
  std::string out;
  if (int err = readFileErrno(path, out))
    return makeError("cannot read '" + path + "': " + errnoText(err));
  return out;
}

Status writeFileAtomic(const std::string &path, std::string_view bytes,
                       const std::string &tempPrefix, unsigned mode) {
  std::string dir = dirName(path);
  // Same directory as the target: rename(2) is only atomic within a file
  // system, and mkstemp's unique name keeps concurrent writers apart.
  std::string tmp = dir + "/" + tempPrefix + "XXXXXX";
  int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
  if (fd < 0)
    return makeError("cannot create a temporary file in '" + dir + "': " + errnoText(errno));
  auto fail = [&](const std::string &what) {
    int err = errno;
    ::close(fd);
    ::unlink(tmp.c_str());
    return makeError(what + " '" + tmp + "': " + errnoText(err));
  };
  if (!writeAll(fd, bytes.data(), bytes.size()))
    return fail("cannot write");
  if (::fchmod(fd, mode) != 0)
    return fail("cannot chmod");
  // Data must be on disk before the rename makes it visible, or a crash can
  // publish an empty or partial file under the final name.
  if (::fsync(fd) != 0)
    return fail("cannot fsync");
  if (::close(fd) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return makeError("cannot close '" + tmp + "': " + errnoText(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    return makeError("cannot rename '" + tmp + "' to '" + path + "': " + errnoText(err));
  }
  // Persist the directory entry too; best effort (some file systems refuse
  // fsync on directories, and the data itself is already safe).
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
  return {};
}

Status createDirectories(const std::string &path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec)
    return makeError("cannot create directory '" + path + "': " + ec.message());
  if (!std::filesystem::is_directory(path, ec))
    return makeError("'" + path + "' is not a directory");
  return {};
}

std::string tempRoot() {
  const char *t = std::getenv("TMPDIR");
  return t && *t ? std::string(t) : std::string("/tmp");
}

std::string cacheFolder() {
  auto env = [](const char *name) -> const char * {
    const char *v = std::getenv(name);
    return v && *v ? v : nullptr;
  };
  if (const char *d = env("ATTNC_CACHE_DIR"))
    return d;
  if (const char *x = env("XDG_CACHE_HOME"))
    return std::string(x) + "/attnc";
  if (const char *h = env("HOME"))
    return std::string(h) + "/.cache/attnc";
  return "";
}

Expected<TempDir> TempDir::create(const std::string &prefix, const std::string &parent) {
  std::string base = parent.empty() ? tempRoot() : parent;
  std::string tmpl = base + "/" + prefix + "XXXXXX";
  if (!::mkdtemp(tmpl.data()))
    return makeError("cannot create a temporary directory in '" + base + "': " + errnoText(errno));
  TempDir d;
  d.path_ = tmpl;
  return d;
}

TempDir::TempDir(TempDir &&other) noexcept : path_(std::move(other.path_)), keep_(other.keep_) {
  other.path_.clear();
}

TempDir &TempDir::operator=(TempDir &&other) noexcept {
  if (this != &other) {
    this->~TempDir();
    path_ = std::move(other.path_);
    keep_ = other.keep_;
    other.path_.clear();
  }
  return *this;
}

TempDir::~TempDir() {
  if (path_.empty() || keep_)
    return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

} // namespace attnc::fs
