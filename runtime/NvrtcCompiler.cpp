//===- NvrtcCompiler.cpp - CUDA C++ to CUBIN with NVRTC -------------------===//
#include "runtime/NvrtcCompiler.h"

#include "runtime/KernelCache.h"
#include "runtime/NvrtcLibraries.h"

#include <nvrtc.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#ifndef ATTNC_CUDA_INCLUDE_DIR
#define ATTNC_CUDA_INCLUDE_DIR "/usr/local/cuda/include"
#endif

namespace attnc {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

/// Leading integer of `s` (after blanks), or -1.
int leadingInt(std::string_view s) {
  s = trim(s);
  if (s.empty() || s[0] < '0' || s[0] > '9')
    return -1;
  long v = 0;
  for (char c : s) {
    if (c < '0' || c > '9')
      break;
    v = v * 10 + (c - '0');
    if (v > 1'000'000'000)
      return -1;
  }
  return int(v);
}

bool endsWith(std::string_view s, std::string_view tail) {
  return s.size() >= tail.size() && s.substr(s.size() - tail.size()) == tail;
}

/// Text between the first pair of single quotes after `from`.
std::string quoted(std::string_view line, size_t from) {
  size_t a = line.find('\'', from);
  if (a == std::string_view::npos)
    return "";
  size_t b = line.find('\'', a + 1);
  if (b == std::string_view::npos)
    return "";
  return std::string(line.substr(a + 1, b - a - 1));
}

struct FunctionProperties {
  int stack = 0, spillStores = 0, spillLoads = 0;
};

/// Splits "a, b, c" and hands each trimmed piece to `fn`.
template <typename Fn> void forEachItem(std::string_view s, Fn fn) {
  while (!s.empty()) {
    size_t comma = s.find(',');
    fn(trim(s.substr(0, comma)));
    if (comma == std::string_view::npos)
      break;
    s.remove_prefix(comma + 1);
  }
}

std::string joinOptions(const std::vector<std::string> &options) {
  std::string s;
  for (const std::string &o : options)
    s += (s.empty() ? "" : " ") + o;
  return s;
}

/// NVRTC programs are released on every path, by the library that made
/// them.
struct ProgramDeleter {
  const NvrtcApi *api;
  void operator()(nvrtcProgram *p) const {
    if (*p)
      api->destroyProgram(p);
    delete p;
  }
};

} // namespace

//===----------------------------------------------------------------------===//
// ptxas log
//===----------------------------------------------------------------------===//

std::vector<KernelResources> parsePtxasLog(std::string_view log) {
  std::vector<KernelResources> kernels;
  std::vector<std::pair<std::string, FunctionProperties>> props;
  std::string propsFor;
  KernelResources *current = nullptr;

  while (!log.empty()) {
    size_t nl = log.find('\n');
    std::string_view line = log.substr(0, nl);
    log.remove_prefix(nl == std::string_view::npos ? log.size() : nl + 1);

    if (line.rfind("ptxas", 0) != 0)
      continue;
    size_t colon = line.find(':');
    std::string_view body =
        colon == std::string_view::npos ? trim(line.substr(5)) : trim(line.substr(colon + 1));
    if (body.rfind("Compiling entry function", 0) == 0) {
      KernelResources k;
      k.name = quoted(body, 0);
      size_t forPos = body.find(" for ");
      if (forPos != std::string_view::npos)
        k.arch = quoted(body, forPos);
      kernels.push_back(std::move(k));
      current = &kernels.back();
    } else if (body.rfind("Function properties for", 0) == 0) {
      propsFor = std::string(trim(body.substr(strlen("Function properties for"))));
    } else if (colon == std::string_view::npos &&
               line.find("bytes stack frame") != std::string_view::npos) {
      // "ptxas  .  0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads"
      std::string_view items = line.substr(line.find('.') + 1);
      FunctionProperties p;
      forEachItem(items, [&](std::string_view item) {
        int n = leadingInt(item);
        if (endsWith(item, "bytes stack frame"))
          p.stack = n;
        else if (endsWith(item, "bytes spill stores"))
          p.spillStores = n;
        else if (endsWith(item, "bytes spill loads"))
          p.spillLoads = n;
      });
      props.emplace_back(propsFor, p);
    } else if (body.rfind("Used ", 0) == 0 && current) {
      // "Used 72 registers, used 0 barriers, 1024 bytes smem, 376 bytes cmem[0]"
      forEachItem(body, [&](std::string_view item) {
        if (item.rfind("Used ", 0) == 0 && endsWith(item, "registers"))
          current->registers = leadingInt(item.substr(5));
        else if (endsWith(item, "bytes smem"))
          current->staticSmemBytes = leadingInt(item);
        else if (endsWith(item, "bytes cmem[0]"))
          current->constantBytes = leadingInt(item);
      });
    }
  }
  // Properties are reported per function, entry or not; keep the entries'.
  for (KernelResources &k : kernels)
    for (const auto &[name, p] : props)
      if (name == k.name) {
        k.stackFrameBytes = p.stack;
        k.spillStoreBytes = p.spillStores;
        k.spillLoadBytes = p.spillLoads;
      }
  return kernels;
}

//===----------------------------------------------------------------------===//
// Architectures
//===----------------------------------------------------------------------===//

Expected<GpuArch> parseGpuArch(std::string_view arch) {
  auto bad = [&](const std::string &why) {
    return makeError("bad GPU architecture '" + std::string(arch) + "': " + why);
  };
  if (arch.rfind("compute_", 0) == 0)
    return bad("a virtual architecture; a CUBIN needs a real one, sm_" +
               std::string(arch.substr(8)));
  if (arch.rfind("sm_", 0) != 0)
    return bad("expected sm_XX, e.g. sm_80");
  std::string_view rest = arch.substr(3);
  size_t digits = 0;
  while (digits < rest.size() && rest[digits] >= '0' && rest[digits] <= '9')
    ++digits;
  std::string_view suffix = rest.substr(digits);
  if (digits < 2 || digits > 3 || (suffix != "" && suffix != "a" && suffix != "f"))
    return bad("expected sm_XX, sm_XXa or sm_XXf, e.g. sm_80 or sm_90a");
  GpuArch g;
  g.sm = leadingInt(rest);
  g.suffix = std::string(suffix);
  return g;
}

const char *gpuArchFamily(int sm) {
  if (sm >= 30 && sm < 40)
    return "Kepler";
  if (sm >= 50 && sm < 60)
    return "Maxwell";
  if (sm >= 60 && sm < 70)
    return "Pascal";
  if (sm == 70 || sm == 72)
    return "Volta";
  if (sm == 75)
    return "Turing";
  if (sm >= 80 && sm <= 87)
    return "Ampere";
  if (sm == 89)
    return "Ada";
  if (sm == 90)
    return "Hopper";
  if (sm >= 100 && sm < 130)
    return "Blackwell";
  return "";
}

Status checkGpuArchSupported(std::string_view arch, int nvrtcMajor) {
  Expected<GpuArch> g = parseGpuArch(arch);
  if (!g)
    return g.takeError();
  if (nvrtcMajor <= 0) {
    // This machine's NVRTCs: the one the compiler would choose for the arch
    // (a CUDA 12 one for Volta), or chooseNvrtc's message of what to install.
    Expected<const NvrtcLibrary *> lib = chooseNvrtc(g->sm, nvrtcLibraries());
    if (!lib)
      return lib.takeError();
    return {};
  }
  // Checked before NVRTC so the message says what to do, not just "invalid
  // value for --gpu-architecture".
  const int lastMajor = lastCudaMajorTargeting(g->sm);
  if (lastMajor && nvrtcMajor > lastMajor) {
    std::string family = gpuArchFamily(g->sm);
    return makeError(g->str() + (family.empty() ? "" : " (" + family + ")") + " needs a CUDA " +
                     std::to_string(lastMajor) + " NVRTC: CUDA " + std::to_string(lastMajor + 1) +
                     ".x dropped it");
  }
  return {};
}

//===----------------------------------------------------------------------===//
// NvrtcCompiler
//===----------------------------------------------------------------------===//

const KernelResources *Cubin::kernel(std::string_view name) const {
  for (const KernelResources &k : kernels)
    if (k.name == name)
      return &k;
  return nullptr;
}

std::string NvrtcCompiler::version() {
  const std::vector<NvrtcLibrary> &libs = nvrtcLibraries();
  if (libs.empty())
    return "unknown";
  return std::to_string(libs[0].major) + "." + std::to_string(libs[0].minor);
}

int NvrtcCompiler::versionMajor() {
  const std::vector<NvrtcLibrary> &libs = nvrtcLibraries();
  return libs.empty() ? 0 : libs[0].major;
}

std::string NvrtcCompiler::versionFor(int sm) {
  Expected<const NvrtcLibrary *> lib = chooseNvrtc(sm, nvrtcLibraries());
  return lib ? std::to_string((*lib)->major) + "." + std::to_string((*lib)->minor) : version();
}

std::vector<int> NvrtcCompiler::supportedArchs() {
  const std::vector<NvrtcLibrary> &libs = nvrtcLibraries();
  return libs.empty() ? std::vector<int>{} : libs[0].archs;
}

std::string NvrtcCompiler::toolkitIncludeDir() {
  namespace sfs = std::filesystem;
  std::error_code ec;
  auto hasCudaH = [&](const std::string &dir) {
    return !dir.empty() && sfs::exists(dir + "/cuda_fp16.h", ec);
  };
  if (hasCudaH(ATTNC_CUDA_INCLUDE_DIR))
    return ATTNC_CUDA_INCLUDE_DIR;
  for (const char *var : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *root = std::getenv(var); root && *root)
      if (hasCudaH(std::string(root) + "/include"))
        return std::string(root) + "/include";
  return "/usr/local/cuda/include";
}

namespace {

/// The fixed options of every compile (see NvrtcCompiler.h), without
/// include paths.
std::vector<std::string> baseOptions(const NvrtcOptions &o) {
  std::string arch = o.arch;
  if (o.ptx && arch.rfind("sm_", 0) == 0)
    arch = "compute_" + arch.substr(3);
  std::vector<std::string> opts = {"--gpu-architecture=" + arch, "--std=c++17", "-default-device"};
  if (o.ptxasVerbose && !o.ptx)
    opts.push_back("--ptxas-options=-v");
  return opts;
}

} // namespace

std::vector<std::string> NvrtcCompiler::effectiveOptions(const NvrtcOptions &o) {
  std::vector<std::string> opts = baseOptions(o);
  for (const std::string &dir : o.includeDirs)
    opts.push_back("-I" + dir);
  opts.push_back("-I" + toolkitIncludeDir());
  opts.insert(opts.end(), o.options.begin(), o.options.end());
  return opts;
}

Expected<Cubin> NvrtcCompiler::compile(const std::string &programName, const std::string &source,
                                       const NvrtcOptions &o) const {
  // The NVRTC for this arch: the linked one, or an older one that still
  // targets it (Volta: CUDA 12's, runtime/NvrtcLibraries.h). None: the
  // message says what to install, before any compile.
  Expected<GpuArch> arch = parseGpuArch(o.arch);
  if (!arch)
    return makeError("cannot compile " + programName + ": " + arch.error());
  Expected<const NvrtcLibrary *> chosen = chooseNvrtc(arch->sm, nvrtcLibraries());
  if (!chosen)
    return makeError("cannot compile " + programName + ": " + chosen.error());
  const NvrtcLibrary &lib = **chosen;
  const NvrtcApi &api = *lib.api;

  Cubin out;
  out.programName = programName;
  out.arch = o.arch;
  out.compiler = lib.identity();
  out.options = effectiveOptions(o);
  out.ptx = o.ptx;

  // Include paths are order-sensitive and hashed in order (with their
  // contents); the other options are sorted. The toolkit's headers are
  // covered by the NVRTC version.
  std::vector<std::string> flags = baseOptions(o);
  flags.insert(flags.end(), o.options.begin(), o.options.end());
  CacheKey key("cubin");
  key.add("compiler", lib.identity())
      .add("arch", o.arch)
      .addSortedList("options", flags)
      .addList("include-dirs", o.includeDirs);
  for (const std::string &dir : o.includeDirs)
    key.addDirectoryTree("include-tree", dir);
  for (const auto &[name, text] : o.headers)
    key.add("header-name", name).add("header-text", text);
  key.add("program", programName).add("source", source);
  out.cacheKey = key.hex();

  KernelCache *cache = o.useCache ? cache_ : nullptr;
  if (cache) {
    if (std::optional<std::string> payload = cache->lookup(key)) {
      Expected<std::vector<std::string>> blobs = KernelCache::unpackBlobs(*payload, 2);
      if (blobs) {
        out.image = std::move((*blobs)[0]);
        out.log = std::move((*blobs)[1]);
        out.ptx = o.ptx;
        out.kernels = parsePtxasLog(out.log);
        out.fromCache = true;
        return out;
      }
      // A well-formed entry with a payload we cannot read: recompile and
      // overwrite it.
    }
  }

  auto start = std::chrono::steady_clock::now();
  std::vector<const char *> headerTexts, headerNames;
  for (const auto &[name, text] : o.headers) {
    headerNames.push_back(name.c_str());
    headerTexts.push_back(text.c_str());
  }
  std::unique_ptr<nvrtcProgram, ProgramDeleter> prog(new nvrtcProgram(nullptr),
                                                     ProgramDeleter{&api});
  nvrtcResult r = api.createProgram(prog.get(), source.c_str(), programName.c_str(),
                                    int(o.headers.size()), headerTexts.data(), headerNames.data());
  std::string context = programName + " for " + o.arch + " by " + out.compiler +
                        "\noptions: " + joinOptions(out.options);
  if (r != NVRTC_SUCCESS)
    return makeError("NVRTC could not create program " + context + "\n" + api.getErrorString(r));
  std::vector<const char *> argv;
  for (const std::string &opt : out.options)
    argv.push_back(opt.c_str());
  r = api.compileProgram(*prog, int(argv.size()), argv.data());

  size_t logSize = 0;
  if (api.getProgramLogSize(*prog, &logSize) == NVRTC_SUCCESS && logSize > 1) {
    out.log.resize(logSize);
    if (api.getProgramLog(*prog, out.log.data()) != NVRTC_SUCCESS)
      out.log.clear();
    while (!out.log.empty() && out.log.back() == '\0')
      out.log.pop_back();
    // CUDA 12's NVRTC warns on every compile for Volta that it is
    // deprecated (and has no option to silence only that); attnc targets
    // Volta on purpose (docs/kernels.md), and the line would read as a
    // warning about the kernels.
    const std::string deprecated =
        "nvrtc: warning: Architectures prior to '<compute/sm>_75' are deprecated";
    if (size_t at = out.log.find(deprecated); at != std::string::npos) {
      const size_t end = out.log.find('\n', at);
      out.log.erase(at, end == std::string::npos ? std::string::npos : end + 1 - at);
    }
  }
  if (r != NVRTC_SUCCESS)
    return makeError("NVRTC failed to compile " + context + "\nerror: " + api.getErrorString(r) +
                     "\nlog:\n" + (out.log.empty() ? std::string("(empty)") : out.log));

  // A CUBIN, or with NvrtcOptions::ptx the PTX text (its size counts the
  // terminating NUL, which cuModuleLoadData needs).
  auto getSize = o.ptx ? api.getPTXSize : api.getCUBINSize;
  auto get = o.ptx ? api.getPTX : api.getCUBIN;
  const char *what = o.ptx ? "PTX" : "CUBIN";
  size_t imageSize = 0;
  r = getSize(*prog, &imageSize);
  if (r == NVRTC_SUCCESS && imageSize == 0)
    return makeError(std::string("NVRTC produced no ") + what + " for " + context +
                     (o.ptx ? "" : "\n(is the architecture a real sm_XX?)") + "\nlog:\n" + out.log);
  if (r == NVRTC_SUCCESS) {
    out.image.resize(imageSize);
    r = get(*prog, out.image.data());
  }
  if (r != NVRTC_SUCCESS)
    return makeError(std::string("NVRTC could not return the ") + what + " of " + context + "\n" +
                     api.getErrorString(r));
  out.compileSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.kernels = parsePtxasLog(out.log);
  if (cache)
    cache->store(key, KernelCache::packBlobs({out.image, out.log}));
  return out;
}

} // namespace attnc
