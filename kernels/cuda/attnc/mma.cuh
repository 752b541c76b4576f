//===- mma.cuh - Warp-level GEMM tiles: tensor cores and SIMT -------------===//
//
// Every GEMM in the attention kernels is a warp computing a 16 x (8*NT) fp32
// accumulator tile held as acc[n][0..3]: acc[n][0], acc[n][1] sit on one
// row of the thread ("lo") in two adjacent columns, acc[n][2], acc[n][3] on
// its other row ("hi") in the same columns. Which rows and columns those are
// is the tile's accumulator layout (AccLayoutM16n8, AccLayoutM8n8k4 below);
// the consumers (softmax, masks, stores) ask the layout, so they run with
// every implementation:
//
// - tensor cores, sm_75+ (fp16; bf16 on sm_80+): mma.sync m16n8k16 with fp32
//   accumulation (on sm_75, as two m16n8k8, which Turing has), operands from
//   shared memory through ldmatrix. Layout m16n8: thread (g, t) = (lane / 4,
//   lane % 4) holds rows g, g + 8, columns 8n + 2t, 8n + 2t + 1, so a row
//   lives in one quad. The 16x16 A fragment of k-step kk is exactly the
//   accumulator of columns 16kk .. 16kk+15 (FlashAttention-2's register
//   reuse of P), see gemmRS.
// - tensor cores, sm_70 (Volta, fp16): mma.sync m8n8k4, whose four
//   quad-pairs each compute an 8x8x4 product. Quad-pairs 0 and 1 take rows
//   0-7, 2 and 3 rows 8-15, and the odd quad-pair the second 8 columns of a
//   16-column block: one instruction is a 16x16x4 step of n-tiles 2m, 2m+1.
//   Operands come from shared memory as plain 8-byte (A, n-major B) or
//   2-byte (k-major B) loads: Volta has no ldmatrix. Layout m8n8k4: a row
//   lives in four lanes (xor 2, xor 4); see AccLayoutM8n8k4. Tiles whose NT
//   is odd (a backward split into 8 columns) take the SIMT path instead.
// - SIMT (fp32 everywhere, bf16 before sm_80): fp32 FMAs in the m16n8
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

// The emulator (kernels/emulator, tests and --target cuda-sim) runs
// these headers on the host and, with ATTNC_EMULATE_MMA, supplies ldmatrix
// and mma with the PTX ISA's semantics (declared below) so that the
// tensor-core paths run there too: the m16n8k16 one (ATTNC_EMULATE_ARCH
// unset or >= 750), or Volta's m8n8k4 one (ATTNC_EMULATE_ARCH 700).
#if defined(ATTNC_EMULATE_MMA)
#if defined(ATTNC_EMULATE_ARCH) && ATTNC_EMULATE_ARCH < 750
#define ATTNC_MMA_ARCH ATTNC_EMULATE_ARCH
#else
#define ATTNC_MMA_ARCH 800
#endif
#else
#define ATTNC_MMA_ARCH ATTNC_ARCH
#endif

/// How a warp GEMM runs: fp32 FMAs, m16n8k16 (k8) tensor cores, or Volta's
/// m8n8k4 ones.
enum class MmaKind { Simt, M16n8, M8n8k4 };

/// The implementation of a 16 x 8NT GEMM with element type T on the arch
/// being compiled.
template <class T, int NT> struct MmaKindOf { static constexpr MmaKind value = MmaKind::Simt; };
template <int NT> struct MmaKindOf<__half, NT> {
  static constexpr MmaKind value = ATTNC_MMA_ARCH >= 750  ? MmaKind::M16n8
                                   : ATTNC_MMA_ARCH < 700 ? MmaKind::Simt
                                   : NT % 2 == 0          ? MmaKind::M8n8k4
                                                          : MmaKind::Simt;
};
template <int NT> struct MmaKindOf<__nv_bfloat16, NT> {
  static constexpr MmaKind value = ATTNC_MMA_ARCH >= 800 ? MmaKind::M16n8 : MmaKind::Simt;
};

