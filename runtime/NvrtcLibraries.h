//===- NvrtcLibraries.h - The NVRTC libraries this machine has -*- C++ -*-===//
//
// One NVRTC cannot compile for every GPU: CUDA 13's dropped Volta (sm_70,
// sm_72) and older, which a CUDA 12 NVRTC still targets. This
// finds the NVRTC libraries a machine has and what each can target, by
// loading each with dlopen (RTLD_LOCAL, so two versions live side by side)
// and asking it (nvrtcVersion, nvrtcGetSupportedArchs):
//
//   - the toolkit's: $ATTNC_NVRTC, else the toolkit's library folder at
//     configure time, $CUDA_HOME/lib64, /usr/local/cuda/lib64, then the
//     loader's search (the runtime does not link NVRTC);
//   - $ATTNC_NVRTC12: a libnvrtc.so.12 file, or a folder holding one
//     (lib/ and nvidia/cuda_nvrtc/lib/ below it are searched too);
//   - the project's own CUDA 12 NVRTC, which scripts/bootstrap.sh installs
//     from the nvidia-cuda-nvrtc-cu12 wheel into .deps/nvrtc-cu12 of the
//     source tree (fetched at set-up, never at run time).
//
// NvrtcCompiler compiles each arch with the toolkit's NVRTC when it targets
// that arch, else with the newest one found that does (chooseNvrtc), and
// records which in the CUBIN and the cache key. `attnc-rt info` lists
// them.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_NVRTCLIBRARIES_H
#define ATTNC_RUNTIME_NVRTCLIBRARIES_H

#include "runtime/Error.h"

#include <nvrtc.h>

#include <memory>
#include <string>
#include <vector>

namespace attnc {

/// The NVRTC entry points a compile calls, from one library (NVRTC's C API
/// is stable across versions).
struct NvrtcApi {
  nvrtcResult (*createProgram)(nvrtcProgram *, const char *, const char *, int, const char *const *,
                               const char *const *);
  nvrtcResult (*compileProgram)(nvrtcProgram, int, const char *const *);
  nvrtcResult (*getProgramLogSize)(nvrtcProgram, size_t *);
  nvrtcResult (*getProgramLog)(nvrtcProgram, char *);
  nvrtcResult (*getCUBINSize)(nvrtcProgram, size_t *);
  nvrtcResult (*getCUBIN)(nvrtcProgram, char *);
  nvrtcResult (*getPTXSize)(nvrtcProgram, size_t *); ///< after a compute_XX compile
  nvrtcResult (*getPTX)(nvrtcProgram, char *);
  nvrtcResult (*destroyProgram)(nvrtcProgram *);
  const char *(*getErrorString)(nvrtcResult);
};

/// One NVRTC library and what it can target.
struct NvrtcLibrary {
  std::string path;   ///< as loaded
  std::string origin; ///< "the CUDA toolkit", "$ATTNC_NVRTC12", ".deps/nvrtc-cu12"
  int major = 0, minor = 0;
  std::vector<int> archs;              ///< SM versions, e.g. 70, 75, ...
  std::shared_ptr<const NvrtcApi> api; ///< to compile with it
  bool targets(int sm) const;
  /// "NVRTC 12.9 (.deps/nvrtc-cu12 ...: /path/libnvrtc.so.12)": which
  /// compiler made a CUBIN, for messages and the kernel cache's key.
  std::string identity() const;
  /// "12.9 (sm_50 ... sm_121)"
  std::string describe() const;
};

/// The NVRTC library at `path`, asked for its version and archs. Errors:
/// not loadable, not an NVRTC.
Expected<NvrtcLibrary> probeNvrtcLibrary(const std::string &path, const std::string &origin);

/// Every NVRTC this machine has, the toolkit's first; `problems` gets a
/// line for each candidate that was named but could not be used.
std::vector<NvrtcLibrary> findNvrtcLibraries(std::vector<std::string> *problems = nullptr);

/// Where a binary looks for the CUDA 12 NVRTC beside it:
/// <installRoot>/lib/attnc/nvrtc-cu12, which the build tree links to the
/// .deps/nvrtc-cu12 that scripts/bootstrap.sh fills ("" when the binary
/// cannot tell where it is).
std::string projectNvrtc12Dir();

/// The last CUDA major version whose NVRTC still targets `sm` (11 before
/// Maxwell, 12 before Turing), 0 when current ones do.
int lastCudaMajorTargeting(int sm);

/// findNvrtcLibraries(), once per process.
const std::vector<NvrtcLibrary> &nvrtcLibraries();

/// The library that compiles for `sm` among `libs`: the first (the
/// toolkit's) when it targets sm, else the newest that does. None: an
/// error saying which CUDA version still targets sm and how to get it.
Expected<const NvrtcLibrary *> chooseNvrtc(int sm, const std::vector<NvrtcLibrary> &libs);

} // namespace attnc

#endif // ATTNC_RUNTIME_NVRTCLIBRARIES_H
