//===- device_support.cuh - Kernels around the attention kernels (CUDA) ---===//
//
// What a training step needs around the attention kernels so that its
// attention never leaves the device (runtime/CudaAttention.h,
// attendF32OnDevice):
//
//   strided_gemm(StridedGemmArgs)  the low-rank projections K' = E·K,
//                                  V' = F·V and their backward dK = Eᵀ·dK',
//                                  dE = Σ_b dK'·Kᵀ, fp32 (f32 kernels)
//   strided_gemm_mma<T>            the same on tensor cores: operands read
//                                  as fp32, rounded to T (fp16 / bf16, the
//                                  kernels' type), fp32 accumulation
//   strided_gemm_reduce            sums strided_gemm_mma's split parts
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
// strided_gemm_mma: attnc/abi/ProjectionTileModel.h has its tiles, its
// split of long sums and its grid. Each element of C is summed by one
// lane in a fixed order within a part, and the parts are summed in order
// by strided_gemm_reduce, so it is deterministic too. A slice inside the
// operands is read as float4s before the tensor cores multiply the
// current one (register double buffering); edge slices take checked loads
// (ProjSlice).
//
// Both GEMMs read the elements of a padded sequence axis at or past its
// length as zero (StridedGemmArgs::seq_lengths).
//
// convert: kConvertThreads threads per block, kConvertPerThread elements a
// thread, grid ceil(n / (kConvertThreads * kConvertPerThread)).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_DEVICE_SUPPORT_CUH
#define ATTNC_CUDA_DEVICE_SUPPORT_CUH

#include "attnc/abi/ProjectionTileModel.h"
#include "attnc/common.cuh"
#include "attnc/mma.cuh"

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

