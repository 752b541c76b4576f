//===- Checkpoint.cpp - Atomic training checkpoints -----------------------===//
//
// Write order (each file: temporary name in `dir`, fsync, rename, fsync of
// the directory; fs::writeFileAtomic):
//   1. ckpt-<step>.safetensors   the tensors
//   2. ckpt-<step>.json          names (1) and its SHA-256
//   3. latest.json               names (2)
//   4. pruning of older checkpoints (each: its .json first, then its tensors)
// A kill before (3) completes leaves latest.json naming the previous
// checkpoint, whose files are untouched; every ckpt-*.json on disk names a
// complete tensors file. Re-saving the step latest.json already names (a
// resumed run saving before it trains) would overwrite the tensors the
// current latest depends on, so that write goes to
// ckpt-<step>-<sha prefix>.safetensors instead; the JSON records the name.
//
// One writer per run directory: a save removes the temporary files
// (".ckpt-tmp-*") that killed writers left behind.
//
// ckpt-<step>.json:
//   {"format_version": 1, "step": N, "spec_hash": "...",
//    "tensors": "ckpt-N.safetensors", "tensors_sha256": "<hex>",
//    "tensors_bytes": B, "state": {...}}
// latest.json:
//   {"format_version": 1, "step": N, "checkpoint": "ckpt-N.json"}
//
//===----------------------------------------------------------------------===//
#include "runtime/train/Checkpoint.h"

#include "runtime/FileSystem.h"
#include "runtime/Sha256.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <vector>

#include <fcntl.h>
#include <unistd.h>

namespace attnc::train {

namespace {

constexpr int kFormatVersion = 1;
constexpr const char *kTempPrefix = ".ckpt-tmp-";
constexpr const char *kLatest = "latest.json";

std::string join(const std::string &dir, const std::string &name) {
  if (dir.empty())
    return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string jsonName(int64_t step) { return "ckpt-" + std::to_string(step) + ".json"; }
std::string tensorsName(int64_t step) { return "ckpt-" + std::to_string(step) + ".safetensors"; }

/// "ckpt-<digits>" then `suffix` (after an optional "-<hex>" for tensors);
/// the step, or -1.
int64_t parseStep(const std::string &name, const std::string &suffix, bool allowTag) {
  const std::string prefix = "ckpt-";
  if (name.size() <= prefix.size() + suffix.size() || name.compare(0, prefix.size(), prefix) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  std::string mid = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  size_t dash = mid.find('-');
  std::string digits = mid.substr(0, dash);
  if (dash != std::string::npos) {
    if (!allowTag)
      return -1;
    std::string tag = mid.substr(dash + 1);
    if (tag.empty() || tag.find_first_not_of("0123456789abcdef") != std::string::npos)
      return -1;
  }
  if (digits.empty() || digits.size() > 18 ||
      digits.find_first_not_of("0123456789") != std::string::npos)
    return -1;
  return std::stoll(digits);
}

/// A plain file name inside the run directory (no path components).
bool plainName(const std::string &name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

Expected<nlohmann::json> readJson(const std::string &path) {
  Expected<std::string> text = fs::readFile(path);
  if (!text)
    return text.takeError();
  nlohmann::json j = nlohmann::json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return makeError("checkpoint file '" + path + "' is corrupt: not a JSON object");
  return j;
}

void fsyncDir(const std::string &dir) {
  int fd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    (void)::fsync(fd);
    ::close(fd);
  }
}

/// What latest.json names, if it is readable: (step, tensors file name).
bool currentLatest(const std::string &dir, int64_t &step, std::string &tensors) {
  try {
    Expected<nlohmann::json> latest = readJson(join(dir, kLatest));
    if (!latest)
      return false;
    std::string ckptName = latest->at("checkpoint").get<std::string>();
    if (!plainName(ckptName))
      return false;
    Expected<nlohmann::json> ckpt = readJson(join(dir, ckptName));
    if (!ckpt)
      return false;
    step = ckpt->at("step").get<int64_t>();
    tensors = ckpt->at("tensors").get<std::string>();
    return true;
  } catch (const std::exception &) {
    return false;
  }
}

void removeStaleTemporaries(const std::string &dir) {
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.rfind(kTempPrefix, 0) == 0) {
      std::error_code rmEc;
      std::filesystem::remove(it->path(), rmEc);
    }
  }
}

/// Deletes checkpoints older than the newest `keep` (counting the one just
/// written, `current`), and tensors files of `current` other than
/// `currentTensors`. Checkpoints with a larger step than `current` (left by
/// a run killed before it published them) are left alone. Best effort.
void prune(const std::string &dir, int64_t current, const std::string &currentTensors, int keep) {
  std::set<int64_t> jsonSteps;
  std::map<int64_t, std::vector<std::string>> tensorFiles;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    std::string name = it->path().filename().string();
    int64_t s = parseStep(name, ".json", false);
    if (s >= 0) {
      jsonSteps.insert(s);
      continue;
    }
    s = parseStep(name, ".safetensors", true);
    if (s >= 0)
      tensorFiles[s].push_back(name);
  }
  std::set<int64_t> kept{current};
  for (auto it = jsonSteps.rbegin(); it != jsonSteps.rend(); ++it) {
    if (*it >= current)
      continue;
    if (static_cast<int>(kept.size()) >= keep)
      break;
    kept.insert(*it);
  }
  std::set<int64_t> all(jsonSteps);
  for (const auto &[s, files] : tensorFiles)
    all.insert(s);
  bool removed = false;
  for (int64_t s : all) {
    if (s > current)
      continue;
    std::error_code rmEc;
    if (s == current) {
      for (const std::string &f : tensorFiles[s])
        if (f != currentTensors)
          removed |= std::filesystem::remove(join(dir, f), rmEc);
      continue;
    }
    if (kept.count(s))
      continue;
    // The JSON first: a ckpt-*.json on disk always names existing tensors.
    removed |= std::filesystem::remove(join(dir, jsonName(s)), rmEc);
    for (const std::string &f : tensorFiles[s])
      removed |= std::filesystem::remove(join(dir, f), rmEc);
  }
  if (removed)
    fsyncDir(dir);
}

} // namespace

