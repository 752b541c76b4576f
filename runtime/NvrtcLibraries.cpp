//===- NvrtcLibraries.cpp - The NVRTC libraries this machine has ----------===//
#include "runtime/NvrtcLibraries.h"
#include "runtime/KernelHeaders.h"

#include <dlfcn.h>
#include <nvrtc.h>
#include <sys/stat.h>

#include <cstdlib>
#include <memory>
#include <type_traits>

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

/// The entry points of a compile, from `h` (a dlopen handle), or null when
/// one is missing.
std::shared_ptr<const NvrtcApi> apiOf(void *h) {
  auto api = std::make_shared<NvrtcApi>();
  bool ok = true;
  auto get = [&](auto &fn, const char *name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(h, name));
    ok = ok && fn;
  };
  get(api->createProgram, "nvrtcCreateProgram");
  get(api->compileProgram, "nvrtcCompileProgram");
  get(api->getProgramLogSize, "nvrtcGetProgramLogSize");
  get(api->getProgramLog, "nvrtcGetProgramLog");
  get(api->getCUBINSize, "nvrtcGetCUBINSize");
  get(api->getCUBIN, "nvrtcGetCUBIN");
  get(api->getPTXSize, "nvrtcGetPTXSize");
  get(api->getPTX, "nvrtcGetPTX");
  get(api->destroyProgram, "nvrtcDestroyProgram");
  get(api->getErrorString, "nvrtcGetErrorString");
  return ok ? api : nullptr;
}

/// Where the toolkit's NVRTC may be, most specific first: $ATTNC_NVRTC (a
/// library file), the toolkit's library folder at configure time, then
/// $CUDA_HOME's and /usr/local/cuda's, then the loader's search by soname.
std::vector<std::string> toolkitCandidates() {
  std::vector<std::string> c;
  if (const char *env = std::getenv("ATTNC_NVRTC"); env && *env)
    c.push_back(env);
  std::vector<std::string> dirs;
#ifdef ATTNC_CUDA_LIB_DIR
  dirs.push_back(ATTNC_CUDA_LIB_DIR);
#endif
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *root = std::getenv(var); root && *root)
      dirs.push_back(std::string(root) + "/lib64");
  dirs.push_back("/usr/local/cuda/lib64");
  for (const std::string &d : dirs)
    for (const char *name : {"/libnvrtc.so", "/libnvrtc.so.13", "/libnvrtc.so.12"})
      if (isFile(d + name))
        c.push_back(d + name);
  for (const char *soname : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"})
    c.push_back(soname);
  return c;
}

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

std::string NvrtcLibrary::identity() const {
  return "NVRTC " + std::to_string(major) + "." + std::to_string(minor) + " (" + origin + ": " +
         path + ")";
}

std::string NvrtcLibrary::describe() const {
  std::string s = std::to_string(major) + "." + std::to_string(minor);
  if (!archs.empty())
    s += " (sm_" + std::to_string(archs.front()) + " ... sm_" + std::to_string(archs.back()) + ")";
  return s;
}

Expected<NvrtcLibrary> probeNvrtcLibrary(const std::string &path, const std::string &origin) {
  // RTLD_LOCAL: its symbols stay out of the global namespace, so two
  // NVRTC versions live side by side.
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
  std::shared_ptr<const NvrtcApi> api = apiOf(h);
  if (!api) {
    ::dlclose(h);
    return makeError(path + " (" + origin + ") lacks NVRTC's compile entry points");
  }
  // The handle stays open: the library compiles with it.
  Expected<NvrtcLibrary> lib = ask(version, numArchs, archs, path, origin);
  if (lib)
    lib->api = std::move(api);
  return lib;
}

std::string projectNvrtc12Dir() { return besideInstallRoot("lib/attnc/nvrtc-cu12"); }

std::vector<NvrtcLibrary> findNvrtcLibraries(std::vector<std::string> *problems) {
  std::vector<NvrtcLibrary> found;
  // The toolkit's NVRTC: the first candidate that loads.
  std::string tried;
  for (const std::string &path : toolkitCandidates()) {
    Expected<NvrtcLibrary> lib = probeNvrtcLibrary(path, "the CUDA toolkit");
    if (lib) {
      found.push_back(std::move(*lib));
      break;
    }
    tried += (tried.empty() ? "" : "; ") + lib.error();
  }
  if (found.empty() && problems)
    problems->push_back("no CUDA toolkit NVRTC could be loaded (set ATTNC_NVRTC to a "
                        "libnvrtc.so): " +
                        tried);
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

int lastCudaMajorTargeting(int sm) { return sm < 50 ? 11 : sm < 75 ? 12 : 0; }

const std::vector<NvrtcLibrary> &nvrtcLibraries() {
  static const std::vector<NvrtcLibrary> libs = findNvrtcLibraries();
  return libs;
}

Expected<const NvrtcLibrary *> chooseNvrtc(int sm, const std::vector<NvrtcLibrary> &libs) {
  if (!libs.empty() && libs[0].targets(sm))
    return &libs[0];
  const NvrtcLibrary *best = nullptr;
  for (const NvrtcLibrary &l : libs)
    if (l.targets(sm) && l.api &&
        (!best || l.major > best->major || (l.major == best->major && l.minor > best->minor)))
      best = &l;
  if (best)
    return best;
  const std::string arch = "sm_" + std::to_string(sm);
  std::string found;
  for (const NvrtcLibrary &l : libs)
    found += (found.empty() ? "" : ", ") + l.describe();
  const int lastMajor = lastCudaMajorTargeting(sm);
  if (lastMajor)
    return makeError(arch + " needs a CUDA " + std::to_string(lastMajor) + " NVRTC (CUDA " +
                     std::to_string(lastMajor + 1) + ".x dropped it); found " +
                     (found.empty() ? "none" : found) +
                     (lastMajor == 12 ? ". scripts/bootstrap.sh installs one into "
                                        ".deps/nvrtc-cu12 (PyPI's nvidia-cuda-nvrtc-cu12), or "
                                        "set ATTNC_NVRTC12 to a libnvrtc.so.12"
                                      : ""));
  std::string lists;
  for (const NvrtcLibrary &l : libs) {
    lists += (lists.empty() ? "" : "; ") + std::to_string(l.major) + "." + std::to_string(l.minor) +
             " supports";
    for (size_t i = 0; i < l.archs.size(); ++i)
      lists += (i ? ", sm_" : " sm_") + std::to_string(l.archs[i]);
  }
  return makeError(arch + " is not supported by NVRTC (" + (lists.empty() ? "none found" : lists) +
                   ")");
}

} // namespace attnc
