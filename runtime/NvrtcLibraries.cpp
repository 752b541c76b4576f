//===- NvrtcLibraries.cpp - The NVRTC libraries this machine has ----------===//
#include "runtime/NvrtcLibraries.h"

#include <dlfcn.h>
#include <nvrtc.h>
#include <sys/stat.h>

#include <cstdlib>

namespace attnc {

namespace {

bool isFile(const std::string &path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

bool sameFile(const std::string &a, const std::string &b) {
  struct stat x {
  }, y{};
  return ::stat(a.c_str(), &x) == 0 && ::stat(b.c_str(), &y) == 0 && x.st_dev == y.st_dev &&
         x.st_ino == y.st_ino;
}

/// A library file named libnvrtc.so.12 at `where`, or in the folders below
/// it that a toolkit or the wheel use; "" when there is none.
std::string findLibnvrtc12(const std::string &where) {
  if (isFile(where))
    return where;
  for (const char *sub : {"", "/lib", "/lib64", "/nvidia/cuda_nvrtc/lib"}) {
    const std::string p = where + sub + "/libnvrtc.so.12";
    if (isFile(p))
      return p;
  }
  return "";
}

/// The archs an NVRTC reports through its own entry points.
using VersionFn = nvrtcResult (*)(int *, int *);
using NumArchsFn = nvrtcResult (*)(int *);
using ArchsFn = nvrtcResult (*)(int *);

Expected<NvrtcLibrary> ask(VersionFn version, NumArchsFn numArchs, ArchsFn archs,
                           const std::string &path, const std::string &origin) {
  NvrtcLibrary lib;
  lib.path = path, lib.origin = origin;
  if (version(&lib.major, &lib.minor) != NVRTC_SUCCESS)
    return makeError(path + ": nvrtcVersion failed");
  int n = 0;
  if (numArchs(&n) != NVRTC_SUCCESS || n < 0 || n > 1000)
    return makeError(path + ": nvrtcGetNumSupportedArchs failed");
  lib.archs.resize(size_t(n));
  if (n && archs(lib.archs.data()) != NVRTC_SUCCESS)
    return makeError(path + ": nvrtcGetSupportedArchs failed");
  return lib;
}

} // namespace

bool NvrtcLibrary::targets(int sm) const {
  for (int a : archs)
    if (a == sm)
      return true;
  return false;
}

std::string NvrtcLibrary::describe() const {
  std::string s = std::to_string(major) + "." + std::to_string(minor);
  if (!archs.empty())
    s += " (sm_" + std::to_string(archs.front()) + " ... sm_" + std::to_string(archs.back()) + ")";
  return s;
}

Expected<NvrtcLibrary> probeNvrtcLibrary(const std::string &path, const std::string &origin) {
  // RTLD_LOCAL: its symbols stay out of the global namespace, where the
  // linked NVRTC's are.
  void *h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = ::dlerror();
    return makeError(path + " (" + origin + ") cannot be loaded: " + (why ? why : "dlopen failed"));
  }
  auto version = reinterpret_cast<VersionFn>(::dlsym(h, "nvrtcVersion"));
  auto numArchs = reinterpret_cast<NumArchsFn>(::dlsym(h, "nvrtcGetNumSupportedArchs"));
  auto archs = reinterpret_cast<ArchsFn>(::dlsym(h, "nvrtcGetSupportedArchs"));
  if (!version || !numArchs || !archs) {
    ::dlclose(h);
    return makeError(path + " (" + origin +
                     ") is not an NVRTC library (no nvrtcVersion or "
                     "nvrtcGetSupportedArchs)");
  }
  // The handle stays open: the library will compile with it.
  return ask(version, numArchs, archs, path, origin);
}

std::string projectNvrtc12Dir() {
#ifdef ATTNC_PROJECT_NVRTC12_DIR
  return ATTNC_PROJECT_NVRTC12_DIR;
#else
  return "";
#endif
}

std::vector<NvrtcLibrary> findNvrtcLibraries(std::vector<std::string> *problems) {
  std::vector<NvrtcLibrary> found;
  if (Expected<NvrtcLibrary> linked = ask(&::nvrtcVersion, &::nvrtcGetNumSupportedArchs,
                                          &::nvrtcGetSupportedArchs, "linked", "the CUDA toolkit");
      linked)
    found.push_back(std::move(*linked));
  else if (problems)
    problems->push_back(linked.error());
  auto add = [&](const std::string &where, const std::string &origin, bool named) {
    const std::string file = findLibnvrtc12(where);
    if (file.empty()) {
      if (named && problems)
        problems->push_back(origin + " = " + where + ": no libnvrtc.so.12 there");
      return;
    }
    for (const NvrtcLibrary &l : found)
      if (sameFile(l.path, file))
        return; // named twice
    Expected<NvrtcLibrary> lib = probeNvrtcLibrary(file, origin);
    if (lib)
      found.push_back(std::move(*lib));
    else if (problems)
      problems->push_back(lib.error());
  };
  if (const char *env = std::getenv("ATTNC_NVRTC12"); env && *env)
    add(env, "$ATTNC_NVRTC12", true);
  if (const std::string dir = projectNvrtc12Dir(); !dir.empty())
    add(dir, ".deps/nvrtc-cu12 (scripts/bootstrap.sh)", false);
  return found;
}

} // namespace attnc
