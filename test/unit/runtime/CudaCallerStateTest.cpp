//===- CudaCallerStateTest.cpp - The GPU device leaves its caller alone ---===//
//
// Runs the runtime's GPU KernelDevice (runtime/KernelDevice.cpp) against
// the recording driver of FakeCudaDriver.cpp (ctest puts its folder first
// on LD_LIBRARY_PATH): the calls a CPU machine can never make on a GPU.
// Checked: the caller's current context is the same after every call
// while the device's own is current inside it; copies, zeroing and
// stream-ordered allocations go to the stream in use; growth is refused
// during graph capture.
//
//===----------------------------------------------------------------------===//
#include "runtime/CudaDriver.h"
#include "runtime/KernelDevice.h"
#include "test/unit/support/FakeCudaHooks.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

using namespace attnc;

namespace {

using attnc::test::ptrStr;

class CudaCallerState : public ::testing::Test {
protected:
  void SetUp() override {
    Expected<const cuda::Driver *> d = cuda::Driver::get();
    ASSERT_TRUE(d.ok()) << d.error();
    drv = *d;
    ASSERT_TRUE(fake.load()) << "libcuda.so.1 is not the recording fake (LD_LIBRARY_PATH)";
    ASSERT_EQ(drv->cuDevicePrimaryCtxRetain(&own, 0), CUDA_SUCCESS);
    // The caller works on the other GPU, as a PyTorch process on cuda:1.
    ASSERT_EQ(drv->cuDevicePrimaryCtxRetain(&callers, 1), CUDA_SUCCESS);
    ASSERT_EQ(drv->cuCtxSetCurrent(callers), CUDA_SUCCESS);
  }
  CUcontext currentContext() const {
    CUcontext c = nullptr;
    drv->cuCtxGetCurrent(&c);
    return c;
  }
  const cuda::Driver *drv = nullptr;
  attnc::test::FakeCudaHooks fake;
  CUcontext own = nullptr, callers = nullptr;
};

TEST_F(CudaCallerState, EveryCallRunsInTheDevicesContextAndRestoresTheCallers) {
  Expected<std::shared_ptr<KernelDevice>> dev = createGpuKernelDevice(0);
  ASSERT_TRUE(dev.ok()) << dev.error();
  EXPECT_EQ(currentContext(), callers) << "creating the device changed the current context";
  KernelDevice &d = **dev;
  fake.clearLog();
  std::vector<float> host(256, 1.5f), back(256, 0.f);
  Expected<void *> a = d.allocate(1024, "a");
  ASSERT_TRUE(a.ok()) << a.error();
  Expected<void *> b = d.allocate(1024, "b");
  ASSERT_TRUE(b.ok()) << b.error();
  ASSERT_TRUE(d.upload(*a, host.data(), 1024).ok());
  ASSERT_TRUE(d.copy(*b, *a, 1024).ok());
  ASSERT_TRUE(d.download(back.data(), *b, 1024).ok());
  EXPECT_EQ(back, host);
  ASSERT_TRUE(d.zero(*b, 1024).ok());
  ASSERT_TRUE(d.synchronize().ok());
  d.release(*a), d.release(*b);
  EXPECT_EQ(currentContext(), callers);
  const std::string ownCtx = "ctx=" + ptrStr(own);
  std::vector<std::string> lines = fake.lines();
  ASSERT_GE(lines.size(), 7u);
  for (const std::string &l : lines)
    EXPECT_NE(l.find(ownCtx), std::string::npos) << "made outside the device's context: " << l;

  // A thread with no context at all keeps none.
  std::thread([&] {
    Expected<void *> p = d.allocate(64, "from a bare thread");
    EXPECT_TRUE(p.ok()) << p.error();
    d.release(*p);
    CUcontext c = reinterpret_cast<CUcontext>(1);
    drv->cuCtxGetCurrent(&c);
    EXPECT_EQ(c, nullptr);
  }).join();

  // A scope entered around many calls: inner calls push nothing more, and
  // leaving it restores the caller's.
  {
    Expected<DeviceScope> scope = d.enter();
    ASSERT_TRUE(scope.ok()) << scope.error();
    EXPECT_EQ(currentContext(), own);
    Expected<void *> p = d.allocate(64, "inside a scope");
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(currentContext(), own);
    d.release(*p);
  }
  EXPECT_EQ(currentContext(), callers);
}

TEST_F(CudaCallerState, CopiesZeroingAndGrowthGoToTheStreamInUse) {
  Expected<std::shared_ptr<KernelDevice>> dev = createGpuKernelDevice(0);
  ASSERT_TRUE(dev.ok()) << dev.error();
  KernelDevice &d = **dev;
  CUstream s = nullptr;
  ASSERT_EQ(drv->cuStreamCreate(&s, 0), CUDA_SUCCESS);
  ASSERT_TRUE(d.useStream(s).ok());
  Expected<void *> a = d.allocate(4096, "a");
  ASSERT_TRUE(a.ok());
  std::vector<char> host(4096, 3);
  fake.clearLog();
  ASSERT_TRUE(d.upload(*a, host.data(), 4096).ok());
  ASSERT_TRUE(d.zero(*a, 4096).ok());
  Expected<void *> w = d.allocateOrdered(8192, "the workspace");
  ASSERT_TRUE(w.ok()) << w.error();
  ASSERT_TRUE(d.copy(*w, *a, 4096).ok());
  d.releaseOrdered(*w);
  const std::string onStream = " stream=" + ptrStr(s);
  const std::vector<std::string> want = {"cuMemcpyHtoDAsync", "cuMemsetD8Async", "cuMemAllocAsync",
                                         "cuMemcpyDtoDAsync", "cuMemFreeAsync"};
  std::vector<std::string> lines = fake.lines();
  ASSERT_EQ(lines.size(), want.size()) << fake.log();
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(lines[i].rfind(want[i] + " ", 0), 0u) << lines[i];
    EXPECT_NE(lines[i].find(onStream), std::string::npos) << lines[i];
  }

  // While the stream is captured, a buffer that must grow is refused (the
  // allocation would belong to the graph) and nothing is allocated.
  fake.setCapturing(s, 1);
  fake.clearLog();
  Expected<void *> during = d.allocateOrdered(1 << 20, "the workspace");
  ASSERT_FALSE(during.ok());
  EXPECT_NE(during.error().find("captured into a CUDA graph"), std::string::npos) << during.error();
  EXPECT_NE(during.error().find("the workspace"), std::string::npos) << during.error();
  EXPECT_EQ(std::string(fake.log()), "");
  fake.setCapturing(s, 0);
  d.release(*a);
  EXPECT_EQ(currentContext(), callers);
}

} // namespace
