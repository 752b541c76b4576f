//===- DeviceTilingTest.cpp - Compiled tiles fitted to the GPU present ----===//
//
// runtime/DeviceTiling.h on simulated devices (no GPU here): an artifact
// compiled for sm_80 (attnc compile's default) meets sm_75 (64 KiB of
// shared memory per block), sm_86 (99 KiB) and sm_90 (227 KiB). The sm_80
// fp16 D = 128 tiles need 104-154 KiB, so the runtime must re-tile on
// sm_75/86 (else the launch fails), should on sm_90 (128 x 128 is its
// default), and must refuse, naming both archs, where nothing fits or
// re-tiling is off. The re-tiled kernels are then compiled by NVRTC with
// the define the plan gives, as CudaAttention::compile does, and ptxas
// must report them without spills.
//
// Second half: device operands are checked where they enter
// (CudaAttention::forwardOnDevice, the way in for a caller's own device
// tensors, e.g. PyTorch views): dtype, shape, contiguity, 16-byte
// alignment, each refused with the tensor's name; on the emulated device,
// where a GPU's kernels would otherwise read misaligned or strided memory.
//
//===----------------------------------------------------------------------===//
#include "runtime/CudaAttention.h"
#include "runtime/DeviceTiling.h"
#include "runtime/KernelCache.h"
#include "runtime/NvrtcCompiler.h"

#include "attnc/abi/TileModel.h"

#include "test/unit/support/CudaTestSupport.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace attnc;
using attnc::tile::TileConfig;

