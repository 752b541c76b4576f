//===- PerfModel.cpp - A kernel's time, predicted from its machine code --===//
#include "runtime/perf/PerfModel.h"

#include <algorithm>
#include <cmath>

namespace attnc::perf {

namespace {

// Sources (docs/perf-model.md repeats them with links):
//  [Ampere] NVIDIA blog "NVIDIA Ampere Architecture In-Depth" (2020),
//           Table 3: V100 and A100 SMs, boost clocks, memory bandwidth,
//           peak fp16 tensor TFLOP/s; A100's 164 KB of shared memory per SM.
//  [BPG]    CUDA C++ Best Practices Guide, "Throughput of Native Arithmetic
//           Instructions": fp32 results per clock per SM (64 for 7.x and
//           8.0, 128 for 8.6, 8.9 and 9.0), 16 special functions, 64
//           32-bit integer adds/logic.
//  [CCtab]  CUDA C++ Programming Guide, "Technical Specifications per
//           Compute Capability": 64K registers, resident warps and blocks
//           and shared memory per SM.
//  [GA102]  NVIDIA Ampere GA102 GPU Architecture whitepaper: 128 B/clock
//           of shared memory per SM (64 on Turing).
//  [DS]     datasheets: T4 (65 TFLOP/s fp16/fp32 mixed, 320 GB/s), A10
//           (125 TFLOP/s fp16 tensor, 600 GB/s), L4 (121 dense, 300 GB/s),
//           H100 SXM5 (989.5 dense fp16/bf16, 3.35 TB/s).
//  [H100]   NVIDIA H100 Tensor Core GPU Architecture whitepaper: 132 SMs on
//           SXM5, 1830 MHz tensor-core boost clock.
//  [FA3]    Shah et al., "FlashAttention-3" (2024): mma.sync reaches about
//           two-thirds of H100's tensor peak; only wgmma reaches the rest.
// Tensor FLOP/clk/SM = peak TFLOP/s / (SMs x clock), rounded to the power of
// two it is (125e12 / (80 x 1.53e9) = 1021 -> 1024). Shared memory's
// 128 B/clk is 32 banks of 4 bytes per clock [GA102] on every arch but Turing.
const ArchRates kArchs[] = {
    // sm, gpu, SMs, GHz, GB/s, tensor, fp32, alu, mufu, smem B/clk, regs, smem/SM, warps, blocks
    {70, "V100 SXM2", 80, 1.530, 900, 1024, 64, 64, 16, 128, 65536, 96 * 1024, 64, 32},
    {75, "T4", 40, 1.590, 320, 1024, 64, 64, 16, 64, 65536, 64 * 1024, 32, 16},
    {80, "A100 SXM4 80GB", 108, 1.410, 2039, 2048, 64, 64, 16, 128, 65536, 164 * 1024, 64, 32},
    {86, "A10", 72, 1.695, 600, 1024, 128, 64, 16, 128, 65536, 100 * 1024, 48, 16},
    {89, "L4", 58, 2.040, 300, 1024, 128, 64, 16, 128, 65536, 100 * 1024, 48, 24},
    // mma.sync on Hopper: two-thirds of wgmma's 4096 [FA3].
    {90, "H100 SXM5", 132, 1.830, 3350, 4096.0 * 2 / 3, 128, 64, 16, 128, 65536, 228 * 1024, 64,
     32},
};

/// Registers are allocated per warp in units of 256 (CUDA occupancy
/// calculator, cudaOccRegAllocationGranularity).
int registersPerWarp(int registersPerThread) {
  int perWarp = std::max(registersPerThread, 1) * 32;
  return (perWarp + 255) / 256 * 256;
}

} // namespace

Expected<ArchRates> archRates(const std::string &arch) {
  std::string a = arch;
  if (!a.empty() && (a.back() == 'a' || a.back() == 'f'))
    a.pop_back();
  for (const ArchRates &r : kArchs)
    if (a == "sm_" + std::to_string(r.sm))
      return r;
  std::string known;
  for (const std::string &k : knownArchs())
    known += (known.empty() ? "" : ", ") + k;
  return makeError("the performance model has no rates for " + arch + " (it knows " + known + ")");
}

std::vector<std::string> knownArchs() {
  std::vector<std::string> out;
  for (const ArchRates &r : kArchs)
    out.push_back("sm_" + std::to_string(r.sm));
  return out;
}

Occupancy occupancyOf(const ArchRates &rates, const LaunchShape &launch) {
  const int warps = std::max(launch.warpsPerBlock, 1);
  Occupancy o{rates.maxBlocksPerSm, "blocks"};
  auto bound = [&](int blocks, const char *why) {
    if (blocks < o.blocks)
      o = Occupancy{blocks, why};
  };
  bound(rates.maxWarpsPerSm / warps, "warps");
  // Each of the 4 sub-partitions holds its own quarter of the registers.
  int warpsByRegisters = 4 * (rates.registersPerSm / 4 / registersPerWarp(launch.registers));
  bound(warpsByRegisters / warps, "registers");
  if (launch.sharedBytes > 0) // 1 KB per block is reserved from sm_80 on
    bound(rates.sharedPerSm / (launch.sharedBytes + (rates.sm >= 80 ? 1024 : 0)), "shared memory");
  o.blocks = std::max(o.blocks, 0);
  return o;
}

Prediction predict(const ArchRates &rates, const PipeCounts &counts, const LaunchShape &launch) {
  Prediction p;
  p.occupancy = occupancyOf(rates, launch);
  if (p.occupancy.blocks == 0) {
    p.limiter = "does not fit";
    return p;
  }
  const double warps = double(p.occupancy.blocks) * launch.warpsPerBlock;
  p.tensor = warps * counts.tensorFlops / rates.tensorFlopsClk;
  p.shared = warps * counts.sharedBytes / rates.sharedBytesClk;
  p.mufu = warps * 32 * counts.of(Pipe::Mufu) / rates.mufuLanes;
  p.fma = warps * 32 * counts.of(Pipe::Fma) / rates.fp32Lanes;
  p.alu = warps * 32 * counts.of(Pipe::Alu) / rates.aluLanes;
  p.issue = warps * counts.total / 4; // one instruction per scheduler per clock
  p.latency = std::max(counts.stallCycles, 0.0);
  const std::pair<double, const char *> units[] = {
      {p.tensor, "tensor"}, {p.shared, "shared"}, {p.mufu, "mufu"},      {p.fma, "fma"},
      {p.alu, "alu"},       {p.issue, "issue"},   {p.latency, "latency"}};
  for (auto [cycles, name] : units)
    if (cycles > p.roundCycles)
      p.roundCycles = cycles, p.limiter = name;
  const double resident = double(rates.sms) * p.occupancy.blocks;
  p.waves = std::ceil(double(launch.blocks) / resident);
  const double rounds = p.waves * std::max(launch.loopTrips, 1.0);
  p.seconds = rounds * p.roundCycles / (rates.clockGhz * 1e9);
  p.dramSeconds = launch.dramBytes / (rates.dramGBs * 1e9);
  if (p.dramSeconds > p.seconds)
    p.seconds = p.dramSeconds, p.limiter = "dram";
  p.tensorUtilisation = p.roundCycles > 0 ? p.tensor / p.roundCycles : 0;
  return p;
}

} // namespace attnc::perf
