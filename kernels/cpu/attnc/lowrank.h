//===- lowrank.h - Linformer projection around the kernels (CPU) -*- C++ -*-===//
//
// Low-rank (Linformer) attention reaches the fused kernels as dense attention
// over kProj projected keys (docs/kernels.md, "Low-rank"):
//
//   K' = E_n·K̃,  V' = F_n·Ṽ   with E_n = E[:, :n] and K̃ = K with the rows
//   j >= lengths[b] zeroed; E, F are [kProj, Nmax], or [H, kProj, Nmax] when
//   not shared by heads (share = none); kv / layerwise sharing pass F = E.
//
// Backward: dK̃ = E_nᵀ·dK', rows j >= lengths[b] of dK set to 0;
// dE[:, :n] += dK'·K̃ᵀ summed over the batch (and over heads when shared);
// dE[:, n:] is not touched. With F = E (and dF = dE) both projections
// accumulate into the same dE, K's first.
//
// Building blocks:
//   lowrank_project_fwd / lowrank_project_bwd  — one tensor (K or V)
//   lowrank_fwd<...> / lowrank_bwd<...>         — projections + flash kernels
//
// GEMMs: cblas_sgemm when ATTNC_USE_CBLAS is defined (one call per (b, h),
// from serial code; OpenBLAS threads internally), unless ATTNC_LOWRANK_LOOPS
// is defined too; else the vectorised loop GEMMs of common.h, parallelised
// with OpenMP (lowrank_project_{fwd,bwd}_loops, always available). Both
// accumulate dE over (b, h) in a fixed order, so repeated runs are
// bit-identical; the loop version is also bit-identical across OpenMP thread
// counts, while OpenBLAS's results change with its own thread count
// (OPENBLAS_NUM_THREADS), measured with OpenBLAS 0.3.21.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CPU_LOWRANK_H
#define ATTNC_CPU_LOWRANK_H

#include "common.h"
#include "flash_bwd.h"
#include "flash_fwd.h"

