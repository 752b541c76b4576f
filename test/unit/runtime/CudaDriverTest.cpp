//===- CudaDriverTest.cpp - CUDA driver: devices and launches -------------===//
#include "test/unit/runtime/JitTestSupport.h"

#include "runtime/CpuInfo.h"
#include "runtime/CudaDriver.h"
#include "runtime/Error.h"
#include "runtime/FileSystem.h"
#include "runtime/HostCompiler.h"
#include "runtime/KernelCache.h"
#include "runtime/NvrtcCompiler.h"
#include "runtime/NvrtcLibraries.h"
#include "runtime/Sha256.h"
#include "runtime/Subprocess.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace attnc;
using namespace attnc::jittest;
using namespace std::string_literals;

namespace {

//===----------------------------------------------------------------------===//
// CUDA driver
//===----------------------------------------------------------------------===//

TEST(CudaDriver, MissingLibraryIsReportedClearly) {
  Expected<std::unique_ptr<cuda::Driver>> d = cuda::Driver::load("libattnc-no-such-driver.so.1");
  ASSERT_FALSE(d.ok());
  EXPECT_TRUE(contains(d.error(),
                       "libattnc-no-such-driver.so.1 not found: no NVIDIA driver on this machine"))
      << d.error();
}

TEST(CudaDriver, AvailabilityIsReportedNotFatal) {
  Status s = cuda::Driver::available();
  if (s) {
    Expected<const cuda::Driver *> d = cuda::Driver::get();
    ASSERT_TRUE(d.ok());
    EXPECT_GT((*d)->version(), 0);
    std::string e = (*d)->errorString(CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_TRUE(contains(e, "CUDA_ERROR_OUT_OF_MEMORY")) << e;
    return;
  }
  // No driver (or no usable device): every entry point says why, none crashes.
  EXPECT_FALSE(s.error().empty());
  EXPECT_TRUE(contains(s.error(), "libcuda.so.1 not found: no NVIDIA driver on this machine") ||
              contains(s.error(), "cuInit") || contains(s.error(), "driver"))
      << s.error();
  EXPECT_EQ(cuda::deviceCount().error(), s.error());
  EXPECT_EQ(cuda::queryDevice(0).error(), s.error());
  EXPECT_EQ(cuda::Context::create(0).error(), s.error());
  EXPECT_EQ(cuda::Module::load("x", "m").error(), s.error());
  EXPECT_EQ(cuda::DeviceBuffer::allocate(16).error(), s.error());
  EXPECT_EQ(cuda::Event::create().error(), s.error());
  EXPECT_EQ(cuda::synchronize(nullptr, "k").error(), s.error());
}

TEST(CudaDriver, DeviceInfoDescribesItself) {
  cuda::DeviceInfo info;
  info.name = "NVIDIA H200";
  info.ccMajor = 9;
  info.ccMinor = 0;
  info.smCount = 132;
  info.totalMemoryBytes = size_t(140) << 30;
  info.maxSmemPerBlockOptin = 227 * 1024;
  EXPECT_EQ(info.arch(), "sm_90");
  EXPECT_EQ(info.describe(), "NVIDIA H200 (sm_90, 132 SMs, 140.0 GiB, 227 KiB smem/block)");
}

/// Skips the calling test unless a driver and a device are present.
#define REQUIRE_GPU()                                                                              \
  do {                                                                                             \
    Status avail = cuda::Driver::available();                                                      \
    if (!avail)                                                                                    \
      GTEST_SKIP() << avail.error();                                                               \
    Expected<int> n = cuda::deviceCount();                                                         \
    if (!n || *n == 0)                                                                             \
      GTEST_SKIP() << "no CUDA device";                                                            \
  } while (0)

struct ScaleArgs {
  const float *x;
  float *y;
  int n;
  float scale;
};

TEST(CudaDriver, LaunchesAStructArgumentKernel) {
  REQUIRE_GPU();
  Expected<cuda::Context> ctx = cuda::Context::create(0);
  ASSERT_TRUE(ctx.ok()) << ctx.error();
  ASSERT_TRUE(ctx->makeCurrent().ok()); // this thread's, for the raw calls below
  NvrtcOptions o;
  o.arch = ctx->device().arch();
  if (!checkGpuArchSupported(o.arch))
    GTEST_SKIP() << checkGpuArchSupported(o.arch).error();
  Expected<Cubin> cubin = NvrtcCompiler().compile("attnc_test_scale.cu", kScaleKernel, o);
  ASSERT_TRUE(cubin.ok()) << cubin.error();
  Expected<cuda::Module> mod = cuda::Module::load(cubin->image, "attnc_test_scale.cu");
  ASSERT_TRUE(mod.ok()) << mod.error();
  Expected<cuda::Kernel> k = mod->kernel("attnc_test_scale");
  ASSERT_TRUE(k.ok()) << k.error();
  Expected<cuda::Kernel> missing = mod->kernel("attnc_no_such_kernel");
  ASSERT_FALSE(missing.ok());
  EXPECT_TRUE(contains(missing.error(), "attnc_no_such_kernel")) << missing.error();

  const int n = 1000;
  std::vector<float> x(n), y(n, -1.f);
  for (int i = 0; i < n; ++i)
    x[size_t(i)] = float(i);
  Expected<cuda::DeviceBuffer> dx = cuda::DeviceBuffer::allocate(n * sizeof(float));
  Expected<cuda::DeviceBuffer> dy = cuda::DeviceBuffer::allocate(n * sizeof(float));
  ASSERT_TRUE(dx.ok() && dy.ok());
  ASSERT_TRUE(dx->upload(x.data(), n * sizeof(float)).ok());
  ScaleArgs args{dx->as<float>(), dy->as<float>(), n, 3.f};
  Expected<cuda::Event> start = cuda::Event::create(), stop = cuda::Event::create();
  ASSERT_TRUE(start.ok() && stop.ok());
  ASSERT_TRUE(start->record().ok());
  Status launched = cuda::launch(*k, {(n + 255) / 256}, {256}, 0, nullptr, args);
  ASSERT_TRUE(launched.ok()) << launched.error();
  ASSERT_TRUE(stop->record().ok());
  ASSERT_TRUE(cuda::synchronize(nullptr, "attnc_test_scale").ok());
  Expected<float> ms = cuda::Event::elapsedMs(*start, *stop);
  ASSERT_TRUE(ms.ok()) << ms.error();
  EXPECT_GE(*ms, 0.f);
  ASSERT_TRUE(dy->download(y.data(), n * sizeof(float)).ok());
  // Each block reverses its 256-element tile (zero-filled past n).
  for (int i = 0; i < n; ++i) {
    int block = i / 256, lane = i % 256;
    int src = block * 256 + (255 - lane);
    float want = src < n ? 3.f * float(src) : 0.f;
    ASSERT_EQ(y[size_t(i)], want) << i;
  }
}

TEST(CudaDriver, OptsIntoLargeDynamicSharedMemory) {
  REQUIRE_GPU();
  Expected<cuda::Context> ctx = cuda::Context::create(0);
  ASSERT_TRUE(ctx.ok()) << ctx.error();
  ASSERT_TRUE(ctx->makeCurrent().ok()); // this thread's, for the raw calls below
  size_t optin = size_t(ctx->device().maxSmemPerBlockOptin);
  if (optin <= 48 * 1024)
    GTEST_SKIP() << "device has no opt-in shared memory";
  NvrtcOptions o;
  o.arch = ctx->device().arch();
  if (!checkGpuArchSupported(o.arch))
    GTEST_SKIP() << checkGpuArchSupported(o.arch).error();
  const char *src = R"(
struct Args { float *y; int words; };
extern "C" __global__ void attnc_test_dyn_smem(Args a) {
  extern __shared__ float buf[];
  for (int i = threadIdx.x; i < a.words; i += blockDim.x) buf[i] = float(i);
  __syncthreads();
  if (threadIdx.x == 0) a.y[0] = buf[a.words - 1];
}
)";
  Expected<Cubin> cubin = NvrtcCompiler().compile("dyn_smem.cu", src, o);
  ASSERT_TRUE(cubin.ok()) << cubin.error();
  Expected<cuda::Module> mod = cuda::Module::load(cubin->image, "dyn_smem.cu");
  ASSERT_TRUE(mod.ok()) << mod.error();
  Expected<cuda::Kernel> k = mod->kernel("attnc_test_dyn_smem");
  ASSERT_TRUE(k.ok()) << k.error();
  Expected<cuda::DeviceBuffer> dy = cuda::DeviceBuffer::allocate(sizeof(float));
  ASSERT_TRUE(dy.ok());
  struct {
    float *y;
    int words;
  } args{dy->as<float>(), int(optin / sizeof(float))};
  Status s = cuda::launch(*k, {1}, {256}, optin, nullptr, args);
  ASSERT_TRUE(s.ok()) << s.error();
  ASSERT_TRUE(cuda::synchronize(nullptr, "attnc_test_dyn_smem").ok());
  float y = 0;
  ASSERT_TRUE(dy->download(&y, sizeof(float)).ok());
  EXPECT_EQ(y, float(args.words - 1));
  // Beyond the device's limit: the error names the kernel and the limit.
  Status tooMuch = cuda::launch(*k, {1}, {256}, optin + 1024, nullptr, args);
  ASSERT_FALSE(tooMuch.ok());
  EXPECT_TRUE(contains(tooMuch.error(), "attnc_test_dyn_smem")) << tooMuch.error();
}

} // namespace
