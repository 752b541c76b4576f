//===- KernelHeaders.cpp - Where the kernel header tree is ----------------===//
#include "runtime/KernelHeaders.h"

#include "runtime/NvrtcCompiler.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <cstdlib>

namespace attnc {

namespace {

/// The file every complete tree has; its absence means a wrong root.
constexpr const char *kMarker = "/abi/attnc/abi/KernelArgs.h";

bool isFile(const std::string &path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string parentOf(const std::string &path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
}

/// The executable or shared object this function was linked into (dladdr:
/// the right answer for a library loaded by Python too, where
/// /proc/self/exe would name the interpreter).
std::string thisBinary() {
  Dl_info info{};
  const bool found =
      ::dladdr(reinterpret_cast<void *>(&thisBinary), &info) && info.dli_fname && *info.dli_fname;
  for (const char *candidate : {found ? info.dli_fname : "", "/proc/self/exe"}) {
    if (!*candidate)
      continue;
    if (char *real = ::realpath(candidate, nullptr)) {
      std::string path(real);
      std::free(real);
      return path;
    }
  }
  return "";
}

/// <prefix> of <prefix>/bin/attnc (or <build>/test/attnc-*-tests).
std::string rootOf(const std::string &binary) { return parentOf(parentOf(binary)); }

} // namespace

std::string installRoot() {
  const std::string binary = thisBinary();
  return binary.empty() ? "" : rootOf(binary);
}

std::string besideInstallRoot(const std::string &relative) {
  const std::string root = installRoot();
  return root.empty() ? "" : root + "/" + relative;
}

Expected<std::string> kernelHeaderRoot() {
  if (const char *env = std::getenv("ATTNC_KERNEL_INCLUDE"); env && *env) {
    std::string root(env);
    while (root.size() > 1 && root.back() == '/')
      root.pop_back();
    if (!isFile(root + kMarker))
      return makeError("$ATTNC_KERNEL_INCLUDE is '" + root +
                       "', which does not hold attnc's "
                       "kernel headers (no " +
                       root + kMarker +
                       "); point it at a "
                       "share/attnc/kernels folder of an installation, or unset it");
    return root;
  }
  const std::string binary = thisBinary();
  if (binary.empty())
    return makeError("cannot tell where this program is, so its kernel headers cannot be "
                     "found; set ATTNC_KERNEL_INCLUDE to <prefix>/share/attnc/kernels");
  // <dir>/bin/attnc or <build>/test/attnc-tests: <dir>/share/attnc/kernels.
  const std::string root = rootOf(binary) + "/share/attnc/kernels";
  if (!isFile(root + kMarker))
    return makeError("attnc's kernel headers are not at " + root + " (looked for " + root +
                     kMarker + ", next to " + binary +
                     "); reinstall attnc (cmake --install), "
                     "or set ATTNC_KERNEL_INCLUDE to the share/attnc/kernels folder");
  return root;
}

Expected<std::vector<std::string>> kernelIncludeDirs(KernelFamily family) {
  Expected<std::string> root = kernelHeaderRoot();
  if (!root)
    return root.takeError();
  std::vector<std::string> dirs;
  if (family == KernelFamily::CudaEmulator)
    dirs.push_back(*root + "/emulator");
  dirs.push_back(*root + "/abi");
  dirs.push_back(*root + "/common");
  dirs.push_back(*root + (family == KernelFamily::Cpu ? "/cpu" : "/cuda"));
  if (family == KernelFamily::CudaEmulator)
    dirs.push_back(NvrtcCompiler::toolkitIncludeDir()); // cuda_fp16.h
  return dirs;
}

} // namespace attnc
