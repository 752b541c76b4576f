//===- HostCompiler.cpp - Generated C++ to a loaded shared object ---------===//
#include "runtime/HostCompiler.h"

#include "runtime/CpuInfo.h"

#include "runtime/FileSystem.h"
#include "runtime/KernelCache.h"
#include "runtime/Subprocess.h"

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

namespace attnc {

namespace {

/// Splits on blanks; no quoting (like make's $(CXX)).
std::vector<std::string> splitWords(const std::string &s) {
  std::vector<std::string> words;
  std::istringstream in(s);
  for (std::string w; in >> w;)
    words.push_back(w);
  return words;
}

/// A file name made of the program name's safe characters.
std::string safeFileName(const std::string &name) {
  std::string out;
  for (char c : name)
    out += (isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.') ? c : '_';
  if (out.empty() || out[0] == '.')
    out = "tu" + out;
  return out;
}

/// Writes the whole buffer to `fd`.
bool writeAll(int fd, const std::string &bytes) {
  return fs::writeAll(fd, bytes.data(), bytes.size());
}

/// Keeps the OpenMP runtimes loaded for good once a generated object has
/// pulled one in. A parallel region leaves worker threads parked inside the
/// runtime; unloading it with the last generated object would pull the code
/// out from under them.
void pinOpenMpRuntimes() {
  for (const char *lib : {"libgomp.so.1", "libomp.so", "libomp.so.5", "libiomp5.so"})
    if (void *h = ::dlopen(lib, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE))
      ::dlclose(h); // NODELETE sticks; this only drops our extra reference.
}

/// Distinguishes the temporary files of successive loads in one process.
std::atomic<unsigned> loadCounter{0};

} // namespace

//===----------------------------------------------------------------------===//
// SharedObject
//===----------------------------------------------------------------------===//

Expected<SharedObject> SharedObject::open(const std::string &path) {
  // RTLD_LOCAL: two generated objects may define the same helper symbols.
  void *h = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = ::dlerror();
    return makeError("cannot load shared object '" + path +
                     "': " + (why ? why : "unknown dlopen error"));
  }
  pinOpenMpRuntimes();
  SharedObject so;
  so.handle_ = h;
  so.name_ = path;
  so.path_ = path;
  return so;
}

Expected<SharedObject> SharedObject::load(const std::string &image, const std::string &name) {
  std::string fail;
#ifdef MFD_CLOEXEC
  // An anonymous file: nothing on disk to clean up or to be swapped under us.
  int fd = ::memfd_create(safeFileName(name).c_str(), MFD_CLOEXEC);
  if (fd >= 0) {
    bool written = writeAll(fd, image);
    std::string path = "/proc/self/fd/" + std::to_string(fd);
    Expected<SharedObject> so =
        written ? open(path) : Expected<SharedObject>(makeError("write failed"));
    if (so) {
      // glibc recognises already-loaded objects by path: the descriptor stays
      // open while the object is loaded so no later memfd gets this path.
      so->fd_ = fd;
      so->name_ = name;
      return so;
    }
    ::close(fd);
    fail = so.error();
  }
#endif
  // No memfd (or /proc not mounted): a private temporary file, removed once
  // loaded.
  Expected<fs::TempDir> dir = fs::TempDir::create("attnc-so-");
  if (!dir)
    return makeError("cannot load " + name + ": " + dir.error() +
                     (fail.empty() ? "" : " (memfd: " + fail + ")"));
  std::string path = dir->path() + "/" + std::to_string(loadCounter++) + "-" + safeFileName(name);
  if (Status s = fs::writeFileAtomic(path, image, ".tmp-", 0755); !s)
    return makeError("cannot load " + name + ": " + s.error());
  Expected<SharedObject> so = open(path);
  if (!so)
    return makeError("cannot load " + name + ": " + so.error());
  so->name_ = name;
  return so;
}

SharedObject::SharedObject(SharedObject &&other) noexcept
    : handle_(other.handle_), fd_(other.fd_), name_(std::move(other.name_)),
      path_(std::move(other.path_)) {
  other.handle_ = nullptr;
  other.fd_ = -1;
}

SharedObject &SharedObject::operator=(SharedObject &&other) noexcept {
  if (this != &other) {
    reset();
    handle_ = other.handle_;
    fd_ = other.fd_;
    name_ = std::move(other.name_);
    path_ = std::move(other.path_);
    other.handle_ = nullptr;
    other.fd_ = -1;
  }
  return *this;
}

SharedObject::~SharedObject() { reset(); }

void SharedObject::reset() {
  if (handle_)
    ::dlclose(handle_);
  if (fd_ >= 0) {
    // dlclose may leave the object loaded (g++ makes objects with
    // STB_GNU_UNIQUE symbols undeletable). Its name is then still taken:
    // keep the descriptor open, so no later memfd reuses the number and
    // receives this stale object from dlopen.
    void *still = handle_ ? ::dlopen(path_.c_str(), RTLD_NOW | RTLD_NOLOAD) : nullptr;
    if (still)
      ::dlclose(still);
    else
      ::close(fd_);
  }
  handle_ = nullptr;
  fd_ = -1;
}

Expected<void *> SharedObject::symbol(const std::string &symbol) const {
  if (!handle_)
    return makeError("symbol '" + symbol + "' looked up in an unloaded object");
  ::dlerror(); // Clear: a symbol's value may legitimately be null.
  void *p = ::dlsym(handle_, symbol.c_str());
  if (const char *why = ::dlerror())
    return makeError("symbol '" + symbol + "' not found in " + name_ + " (" + why +
                     "); is it declared extern \"C\"?");
  return p;
}

//===----------------------------------------------------------------------===//
// HostCompiler
//===----------------------------------------------------------------------===//

std::vector<std::string> HostCompiler::defaultFlags() {
  return {"-O3", "-march=native", "-fPIC", "-shared", "-fopenmp", "-std=c++17"};
}

std::vector<std::string> HostCompiler::compilerCommand(const HostCompileOptions &options) {
  std::string cmd = options.compiler;
  if (cmd.empty())
    if (const char *cxx = std::getenv("CXX"); cxx && *cxx)
      cmd = cxx;
  std::vector<std::string> words = splitWords(cmd);
  if (words.empty())
    words = {"c++"};
  return words;
}

Expected<std::string> HostCompiler::compilerIdentity(const std::vector<std::string> &compiler) {
  static std::mutex mutex;
  static std::map<std::vector<std::string>, std::string> known;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = known.find(compiler);
    if (it != known.end())
      return it->second;
  }
  std::vector<std::string> argv = compiler;
  argv.push_back("--version");
  Expected<ProcessResult> r = runProcess(argv, 60);
  if (!r)
    return makeError("cannot run the host C++ compiler: " + r.error() +
                     " (set $CXX to a C++17 compiler)");
  if (!r->succeeded())
    return makeError("'" + formatCommand(argv) + "' failed (" + r->describe() + "):\n" + r->output);
  std::lock_guard<std::mutex> lock(mutex);
  known[compiler] = r->output;
  return r->output;
}

