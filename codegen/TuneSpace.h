//===- TuneSpace.h - The tile search space of attnc tune --------*- C++ -*-===//
//
// Every tile config the kernels could take for one kernel op, split into the
// candidates that fit the target's limits and the ones dropped *before*
// compiling, each with the reason (shape, registers, shared memory, threads,
// pipelining). Built on the same constexpr model as attn-tile
// (TileModel.h), so the tuner never proposes what the compiler would reject
// and never launches a config that cannot fit. Limits are a parameter so a
// test can shrink them (a deliberately tiny shared memory rejects
// everything, with the reasons listed per family). Header-only, no MLIR.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CODEGEN_TUNESPACE_H
#define ATTNC_CODEGEN_TUNESPACE_H

#include "attnc/abi/TileModel.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

namespace attnc::tune {

/// The resources a CUDA config must fit.
struct CudaLimits {
  int sm = 80;       ///< architecture (cp.async needs 80+)
  int smemBytes = 0; ///< 0: the arch's opt-in limit (TileModel.h)
  int maxThreads = tile::kMaxThreads;
  /// Accumulator floats per thread that avoid spills; 0: TileModel's budget.
  int accFloatBudget = 0;
  /// fp16 kernels: on Volta (sm_70, sm_72) their warp GEMMs need n-tile
  /// pairs for the tensor cores (tile::evenWarpTiles); configs that would
  /// put one on fp32 SIMT are dropped there.
  bool fp16 = false;
};

struct Rejection {
  tile::TileConfig config;
  std::string family; ///< shape, registers, shared memory, threads, pipelining,
                      ///< tensor cores
  std::string reason; ///< with the numbers and the limit
};

struct TileSpace {
  std::vector<tile::TileConfig> candidates;
  std::vector<Rejection> rejected;
};

/// "bq=64,bkv=64,w=4,s=2": the canonical text of a config (database keys).
inline std::string configText(const tile::TileConfig &c) {
  return "bq=" + std::to_string(c.blockQ) + ",bkv=" + std::to_string(c.blockKv) +
         ",w=" + std::to_string(c.warps) + ",s=" + std::to_string(c.stages);
}

/// The CUDA space of a dense/low-rank kernel: block sizes 16..128, warps
/// 1..16, stages 1..3 (0..3 for the backward), filtered by the limits.
inline TileSpace cudaTileSpace(int elemBytes, int headDim, bool backward, CudaLimits lim) {
  TileSpace space;
  const int smemLimit = lim.smemBytes > 0 ? lim.smemBytes : tile::smemLimitBytes(lim.sm);
  const int budget =
      lim.accFloatBudget > 0 ? lim.accFloatBudget : tile::accFloatBudget(elemBytes, backward);
  for (int bq : {16, 32, 64, 128})
    for (int bkv : {16, 32, 64, 128})
      for (int warps : {1, 2, 4, 8, 16})
        for (int stages = backward ? 0 : 1; stages <= 3; ++stages) {
          tile::TileConfig c{bq, bkv, warps, stages};
          auto reject = [&](const char *family, std::string why) {
            space.rejected.push_back({c, family, std::move(why)});
          };
          if (warps * 32 > lim.maxThreads) {
            reject("threads",
                   std::to_string(warps * 32) + " threads > " + std::to_string(lim.maxThreads));
            continue;
          }
          if (!tile::validTile(c, headDim, backward)) {
            reject("shape", backward ? "warps do not tile both blocks by 16-row groups"
                                     : "block_q must be 16 x warps");
            continue;
          }
          if (lim.sm < 80 && stages > 1) {
            reject("pipelining", std::to_string(stages) +
                                     " stages need cp.async (sm_80+), "
                                     "target sm_" +
                                     std::to_string(lim.sm));
            continue;
          }
          if (lim.sm < 75 && lim.fp16 && !tile::evenWarpTiles(c, headDim, backward)) {
            reject("tensor cores", "a warp GEMM with an odd number of 8-column tiles runs on "
                                   "fp32 SIMT on sm_" +
                                       std::to_string(lim.sm) + " (m8n8k4 takes pairs)");
            continue;
          }
          int acc = tile::accFloats(c, headDim, backward);
          if (acc > budget) {
            reject("registers", std::to_string(acc) + " accumulator floats per thread > " +
                                    std::to_string(budget));
            continue;
          }
          int smem = tile::smemBytes(c, headDim, elemBytes, backward);
          if (smem > smemLimit) {
            reject("shared memory", std::to_string(smem) + " bytes > " + std::to_string(smemLimit));
            continue;
          }
          space.candidates.push_back(c);
        }
  return space;
}

/// What a CPU config must fit: the per-thread workspace the kernels
/// allocate (every OpenMP thread holds one).
struct CpuLimits {
  long long workspaceBytes = 0; ///< per thread; 0: no limit
};

/// Per-thread workspace of the CPU kernels for a tile, in bytes: the largest
/// of the forward, dK/dV and dQ layouts (FwdLayout, DkDvLayout, DqLayout in
/// kernels/cpu/attnc/flash_*.h; a unit test holds them equal).
inline long long cpuWorkspaceBytes(int bq, int bkv, int headDim) {
  const long long q = bq, k = bkv, d = headDim;
  const long long fwd = d * q + 2 * k * d + k * q + q * d + 6 * q;
  const long long dkdv = 2 * d * k + 2 * q * d + 2 * q * k + 2 * k * d;
  const long long dq = 2 * d * q + 2 * k * d + 2 * k * q + q * d + 2 * q;
  return 4 * std::max({fwd, dkdv, dq});
}

/// The CPU space: query and key blocks 16..128 (warps and stages do not
/// apply; the kernels take any block sizes), minus the configs whose
/// workspace exceeds the limit.
inline TileSpace cpuTileSpace(int headDim = 64, CpuLimits lim = {}) {
  TileSpace space;
  for (int bq : {16, 32, 64, 128})
    for (int bkv : {16, 32, 64, 128}) {
      tile::TileConfig c{bq, bkv, 1, 1};
      long long ws = cpuWorkspaceBytes(bq, bkv, headDim);
      if (lim.workspaceBytes > 0 && ws > lim.workspaceBytes)
        space.rejected.push_back(
            {c, "workspace",
             std::to_string(ws) + " bytes per thread > " + std::to_string(lim.workspaceBytes)});
      else
        space.candidates.push_back(c);
    }
  return space;
}

/// The CPU cost model that orders the candidates, so that a --budget run
/// measures the promising ones first: score entries computed for one head
/// (each query block's key range, causal or not, rounded up to whole query
/// and key blocks: the padding a tile wastes), times the head dim, plus a
/// fixed cost per (query, key) tile pair for copies, transposes and the
/// softmax bookkeeping (kCpuTileOverhead head-dim-sized rows) and per query
/// block for Qᵀ. Relative units; only the order is used.
constexpr double kCpuTileOverhead = 48;

inline double cpuTileCost(const tile::TileConfig &c, int seq, int headDim, bool causal) {
  double entries = 0, tiles = 0, qBlocks = 0;
  for (int q0 = 0; q0 < seq; q0 += c.blockQ) {
    const int rows = std::min(c.blockQ, seq - q0);
    const int keys = causal ? q0 + rows : seq;
    const int keyTiles = (keys + c.blockKv - 1) / c.blockKv;
    entries += double(c.blockQ) * keyTiles * c.blockKv;
    tiles += keyTiles;
    qBlocks += 1;
  }
  return double(headDim) * (entries + kCpuTileOverhead * tiles + c.blockQ * qBlocks);
}

/// The candidates of `space` in cost-model order (stable: ties keep the
/// space's order).
inline void orderByCpuCost(TileSpace &space, int seq, int headDim, bool causal) {
  std::stable_sort(space.candidates.begin(), space.candidates.end(),
                   [&](const tile::TileConfig &a, const tile::TileConfig &b) {
                     return cpuTileCost(a, seq, headDim, causal) <
                            cpuTileCost(b, seq, headDim, causal);
                   });
}

/// One line per rejected family: how many configs and one example reason,
/// e.g. "shared memory: 212 configs (e.g. bq=128,bkv=128,w=8,s=3: 230400
/// bytes > 65536)". What the tuner prints when nothing fits.
inline std::string summarizeRejections(const TileSpace &space) {
  std::map<std::string, std::pair<int, const Rejection *>> byFamily;
  for (const Rejection &r : space.rejected) {
    auto &slot = byFamily[r.family];
    if (!slot.second)
      slot.second = &r;
    ++slot.first;
  }
  std::string out;
  for (const auto &[family, v] : byFamily)
    out += family + ": " + std::to_string(v.first) + " config(s) (e.g. " +
           configText(v.second->config) + ": " + v.second->reason + ")\n";
  return out;
}

} // namespace attnc::tune

#endif // ATTNC_CODEGEN_TUNESPACE_H
