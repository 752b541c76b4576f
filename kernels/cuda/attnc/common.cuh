//===- common.cuh - Shared definitions of the CUDA attention kernels ------===//
//
// NVRTC-safe: includes no host headers. Compile with the include directories
// `codegen/cuda/include` (for "attnc/...") and `codegen` (for KernelArgs.h
// and TileModel.h), plus the CUDA toolkit's include directory, which NVRTC
// needs for cuda_fp16.h and cuda_bf16.h.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_COMMON_CUH
#define ATTNC_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attnc/abi/KernelArgs.h"
#include "attnc/abi/SharedQk.h"
#include "attnc/abi/TileModel.h"

#include "attnc/abi/Qualifiers.h"
#include "attnc/common/mask.h"

/// The SM version being compiled for (e.g. 800), 0 in a host pass.
#ifdef __CUDA_ARCH__
#define ATTNC_ARCH __CUDA_ARCH__
#else
#define ATTNC_ARCH 0
#endif

namespace attnc {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

ATTNC_HD float posInf() { return __int_as_float(0x7f800000); }
ATTNC_HD float negInf() { return __int_as_float(0xff800000); }

ATTNC_HD int imin(int a, int b) { return a < b ? a : b; }
ATTNC_HD int imax(int a, int b) { return a > b ? a : b; }

/// What one block of a flash kernel owns, read from its grid position: a
/// (batch, head) and a tile of BLOCK rows along a sequence of `n` (queries
/// for the forward and dQ, keys for dK/dV), and where that batch's keys end
/// under the variant's mask (its key length, else Nk). The prologue every
/// flash kernel begins with, written once.
struct BlockInfo {
  int bh, b, h; ///< the (batch, head) row of the grid, and its parts
  int tile;     ///< the tile's index along the sequence
  int start;    ///< its first row, tile * BLOCK
  int rows;     ///< its rows inside the sequence (<= 0 for a tile past the end)
  int kvEnd;    ///< keys at or past it are excluded
};

template <int BLOCK, class Variant, class Args> ATTNC_HD BlockInfo blockInfo(const Args &a, int n) {
  const tile::GridBlock blk = tile::gridBlock(blockIdx.x, tile::gridTiles(n, BLOCK));
  BlockInfo info;
  info.bh = blk.row, info.b = blk.row / a.H, info.h = blk.row % a.H;
  info.tile = blk.tile, info.start = blk.tile * BLOCK;
  info.rows = imin(BLOCK, n - info.start);
  info.kvEnd = mask::keyEnd<Variant>(a.lengths, info.b, a.Nk);
  return info;
}

template <class A, class B> struct IsSame { static constexpr bool value = false; };
template <class A> struct IsSame<A, A> { static constexpr bool value = true; };

/// Reinterprets the bits of a value (a packed half2 as 32 bits, ...). A
/// union: NVRTC has no __builtin_memcpy, and unlike pointer casts this is
/// defined for host compilers too (GCC, for the emulation test).
template <class To, class From> ATTNC_HD To bitCast(const From &from) {
  static_assert(sizeof(To) == sizeof(From), "same size");
  union Bits {
    From from;
    To to;
    ATTNC_HD Bits() {}
  } bits;
  bits.from = from;
  return bits.to;
}

//===-- Element types -----------------------------------------------------===//

/// Per element type: conversions to and from fp32, two elements packed in 32
/// bits (the unit of MMA fragments and of accumulator stores), four elements
/// loaded as float4 (the unit of the SIMT GEMM).
template <class T> struct Elem;

template <> struct Elem<float> {
  static ATTNC_HD float toFloat(float x) { return x; }
  static ATTNC_HD float fromFloat(float x) { return x; }
  static ATTNC_HD float4 load4(const float *p) { return *reinterpret_cast<const float4 *>(p); }
  static ATTNC_HD float2 load2(const float *p) { return *reinterpret_cast<const float2 *>(p); }
  static ATTNC_HD void store2(float *p, float a, float b) {
    *reinterpret_cast<float2 *>(p) = make_float2(a, b);
  }
};

template <> struct Elem<__half> {
  static ATTNC_HD float toFloat(__half x) { return __half2float(x); }
  static ATTNC_HD __half fromFloat(float x) { return __float2half_rn(x); }
  static ATTNC_HD unsigned pack(float a, float b) {
    return bitCast<unsigned>(__floats2half2_rn(a, b)); // a in the low half
  }
  static ATTNC_HD float2 load2(const __half *p) {
    return __half22float2(*reinterpret_cast<const __half2 *>(p));
  }
  static ATTNC_HD float4 load4(const __half *p) {
    const uint2 u = *reinterpret_cast<const uint2 *>(p);
    const float2 lo = __half22float2(bitCast<__half2>(u.x));
    const float2 hi = __half22float2(bitCast<__half2>(u.y));
    return make_float4(lo.x, lo.y, hi.x, hi.y);
  }
  static ATTNC_HD void store2(__half *p, float a, float b) {
    *reinterpret_cast<unsigned *>(p) = pack(a, b);
  }
};

template <> struct Elem<__nv_bfloat16> {
  // bf16 is the top half of an fp32: conversions are shifts, on every arch.
  static ATTNC_HD float toFloat(__nv_bfloat16 x) { return __bfloat162float(x); }
  static ATTNC_HD __nv_bfloat16 fromFloat(float x) { return __float2bfloat16_rn(x); }
  static ATTNC_HD unsigned pack(float a, float b) {
    return bitCast<unsigned>(__floats2bfloat162_rn(a, b)); // a in the low half
  }
  static ATTNC_HD float2 unpack(unsigned u) {
    return make_float2(__uint_as_float(u << 16), __uint_as_float(u & 0xffff0000u));
  }
  static ATTNC_HD float2 load2(const __nv_bfloat16 *p) {
    return unpack(*reinterpret_cast<const unsigned *>(p));
  }
  static ATTNC_HD float4 load4(const __nv_bfloat16 *p) {
    const uint2 u = *reinterpret_cast<const uint2 *>(p);
    const float2 lo = unpack(u.x), hi = unpack(u.y);
    return make_float4(lo.x, lo.y, hi.x, hi.y);
  }
  static ATTNC_HD void store2(__nv_bfloat16 *p, float a, float b) {
    *reinterpret_cast<unsigned *>(p) = pack(a, b);
  }
};

//===-- Warp helpers ------------------------------------------------------===//

constexpr unsigned kFullMask = 0xffffffffu;

/// Reductions over the four lanes of a quad (lanes 4g .. 4g+3), which hold
/// one accumulator row between them. Butterflies: every lane gets the same,
/// deterministic result.
ATTNC_HD float quadMax(float x) {
  x = fmaxf(x, __shfl_xor_sync(kFullMask, x, 1));
  return fmaxf(x, __shfl_xor_sync(kFullMask, x, 2));
}
ATTNC_HD float quadSum(float x) {
  x += __shfl_xor_sync(kFullMask, x, 1);
  return x + __shfl_xor_sync(kFullMask, x, 2);
}
ATTNC_HD float warpSum(float x) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1)
    x += __shfl_xor_sync(kFullMask, x, m);
  return x;
}

