//===- DeviceTiling.cpp - Fit compiled attention kernels to the GPU present ---===//
#include "runtime/DeviceTiling.h"

#include "runtime/CudaDriver.h"
#include "runtime/NvrtcCompiler.h"

#include "attnc/abi/TileModel.h"

namespace attnc {

DeviceLimits DeviceLimits::of(const cuda::DeviceInfo &info) {
  DeviceLimits d;
  d.sm = info.ccMajor * 10 + info.ccMinor;
  d.smemOptinBytes = info.maxSmemPerBlockOptin;
  d.description = info.describe();
  return d;
}

std::string tileMacroName(const std::string &kernelName) { return "ATTNC_TILE_" + kernelName; }

namespace {

std::string describeTile(int blockQ, int blockKv, int warps, int stages) {
  return std::to_string(blockQ) + "x" + std::to_string(blockKv) + " (" + std::to_string(warps) +
         " warps, " + std::to_string(stages) + " stages)";
}

std::string kib(int bytes) { return std::to_string(bytes / 1024) + " KiB"; }

} // namespace

Expected<DeviceKernelPlan> planKernelForDevice(const KernelDesc &k, const std::string &dtype,
                                               const std::string &compiledFor,
                                               const DeviceLimits &device, bool retile) {
  DeviceKernelPlan plan;
  plan.desc = k;
  if (k.lsh) // static shared memory within 48 KiB on every arch
    return plan;
  Expected<GpuArch> arch = parseGpuArch(compiledFor);
  if (!arch)
    return makeError("kernel " + k.name + ": compiled for '" + compiledFor + "': " + arch.error());
  if (dtype != "f32" && dtype != "f16" && dtype != "bf16")
    return makeError("kernel " + k.name + ": unknown dtype '" + dtype + "'");
  const int elemBytes = dtype == "f32" ? 4 : 2;
  const std::string deviceArch = "sm_" + std::to_string(device.sm);
  const bool fits = k.smemBytes <= device.smemOptinBytes;
  if (arch->sm == device.sm && fits)
    return plan;
  const std::string was = "kernel " + k.name + " was tiled " +
                          describeTile(k.blockQ, k.blockKv, k.warps, k.stages) + " for " +
                          compiledFor + ", " + kib(k.smemBytes) + " of shared memory";
  if (!retile)
    return makeError(was + "; this GPU is " + device.description + " (" + deviceArch + ", " +
                     kib(device.smemOptinBytes) + " per block): compile for it with --arch " +
                     deviceArch);
  const attnc::tile::TileConfig c = attnc::tile::defaultTileWithin(
      elemBytes, k.headDim, device.sm, k.backward, device.smemOptinBytes);
  const int smem = attnc::tile::smemBytes(c, k.headDim, elemBytes, k.backward);
  if (!attnc::tile::tileFitsWithin(c, elemBytes, k.headDim, device.sm, k.backward,
                                   device.smemOptinBytes))
    return makeError(was + "; no tile of head dim " + std::to_string(k.headDim) + " (" + dtype +
                     ") fits this GPU, " + device.description + " (" + deviceArch + ", " +
                     kib(device.smemOptinBytes) + " per block)");
  if (c.blockQ == k.blockQ && c.blockKv == k.blockKv && c.warps == k.warps &&
      c.stages == k.stages && fits)
    return plan; // this GPU's own default: nothing to change
  plan.desc.blockQ = c.blockQ, plan.desc.blockKv = c.blockKv, plan.desc.warps = c.warps;
  plan.desc.stages = c.stages, plan.desc.smemBytes = smem;
  plan.define = "-D" + tileMacroName(k.name) + "=" + std::to_string(c.blockQ) + "," +
                std::to_string(c.blockKv) + "," + std::to_string(c.warps) + "," +
                std::to_string(c.stages);
  plan.note = k.name + ": tile " + describeTile(k.blockQ, k.blockKv, k.warps, k.stages) + " for " +
              compiledFor + " -> " + describeTile(c.blockQ, c.blockKv, c.warps, c.stages) +
              " for " + deviceArch + " (" + kib(smem) + " of " + kib(device.smemOptinBytes) +
              " shared memory)";
  return plan;
}

} // namespace attnc