namespace attnc {
namespace cpu ATTNC_CPU_NAMESPACE_ATTR {

namespace detail {

/// Valid keys of batch b before projection: min(N, lengths[b]) (clamped at 0).
inline int projLength(const int *lengths, int b, int N) {
  return lengths ? std::min(N, std::max(0, lengths[b])) : N;
}

inline int checkProj(const float *x, const float *e, const void *out, int B, int H, int N, int D,
                     int kProj, int Nmax) {
  if (!x || !e || !out)
    return kErrNullPointer;
  if (B <= 0 || H <= 0 || N <= 0 || D <= 0 || kProj <= 0 || Nmax <= 0 || N > Nmax)
    return kErrBadSize;
  return kOk;
}

constexpr int kProjRowBlock = 64; // rows per task of the loop GEMMs

} // namespace detail

/// xp[b, h] = E_h[:, :n_b]·x[b, h, :n_b] with n_b = min(N, lengths[b]) (N
/// without lengths). x: [B, H, N, D]; e: [kProj, Nmax], or [H, kProj, Nmax]
/// when perHead; xp: [B, H, kProj, D] (fully written). Loop GEMMs, OpenMP
/// over (b, h, block of 64 projected rows); bit-identical for any thread count.
inline int lowrank_project_fwd_loops(const float *x, const float *e, float *xp, const int *lengths,
                                     int B, int H, int N, int D, int kProj, int Nmax,
                                     bool perHead) {
  if (int err = detail::checkProj(x, e, xp, B, H, N, D, kProj, Nmax))
    return err;
  constexpr int RB = detail::kProjRowBlock;
  const std::size_t eHead = perHead ? std::size_t(kProj) * Nmax : 0;
  const int nRB = ceilDiv(kProj, RB);
  const long long tasks = static_cast<long long>(B) * H * nRB;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1)
#endif
  for (long long t = 0; t < tasks; ++t) {
    const int rb = static_cast<int>(t % nRB);
    const int bh = static_cast<int>(t / nRB);
    const int b = bh / H, h = bh % H;
    const int r0 = rb * RB;
    const int rows = std::min(RB, kProj - r0);
    const int n = detail::projLength(lengths, b, N);
    gemmRt<false>(rows, D, n, e + h * eHead + std::size_t(r0) * Nmax, Nmax, 1,
                  x + rowOffset(b, h, H, N, 0, D), D, xp + rowOffset(b, h, H, kProj, r0, D), D);
  }
  return kOk;
}

/// Backward of lowrank_project_fwd: dx[b, h, :n_b] = E_h[:, :n_b]ᵀ·dxp[b, h]
/// and dx rows >= n_b set to 0 (dx fully written); de (may be null: no weight
/// gradient) accumulates dxp[b, h]·x[b, h, :n_b]ᵀ into its first n_b columns,
/// summed over b (and over h unless perHead); columns >= max_b n_b are not
/// touched. Loop GEMMs, OpenMP over blocks of 64 keys; each dE element is
/// summed over (b, h) in a fixed order by one thread: bit-identical for any
/// thread count.
inline int lowrank_project_bwd_loops(const float *x, const float *e, const float *dxp, float *dx,
                                     float *de, const int *lengths, int B, int H, int N, int D,
                                     int kProj, int Nmax, bool perHead) {
  if (int err = detail::checkProj(x, e, dx, B, H, N, D, kProj, Nmax))
    return err;
  if (!dxp)
    return kErrNullPointer;
  constexpr int RB = detail::kProjRowBlock;
  const std::size_t eHead = perHead ? std::size_t(kProj) * Nmax : 0;
  const int nJB = ceilDiv(N, RB);
  // dx = Eᵀ·dxp: A(j, r) = E[r·Nmax + j].
  {
    const long long tasks = static_cast<long long>(B) * H * nJB;
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1)
#endif
    for (long long t = 0; t < tasks; ++t) {
      const int jb = static_cast<int>(t % nJB);
      const int bh = static_cast<int>(t / nJB);
      const int b = bh / H, h = bh % H;
      const int n = detail::projLength(lengths, b, N);
      const int j0 = jb * RB;
      const int rows = std::min(RB, N - j0);
      float *dxb = dx + rowOffset(b, h, H, N, j0, D);
      const int live = std::max(0, std::min(rows, n - j0));
      if (live > 0)
        gemmRt<false>(live, D, kProj, e + h * eHead + j0, 1, Nmax,
                      dxp + rowOffset(b, h, H, kProj, 0, D), D, dxb, D);
      zeroFloats(dxb + std::size_t(live) * D, std::size_t(rows - live) * D);
    }
  }
  if (!de)
    return kOk;
  // dE[:, :n] += dxp·x̃ᵀ, computed transposed per block of keys j:
  // dEᵀ[j][r] = Σ_(b,h) x[b, h, j]·dxp[b, h, r] (x read in place, dxp
  // transposed once: it is the small one), then added into dE.
  AlignedBuffer dxpT(std::size_t(B) * H * D * kProj);
  if (!dxpT.ok())
    return kErrAlloc;
  {
    const long long bhs = static_cast<long long>(B) * H;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (long long bh = 0; bh < bhs; ++bh) {
      const float *src = dxp + std::size_t(bh) * kProj * D;
      float *dst = dxpT.data() + std::size_t(bh) * D * kProj;
      for (int r = 0; r < kProj; ++r)
        for (int d = 0; d < D; ++d)
          dst[std::size_t(d) * kProj + r] = src[std::size_t(r) * D + d];
    }
  }
  const int groups = perHead ? H : 1;
  const long long tasks = static_cast<long long>(groups) * nJB;
  return forEachTask(tasks, std::size_t(RB) * kProj, [&](long long t, float *tmp) {
    const int jb = static_cast<int>(t % nJB);
    const int g = static_cast<int>(t / nJB);
    const int j0 = jb * RB;
    const int rows = std::min(RB, N - j0);
    zeroFloats(tmp, std::size_t(rows) * kProj);
    int maxLive = 0;
    for (int b = 0; b < B; ++b) {
      const int live = std::max(0, std::min(rows, detail::projLength(lengths, b, N) - j0));
      if (live == 0)
        continue;
      maxLive = std::max(maxLive, live);
      for (int h = perHead ? g : 0; h < (perHead ? g + 1 : H); ++h) {
        const std::size_t bh = std::size_t(b) * H + h;
        gemmRt<true>(live, kProj, D, x + rowOffset(b, h, H, N, j0, D), D, 1,
                     dxpT.data() + bh * D * kProj, kProj, tmp, kProj);
      }
    }
    float *deb = de + g * eHead + j0;
    for (int r = 0; r < kProj; ++r) {
      float *ATTNC_RESTRICT dst = deb + std::size_t(r) * Nmax;
      for (int j = 0; j < maxLive; ++j)
        dst[j] += tmp[std::size_t(j) * kProj + r];
    }
  });
}

