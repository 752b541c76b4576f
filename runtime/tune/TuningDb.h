//===- TuningDb.h - Persistent database of `attnc tune` ---------*- C++ -*-===//
//
// `attnc tune` measures kernel configurations (tile sizes, warps, stages) on
// the machine at hand; `attnc compile` picks the measured best instead of a
// heuristic. The results live in a JSON file:
//
//   - the user database: $ATTNC_TUNING_DB, else `<cache>/tuning.json` where
//     `<cache>` is the kernel cache's directory ($ATTNC_CACHE_DIR, else
//     $XDG_CACHE_HOME/attnc, else $HOME/.cache/attnc) -- see defaultPath();
//   - an optional project-local override, `<dir>/attnc-tuning.json`
//     (projectPath()), consulted first (LayeredTuningDb).
//
// Keys. An entry is keyed by (device, toolchain, kernel signature, shape
// bucket):
//   device     DeviceKey::id(): kind, name, compute capability, SM count and
//              memory (MiB) for CUDA; name, ISA and logical CPU count for CPU;
//   toolchain  free text naming the compiler and runtime versions that
//              produced the measured code (toolchainId()); a different
//              toolchain is a miss, never a hit;
//   signature  what the kernel computes, e.g. "fwd f32 d64 causal pad
//              mod=<hash>";
//   bucket     shapeBucket(N, batch*heads), e.g. "n4096-bh32" (both rounded
//              up to a power of two).
//
// An entry holds the chosen configuration (empty until choose()/import) and
// every configuration measured for that key. Configurations are stored in
// canonical form (canonicalConfig(): "k=v" items, whitespace removed, sorted
// by key), so "w=4, bq=64" and "bq=64,w=4" are one configuration.
//
// Resuming and changed search spaces. The tuner records each measurement as
// it is taken (recordMeasurement(), optionally autosaving), so an
// interrupted run loses at most what was measured since the last save. A
// run -- resumed, or over a changed search space -- asks measured() before
// timing a configuration and reuses what is there. A configuration that
// failed (did not compile, exceeded shared memory, ...) is recorded with a
// non-empty Measurement::error so it is not retried either.
//
// Saving is atomic (fs::writeFileAtomic) and merge-safe: save() takes an
// advisory lock (flock on `<path>.lock`), re-reads the file and applies
// this object's changes since open() to what is there now, so entries that
// other processes wrote meanwhile survive. Keys this object did not change
// are written as the file has them (not from this object's possibly stale
// copy). For a key both sides changed:
//   - measurements: union by configuration; for a configuration measured on
//     both sides, the newer one (Measurement::at) wins;
//   - the choice (config, median, spread, pinned, updated): newest wins --
//     this object's choice replaces the file's when its `updated` is the
//     same or newer -- except that a choose() never replaces a pinned
//     choice (pin(), unpin() and importPinned() do, being explicit acts);
//     an entry without a choice never overrides one with a choice.
// Nothing is ever deleted by a save (there is no remove operation; delete
// the file, or edit it, to forget entries). The empty `<path>.lock` file
// stays next to the database; where it cannot be created (read-only
// directory) save() goes on unlocked.
//
// Pinned entries. importPinned() stores each imported entry as the chosen,
// pinned configuration of its key (updated = now): it replaces whatever was
// chosen locally for that device + toolchain + kernel + bucket, and a later
// choose() by a tuning run does not replace it (the measurement is still
// recorded). pin()/unpin() set the flag on a local choice. exportPinned()
// writes pinned entries (or every chosen entry) without their measurements,
// in the schema below, so several machines pick the same kernels. An
// imported entry only hits on a device with the same id() and the same
// toolchain.
//
// JSON schema (format_version 1). Unknown members are ignored on read; a
// missing or different format_version is an error.
//
//   {
//     "format_version": 1,
//     "entries": [
//       {
//         "device": {"kind": "cuda", "name": "NVIDIA H200",
//                    "cc_major": 9, "cc_minor": 0, "sm_count": 132,
//                    "memory_bytes": 150754820096,
//                    "logical_cpus": 0, "isa": ""},
//         "toolchain": "attnc 0.1.0; nvrtc 13.0",
//         "kernel": {"signature": "fwd f32 d64 causal pad mod=ab12",
//                    "shape_bucket": "n4096-bh32"},
//         "config": "bkv=64,bq=64,s=2,w=4",   // "" = nothing chosen yet
//         "median_ms": 0.412, "spread": 0.006,   // of the chosen config
//         "pinned": false,
//         "updated": "2025-06-01T12:34:56.789Z", // when it was chosen
//         "measured": [
//           {"config": "bkv=64,bq=64,s=2,w=4", "median_ms": 0.412,
//            "spread": 0.006, "repeats": 20,
//            "at": "2025-06-01T12:34:50.001Z",
//            "error": ""}                         // non-empty = failed
//         ]
//       }
//     ]
//   }
//
// Times are UTC ISO 8601 with milliseconds (string order is time order).
// `spread` is whatever dispersion the tuner reports (e.g. the interquartile
// range in ms); the database stores it as is. A non-finite median is
// written as null and read back as NaN. Export files have the same schema
// (with "measured" empty and "pinned" true).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_TUNE_TUNINGDB_H
#define ATTNC_RUNTIME_TUNE_TUNINGDB_H