//===-- Accumulator layouts -----------------------------------------------===//
//
// A thread's element acc[n][e] is at row rowBase(lane) + kRowStep * (e / 2)
// and column colBase(lane) + colOf(n, e % 2) of the warp's 16 x 8NT tile;
// rowMax and rowSum reduce over the lanes holding the same row, every one
// of which gets the result; rowLeader is true for one lane per row pair.

/// m16n8k16 (and SIMT): g = lane / 4, t = lane % 4; rows g, g + 8; columns
/// 8n + 2t + {0, 1}; a row's lanes are a quad.
struct AccLayoutM16n8 {
  static constexpr int kRowStep = 8;
  static ATTNC_HD int rowBase(int lane) { return lane / 4; }
  static ATTNC_HD int colBase(int lane) { return 2 * (lane % 4); }
  static ATTNC_HD constexpr int colOf(int n, int c) { return 8 * n + c; }
  static ATTNC_HD bool rowLeader(int lane) { return lane % 4 == 0; }
  static ATTNC_HD float rowMax(float x) { return quadMax(x); }
  static ATTNC_HD float rowSum(float x) { return quadSum(x); }
};

/// m8n8k4 as WarpMma<__half, M8n8k4> issues it. The PTX ISA's f32
/// accumulator of quad-pair q = (lane / 4) % 4, lane l, register i (0..7)
/// is row (l & 1) + (i & 2) + 4 (l >= 16), column (i & 4) + (l & 2) + (i & 1)
/// of the quad-pair's 8x8 tile; the tile is rows 8 (q / 2) .. + 7 and
/// columns 16m + 8 (q % 2) .. + 7 of the warp's, and register i is
/// acc[2m + i / 4][i % 4]. A row's lanes differ in bits 1 and 2.
struct AccLayoutM8n8k4 {
  static constexpr int kRowStep = 2;
  static ATTNC_HD int rowBase(int lane) {
    return 8 * ((lane >> 3) & 1) + 4 * (lane >> 4) + (lane & 1);
  }
  static ATTNC_HD int colBase(int lane) { return 8 * ((lane >> 2) & 1) + (lane & 2); }
  static ATTNC_HD constexpr int colOf(int n, int c) { return 16 * (n >> 1) + 4 * (n & 1) + c; }
  static ATTNC_HD bool rowLeader(int lane) { return (lane & 6) == 0; }
  static ATTNC_HD float rowMax(float x) {
    x = fmaxf(x, __shfl_xor_sync(kFullMask, x, 2));
    return fmaxf(x, __shfl_xor_sync(kFullMask, x, 4));
  }
  static ATTNC_HD float rowSum(float x) {
    x += __shfl_xor_sync(kFullMask, x, 2);
    return x + __shfl_xor_sync(kFullMask, x, 4);
  }
};

template <MmaKind K> struct AccLayoutFor { using type = AccLayoutM16n8; };
template <> struct AccLayoutFor<MmaKind::M8n8k4> { using type = AccLayoutM8n8k4; };

/// The layout of a 16 x 8NT accumulator tile of a GEMM on element type T.
template <class T, int NT> using AccLayout = typename AccLayoutFor<MmaKindOf<T, NT>::value>::type;

//===-- PTX wrappers ------------------------------------------------------===//

#if defined(ATTNC_EMULATE_MMA)
void ldsmX4(unsigned (&r)[4], const void *p);
void ldsmX4Trans(unsigned (&r)[4], const void *p);
void ldsmX2(unsigned (&r)[2], const void *p);
void ldsmX2Trans(unsigned (&r)[2], const void *p);
template <class T> void mma16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1);
inline void mma884(float (&c)[8], const unsigned (&a)[2], const unsigned (&b)[2]);
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

/// Volta: c += a * b for the four 8x8x4 products of the warp's quad-pairs
/// (PTX ISA, mma.m8n8k4 with .f16 operands): a, b two f16x2 registers each,
/// c the eight f32 accumulators.
ATTNC_HD void mma884(float (&c)[8], const unsigned (&a)[2], const unsigned (&b)[2]) {
  asm volatile("mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32 "
               "{%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9}, {%10,%11}, {%0,%1,%2,%3,%4,%5,%6,%7};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]), "+f"(c[4]), "+f"(c[5]), "+f"(c[6]),
                 "+f"(c[7])
               : "r"(a[0]), "r"(a[1]), "r"(b[0]), "r"(b[1]));
}
#endif // ATTNC_EMULATE_MMA

