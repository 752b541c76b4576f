//===- TuningDb.cpp - Persistent database of `attnc tune` -----------------===//
#include "runtime/tune/TuningDb.h"

#include "runtime/CpuInfo.h"

#include "runtime/CudaDriver.h"
#include "runtime/FileSystem.h"
#include "runtime/HostCompiler.h"
#include "runtime/NvrtcCompiler.h"
#include "runtime/Version.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <limits>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace attnc::tune {

using nlohmann::json;

namespace {

const char *envOrNull(const char *name) {
  const char *v = std::getenv(name);
  return v && *v ? v : nullptr;
}

/// Trims and collapses runs of whitespace to one space.
std::string squeeze(const std::string &s) {
  std::string out;
  bool space = false;
  for (char c : s) {
    if (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
      space = !out.empty();
      continue;
    }
    if (space)
      out += ' ';
    space = false;
    out += c;
  }
  return out;
}

/// UTC now as "2025-06-01T12:34:56.789Z".
std::string nowIso() {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t t = system_clock::to_time_t(now);
  long ms = long(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[96];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  return buf;
}

int64_t roundUpPow2(int64_t v) {
  if (v <= 1)
    return 1;
  int64_t p = 1;
  while (p < v && p <= std::numeric_limits<int64_t>::max() / 2)
    p *= 2;
  return p;
}

//===----------------------------------------------------------------------===//
// JSON (de)serialisation
//===----------------------------------------------------------------------===//

/// A malformed document; the message says where ("entry 3: ...").
struct FormatError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void bad(const std::string &where, const std::string &what) {
  throw FormatError(where + what);
}

const json *member(const json &obj, const char *key) {
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

std::string getString(const json &obj, const char *key, const std::string &where, bool required) {
  const json *v = member(obj, key);
  if (!v) {
    if (required)
      bad(where, std::string("'") + key + "' is missing");
    return "";
  }
  if (!v->is_string())
    bad(where, std::string("'") + key + "' is not a string");
  return v->get<std::string>();
}

int64_t getInt(const json &obj, const char *key, const std::string &where) {
  const json *v = member(obj, key);
  if (!v)
    return 0;
  if (!v->is_number_integer())
    bad(where, std::string("'") + key + "' is not an integer");
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    bad(where, std::string("'") + key + "' is out of range");
  return v->get<int64_t>();
}

int getSmallInt(const json &obj, const char *key, const std::string &where) {
  int64_t v = getInt(obj, key, where);
  if (v < std::numeric_limits<int>::min() || v > std::numeric_limits<int>::max())
    bad(where, std::string("'") + key + "' is out of range");
  return int(v);
}

/// A number, or null (how nlohmann writes NaN and infinities) as NaN.
double getDouble(const json &obj, const char *key, const std::string &where) {
  const json *v = member(obj, key);
  if (!v)
    return 0;
  if (v->is_null())
    return std::numeric_limits<double>::quiet_NaN();
  if (!v->is_number())
    bad(where, std::string("'") + key + "' is not a number");
  return v->get<double>();
}

bool getBool(const json &obj, const char *key, const std::string &where) {
  const json *v = member(obj, key);
  if (!v)
    return false;
  if (!v->is_boolean())
    bad(where, std::string("'") + key + "' is not true or false");
  return v->get<bool>();
}

const json &getObject(const json &obj, const char *key, const std::string &where) {
  const json *v = member(obj, key);
  if (!v)
    bad(where, std::string("'") + key + "' is missing");
  if (!v->is_object())
    bad(where, std::string("'") + key + "' is not an object");
  return *v;
}

json toJson(const Entry &e, bool withMeasured) {
  json j = json::object();
  j["device"] = {{"kind", e.device.kind},
                 {"name", e.device.name},
                 {"cc_major", e.device.ccMajor},
                 {"cc_minor", e.device.ccMinor},
                 {"sm_count", e.device.smCount},
                 {"memory_bytes", e.device.memoryBytes},
                 {"logical_cpus", e.device.logicalCpus},
                 {"isa", e.device.isa}};
  j["toolchain"] = e.toolchain;
  j["kernel"] = {{"signature", e.kernel.signature}, {"shape_bucket", e.kernel.shapeBucket}};
  j["config"] = e.config;
  j["median_ms"] = e.medianMs;
  j["spread"] = e.spread;
  j["pinned"] = e.pinned;
  j["updated"] = e.updated;
  json ms = json::array();
  if (withMeasured)
    for (const Measurement &m : e.measured) {
      json mj = {{"config", m.config}, {"median_ms", m.medianMs},
                 {"spread", m.spread}, {"repeats", m.repeats},
                 {"at", m.at},         {"error", m.error}};
      if (m.relError >= 0)
        mj["rel_error"] = m.relError;
      ms.push_back(std::move(mj));
    }
  j["measured"] = std::move(ms);
  return j;
}

Entry entryFromJson(const json &j, const std::string &where) {
  if (!j.is_object())
    bad(where, "is not an object");
  Entry e;
  const json &d = getObject(j, "device", where);
  std::string dw = where + "device: ";
  e.device.kind = getString(d, "kind", dw, true);
  e.device.name = getString(d, "name", dw, true);
  e.device.ccMajor = getSmallInt(d, "cc_major", dw);
  e.device.ccMinor = getSmallInt(d, "cc_minor", dw);
  e.device.smCount = getSmallInt(d, "sm_count", dw);
  e.device.memoryBytes = getInt(d, "memory_bytes", dw);
  e.device.logicalCpus = getSmallInt(d, "logical_cpus", dw);
  e.device.isa = getString(d, "isa", dw, false);
  if (e.device.kind.empty())
    bad(dw, "'kind' is empty");
  e.toolchain = getString(j, "toolchain", where, true);
  const json &k = getObject(j, "kernel", where);
  std::string kw = where + "kernel: ";
  e.kernel.signature = getString(k, "signature", kw, true);
  e.kernel.shapeBucket = getString(k, "shape_bucket", kw, true);
  e.config = canonicalConfig(getString(j, "config", where, false));
  e.medianMs = getDouble(j, "median_ms", where);
  e.spread = getDouble(j, "spread", where);
  e.pinned = getBool(j, "pinned", where);
  e.updated = getString(j, "updated", where, false);
  if (const json *ms = member(j, "measured")) {
    if (!ms->is_array())
      bad(where, "'measured' is not an array");
    std::map<std::string, Measurement> byConfig;
    for (size_t i = 0; i < ms->size(); ++i) {
      const json &mj = (*ms)[i];
      std::string mw = where + "measured[" + std::to_string(i) + "]: ";
      if (!mj.is_object())
        bad(mw, "is not an object");
      Measurement m;
      m.config = canonicalConfig(getString(mj, "config", mw, true));
      if (m.config.empty())
        bad(mw, "'config' is empty");
      m.medianMs = getDouble(mj, "median_ms", mw);
      m.spread = getDouble(mj, "spread", mw);
      m.repeats = getSmallInt(mj, "repeats", mw);
      m.at = getString(mj, "at", mw, false);
      m.error = getString(mj, "error", mw, false);
      if (member(mj, "rel_error"))
        m.relError = getDouble(mj, "rel_error", mw);
      auto [it, fresh] = byConfig.emplace(m.config, m);
      if (!fresh && m.at >= it->second.at)
        it->second = m;
    }
    for (auto &[c, m] : byConfig)
      e.measured.push_back(std::move(m));
  }
  return e;
}

/// Adds `mine`'s measurements to `into`'s (same key): union by config, the
/// newer measurement of a config wins, ties to `mine`.
void mergeMeasurements(Entry &into, const Entry &mine) {
  std::map<std::string, Measurement> byConfig;
  for (const Measurement &m : into.measured)
    byConfig[m.config] = m;
  for (const Measurement &m : mine.measured) {
    auto [it, fresh] = byConfig.emplace(m.config, m);
    if (!fresh && m.at >= it->second.at)
      it->second = m;
  }
  into.measured.clear();
  for (auto &[c, m] : byConfig)
    into.measured.push_back(std::move(m));
}

void takeChoice(Entry &into, const Entry &mine) {
  into.config = mine.config;
  into.medianMs = mine.medianMs;
  into.spread = mine.spread;
  into.pinned = mine.pinned;
  into.updated = mine.updated;
}

/// Folds a duplicate of a key within one document: measurements merged, the
/// newer choice wins.
void mergeDuplicate(Entry &into, const Entry &dup) {
  mergeMeasurements(into, dup);
  if (dup.chosen() && (!into.chosen() || dup.updated >= into.updated))
    takeChoice(into, dup);
}

/// Parses a whole document into `out`; throws FormatError.
void parseDocument(const std::string &text, std::map<std::string, Entry> &out) {
  json doc;
  try {
    doc = json::parse(text);
  } catch (const json::exception &e) {
    throw FormatError(std::string("is not valid JSON (") + e.what() + ")");
  }
  if (!doc.is_object())
    throw FormatError("is not a JSON object");
  const json *v = member(doc, "format_version");
  if (!v)
    throw FormatError("has no 'format_version' (not an attnc tuning database?)");
  if (!v->is_number_integer() || v->get<int64_t>() != TuningDb::kFormatVersion)
    throw FormatError("has format_version " + v->dump() + ", this attnc reads " +
                      std::to_string(TuningDb::kFormatVersion) +
                      " (written by another attnc version?)");
  const json *es = member(doc, "entries");
  if (!es)
    return;
  if (!es->is_array())
    throw FormatError("has an 'entries' member that is not an array");
  for (size_t i = 0; i < es->size(); ++i) {
    Entry e = entryFromJson((*es)[i], "entry " + std::to_string(i) + ": ");
    std::string key = TuningDb::keyOf(e.device, e.kernel, e.toolchain);
    auto [it, fresh] = out.emplace(key, e);
    if (!fresh)
      mergeDuplicate(it->second, e);
  }
}

/// Loads `path` (missing = empty); the error names the file.
Expected<std::map<std::string, Entry>> loadFile(const std::string &path) {
  std::map<std::string, Entry> entries;
  std::string text;
  int err = fs::readFileErrno(path, text);
  if (err == ENOENT)
    return entries;
  if (err != 0)
    return makeError("cannot read tuning database '" + path + "': " + std::strerror(err));
  try {
    parseDocument(text, entries);
  } catch (const FormatError &e) {
    return makeError("tuning database '" + path + "' " + e.what() +
                     "; fix or delete it, or point $ATTNC_TUNING_DB elsewhere");
  } catch (const std::exception &e) {
    return makeError("tuning database '" + path + "' cannot be read: " + e.what());
  }
  return entries;
}

Expected<std::string> dumpDocument(const std::vector<const Entry *> &entries, bool withMeasured,
                                   bool forcePinned) {
  json doc = json::object();
  doc["format_version"] = TuningDb::kFormatVersion;
  json es = json::array();
  for (const Entry *e : entries) {
    json j = toJson(*e, withMeasured);
    if (forcePinned)
      j["pinned"] = true;
    es.push_back(std::move(j));
  }
  doc["entries"] = std::move(es);
  try {
    return doc.dump(2) + "\n";
  } catch (const json::exception &e) {
    // Invalid UTF-8 in a name or signature.
    return makeError(std::string("cannot serialise the tuning database: ") + e.what());
  }
}

std::string formatMs(double v) {
  if (!std::isfinite(v))
    return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

/// Closes (and so unlocks) a lock file.
struct LockFile {
  int fd = -1;
  explicit LockFile(const std::string &path) {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
      return; // Unlockable (read-only directory): save without the lock.
    while (::flock(fd, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
  ~LockFile() {
    if (fd >= 0)
      ::close(fd);
  }
  LockFile(const LockFile &) = delete;
  LockFile &operator=(const LockFile &) = delete;
};

} // namespace

//===----------------------------------------------------------------------===//
// Keys
//===----------------------------------------------------------------------===//

std::string DeviceKey::id() const {
  if (kind == "cuda")
    return "cuda:" + name + ":sm_" + std::to_string(ccMajor) + std::to_string(ccMinor) + ":" +
           std::to_string(smCount) + "sm:" + std::to_string(memoryBytes >> 20) + "MiB";
  if (kind == "cpu")
    return "cpu:" + name + ":" + isa + ":" + std::to_string(logicalCpus) + "cpus";
  return kind + ":" + name + ":cc" + std::to_string(ccMajor) + "." + std::to_string(ccMinor) + ":" +
         std::to_string(smCount) + "sm:" + std::to_string(memoryBytes >> 20) + "MiB:" + isa + ":" +
         std::to_string(logicalCpus) + "cpus";
}

namespace {

DeviceKey cpuDeviceFrom(const CpuInfo &cpu, int logicalCpus) {
  DeviceKey d;
  d.kind = "cpu";
  std::set<std::string> flags;
  std::istringstream fs(cpu.value("flags").empty() ? cpu.value("Features") : cpu.value("flags"));
  for (std::string f; fs >> f;)
    flags.insert(f);
  const std::string model = squeeze(cpu.value("model name")), part = cpu.value("CPU part"),
                    hardware = squeeze(cpu.value("Hardware"));
  const int processors = cpu.processors;
  if (!model.empty())
    d.name = model;
  else if (!hardware.empty())
    d.name = hardware;
  else if (!part.empty())
    d.name = "arm cpu part " + part;
  else
    d.name = "unknown cpu";
  d.logicalCpus = logicalCpus > 0 ? logicalCpus : processors;
  static const std::pair<const char *, const char *> kIsas[] = {
      {"avx512f", "avx512f"}, {"avx2", "avx2"}, {"avx", "avx"},   {"sse4_2", "sse4.2"},
      {"sse2", "sse2"},       {"sve", "sve"},   {"asimd", "neon"}};
  for (const auto &[flag, isa] : kIsas)
    if (flags.count(flag)) {
      d.isa = isa;
      break;
    }
  return d;
}

} // namespace

DeviceKey cpuDeviceFromCpuinfo(const std::string &cpuinfo, int logicalCpus) {
  return cpuDeviceFrom(CpuInfo::parse(cpuinfo), logicalCpus);
}

DeviceKey cpuDevice() {
  // The parse HostCompiler's kernel-cache key reads too: the file once.
  static const DeviceKey device =
      cpuDeviceFrom(CpuInfo::host(), int(std::thread::hardware_concurrency()));
  return device;
}

DeviceKey cudaDevice(const cuda::DeviceInfo &info) {
  DeviceKey d;
  d.kind = "cuda";
  d.name = squeeze(info.name);
  d.ccMajor = info.ccMajor;
  d.ccMinor = info.ccMinor;
  d.smCount = info.smCount;
  d.memoryBytes = int64_t(info.totalMemoryBytes);
  return d;
}

std::string shapeBucket(int64_t n, int64_t batchHeads) {
  return "n" + std::to_string(roundUpPow2(n)) + "-bh" + std::to_string(roundUpPow2(batchHeads));
}

std::string canonicalConfig(const std::string &config) {
  std::vector<std::string> items;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty())
      items.push_back(cur);
    cur.clear();
  };
  for (char c : config) {
    if (c == ',')
      flush();
    else if (!std::isspace(static_cast<unsigned char>(c)))
      cur += c;
  }
  flush();
  std::stable_sort(items.begin(), items.end(), [](const std::string &a, const std::string &b) {
    return a.substr(0, a.find('=')) < b.substr(0, b.find('='));
  });
  std::string out;
  for (const std::string &i : items)
    out += (out.empty() ? "" : ",") + i;
  return out;
}

std::string hostToolchain() {
  Expected<std::string> id =
      HostCompiler::compilerIdentity(HostCompiler::compilerCommand(HostCompileOptions{}));
  return toolchainId(id ? id->substr(0, id->find('\n')) : "host compiler unknown");
}

std::string nvrtcToolchain() { return toolchainId("NVRTC " + NvrtcCompiler::version()); }

std::string toolchainId(const std::string &kernelCompiler) {
  std::string id = std::string("attnc ") + attncVersion();
  std::string kc = squeeze(kernelCompiler);
  if (!kc.empty())
    id += "; " + kc;
  return id;
}

std::string Entry::describe() const {
  std::string s = kernel.signature + " [" + kernel.shapeBucket + "] -> ";
  if (!chosen())
    return s + "(nothing chosen, " + std::to_string(measured.size()) + " measured)";
  s += config + " (" + formatMs(medianMs) + " ms";
  if (pinned)
    s += ", pinned";
  return s + ")";
}

//===----------------------------------------------------------------------===//
// TuningDb
//===----------------------------------------------------------------------===//

std::string TuningDb::keyOf(const DeviceKey &device, const KernelKey &kernel,
                            const std::string &toolchain) {
  return keyOf(device.id(), kernel, toolchain);
}

std::string TuningDb::keyOf(const std::string &deviceId, const KernelKey &kernel,
                            const std::string &toolchain) {
  const char sep = '\x1f';
  return deviceId + sep + toolchain + sep + kernel.signature + sep + kernel.shapeBucket;
}

Expected<TuningDb> TuningDb::open(const std::string &path) {
  if (path.empty())
    return makeError("no tuning database path (set $ATTNC_TUNING_DB, "
                     "$ATTNC_CACHE_DIR, $XDG_CACHE_HOME or $HOME)");
  Expected<std::map<std::string, Entry>> entries = loadFile(path);
  if (!entries)
    return entries.takeError();
  TuningDb db;
  db.path_ = path;
  db.entries_ = std::move(*entries);
  return db;
}

std::string TuningDb::defaultPath() {
  if (const char *p = envOrNull("ATTNC_TUNING_DB"))
    return p;
  const std::string folder = fs::cacheFolder(); // the kernel cache's too
  return folder.empty() ? "" : folder + "/tuning.json";
}

std::string TuningDb::projectPath(const std::string &dir) {
  if (dir.empty())
    return "attnc-tuning.json";
  return dir.back() == '/' ? dir + "attnc-tuning.json" : dir + "/attnc-tuning.json";
}

std::vector<const Entry *> TuningDb::entries() const {
  std::vector<const Entry *> out;
  for (const auto &[k, e] : entries_)
    out.push_back(&e);
  return out;
}

const Entry *TuningDb::entry(const DeviceKey &device, const KernelKey &kernel,
                             const std::string &toolchain) const {
  auto it = entries_.find(keyOf(device, kernel, toolchain));
  return it == entries_.end() ? nullptr : &it->second;
}

const Entry *TuningDb::find(const DeviceKey &device, const KernelKey &kernel,
                            const std::string &toolchain) const {
  return find(device.id(), kernel, toolchain);
}

const Entry *TuningDb::find(const std::string &deviceId, const KernelKey &kernel,
                            const std::string &toolchain) const {
  auto it = entries_.find(keyOf(deviceId, kernel, toolchain));
  return it != entries_.end() && it->second.chosen() ? &it->second : nullptr;
}

const Measurement *TuningDb::measured(const DeviceKey &device, const KernelKey &kernel,
                                      const std::string &toolchain,
                                      const std::string &config) const {
  const Entry *e = entry(device, kernel, toolchain);
  if (!e)
    return nullptr;
  std::string c = canonicalConfig(config);
  for (const Measurement &m : e->measured)
    if (m.config == c)
      return &m;
  return nullptr;
}

void TuningDb::touch(const std::string &key, Change change) {
  Change &c = dirty_[key];
  c = std::max(c, change);
}

Entry &TuningDb::slot(const DeviceKey &device, const KernelKey &kernel,
                      const std::string &toolchain) {
  auto [it, fresh] = entries_.try_emplace(keyOf(device, kernel, toolchain));
  if (fresh) {
    it->second.device = device;
    it->second.kernel = kernel;
    it->second.toolchain = toolchain;
  }
  return it->second;
}

Status TuningDb::recordMeasurement(const DeviceKey &device, const KernelKey &kernel,
                                   const std::string &toolchain, Measurement m) {
  m.config = canonicalConfig(m.config);
  if (m.at.empty())
    m.at = nowIso();
  Entry &e = slot(device, kernel, toolchain);
  touch(keyOf(device, kernel, toolchain), Change::Measured);
  auto it =
      std::lower_bound(e.measured.begin(), e.measured.end(), m.config,
                       [](const Measurement &a, const std::string &c) { return a.config < c; });
  if (it != e.measured.end() && it->config == m.config)
    *it = std::move(m);
  else
    e.measured.insert(it, std::move(m));
  if (autosave_ && std::chrono::steady_clock::now() - lastSave_ >= *autosave_)
    return save();
  return {};
}

void TuningDb::setAutosave(std::optional<std::chrono::milliseconds> interval) {
  autosave_ = interval;
}

bool TuningDb::choose(const DeviceKey &device, const KernelKey &kernel,
                      const std::string &toolchain, const std::string &config, double medianMs,
                      double spread) {
  Entry &e = slot(device, kernel, toolchain);
  if (e.pinned && e.chosen())
    return false;
  e.config = canonicalConfig(config);
  e.medianMs = medianMs;
  e.spread = spread;
  e.pinned = false;
  e.updated = nowIso();
  touch(keyOf(device, kernel, toolchain), Change::Chosen);
  return true;
}

bool TuningDb::pin(const DeviceKey &device, const KernelKey &kernel, const std::string &toolchain) {
  auto it = entries_.find(keyOf(device, kernel, toolchain));
  if (it == entries_.end() || !it->second.chosen())
    return false;
  it->second.pinned = true;
  it->second.updated = nowIso();
  touch(it->first, Change::Pinning);
  return true;
}

bool TuningDb::unpin(const DeviceKey &device, const KernelKey &kernel,
                     const std::string &toolchain) {
  auto it = entries_.find(keyOf(device, kernel, toolchain));
  if (it == entries_.end() || !it->second.chosen())
    return false;
  it->second.pinned = false;
  it->second.updated = nowIso();
  touch(it->first, Change::Pinning);
  return true;
}

Status TuningDb::save() const {
  lastSave_ = std::chrono::steady_clock::now();
  if (path_.empty())
    return makeError("cannot save a tuning database that has no file");
  std::string dir = ".";
  if (size_t slash = path_.rfind('/'); slash != std::string::npos)
    dir = slash == 0 ? "/" : path_.substr(0, slash);
  if (Status s = fs::createDirectories(dir); !s)
    return makeError("cannot save tuning database '" + path_ + "': " + s.error());

  // Read-merge-write under the lock, so two savers cannot both read the
  // old file and drop each other's entries.
  LockFile lock(path_ + ".lock");
  Expected<std::map<std::string, Entry>> disk = loadFile(path_);
  if (!disk)
    return makeError("not saving over it: " + disk.error());
  std::map<std::string, Entry> merged = std::move(*disk);
  // Apply this object's changes to what is on disk now; untouched keys stay
  // as the disk has them (another process may have changed them).
  for (const auto &[key, op] : dirty_) {
    auto mine = entries_.find(key);
    if (mine == entries_.end())
      continue;
    const Entry &e = mine->second;
    auto [it, fresh] = merged.emplace(key, e);
    if (fresh)
      continue;
    Entry &d = it->second;
    mergeMeasurements(d, e);
    d.device = e.device;
    if (op == Change::Measured || !e.chosen())
      continue;
    if (!d.chosen())
      takeChoice(d, e);
    else if (op == Change::Chosen && d.pinned && !e.pinned)
      continue; // a tuning run's choice never replaces a pin
    else if (e.updated >= d.updated)
      takeChoice(d, e);
  }
  std::vector<const Entry *> list;
  for (const auto &[k, e] : merged)
    list.push_back(&e);
  Expected<std::string> text = dumpDocument(list, /*withMeasured=*/true,
                                            /*forcePinned=*/false);
  if (!text)
    return makeError("cannot save tuning database '" + path_ + "': " + text.error());
  std::string base = path_.substr(path_.rfind('/') + 1);
  if (Status s = fs::writeFileAtomic(path_, *text, "." + base + ".tmp-"); !s)
    return makeError("cannot save tuning database '" + path_ + "': " + s.error());
  return {};
}

std::string TuningDb::show() const {
  std::string out = "tuning database " + (path_.empty() ? "(in memory)" : path_) + ": " +
                    std::to_string(entries_.size()) +
                    (entries_.size() == 1 ? " entry\n" : " entries\n");
  if (entries_.empty())
    return out;
  std::vector<std::vector<std::string>> rows = {{"DEVICE", "TOOLCHAIN", "KERNEL", "BUCKET",
                                                 "CONFIG", "MEDIAN_MS", "SPREAD", "MEASURED",
                                                 "PINNED", "UPDATED"}};
  for (const auto &[k, e] : entries_) {
    size_t failed = std::count_if(e.measured.begin(), e.measured.end(),
                                  [](const Measurement &m) { return m.failed(); });
    std::string count = std::to_string(e.measured.size());
    if (failed)
      count += " (" + std::to_string(failed) + " failed)";
    rows.push_back({e.device.id(), e.toolchain, e.kernel.signature, e.kernel.shapeBucket,
                    e.chosen() ? e.config : "-", e.chosen() ? formatMs(e.medianMs) : "-",
                    e.chosen() ? formatMs(e.spread) : "-", count, e.pinned ? "yes" : "no",
                    e.updated.empty() ? "-" : e.updated});
  }
  std::vector<size_t> width(rows[0].size(), 0);
  for (const auto &r : rows)
    for (size_t i = 0; i < r.size(); ++i)
      width[i] = std::max(width[i], r[i].size());
  for (const auto &r : rows) {
    std::string line;
    for (size_t i = 0; i < r.size(); ++i) {
      line += r[i];
      if (i + 1 < r.size())
        line += std::string(width[i] - r[i].size() + 2, ' ');
    }
    out += line + "\n";
  }
  return out;
}

Expected<std::string> TuningDb::exportPinned(bool allChosen) const {
  std::vector<const Entry *> list;
  for (const auto &[k, e] : entries_)
    if (e.chosen() && (e.pinned || allChosen))
      list.push_back(&e);
  return dumpDocument(list, /*withMeasured=*/false, /*forcePinned=*/true);
}

Expected<size_t> TuningDb::importPinned(const std::string &text, const std::string &origin) {
  std::map<std::string, Entry> incoming;
  std::string what = origin.empty() ? "pinned configs" : "pinned configs '" + origin + "'";
  try {
    parseDocument(text, incoming);
  } catch (const FormatError &e) {
    return makeError("cannot import " + what + ": " + e.what());
  } catch (const std::exception &e) {
    return makeError("cannot import " + what + ": " + e.what());
  }
  for (const auto &[key, e] : incoming)
    if (!e.chosen())
      return makeError("cannot import " + what + ": the entry for " + e.kernel.signature + " [" +
                       e.kernel.shapeBucket + "] on " + e.device.id() + " has no config");
  std::string now = nowIso();
  for (const auto &[key, e] : incoming) {
    Entry &dst = slot(e.device, e.kernel, e.toolchain);
    dst.config = e.config;
    dst.medianMs = e.medianMs;
    dst.spread = e.spread;
    dst.pinned = true;
    dst.updated = now;
    touch(key, Change::Pinning);
  }
  return incoming.size();
}

//===----------------------------------------------------------------------===//
// LayeredTuningDb
//===----------------------------------------------------------------------===//

Expected<LayeredTuningDb> LayeredTuningDb::open(const std::string &projectPath,
                                                const std::string &userPath) {
  LayeredTuningDb l;
  if (!projectPath.empty()) {
    Expected<TuningDb> p = TuningDb::open(projectPath);
    if (!p)
      return p.takeError();
    l.project_ = std::move(*p);
  }
  if (!userPath.empty()) {
    Expected<TuningDb> u = TuningDb::open(userPath);
    if (!u)
      return u.takeError();
    l.user_ = std::move(*u);
  }
  return l;
}

LayeredTuningDb::Hit LayeredTuningDb::find(const DeviceKey &device, const KernelKey &kernel,
                                           const std::string &toolchain) const {
  for (const TuningDb *db : {project(), user()})
    if (db)
      if (const Entry *e = db->find(device, kernel, toolchain))
        return Hit{e, db};
  return {};
}

KernelKey cudaAttentionKey(const std::string &dtype, int64_t headDim, const std::string &variant,
                           int64_t seq, int64_t heads) {
  return {"cuda attention " + dtype + " d" + std::to_string(headDim) + " fwd " + variant,
          shapeBucket(seq, heads)};
}

KernelKey ffnKey(int64_t dModel, int64_t dff, const std::string &activation, bool reversible,
                 int64_t seq) {
  return {"cpu ffn f32 d" + std::to_string(dModel) + " dff" + std::to_string(dff) + " " +
              activation + (reversible ? " reversible" : " standard"),
          shapeBucket(seq, 1)};
}

std::string accuracySignaturePrefix(bool lowrank, const std::string &variant, int64_t headDim) {
  return std::string("cpu accuracy ") + (lowrank ? "lowrank " : "lsh ") + variant + " d" +
         std::to_string(headDim) + " max_error=";
}

std::optional<TileChoice> parseTileConfig(const std::string &cfg) {
  TileChoice c;
  size_t pos = 0;
  while (pos < cfg.size()) {
    size_t comma = cfg.find(',', pos), eq = cfg.find('=', pos);
    if (eq == std::string::npos || (comma != std::string::npos && eq > comma))
      return std::nullopt;
    std::string key = cfg.substr(pos, eq - pos);
    int v = std::atoi(cfg.substr(eq + 1, comma - eq - 1).c_str());
    (key == "bq" ? c.blockQ : key == "bkv" ? c.blockKv : key == "w" ? c.warps : c.stages) = v;
    pos = comma == std::string::npos ? cfg.size() : comma + 1;
  }
  if (c.blockQ <= 0 || c.blockKv <= 0)
    return std::nullopt;
  return c;
}

std::string ffnChunkConfig(int chunk) {
  return chunk > 0 ? "chunk=" + std::to_string(chunk) : "chunk=all";
}

std::optional<int> parseFfnChunkConfig(const std::string &config) {
  if (config == "chunk=all")
    return 0;
  if (config.rfind("chunk=", 0) != 0)
    return std::nullopt;
  int chunk = std::atoi(config.c_str() + 6);
  return chunk > 0 ? std::optional<int>(chunk) : std::nullopt;
}

} // namespace attnc::tune
