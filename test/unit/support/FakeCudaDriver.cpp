//===- FakeCudaDriver.cpp - A libcuda.so.1 that records, for tests --------===//
//
// The runtime loads the CUDA driver with dlopen("libcuda.so.1"), so a test
// whose LD_LIBRARY_PATH names this library's folder gets this instead: two
// devices (sm_90, as an H100 reports itself), contexts with a per-thread
// current stack, device memory in host memory (copies and memsets really
// copy), streams, events, modules that load any image and launches that
// run nothing. Every call is logged with the context current when it was
// made and its stream, so tests can check what no GPU shows on a CPU
// machine: that attnc leaves its caller's current context alone, that a
// call enqueues everything on the caller's stream, and that nothing in it
// waits for the device or allocates outside the stream order.
//
// Only the runtime's own entry points (runtime/CudaDriver.h) are here.
// cuda.h maps several names to versioned symbols (cuMemAlloc ->
// cuMemAlloc_v2); defining them under cuda.h's names exports the symbols
// the runtime resolves.
//
//===----------------------------------------------------------------------===//
#include <cuda.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace {

struct FakeContext {
  int device;
};
struct FakeStream {
  int capturing = 0;
};
struct FakeModule {
  CUcontext ctx;
};
struct FakeFunction {
  std::string name;
};
struct Allocation {
  size_t bytes;
  int device;
  bool pooled;
};

struct State {
  std::mutex mutex;
  FakeContext primary[2] = {{0}, {1}};
  int primaryRefs[2] = {0, 0};
  std::map<CUdeviceptr, Allocation> memory;
  std::vector<std::string> log;
  std::set<FakeStream *> streams;
};
State &state() {
  static State s;
  return s;
}
thread_local std::vector<CUcontext> currentStack;

CUcontext current() { return currentStack.empty() ? nullptr : currentStack.back(); }

std::string ptrStr(const void *p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}

/// Appends "NAME ctx=C stream=S" to the log.
void record(const char *name, CUstream stream = nullptr, bool hasStream = false) {
  std::string line = name;
  line += " ctx=" + ptrStr(current());
  if (hasStream)
    line += " stream=" + ptrStr(stream);
  std::lock_guard<std::mutex> lock(state().mutex);
  state().log.push_back(line);
}

CUresult needContext() { return current() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT; }

CUresult allocate(CUdeviceptr *p, size_t bytes, bool pooled) {
  if (CUresult r = needContext())
    return r;
  void *m = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
  if (!m)
    return CUDA_ERROR_OUT_OF_MEMORY;
  *p = reinterpret_cast<CUdeviceptr>(m);
  std::lock_guard<std::mutex> lock(state().mutex);
  state().memory[*p] = {bytes, reinterpret_cast<FakeContext *>(current())->device, pooled};
  return CUDA_SUCCESS;
}

CUresult release(CUdeviceptr p) {
  std::lock_guard<std::mutex> lock(state().mutex);
  auto it = state().memory.find(p);
  if (it == state().memory.end())
    return CUDA_ERROR_INVALID_VALUE;
  std::free(reinterpret_cast<void *>(p));
  state().memory.erase(it);
  return CUDA_SUCCESS;
}

} // namespace

