//===- NvrtcCompiler.h - CUDA C++ to CUBIN with NVRTC -----------*- C++ -*-===//
//
// Compiles generated CUDA C++ to CUBIN (SASS for one real architecture), not
// to PTX: PTX from a newer toolkit can fail to JIT on an older driver, while
// a CUBIN only needs a driver that knows the architecture.
//
// Every compile gets these options, in this order (then the caller's):
//
//   --gpu-architecture=sm_XX     real arch, so NVRTC emits a CUBIN
//   --std=c++17                  what the kernel headers are written in
//   -default-device              unannotated functions (the shared
//                                constexpr helpers of kernels/abi/attnc/abi/TileModel.h
//                                and kernels/abi/attnc/abi/KernelArgs.h) are device code
//   --ptxas-options=-v           when NvrtcOptions::ptxasVerbose (default),
//                                so the log reports registers, spills and
//                                shared memory per kernel
//   -I<dir> ...                  the caller's include dirs, in order, then
//                                the CUDA toolkit's include directory (for
//                                cuda_fp16.h, cuda_bf16.h, ...)
//
// No fast-math: the kernels' numerics are checked against fp64 references.
//
// Results are cached in a KernelCache keyed by the source, the in-memory
// headers, the contents of the caller's include directories, the options
// (sorted; include paths in order), the arch, which NVRTC compiled it
// (version and library: runtime/NvrtcLibraries.h picks the one that
// targets the arch) and the attnc version. A cached entry holds the CUBIN and the compile log, so
// resource usage is available on a cache hit too.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_NVRTCCOMPILER_H
#define ATTNC_RUNTIME_NVRTCCOMPILER_H

#include "runtime/Error.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace attnc {

class KernelCache;

/// Resource usage of one kernel (entry function), from ptxas's -v report.
struct KernelResources {
  std::string name;        ///< symbol name (unmangled for extern "C")
  std::string arch;        ///< "sm_80"
  int registers = -1;      ///< per thread; -1 when the log did not say
  int stackFrameBytes = 0; ///< per thread
  int spillStoreBytes = 0;
  int spillLoadBytes = 0;
  int staticSmemBytes = 0; ///< __shared__ arrays (dynamic smem comes on top)
  int constantBytes = 0;   ///< cmem[0]: parameters and driver constants

  bool spills() const { return spillStoreBytes > 0 || spillLoadBytes > 0; }
};

/// Parses ptxas's verbose log ("Compiling entry function", "Function
/// properties", "Used N registers, ... bytes smem") into one record per entry
/// function, in log order. Lines it does not know are ignored.
std::vector<KernelResources> parsePtxasLog(std::string_view log);

/// A real GPU architecture, "sm_80" or "sm_90a".
struct GpuArch {
  int sm = 0;         ///< 80 for sm_80
  std::string suffix; ///< "", "a" or "f"
  std::string str() const { return "sm_" + std::to_string(sm) + suffix; }
};

/// Parses "sm_XX[a|f]"; "compute_XX" and anything else is an error saying
/// that a CUBIN needs a real architecture.
Expected<GpuArch> parseGpuArch(std::string_view arch);

/// The architecture family name ("Volta", "Hopper"), or "" if unknown.
const char *gpuArchFamily(int sm);

/// Checks that NVRTC version `nvrtcMajor` can target `arch`, before any
/// compile: e.g. "sm_70 (Volta) needs a CUDA 12 NVRTC: CUDA 13.x dropped it".
/// With no version (the default), that one of this machine's NVRTCs
/// targets it (chooseNvrtc, whose error says what to install).
Status checkGpuArchSupported(std::string_view arch, int nvrtcMajor = 0);

/// Options of one compile.
struct NvrtcOptions {
  std::string arch = "sm_80";
  /// Extra NVRTC options, after the defaults (e.g. "-DATTNC_D=64",
  /// "-lineinfo", "--maxrregcount=128").
  std::vector<std::string> options;
  /// Searched in order, before the CUDA toolkit's include directory. Their
  /// contents are part of the cache key.
  std::vector<std::string> includeDirs;
  /// In-memory headers (include name, text), e.g. generated variant
  /// policies; they take precedence over files.
  std::vector<std::pair<std::string, std::string>> headers;
  /// Ask ptxas for its resource report (cheap; needed for resource checks).
  bool ptxasVerbose = true;
  /// Look up and store the result in the cache (when the compiler has one).
  bool useCache = true;
  /// Emit PTX for the virtual arch of `arch` (compute_70 for sm_70) instead
  /// of a CUBIN: the driver JITs it for the GPU present, which runs an
  /// older arch's code path (Volta's m8n8k4 and synchronous copies) on a
  /// newer GPU. ptxas does not run, so there is no resource report.
  bool ptx = false;
};

/// A compiled program.
struct Cubin {
  std::string programName;
  std::string arch;                     ///< "sm_80"
  std::string compiler;                 ///< which NVRTC: NvrtcLibrary::identity()
  std::string image;                    ///< CUBIN bytes, or PTX text with its NUL
  bool ptx = false;                     ///< image is PTX (NvrtcOptions::ptx)
  std::string log;                      ///< the full compiler log
  std::vector<KernelResources> kernels; ///< parsed from the log
  std::vector<std::string> options;     ///< as passed to NVRTC
  bool fromCache = false;
  std::string cacheKey;      ///< hex SHA-256
  double compileSeconds = 0; ///< 0 on a cache hit

  /// The resources of kernel `name`, or null.
  const KernelResources *kernel(std::string_view name) const;
};

class NvrtcCompiler {
public:
  /// `cache` (not owned) may be null: no caching.
  explicit NvrtcCompiler(KernelCache *cache = nullptr) : cache_(cache) {}

  /// Compiles `source` (named `programName` in diagnostics, e.g.
  /// "attnc_fwd_dense.cu"). Errors carry the program name, the arch, the
  /// full option list and the complete compiler log.
  Expected<Cubin> compile(const std::string &programName, const std::string &source,
                          const NvrtcOptions &options) const;

  /// The option list compile() passes to NVRTC for `options`.
  static std::vector<std::string> effectiveOptions(const NvrtcOptions &options);
  /// The loaded NVRTC library's version, "13.0".
  static std::string version();
  /// The loaded NVRTC library's major version.
  static int versionMajor();
  /// The version of the NVRTC that compiles for `sm` (chooseNvrtc: "12.9"
  /// for sm_70), or version() when none does.
  static std::string versionFor(int sm);
  /// The real architectures the loaded NVRTC can compile for (75, 80, ...).
  static std::vector<int> supportedArchs();
  /// The CUDA toolkit include directory added to every compile: the one
  /// found at configure time if it still exists, else $CUDA_HOME/include,
  /// $CUDA_PATH/include or /usr/local/cuda/include.
  static std::string toolkitIncludeDir();

private:
  KernelCache *cache_;
};

} // namespace attnc

#endif // ATTNC_RUNTIME_NVRTCCOMPILER_H
