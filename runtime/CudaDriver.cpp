//===- CudaDriver.cpp - CUDA driver API loaded at run time ----------------===//
#include "runtime/CudaDriver.h"

#include "runtime/Version.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <mutex>

namespace attnc::cuda {

namespace {

// Two levels so the argument is macro-expanded first: the string is the
// versioned symbol name cuda.h maps to ("cuMemAlloc_v2").
#define ATTNC_STRINGIFY_IMPL(x) #x
#define ATTNC_STRINGIFY(x) ATTNC_STRINGIFY_IMPL(x)

/// The process-wide driver or the reason there is none, computed once.
struct ProcessDriver {
  std::unique_ptr<Driver> driver;
  std::string error;
};

const ProcessDriver &processDriver() {
  static ProcessDriver pd = [] {
    ProcessDriver p;
    Expected<std::unique_ptr<Driver>> d = Driver::load("libcuda.so.1");
    if (d)
      p.driver = std::move(d).take();
    else
      p.error = d.error();
    return p;
  }();
  return pd;
}

/// The driver for the wrappers below; they are only reachable after a
/// successful get() (every object is created through it).
const Driver &drv() { return *processDriver().driver; }

std::string dimStr(Dim3 d) {
  return std::to_string(d.x) + "x" + std::to_string(d.y) + "x" + std::to_string(d.z);
}

} // namespace

//===----------------------------------------------------------------------===//
// Driver
//===----------------------------------------------------------------------===//

Expected<std::unique_ptr<Driver>> Driver::load(const std::string &library) {
  void *lib = ::dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *why = ::dlerror();
    return makeError(library + " not found: no NVIDIA driver on this machine (" +
                     (why ? why : "dlopen failed") + ")");
  }
  std::unique_ptr<Driver> d(new Driver());
  d->library_ = lib;
  std::string missing;
#define ATTNC_RESOLVE(name)                                                                        \
  d->name = reinterpret_cast<decltype(d->name)>(::dlsym(lib, ATTNC_STRINGIFY(name)));              \
  if (!d->name)                                                                                    \
    missing += std::string(missing.empty() ? "" : ", ") + ATTNC_STRINGIFY(name);
  ATTNC_CUDA_DRIVER_FUNCTIONS(ATTNC_RESOLVE)
#undef ATTNC_RESOLVE
  if (!missing.empty())
    return makeError(library + " lacks " + missing + ": the NVIDIA driver is older than the CUDA " +
                     cudaToolkitVersion() + " headers attnc was built with; update the driver");
  if (CUresult r = d->cuInit(0); r != CUDA_SUCCESS)
    return makeError("the NVIDIA driver failed to initialise (cuInit): " + d->errorString(r));
  if (CUresult r = d->cuDriverGetVersion(&d->version_); r != CUDA_SUCCESS)
    return makeError("cuDriverGetVersion: " + d->errorString(r));
  return d;
}

Expected<const Driver *> Driver::get() {
  const ProcessDriver &pd = processDriver();
  if (!pd.driver)
    return makeError(pd.error);
  return static_cast<const Driver *>(pd.driver.get());
}

Status Driver::available() {
  Expected<const Driver *> d = get();
  if (!d)
    return d.takeError();
  return {};
}

Driver::~Driver() {
  // Deliberately no dlclose: the process-wide driver lives until exit, and
  // unloading libcuda under live contexts (or atexit handlers) crashes.
}

std::string Driver::versionString() const {
  return std::to_string(version_ / 1000) + "." + std::to_string((version_ % 1000) / 10);
}

std::string Driver::errorString(CUresult r) const {
  const char *name = nullptr, *text = nullptr;
  if (cuGetErrorName)
    cuGetErrorName(r, &name);
  if (cuGetErrorString)
    cuGetErrorString(r, &text);
  std::string s = name ? name : "CUDA error " + std::to_string(int(r));
  if (text)
    s += std::string(" (") + text + ")";
  return s;
}

Status Driver::check(CUresult r, const std::string &what) const {
  if (r == CUDA_SUCCESS)
    return {};
  return makeError(what + ": " + errorString(r));
}

