//===- Cublas.cpp - cuBLAS GEMMs loaded at run time -----------------------===//
#include "runtime/Cublas.h"
#include "runtime/KernelHeaders.h"
#include "runtime/NvrtcLibraries.h"

#include <cublas_api.h>

#include <climits>
#include <dlfcn.h>
#include <cstdlib>
#include <iterator>
#include <vector>

namespace attnc::cuda {

namespace {

// cublas_api.h overloads cublasGemmEx in C++ (an inline wrapper taking the
// old cudaDataType compute type), so decltype(&::name) would be ambiguous:
// the table names each entry point's type explicitly.
using CreateFn = cublasStatus_t (*)(cublasHandle_t *);
using DestroyFn = cublasStatus_t (*)(cublasHandle_t);
using SetStreamFn = cublasStatus_t (*)(cublasHandle_t, cudaStream_t);
using SetMathModeFn = cublasStatus_t (*)(cublasHandle_t, cublasMath_t);
using GemmExFn = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int,
                                    int, const void *, const void *, cudaDataType, int,
                                    const void *, cudaDataType, int, const void *, void *,
                                    cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
using GetStatusStringFn = const char *(*)(cublasStatus_t);

} // namespace

/// The entry points used: X(symbol, type, required). cublasGetStatusString
/// is missing from old cuBLAS versions; messages then carry the status name
/// only.
#define ATTNC_CUBLAS_FUNCTIONS(X)                                                                  \
  X(cublasCreate_v2, CreateFn, true)                                                               \
  X(cublasDestroy_v2, DestroyFn, true)                                                             \
  X(cublasSetStream_v2, SetStreamFn, true)                                                         \
  X(cublasSetMathMode, SetMathModeFn, true)                                                        \
  X(cublasGemmEx, GemmExFn, true)                                                                  \
  X(cublasGetStatusString, GetStatusStringFn, false)

struct Cublas::Api {
  void *library = nullptr;
#define ATTNC_DECLARE_MEMBER(name, type, required) type name = nullptr;
  ATTNC_CUBLAS_FUNCTIONS(ATTNC_DECLARE_MEMBER)
#undef ATTNC_DECLARE_MEMBER

