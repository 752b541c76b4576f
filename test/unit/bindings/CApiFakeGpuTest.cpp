//===- CApiFakeGpuTest.cpp - The C ABI's CUDA calls, on a recording driver ===//
//
// attnc_compile for target "cuda" and attnc_forward/attnc_backward on
// device pointers, with libcuda.so.1 being FakeCudaDriver.cpp (ctest puts
// its folder first on LD_LIBRARY_PATH): NVRTC really compiles the kernels
// for sm_90, the fake loads them and records the launches without running
// them. No number is checked here (the emulator and the device script
// check those); what is checked is the contract of attnc.h that only a GPU
// run could show otherwise:
//   - the caller's current context (here another GPU's) is unchanged
//     after every call, and every driver call of attnc's is made in the
//     variant's device context;
//   - a call enqueues on the caller's stream and never waits for the
//     device: no synchronous copy, allocation, free or synchronisation;
//   - workspace growth is stream-ordered (cuMemAllocAsync/cuMemFreeAsync
//     on that stream), and refused during graph capture with a message
//     saying what to do, after which the call of an already-seen shape
//     still runs under capture.
//
//===----------------------------------------------------------------------===//
#include "attnc/attnc.h"
#include "test/unit/support/CApiTensor.h"
#include "test/unit/support/FakeCudaHooks.h"

#include <cuda.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace {

struct Error {
  attnc_error *e = nullptr;
  ~Error() { attnc_error_free(e); }
  std::string message() const { return e ? attnc_error_message(e) : ""; }
};

/// The fake driver's hooks and the CUDA entry points the test calls
/// itself (as the caller's own CUDA code would).
struct Fake : attnc::test::FakeCudaHooks {
  CUresult (*retain)(CUcontext *, CUdevice) = nullptr;
  CUresult (*setCurrent)(CUcontext) = nullptr;
  CUresult (*getCurrent)(CUcontext *) = nullptr;
  CUresult (*alloc)(CUdeviceptr *, size_t) = nullptr;
  CUresult (*streamCreate)(CUstream *, unsigned) = nullptr;

  bool load() {
    return FakeCudaHooks::load() && symbol(retain, "cuDevicePrimaryCtxRetain") &&
           symbol(setCurrent, "cuCtxSetCurrent") && symbol(getCurrent, "cuCtxGetCurrent") &&
           symbol(alloc, "cuMemAlloc_v2") && symbol(streamCreate, "cuStreamCreate");
  }
  CUcontext current() const {
    CUcontext c = nullptr;
    getCurrent(&c);
    return c;
  }
};

using attnc::test::ptrStr;

attnc_tensor deviceTensor(CUdeviceptr p, std::vector<int64_t> shape) {
  return attnc::test::contiguousTensor(reinterpret_cast<void *>(p), ATTNC_F32, ATTNC_CUDA, shape);
}

constexpr int64_t H = 2, D = 64;

