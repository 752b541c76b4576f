//===- Disassembler.cpp - A CUBIN's SASS, through nvdisasm ---------------===//
#include "runtime/perf/Disassembler.h"

#include "runtime/FileSystem.h"
#include "runtime/KernelHeaders.h"
#include "runtime/Subprocess.h"

#include <cstdlib>
#include <unistd.h>

namespace attnc::perf {

namespace {

bool executable(const std::string &path) {
  return !path.empty() && ::access(path.c_str(), X_OK) == 0;
}

} // namespace

Expected<std::string> findNvdisasm() {
  if (const char *env = std::getenv("ATTNC_NVDISASM"); env && *env) {
    if (!executable(env))
      return makeError(std::string("$ATTNC_NVDISASM is ") + env + ", which is not an executable");
    return std::string(env);
  }
  std::string beside = besideInstallRoot("lib/attnc/sass-tools/nvidia/cu13/bin/nvdisasm");
  if (executable(beside))
    return beside;
  if (const char *home = std::getenv("CUDA_HOME"); home && *home)
    if (executable(std::string(home) + "/bin/nvdisasm"))
      return std::string(home) + "/bin/nvdisasm";
  if (executable("/usr/local/cuda/bin/nvdisasm"))
    return std::string("/usr/local/cuda/bin/nvdisasm");
  for (const std::string &dir : fs::splitPathList(std::getenv("PATH") ? std::getenv("PATH") : ""))
    if (executable(dir + "/nvdisasm"))
      return dir + "/nvdisasm";
  return makeError("no nvdisasm: scripts/bootstrap.sh installs it (the PyPI wheel "
                   "nvidia-cuda-nvdisasm, into .deps/sass-tools); or set $ATTNC_NVDISASM");
}

Expected<std::string> disassemble(const std::string &cubin) {
  Expected<std::string> tool = findNvdisasm();
  if (!tool)
    return tool.takeError();
  Expected<fs::TempDir> dir = fs::TempDir::create("attnc-sass-");
  if (!dir)
    return dir.takeError();
  const std::string path = dir->path() + "/kernels.cubin";
  if (Status s = fs::writeFileAtomic(path, cubin); !s)
    return Error{s.error()};
  // stdout and stderr arrive together; the reader skips the warnings.
  Expected<ProcessResult> r = runProcess({*tool, "-c", "-hex", path}, 300, size_t(1) << 30);
  if (!r)
    return r.takeError();
  if (!r->succeeded()) {
    std::string said = r->output.substr(0, 2000);
    return makeError("nvdisasm failed (" + r->describe() + "): " + said);
  }
  return std::move(r->output);
}

} // namespace attnc::perf
