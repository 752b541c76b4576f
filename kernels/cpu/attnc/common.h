//===- common.h - Shared helpers of the CPU attention kernels ---*- C++ -*-===//
//
// Plain C++17 (plus optional OpenMP pragmas) for the CPU backend, compiled at
// run time into a shared object together with a generated translation unit
// (docs/kernels.md). Everything here is header-only and inline.
//
// Vectorisation: the tile GEMMs use GCC/Clang vector extensions (one vector =
// one native SIMD register: 16 floats with AVX-512, 8 with AVX, 4 otherwise)
// so the accumulators stay in registers whatever the tile shape; the
// elementwise loops (scores, masks, exp, softmax statistics) are plain loops
// over compile-time trip counts that g++ -O3 vectorises without -ffast-math:
// the kernels keep score tiles as [key][query] so that the per-query
// statistics are vertical vector operations, and exp is a branch-free
// polynomial (expf_fast). Defining ATTNC_CPU_PORTABLE (or using a compiler
// without the extension) selects a plain-loop GEMM.
//
// Every reduction runs in a fixed order that depends only on the shapes and
// tile sizes, never on the number of threads, so results are bit-identical
// across runs and thread counts.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CPU_COMMON_H
#define ATTNC_CPU_COMMON_H

#include "attnc/abi/KernelArgs.h"
#include "attnc/abi/Qualifiers.h"
#include "attnc/abi/SharedQk.h"
#include "attnc/common/mask.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#ifdef _OPENMP
#include <omp.h>
#endif

// ATTNC_USE_CBLAS asks for cblas_sgemm in the projection and baseline GEMMs
// (link OpenBLAS); without <cblas.h> on the include path the loop GEMMs are
// used instead (ATTNC_CPU_HAVE_CBLAS tells which).
#if defined(ATTNC_USE_CBLAS)
#if defined(__has_include)
#if __has_include(<cblas.h>)
#define ATTNC_CPU_HAVE_CBLAS 1
#include <cblas.h>
#endif
#else
#define ATTNC_CPU_HAVE_CBLAS 1
#include <cblas.h>
#endif
#endif

#if defined(__GNUC__) || defined(__clang__)
#define ATTNC_RESTRICT __restrict__
#else
#define ATTNC_RESTRICT
#endif

// Everything in attnc::cpu has hidden visibility: the kernel headers are
// compiled both into the runtime (generic flags) and into each generated
// shared object (-march=native); hidden symbols keep one object's inline
// functions from being interposed by the other's.
// Types that appear in generated entry points' signatures must stay visible
// (a hidden parameter type would hide the extern "C" entry point too).
#if defined(__GNUC__) || defined(__clang__)
#define ATTNC_CPU_NAMESPACE_ATTR __attribute__((visibility("hidden")))
#define ATTNC_CPU_VISIBLE __attribute__((visibility("default")))
#else
#define ATTNC_CPU_NAMESPACE_ATTR
#define ATTNC_CPU_VISIBLE
#endif

#if (defined(__GNUC__) || defined(__clang__)) && !defined(ATTNC_CPU_PORTABLE)
#define ATTNC_CPU_VECTOR_EXT 1
#endif

