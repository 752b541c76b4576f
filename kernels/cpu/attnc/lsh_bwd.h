//===- lsh_bwd.h - LSH attention on the CPU: backward ----------------*- C++ -*-===//
//
// The backward of lsh.h: hashes and sort recomputed, then per round a dq
// task per query chunk and a dk/dv task per key chunk, and the
// normalisation backward of dk folded into dq.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CPU_LSH_BWD_H
#define ATTNC_CPU_LSH_BWD_H

#include "lsh_hash.h"

#include "attnc/common/shared_qk.h"

namespace attnc {
namespace cpu ATTNC_CPU_NAMESPACE_ATTR {

namespace lsh_detail {
/// Backward, dq of one (b, h, query chunk) in round r (queries' path).
template <int CHUNK, int BEFORE, int AFTER, int D, class Variant>
inline void bwdDqChunk(const AttnLshArgs &a, const Common &cm, const float *delta, const float *rw,
                       int b, int h, int r, int c) {
  using Cf = Cfg<CHUNK, BEFORE, AFTER, D>;
  using L = BwdLayout<CHUNK, BEFORE, AFTER, D>;
  constexpr int BQ = Cf::kBQ;
  constexpr int P1 = Variant::kNumParams > 0 ? Variant::kNumParams : 1;
  const int H = a.H, N = a.N, R = a.rounds;
  const float scale = a.scale;
  const float *params = a.params;
  const std::size_t bh = std::size_t(b) * H + h;
  const int *perm = cm.perm.data() + (bh * R + r) * cm.Npad;
  const float *qbh = static_cast<const float *>(a.q) + bh * N * D;
  const float *vbh = static_cast<const float *>(a.v) + bh * N * D;
  const float *dobh = static_cast<const float *>(a.dout) + bh * N * D;
  const float *denbh = cm.den.data() + bh * N;
  // p = exp(s − lse_r)·w_r: this round's lse and weight (see lsh_bwd).
  const float *lsebh = a.round_lse + (bh * R + r) * N;
  const float *wbh = rw + (bh * R + r) * N;
  const float *deltabh = delta + bh * N;
  float *dqbh = static_cast<float *>(a.dq) + bh * N * D;
  float wL[BQ];

  float *ws = cm.threadWs();
  float *ATTNC_RESTRICT Kw = ws + L::kK;
  float *ATTNC_RESTRICT Vw = ws + L::kV;
  float *ATTNC_RESTRICT Qc = ws + L::kQc;
  float *ATTNC_RESTRICT DOc = ws + L::kDOc;
  float *ATTNC_RESTRICT Qt = ws + L::kQt;
  float *ATTNC_RESTRICT DOt = ws + L::kDOt;
  float *ATTNC_RESTRICT St = ws + L::kSt;
  float *ATTNC_RESTRICT DPt = ws + L::kDPt;
  float *ATTNC_RESTRICT DQ = ws + L::kDQ;
  float *ATTNC_RESTRICT lseL = ws + L::kLse;
  float *ATTNC_RESTRICT deltaL = ws + L::kDelta;
  int *iws = cm.threadIws();
  int *ATTNC_RESTRICT kpos = iws;                // [kWin]
  int *ATTNC_RESTRICT qpos = iws + 2 * Cf::kWin; // [kBQ]

  int w0, nw;
  windowOf<CHUNK, BEFORE, AFTER>(c, cm.C, w0, nw);
  const int cOff = c * CHUNK - w0;
  const int kvLim = mask::keyEnd<Variant>(a.lengths, b, N);
  bool anyKey = false;
  for (int j = 0; j < nw; ++j) {
    const int p = perm[w0 + j];
    kpos[j] = p < kvLim ? p : -1;
    anyKey = anyKey || kpos[j] >= 0;
  }
  if (!anyKey)
    return; // nothing kept: no contribution
  gatherRows<D>(Kw, qbh, perm + w0, nw);
  prefetchRows<D>(dqbh, perm + std::size_t(c) * CHUNK, CHUNK); // updated at the end
  gatherRows<D>(Vw, vbh, perm + w0, nw);
  gatherRows<D>(DOc, dobh, perm + std::size_t(c) * CHUNK, CHUNK);
  std::memcpy(Qc, Kw + std::size_t(cOff) * D, std::size_t(CHUNK) * D * sizeof(float));
  normaliseRows<D>(Kw, denbh, perm + w0, nw);

  for (int q0 = 0; q0 < CHUNK; q0 += BQ) {
    const int nq = std::min(BQ, CHUNK - q0);
    const int *qslots = perm + std::size_t(c) * CHUNK + q0;
    bool any = false;
    for (int i = 0; i < BQ; ++i) {
      const int qi = i < nq ? qslots[i] : -1;
      qpos[i] = qi;
      lseL[i] = qi >= 0 ? lsebh[qi] : kNegInf;
      wL[i] = qi >= 0 ? wbh[qi] : 0.0f;
      deltaL[i] = qi >= 0 ? deltabh[qi] : 0.0f;
      any = any || lseL[i] != kNegInf;
    }
    if (!any)
      continue;
    transposePadded<BQ, D>(Qt, Qc + std::size_t(q0) * D, nq, D); // pad rows are zero
    transposePadded<BQ, D>(DOt, DOc + std::size_t(q0) * D, nq, D);
    gemm<false>(nw, BQ, D, Kw, D, 1, Qt, BQ, St, BQ);   // Sᵀ = K_w·Qᵀ
    gemm<false>(nw, BQ, D, Vw, D, 1, DOt, BQ, DPt, BQ); // dPᵀ = V_w·dOᵀ
    for (int j = 0; j < nw; ++j) {
      float *ATTNC_RESTRICT srow = St + std::size_t(j) * BQ;
      const float *ATTNC_RESTRICT dprow = DPt + std::size_t(j) * BQ;
      const int kj = kpos[j];
      for (int i = 0; i < BQ; ++i) {
        const int qi = qpos[i];
        const float s = scale * srow[i];
        const bool kept =
            lseL[i] != kNegInf && lsh::pairKept<Variant>(qi, kj, kvLim, b, h, params, H);
        const bool self = kj == qi;
        const float sm = kept ? lsh::pairScore<Variant>(s, qi, kj, b, h, params, H) : 0.0f;
        const float p = expf_fast(kept ? sm - lseL[i] : kNegInf) * wL[i];
        const float z = kept ? lshDropout<Variant>(a, bh, r, qi, kj) : 1.0f;
        const float ds = p * (dprow[i] * z - deltaL[i]);
        float dsds = 1.0f;
        if constexpr (Variant::kHasScoreMod) {
          float dpar[P1];
          dsds = kept && !self ? Variant::score_grad(s, b, h, qi, kj, params, H, dpar) : 0.0f;
        }
        srow[i] = self ? 0.0f : ds * dsds; // gᵀ; the self score is a constant
      }
    }
    gemm<false>(BQ, D, nw, St, 1, BQ, Kw, D, DQ, D); // dQ = g·K_w
    for (int i = 0; i < nq; ++i) {
      const int qi = qpos[i];
      if (qi < 0 || lseL[i] == kNegInf)
        continue;
      float *ATTNC_RESTRICT dst = dqbh + std::size_t(qi) * D;
      const float *ATTNC_RESTRICT src = DQ + std::size_t(i) * D;
      for (int d = 0; d < D; ++d)
        dst[d] += scale * src[d];
    }
  }
}

/// Backward, dk and dv of one (b, h, key chunk) in round r.
template <int CHUNK, int BEFORE, int AFTER, int D, class Variant>
inline void bwdDkDvChunk(const AttnLshArgs &a, const Common &cm, const float *delta,
                         const float *rw, float *dk, int b, int h, int r, int c) {
  using Cf = Cfg<CHUNK, BEFORE, AFTER, D>;
  using L = BwdLayout<CHUNK, BEFORE, AFTER, D>;
  constexpr int BI = Cf::kBI;
  constexpr int P1 = Variant::kNumParams > 0 ? Variant::kNumParams : 1;
  const int H = a.H, N = a.N, R = a.rounds;
  const float scale = a.scale;
  const float *params = a.params;
  const std::size_t bh = std::size_t(b) * H + h;
  const int *perm = cm.perm.data() + (bh * R + r) * cm.Npad;
  const float *qbh = static_cast<const float *>(a.q) + bh * N * D;
  const float *vbh = static_cast<const float *>(a.v) + bh * N * D;
  const float *dobh = static_cast<const float *>(a.dout) + bh * N * D;
  const float *denbh = cm.den.data() + bh * N;
  const float *lsebh = a.round_lse + (bh * R + r) * N;
  const float *wbh = rw + (bh * R + r) * N;
  const float *deltabh = delta + bh * N;
  float *dkbh = dk + bh * N * D;
  float *dvbh = static_cast<float *>(a.dv) + bh * N * D;

  float *ws = cm.threadWs();
  float *ATTNC_RESTRICT Kt = ws + L::kKt;
  float *ATTNC_RESTRICT Vt = ws + L::kVt;
  float *ATTNC_RESTRICT Qw = ws + L::kQw;
  float *ATTNC_RESTRICT DOw = ws + L::kDOw;
  float *ATTNC_RESTRICT S = ws + L::kS;
  float *ATTNC_RESTRICT DP = ws + L::kDP;
  float *ATTNC_RESTRICT DK = ws + L::kDK;
  float *ATTNC_RESTRICT DV = ws + L::kDV;
  float *ATTNC_RESTRICT Vc = ws + L::kVc;
  float *ATTNC_RESTRICT lseW = ws + L::kLseW;
  float *ATTNC_RESTRICT deltaW = ws + L::kDeltaW;
  int *iws = cm.threadIws();
  int *ATTNC_RESTRICT kpos = iws;             // [CHUNK]
  int *ATTNC_RESTRICT qposW = iws + Cf::kWin; // [kWin]

  const int kvLim = mask::keyEnd<Variant>(a.lengths, b, N);
  const int *kslots = perm + std::size_t(c) * CHUNK;
  bool anyKey = false;
  for (int j = 0; j < CHUNK; ++j) {
    const int p = kslots[j];
    kpos[j] = p < kvLim ? p : -1;
    anyKey = anyKey || kpos[j] >= 0;
  }
  if (!anyKey)
    return; // no query keeps these keys in this round
  // The queries whose windows contain chunk c: chunks c-AFTER..c+BEFORE.
  int w0, nw;
  windowOf<CHUNK, AFTER, BEFORE>(c, cm.C, w0, nw);
  const int cOff = c * CHUNK - w0;
  bool anyQuery = false;
  for (int i = 0; i < nw; ++i) {
    const int qi = perm[w0 + i];
    qposW[i] = qi;
    lseW[i] = qi >= 0 ? lsebh[qi] : kNegInf;
    deltaW[i] = qi >= 0 ? deltabh[qi] : 0.0f;
    anyQuery = anyQuery || lseW[i] != kNegInf;
  }
  if (!anyQuery)
    return;
  gatherRows<D>(Qw, qbh, perm + w0, nw);
  prefetchRows<D>(dkbh, kslots, CHUNK); // updated at the end
  prefetchRows<D>(dvbh, kslots, CHUNK);
  gatherRows<D>(DOw, dobh, perm + w0, nw);
  gatherRows<D>(Vc, vbh, kslots, CHUNK);
  transposePadded<CHUNK, D>(Vt, Vc, CHUNK, D);
  // Kᵀ of the chunk from its (gathered) query rows, normalised in DK first.
  std::memcpy(DK, Qw + std::size_t(cOff) * D, std::size_t(CHUNK) * D * sizeof(float));
  normaliseRows<D>(DK, denbh, kslots, CHUNK);
  transposePadded<CHUNK, D>(Kt, DK, CHUNK, D);
  zeroFloats(DK, std::size_t(CHUNK) * D);
  zeroFloats(DV, std::size_t(CHUNK) * D);

  for (int i0 = 0; i0 < nw; i0 += BI) {
    const int ni = std::min(BI, nw - i0);
    bool any = false;
    for (int i = 0; i < ni; ++i)
      any = any || lseW[i0 + i] != kNegInf;
    if (!any)
      continue;
    const float *Qs = Qw + std::size_t(i0) * D;
    const float *DOs = DOw + std::size_t(i0) * D;
    gemm<false>(ni, CHUNK, D, Qs, D, 1, Kt, CHUNK, S, CHUNK);   // S = Q·Kᵀ
    gemm<false>(ni, CHUNK, D, DOs, D, 1, Vt, CHUNK, DP, CHUNK); // dP = dO·Vᵀ
    for (int i = 0; i < ni; ++i) {
      float *ATTNC_RESTRICT srow = S + std::size_t(i) * CHUNK;
      float *ATTNC_RESTRICT dprow = DP + std::size_t(i) * CHUNK;
      const int qi = qposW[i0 + i];
      const float lseI = lseW[i0 + i];
      const float wI = qi >= 0 ? wbh[qi] : 0.0f;
      const float deltaI = deltaW[i0 + i];
      const bool rowOk = lseI != kNegInf;
      for (int j = 0; j < CHUNK; ++j) {
        const int kj = kpos[j];
        const float s = scale * srow[j];
        const bool kept = rowOk && lsh::pairKept<Variant>(qi, kj, kvLim, b, h, params, H);
        const bool self = kj == qi;
        const float sm = kept ? lsh::pairScore<Variant>(s, qi, kj, b, h, params, H) : 0.0f;
        const float p = expf_fast(kept ? sm - lseI : kNegInf) * wI;
        const float z = kept ? lshDropout<Variant>(a, bh, r, qi, kj) : 1.0f;
        const float ds = p * (dprow[j] * z - deltaI);
        float dsds = 1.0f;
        if constexpr (Variant::kHasScoreMod) {
          float dpar[P1];
          dsds = kept && !self ? Variant::score_grad(s, b, h, qi, kj, params, H, dpar) : 0.0f;
        }
        srow[j] = p * z; // dV takes the dropped P
        dprow[j] = self ? 0.0f : ds * dsds;
      }
    }
    gemm<true>(CHUNK, D, ni, S, 1, CHUNK, DOs, D, DV, D); // dV += Pᵀ·dO
    gemm<true>(CHUNK, D, ni, DP, 1, CHUNK, Qs, D, DK, D); // dK += gᵀ·Q
  }
  for (int j = 0; j < CHUNK; ++j) {
    const int kj = kpos[j];
    if (kj < 0)
      continue;
    float *ATTNC_RESTRICT dkr = dkbh + std::size_t(kj) * D;
    float *ATTNC_RESTRICT dvr = dvbh + std::size_t(kj) * D;
    const float *ATTNC_RESTRICT sk = DK + std::size_t(j) * D;
    const float *ATTNC_RESTRICT sv = DV + std::size_t(j) * D;
    for (int d = 0; d < D; ++d) {
      dkr[d] += scale * sk[d];
      dvr[d] += sv[d];
    }
  }
}

} // namespace lsh_detail

/// LSH attention backward, fp32 (docs/kernels.md "LSH kernels"): reads q,
/// v, out and round_lse (of the forward), dout; writes dq (query and key
/// paths) and dv. Per-head parameter gradients are not computed.
template <int CHUNK, int BEFORE, int AFTER, int D, class Variant>
int lsh_bwd(const AttnLshArgs &a) {
  namespace ld = lsh_detail;
  using L = ld::BwdLayout<CHUNK, BEFORE, AFTER, D>;
  if (int e = ld::checkArgs<Variant>(a))
    return e;
  if (!a.dout || !a.dq || !a.dv || !a.round_lse)
    return kErrNullPointer;
  ld::Common cm;
  if (!ld::allocCommon(cm, a, CHUNK, L::kTotal, L::kInts))
    return kErrAlloc;
  const int H = a.H, N = a.N, R = a.rounds, C = cm.C;
  const std::size_t bh = std::size_t(a.B) * H;
  AlignedBuffer delta, dk, rw;
  if (!delta.reset(bh * N) || !dk.reset(bh * N * D) || !rw.reset(bh * R * N))
    return kErrAlloc;
  const float *q = static_cast<const float *>(a.q);
  const float *out = static_cast<const float *>(a.out);
  const float *dout = static_cast<const float *>(a.dout);
  float *dq = static_cast<float *>(a.dq);
  float *dv = static_cast<float *>(a.dv);
  const long long rows = static_cast<long long>(bh) * N;
#ifdef _OPENMP
#pragma omp parallel num_threads(cm.nth)
#endif
  {
    ld::normPhase<D>(cm, q);
    ld::hashPhase<D>(cm, q, a.rotations);
    ld::sortPhase(cm);
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
    for (long long row = 0; row < rows; ++row) {
      const std::size_t o = std::size_t(row) * D;
      delta.data()[row] = dotN<D>(dout + o, out + o);
      zeroFloats(dq + o, D);
      zeroFloats(dv + o, D);
      zeroFloats(dk.data() + o, D);
      // Round weights w_r = exp(lse_r − M) / Σ exp(lse_r' − M) from the
      // forward's per-round lse: exp(s − lse_r)·w_r is exp(s − lse) without
      // the fp32 rounding of the combined lse (−1e5 + log R on rows that keep
      // only their own key would cost dv 0.4 %).
      const long long bhi = row / N, i = row % N;
      const float *lr = a.round_lse + bhi * R * N + i;
      float *wr = rw.data() + bhi * R * N + i;
      float M = kNegInf;
      for (int r = 0; r < R; ++r)
        M = lr[std::size_t(r) * N] > M ? lr[std::size_t(r) * N] : M;
      float S = 0.0f;
      for (int r = 0; r < R; ++r) {
        const float e = M == kNegInf ? 0.0f : std::exp(lr[std::size_t(r) * N] - M);
        wr[std::size_t(r) * N] = e;
        S += e;
      }
      for (int r = 0; r < R; ++r)
        wr[std::size_t(r) * N] = S > 0.0f ? wr[std::size_t(r) * N] / S : 0.0f;
    }

    const long long perKind = static_cast<long long>(bh) * C;
    for (int r = 0; r < R; ++r) {
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
      for (long long t = 0; t < 2 * perKind; ++t) {
        const bool dkdv = t < perKind; // the heavier tasks first
        const long long u = dkdv ? t : t - perKind;
        const int c = static_cast<int>(u % C);
        const int bhi = static_cast<int>(u / C);
        if (dkdv)
          ld::bwdDkDvChunk<CHUNK, BEFORE, AFTER, D, Variant>(a, cm, delta.data(), rw.data(),
                                                             dk.data(), bhi / H, bhi % H, r, c);
        else
          ld::bwdDqChunk<CHUNK, BEFORE, AFTER, D, Variant>(a, cm, delta.data(), rw.data(), bhi / H,
                                                           bhi % H, r, c);
      }
    }

    // Key path: k = q / den, den = max(|q|, eps): dq += (dk − k (k·dk)) / |q|
    // when |q| > eps, else dk / eps.
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
    for (long long row = 0; row < rows; ++row) {
      const std::size_t o = std::size_t(row) * D;
      const float *ATTNC_RESTRICT g = dk.data() + o;
      const float *ATTNC_RESTRICT qr = q + o;
      float *ATTNC_RESTRICT dst = dq + o;
      const float den = cm.den.data()[row];
      float k[D];
      for (int d = 0; d < D; ++d)
        k[d] = qr[d] / den;
      const float kg = dotN<D>(k, g);
      for (int d = 0; d < D; ++d)
        dst[d] += sharedqk::queryGradFromKey(g[d], k[d], kg, den);
    }
  }
  return kOk;
}

} // namespace ATTNC_CPU_NAMESPACE_ATTR
} // namespace attnc

#endif // ATTNC_CPU_LSH_BWD_H
