//===- DeviceTiling.h - Fit compiled attention kernels to the GPU present -*- C++ -*-===//
//
// An artifact's CUDA kernels carry the tile attn-tile picked for the arch it
// was compiled for (`attnc compile --arch`, sm_80 by default). A CUBIN only
// runs on its own major arch, and a tile picked for one GPU can be slow on
// another or need more shared memory than it allows (an sm_80 fp16 D = 128
// tile takes 104-154 KiB; sm_86/89 allow 99 KiB, sm_75 64 KiB). So the
// runtime compiles for the GPU it finds, and planKernelForDevice decides
// each fused kernel's tile there:
//
//   - same arch, and the shared memory fits the device's opt-in limit: the
//     compiled tile, unchanged (pinned, tuned or default alike);
//   - another arch, or a tile over the limit: the default tile of TileModel.h
//     for this device's arch and limit, passed to NVRTC as
//     -DATTNC_TILE_<kernel>=block_q,block_kv,warps,stages (the emitted
//     entry points read their tile from that macro);
//   - no tile fits, or re-tiling is off (the tuner measures the tile it
//     asked for): an error naming both archs and both limits.
//
// LSH kernels use at most 48 KiB of static shared memory on every arch
// and keep their tile. Pure functions of a DeviceLimits, so tests simulate
// devices (sm_75, sm_86, sm_90) without one. See docs/kernels.md.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_DEVICETILING_H
#define ATTNC_RUNTIME_DEVICETILING_H

#include "runtime/Error.h"
#include "runtime/Manifest.h"

#include <string>
#include <vector>

namespace attnc {

namespace cuda {
struct DeviceInfo;
}

/// What tiling needs to know of a GPU.
struct DeviceLimits {
  int sm = 0;              ///< 90 for sm_90
  int smemOptinBytes = 0;  ///< largest shared memory one block may opt in to
  std::string description; ///< for messages: "NVIDIA H200 (sm_90, ...)"
  static DeviceLimits of(const cuda::DeviceInfo &info);
};

/// One fused kernel as it will run on the device.
struct DeviceKernelPlan {
  KernelDesc desc;    ///< tile, warps, stages and shared memory for the device
  std::string define; ///< the NVRTC option re-tiling it, or "" (unchanged)
  std::string note;   ///< "attn0: tile 128x64 (8 warps, 2 stages) for sm_80 -> ..."
};

/// The plan for kernel `k` (element type `dtype`: f32, f16, bf16), compiled
/// with its tile picked for `compiledFor` ("sm_80"), on `device`.
/// `retile` false: refuse instead of changing the tile.
Expected<DeviceKernelPlan> planKernelForDevice(const KernelDesc &k, const std::string &dtype,
                                               const std::string &compiledFor,
                                               const DeviceLimits &device, bool retile = true);

/// The macro naming kernel `name`'s tile in emitted CUDA source.
std::string tileMacroName(const std::string &kernelName);

} // namespace attnc

#endif // ATTNC_RUNTIME_DEVICETILING_H