namespace attnc {
namespace cpu ATTNC_CPU_NAMESPACE_ATTR {

/// Return codes of the CPU entry points (0 = success).
enum Status : int {
  kOk = 0,
  kErrNullPointer = 1, ///< a required pointer is null
  kErrBadSize = 2,     ///< a size is not positive (or a length is missing)
  kErrAlloc = 3,       ///< a workspace allocation failed
};

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

/// Lanes of the split reductions (dotN).
constexpr int kLanes = 16;

inline int ceilDiv(int a, int b) { return (a + b - 1) / b; }

/// Offset of row `row` of the (b, h) slice of a [B, H, N, D] tensor.
inline std::size_t rowOffset(int b, int h, int H, int N, int row, int D) {
  return ((static_cast<std::size_t>(b) * H + h) * N + row) * D;
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

/// A 64-byte aligned float buffer (no exceptions: check ok()).
class AlignedBuffer {
public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(std::size_t n) { reset(n); }
  ~AlignedBuffer() { std::free(p_); }
  AlignedBuffer(const AlignedBuffer &) = delete;
  AlignedBuffer &operator=(const AlignedBuffer &) = delete;
  bool reset(std::size_t n) {
    std::free(p_);
    p_ = nullptr;
    std::size_t bytes = std::max<std::size_t>(n, 1) * sizeof(float);
    bytes = (bytes + 63) / 64 * 64;
    p_ = static_cast<float *>(std::aligned_alloc(64, bytes));
    return p_ != nullptr;
  }
  bool ok() const { return p_ != nullptr; }
  float *data() const { return p_; }

private:
  float *p_ = nullptr;
};

inline void zeroFloats(float *p, std::size_t n) {
  if (n)
    std::memset(p, 0, n * sizeof(float));
}

//===----------------------------------------------------------------------===//
// Elementwise math
//===----------------------------------------------------------------------===//

/// exp(x) for the softmax, written with arithmetic and selects only so that
/// loops calling it vectorise (libm's expf is a call). Cephes' expf
/// polynomial after range reduction by ln 2: relative error about 2 ulp on
/// [-87.3, 88]; exactly 0 below -87.33 (also for -inf); inputs above 88 are
/// clamped to 88. Callers never pass NaN (masked entries are replaced by a
/// finite value first).
ATTNC_FORCE_INLINE float expf_fast(float x) {
  constexpr float kLo = -87.33654f, kHi = 88.0f;
  float xc = std::max(kLo, x); // NaN-free order: max(lo, x)
  xc = std::min(kHi, xc);
  // Round x·log2(e) to the nearest integer with the 1.5·2^23 trick (no
  // floor call: libm's floorf is not inlined without -fno-trapping-math);
  // the integer sits in the low mantissa bits of t.
  constexpr float kMagic = 12582912.0f;
  const float t = xc * 1.44269504088896341f + kMagic;
  const float fx = t - kMagic;
  std::int32_t tb;
  std::memcpy(&tb, &t, sizeof(tb));
  const std::int32_t n = tb - 0x4B400000; // = fx, in [-126, 127]
  float r = xc - fx * 0.693359375f;
  r = r + fx * 2.12194440e-4f;
  const float z = r * r;
  float y = 1.9875691500e-4f;
  y = y * r + 1.3981999507e-3f;
  y = y * r + 8.3334519073e-3f;
  y = y * r + 4.1665795894e-2f;
  y = y * r + 1.6666665459e-1f;
  y = y * r + 5.0000001201e-1f;
  y = y * z + r + 1.0f;
  const std::uint32_t bits = static_cast<std::uint32_t>(n + 127) << 23;
  float p2;
  std::memcpy(&p2, &bits, sizeof(p2));
  const float res = y * p2;
  return x < kLo ? 0.0f : res;
}

/// Σ_d a[d]·b[d] over a compile-time length, lane-split, fixed order.
template <int N>
ATTNC_FORCE_INLINE float dotN(const float *ATTNC_RESTRICT a, const float *ATTNC_RESTRICT b) {
  float s[kLanes];
  for (int l = 0; l < kLanes; ++l)
    s[l] = 0.0f;
  constexpr int N1 = N / kLanes * kLanes;
  for (int j = 0; j < N1; j += kLanes)
    for (int l = 0; l < kLanes; ++l)
      s[l] += a[j + l] * b[j + l];
  for (int j = N1; j < N; ++j)
    s[j - N1] += a[j] * b[j];
  float r = 0.0f;
  for (int l = 0; l < kLanes; ++l)
    r += s[l];
  return r;
}

/// x[0..n) *= c.
ATTNC_FORCE_INLINE void scaleRow(float *ATTNC_RESTRICT x, int n, float c) {
  for (int j = 0; j < n; ++j)
    x[j] *= c;
}

//===----------------------------------------------------------------------===//
// Tile copies
//===----------------------------------------------------------------------===//

/// dst[ROWS][COLS] = src rows [0, n) (row stride ld), rows [n, ROWS) zeroed.
template <int ROWS, int COLS>
ATTNC_FORCE_INLINE void copyRowsPadded(float *ATTNC_RESTRICT dst, const float *ATTNC_RESTRICT src,
                                       int n, std::size_t ld) {
  for (int r = 0; r < n; ++r)
    std::memcpy(dst + static_cast<std::size_t>(r) * COLS, src + r * ld, COLS * sizeof(float));
  if (n < ROWS)
    zeroFloats(dst + static_cast<std::size_t>(n) * COLS, static_cast<std::size_t>(ROWS - n) * COLS);
}

/// dst[COLS][ROWS] = transpose of src rows [0, n) (each COLS long, row stride
/// ld); dst columns [n, ROWS) zeroed.
template <int ROWS, int COLS>
ATTNC_FORCE_INLINE void transposePadded(float *ATTNC_RESTRICT dst, const float *ATTNC_RESTRICT src,
                                        int n, std::size_t ld) {
  constexpr int TB = 16; // cache-friendly blocks
  for (int r0 = 0; r0 < n; r0 += TB) {
    const int r1 = std::min(n, r0 + TB);
    for (int c0 = 0; c0 < COLS; c0 += TB) {
      const int c1 = std::min(COLS, c0 + TB);
      for (int r = r0; r < r1; ++r)
        for (int c = c0; c < c1; ++c)
          dst[static_cast<std::size_t>(c) * ROWS + r] = src[r * ld + c];
    }
  }
  if (n < ROWS)
    for (int c = 0; c < COLS; ++c)
      for (int r = n; r < ROWS; ++r)
        dst[static_cast<std::size_t>(c) * ROWS + r] = 0.0f;
}

//===----------------------------------------------------------------------===//
// GEMM micro-kernels
//===----------------------------------------------------------------------===//

#ifdef ATTNC_CPU_VECTOR_EXT
#if defined(__AVX512F__)
constexpr int kVecWidth = 16;
#elif defined(__AVX__)
constexpr int kVecWidth = 8;
#else
constexpr int kVecWidth = 4;
#endif
typedef float VFloat __attribute__((vector_size(kVecWidth * sizeof(float))));

ATTNC_FORCE_INLINE VFloat vload(const float *p) {
  VFloat v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
ATTNC_FORCE_INLINE void vstore(float *p, VFloat v) { std::memcpy(p, &v, sizeof(v)); }

/// C[MR][NV·W] (+)= A[MR][K]·B[K][NV·W]; A(r, kk) = A[r·ars + kk·acs].
template <int MR, int NV, bool ACC>
ATTNC_FORCE_INLINE void microVec(int K, const float *ATTNC_RESTRICT A, std::ptrdiff_t ars,
                                 std::ptrdiff_t acs, const float *ATTNC_RESTRICT B,
                                 std::ptrdiff_t ldb, float *ATTNC_RESTRICT C, std::ptrdiff_t ldc) {
  constexpr int W = kVecWidth;
  VFloat acc[MR][NV];
  for (int r = 0; r < MR; ++r)
    for (int c = 0; c < NV; ++c)
      acc[r][c] = ACC ? vload(C + r * ldc + c * W) : VFloat{};
  for (int kk = 0; kk < K; ++kk) {
    VFloat bv[NV];
    for (int c = 0; c < NV; ++c)
      bv[c] = vload(B + kk * ldb + c * W);
    for (int r = 0; r < MR; ++r) {
      const float a = A[r * ars + kk * acs];
      for (int c = 0; c < NV; ++c)
        acc[r][c] += a * bv[c];
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int c = 0; c < NV; ++c)
      vstore(C + r * ldc + c * W, acc[r][c]);
}
constexpr int kMicroRows = kVecWidth == 16 ? 6 : (kVecWidth == 8 ? 6 : 4);
constexpr int kMicroVecs = 2;

/// Scalar micro-kernel: C[MR][ncols] (+)= A[MR][K]·B[K][ncols] (column tails).
template <int MR, bool ACC>
ATTNC_FORCE_INLINE void microScalar(int K, int ncols, const float *ATTNC_RESTRICT A,
                                    std::ptrdiff_t ars, std::ptrdiff_t acs,
                                    const float *ATTNC_RESTRICT B, std::ptrdiff_t ldb,
                                    float *ATTNC_RESTRICT C, std::ptrdiff_t ldc) {
  for (int r = 0; r < MR; ++r)
    for (int c = 0; c < ncols; ++c) {
      float acc = ACC ? C[r * ldc + c] : 0.0f;
      for (int kk = 0; kk < K; ++kk)
        acc += A[r * ars + kk * acs] * B[kk * ldb + c];
      C[r * ldc + c] = acc;
    }
}

/// One panel of MR rows over all N columns.
template <int MR, bool ACC>
ATTNC_FORCE_INLINE void gemmPanel(int N, int K, const float *ATTNC_RESTRICT A, std::ptrdiff_t ars,
                                  std::ptrdiff_t acs, const float *ATTNC_RESTRICT B,
                                  std::ptrdiff_t ldb, float *ATTNC_RESTRICT C, std::ptrdiff_t ldc) {
  constexpr int W = kVecWidth;
  int j = 0;
  for (; j + kMicroVecs * W <= N; j += kMicroVecs * W)
    microVec<MR, kMicroVecs, ACC>(K, A, ars, acs, B + j, ldb, C + j, ldc);
  for (; j + W <= N; j += W)
    microVec<MR, 1, ACC>(K, A, ars, acs, B + j, ldb, C + j, ldc);
  if (j < N)
    microScalar<MR, ACC>(K, N - j, A, ars, acs, B + j, ldb, C + j, ldc);
}

/// C[M][N] (+)= A[M][K]·B[K][N] with A(i, kk) = A[i·ars + kk·acs], B and C
/// row-major (leading dimensions ldb, ldc). ACC: accumulate into C, else
/// overwrite. Each C element is a sum over kk in increasing order: the result
/// does not depend on the caller's threading. Inlined so that compile-time
/// sizes (tile shapes) propagate.
template <bool ACC>
ATTNC_FORCE_INLINE void gemm(int M, int N, int K, const float *ATTNC_RESTRICT A, std::ptrdiff_t ars,
                             std::ptrdiff_t acs, const float *ATTNC_RESTRICT B, std::ptrdiff_t ldb,
                             float *ATTNC_RESTRICT C, std::ptrdiff_t ldc) {
  constexpr int MR = kMicroRows;
  int i = 0;
  for (; i + MR <= M; i += MR)
    gemmPanel<MR, ACC>(N, K, A + i * ars, ars, acs, B, ldb, C + i * ldc, ldc);
  const int rem = M - i;
  const float *Ai = A + i * ars;
  float *Ci = C + i * ldc;
  switch (rem) {
  case 0:
    break;
  case 1:
    gemmPanel<1, ACC>(N, K, Ai, ars, acs, B, ldb, Ci, ldc);
    break;
  case 2:
    gemmPanel<2, ACC>(N, K, Ai, ars, acs, B, ldb, Ci, ldc);
    break;
  case 3:
    gemmPanel<3, ACC>(N, K, Ai, ars, acs, B, ldb, Ci, ldc);
    break;
  case 4:
    if constexpr (MR > 4)
      gemmPanel<4, ACC>(N, K, Ai, ars, acs, B, ldb, Ci, ldc);
    break;
  default:
    if constexpr (MR > 5)
      gemmPanel<5, ACC>(N, K, Ai, ars, acs, B, ldb, Ci, ldc);
    break;
  }
}
#else
constexpr int kVecWidth = 1; // no vector extension

/// Portable GEMM (no vector extension): row by row, axpy over the columns
/// (the innermost loop is contiguous and auto-vectorisable). Same contract
/// and the same fixed summation order (kk increasing) as above.
template <bool ACC>
inline void gemm(int M, int N, int K, const float *ATTNC_RESTRICT A, std::ptrdiff_t ars,
                 std::ptrdiff_t acs, const float *ATTNC_RESTRICT B, std::ptrdiff_t ldb,
                 float *ATTNC_RESTRICT C, std::ptrdiff_t ldc) {
  for (int i = 0; i < M; ++i) {
    float *ATTNC_RESTRICT c = C + i * ldc;
    if (!ACC)
      for (int j = 0; j < N; ++j)
        c[j] = 0.0f;
    for (int kk = 0; kk < K; ++kk) {
      const float a = A[i * ars + kk * acs];
      const float *ATTNC_RESTRICT b = B + kk * ldb;
      for (int j = 0; j < N; ++j)
        c[j] += a * b[j];
    }
  }
}
#endif

/// Out-of-line version for the large, runtime-sized GEMMs (low-rank
/// projection, unfused baseline) so that they are instantiated once.
template <bool ACC>
inline void gemmRt(int M, int N, int K, const float *A, std::ptrdiff_t ars, std::ptrdiff_t acs,
                   const float *B, std::ptrdiff_t ldb, float *C, std::ptrdiff_t ldc) {
  if (M <= 0 || N <= 0)
    return;
  if (K <= 0) {
    if (!ACC)
      for (int i = 0; i < M; ++i)
        zeroFloats(C + i * ldc, static_cast<std::size_t>(N));
    return;
  }
  // Block over columns so a panel of B stays in cache.
  constexpr int NB = 256;
  for (int j0 = 0; j0 < N; j0 += NB)
    gemm<ACC>(M, std::min(NB, N - j0), K, A, ars, acs, B + j0, ldb, C + j0, ldc);
}

//===----------------------------------------------------------------------===//
// Threads
//===----------------------------------------------------------------------===//

/// Records the first non-zero error of a parallel region.
inline void setError(int &err, int code) {
#ifdef _OPENMP
#pragma omp critical(attnc_cpu_error)
#endif
  {
    if (err == 0)
      err = code;
  }
}

/// The kernels' task loop: body(task, workspace) for every task in
/// [0, tasks), handed out one at a time to the OpenMP threads (dynamic
/// schedule), each thread with a workspace of its own of `workspaceFloats`
/// floats. Which thread runs a task never changes what it computes, so
/// results do not depend on the thread count. Returns 0, or kErrAlloc when
/// a thread could not get its workspace (its tasks are then skipped).
template <class Body>
inline int forEachTask(long long tasks, std::size_t workspaceFloats, Body &&body) {
  int err = 0;
#ifdef _OPENMP
#pragma omp parallel
#endif
  {
    AlignedBuffer ws(workspaceFloats);
    if (!ws.ok())
      setError(err, kErrAlloc);
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
    for (long long t = 0; t < tasks; ++t) {
      if (!ws.ok())
        continue;
      body(t, ws.data());
    }
  }
  return err;
}

} // namespace ATTNC_CPU_NAMESPACE_ATTR
} // namespace attnc

#endif // ATTNC_CPU_COMMON_H