namespace {

DeviceLimits device(int sm, int smemKiB, const char *name) {
  return DeviceLimits{sm, smemKiB * 1024, std::string(name) + " (simulated)"};
}
const DeviceLimits kTuring = device(75, 64, "T4"), kAmpere = device(80, 163, "A100"),
                   kAda = device(86, 99, "RTX A6000"), kHopper = device(90, 227, "H200");

/// A fused dense kernel as the manifest describes it, tiled by attn-tile
/// for `sm` (its default tile).
KernelDesc compiledKernel(const char *name, int elemBytes, int headDim, int sm, bool backward) {
  const TileConfig c = attnc::tile::defaultTile(elemBytes, headDim, sm, backward);
  KernelDesc k;
  k.name = name, k.backward = backward, k.headDim = headDim;
  k.blockQ = c.blockQ, k.blockKv = c.blockKv, k.warps = c.warps, k.stages = c.stages;
  k.smemBytes = attnc::tile::smemBytes(c, headDim, elemBytes, backward);
  return k;
}

TEST(DeviceTiling, TheSameArchKeepsItsTile) {
  for (bool bwd : {false, true}) {
    const KernelDesc k = compiledKernel("k", 2, 128, 80, bwd);
    Expected<DeviceKernelPlan> p = planKernelForDevice(k, "f16", "sm_80", kAmpere);
    ASSERT_TRUE(p) << p.error();
    EXPECT_TRUE(p->define.empty());
    EXPECT_EQ(p->desc.blockQ, k.blockQ);
    EXPECT_EQ(p->desc.smemBytes, k.smemBytes);
  }
}

TEST(DeviceTiling, Sm80TilesAreRefittedForTuringAdaAndHopper) {
  for (const char *dtype : {"f32", "f16", "bf16"})
    for (int D : {64, 128, 256})
      for (bool bwd : {false, true})
        for (const DeviceLimits *dev : {&kTuring, &kAda, &kHopper}) {
          SCOPED_TRACE(std::string(dtype) + " D " + std::to_string(D) + (bwd ? " bwd" : " fwd") +
                       " on sm_" + std::to_string(dev->sm));
          const int e = std::string(dtype) == "f32" ? 4 : 2;
          const KernelDesc k = compiledKernel("attn0", e, D, 80, bwd);
          Expected<DeviceKernelPlan> p = planKernelForDevice(k, dtype, "sm_80", *dev);
          ASSERT_TRUE(p) << p.error();
          const TileConfig want =
              attnc::tile::defaultTileWithin(e, D, dev->sm, bwd, dev->smemOptinBytes);
          EXPECT_EQ(p->desc.blockQ, want.blockQ);
          EXPECT_EQ(p->desc.blockKv, want.blockKv);
          EXPECT_EQ(p->desc.warps, want.warps);
          EXPECT_EQ(p->desc.stages, want.stages);
          // Within the device, and the launch uses the tile's own size.
          EXPECT_LE(p->desc.smemBytes, dev->smemOptinBytes);
          EXPECT_EQ(p->desc.smemBytes, attnc::tile::smemBytes(want, D, e, bwd));
          if (dev->sm < 80) {
            EXPECT_LE(p->desc.stages, 1); // no cp.async before Ampere
          }
          const bool changed = want.blockQ != k.blockQ || want.blockKv != k.blockKv ||
                               want.warps != k.warps || want.stages != k.stages;
          EXPECT_EQ(p->define.empty(), !changed) << p->define;
          if (changed) {
            EXPECT_EQ(p->define, "-DATTNC_TILE_attn0=" + std::to_string(want.blockQ) + "," +
                                     std::to_string(want.blockKv) + "," +
                                     std::to_string(want.warps) + "," +
                                     std::to_string(want.stages));
          }
        }
}

// The figures the review named: fp16 D = 128 forward is 128 x 64 on sm_80,
// over 99 KiB, and 128 x 128 on sm_90.
TEST(DeviceTiling, TheReviewsCase) {
  const KernelDesc k = compiledKernel("attn0", 2, 128, 80, false);
  EXPECT_EQ(k.blockQ, 128);
  EXPECT_EQ(k.blockKv, 64);
  EXPECT_GT(k.smemBytes, kAda.smemOptinBytes);
  Expected<DeviceKernelPlan> hopper = planKernelForDevice(k, "f16", "sm_80", kHopper);
  ASSERT_TRUE(hopper) << hopper.error();
  EXPECT_EQ(hopper->desc.blockKv, 128);
  EXPECT_NE(hopper->note.find("sm_80"), std::string::npos) << hopper->note;
  EXPECT_NE(hopper->note.find("sm_90"), std::string::npos) << hopper->note;
  Expected<DeviceKernelPlan> ada = planKernelForDevice(k, "f16", "sm_80", kAda);
  ASSERT_TRUE(ada) << ada.error();
  EXPECT_LE(ada->desc.smemBytes, 99 * 1024);
}

TEST(DeviceTiling, RefusesNamingBothArchs) {
  const KernelDesc k = compiledKernel("attn0", 2, 128, 80, false);
  // Re-tiling off (the tuner measures the tile it asked for).
  Expected<DeviceKernelPlan> off = planKernelForDevice(k, "f16", "sm_80", kHopper, false);
  ASSERT_FALSE(off);
  EXPECT_NE(off.error().find("sm_80"), std::string::npos) << off.error();
  EXPECT_NE(off.error().find("sm_90"), std::string::npos) << off.error();
  EXPECT_NE(off.error().find("attn0"), std::string::npos) << off.error();
  // No tile fits a device with 8 KiB per block.
  Expected<DeviceKernelPlan> tiny = planKernelForDevice(k, "f16", "sm_80", device(86, 8, "tiny"));
  ASSERT_FALSE(tiny);
  EXPECT_NE(tiny.error().find("sm_80"), std::string::npos) << tiny.error();
  EXPECT_NE(tiny.error().find("sm_86"), std::string::npos) << tiny.error();
  EXPECT_NE(tiny.error().find("8 KiB"), std::string::npos) << tiny.error();
  // On its own arch, a tile over this device's limit is re-tiled too.
  Expected<DeviceKernelPlan> small = planKernelForDevice(k, "f16", "sm_80", device(80, 64, "cut"));
  ASSERT_TRUE(small) << small.error();
  EXPECT_LE(small->desc.smemBytes, 64 * 1024);
  // Bad manifest values.
  EXPECT_FALSE(planKernelForDevice(k, "f64", "sm_80", kHopper));
  EXPECT_FALSE(planKernelForDevice(k, "f16", "compute_80", kHopper));
}

TEST(DeviceTiling, LshKernelsKeepTheirTile) {
  KernelDesc k = compiledKernel("lsh0", 2, 64, 80, false);
  k.lsh = KernelDesc::Lsh{8, 2, 32, 1, 0, 7};
  k.blockQ = k.blockKv = 32, k.warps = 4, k.smemBytes = 0;
  Expected<DeviceKernelPlan> p = planKernelForDevice(k, "f16", "sm_80", kTuring);
  ASSERT_TRUE(p) << p.error();
  EXPECT_TRUE(p->define.empty());
  EXPECT_EQ(p->desc.blockQ, 32);
}

/// The emitted form of a dense forward and backward (KernelEmitter.cpp):
/// the tile macros, then the entry points reading them.
std::string emittedSource(const KernelDesc &fwd, const KernelDesc &bwd, int expectThreadsFwd,
                          int expectThreadsBwd) {
  std::ostringstream os;
  os << "#include \"attnc/flash_fwd.cuh\"\n#include \"attnc/flash_bwd.cuh\"\n";
  cudatest::writeVariants(os);
  for (const KernelDesc *k : {&fwd, &bwd}) {
    const std::string m = tileMacroName(k->name);
    os << "#ifndef " << m << "\n#define " << m << " " << k->blockQ << ", " << k->blockKv << ", "
       << k->warps << ", " << k->stages << "\n#endif\n";
    const char *fns[] = {"flash_fwd", "flash_bwd_dkdv", "flash_bwd_dq"};
    for (const char *fn : fns) {
      if ((k == &fwd) != (std::string(fn) == "flash_fwd"))
        continue;
      os << "extern \"C\" __global__ void __launch_bounds__(ATTNC_TILE_THREADS(" << m << "), 1) "
         << "attnc_" << fn << "_" << k->name
         << "(attnc::" << (k == &fwd ? "AttnFwdArgs" : "AttnBwdArgs") << " a) {\n  attnc::" << fn
         << "<ATTNC_FLASH_ARGS(" << m << ", " << k->headDim
         << ", __half, AttnVariant_mod)>(a);\n}\n";
    }
  }
  // The define reached the macro.
  os << "static_assert(ATTNC_TILE_THREADS(" << tileMacroName(fwd.name)
     << ") == " << expectThreadsFwd << ", \"forward tile\");\n";
  os << "static_assert(ATTNC_TILE_THREADS(" << tileMacroName(bwd.name)
     << ") == " << expectThreadsBwd << ", \"backward tile\");\n";
  return os.str();
}

// What CudaAttention::compile does on an sm_86 GPU with an sm_80 artifact:
// NVRTC for sm_86 with the plans' defines; every kernel builds, no spills.
TEST(DeviceTiling, ReTiledKernelsCompileForTheDevice) {
  const KernelDesc fwd = compiledKernel("attn0", 2, 128, 80, false),
                   bwd = compiledKernel("attn_bwd1", 2, 128, 80, true);
  Expected<DeviceKernelPlan> pf = planKernelForDevice(fwd, "f16", "sm_80", kAda),
                             pb = planKernelForDevice(bwd, "f16", "sm_80", kAda);
  ASSERT_TRUE(pf && pb);
  ASSERT_FALSE(pf->define.empty()); // 128 x 64 needs more than 99 KiB
  NvrtcOptions o;
  o.arch = "sm_86";
  o.useCache = false;
  o.includeDirs = {std::string(ATTNC_SOURCE_DIR) + "/kernels/abi",
                   std::string(ATTNC_SOURCE_DIR) + "/kernels/common",
                   std::string(ATTNC_SOURCE_DIR) + "/kernels/cuda"};
  for (const DeviceKernelPlan *p : {&*pf, &*pb})
    if (!p->define.empty())
      o.options.push_back(p->define);
  NvrtcCompiler nvrtc;
  Expected<Cubin> c = nvrtc.compile(
      "attnc_retiled.cu", emittedSource(fwd, bwd, pf->desc.warps * 32, pb->desc.warps * 32), o);
  ASSERT_TRUE(c) << c.error();
  for (const char *entry : {"attnc_flash_fwd_attn0", "attnc_flash_bwd_dkdv_attn_bwd1",
                            "attnc_flash_bwd_dq_attn_bwd1"}) {
    const KernelResources *r = c->kernel(entry);
    ASSERT_NE(r, nullptr) << entry << "\n" << c->log;
    EXPECT_FALSE(r->spills()) << entry;
    EXPECT_EQ(r->stackFrameBytes, 0) << entry;
  }
}

//===-- Device operands ---------------------------------------------------===//

DeviceTensor tensor(void *data, std::vector<int64_t> shape, std::string dtype = "f16") {
  return DeviceTensor{"q", data, std::move(shape), {}, std::move(dtype)};
}

TEST(DeviceOperands, EachFaultIsNamed) {
  alignas(16) static unsigned char mem[4096];
  const std::vector<int64_t> shape{1, 2, 4, 64};
  EXPECT_TRUE(checkDeviceOperand(tensor(mem, shape), "k0", "f16", shape, true));
  auto fails = [&](const DeviceTensor &t, const std::string &dtype, const char *what) {
    Status s = checkDeviceOperand(t, "k0", dtype, shape, true);
    ASSERT_FALSE(s) << what;
    EXPECT_NE(s.error().find("tensor 'q'"), std::string::npos) << s.error();
    EXPECT_NE(s.error().find("kernel k0"), std::string::npos) << s.error();
    EXPECT_NE(s.error().find(what), std::string::npos) << s.error();
  };
  fails(tensor(mem + 2, shape), "f16", "16-byte aligned");
  fails(tensor(mem, shape, "f32"), "f16", "is f32");
  fails(tensor(mem, {1, 2, 5, 64}), "f16", "has shape [1, 2, 5, 64]");
  fails(tensor(nullptr, shape), "f16", "null pointer");
  DeviceTensor transposed = tensor(mem, shape);
  transposed.strides = {512, 64, 128, 1}; // heads and rows swapped: a permuted view
  fails(transposed, "f16", "not contiguous");
  DeviceTensor contiguous = tensor(mem, shape);
  contiguous.strides = {999, 256, 64, 1}; // a size-1 dimension's stride does not matter
  EXPECT_TRUE(checkDeviceOperand(contiguous, "k0", "f16", shape, true));
  // Rows of 12 fp16 values are 24 bytes: not whole 16-byte vectors.
  const std::vector<int64_t> odd{1, 1, 4, 12};
  Status s = checkDeviceOperand(tensor(mem, odd), "k0", "f16", odd, true);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().find("16-byte vectors"), std::string::npos) << s.error();
}

