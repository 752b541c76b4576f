//===- FileSystem.h - Small file helpers for the runtime --------*- C++ -*-===//
//
// Reading whole files, atomic replacement (temporary file in the same
// directory, fsync, rename) and self-removing temporary directories, shared
// by the kernel cache and the host compiler.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_FILESYSTEM_H
#define ATTNC_RUNTIME_FILESYSTEM_H

#include "runtime/Error.h"

#include <string>
#include <vector>
#include <string_view>

namespace attnc::fs {

/// Reads all of `path` into `out`; returns 0 or the errno of the failure.
int readFileErrno(const std::string &path, std::string &out);
/// Reads all of `path`; the error names the file and the reason.
Expected<std::string> readFile(const std::string &path);

/// Replaces `path` with `bytes` atomically: readers see the old file or the
/// new one, never a mixture, and concurrent writers of the same path each
/// publish a complete file (the last rename wins). The temporary file is
/// named `<dir>/<tempPrefix>XXXXXX` and removed on every failure path.
/// `mode` applies to the published file.
Status writeFileAtomic(const std::string &path, std::string_view bytes,
                       const std::string &tempPrefix = ".tmp-", unsigned mode = 0644);

/// write(2) until done, retrying on EINTR and short writes.
bool writeAll(int fd, const char *p, size_t n);

/// The non-empty entries of a colon-separated list such as $PATH.
std::vector<std::string> splitPathList(const std::string &list);

/// mkdir -p; the error names the directory and the reason.
Status createDirectories(const std::string &path);

/// "$TMPDIR" when set and non-empty, else "/tmp".
std::string tempRoot();

/// attnc's one cache folder rule: $ATTNC_CACHE_DIR, else
/// $XDG_CACHE_HOME/attnc, else $HOME/.cache/attnc (the kernel cache lives
/// there, and the tuning database's tuning.json); empty when none is set.
std::string cacheFolder();

/// A fresh private directory (mkdtemp) removed with its contents when the
/// object dies, unless keep() was called.
class TempDir {
public:
  /// Creates `<parent>/<prefix>XXXXXX`; `parent` empty means tempRoot().
  static Expected<TempDir> create(const std::string &prefix, const std::string &parent = "");
  TempDir(TempDir &&other) noexcept;
  TempDir &operator=(TempDir &&other) noexcept;
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  ~TempDir();

  const std::string &path() const { return path_; }
  /// Leaves the directory in place (e.g. to show a failed compile's input).
  void keep() { keep_ = true; }

private:
  TempDir() = default;
  std::string path_;
  bool keep_ = false;
};

} // namespace attnc::fs

#endif // ATTNC_RUNTIME_FILESYSTEM_H
