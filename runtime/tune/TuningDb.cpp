//===- TuningDb.cpp - Persistent database of `attnc tune` -----------------===//
//
// The database itself: opening, lookups, recording, choosing and pinning,
// saving under a lock (merged with what other processes saved), the table
// `attnc tune --show` prints, export and import of pinned configs, and the
// project-over-user layering. Its file format: TuningDbFormat.cpp; what its
// entries are keyed by: TuningKeys.cpp.
//
//===----------------------------------------------------------------------===//
#include "runtime/tune/TuningDb.h"
#include "runtime/tune/TuningDbFormat.h"

#include "runtime/FileSystem.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

namespace attnc::tune {

namespace {

const char *envOrNull(const char *name) {
  const char *v = std::getenv(name);
  return v && *v ? v : nullptr;
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
  Expected<std::map<std::string, Entry>> entries = format::loadFile(path);
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
  Expected<std::map<std::string, Entry>> disk = format::loadFile(path_);
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
    format::mergeMeasurements(d, e);
    d.device = e.device;
    if (op == Change::Measured || !e.chosen())
      continue;
    if (!d.chosen())
      format::takeChoice(d, e);
    else if (op == Change::Chosen && d.pinned && !e.pinned)
      continue; // a tuning run's choice never replaces a pin
    else if (e.updated >= d.updated)
      format::takeChoice(d, e);
  }
  std::vector<const Entry *> list;
  for (const auto &[k, e] : merged)
    list.push_back(&e);
  Expected<std::string> text = format::dumpDocument(list, /*withMeasured=*/true,
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
                    e.chosen() ? e.config : "-", e.chosen() ? format::formatMs(e.medianMs) : "-",
                    e.chosen() ? format::formatMs(e.spread) : "-", count, e.pinned ? "yes" : "no",
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
  return format::dumpDocument(list, /*withMeasured=*/false, /*forcePinned=*/true);
}

Expected<size_t> TuningDb::importPinned(const std::string &text, const std::string &origin) {
  std::map<std::string, Entry> incoming;
  std::string what = origin.empty() ? "pinned configs" : "pinned configs '" + origin + "'";
  try {
    format::parseDocument(text, incoming);
  } catch (const format::FormatError &e) {
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

} // namespace attnc::tune
