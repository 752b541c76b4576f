//===- mma.cuh - Warp-level GEMM tiles: tensor cores and SIMT -------------===//
//
// Every GEMM in the attention kernels is a warp computing a 16 x (8*NT) fp32
// accumulator tile, acc[n][0..3], in the layout of the m16n8 MMA accumulator:
// with g = lane / 4 and t = lane % 4, thread (g, t) holds
//
//   acc[n][0], acc[n][1]  at row g,     columns 8n + 2t, 8n + 2t + 1
//   acc[n][2], acc[n][3]  at row g + 8, columns 8n + 2t, 8n + 2t + 1
//
// so a row lives in one quad (softmax reductions are two shuffles) and the
// same code drives both implementations below:
//
// - tensor cores (fp16 on sm_75+, bf16 on sm_80+): mma.sync m16n8k16 with
//   fp32 accumulation (on sm_75, as two m16n8k8, which Turing has), operands
//   from shared memory through ldmatrix. The 16x16 A fragment of k-step kk is
//   exactly the accumulator of columns 16kk .. 16kk+15 (FlashAttention-2's
//   register reuse of P), see gemmRS. Volta would need m8n8k4 (or WMMA) here;
//   CUDA 13 cannot target sm_70 anyway.
// - SIMT (fp32 everywhere, bf16 before sm_80): fp32 FMAs in the same
//   layout, operands read from shared memory as float4/float2; the A operand
//   of gemmRS comes from the quad's registers through shuffles.
//
// Operands: A is 16 rows, row-major (element (m, k) at a[m * lda + k]). B is
// K x 8NT and comes in two forms: "n-major", (k, n) at b[n * ldb + k] (K in
// Q K^T: rows of a row-major tile), or "k-major", (k, n) at b[k * ldb + n]
// (V in P V). Row strides come from TileModel.h, 16-byte aligned, and their
// 16-byte padding makes the ldmatrix phases and the SIMT vector loads free
// of bank conflicts.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_MMA_CUH
#define ATTNC_CUDA_MMA_CUH

#include "attnc/common.cuh"

namespace attnc {

// Tests only: test/unit/CudaKernelsTest.cpp runs these headers on the host
// and, with ATTNC_EMULATE_MMA, supplies ldmatrix and mma with the PTX ISA's
// semantics (declared below) so that the tensor-core path runs there too.
#if defined(ATTNC_EMULATE_MMA)
#define ATTNC_MMA_ARCH 800
#else
#define ATTNC_MMA_ARCH ATTNC_ARCH
#endif

/// Whether element type T runs on tensor cores on the arch being compiled.
template <class T> struct UseTensorCores { static constexpr bool value = false; };
template <> struct UseTensorCores<__half> { static constexpr bool value = ATTNC_MMA_ARCH >= 750; };
template <> struct UseTensorCores<__nv_bfloat16> {
  static constexpr bool value = ATTNC_MMA_ARCH >= 800;
};

//===-- PTX wrappers ------------------------------------------------------===//

#if defined(ATTNC_EMULATE_MMA)
void ldsmX4(unsigned (&r)[4], const void *p);
void ldsmX4Trans(unsigned (&r)[4], const void *p);
void ldsmX2(unsigned (&r)[2], const void *p);
void ldsmX2Trans(unsigned (&r)[2], const void *p);
template <class T> void mma16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1);
#else

ATTNC_HD unsigned smemAddr(const void *p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// ldmatrix reads shared memory written by other threads: volatile, so it is
// never moved across the barriers that publish that memory.
ATTNC_HD void ldsmX4(unsigned (&r)[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smemAddr(p)));
}
ATTNC_HD void ldsmX4Trans(unsigned (&r)[4], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smemAddr(p)));
}
ATTNC_HD void ldsmX2(unsigned (&r)[2], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smemAddr(p)));
}
ATTNC_HD void ldsmX2Trans(unsigned (&r)[2], const void *p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(smemAddr(p)));
}

/// c += a * b for one m16n8k16 tile; a: 4 registers of 2 elements, b0/b1:
/// k rows 0-7 and 8-15.
template <class T>
ATTNC_HD void mma16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
#if ATTNC_ARCH >= 800
  if constexpr (IsSame<T, __half>::value) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    static_assert(IsSame<T, __nv_bfloat16>::value, "fp16 or bf16 only");
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
#else
  // Turing: k 0-7 (a0, a1, b0) then k 8-15 (a2, a3, b1); fp16 only.
  static_assert(IsSame<T, __half>::value, "no bf16 tensor cores before sm_80");
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
               "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(b0));
  asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 "
               "{%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[2]), "r"(a[3]), "r"(b1));
#endif
}
#endif // ATTNC_EMULATE_MMA

//===-- Warp GEMMs --------------------------------------------------------===//

