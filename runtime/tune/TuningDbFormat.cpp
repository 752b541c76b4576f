//===- TuningDbFormat.cpp - The tuning database's JSON format -------------===//
#include "runtime/tune/TuningDbFormat.h"

#include "runtime/FileSystem.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

namespace attnc::tune::format {

using nlohmann::json;

namespace {

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

} // namespace

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

namespace {

/// Folds a duplicate of a key within one document: measurements merged, the
/// newer choice wins.
void mergeDuplicate(Entry &into, const Entry &dup) {
  mergeMeasurements(into, dup);
  if (dup.chosen() && (!into.chosen() || dup.updated >= into.updated))
    takeChoice(into, dup);
}

} // namespace

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

} // namespace attnc::tune::format
