//===- HostCompiler.h - Generated C++ to a loaded shared object -*- C++ -*-===//
//
// The CPU backend's JIT: a generated translation unit is compiled by the
// system C++ compiler into a shared object, cached like CUBINs, and loaded
// with dlopen.
//
// The compiler is `HostCompileOptions::compiler`, else `$CXX`, else `c++`
// (split on blanks, so `CXX="ccache g++"` works; no shell quoting). It runs
// without a shell, with a time limit, and its output is the compile log.
// Default flags: -O3 -march=native -fPIC -shared -fopenmp -std=c++17, plus
// -fno-gnu-unique with GCC so that each generated object keeps its own
// inline statics and can be unloaded.
//
// The cache key holds the source, the flags (sorted; include dirs in order,
// with their contents), the compiler's `--version` output and, because of
// -march=native, the host CPU's model and feature flags: a cache directory
// shared between machines never hands one a shared object built for
// instructions it lacks.
//
// Loading copies the image to an anonymous memory file (memfd) and dlopens
// that, so a cached image is loaded from verified bytes (never from a file
// someone may have changed since) and a noexec $TMPDIR does not matter; it
// falls back to a private temporary file where memfd is unavailable.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_HOSTCOMPILER_H
#define ATTNC_RUNTIME_HOSTCOMPILER_H

#include "runtime/Error.h"

#include <string>
#include <vector>

namespace attnc {

class KernelCache;

struct HostCompileOptions {
  /// Compiler command; empty: $CXX, else "c++".
  std::string compiler;
  /// -I directories, searched in order; their contents are in the cache key.
  std::vector<std::string> includeDirs;
  /// Extra flags after the defaults and the source (so -l libraries link):
  /// "-DNAME=1", "-lopenblas", "-g".
  std::vector<std::string> flags;
  /// Use -O3 -march=native -fPIC -shared -fopenmp -std=c++17. When false the
  /// caller's flags must make a shared object themselves.
  bool defaultFlags = true;
  /// Kill the compiler after this long (<= 0: no limit).
  double timeoutSeconds = 600;
  /// Look up and store the result in the cache (when the compiler has one).
  bool useCache = true;
};

/// A compiled shared object, not yet loaded.
struct SharedObjectImage {
  std::string programName;
  std::string image;                ///< the .so file's bytes
  std::string log;                  ///< compiler output (warnings)
  std::vector<std::string> command; ///< the compiler's argv
  bool fromCache = false;
  std::string cacheKey;      ///< hex SHA-256
  double compileSeconds = 0; ///< 0 on a cache hit
};

/// A loaded shared object (move-only); dlclosed when destroyed. Function
/// pointers taken from it must not outlive it.
class SharedObject {
public:
  /// Loads an in-memory image; `name` appears in error messages.
  static Expected<SharedObject> load(const std::string &image, const std::string &name);
  /// dlopens a file.
  static Expected<SharedObject> open(const std::string &path);

  SharedObject(SharedObject &&other) noexcept;
  SharedObject &operator=(SharedObject &&other) noexcept;
  SharedObject(const SharedObject &) = delete;
  SharedObject &operator=(const SharedObject &) = delete;
  ~SharedObject();

  const std::string &name() const { return name_; }
  /// The address of `symbol`; the error names the symbol and the object.
  Expected<void *> symbol(const std::string &symbol) const;
  /// symbol() cast to a function pointer type, e.g.
  /// `so.function<int(const AttnFwdArgs *)>("attnc_cpu_fwd_dense")`.
  template <typename Fn> Expected<Fn *> function(const std::string &symbol) const {
    Expected<void *> p = this->symbol(symbol);
    if (!p)
      return p.takeError();
    return reinterpret_cast<Fn *>(*p);
  }

private:
  SharedObject() = default;
  void reset();
  void *handle_ = nullptr;
  int fd_ = -1; ///< the memfd backing the object, if any
  std::string name_;
  std::string path_; ///< what dlopen was given
};

class HostCompiler {
public:
  /// `cache` (not owned) may be null: no caching.
  explicit HostCompiler(KernelCache *cache = nullptr) : cache_(cache) {}

  /// Compiles `source` (written to a file named after `programName`, e.g.
  /// "attnc_cpu_dense.cpp") into a shared object. Errors carry the program
  /// name, the command line and the compiler's full output.
  Expected<SharedObjectImage> compile(const std::string &programName, const std::string &source,
                                      const HostCompileOptions &options) const;
  /// compile() then SharedObject::load().
  Expected<SharedObject> compileAndLoad(const std::string &programName, const std::string &source,
                                        const HostCompileOptions &options) const;

  /// The compiler command compile() would run: options.compiler, $CXX or c++.
  static std::vector<std::string> compilerCommand(const HostCompileOptions &options);
  /// -O3 -march=native -fPIC -shared -fopenmp -std=c++17.
  static std::vector<std::string> defaultFlags();
  /// `<compiler> --version` output, cached per process; the error says why
  /// the compiler cannot be run.
  static Expected<std::string> compilerIdentity(const std::vector<std::string> &compiler);
  /// The host CPU's vendor, model and feature flags (from /proc/cpuinfo).
  static std::string cpuIdentity();

private:
  KernelCache *cache_;
};

} // namespace attnc

#endif // ATTNC_RUNTIME_HOSTCOMPILER_H