extern "C" {

//===-- Test hooks (not CUDA's) -------------------------------------------===//

/// The log so far, one "\n"-terminated line per call, in a buffer valid
/// until the next hook call; and clearing it.
__attribute__((visibility("default"))) const char *attnc_fake_log() {
  static std::string text;
  std::lock_guard<std::mutex> lock(state().mutex);
  text.clear();
  for (const std::string &l : state().log)
    text += l + "\n";
  return text.c_str();
}
__attribute__((visibility("default"))) void attnc_fake_clear_log() {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().log.clear();
}
/// Marks `stream` as being captured into a graph (or not).
__attribute__((visibility("default"))) void attnc_fake_set_capturing(CUstream stream, int on) {
  reinterpret_cast<FakeStream *>(stream)->capturing = on;
}
/// Live device allocations.
__attribute__((visibility("default"))) int attnc_fake_live_allocations() {
  std::lock_guard<std::mutex> lock(state().mutex);
  return int(state().memory.size());
}

//===-- Errors, initialisation, devices -----------------------------------===//

CUresult cuGetErrorString(CUresult r, const char **s) {
  *s = r == CUDA_SUCCESS ? "no error" : "fake driver error";
  return CUDA_SUCCESS;
}
CUresult cuGetErrorName(CUresult r, const char **s) {
  *s = r == CUDA_SUCCESS                 ? "CUDA_SUCCESS"
       : r == CUDA_ERROR_INVALID_CONTEXT ? "CUDA_ERROR_INVALID_CONTEXT"
                                         : "CUDA_ERROR_FAKE";
  return CUDA_SUCCESS;
}
CUresult cuInit(unsigned) { return CUDA_SUCCESS; }
// NVRTC (in the same process) asks the driver for its private tables; a
// driver without them is one NVRTC works without.
CUresult cuGetExportTable(const void **table, const CUuuid *) {
  *table = nullptr;
  return CUDA_ERROR_NOT_SUPPORTED;
}
CUresult cuDriverGetVersion(int *v) {
  *v = CUDA_VERSION;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGet(CUdevice *d, int ordinal) {
  if (ordinal < 0 || ordinal > 1)
    return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetCount(int *n) {
  *n = 2;
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetName(char *name, int len, CUdevice) {
  std::snprintf(name, size_t(len), "attnc fake GPU");
  return CUDA_SUCCESS;
}
CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice) {
  switch (a) {
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
    *v = 9;
    break;
  case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
    *v = 0;
    break;
  case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
    *v = 132;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
    *v = 1024;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
    *v = 48 * 1024;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
    *v = 227 * 1024;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR:
    *v = 228 * 1024;
    break;
  case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK:
    *v = 65536;
    break;
  default:
    *v = 0;
  }
  return CUDA_SUCCESS;
}
CUresult cuDeviceTotalMem(size_t *bytes, CUdevice) {
  *bytes = size_t(80) << 30;
  return CUDA_SUCCESS;
}

//===-- Contexts ----------------------------------------------------------===//

CUresult cuDevicePrimaryCtxRetain(CUcontext *ctx, CUdevice d) {
  record("cuDevicePrimaryCtxRetain");
  ++state().primaryRefs[d];
  *ctx = reinterpret_cast<CUcontext>(&state().primary[d]);
  return CUDA_SUCCESS;
}
CUresult cuDevicePrimaryCtxRelease(CUdevice d) {
  --state().primaryRefs[d];
  return CUDA_SUCCESS;
}
CUresult cuCtxSetCurrent(CUcontext ctx) {
  record("cuCtxSetCurrent");
  if (currentStack.empty())
    currentStack.push_back(ctx);
  else
    currentStack.back() = ctx;
  return CUDA_SUCCESS;
}
CUresult cuCtxGetCurrent(CUcontext *ctx) {
  *ctx = current();
  return CUDA_SUCCESS;
}
CUresult cuCtxPushCurrent(CUcontext ctx) {
  currentStack.push_back(ctx);
  return CUDA_SUCCESS;
}
CUresult cuCtxPopCurrent(CUcontext *ctx) {
  if (currentStack.empty())
    return CUDA_ERROR_INVALID_CONTEXT;
  if (ctx)
    *ctx = currentStack.back();
  currentStack.pop_back();
  return CUDA_SUCCESS;
}
CUresult cuCtxGetDevice(CUdevice *d) {
  if (CUresult r = needContext())
    return r;
  *d = reinterpret_cast<FakeContext *>(current())->device;
  return CUDA_SUCCESS;
}
CUresult cuCtxSynchronize() {
  record("cuCtxSynchronize");
  return needContext();
}

//===-- Modules and launches ----------------------------------------------===//

CUresult cuModuleLoadData(CUmodule *m, const void *) {
  record("cuModuleLoadData");
  if (CUresult r = needContext())
    return r;
  *m = reinterpret_cast<CUmodule>(new FakeModule{current()});
  return CUDA_SUCCESS;
}
CUresult cuModuleLoadDataEx(CUmodule *m, const void *image, unsigned, CUjit_option *, void **) {
  return cuModuleLoadData(m, image);
}
CUresult cuModuleUnload(CUmodule m) {
  record("cuModuleUnload");
  auto *fm = reinterpret_cast<FakeModule *>(m);
  if (current() != fm->ctx)
    return CUDA_ERROR_INVALID_CONTEXT;
  delete fm;
  return CUDA_SUCCESS;
}
CUresult cuModuleGetFunction(CUfunction *f, CUmodule, const char *name) {
  // Leaked on purpose: a module's functions live as long as the test.
  *f = reinterpret_cast<CUfunction>(new FakeFunction{name});
  return CUDA_SUCCESS;
}
CUresult cuModuleGetGlobal(CUdeviceptr *, size_t *, CUmodule, const char *) {
  return CUDA_ERROR_NOT_FOUND;
}
CUresult cuFuncSetAttribute(CUfunction, CUfunction_attribute, int) { return CUDA_SUCCESS; }
CUresult cuFuncGetAttribute(int *v, CUfunction_attribute, CUfunction) {
  *v = 0;
  return CUDA_SUCCESS;
}
CUresult cuLaunchKernel(CUfunction f, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, CUstream stream, void **, void **) {
  record(("cuLaunchKernel " + reinterpret_cast<FakeFunction *>(f)->name).c_str(), stream, true);
  return needContext();
}

//===-- Memory ------------------------------------------------------------===//

CUresult cuMemAlloc(CUdeviceptr *p, size_t bytes) {
  record("cuMemAlloc");
  return allocate(p, bytes, false);
}
CUresult cuMemFree(CUdeviceptr p) {
  record("cuMemFree");
  if (CUresult r = needContext())
    return r;
  return release(p);
}
CUresult cuMemAllocAsync(CUdeviceptr *p, size_t bytes, CUstream stream) {
  record("cuMemAllocAsync", stream, true);
  return allocate(p, bytes, true);
}
CUresult cuMemFreeAsync(CUdeviceptr p, CUstream stream) {
  record("cuMemFreeAsync", stream, true);
  if (CUresult r = needContext())
    return r;
  return release(p);
}
CUresult cuMemcpyHtoD(CUdeviceptr dst, const void *src, size_t n) {
  record("cuMemcpyHtoD");
  std::memcpy(reinterpret_cast<void *>(dst), src, n);
  return needContext();
}
CUresult cuMemcpyDtoH(void *dst, CUdeviceptr src, size_t n) {
  record("cuMemcpyDtoH");
  std::memcpy(dst, reinterpret_cast<const void *>(src), n);
  return needContext();
}
CUresult cuMemcpyHtoDAsync(CUdeviceptr dst, const void *src, size_t n, CUstream stream) {
  record("cuMemcpyHtoDAsync", stream, true);
  std::memcpy(reinterpret_cast<void *>(dst), src, n);
  return needContext();
}
CUresult cuMemcpyDtoHAsync(void *dst, CUdeviceptr src, size_t n, CUstream stream) {
  record("cuMemcpyDtoHAsync", stream, true);
  std::memcpy(dst, reinterpret_cast<const void *>(src), n);
  return needContext();
}
CUresult cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  record("cuMemcpyDtoD");
  std::memmove(reinterpret_cast<void *>(dst), reinterpret_cast<const void *>(src), n);
  return needContext();
}
CUresult cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream) {
  record("cuMemcpyDtoDAsync", stream, true);
  std::memmove(reinterpret_cast<void *>(dst), reinterpret_cast<const void *>(src), n);
  return needContext();
}
CUresult cuMemsetD8(CUdeviceptr dst, unsigned char v, size_t n) {
  record("cuMemsetD8");
  std::memset(reinterpret_cast<void *>(dst), v, n);
  return needContext();
}
CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream stream) {
  record("cuMemsetD8Async", stream, true);
  std::memset(reinterpret_cast<void *>(dst), v, n);
  return needContext();
}
CUresult cuMemGetInfo(size_t *freeBytes, size_t *total) {
  *freeBytes = size_t(79) << 30, *total = size_t(80) << 30;
  return needContext();
}
CUresult cuPointerGetAttribute(void *data, CUpointer_attribute a, CUdeviceptr p) {
  std::lock_guard<std::mutex> lock(state().mutex);
  auto it = state().memory.upper_bound(p);
  if (it == state().memory.begin())
    return CUDA_ERROR_INVALID_VALUE;
  --it;
  if (p >= it->first + it->second.bytes || a != CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL)
    return CUDA_ERROR_INVALID_VALUE;
  *static_cast<int *>(data) = it->second.device;
  return CUDA_SUCCESS;
}