/// A dense f32 forward as the emitter writes it (one entry point).
std::string denseForwardSource() {
  std::ostringstream os;
  os << "#include \"attnc/flash_fwd.cuh\"\n";
  cudatest::writeVariants(os);
  os << "#ifndef ATTNC_TILE_t\n#define ATTNC_TILE_t 16, 16, 1, 1\n#endif\n"
     << "extern \"C\" __global__ void __launch_bounds__(ATTNC_TILE_THREADS(ATTNC_TILE_t), 1) "
        "attnc_fwd_t(attnc::AttnFwdArgs a) {\n"
     << "  attnc::flash_fwd<ATTNC_FLASH_ARGS(ATTNC_TILE_t, 32, float, AttnVariant_dense)>(a);\n}\n";
  return os.str();
}

// The device entry refuses a misaligned or strided view before any launch,
// and runs a good one (the emulated device: host memory standing in).
TEST(DeviceOperands, ForwardOnDeviceChecksItsOperands) {
  KernelDesc fwd;
  fwd.name = "t", fwd.headDim = 32, fwd.blockQ = 16, fwd.blockKv = 16, fwd.warps = 1;
  fwd.stages = 1, fwd.scale = 1.0f / std::sqrt(32.0f), fwd.entryPoints = {"attnc_fwd_t"};
  fwd.smemBytes = attnc::tile::fwdSmemBytes(16, 16, 32, 1, 4);
  HostCompiler host(&KernelCache::processDefault());
  Expected<CudaAttention> a = CudaAttention::compileEmulated(denseForwardSource(), "sm_75", "sm_75",
                                                             "f32", fwd, std::nullopt, host);
  ASSERT_TRUE(a) << a.error();
  KernelDevice &dev = a->kernelDevice();
  const int64_t B = 1, H = 2, N = 5, D = 32, n = B * H * N * D;
  std::vector<void *> owned;
  auto alloc = [&](size_t bytes) {
    Expected<void *> p = dev.allocate(bytes + 64, "test");
    EXPECT_TRUE(p);
    owned.push_back(*p);
    return static_cast<unsigned char *>(*p);
  };
  std::vector<float> ones(size_t(n), 0.5f);
  unsigned char *q = alloc(n * 4), *k = alloc(n * 4), *v = alloc(n * 4), *o = alloc(n * 4),
                *lse = alloc(B * H * N * 4);
  for (unsigned char *p : {q, k, v})
    ASSERT_TRUE(dev.upload(p, ones.data(), n * 4));
  const std::vector<int64_t> s4{B, H, N, D};
  DeviceAttentionArgs x;
  x.q = DeviceTensor{"q", q, s4, {}, "f32"}, x.k = DeviceTensor{"k", k, s4, {}, "f32"};
  x.v = DeviceTensor{"v", v, s4, {}, "f32"}, x.out = DeviceTensor{"out", o, s4, {}, "f32"};
  x.lse = DeviceTensor{"lse", lse, {B, H, N}, {}, "f32"};
  ASSERT_TRUE(a->forwardOnDevice(x));
  std::vector<float> out(static_cast<size_t>(n));
  ASSERT_TRUE(dev.download(out.data(), o, n * 4));
  for (float y : out) // equal values attend to equal values
    ASSERT_FLOAT_EQ(y, 0.5f);
  DeviceAttentionArgs bad = x;
  bad.k.data = k + 4; // a view starting one element in
  Status s = a->forwardOnDevice(bad);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().find("tensor 'k'"), std::string::npos) << s.error();
  bad = x;
  bad.v.strides = {N * D * H, D, H * D, 1}; // [B, N, H, D] memory seen as [B, H, N, D]
  s = a->forwardOnDevice(bad);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().find("tensor 'v' is not contiguous"), std::string::npos) << s.error();
  bad = x;
  bad.out.dtype = "f16";
  s = a->forwardOnDevice(bad);
  ASSERT_FALSE(s);
  EXPECT_NE(s.error().find("tensor 'out' is f16"), std::string::npos) << s.error();
  for (void *p : owned)
    dev.release(p);
}

} // namespace