Status saveCheckpoint(const std::string &dir, const Checkpoint &ckpt, int keep) {
  if (keep < 1)
    return makeError("saveCheckpoint: keep must be at least 1, got " + std::to_string(keep));
  if (ckpt.step < 0)
    return makeError("saveCheckpoint: negative step " + std::to_string(ckpt.step));
  if (Status made = fs::createDirectories(dir); !made)
    return made;
  removeStaleTemporaries(dir);

  std::vector<uint8_t> bytes = st::serialize(ckpt.tensors);
  const std::string sha = Sha256::hex(Sha256::hash(bytes.data(), bytes.size()));

  std::string tname = tensorsName(ckpt.step);
  int64_t latestStep = -1;
  std::string latestTensors;
  if (currentLatest(dir, latestStep, latestTensors) && latestStep == ckpt.step &&
      latestTensors == tname)
    tname = "ckpt-" + std::to_string(ckpt.step) + "-" + sha.substr(0, 12) + ".safetensors";

  const std::string tpath = join(dir, tname);
  if (Status w = fs::writeFileAtomic(
          tpath, std::string_view(reinterpret_cast<const char *>(bytes.data()), bytes.size()),
          kTempPrefix);
      !w)
    return makeError("cannot write checkpoint tensors '" + tpath + "': " + w.error());
  const uint64_t tensorBytes = bytes.size();
  bytes.clear();
  bytes.shrink_to_fit();

  nlohmann::json meta;
  meta["format_version"] = kFormatVersion;
  meta["step"] = ckpt.step;
  meta["spec_hash"] = ckpt.specHash;
  meta["tensors"] = tname;
  meta["tensors_sha256"] = sha;
  meta["tensors_bytes"] = tensorBytes;
  meta["state"] = ckpt.state;
  const std::string jname = jsonName(ckpt.step);
  const std::string jpath = join(dir, jname);
  std::string jtext;
  try {
    jtext = meta.dump(2) + "\n";
  } catch (const std::exception &e) {
    return makeError("cannot serialise checkpoint '" + jpath + "': " + e.what());
  }
  if (Status w = fs::writeFileAtomic(jpath, jtext, kTempPrefix); !w)
    return makeError("cannot write checkpoint '" + jpath + "': " + w.error());

  nlohmann::json latest;
  latest["format_version"] = kFormatVersion;
  latest["step"] = ckpt.step;
  latest["checkpoint"] = jname;
  const std::string lpath = join(dir, kLatest);
  if (Status w = fs::writeFileAtomic(lpath, latest.dump(2) + "\n", kTempPrefix); !w)
    return makeError("cannot write '" + lpath + "': " + w.error());

  prune(dir, ckpt.step, tname, keep);
  return {};
}