//===----------------------------------------------------------------------===//
// Devices and contexts
//===----------------------------------------------------------------------===//

std::string DeviceInfo::arch() const { return "sm_" + std::to_string(ccMajor * 10 + ccMinor); }

std::string DeviceInfo::describe() const {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s (%s, %d SMs, %.1f GiB, %d KiB smem/block)", name.c_str(),
                arch().c_str(), smCount, double(totalMemoryBytes) / double(1ull << 30),
                maxSmemPerBlockOptin / 1024);
  return buf;
}

Expected<int> deviceCount() {
  Expected<const Driver *> d = Driver::get();
  if (!d)
    return d.takeError();
  int n = 0;
  if (Status s = (*d)->check((*d)->cuDeviceGetCount(&n), "cuDeviceGetCount"); !s)
    return s.takeError();
  return n;
}

Expected<DeviceInfo> queryDevice(int ordinal) {
  Expected<const Driver *> dp = Driver::get();
  if (!dp)
    return dp.takeError();
  const Driver &d = **dp;
  std::string where = "device " + std::to_string(ordinal);
  CUdevice dev;
  if (Status s = d.check(d.cuDeviceGet(&dev, ordinal), "cuDeviceGet(" + where + ")"); !s)
    return s.takeError();
  DeviceInfo info;
  info.ordinal = ordinal;
  char name[256] = {};
  if (Status s =
          d.check(d.cuDeviceGetName(name, sizeof(name) - 1, dev), "cuDeviceGetName(" + where + ")");
      !s)
    return s.takeError();
  info.name = name;
  if (Status s = d.check(d.cuDeviceTotalMem(&info.totalMemoryBytes, dev),
                         "cuDeviceTotalMem(" + where + ")");
      !s)
    return s.takeError();
  struct {
    CUdevice_attribute attr;
    int *out;
    const char *what;
  } attrs[] = {
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &info.ccMajor, "compute capability"},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &info.ccMinor, "compute capability"},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &info.smCount, "SM count"},
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, &info.maxThreadsPerBlock, "threads/block"},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, &info.maxSmemPerBlock, "smem/block"},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &info.maxSmemPerBlockOptin,
       "opt-in smem/block"},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, &info.maxSmemPerSm, "smem/SM"},
      {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, &info.maxRegistersPerBlock, "registers/block"},
  };
  for (auto &a : attrs)
    if (Status s = d.check(d.cuDeviceGetAttribute(a.out, a.attr, dev),
                           std::string("cuDeviceGetAttribute(") + a.what + ", " + where + ")");
        !s)
      return s.takeError();
  return info;
}

Expected<int> processDevice() {
  Expected<int> count = deviceCount();
  if (!count)
    return count.takeError();
  if (*count == 0)
    return makeError("no CUDA device: the driver sees none");
  for (const char *var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char *v = std::getenv(var); v && *v) {
      char *end = nullptr;
      const long local = std::strtol(v, &end, 10);
      if (*end || local < 0)
        return makeError(std::string(var) + "=" + v + ": not a local rank");
      return int(local % *count);
    }
  return 0;
}

Expected<int> pointerDevice(const void *p) {
  Expected<const Driver *> dp = Driver::get();
  if (!dp)
    return dp.takeError();
  const Driver &d = **dp;
  int ordinal = -1;
  CUresult r = d.cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                       reinterpret_cast<CUdeviceptr>(p));
  if (r != CUDA_SUCCESS || ordinal < 0)
    return makeError("not CUDA device memory (" + d.errorString(r) + ")");
  return ordinal;
}

Expected<Context> Context::create(int ordinal) {
  Expected<DeviceInfo> info = queryDevice(ordinal);
  if (!info)
    return info.takeError();
  const Driver &d = drv();
  Context c;
  c.device_ = std::move(*info);
  std::string where = "device " + std::to_string(ordinal) + " (" + c.device_.name + ")";
  if (Status s = d.check(d.cuDeviceGet(&c.dev_, ordinal), "cuDeviceGet"); !s)
    return s.takeError();
  if (Status s = d.check(d.cuDevicePrimaryCtxRetain(&c.ctx_, c.dev_),
                         "cuDevicePrimaryCtxRetain(" + where + ")");
      !s)
    return s.takeError();
  return c;
}