//===-- Warp GEMMs --------------------------------------------------------===//

template <class T, MmaKind KIND> struct WarpMmaImpl;

/// m16n8k16 tensor cores.
template <class T> struct WarpMmaImpl<T, MmaKind::M16n8> {
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

  /// A (16 x K, shared) into the registers its k-steps take (ldmatrix
  /// .x4: lanes 0-15 rows 0-15 at k0, lanes 16-31 rows 0-15 at k0 + 8), for
  /// a warp that multiplies the same rows by many B tiles (the forward's Q).
  template <int K> static ATTNC_HD void loadA(unsigned (&af)[K / 16][4], const T *a, int lda) {
    static_assert(K % 16 == 0, "k-steps of 16");
    const int lane = threadIdx.x % 32;
    const T *aLane = a + (lane % 16) * lda + (lane / 16) * 8;
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk)
      ldsmX4(af[kk], aLane + 16 * kk);
  }

  /// acc += A * B with A in registers (loadA) and B in shared memory:
  /// gemmSS without A's shared-memory traffic.
  template <int K, int NT, bool B_KMAJOR>
  static ATTNC_HD void gemmAS(float (&acc)[NT][4], const unsigned (&af)[K / 16][4], const T *b,
                              int ldb) {
    const int lane = threadIdx.x % 32;
    const T *bX4 = bLane<B_KMAJOR>(b, ldb, lane);
    const T *bX2 = bLane<B_KMAJOR>(b, ldb, lane & 15);
#pragma unroll
    for (int kk = 0; kk < K / 16; ++kk)
      kStep<NT, B_KMAJOR>(acc, af[kk], bX4, bX2, ldb, 16 * kk);
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
template <class T> struct WarpMmaImpl<T, MmaKind::Simt> {
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

/// Volta tensor cores: mma.sync m8n8k4 (see the file comment for how the
/// quad-pairs tile the warp's 16 x 8NT block and AccLayoutM8n8k4 for the
/// accumulator). Each lane feeds its quad-pair one row of A and one column
/// of B, four k each (PTX ISA: a_i = A[l % 4 + 4 (l >= 16)][i], b_i =
/// B[i][l % 4 + 4 (l >= 16)], .row.col).
template <class T> struct WarpMmaImpl<T, MmaKind::M8n8k4> {
  static_assert(IsSame<T, __half>::value, "Volta has fp16 tensor cores only");

  /// The warp row of A, and the column of a 16-column block of B, that
  /// this lane supplies.
  static ATTNC_HD int aRow(int lane) {
    return 8 * ((lane >> 3) & 1) + 4 * (lane >> 4) + (lane & 3);
  }
  static ATTNC_HD int bCol(int lane) {
    return 8 * ((lane >> 2) & 1) + 4 * (lane >> 4) + (lane & 3);
  }

  /// Two adjacent elements' bits as one f16x2 register, the first low.
  static ATTNC_HD unsigned pair(T lo, T hi) {
    return unsigned(bitCast<unsigned short>(lo)) | unsigned(bitCast<unsigned short>(hi)) << 16;
  }

  /// acc[2m], acc[2m + 1] += A (this lane's 4 k) * B (4 k of 16 columns).
  static ATTNC_HD void mma(float (&lo)[4], float (&hi)[4], const unsigned (&a)[2],
                           const unsigned (&b)[2]) {
    float c[8] = {lo[0], lo[1], lo[2], lo[3], hi[0], hi[1], hi[2], hi[3]};
    mma884(c, a, b);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      lo[e] = c[e];
      hi[e] = c[4 + e];
    }
  }

  /// B fragment of k-step k0 for the 16-column block starting at column
  /// `col0` (this lane's column already added).
  template <bool B_KMAJOR>
  static ATTNC_HD void loadB(unsigned (&b)[2], const T *bLane, int ldb, int k0, int col0) {
    if constexpr (B_KMAJOR) {
      // Four rows of one column: 2-byte loads (a .row B layout would need
      // a transposed copy; these hit 16 consecutive halves per row).
      const T *p = bLane + k0 * ldb + col0;
      b[0] = pair(p[0], p[ldb]);
      b[1] = pair(p[2 * ldb], p[3 * ldb]);
    } else {
      const uint2 v = *reinterpret_cast<const uint2 *>(bLane + col0 * ldb + k0);
      b[0] = v.x;
      b[1] = v.y;
    }
  }

  template <int NT, bool B_KMAJOR>
  static ATTNC_HD void kStep(float (&acc)[NT][4], const unsigned (&a)[2], const T *bLane, int ldb,
                             int k0) {
#pragma unroll
    for (int m = 0; m < NT / 2; ++m) {
      unsigned b[2];
      loadB<B_KMAJOR>(b, bLane, ldb, k0, 16 * m);
      mma(acc[2 * m], acc[2 * m + 1], a, b);
    }
  }

  /// acc += A (16 x K, shared) * B (K x 8NT, shared).
  template <int K, int NT, bool B_KMAJOR>
  static ATTNC_HD void gemmSS(float (&acc)[NT][4], const T *a, int lda, const T *b, int ldb) {
    static_assert(K % 4 == 0 && NT % 2 == 0, "k-steps of 4, 16-column blocks");
    const int lane = threadIdx.x % 32;
    const T *aLane = a + aRow(lane) * lda;
    // n-major: this lane's column is a row of b; k-major: a column.
    const T *bLane = B_KMAJOR ? b + bCol(lane) : b + bCol(lane) * ldb;
#pragma unroll
    for (int k0 = 0; k0 < K; k0 += 4) {
      const uint2 v = *reinterpret_cast<const uint2 *>(aLane + k0);
      const unsigned af[2] = {v.x, v.y};
      kStep<NT, B_KMAJOR>(acc, af, bLane, ldb, k0);
    }
  }

  /// acc += A * B with A (16 x K) the accumulator tile `p` of a previous
  /// GEMM (m8n8k4 layout), rounded to T, and B k-major in shared memory.
  /// This lane's A row, k0 .. k0 + 3, is held by the two lanes of its row
  /// whose columns are k0, k0 + 1 (bit 1 clear) and k0 + 2, k0 + 3 (bit 1
  /// set), in their lo or hi pair as this lane's bit 1 says: four shuffles
  /// per k-step (each source sends both pairs).
  template <int K, int NT>
  static ATTNC_HD void gemmRS(float (&acc)[NT][4], const float (&p)[K / 8][4], const T *b,
                              int ldb) {
    static_assert(K % 16 == 0 && NT % 2 == 0, "16-column blocks");
    const int lane = threadIdx.x % 32;
    const T *bLane = b + bCol(lane);
    const bool hiRow = (lane >> 1) & 1;
    const int same = lane & 0x19; // bits 0, 3, 4: the row's quad-pair half and parity
#pragma unroll
    for (int k0 = 0; k0 < K; k0 += 4) {
      // Columns k0 .. k0 + 3 = 16m + 8 (q % 2) + 4 (n % 2) + {0 .. 3}.
      const int n = 2 * (k0 / 16) + ((k0 / 4) & 1);
      const int src = same | (((k0 / 8) & 1) << 2);
      const unsigned lo = Elem<T>::pack(p[n][0], p[n][1]);
      const unsigned hi = Elem<T>::pack(p[n][2], p[n][3]);
      const unsigned lo0 = __shfl_sync(kFullMask, lo, src);
      const unsigned hi0 = __shfl_sync(kFullMask, hi, src);
      const unsigned lo1 = __shfl_sync(kFullMask, lo, src | 2);
      const unsigned hi1 = __shfl_sync(kFullMask, hi, src | 2);
      const unsigned af[2] = {hiRow ? hi0 : lo0, hiRow ? hi1 : lo1};
      kStep<NT, true>(acc, af, bLane, ldb, k0);
    }
  }
};

/// The warp GEMMs on element type T: each call takes the implementation
/// for its accumulator's NT (MmaKindOf), so producer and consumers of a
/// tile agree on its layout (AccLayout<T, NT>).
template <class T> struct WarpMma {
  template <int K, int NT, bool B_KMAJOR>
  static ATTNC_HD void gemmSS(float (&acc)[NT][4], const T *a, int lda, const T *b, int ldb) {
    WarpMmaImpl<T, MmaKindOf<T, NT>::value>::template gemmSS<K, NT, B_KMAJOR>(acc, a, lda, b, ldb);
  }
  template <int K, int NT>
  static ATTNC_HD void gemmRS(float (&acc)[NT][4], const float (&p)[K / 8][4], const T *b,
                              int ldb) {
    static_assert(MmaKindOf<T, NT>::value == MmaKindOf<T, K / 8>::value,
                  "P and the accumulator must share a layout");
    WarpMmaImpl<T, MmaKindOf<T, NT>::value>::template gemmRS<K, NT>(acc, p, b, ldb);
  }
};

//===-- Accumulator tiles -------------------------------------------------===//

/// The A operand (16 x K rows of shared memory) of warp GEMMs a kernel runs
/// many times against other B tiles (the forward's Q; dQ's Q and dO; dK/dV's
/// K and V). With IN_REGISTERS, and only on m16n8k16 tensor cores, the rows
/// are loaded into registers once (load) and every gemm reads them there,
/// which takes their ldmatrix traffic out of the kernel's loop; otherwise
/// gemm is gemmSS over the same rows. Kernels choose IN_REGISTERS where the
/// fragments (K / 4 registers) fit beside their accumulators without spills.
template <class T, int K, bool IN_REGISTERS> struct ResidentA {
  unsigned frag[IN_REGISTERS ? K / 16 : 1][4];
  const T *rows = nullptr;
  int ld = 0;

  /// After the rows landed in shared memory (and a barrier).
  ATTNC_HD void load(const T *a, int lda) {
    rows = a, ld = lda;
    if constexpr (IN_REGISTERS)
      WarpMmaImpl<T, MmaKind::M16n8>::template loadA<K>(frag, a, lda);
  }

  /// acc += A * B, B (K x 8NT) in shared memory.
  template <int NT, bool B_KMAJOR>
  ATTNC_HD void gemm(float (&acc)[NT][4], const T *b, int ldb) const {
    if constexpr (IN_REGISTERS) {
      static_assert(MmaKindOf<T, NT>::value == MmaKind::M16n8, "registers on m16n8k16 only");
      WarpMmaImpl<T, MmaKind::M16n8>::template gemmAS<K, NT, B_KMAJOR>(acc, frag, b, ldb);
    } else {
      WarpMma<T>::template gemmSS<K, NT, B_KMAJOR>(acc, rows, ld, b, ldb);
    }
  }
};

template <int NT> ATTNC_HD void zeroAcc(float (&acc)[NT][4]) {
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      acc[n][e] = 0.f;
}

/// Writes a warp's accumulator tile to shared memory as T (row 0, column 0
/// at `s`), the thread's lo rows scaled by mulLo and its hi rows by mulHi.
template <int NT, class T>
ATTNC_HD void storeAcc(T *s, int ld, const float (&acc)[NT][4], float mulLo, float mulHi) {
  using L = AccLayout<T, NT>;
  const int lane = threadIdx.x % 32;
  T *lo = s + L::rowBase(lane) * ld + L::colBase(lane);
  T *hi = lo + L::kRowStep * ld;
#pragma unroll
  for (int n = 0; n < NT; ++n) {
    Elem<T>::store2(lo + L::colOf(n, 0), acc[n][0] * mulLo, acc[n][1] * mulLo);
    Elem<T>::store2(hi + L::colOf(n, 0), acc[n][2] * mulHi, acc[n][3] * mulHi);
  }
}

} // namespace attnc

#endif // ATTNC_CUDA_MMA_CUH