TEST(CApiFakeGpu, CallsKeepTheCallersContextStreamAndNeverWait) {
  Fake fake;
  ASSERT_TRUE(fake.load()) << "libcuda.so.1 is not the recording fake (LD_LIBRARY_PATH)";
  CUcontext own = nullptr, callers = nullptr;
  ASSERT_EQ(fake.retain(&own, 0), CUDA_SUCCESS);
  ASSERT_EQ(fake.retain(&callers, 1), CUDA_SUCCESS);

  // The caller's buffers on device 0, its stream; then it goes on working
  // on device 1 (a PyTorch process on cuda:1 calling a variant on cuda:0).
  const int64_t maxN = 1024, B = 1;
  ASSERT_EQ(fake.setCurrent(own), CUDA_SUCCESS);
  std::vector<CUdeviceptr> bufs(9);
  for (CUdeviceptr &b : bufs)
    ASSERT_EQ(fake.alloc(&b, size_t(B * H * maxN * D) * 4), CUDA_SUCCESS);
  CUstream stream = nullptr;
  ASSERT_EQ(fake.streamCreate(&stream, 0), CUDA_SUCCESS);
  ASSERT_EQ(fake.setCurrent(callers), CUDA_SUCCESS);

  attnc_compile_options o;
  attnc_compile_options_init(&o);
  o.target = "cuda", o.device = 0, o.heads = H, o.head_dim = D, o.backward = 1;
  attnc_variant *v = nullptr;
  Error err;
  err.e = attnc_compile("attention a {\n  mask causal\n}\n", nullptr, &o, &v);
  ASSERT_EQ(err.e, nullptr) << err.message();
  EXPECT_EQ(fake.current(), callers) << "attnc_compile changed the current context";

  auto call = [&](int64_t N, bool backward) {
    attnc_call c{};
    c.struct_size = sizeof c;
    c.q = deviceTensor(bufs[0], {B, H, N, D}), c.k = deviceTensor(bufs[1], {B, H, N, D});
    c.v = deviceTensor(bufs[2], {B, H, N, D}), c.out = deviceTensor(bufs[3], {B, H, N, D});
    c.lse = deviceTensor(bufs[4], {B, H, N});
    c.dout = deviceTensor(bufs[5], {B, H, N, D}), c.dq = deviceTensor(bufs[6], {B, H, N, D});
    c.dk = deviceTensor(bufs[7], {B, H, N, D}), c.dv = deviceTensor(bufs[8], {B, H, N, D});
    c.stream = stream;
    Error e;
    e.e = backward ? attnc_backward(v, &c) : attnc_forward(v, &c);
    EXPECT_EQ(fake.current(), callers) << "a call changed the current context";
    return e.message();
  };

  const std::string ownCtx = " ctx=" + ptrStr(own), onStream = " stream=" + ptrStr(stream);
  // What a call on the caller's stream may never do: wait for the device,
  // or allocate and free outside the stream order.
  const std::vector<std::string> waits = {
      "cuMemAlloc ",         "cuMemFree ",        "cuMemcpyHtoD ",     "cuMemcpyDtoH ",
      "cuMemcpyDtoD ",       "cuMemsetD8 ",       "cuCtxSynchronize ", "cuStreamSynchronize ",
      "cuEventSynchronize ", "cuMemcpyDtoHAsync "};
  auto expectOrderedOnStream = [&](const std::vector<std::string> &lines) {
    int launches = 0;
    for (const std::string &l : lines) {
      EXPECT_NE(l.find(ownCtx), std::string::npos) << "outside the variant's context: " << l;
      for (const std::string &w : waits)
        EXPECT_NE(l.rfind(w, 0), 0u) << "a host wait or unordered allocation: " << l;
      // The one thing on another stream: the event that orders the first
      // call on this stream after what the variant enqueued before.
      if (l.rfind("cuEventRecord ", 0) != 0) {
        EXPECT_NE(l.find(onStream), std::string::npos) << "not on the caller's stream: " << l;
      }
      launches += l.rfind("cuLaunchKernel ", 0) == 0;
    }
    return launches;
  };
  auto count = [](const std::vector<std::string> &lines, const std::string &what) {
    int n = 0;
    for (const std::string &l : lines)
      n += l.rfind(what + " ", 0) == 0;
    return n;
  };

  fake.clearLog();
  EXPECT_EQ(call(128, false), "");
  EXPECT_EQ(call(128, true), "");
  std::vector<std::string> first = fake.lines();
  EXPECT_GE(expectOrderedOnStream(first), 2) << fake.log();
  // The backward's workspace came from the stream-ordered pool.
  EXPECT_GE(count(first, "cuMemAllocAsync"), 1) << fake.log();

  // The same shape again: no allocation at all.
  fake.clearLog();
  EXPECT_EQ(call(128, true), "");
  std::vector<std::string> again = fake.lines();
  expectOrderedOnStream(again);
  EXPECT_EQ(count(again, "cuMemAllocAsync") + count(again, "cuMemFreeAsync"), 0) << fake.log();

  // A longer sequence: the workspace grows in stream order.
  fake.clearLog();
  EXPECT_EQ(call(maxN, true), "");
  std::vector<std::string> grown = fake.lines();
  expectOrderedOnStream(grown);
  EXPECT_GE(count(grown, "cuMemFreeAsync"), 1) << fake.log();
  EXPECT_GE(count(grown, "cuMemAllocAsync"), 1) << fake.log();

  // Under graph capture: a seen shape runs, a larger one is refused with
  // the way out named, and nothing is allocated for it.
  fake.setCapturing(stream, 1);
  fake.clearLog();
  EXPECT_EQ(call(maxN, false), "");
  EXPECT_EQ(call(maxN, true), "");
  EXPECT_EQ(count(fake.lines(), "cuMemAllocAsync"), 0) << fake.log();
  attnc_variant_free(v); // its workspace was sized for maxN; a new one is empty
  v = nullptr;
  err.e = attnc_compile("attention a {\n  mask causal\n}\n", nullptr, &o, &v);
  ASSERT_EQ(err.e, nullptr) << err.message();
  fake.clearLog();
  const std::string refused = call(256, true);
  EXPECT_NE(refused.find("captured into a CUDA graph"), std::string::npos) << refused;
  EXPECT_NE(refused.find("before capturing"), std::string::npos) << refused;
  EXPECT_EQ(count(fake.lines(), "cuMemAllocAsync"), 0) << fake.log();
  fake.setCapturing(stream, 0);

  attnc_variant_free(v);
  EXPECT_EQ(fake.current(), callers) << "attnc_variant_free changed the current context";
}

} // namespace
