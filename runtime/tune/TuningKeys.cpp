//===- TuningKeys.cpp - What a tuning database entry is keyed by ----------===//
//
// Device identities (the CPU from /proc/cpuinfo, a GPU from the driver),
// shape buckets, canonical configs, toolchain ids, and the kernel keys and
// config strings of the tuned kinds (attention tiles, the FFN chunk,
// accuracy choices).
//
//===----------------------------------------------------------------------===//
#include "runtime/tune/TuningDb.h"
#include "runtime/tune/TuningDbFormat.h"

#include "runtime/CpuInfo.h"
#include "runtime/CudaDriver.h"
#include "runtime/HostCompiler.h"
#include "runtime/NvrtcCompiler.h"
#include "runtime/Version.h"

#include <algorithm>
#include <limits>
#include <set>
#include <sstream>
#include <thread>

namespace attnc::tune {

namespace {

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

int64_t roundUpPow2(int64_t v) {
  if (v <= 1)
    return 1;
  int64_t p = 1;
  while (p < v && p <= std::numeric_limits<int64_t>::max() / 2)
    p *= 2;
  return p;
}

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
  s += config + " (" + format::formatMs(medianMs) + " ms";
  if (pinned)
    s += ", pinned";
  return s + ")";
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