#include "runtime/Error.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace attnc::cuda {
struct DeviceInfo;
} // namespace attnc::cuda

namespace attnc::tune {

/// The hardware a measurement was taken on.
struct DeviceKey {
  std::string kind;             ///< "cpu" or "cuda"
  std::string name;             ///< "NVIDIA H200", "AMD EPYC 9654 96-Core Processor"
  int ccMajor = 0, ccMinor = 0; ///< CUDA compute capability
  int smCount = 0;
  int64_t memoryBytes = 0; ///< device memory (CUDA)
  int logicalCpus = 0;     ///< CPU
  std::string isa;         ///< CPU: "avx512f", "avx2", "avx", "sse4.2", "sse2", "sve", "neon"

  /// The identity entries are keyed by:
  ///   "cuda:NVIDIA H200:sm_90:132sm:143771MiB"  (memory rounded down to MiB)
  ///   "cpu:AMD EPYC:avx2:2cpus"
  /// Other kinds list every field.
  std::string id() const;
};

/// This machine's CPU: /proc/cpuinfo's model name (or "unknown cpu"),
/// std::thread::hardware_concurrency() and the best ISA its flags list.
DeviceKey cpuDevice();
/// Same, from the text of a /proc/cpuinfo (x86 "model name"/"flags",
/// AArch64 "Features"/"CPU part") and a CPU count (0 = count "processor"
/// lines). Exposed for tests.
DeviceKey cpuDeviceFromCpuinfo(const std::string &cpuinfo, int logicalCpus);
/// A CUDA device, from cuda::queryDevice()'s answer.
DeviceKey cudaDevice(const cuda::DeviceInfo &info);

/// What was tuned: the kernel and the size class of its problem.
struct KernelKey {
  std::string signature;   ///< e.g. "fwd f32 d64 causal pad mod=<hash>"
  std::string shapeBucket; ///< shapeBucket(N, batch*heads)
};

/// "n<N'>-bh<BH'>" with N' and BH' the powers of two at or above `n` and
/// `batchHeads` (values below 1 count as 1, values above 2^62 as 2^62):
/// shapeBucket(3000, 12) ==
/// "n4096-bh16", shapeBucket(4096, 1) == "n4096-bh1".
std::string shapeBucket(int64_t n, int64_t batchHeads);

/// Canonical configuration text: comma-separated items with whitespace
/// removed, empty items dropped, sorted by key (the text before '='), e.g.
/// " w=4, bq=64 ,s=2" -> "bq=64,s=2,w=4".
std::string canonicalConfig(const std::string &config);

/// The toolchain string of entries: "attnc <version>; <kernelCompiler>",
/// where `kernelCompiler` names what compiles the kernels, e.g.
/// "nvrtc 13.0" or the first line of the host compiler's --version.
std::string toolchainId(const std::string &kernelCompiler);
/// This machine's toolchain ids: the host compiler's (CPU entries) and this
/// NVRTC's (CUDA entries).
std::string hostToolchain();
std::string nvrtcToolchain();

/// One timed configuration.
struct Measurement {
  std::string config; ///< canonical (canonicalConfig)
  double medianMs = 0;
  double spread = 0;
  int repeats = 0;
  std::string at;    ///< when measured (ISO UTC); set by recordMeasurement if empty
  std::string error; ///< non-empty: the config failed (medianMs meaningless)
  /// Accuracy-aware configs (k, LSH rounds): the relative error of the
  /// output against exact attention; negative when not measured.
  double relError = -1;