  /// "CUBLAS_STATUS_INVALID_VALUE (an invalid value was used as an
  /// argument)"; the name is ours, the text cuBLAS's when it has one.
  std::string statusString(cublasStatus_t s) const {
    const char *name = nullptr;
    switch (s) {
    case CUBLAS_STATUS_SUCCESS:
      name = "CUBLAS_STATUS_SUCCESS";
      break;
    case CUBLAS_STATUS_NOT_INITIALIZED:
      name = "CUBLAS_STATUS_NOT_INITIALIZED";
      break;
    case CUBLAS_STATUS_ALLOC_FAILED:
      name = "CUBLAS_STATUS_ALLOC_FAILED";
      break;
    case CUBLAS_STATUS_INVALID_VALUE:
      name = "CUBLAS_STATUS_INVALID_VALUE";
      break;
    case CUBLAS_STATUS_ARCH_MISMATCH:
      name = "CUBLAS_STATUS_ARCH_MISMATCH";
      break;
    case CUBLAS_STATUS_MAPPING_ERROR:
      name = "CUBLAS_STATUS_MAPPING_ERROR";
      break;
    case CUBLAS_STATUS_EXECUTION_FAILED:
      name = "CUBLAS_STATUS_EXECUTION_FAILED";
      break;
    case CUBLAS_STATUS_INTERNAL_ERROR:
      name = "CUBLAS_STATUS_INTERNAL_ERROR";
      break;
    case CUBLAS_STATUS_NOT_SUPPORTED:
      name = "CUBLAS_STATUS_NOT_SUPPORTED";
      break;
    case CUBLAS_STATUS_LICENSE_ERROR:
      name = "CUBLAS_STATUS_LICENSE_ERROR";
      break;
    }
    std::string r = name ? name : "CUBLAS_STATUS " + std::to_string(int(s));
    if (cublasGetStatusString)
      if (const char *text = cublasGetStatusString(s); text && *text)
        r += std::string(" (") + text + ")";
    return r;
  }
};

namespace {

#define ATTNC_STRINGIFY_IMPL(x) #x
#define ATTNC_STRINGIFY(x) ATTNC_STRINGIFY_IMPL(x)

/// The libraries create() tries on Turing and newer, in order: CUDA 13's,
/// CUDA 12's, then whatever the unversioned development link points at.
const char *const kLibraries[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so"};

cublasComputeType_t computeType(GemmPrecision p) {
  switch (p) {
  case GemmPrecision::F32:
    return CUBLAS_COMPUTE_32F;
  case GemmPrecision::Tf32:
    return CUBLAS_COMPUTE_32F_FAST_TF32;
  case GemmPrecision::Bf16:
    return CUBLAS_COMPUTE_32F_FAST_16BF;
  case GemmPrecision::Fp16:
    return CUBLAS_COMPUTE_32F_FAST_16F;
  }
  return CUBLAS_COMPUTE_32F;
}

} // namespace

/// dlopens `library` and resolves the table; the handle is not created.
Expected<std::unique_ptr<Cublas::Api>> Cublas::open(const std::string &library) {
  void *lib = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = ::dlerror();
    return makeError(library +
                     " not found: cuBLAS is not installed or not on the "
                     "library path (" +
                     (why ? why : "dlopen failed") + ")");
  }
  auto api = std::make_unique<Cublas::Api>();
  api->library = lib;
  std::string missing;
#define ATTNC_RESOLVE(name, type, required)                                                        \
  api->name = reinterpret_cast<type>(::dlsym(lib, ATTNC_STRINGIFY(name)));                         \
  if (!api->name && required)                                                                      \
    missing += std::string(missing.empty() ? "" : ", ") + ATTNC_STRINGIFY(name);
  ATTNC_CUBLAS_FUNCTIONS(ATTNC_RESOLVE)
#undef ATTNC_RESOLVE
  if (!missing.empty()) {
    ::dlclose(lib);
    return makeError(library + " lacks " + missing +
                     ": cuBLAS is too old (attnc needs cuBLAS 11 or newer)");
  }
  return api;
}

//===----------------------------------------------------------------------===//
// Precision names and the row-major mapping
//===----------------------------------------------------------------------===//

const char *gemmPrecisionName(GemmPrecision p) {
  switch (p) {
  case GemmPrecision::F32:
    return "f32";
  case GemmPrecision::Tf32:
    return "tf32";
  case GemmPrecision::Bf16:
    return "bf16";
  case GemmPrecision::Fp16:
    return "fp16";
  }
  return "?";
}

Expected<GemmPrecision> parseGemmPrecision(std::string_view name) {
  for (GemmPrecision p :
       {GemmPrecision::F32, GemmPrecision::Tf32, GemmPrecision::Bf16, GemmPrecision::Fp16})
    if (name == gemmPrecisionName(p))
      return p;
  return makeError("unknown GEMM precision '" + std::string(name) +
                   "' (expected f32, tf32, bf16 or fp16)");
}

ColumnMajorGemm mapRowMajorGemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K) {
  auto atLeast1 = [](int64_t x) { return x < 1 ? int64_t(1) : x; };
  ColumnMajorGemm g;
  // Column-major C' = Cᵀ is [N, M] with leading dimension N.
  g.m = N;
  g.n = M;
  g.k = K;
  g.ldc = atLeast1(N);
  // First operand: op(B)ᵀ [N, K]. Row-major B [K, N] (tb false) is the
  // column-major [N, K] matrix op(B)ᵀ itself (ld N); row-major B [N, K]
  // (tb true) is column-major [K, N] = op(B), transposed by cuBLAS (ld K).
  g.transa = tb;
  g.lda = atLeast1(tb ? K : N);
  // Second operand: op(A)ᵀ [K, M]. Row-major A [M, K] (ta false) is
  // column-major [K, M] = op(A)ᵀ (ld K); row-major A [K, M] (ta true) is
  // column-major [M, K] = op(A), transposed by cuBLAS (ld M).
  g.transb = ta;
  g.ldb = atLeast1(ta ? M : K);
  g.swapped = true;
  return g;
}