template <class T, bool TC = UseTensorCores<T>::value> struct WarpMma;

/// Tensor-core implementation.
template <class T> struct WarpMma<T, true> {
  /// Lane address of B for ldmatrix .x4 covering n-tiles n, n+1 at k-step 0
  /// (n-major: non-transposed; k-major: .trans). Matrices: (n, k 0-7),
  /// (n, k 8-15), (n+1, k 0-7), (n+1, k 8-15) = b0, b1 of both tiles.
  template <bool B_KMAJOR> static ATTNC_HD const T *bLane(const T *b, int ldb, int lane) {
    return B_KMAJOR ? b + ((lane & 7) + (((lane >> 3) & 1) << 3)) * ldb + ((lane >> 4) << 3)
                    : b + ((lane & 7) + ((lane >> 4) << 3)) * ldb + (((lane >> 3) & 1) << 3);
  }

  /// B fragments (b0, b1) of n-tiles n, n+1 (PAIR) or of n-tile n alone.
  template <bool B_KMAJOR, bool PAIR>
  static ATTNC_HD void loadB(unsigned (&b)[4], const T *bLaneX4, const T *bLaneX2, int ldb, int k0,
                             int n) {
    if constexpr (PAIR) {
      if constexpr (B_KMAJOR)
        ldsmX4Trans(b, bLaneX4 + k0 * ldb + 8 * n);
      else
        ldsmX4(b, bLaneX4 + 8 * n * ldb + k0);
    } else {
      unsigned r[2];
      if constexpr (B_KMAJOR)
        ldsmX2Trans(r, bLaneX2 + k0 * ldb + 8 * n);
      else
        ldsmX2(r, bLaneX2 + 8 * n * ldb + k0);
      b[0] = r[0];
      b[1] = r[1];
    }
  }

  template <int NT, bool B_KMAJOR>
  static ATTNC_HD void kStep(float (&acc)[NT][4], const unsigned (&a)[4], const T *bX4,
                             const T *bX2, int ldb, int k0) {
#pragma unroll
    for (int n = 0; n + 1 < NT; n += 2) {
      unsigned b[4];
      loadB<B_KMAJOR, true>(b, bX4, bX2, ldb, k0, n);
      mma16816<T>(acc[n], a, b[0], b[1]);
      mma16816<T>(acc[n + 1], a, b[2], b[3]);
    }
    if constexpr (NT % 2 == 1) {
      unsigned b[4];
      loadB<B_KMAJOR, false>(b, bX4, bX2, ldb, k0, NT - 1);
      mma16816<T>(acc[NT - 1], a, b[0], b[1]);
    }
  }

  /// acc += A (16 x K, shared) * B (K x 8NT, shared).
  template <int K, int NT, bool B_KMAJOR>
  static ATTNC_HD void gemmSS(float (&acc)[NT][4], const T *a, int lda, const T *b, int ldb) {
    static_assert(K % 16 == 0, "k-steps of 16");
    const int lane = threadIdx.x % 32;
    // A .x4: lanes 0-15 rows 0-15 at k0, lanes 16-31 rows 0-15 at k0 + 8.
    const T *aLane = a + (lane % 16) * lda + (lane / 16) * 8;
    const T *bX4 = bLane<B_KMAJOR>(b, ldb, lane);
    const T *bX2 = bLane<B_KMAJOR>(b, ldb, lane & 15);
#pragma unroll
    for (int k0 = 0; k0 < K; k0 += 16) {
      unsigned af[4];
      ldsmX4(af, aLane + k0);
      kStep<NT, B_KMAJOR>(acc, af, bX4, bX2, ldb, k0);
    }
  }

  /// acc += A * B with A (16 x K) the accumulator tile `p` of a previous
  /// GEMM, rounded to T, and B k-major in shared memory.
  template <int K, int NT>
  static ATTNC_HD void gemmRS(float (&acc)[NT][4], const float (&p)[K / 8][4], const T *b,
                              int ldb) {
    static_assert(K % 16 == 0, "k-steps of 16");
    const int lane = threadIdx.x % 32;
    const T *bX4 = bLane<true>(b, ldb, lane);
    const T *bX2 = bLane<true>(b, ldb, lane & 15);
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk) {
      const unsigned af[4] = {Elem<T>::pack(p[2 * kk][0], p[2 * kk][1]),
                              Elem<T>::pack(p[2 * kk][2], p[2 * kk][3]),
                              Elem<T>::pack(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                              Elem<T>::pack(p[2 * kk + 1][2], p[2 * kk + 1][3])};
      kStep<NT, true>(acc, af, bX4, bX2, ldb, 16 * kk);
    }
  }
};