  bool failed() const { return !error.empty(); }
};

/// The state of one (device, toolchain, kernel, bucket) key.
struct Entry {
  DeviceKey device;
  KernelKey kernel;
  std::string toolchain;
  std::string config; ///< the chosen config; empty = none chosen yet
  double medianMs = 0, spread = 0;
  std::vector<Measurement> measured; ///< sorted by config
  bool pinned = false;
  std::string updated; ///< when `config` was chosen, pinned or imported

  bool chosen() const { return !config.empty(); }
  /// "fwd f32 d64 causal [n4096-bh32] -> bq=64,w=4 (0.412 ms, pinned)".
  std::string describe() const;
};

class TuningDb {
public:
  static constexpr int kFormatVersion = 1;

  /// An empty database not tied to a file (save() fails).
  TuningDb() = default;

  /// Loads `path`. A missing file is an empty database (created by the first
  /// save()); an unreadable file, invalid JSON, a missing or different
  /// format_version or a malformed entry is an Error naming the file and
  /// what is wrong.
  static Expected<TuningDb> open(const std::string &path);

  /// The user database: $ATTNC_TUNING_DB, else <kernel cache dir>/tuning.json
  /// ($ATTNC_CACHE_DIR, $XDG_CACHE_HOME/attnc or $HOME/.cache/attnc); empty
  /// when none of these is set.
  static std::string defaultPath();
  /// The project-local override in `dir`: "<dir>/attnc-tuning.json".
  static std::string projectPath(const std::string &dir);

  const std::string &path() const { return path_; }
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  /// Every entry, in key order.
  std::vector<const Entry *> entries() const;

  /// The entry for this key if it has a chosen config, else nullptr. A
  /// toolchain mismatch is a miss.
  const Entry *find(const DeviceKey &device, const KernelKey &kernel,
                    const std::string &toolchain) const;
  /// The same, for a device known by its id (DeviceKey::id).
  const Entry *find(const std::string &deviceId, const KernelKey &kernel,
                    const std::string &toolchain) const;
  /// The entry for this key, chosen or not (e.g. to list its measurements).
  const Entry *entry(const DeviceKey &device, const KernelKey &kernel,
                     const std::string &toolchain) const;

  /// The measurement of `config` (any spelling canonicalConfig unifies)
  /// for this key, or nullptr: the tuner skips configs that have one.
  const Measurement *measured(const DeviceKey &device, const KernelKey &kernel,
                              const std::string &toolchain, const std::string &config) const;

  /// Adds (or replaces, per config) one measurement. Autosaves when
  /// setAutosave() is on and the interval has passed since the last save;
  /// the Status is that save's (always ok when nothing was saved).
  Status recordMeasurement(const DeviceKey &device, const KernelKey &kernel,
                           const std::string &toolchain, Measurement m);
  /// Save after recordMeasurement() when `interval` has passed since the
  /// last save (or open); zero saves after every measurement; nullopt
  /// (the default) never autosaves.
  void setAutosave(std::optional<std::chrono::milliseconds> interval);

  /// Makes `config` the key's choice (updated = now). Returns false, and
  /// changes nothing, when the key's choice is pinned.
  bool choose(const DeviceKey &device, const KernelKey &kernel, const std::string &toolchain,
              const std::string &config, double medianMs, double spread);
  /// Pins / unpins the key's choice (updated = now); false when the key has
  /// no choice.
  bool pin(const DeviceKey &device, const KernelKey &kernel, const std::string &toolchain);
  bool unpin(const DeviceKey &device, const KernelKey &kernel, const std::string &toolchain);

  /// Writes the database to path() atomically, merged with what is on disk
  /// now (see the file comment). Fails, leaving the file alone, when the
  /// file on disk is unreadable, corrupt or of another format version. The
  /// in-memory database is not changed (reopen to see others' entries).
  Status save() const;

