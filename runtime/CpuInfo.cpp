//===- CpuInfo.cpp - The one reader of /proc/cpuinfo ----------------------===//
#include "runtime/CpuInfo.h"

#include "runtime/FileSystem.h"

#include <sstream>

namespace attnc {

namespace {

std::string trim(const std::string &s) {
  size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos)
    return "";
  size_t e = s.find_last_not_of(" \t\r\n");
  return s.substr(b, e - b + 1);
}

} // namespace

CpuInfo CpuInfo::parse(const std::string &text) {
  CpuInfo info;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    size_t colon = line.find(':');
    if (colon == std::string::npos)
      continue;
    std::string key = trim(line.substr(0, colon));
    if (key == "processor")
      ++info.processors;
    info.first_.emplace(key, std::make_pair(line, trim(line.substr(colon + 1))));
  }
  return info;
}

const CpuInfo &CpuInfo::host() {
  static const CpuInfo info = [] {
    std::string text;
    (void)fs::readFileErrno("/proc/cpuinfo", text);
    return parse(text);
  }();
  return info;
}

std::string CpuInfo::line(const std::string &key) const {
  auto it = first_.find(key);
  return it == first_.end() ? "" : it->second.first;
}

std::string CpuInfo::value(const std::string &key) const {
  auto it = first_.find(key);
  return it == first_.end() ? "" : it->second.second;
}

} // namespace attnc
