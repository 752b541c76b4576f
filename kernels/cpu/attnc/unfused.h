//===- unfused.h - Unfused attention baseline (CPU, fp32) -------*- C++ -*-===//
//
// The baseline the fused kernels are benchmarked against: per (b, h) it
// materialises S = scale·Q·Kᵀ as an Nq × Nk fp32 matrix (cblas_sgemm with
// ATTNC_USE_CBLAS, else the loop GEMM of common.h), applies the score
// modifier and masks, softmaxes each row (lse saved), and computes O = P·V.
// Same semantics and outputs as flash_fwd / flash_bwd (docs/kernels.md); it
// is a benchmark baseline, not a test reference.
//
//   template <int HEAD_DIM, class Variant> int unfused_fwd(const AttnFwdArgs &);
//   template <int HEAD_DIM, class Variant> int unfused_bwd(const AttnBwdArgs &);
//
// Memory: Nq·Nk floats (forward), 2·Nq·Nk (backward), reused across (b, h).
// (b, h) run one after the other; the GEMMs (BLAS threads or OpenMP row
// blocks) and the row-wise passes (OpenMP) are parallel inside each.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CPU_UNFUSED_H
#define ATTNC_CPU_UNFUSED_H

#include "common.h"
#include "flash_fwd.h"

namespace attnc {
namespace cpu ATTNC_CPU_NAMESPACE_ATTR {

namespace detail {

constexpr int kUnfusedRowBlock = 32;

/// C[M][N] = alpha·op(A)·op(B); row-major.
/// transA: A is stored [K][M]; transB: B is stored [N][K].
inline void unfusedGemm(bool transA, bool transB, int M, int N, int K, float alpha, const float *A,
                        int lda, const float *B, int ldb, float *C, int ldc, float *scratch) {
#ifdef ATTNC_CPU_HAVE_CBLAS
  (void)scratch;
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans, transB ? CblasTrans : CblasNoTrans,
              M, N, K, alpha, A, lda, B, ldb, 0.0f, C, ldc);
#else
  // B must be [K][N] row-major for the loop GEMM: transpose into scratch.
  const float *Bn = B;
  int ldbn = ldb;
  if (transB) {
    for (int kk = 0; kk < K; ++kk)
      for (int j = 0; j < N; ++j)
        scratch[std::size_t(kk) * N + j] = B[std::size_t(j) * ldb + kk];
    Bn = scratch;
    ldbn = N;
  }
  const std::ptrdiff_t ars = transA ? 1 : lda, acs = transA ? lda : 1;
  const int nRB = ceilDiv(M, kUnfusedRowBlock);
#ifdef _OPENMP
#pragma omp parallel for schedule(dynamic, 1)
#endif
  for (int rb = 0; rb < nRB; ++rb) {
    const int i0 = rb * kUnfusedRowBlock;
    const int rows = std::min(kUnfusedRowBlock, M - i0);
    float *Ci = C + std::size_t(i0) * ldc;
    const float *Ai = A + i0 * ars;
    gemmRt<false>(rows, N, K, Ai, ars, acs, Bn, ldbn, Ci, ldc);
    if (alpha != 1.0f)
      for (int r = 0; r < rows; ++r)
        scaleRow(Ci + std::size_t(r) * ldc, N, alpha);
  }
#endif
}

} // namespace detail

template <int HEAD_DIM, class Variant> int unfused_fwd(const AttnFwdArgs &a) {
  constexpr int D = HEAD_DIM;
  if (int e =
          detail::checkCommon<Variant>(a.q, a.k, a.v, a.lengths, a.params, a.B, a.H, a.Nq, a.Nk))
    return e;
  if (!a.out || !a.lse)
    return kErrNullPointer;
  const int B = a.B, H = a.H, Nq = a.Nq, Nk = a.Nk;
  const float *params = a.params;
  AlignedBuffer S(std::size_t(Nq) * Nk);
  AlignedBuffer scratch(std::size_t(D) * Nk);
  if (!S.ok() || !scratch.ok())
    return kErrAlloc;
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const float *qbh = static_cast<const float *>(a.q) + rowOffset(b, h, H, Nq, 0, D);
      const float *kbh = static_cast<const float *>(a.k) + rowOffset(b, h, H, Nk, 0, D);
      const float *vbh = static_cast<const float *>(a.v) + rowOffset(b, h, H, Nk, 0, D);
      float *obh = static_cast<float *>(a.out) + rowOffset(b, h, H, Nq, 0, D);
      float *lbh = a.lse + (std::size_t(b) * H + h) * Nq;
      float *s = S.data();
      detail::unfusedGemm(false, true, Nq, Nk, D, a.scale, qbh, D, kbh, D, s, Nk, scratch.data());
      const int kvLimit = mask::keyEnd<Variant>(a.lengths, b, Nk);
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
      for (int i = 0; i < Nq; ++i) {
        float *ATTNC_RESTRICT row = s + std::size_t(i) * Nk;
        const int lim = Variant::kCausal ? std::min(kvLimit, i + 1) : kvLimit;
        float mx = kNegInf;
        for (int j = 0; j < Nk; ++j) {
          float x = row[j];
          bool kept = j < lim;
          if constexpr (Variant::kHasScoreMod)
            x = kept ? Variant::score(x, b, h, i, j, params, H) : 0.0f;
          if constexpr (Variant::kHasMask)
            kept = kept && Variant::keep(b, h, i, j, params, H);
          x = kept ? x : kNegInf;
          row[j] = x;
          mx = x > mx ? x : mx;
        }
        if (mx == kNegInf) {
          zeroFloats(row, std::size_t(Nk));
          lbh[i] = kNegInf;
          continue;
        }
        double sum = 0.0;
        for (int j = 0; j < Nk; ++j) {
          const float p = expf_fast(row[j] - mx);
          row[j] = p;
          sum += p;
        }
        const float inv = static_cast<float>(1.0 / sum);
        scaleRow(row, Nk, inv);
        lbh[i] = mx + static_cast<float>(std::log(sum));
      }
      detail::unfusedGemm(false, false, Nq, D, Nk, 1.0f, s, Nk, vbh, D, obh, D, scratch.data());
    }
  return kOk;
}