std::string HostCompiler::cpuIdentity() {
  static const std::string id = [] {
    const CpuInfo &cpu = CpuInfo::host();
    std::string out;
    const std::string flags = cpu.line("flags").empty() ? cpu.line("Features") // AArch64
                                                        : cpu.line("flags");
    for (const std::string &line : {cpu.line("vendor_id"), cpu.line("model name"), flags})
      if (!line.empty())
        out += line + "\n";
    struct utsname u;
    if (::uname(&u) == 0)
      out += std::string("machine: ") + u.machine + "\n";
    return out;
  }();
  return id;
}

Expected<SharedObjectImage> HostCompiler::compile(const std::string &programName,
                                                  const std::string &source,
                                                  const HostCompileOptions &o) const {
  SharedObjectImage out;
  out.programName = programName;
  std::vector<std::string> compiler = compilerCommand(o);
  Expected<std::string> identity = compilerIdentity(compiler);
  if (!identity)
    return makeError("cannot compile " + programName + ": " + identity.error());

  std::vector<std::string> flags = o.defaultFlags ? defaultFlags() : std::vector<std::string>{};
  // GCC turns inline functions' statics and template static members into
  // STB_GNU_UNIQUE symbols: process-wide despite RTLD_LOCAL (two generated
  // objects would share one instance) and never unloaded. Clang has no such
  // symbols and no such flag.
  if (o.defaultFlags && identity->find("Free Software Foundation") != std::string::npos)
    flags.push_back("-fno-gnu-unique");
  flags.insert(flags.end(), o.flags.begin(), o.flags.end());

  CacheKey key("so");
  key.add("compiler", formatCommand(compiler))
      .add("compiler-version", *identity)
      .add("cpu", cpuIdentity())
      .addSortedList("flags", flags)
      .addList("include-dirs", o.includeDirs);
  for (const std::string &dir : o.includeDirs)
    key.addDirectoryTree("include-tree", dir);
  key.add("program", programName).add("source", source);
  out.cacheKey = key.hex();

  KernelCache *cache = o.useCache ? cache_ : nullptr;
  if (cache)
    if (std::optional<std::string> payload = cache->lookup(key))
      if (Expected<std::vector<std::string>> blobs = KernelCache::unpackBlobs(*payload, 2)) {
        out.image = std::move((*blobs)[0]);
        out.log = std::move((*blobs)[1]);
        out.fromCache = true;
        return out;
      }

  Expected<fs::TempDir> dir = fs::TempDir::create("attnc-host-");
  if (!dir)
    return makeError("cannot compile " + programName + ": " + dir.error());
  std::string base = safeFileName(programName);
  if (base.size() < 4 || base.substr(base.size() - 4) != ".cpp")
    base += ".cpp";
  std::string srcPath = dir->path() + "/" + base;
  std::string soPath = dir->path() + "/" + base.substr(0, base.size() - 4) + ".so";
  if (Status s = fs::writeFileAtomic(srcPath, source); !s)
    return makeError("cannot compile " + programName + ": " + s.error());

  // Flags after the source so that -l libraries resolve its references.
  std::vector<std::string> argv = compiler;
  for (const std::string &inc : o.includeDirs)
    argv.push_back("-I" + inc);
  argv.insert(argv.end(), {"-o", soPath, srcPath});
  argv.insert(argv.end(), flags.begin(), flags.end());
  out.command = argv;

  Expected<ProcessResult> r = runProcess(argv, o.timeoutSeconds);
  if (!r)
    return makeError("cannot compile " + programName + ": " + r.error());
  out.log = r->output;
  out.compileSeconds = r->seconds;
  if (!r->succeeded()) {
    // Keep the source: the log's line numbers refer to it.
    dir->keep();
    return makeError("host compiler failed on " + programName + " (" + r->describe() +
                     ")\ncommand: " + formatCommand(argv) + "\nsource kept at " + srcPath +
                     "\nlog:\n" + (out.log.empty() ? std::string("(empty)") : out.log));
  }
  Expected<std::string> image = fs::readFile(soPath);
  if (!image)
    return makeError("host compiler produced no shared object for " + programName + ": " +
                     image.error() + "\ncommand: " + formatCommand(argv));
  out.image = std::move(*image);
  if (cache)
    cache->store(key, KernelCache::packBlobs({out.image, out.log}));
  return out;
}

Expected<SharedObject> HostCompiler::compileAndLoad(const std::string &programName,
                                                    const std::string &source,
                                                    const HostCompileOptions &options) const {
  Expected<SharedObjectImage> image = compile(programName, source, options);
  if (!image)
    return image.takeError();
  std::string name = programName;
  if (name.size() >= 4 && name.substr(name.size() - 4) == ".cpp")
    name.resize(name.size() - 4);
  return SharedObject::load(image->image, name + ".so");
}

} // namespace attnc