Expected<ContextScope> ContextScope::enter(CUcontext ctx) {
  const Driver &d = drv();
  CUcontext current = nullptr;
  if (Status s = d.check(d.cuCtxGetCurrent(&current), "cuCtxGetCurrent"); !s)
    return s.takeError();
  ContextScope scope;
  if (current == ctx)
    return scope;
  if (Status s = d.check(d.cuCtxPushCurrent(ctx), "cuCtxPushCurrent"); !s)
    return s.takeError();
  scope.pushed_ = true;
  return scope;
}

ContextScope::~ContextScope() {
  if (pushed_) {
    CUcontext popped = nullptr;
    (void)drv().cuCtxPopCurrent(&popped);
  }
}

Context::Context(Context &&other) noexcept
    : ctx_(other.ctx_), dev_(other.dev_), device_(std::move(other.device_)) {
  other.ctx_ = nullptr;
}

Context &Context::operator=(Context &&other) noexcept {
  if (this != &other) {
    if (ctx_)
      drv().cuDevicePrimaryCtxRelease(dev_);
    ctx_ = other.ctx_;
    dev_ = other.dev_;
    device_ = std::move(other.device_);
    other.ctx_ = nullptr;
  }
  return *this;
}

Context::~Context() {
  if (ctx_)
    drv().cuDevicePrimaryCtxRelease(dev_);
}

Status Context::makeCurrent() const {
  return drv().check(drv().cuCtxSetCurrent(ctx_),
                     "cuCtxSetCurrent(device " + std::to_string(device_.ordinal) + ")");
}

Expected<std::pair<size_t, size_t>> Context::memoryInfo() const {
  size_t freeBytes = 0, totalBytes = 0;
  if (Status s = drv().check(drv().cuMemGetInfo(&freeBytes, &totalBytes), "cuMemGetInfo"); !s)
    return s.takeError();
  return std::make_pair(freeBytes, totalBytes);
}

Status Context::synchronize() const {
  return drv().check(drv().cuCtxSynchronize(), "cuCtxSynchronize");
}

//===----------------------------------------------------------------------===//
// Modules and launches
//===----------------------------------------------------------------------===//