#ifdef ATTNC_CPU_HAVE_CBLAS
/// lowrank_project_fwd with cblas_sgemm, one call per (b, h) (OpenBLAS
/// threads internally; its results depend on its thread count).
inline int lowrank_project_fwd_cblas(const float *x, const float *e, float *xp, const int *lengths,
                                     int B, int H, int N, int D, int kProj, int Nmax,
                                     bool perHead) {
  if (int err = detail::checkProj(x, e, xp, B, H, N, D, kProj, Nmax))
    return err;
  const std::size_t eHead = perHead ? std::size_t(kProj) * Nmax : 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int n = detail::projLength(lengths, b, N);
      float *dst = xp + rowOffset(b, h, H, kProj, 0, D);
      if (n == 0) {
        zeroFloats(dst, std::size_t(kProj) * D);
        continue;
      }
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, kProj, D, n, 1.0f, e + h * eHead, Nmax,
                  x + rowOffset(b, h, H, N, 0, D), D, 0.0f, dst, D);
    }
  return kOk;
}

/// lowrank_project_bwd with cblas_sgemm; dE accumulated over (b, h) in order.
inline int lowrank_project_bwd_cblas(const float *x, const float *e, const float *dxp, float *dx,
                                     float *de, const int *lengths, int B, int H, int N, int D,
                                     int kProj, int Nmax, bool perHead) {
  if (int err = detail::checkProj(x, e, dx, B, H, N, D, kProj, Nmax))
    return err;
  if (!dxp)
    return kErrNullPointer;
  const std::size_t eHead = perHead ? std::size_t(kProj) * Nmax : 0;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const int n = detail::projLength(lengths, b, N);
      float *dxb = dx + rowOffset(b, h, H, N, 0, D);
      const float *dxpb = dxp + rowOffset(b, h, H, kProj, 0, D);
      if (n > 0)
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, n, D, kProj, 1.0f, e + h * eHead, Nmax,
                    dxpb, D, 0.0f, dxb, D);
      zeroFloats(dxb + std::size_t(n) * D, std::size_t(N - n) * D);
      if (de && n > 0)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, kProj, n, D, 1.0f, dxpb, D,
                    x + rowOffset(b, h, H, N, 0, D), D, 1.0f, de + h * eHead, Nmax);
    }
  return kOk;
}
#endif

/// The projection used by lowrank_fwd: CBLAS when ATTNC_USE_CBLAS is defined
/// (and <cblas.h> found) unless ATTNC_LOWRANK_LOOPS is also defined, else the
/// loop version.
inline int lowrank_project_fwd(const float *x, const float *e, float *xp, const int *lengths, int B,
                               int H, int N, int D, int kProj, int Nmax, bool perHead) {
#if defined(ATTNC_CPU_HAVE_CBLAS) && !defined(ATTNC_LOWRANK_LOOPS)
  return lowrank_project_fwd_cblas(x, e, xp, lengths, B, H, N, D, kProj, Nmax, perHead);
#else
  return lowrank_project_fwd_loops(x, e, xp, lengths, B, H, N, D, kProj, Nmax, perHead);
#endif
}