//===----------------------------------------------------------------------===//
// Cublas
//===----------------------------------------------------------------------===//

Cublas::Cublas() = default;

Cublas::~Cublas() {
  if (handle_ && api_)
    api_->cublasDestroy_v2(static_cast<cublasHandle_t>(handle_));
  // No dlclose: cuBLAS registers process-wide state (atexit handlers,
  // CUDA runtime contexts) that must outlive the handle.
}

Status Cublas::probe(const std::string &library) {
  Expected<std::unique_ptr<Api>> api = open(library);
  if (!api)
    return api.takeError();
  return {};
}

Expected<std::unique_ptr<Cublas>> Cublas::load(const std::string &library) {
  Expected<std::unique_ptr<Api>> api = open(library);
  if (!api)
    return api.takeError();
  std::unique_ptr<Cublas> c(new Cublas());
  c->api_ = std::move(api).take();
  c->library_ = library;
  cublasHandle_t h = nullptr;
  if (cublasStatus_t s = c->api_->cublasCreate_v2(&h); s != CUBLAS_STATUS_SUCCESS)
    return makeError("cublasCreate_v2 (" + library + "): " + c->api_->statusString(s) +
                     (s == CUBLAS_STATUS_NOT_INITIALIZED
                          ? "; is there a GPU and an NVIDIA driver on this machine?"
                          : ""));
  c->handle_ = h;
  // Explicitly the default: CUBLAS_COMPUTE_32F then means fp32 FMAs, and
  // reduced precision only comes from the compute type of each call.
  if (cublasStatus_t s = c->api_->cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
      s != CUBLAS_STATUS_SUCCESS)
    return makeError("cublasSetMathMode (CUBLAS_DEFAULT_MATH): " + c->api_->statusString(s));
  return c;
}

/// Where cuBLAS may be when it is not on the loader's path: next to the
/// toolkit's NVRTC (runtime/NvrtcLibraries.h: the same toolkit),
/// $CUDA_HOME/lib64, and the default toolkit's lib64.
static std::vector<std::string> toolkitLibraryDirs() {
  std::vector<std::string> dirs;
  const std::vector<NvrtcLibrary> &nvrtc = nvrtcLibraries();
  if (!nvrtc.empty() && nvrtc[0].origin == "the CUDA toolkit")
    if (size_t slash = nvrtc[0].path.rfind('/'); slash != std::string::npos)
      dirs.push_back(nvrtc[0].path.substr(0, slash));
  if (const char *home = std::getenv("CUDA_HOME"); home && *home)
    dirs.push_back(std::string(home) + "/lib64");
  dirs.push_back("/usr/local/cuda/lib64");
  return dirs;
}

std::string projectCublas12Dir() { return besideInstallRoot("lib/attnc/cublas-cu12"); }

/// A cuBLAS 12 under `where`: the file itself, or libcublas.so.12 in it or
/// in its lib/, lib64/ or the wheel's nvidia/cublas/lib/.
static std::vector<std::string> cublas12Under(const std::string &where) {
  std::vector<std::string> r{where};
  for (const char *sub : {"", "/lib", "/lib64", "/nvidia/cublas/lib"})
    r.push_back(where + sub + "/libcublas.so.12");
  return r;
}

/// Volta: CUDA 13's cuBLAS loads and creates a handle there but has no
/// kernels for it, so only a cuBLAS 12 qualifies.
static bool needsCublas12(int sm) { return sm > 0 && lastCudaMajorTargeting(sm) == 12; }