Expected<Module> Module::load(const std::string &image, const std::string &name, bool ptx) {
  Expected<const Driver *> d = Driver::get();
  if (!d)
    return d.takeError();
  Module m;
  m.name_ = name;
  if (Status s = (*d)->check((*d)->cuCtxGetCurrent(&m.ctx_), "cuCtxGetCurrent"); !s)
    return s.takeError();
  if (!m.ctx_)
    return makeError("cannot load module " + name + ": no CUDA context is current");
  CUresult r;
  std::string jitLog;
  if (ptx) {
    // The driver's JIT reports what it rejects in a log buffer.
    jitLog.assign(16 * 1024, '\0');
    CUjit_option keys[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void *values[] = {jitLog.data(), reinterpret_cast<void *>(uintptr_t(jitLog.size()))};
    r = (*d)->cuModuleLoadDataEx(&m.module_, image.c_str(), 2, keys, values);
    jitLog.resize(std::strlen(jitLog.c_str()));
  } else {
    r = (*d)->cuModuleLoadData(&m.module_, image.data());
  }
  if (r != CUDA_SUCCESS) {
    std::string msg = "cannot load module " + name + " (" + std::to_string(image.size()) +
                      (ptx ? "-byte PTX" : "-byte CUBIN") + "): " + (*d)->errorString(r);
    if (r == CUDA_ERROR_NO_BINARY_FOR_GPU || r == CUDA_ERROR_INVALID_IMAGE ||
        r == CUDA_ERROR_UNSUPPORTED_PTX_VERSION)
      msg += "; was it compiled for this GPU's arch, with a CUDA no newer "
             "than the driver (" +
             (*d)->versionString() + ")?";
    if (!jitLog.empty())
      msg += "\nJIT log:\n" + jitLog;
    return makeError(msg);
  }
  return m;
}

namespace {
/// Unloads `m` in its own context (cuModuleUnload acts on the current one).
void unload(CUmodule m, CUcontext ctx) {
  if (!m)
    return;
  Expected<ContextScope> scope = ContextScope::enter(ctx);
  (void)drv().cuModuleUnload(m);
}
} // namespace

Module::Module(Module &&other) noexcept
    : module_(other.module_), ctx_(other.ctx_), name_(std::move(other.name_)) {
  other.module_ = nullptr;
}

Module &Module::operator=(Module &&other) noexcept {
  if (this != &other) {
    unload(module_, ctx_);
    module_ = other.module_;
    ctx_ = other.ctx_;
    name_ = std::move(other.name_);
    other.module_ = nullptr;
  }
  return *this;
}

Module::~Module() { unload(module_, ctx_); }

Expected<Kernel> Module::kernel(const std::string &name) const {
  Kernel k;
  k.name = name;
  k.module = name_;
  k.context = ctx_;
  CUresult r = drv().cuModuleGetFunction(&k.function, module_, name.c_str());
  if (r != CUDA_SUCCESS)
    return makeError("kernel '" + name + "' not found in module " + name_ + ": " +
                     drv().errorString(r) + "; is it extern \"C\" __global__?");
  return k;
}

Expected<std::pair<CUdeviceptr, size_t>> Module::global(const std::string &name) const {
  CUdeviceptr p = 0;
  size_t bytes = 0;
  CUresult r = drv().cuModuleGetGlobal(&p, &bytes, module_, name.c_str());
  if (r != CUDA_SUCCESS)
    return makeError("global '" + name + "' not found in module " + name_ + ": " +
                     drv().errorString(r));
  return std::make_pair(p, bytes);
}

Status launchKernel(Kernel &kernel, Dim3 grid, Dim3 block, size_t dynamicSmem, CUstream stream,
                    const void *args) {
  Expected<const Driver *> dp = Driver::get();
  if (!dp)
    return dp.takeError();
  const Driver &d = **dp;
  Expected<ContextScope> scope = ContextScope::enter(kernel.context);
  if (!scope)
    return makeError("kernel " + kernel.name + ": " + scope.error());
  std::string shape = " (grid " + dimStr(grid) + ", block " + dimStr(block) + ", " +
                      std::to_string(dynamicSmem) + " B dynamic smem)";
  if (dynamicSmem > kernel.dynamicSmemLimit) {
    // Kernels may only use more than 48 KiB after opting in, per function.
    CUresult r = d.cuFuncSetAttribute(
        kernel.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, int(dynamicSmem));
    if (r != CUDA_SUCCESS) {
      std::string limit;
      CUdevice dev;
      int optin = 0, staticSmem = 0;
      if (d.cuCtxGetDevice(&dev) == CUDA_SUCCESS &&
          d.cuDeviceGetAttribute(&optin, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN,
                                 dev) == CUDA_SUCCESS) {
        d.cuFuncGetAttribute(&staticSmem, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, kernel.function);
        limit = "; the device allows " + std::to_string(optin) + " B per block, the kernel has " +
                std::to_string(staticSmem) + " B static";
      }
      return makeError("kernel " + kernel.name + ": cannot allow " + std::to_string(dynamicSmem) +
                       " B of dynamic shared memory: " + d.errorString(r) + limit);
    }
    kernel.dynamicSmemLimit = dynamicSmem;
  }
  // One struct parameter: kernelParams holds one pointer, to the struct.
  void *params[] = {const_cast<void *>(args)};
  CUresult r = d.cuLaunchKernel(kernel.function, grid.x, grid.y, grid.z, block.x, block.y, block.z,
                                unsigned(dynamicSmem), stream, params, nullptr);
  if (r != CUDA_SUCCESS)
    return makeError("cannot launch kernel " + kernel.name + shape + ": " + d.errorString(r));
  return {};
}

Status synchronize(CUstream stream, const std::string &what) {
  Expected<const Driver *> d = Driver::get();
  if (!d)
    return d.takeError();
  return (*d)->check((*d)->cuStreamSynchronize(stream), what);
}

//===----------------------------------------------------------------------===//
// Memory and events
//===----------------------------------------------------------------------===//

Expected<DeviceBuffer> DeviceBuffer::allocate(size_t bytes) {
  Expected<const Driver *> d = Driver::get();
  if (!d)
    return d.takeError();
  DeviceBuffer b;
  b.size_ = bytes;
  if (bytes == 0)
    return b;
  if (Status s = (*d)->check((*d)->cuCtxGetCurrent(&b.ctx_), "cuCtxGetCurrent"); !s)
    return s.takeError();
  if (Status s = (*d)->check((*d)->cuMemAlloc(&b.ptr_, bytes),
                             "cuMemAlloc(" + std::to_string(bytes) + " B)");
      !s)
    return s.takeError();
  return b;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : ptr_(other.ptr_), ctx_(other.ctx_), size_(other.size_) {
  other.ptr_ = 0;
  other.size_ = 0;
}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  if (this != &other) {
    free();
    ptr_ = other.ptr_;
    ctx_ = other.ctx_;
    size_ = other.size_;
    other.ptr_ = 0;
    other.size_ = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { free(); }

void DeviceBuffer::free() {
  if (!ptr_)
    return;
  Expected<ContextScope> scope = ContextScope::enter(ctx_);
  (void)drv().cuMemFree(ptr_);
  ptr_ = 0;
}

Status DeviceBuffer::upload(const void *host, size_t bytes) {
  if (bytes > size_)
    return makeError("upload of " + std::to_string(bytes) + " B into a " + std::to_string(size_) +
                     " B device buffer");
  if (!bytes)
    return {};
  return inContext(
      ctx_, [&] { return drv().check(drv().cuMemcpyHtoD(ptr_, host, bytes), "cuMemcpyHtoD"); });
}

Status DeviceBuffer::download(void *host, size_t bytes) const {
  if (bytes > size_)
    return makeError("download of " + std::to_string(bytes) + " B from a " + std::to_string(size_) +
                     " B device buffer");
  if (!bytes)
    return {};
  return inContext(
      ctx_, [&] { return drv().check(drv().cuMemcpyDtoH(host, ptr_, bytes), "cuMemcpyDtoH"); });
}

Status DeviceBuffer::zero() {
  if (!size_)
    return {};
  return inContext(ctx_,
                   [&] { return drv().check(drv().cuMemsetD8(ptr_, 0, size_), "cuMemsetD8"); });
}

Expected<Event> Event::create() {
  Expected<const Driver *> d = Driver::get();
  if (!d)
    return d.takeError();
  Event e;
  if (Status s = (*d)->check((*d)->cuEventCreate(&e.event_, CU_EVENT_DEFAULT), "cuEventCreate"); !s)
    return s.takeError();
  return e;
}

Event::Event(Event &&other) noexcept : event_(other.event_) { other.event_ = nullptr; }

Event &Event::operator=(Event &&other) noexcept {
  if (this != &other) {
    if (event_)
      drv().cuEventDestroy(event_);
    event_ = other.event_;
    other.event_ = nullptr;
  }
  return *this;
}

Event::~Event() {
  if (event_)
    drv().cuEventDestroy(event_);
}

Status Event::record(CUstream stream) {
  return drv().check(drv().cuEventRecord(event_, stream), "cuEventRecord");
}

Expected<float> Event::elapsedMs(const Event &start, const Event &end) {
  const Driver &d = drv();
  if (Status s = d.check(d.cuEventSynchronize(end.event_), "cuEventSynchronize"); !s)
    return s.takeError();
  float ms = 0;
  if (Status s = d.check(d.cuEventElapsedTime(&ms, start.event_, end.event_), "cuEventElapsedTime");
      !s)
    return s.takeError();
  return ms;
}

} // namespace attnc::cuda