namespace {

/// Checks a checkpoint's JSON: the format version and the fields every
/// checkpoint has, with their types.
Status checkMeta(const nlohmann::json &meta, const std::string &jpath) {
  if (!meta.contains("format_version") || !meta["format_version"].is_number_integer() ||
      meta["format_version"].get<int>() != kFormatVersion)
    return makeError(
        "checkpoint '" + jpath + "' has an unsupported format_version (" +
        (meta.contains("format_version") ? meta["format_version"].dump() : std::string("missing")) +
        "; this build reads " + std::to_string(kFormatVersion) + ")");
  for (const char *key : {"step", "spec_hash", "tensors", "tensors_sha256"})
    if (!meta.contains(key))
      return makeError("checkpoint '" + jpath + "' is corrupt: field \"" + key + "\" is missing");
  if (!meta["step"].is_number_integer() || !meta["spec_hash"].is_string() ||
      !meta["tensors"].is_string() || !meta["tensors_sha256"].is_string())
    return makeError("checkpoint '" + jpath + "' is corrupt: a field has the wrong type");
  return {};
}

/// The JSON of `dir`'s latest checkpoint (its path in `jpath`), checked.
Expected<nlohmann::json> readLatestMeta(const std::string &dir, std::string &jpath) {
  const std::string lpath = join(dir, kLatest);
  std::error_code ec;
  if (!std::filesystem::exists(lpath, ec))
    return makeError("no checkpoint in '" + dir + "' (no " + kLatest + "): nothing to resume");
  try {
    Expected<nlohmann::json> latest = readJson(lpath);
    if (!latest)
      return latest.takeError();
    const nlohmann::json &l = *latest;
    if (!l.contains("checkpoint") || !l["checkpoint"].is_string())
      return makeError("checkpoint file '" + lpath + "' is corrupt: no \"checkpoint\" name");
    std::string jname = l["checkpoint"].get<std::string>();
    if (!plainName(jname))
      return makeError("checkpoint file '" + lpath + "' is corrupt: bad checkpoint name '" + jname +
                       "'");
    jpath = join(dir, jname);
    Expected<nlohmann::json> meta = readJson(jpath);
    if (!meta)
      return makeError("'" + lpath + "' names a checkpoint that cannot be read: " + meta.error());
    if (Status ok = checkMeta(*meta, jpath); !ok)
      return ok.takeError();
    if (l.contains("step") && l["step"] != (*meta)["step"])
      return makeError("'" + lpath + "' says step " + l["step"].dump() + " but '" + jpath +
                       "' is step " + (*meta)["step"].dump());
    return meta;
  } catch (const std::exception &e) {
    return makeError("checkpoint file '" + (jpath.empty() ? lpath : jpath) +
                     "' is corrupt: " + e.what());
  }
}

/// The checkpoint whose checked JSON `meta` is at `jpath`: its tensors,
/// verified against their recorded SHA-256, and its state.
Expected<Checkpoint> loadCheckpointAt(const std::string &dir, const std::string &jpath,
                                      const nlohmann::json &meta) {
  Checkpoint out;
  out.step = meta["step"].get<int64_t>();
  out.specHash = meta["spec_hash"].get<std::string>();
  const std::string tname = meta["tensors"].get<std::string>();
  if (!plainName(tname))
    return makeError("checkpoint '" + jpath + "' is corrupt: bad tensors file name '" + tname +
                     "'");
  const std::string tpath = join(dir, tname);
  Expected<std::string> data = fs::readFile(tpath);
  if (!data)
    return makeError("checkpoint '" + jpath + "': cannot read its tensors: " + data.error());
  const std::string expectedSha = meta["tensors_sha256"].get<std::string>();
  const std::string sha = Sha256::hexHash(*data);
  if (sha != expectedSha)
    return makeError("checkpoint tensors '" + tpath + "' are corrupt: SHA-256 " + sha +
                     " does not match " + expectedSha + " recorded in '" + jpath + "'");
  std::vector<uint8_t> bytes(data->begin(), data->end());
  data = std::string();
  std::string err;
  if (!st::parse(bytes, tpath, out.tensors, err))
    return makeError("checkpoint tensors '" + tpath + "' cannot be parsed: " + err);
  if (meta.contains("state"))
    out.state = meta["state"];
  return out;
}

} // namespace