/// The kernel's dynamic shared memory (layouts from TileModel.h).
ATTNC_HD unsigned char *dynamicSmem() {
  extern __shared__ __align__(16) unsigned char attncSmem[];
  return attncSmem;
}

template <class T> ATTNC_HD T *smemAt(int byteOffset) {
  return reinterpret_cast<T *>(dynamicSmem() + byteOffset);
}

} // namespace attnc

// The emitted entry points of a fused dense or low-rank kernel NAME take
// their tile from one macro, ATTNC_TILE_NAME = block_q, block_kv, warps,
// stages, which the source defines unless the runtime did first: it
// re-tiles for the GPU present when that is not the one the tile was
// picked for (runtime/DeviceTiling.h). These pick the fields out of it.
#define ATTNC_TILE_THREADS_(bq, bkv, warps, stages) ((warps)*32)
#define ATTNC_TILE_THREADS(tile) ATTNC_TILE_THREADS_(tile)
#define ATTNC_TILE_WARPS_(bq, bkv, warps, stages) warps
#define ATTNC_TILE_WARPS(tile) ATTNC_TILE_WARPS_(tile)
/// The template arguments <BQ, BKV, D, WARPS, STAGES, T, Variant> of the
/// flash kernels.
#define ATTNC_FLASH_ARGS_(bq, bkv, warps, stages, d, t, variant)                                   \
  bq, bkv, d, warps, stages, t, variant
#define ATTNC_FLASH_ARGS(tile, d, t, variant) ATTNC_FLASH_ARGS_(tile, d, t, variant)

#endif // ATTNC_CUDA_COMMON_CUH
