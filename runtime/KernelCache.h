//===- KernelCache.h - On-disk cache of compiled kernels --------*- C++ -*-===//
//
// Compiled kernels (CUBINs from NVRTC, shared objects from the host
// compiler) are cached on disk so a second run of the same artifact starts in
// milliseconds. One file per entry, `<dir>/<key>.<kind>`, where `key` is the
// SHA-256 of everything that determines the compiler's output (see
// CacheKey) and `kind` says what the payload is ("cubin", "so").
//
// Entry format (all integers little-endian):
//
//   offset  size  field
//        0     8  magic "ATTNCKC\0"
//        8     4  format version (kEntryFormatVersion)
//       12     4  reserved, 0
//       16     8  payload length in bytes
//       24    32  SHA-256 of the payload
//       56    32  the entry's key (raw SHA-256), so a file copied or renamed
//                 under another key is recognised as foreign
//       88     -  payload
//
// Robustness rules:
// - Writes are atomic (temporary file in the cache directory, fsync,
//   rename), so concurrent writers of one key each publish a whole entry and
//   readers never see a partial one.
// - An entry that is truncated, corrupted, of another format version or
//   foreign is never used: a warning names the file, the file is deleted and
//   the caller recompiles (lookup() reports a miss).
// - A cache directory that cannot be created or read degrades the cache to
//   "no caching", one that cannot be written to "read-only" (existing
//   entries still hit), each with one warning; it never fails a compile.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_KERNELCACHE_H
#define ATTNC_RUNTIME_KERNELCACHE_H

#include "runtime/Error.h"
#include "runtime/Sha256.h"

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attnc {

/// Accumulates the inputs of a compile into a cache key. Every field is
/// hashed as (name, length, bytes), so different field lists never collide
/// by concatenation. The attnc version is always part of the key.
class CacheKey {
public:
  /// `kind` is part of the key and the entry's file suffix ("cubin", "so").
  explicit CacheKey(std::string kind);

  /// Adds one named field.
  CacheKey &add(std::string_view field, std::string_view value);
  /// Adds a list, in the given order (for order-sensitive lists such as
  /// include paths).
  CacheKey &addList(std::string_view field, const std::vector<std::string> &values);
  /// Adds a list sorted, so the key does not depend on the order of
  /// order-insensitive options.
  CacheKey &addSortedList(std::string_view field, std::vector<std::string> values);
  /// Adds every file under `dir` that a preprocessor may include (header
  /// suffixes, .cu, extensionless; recursively; relative paths in sorted
  /// order), so editing a header invalidates the kernels that may include
  /// it. Hidden entries and CMake build trees are skipped; past 32 MiB (or
  /// for files over 1 MiB) files are fingerprinted by size and mtime instead
  /// of content. A missing directory is hashed as missing. Headers reached
  /// outside the include directories (system and toolkit headers) are not
  /// hashed: the compiler's version stands for them.
  CacheKey &addDirectoryTree(std::string_view field, const std::string &dir);

  const std::string &kind() const { return kind_; }
  /// The digest as raw bytes and as 64 hex characters.
  Sha256::Digest digest() const;
  std::string hex() const { return Sha256::hex(digest()); }

private:
  std::string kind_;
  Sha256 hasher_;
};

class KernelCache {
public:
  /// The entry format version written into every entry's header.
  static constexpr uint32_t kEntryFormatVersion = 1;
  /// Size of the entry header in bytes.
  static constexpr size_t kHeaderBytes = 88;

  /// The directory the environment selects: `$ATTNC_CACHE_DIR`, else
  /// `$XDG_CACHE_HOME/attnc`, else `$HOME/.cache/attnc`; empty when none of
  /// them is set (no caching).
  static std::string defaultDirectory();

  /// The process-wide cache at defaultDirectory(), created on first use;
  /// disabled when `ATTNC_NO_CACHE` is set to anything but "" or "0".
  static KernelCache &processDefault();

  /// A cache in `dir`, created on demand by the first store(). An empty
  /// `dir` gives a disabled cache (every lookup misses, stores are dropped).
  explicit KernelCache(std::string dir, WarningHandler warn = printWarning);
  KernelCache(const KernelCache &) = delete;
  KernelCache &operator=(const KernelCache &) = delete;

  /// False when constructed without a directory or degraded after an I/O
  /// failure: lookups miss and stores are dropped.
  bool enabled() const;
  /// False when stores are dropped: enabled() is false or a write failed.
  bool writable() const;
  const std::string &directory() const { return dir_; }
  /// Where the entry for `key` lives (whether or not it exists).
  std::string entryPath(const CacheKey &key) const;
  void setWarningHandler(WarningHandler warn);

  /// The payload stored for `key`, or nullopt on a miss. A bad entry is
  /// reported through the warning handler, deleted and reported as a miss.
  std::optional<std::string> lookup(const CacheKey &key);
  /// Stores `payload` for `key` atomically. Failure is never an error: the
  /// first one warns, and stores are dropped for the rest of the cache's
  /// life (lookups continue unless the directory cannot be created).
  void store(const CacheKey &key, std::string_view payload);

  struct Stats {
    unsigned hits = 0, misses = 0, corrupt = 0, stores = 0;
  };
  Stats stats() const;

  /// Serialises an entry (header + payload) for the key digest `key`.
  static std::string encodeEntry(const Sha256::Digest &key, std::string_view payload);
  /// Validates an entry image and returns its payload, or an Error saying
  /// what is wrong with it (without the file name).
  static Expected<std::string> decodeEntry(const Sha256::Digest &key, std::string_view bytes);

  /// Packs several byte strings into one payload (count, then length-
  /// prefixed blobs), for entries that hold e.g. a CUBIN and its log.
  static std::string packBlobs(const std::vector<std::string_view> &blobs);
  /// Inverse of packBlobs; fails unless there are exactly `count` blobs.
  static Expected<std::vector<std::string>> unpackBlobs(std::string_view payload, size_t count);

private:
  void warn(const std::string &message);
  /// Stops stores (and lookups too if `readsToo`); warns once per cache.
  void degrade(const std::string &why, bool readsToo);
  /// Removes `.tmp-` files older than an hour left by crashed writers.
  void removeStaleTempFiles();

  std::string dir_;
  mutable std::mutex mutex_;
  WarningHandler warn_;
  bool enabled_;
  bool writable_;
  bool dirReady_ = false;
  Stats stats_;
};

} // namespace attnc

#endif // ATTNC_RUNTIME_KERNELCACHE_H