Expected<Checkpoint> loadLatestCheckpoint(const std::string &dir,
                                          const std::string &expectedSpecHash) {
  std::string jpath;
  Expected<nlohmann::json> meta = readLatestMeta(dir, jpath);
  if (!meta)
    return meta.takeError();
  if (!expectedSpecHash.empty() && (*meta)["spec_hash"] != expectedSpecHash)
    return makeError("checkpoint '" + jpath + "' was written for spec " +
                     (*meta)["spec_hash"].get<std::string>() + ", this spec is " +
                     expectedSpecHash);
  return loadCheckpointAt(dir, jpath, *meta);
}

Expected<Checkpoint> loadNewestIntactCheckpoint(const std::string &dir,
                                                const std::string &expectedSpecHash) {
  Expected<Checkpoint> latest = loadLatestCheckpoint(dir, expectedSpecHash);
  if (latest || !hasCheckpoint(dir))
    return latest;
  std::string jpath;
  Expected<nlohmann::json> meta = readLatestMeta(dir, jpath);
  if (meta && !expectedSpecHash.empty() && (*meta)["spec_hash"] != expectedSpecHash)
    return latest; // another model's run: nothing older is this one's either
  // The newest older checkpoint that is intact: a torn or damaged latest
  // one (a disk fault; the writer itself never leaves one) loses its steps,
  // not the run.
  std::set<int64_t> steps;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator(dir, ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    if (int64_t s = parseStep(it->path().filename().string(), ".json", false); s >= 0)
      steps.insert(s);
  for (auto it = steps.rbegin(); it != steps.rend(); ++it) {
    const std::string older = join(dir, jsonName(*it));
    if (older == jpath)
      continue;
    Expected<nlohmann::json> m = readJson(older);
    if (!m || !checkMeta(*m, older) ||
        (!expectedSpecHash.empty() && (*m)["spec_hash"] != expectedSpecHash))
      continue;
    Expected<Checkpoint> c = loadCheckpointAt(dir, older, *m);
    if (!c)
      continue;
    c->recovered = latest.error() + "; using '" + older + "' (step " + std::to_string(c->step) +
                   "), the newest intact checkpoint";
    return c;
  }
  return makeError(latest.error() + " (and no older checkpoint in '" + dir + "' is intact)");
}

std::string latestCheckpointSpecHash(const std::string &dir) {
  std::string jpath;
  Expected<nlohmann::json> meta = readLatestMeta(dir, jpath);
  return meta ? (*meta)["spec_hash"].get<std::string>() : std::string();
}

bool hasCheckpoint(const std::string &dir) {
  std::error_code ec;
  return std::filesystem::exists(join(dir, kLatest), ec);
}

} // namespace attnc::train