/// SIMT implementation (fp32 FMAs, same accumulator layout). The k loops
/// are deliberately not unrolled: each iteration's loads feed 4 * NT FMAs,
/// and unrolling lets the scheduler hoist loads of many iterations at once,
/// which spills next to a D-wide accumulator.
template <class T> struct WarpMma<T, false> {
  template <int K, int NT, bool B_KMAJOR>
  static ATTNC_HD void gemmSS(float (&acc)[NT][4], const T *a, int lda, const T *b, int ldb) {
    static_assert(K % 4 == 0, "k-steps of 4");
    const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const T *a0 = a + g * lda;
    const T *a1 = a + (g + 8) * lda;
    if constexpr (!B_KMAJOR) {
      // (k, n) at b[n * ldb + k]: four k per vector load of A and B.
#pragma unroll 1
      for (int k = 0; k < K; k += 4) {
        const float4 x = Elem<T>::load4(a0 + k), y = Elem<T>::load4(a1 + k);
#pragma unroll
        for (int n = 0; n < NT; ++n) {
          const float4 u = Elem<T>::load4(b + (8 * n + 2 * t) * ldb + k);
          const float4 v = Elem<T>::load4(b + (8 * n + 2 * t + 1) * ldb + k);
          acc[n][0] = dot4(x, u, acc[n][0]);
          acc[n][1] = dot4(x, v, acc[n][1]);
          acc[n][2] = dot4(y, u, acc[n][2]);
          acc[n][3] = dot4(y, v, acc[n][3]);
        }
      }
    } else {
      // (k, n) at b[k * ldb + n]: one k per step, columns 2t, 2t + 1 as a
      // pair.
#pragma unroll 1
      for (int k = 0; k < K; ++k) {
        const float x = Elem<T>::toFloat(a0[k]), y = Elem<T>::toFloat(a1[k]);
        const T *bk = b + k * ldb + 2 * t;
#pragma unroll
        for (int n = 0; n < NT; ++n)
          fma4(acc[n], x, y, Elem<T>::load2(bk + 8 * n));
      }
    }
  }

  /// As the tensor-core gemmRS; A is not rounded (fp32 throughout). Element
  /// (row, k) of A sits in register p[k / 8][(k % 2) + 2 * (row >= 8)] of
  /// lane (row % 8) * 4 + (k % 8) / 2, so each k takes two shuffles.
  template <int K, int NT>
  static ATTNC_HD void gemmRS(float (&acc)[NT][4], const float (&p)[K / 8][4], const T *b,
                              int ldb) {
    const int lane = threadIdx.x % 32, t = lane % 4, quad = lane & ~3;
#pragma unroll
    for (int kn = 0; kn < K / 8; ++kn) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        // The register is static, the source lane is not: no unrolling.
#pragma unroll 1
        for (int src = 0; src < 4; ++src) {
          const float x = __shfl_sync(kFullMask, p[kn][e], quad | src);
          const float y = __shfl_sync(kFullMask, p[kn][2 + e], quad | src);
          const T *bk = b + (8 * kn + 2 * src + e) * ldb + 2 * t;
#pragma unroll
          for (int n = 0; n < NT; ++n)
            fma4(acc[n], x, y, Elem<T>::load2(bk + 8 * n));
        }
      }
    }
  }

  /// c[0..1] += x * u, c[2..3] += y * u: rows g, g + 8 of one n-tile.
  static ATTNC_HD void fma4(float (&c)[4], float x, float y, float2 u) {
    c[0] = fmaf(x, u.x, c[0]);
    c[1] = fmaf(x, u.y, c[1]);
    c[2] = fmaf(y, u.x, c[2]);
    c[3] = fmaf(y, u.y, c[3]);
  }

  static ATTNC_HD float dot4(float4 x, float4 u, float c) {
    c = fmaf(x.x, u.x, c);
    c = fmaf(x.y, u.y, c);
    c = fmaf(x.z, u.z, c);
    return fmaf(x.w, u.w, c);
  }
};

//===-- Accumulator tiles -------------------------------------------------===//

template <int NT> ATTNC_HD void zeroAcc(float (&acc)[NT][4]) {
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc[n][e] = 0.f;
}

/// Writes a warp's accumulator tile to shared memory as T (row 0, column 0
/// at `s`), rows g scaled by mulLo and rows g + 8 by mulHi.
template <int NT, class T>
ATTNC_HD void storeAcc(T *s, int ld, const float (&acc)[NT][4], float mulLo, float mulHi) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    Elem<T>::store2(s + g * ld + 8 * n + 2 * t, acc[n][0] * mulLo, acc[n][1] * mulLo);
    Elem<T>::store2(s + (g + 8) * ld + 8 * n + 2 * t, acc[n][2] * mulHi, acc[n][3] * mulHi);
  }
}

} // namespace attnc

#endif // ATTNC_CUDA_MMA_CUH