template <int HEAD_DIM, class Variant> int unfused_bwd(const AttnBwdArgs &a) {
  constexpr int D = HEAD_DIM;
  constexpr int P = Variant::kNumParams;
  if (int e =
          detail::checkCommon<Variant>(a.q, a.k, a.v, a.lengths, a.params, a.B, a.H, a.Nq, a.Nk))
    return e;
  if (!a.out || !a.dout || !a.lse || !a.delta || !a.dq || !a.dk || !a.dv)
    return kErrNullPointer;
  if (P > 0 && !a.dparams)
    return kErrNullPointer;
  const int B = a.B, H = a.H, Nq = a.Nq, Nk = a.Nk;
  const float *params = a.params;
  const float scale = a.scale;
  AlignedBuffer Pm(std::size_t(Nq) * Nk), G(std::size_t(Nq) * Nk);
  AlignedBuffer scratch(std::size_t(D) * std::max(Nq, Nk));
  AlignedBuffer rowPar(std::size_t(Nq) * (P > 0 ? P : 1));
  if (!Pm.ok() || !G.ok() || !scratch.ok() || !rowPar.ok())
    return kErrAlloc;
  const long long rows = static_cast<long long>(B) * H * Nq;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
  for (long long r = 0; r < rows; ++r)
    a.delta[r] = dotN<D>(static_cast<const float *>(a.dout) + std::size_t(r) * D,
                         static_cast<const float *>(a.out) + std::size_t(r) * D);
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h) {
      const float *qbh = static_cast<const float *>(a.q) + rowOffset(b, h, H, Nq, 0, D);
      const float *kbh = static_cast<const float *>(a.k) + rowOffset(b, h, H, Nk, 0, D);
      const float *vbh = static_cast<const float *>(a.v) + rowOffset(b, h, H, Nk, 0, D);
      const float *dobh = static_cast<const float *>(a.dout) + rowOffset(b, h, H, Nq, 0, D);
      float *dqbh = static_cast<float *>(a.dq) + rowOffset(b, h, H, Nq, 0, D);
      float *dkbh = static_cast<float *>(a.dk) + rowOffset(b, h, H, Nk, 0, D);
      float *dvbh = static_cast<float *>(a.dv) + rowOffset(b, h, H, Nk, 0, D);
      const float *lbh = a.lse + (std::size_t(b) * H + h) * Nq;
      const float *dbh = a.delta + (std::size_t(b) * H + h) * Nq;
      float *pm = Pm.data();
      float *g = G.data();
      detail::unfusedGemm(false, true, Nq, Nk, D, scale, qbh, D, kbh, D, pm, Nk, scratch.data());
      detail::unfusedGemm(false, true, Nq, Nk, D, 1.0f, dobh, D, vbh, D, g, Nk, scratch.data());
      const int kvLimit = mask::keyEnd<Variant>(a.lengths, b, Nk);
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
      for (int i = 0; i < Nq; ++i) {
        float *ATTNC_RESTRICT prow = pm + std::size_t(i) * Nk;
        float *ATTNC_RESTRICT grow = g + std::size_t(i) * Nk;
        const int lim = Variant::kCausal ? std::min(kvLimit, i + 1) : kvLimit;
        const float lse = lbh[i], delta = dbh[i];
        double acc[P > 0 ? P : 1] = {};
        for (int j = 0; j < Nk; ++j) {
          const float s = prow[j];
          bool kept = j < lim && lse != kNegInf;
          if constexpr (Variant::kHasMask)
            kept = kept && Variant::keep(b, h, i, j, params, H);
          float sm = s;
          if constexpr (Variant::kHasScoreMod)
            sm = kept ? Variant::score(s, b, h, i, j, params, H) : 0.0f;
          const float p = expf_fast(kept ? sm - lse : kNegInf);
          const float ds = p * (grow[j] - delta);
          float gg = ds;
          if constexpr (Variant::kHasScoreMod) {
            float dpar[P > 0 ? P : 1] = {};
            const float dsds = kept ? Variant::score_grad(s, b, h, i, j, params, H, dpar) : 0.0f;
            gg = ds * dsds;
            if (kept)
              for (int pp = 0; pp < P; ++pp)
                acc[pp] += ds * dpar[pp];
          }
          prow[j] = p;
          grow[j] = gg;
        }
        for (int pp = 0; pp < P; ++pp)
          rowPar.data()[std::size_t(i) * P + pp] = static_cast<float>(acc[pp]);
      }
      if constexpr (P > 0)
        for (int pp = 0; pp < P; ++pp) {
          double acc = 0.0;
          for (int i = 0; i < Nq; ++i)
            acc += rowPar.data()[std::size_t(i) * P + pp];
          a.dparams[pp * H + h] += static_cast<float>(acc);
        }
      // dV = Pᵀ·dO, dQ = scale·G·K, dK = scale·Gᵀ·Q.
      detail::unfusedGemm(true, false, Nk, D, Nq, 1.0f, pm, Nk, dobh, D, dvbh, D, scratch.data());
      detail::unfusedGemm(false, false, Nq, D, Nk, scale, g, Nk, kbh, D, dqbh, D, scratch.data());
      detail::unfusedGemm(true, false, Nk, D, Nq, scale, g, Nk, qbh, D, dkbh, D, scratch.data());
    }
  return kOk;
}

} // namespace ATTNC_CPU_NAMESPACE_ATTR
} // namespace attnc

#endif // ATTNC_CPU_UNFUSED_H