/// The projection backward used by lowrank_bwd (same selection as above).
inline int lowrank_project_bwd(const float *x, const float *e, const float *dxp, float *dx,
                               float *de, const int *lengths, int B, int H, int N, int D, int kProj,
                               int Nmax, bool perHead) {
#if defined(ATTNC_CPU_HAVE_CBLAS) && !defined(ATTNC_LOWRANK_LOOPS)
  return lowrank_project_bwd_cblas(x, e, dxp, dx, de, lengths, B, H, N, D, kProj, Nmax, perHead);
#else
  return lowrank_project_bwd_loops(x, e, dxp, dx, de, lengths, B, H, N, D, kProj, Nmax, perHead);
#endif
}

template <int BLOCK_Q, int BLOCK_KV, int HEAD_DIM, class Variant>
int lowrank_fwd(const LowRankFwdArgs &a) {
  static_assert(!Variant::kCausal && !Variant::kKeyPadding,
                "low-rank attention is dense over the projected keys");
  if (!a.q || !a.k || !a.v || !a.E || !a.F || !a.kp || !a.vp || !a.out || !a.lse)
    return kErrNullPointer;
  if (int e = lowrank_project_fwd(a.k, a.E, a.kp, a.lengths, a.B, a.H, a.N, HEAD_DIM, a.kProj,
                                  a.Nmax, a.perHead))
    return e;
  if (int e = lowrank_project_fwd(a.v, a.F, a.vp, a.lengths, a.B, a.H, a.N, HEAD_DIM, a.kProj,
                                  a.Nmax, a.perHead))
    return e;
  AttnFwdArgs f{};
  f.q = a.q;
  f.k = a.kp;
  f.v = a.vp;
  f.out = a.out;
  f.lse = a.lse;
  f.lengths = nullptr;
  f.params = a.params;
  f.B = a.B;
  f.H = a.H;
  f.Nq = a.Nq;
  f.Nk = a.kProj;
  f.scale = a.scale;
  f.dropout = a.dropout;
  f.dropout_offset = a.dropout_offset;
  f.dropout_seed = a.dropout_seed;
  return flash_fwd<BLOCK_Q, BLOCK_KV, HEAD_DIM, Variant>(f);
}

template <int BLOCK_Q, int BLOCK_KV, int HEAD_DIM, class Variant>
int lowrank_bwd(const LowRankBwdArgs &a) {
  static_assert(!Variant::kCausal && !Variant::kKeyPadding,
                "low-rank attention is dense over the projected keys");
  if (!a.k || !a.v || !a.E || !a.F || !a.dkp || !a.dvp)
    return kErrNullPointer;
  AttnBwdArgs g{};
  g.q = a.q;
  g.k = a.kp;
  g.v = a.vp;
  g.out = a.out;
  g.dout = a.dout;
  g.lse = a.lse;
  g.lengths = nullptr;
  g.params = a.params;
  g.delta = a.delta;
  g.dq = a.dq;
  g.dk = a.dkp;
  g.dv = a.dvp;
  g.dparams = a.dparams;
  g.dparams_partial = a.dparams_partial;
  g.B = a.B;
  g.H = a.H;
  g.Nq = a.Nq;
  g.Nk = a.kProj;
  g.scale = a.scale;
  g.dropout = a.dropout;
  g.dropout_offset = a.dropout_offset;
  g.dropout_seed = a.dropout_seed;
  if (int e = flash_bwd<BLOCK_Q, BLOCK_KV, HEAD_DIM, Variant>(g))
    return e;
  float *dF = a.dF ? a.dF : (a.F == a.E ? a.dE : nullptr);
  if (int e = lowrank_project_bwd(a.k, a.E, a.dkp, a.dk, a.dE, a.lengths, a.B, a.H, a.N, HEAD_DIM,
                                  a.kProj, a.Nmax, a.perHead))
    return e;
  return lowrank_project_bwd(a.v, a.F, a.dvp, a.dv, dF, a.lengths, a.B, a.H, a.N, HEAD_DIM, a.kProj,
                             a.Nmax, a.perHead);
}

} // namespace ATTNC_CPU_NAMESPACE_ATTR
} // namespace attnc

#endif // ATTNC_CPU_LOWRANK_H