std::vector<std::string> cublasCandidates(int sm) {
  std::vector<std::string> names, candidates;
  if (needsCublas12(sm)) {
    names = {"libcublas.so.12"};
    if (const char *env = std::getenv("ATTNC_CUBLAS12"); env && *env)
      candidates = cublas12Under(env);
    if (const std::string dir = projectCublas12Dir(); !dir.empty())
      candidates.push_back(dir + "/nvidia/cublas/lib/libcublas.so.12");
  } else {
    names.assign(std::begin(kLibraries), std::end(kLibraries));
  }
  // Bare names first (the loader's path), then the toolkit's directories.
  candidates.insert(candidates.end(), names.begin(), names.end());
  for (const std::string &dir : toolkitLibraryDirs())
    for (const std::string &lib : names)
      candidates.push_back(dir + "/" + lib);
  return candidates;
}

Expected<std::string> Cublas::find(int sm) {
  // The first library that loads decides: a cuBLAS that loads but cannot
  // create a handle (no GPU) is reported as such, not masked by trying an
  // older one.
  const std::vector<std::string> candidates = cublasCandidates(sm);
  std::string first;
  for (const std::string &lib : candidates) {
    Status s = probe(lib);
    if (s)
      return lib;
    if (first.empty())
      first = s.error();
  }
  std::string tried;
  for (size_t i = 1; i < candidates.size(); ++i)
    tried += std::string(i > 1 ? ", " : "") + candidates[i];
  std::string hint;
  if (needsCublas12(sm))
    hint = ". sm_" + std::to_string(sm) +
           " needs a cuBLAS 12 (CUDA 13's dropped Volta): scripts/bootstrap.sh --cublas12 "
           "installs PyPI's nvidia-cublas-cu12 into .deps/cublas-cu12, or set ATTNC_CUBLAS12 to "
           "a libcublas.so.12";
  return makeError(first + "; also tried " + tried + hint);
}

Expected<std::unique_ptr<Cublas>> Cublas::create(int sm) {
  Expected<std::string> lib = find(sm);
  if (!lib)
    return lib.takeError();
  return load(*lib);
}

Status Cublas::gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float *A,
                    const float *B, float *C, GemmPrecision p, CUstream stream, bool accumulate) {
  const std::string what = "cublasGemmEx (M=" + std::to_string(M) + ", N=" + std::to_string(N) +
                           ", K=" + std::to_string(K) + ", ta=" + (ta ? "1" : "0") +
                           ", tb=" + (tb ? "1" : "0") + ", " + gemmPrecisionName(p) + ")";
  if (M < 0 || N < 0 || K < 0)
    return makeError(what + ": negative dimension");
  if (M == 0 || N == 0)
    return {};
  const ColumnMajorGemm g = mapRowMajorGemm(ta, tb, M, N, K);
  for (int64_t x : {g.m, g.n, g.k, g.lda, g.ldb, g.ldc})
    if (x > INT_MAX)
      return makeError(what + ": a dimension exceeds cuBLAS's int range");
  cublasHandle_t h = static_cast<cublasHandle_t>(handle_);
  if (cublasStatus_t s = api_->cublasSetStream_v2(h, stream); s != CUBLAS_STATUS_SUCCESS)
    return makeError("cublasSetStream_v2: " + api_->statusString(s));
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const void *first = g.swapped ? static_cast<const void *>(B) : A;
  const void *second = g.swapped ? static_cast<const void *>(A) : B;
  cublasStatus_t s = api_->cublasGemmEx(
      h, g.transa ? CUBLAS_OP_T : CUBLAS_OP_N, g.transb ? CUBLAS_OP_T : CUBLAS_OP_N, int(g.m),
      int(g.n), int(g.k), &alpha, first, CUDA_R_32F, int(g.lda), second, CUDA_R_32F, int(g.ldb),
      &beta, C, CUDA_R_32F, int(g.ldc), computeType(p), CUBLAS_GEMM_DEFAULT);
  if (s != CUBLAS_STATUS_SUCCESS)
    return makeError(what + ": " + api_->statusString(s));
  return {};
}

} // namespace attnc::cuda