//===-- Streams and events ------------------------------------------------===//

CUresult cuStreamCreate(CUstream *s, unsigned) {
  auto *fs = new FakeStream;
  std::lock_guard<std::mutex> lock(state().mutex);
  state().streams.insert(fs);
  *s = reinterpret_cast<CUstream>(fs);
  return CUDA_SUCCESS;
}
CUresult cuStreamDestroy(CUstream s) {
  std::lock_guard<std::mutex> lock(state().mutex);
  state().streams.erase(reinterpret_cast<FakeStream *>(s));
  delete reinterpret_cast<FakeStream *>(s);
  return CUDA_SUCCESS;
}
CUresult cuStreamSynchronize(CUstream s) {
  record("cuStreamSynchronize", s, true);
  return CUDA_SUCCESS;
}
CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status) {
  const bool on = s && reinterpret_cast<FakeStream *>(s)->capturing;
  *status = on ? CU_STREAM_CAPTURE_STATUS_ACTIVE : CU_STREAM_CAPTURE_STATUS_NONE;
  return CUDA_SUCCESS;
}
CUresult cuEventCreate(CUevent *e, unsigned) {
  if (CUresult r = needContext())
    return r;
  *e = reinterpret_cast<CUevent>(new int(0));
  return CUDA_SUCCESS;
}
CUresult cuEventDestroy(CUevent e) {
  delete reinterpret_cast<int *>(e);
  return CUDA_SUCCESS;
}
CUresult cuEventRecord(CUevent, CUstream s) {
  record("cuEventRecord", s, true);
  return needContext();
}
CUresult cuStreamWaitEvent(CUstream s, CUevent, unsigned) {
  record("cuStreamWaitEvent", s, true);
  return needContext();
}
CUresult cuEventSynchronize(CUevent) {
  record("cuEventSynchronize");
  return CUDA_SUCCESS;
}
CUresult cuEventElapsedTime(float *ms, CUevent, CUevent) {
  *ms = 0.5f;
  return CUDA_SUCCESS;
}

} // extern "C"
