//===- Qualifiers.h - The function qualifiers of the kernel tree -*- C++ -*-===//
//
// The one place the kernel tree spells function qualifiers, for the three
// compilers that read it: NVRTC (CUDA kernels), the host compiler (CPU
// kernels, the runtime, the SIMT emulator, which compiles the CUDA kernels as
// host code) and MLIR passes that share the tile models. No includes.
//
//   ATTNC_HOST_DEVICE  callable from host code and from kernels: tile models,
//                      Philox. Spelled before `constexpr` or `inline`.
//   ATTNC_HD           kernel-side helpers and variant hooks, always inlined
//                      into the kernel on CUDA; plain `inline` on the CPU.
//   ATTNC_FORCE_INLINE the CPU's hot inner functions (tile GEMMs, exp,
//                      activations), always inlined even where the host
//                      compiler's heuristics would not.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_ABI_QUALIFIERS_H
#define ATTNC_ABI_QUALIFIERS_H

#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define ATTNC_HOST_DEVICE __host__ __device__
#define ATTNC_HD __device__ __forceinline__
#define ATTNC_FORCE_INLINE __device__ __forceinline__
#else
#define ATTNC_HOST_DEVICE
#define ATTNC_HD inline
#if defined(__GNUC__) || defined(__clang__)
#define ATTNC_FORCE_INLINE inline __attribute__((always_inline))
#else
#define ATTNC_FORCE_INLINE inline
#endif
#endif

#endif // ATTNC_ABI_QUALIFIERS_H