/// Where term t of C_z's sum ends along A's rows, the depth and B's
/// columns: the GEMM's sizes, cut at the key-padding length on the padded
/// axis.
struct GemmLimits {
  long long rows, depth, cols;
};
ATTNC_HD GemmLimits gemmLimits(const StridedGemmArgs &a, int z, int t) {
  GemmLimits l{a.m, a.k, a.n};
  if (!a.seq_lengths)
    return l;
  // 32-bit: a 64-bit division is a call, with a stack frame.
  const int raw = a.seq_lengths[(z * a.seq_z_scale + t) / a.seq_div];
  const long long len = raw > 0 ? raw : 0;
  // Plain assignments, no reference into l: that would put l on the stack.
  if (a.seq_axis == kGemmSeqRowsOfA)
    l.rows = l.rows < len ? l.rows : len;
  else if (a.seq_axis == kGemmSeqDepth)
    l.depth = l.depth < len ? l.depth : len;
  else
    l.cols = l.cols < len ? l.cols : len;
  return l;
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
    const GemmLimits lim = gemmLimits(a, int(z), t);
    for (long long k0 = 0; k0 < a.k; k0 += kGemmK) {
      gemmStageSlice(sm.a, At, a.a_row, a.a_col, lim.rows, lim.depth, m0, k0, a.a_col == 1);
      // B[k, n] staged as rows n: its row stride is b_col, its k stride b_row.
      gemmStageSlice(sm.b, Bt, a.b_col, a.b_row, lim.cols, lim.depth, n0, k0, a.b_row == 1);
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

//===-- strided_gemm_mma --------------------------------------------------===//

/// One operand's ROWS x kProjDepth slice on its way to shared memory. In
/// memory, element (r, kk) is x[(r0 + r) * rowStride + (k0 + kk) *
/// kStride], zero outside rows x depth; K_CONTIGUOUS says kStride is the
/// contiguous one (else rowStride). In shared memory it lands rounded to
/// T at s[r * kProjRowHalves + kk] ("row-major"), or with K_MAJOR at
/// s[kk * kProjKRowHalves + r] (B stored k-major for gemmSS, when its rows
/// are the contiguous side). Consecutive threads walk the contiguous side,
/// so the loads coalesce and, but for A with contiguous rows, each stores
/// its 4 elements as one 8-byte word.
///
/// Two ways there. A slice inside the operand whose contiguous side is
/// 16-byte aligned is loaded into registers as float4s, unchecked, one
/// slice ahead (loadQuads, then storeQuads after the barrier). Any other
/// slice (the edges of the operand, or unaligned strides) is staged
/// straight to shared memory with a checked load per element (stageChecked,
/// a rolled loop: it is rare, and it keeps the hot loop short).
template <int ROWS, bool K_CONTIGUOUS, bool K_MAJOR> struct ProjSlice {
  static_assert(!(K_CONTIGUOUS && K_MAJOR), "k-major staging is for row-contiguous operands");
  static constexpr int kDepth = tile::kProjDepth, kThreads = tile::kProjThreads;
  static constexpr int kQuads = ROWS * kDepth / (4 * kThreads); ///< float4 loads a thread
  static_assert((kThreads * 4) % kDepth == 0 && (kThreads * 4) % ROWS == 0 && kQuads >= 1 &&
                    ROWS * kDepth % (4 * kThreads) == 0,
                "fixed steps per thread");
  float v[4 * kQuads];
  bool quads; ///< the slice ahead is in v

  /// A thread's first element and the (row, k) step between its loads of
  /// `width` consecutive elements along the contiguous side.
  static ATTNC_HD void walk(int width, int &r, int &kk, int &dr, int &dk) {
    const int i = int(threadIdx.x) * width;
    r = K_CONTIGUOUS ? i / kDepth : i % ROWS;
    kk = K_CONTIGUOUS ? i % kDepth : i / ROWS;
    dr = K_CONTIGUOUS ? kThreads * width / kDepth : 0;
    dk = K_CONTIGUOUS ? 0 : kThreads * width / ROWS;
  }
  static ATTNC_HD constexpr int at(int r, int kk) {
    return K_MAJOR ? kk * tile::kProjKRowHalves + r : r * tile::kProjRowHalves + kk;
  }
  /// Whether the slice at (r0, k0) is loaded as quads.
  static ATTNC_HD bool fits(bool aligned, long long rows, long long depth, long long r0,
                            long long k0) {
    return aligned && r0 + ROWS <= rows && k0 + kDepth <= depth;
  }
  ATTNC_HD void loadQuads(const float *x, long long rowStride, long long kStride, long long r0,
                          long long k0) {
    int r, kk, dr, dk;
    walk(4, r, kk, dr, dk);
    const float *p = x + (r0 + r) * rowStride + (k0 + kk) * kStride;
    const long long step = dr * rowStride + dk * kStride;
#pragma unroll
    for (int j = 0; j < kQuads; ++j) {
      const float4 f = *reinterpret_cast<const float4 *>(p + j * step);
      v[4 * j] = f.x, v[4 * j + 1] = f.y, v[4 * j + 2] = f.z, v[4 * j + 3] = f.w;
    }
  }
  template <class T> ATTNC_HD void storeQuads(T *s) const {
    int r, kk, dr, dk;
    walk(4, r, kk, dr, dk);
#pragma unroll
    for (int j = 0; j < kQuads; ++j) {
      const int r1 = r + j * dr, k1 = kk + j * dk;
      if constexpr (K_CONTIGUOUS || K_MAJOR) { // 4 neighbours in shared memory too
        *reinterpret_cast<uint2 *>(s + at(r1, k1)) = make_uint2(
            Elem<T>::pack(v[4 * j], v[4 * j + 1]), Elem<T>::pack(v[4 * j + 2], v[4 * j + 3]));
      } else { // one k of 4 rows
#pragma unroll
        for (int e = 0; e < 4; ++e)
          s[at(r1 + e, k1)] = Elem<T>::fromFloat(v[4 * j + e]);
      }
    }
  }
  template <class T>
  static ATTNC_HD void stageChecked(T *s, const float *x, long long rowStride, long long kStride,
                                    long long rows, long long depth, long long r0, long long k0) {
    int r, kk, dr, dk;
    walk(1, r, kk, dr, dk);
#pragma unroll 1
    for (int j = 0; j < 4 * kQuads; ++j) {
      const long long gr = r0 + r + j * dr, gk = k0 + kk + j * dk;
      const float f = gr < rows && gk < depth ? x[gr * rowStride + gk * kStride] : 0.0f;
      s[at(r + j * dr, kk + j * dk)] = Elem<T>::fromFloat(f);
    }
  }
};

/// Whether an operand's float4 loads along its contiguous side
/// (`contiguous` must be 1) stay 16-byte aligned at every slice, batch and
/// term.
ATTNC_HD bool projAligned(const float *x, long long contiguous, long long otherStride,
                          long long batch, long long term) {
  return contiguous == 1 && reinterpret_cast<unsigned long long>(x) % 16 == 0 &&
         otherStride % 4 == 0 && batch % 4 == 0 && term % 4 == 0;
}

/// A and B of one block of strided_gemm_mma: slice `it` of the summed range
/// is term it / depth, k slice it % depth. A is staged row-major; B
/// row-major ([n][k]) when its k side is contiguous, else k-major.
template <class T, bool A_K, bool B_K> struct ProjSlices {
  const StridedGemmArgs &g;
  const float *A, *B; ///< this block's batch
  int z, depth;
  long long m0, n0;
  bool aAligned, bAligned; ///< float4s at every slice
  ProjSlice<tile::kProjTileM, A_K, false> a;
  ProjSlice<tile::kProjTileN, B_K, !B_K> b;

  ATTNC_HD ProjSlices(const StridedGemmArgs &g, const float *A, const float *B, int z, int depth,
                      long long m0, long long n0)
      : g(g), A(A), B(B), z(z), depth(depth), m0(m0), n0(n0) {
    aAligned =
        projAligned(g.a, A_K ? g.a_col : g.a_row, A_K ? g.a_row : g.a_col, g.a_batch, g.a_term);
    bAligned =
        projAligned(g.b, B_K ? g.b_row : g.b_col, B_K ? g.b_col : g.b_row, g.b_batch, g.b_term);
  }
  /// Where slice `it` is: its term, first k and the term's limits.
  struct Position {
    int t;
    long long k0;
    GemmLimits lim;
  };
  ATTNC_HD Position position(int it) const {
    const int t = it / depth;
    return {t, static_cast<long long>(it % depth) * tile::kProjDepth, gemmLimits(g, z, t)};
  }
  /// Slice `it`'s quads into registers (those of its operands that fit).
  ATTNC_HD void prefetch(int it) {
    const Position p = position(it);
    a.quads = a.fits(aAligned, p.lim.rows, p.lim.depth, m0, p.k0);
    b.quads = b.fits(bAligned, p.lim.cols, p.lim.depth, n0, p.k0);
    if (a.quads)
      a.loadQuads(A + p.t * g.a_term, g.a_row, g.a_col, m0, p.k0);
    // B[k, n] staged as rows n: its row stride is b_col, its k stride b_row.
    if (b.quads)
      b.loadQuads(B + p.t * g.b_term, g.b_col, g.b_row, n0, p.k0);
  }
  /// Slice `it` into shared memory (after prefetch(it) and a barrier).
  ATTNC_HD void stage(int it, T *sa, T *sb) const {
    if (a.quads)
      a.storeQuads(sa);
    if (b.quads)
      b.storeQuads(sb);
    if (a.quads && b.quads)
      return;
    const Position p = position(it);
    if (!a.quads)
      a.stageChecked(sa, A + p.t * g.a_term, g.a_row, g.a_col, p.lim.rows, p.lim.depth, m0, p.k0);
    if (!b.quads)
      b.stageChecked(sb, B + p.t * g.b_term, g.b_col, g.b_row, p.lim.cols, p.lim.depth, n0, p.k0);
  }
};

/// C_z (or, split, this part's partial C_z) of a StridedGemmArgs on T's
/// tensor cores (mma.cuh; Volta's bf16 runs its SIMT path). A_K and B_K
/// say which side of A and of B is contiguous in memory (k, or m and n:
/// ProjectionTileModel.h projLayout); the runtime launches the entry of
/// the GEMM's layout.
template <class T, bool A_K, bool B_K> ATTNC_HD void strided_gemm_mma(const StridedGemmArgs &a) {
  using namespace tile;
  constexpr int LD = kProjRowHalves, LDB = B_K ? kProjRowHalves : kProjKRowHalves,
                NT = kProjTileN / 8;
  struct Slices {
    T a[kProjTileM * LD];
    T b[B_K ? kProjTileN * LD : kProjDepth * kProjKRowHalves];
  };
  ATTNC_SUPPORT_SHARED(Slices, sm);
  // 32-bit grid and range arithmetic: 64-bit divisions are calls.
  const int tilesN = int(projCeil(a.n, kProjTileN)), tiles = int(projTiles(a.m, a.n));
  const int batches = int(a.batches), block = int(blockIdx.x);
  const int tile = block % tiles, z = block / tiles % batches, part = block / tiles / batches;
  const long long m0 = static_cast<long long>(tile / tilesN) * kProjTileM,
                  n0 = static_cast<long long>(tile % tilesN) * kProjTileN;
  const float *A = a.a + (z % a.a_batch_mod) * a.a_batch;
  const float *B = a.b + z * a.b_batch;
  // The summed range, terms x slices, and this part of it.
  const int depth = int(projCeil(a.k, kProjDepth)), range = a.terms * depth;
  const int splits = a.splits > 1 ? a.splits : 1;
  const int perPart = (range + splits - 1) / splits;
  const int first = part * perPart, last = first + perPart < range ? first + perPart : range;
  ProjSlices<T, A_K, B_K> slices(a, A, B, z, depth, m0, n0);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  float acc[NT][4] = {};
  if (first < last)
    slices.prefetch(first);
  for (int it = first; it < last; ++it) {
    __syncthreads(); // every warp is done reading the previous slice
    slices.stage(it, sm.a, sm.b);
    __syncthreads();
    if (it + 1 < last)
      slices.prefetch(it + 1); // in flight while the tensor cores run
    WarpMma<T>::template gemmSS<kProjDepth, NT, !B_K>(acc, sm.a + warp * 16 * LD, LD, sm.b, LDB);
  }
  using Layout = AccLayout<T, NT>;
  const long long row0 = m0 + warp * 16 + Layout::rowBase(lane), col0 = n0 + Layout::colBase(lane);
  float *C = splits > 1 ? a.partial + (static_cast<long long>(part) * batches + z) * a.m * a.n
                        : a.c + z * a.c_batch;
  const long long cRow = splits > 1 ? a.n : a.c_row, cCol = splits > 1 ? 1 : a.c_col;
  const bool direct = splits == 1;
#pragma unroll
  for (int n = 0; n < NT; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const long long r = row0 + Layout::kRowStep * (e / 2), c = col0 + Layout::colOf(n, e % 2);
      if (r >= a.m || c >= a.n)
        continue;
      float *dst = C + r * cRow + c * cCol;
      *dst = !direct || a.beta == 0.0f ? acc[n][e] : fmaf(a.beta, *dst, acc[n][e]);
    }
}

/// C_z = beta * C_z + the sum of strided_gemm_mma's parts, in part order.
ATTNC_HD void strided_gemm_reduce(const StridedGemmArgs &a) {
  const long long i = static_cast<long long>(blockIdx.x) * tile::kProjReduceThreads + threadIdx.x,
                  mn = a.m * a.n;
  if (i >= a.batches * mn)
    return;
  const long long z = i / mn, r = i % mn / a.n, c = i % a.n;
  float sum = 0.0f;
  for (int p = 0; p < a.splits; ++p)
    sum += a.partial[(p * a.batches + z) * mn + r * a.n + c];
  float *dst = a.c + z * a.c_batch + r * a.c_row + c * a.c_col;
  *dst = a.beta == 0.0f ? sum : fmaf(a.beta, *dst, sum);
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