  /// A table of the entries (one line per key: device, toolchain, kernel,
  /// bucket, chosen config, median, spread, measured count, pinned,
  /// updated), headed by the path and the entry count.
  std::string show() const;

  /// The pinned entries (every chosen entry when `allChosen`) without their
  /// measurements, as a JSON document of this file's schema.
  Expected<std::string> exportPinned(bool allChosen = false) const;
  /// Stores every entry of an exportPinned() document as its key's pinned
  /// choice (see the file comment); nothing is imported when any entry is
  /// malformed. `origin` (a file name) prefixes error messages. Returns the
  /// number of entries imported.
  Expected<size_t> importPinned(const std::string &json, const std::string &origin = "");

  /// The key entries are stored under.
  static std::string keyOf(const DeviceKey &device, const KernelKey &kernel,
                           const std::string &toolchain);
  static std::string keyOf(const std::string &deviceId, const KernelKey &kernel,
                           const std::string &toolchain);

private:
  /// What this object did to a key since open(), strongest kept: save()
  /// applies only these keys to the file.
  enum class Change { Measured, Chosen, Pinning };
  void touch(const std::string &key, Change change);
  Entry &slot(const DeviceKey &device, const KernelKey &kernel, const std::string &toolchain);

  std::string path_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, Change> dirty_;
  std::optional<std::chrono::milliseconds> autosave_;
  mutable std::chrono::steady_clock::time_point lastSave_ = std::chrono::steady_clock::now();
};

/// The project-local database over the user's: lookups consult the project
/// file first, so a project can override (or pin) configs for everyone who
/// builds it. Either layer may be absent.
class LayeredTuningDb {
public:
  /// Opens both (an empty path means "no such layer"; a missing file is an
  /// empty layer). A broken file is an error.
  static Expected<LayeredTuningDb> open(const std::string &projectPath,
                                        const std::string &userPath);

  struct Hit {
    const Entry *entry = nullptr;
    const TuningDb *db = nullptr; ///< the layer it came from (db->path())
    explicit operator bool() const { return entry != nullptr; }
  };
  /// The project layer's chosen entry for the key, else the user layer's,
  /// else a miss (the caller falls back to heuristics and says so).
  Hit find(const DeviceKey &device, const KernelKey &kernel, const std::string &toolchain) const;

  TuningDb *project() { return project_ ? &*project_ : nullptr; }
  TuningDb *user() { return user_ ? &*user_ : nullptr; }
  const TuningDb *project() const { return project_ ? &*project_ : nullptr; }
  const TuningDb *user() const { return user_ ? &*user_ : nullptr; }

private:
  std::optional<TuningDb> project_, user_;
};

/// The keys attnc tune records under and attn-apply-tuning looks up, each
/// defined once for both halves. (The CPU attention tile's signature hashes
/// the variant's IR: attnc::cpuAttentionSignature in passes/Passes.h.)
KernelKey cudaAttentionKey(const std::string &dtype, int64_t headDim, const std::string &variant,
                           int64_t seq, int64_t heads);
/// One layer's FFN on the CPU: "cpu ffn f32 d<D> dff<F> <act> standard|reversible".
KernelKey ffnKey(int64_t dModel, int64_t dff, const std::string &activation, bool reversible,
                 int64_t seq);
/// The signature of attnc tune --max-error's entries up to the budget:
/// "cpu accuracy lowrank|lsh <variant> d<D> max_error=" (the budget follows).
std::string accuracySignaturePrefix(bool lowrank, const std::string &variant, int64_t headDim);

/// A tile config as entries write it ("bkv=64,bq=32,s=1,w=1"); nullopt when
/// it has no positive bq and bkv.
struct TileChoice {
  int blockQ = 0, blockKv = 0, warps = 1, stages = 1;
};
std::optional<TileChoice> parseTileConfig(const std::string &config);

/// The FFN chunk as entries write it: "chunk=128", "chunk=all" (0), and back
/// (nullopt: not an FFN config).
std::string ffnChunkConfig(int chunk);
std::optional<int> parseFfnChunkConfig(const std::string &config);

} // namespace attnc::tune

#endif // ATTNC_RUNTIME_TUNE_TUNINGDB_H
