//===- device_support.cuh - Kernels around the attention kernels (CUDA) ---===//
//
// What a training step needs around the attention kernels so that its
// attention never leaves the device (runtime/CudaAttention.h,
// attendF32OnDevice):
//
//   strided_gemm(StridedGemmArgs)  the low-rank projections K' = E·K,
//                                  V' = F·V and their backward dK = Eᵀ·dK',
//                                  dE = Σ_b dK'·Kᵀ, fp32
//   convert<In, Out>(ConvertArgs)  fp32 <-> fp16 / bf16, for f16 and bf16
//                                  kernels on a step's fp32 buffers
//
// strided_gemm: one block of kGemmThreads threads per kGemmTile x
// kGemmTile tile of one C_z (grid: batches x tiles, tile fastest), a 4 x 4
// register block per thread, kGemmK-deep slices of A and B staged in
// shared memory. Every element of C is summed by one thread in a fixed
// order (terms, then k), so the result is deterministic, and dE needs no
// atomics. Operands are addressed by strides, so E, Eᵀ and Kᵀ are read in
// place; each slice is loaded with consecutive threads along whichever
// side of the operand is contiguous.
//
// convert: kConvertThreads threads per block, kConvertPerThread elements a
// thread, grid ceil(n / (kConvertThreads * kConvertPerThread)).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_DEVICE_SUPPORT_CUH
#define ATTNC_CUDA_DEVICE_SUPPORT_CUH

#include "attnc/common.cuh"

/// Declares `Type &name` bound to block-shared storage: real __shared__
/// memory under NVRTC, the emulated block's under the host emulator.
#ifdef ATTNC_CUDA_SIMT_EMULATOR_H
#define ATTNC_SUPPORT_SHARED(Type, name) Type &name = ::emu::shared<Type>()
#else
#define ATTNC_SUPPORT_SHARED(Type, name)                                                           \
  __shared__ __align__(16) Type name##Storage;                                                     \
  Type &name = name##Storage
#endif

namespace attnc {

// The launch constants are in attnc/abi/KernelArgs.h (the runtime's too).
constexpr int kGemmTile = kStridedGemmTile;
constexpr int kGemmK = kStridedGemmDepth;
constexpr int kGemmThreads = kStridedGemmThreads; ///< a 4 x 4 block of C each

/// Loads the kGemmTile x kGemmK slice of a strided operand starting at
/// (r0, k0) into s[k][r] (zeros outside rows x depth): consecutive threads
/// walk the contiguous side (`kContiguous`: the k side), so global reads
/// coalesce either way.
ATTNC_HD void gemmStageSlice(float (&s)[kGemmK][kGemmTile], const float *x, long long rowStride,
                             long long kStride, long long rows, long long depth, long long r0,
                             long long k0, bool kContiguous) {
  for (int i = threadIdx.x; i < kGemmTile * kGemmK; i += kGemmThreads) {
    const int r = kContiguous ? i / kGemmK : i % kGemmTile;
    const int kk = kContiguous ? i % kGemmK : i / kGemmTile;
    const long long gr = r0 + r, gk = k0 + kk;
    s[kk][r] = gr < rows && gk < depth ? x[gr * rowStride + gk * kStride] : 0.0f;
  }
}

ATTNC_HD void strided_gemm(const StridedGemmArgs &a) {
  struct Slices {
    float a[kGemmK][kGemmTile]; ///< A's slice, transposed: [k][row]
    float b[kGemmK][kGemmTile]; ///< B's slice: [k][column]
  };
  ATTNC_SUPPORT_SHARED(Slices, sm);
  const long long tilesM = (a.m + kGemmTile - 1) / kGemmTile,
                  tilesN = (a.n + kGemmTile - 1) / kGemmTile;
  const long long block = blockIdx.x;
  const long long tn = block % tilesN, tm = (block / tilesN) % tilesM,
                  z = block / (tilesN * tilesM);
  const long long m0 = tm * kGemmTile, n0 = tn * kGemmTile;
  const float *A = a.a + (z % a.a_batch_mod) * a.a_batch;
  const float *B = a.b + z * a.b_batch;
  float *C = a.c + z * a.c_batch;
  const int tr = int(threadIdx.x) / (kGemmTile / 4) * 4,
            tc = int(threadIdx.x) % (kGemmTile / 4) * 4;
  float acc[4][4] = {};
  for (int t = 0; t < a.terms; ++t) {
    const float *At = A + t * a.a_term, *Bt = B + t * a.b_term;
    for (long long k0 = 0; k0 < a.k; k0 += kGemmK) {
      gemmStageSlice(sm.a, At, a.a_row, a.a_col, a.m, a.k, m0, k0, a.a_col == 1);
      // B[k, n] staged as rows n: its row stride is b_col, its k stride b_row.
      gemmStageSlice(sm.b, Bt, a.b_col, a.b_row, a.n, a.k, n0, k0, a.b_row == 1);
      __syncthreads();
      for (int kk = 0; kk < kGemmK; ++kk) {
        float x[4], y[4];
        for (int i = 0; i < 4; ++i)
          x[i] = sm.a[kk][tr + i], y[i] = sm.b[kk][tc + i];
        for (int i = 0; i < 4; ++i)
          for (int j = 0; j < 4; ++j)
            acc[i][j] = fmaf(x[i], y[j], acc[i][j]);
      }
      __syncthreads(); // the next slice overwrites what this one read
    }
  }
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      const long long r = m0 + tr + i, c = n0 + tc + j;
      if (r >= a.m || c >= a.n)
        continue;
      float *dst = C + r * a.c_row + c * a.c_col;
      *dst = a.beta == 0.0f ? acc[i][j] : fmaf(a.beta, *dst, acc[i][j]);
    }
}

template <class In, class Out> ATTNC_HD void convert(const ConvertArgs &a) {
  const In *in = static_cast<const In *>(a.in);
  Out *out = static_cast<Out *>(a.out);
  const long long first =
      (static_cast<long long>(blockIdx.x) * kConvertThreads + threadIdx.x) * kConvertPerThread;
  for (int i = 0; i < kConvertPerThread; ++i)
    if (first + i < a.n)
      out[first + i] = Elem<Out>::fromFloat(Elem<In>::toFloat(in[first + i]));
}

} // namespace attnc

#endif // ATTNC_CUDA_DEVICE_SUPPORT_CUH
