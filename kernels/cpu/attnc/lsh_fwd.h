//===- lsh_fwd.h - LSH attention on the CPU: forward -----------------*- C++ -*-===//
//
// Phases 4-5 of lsh.h: per round and chunk, the window's attention folded
// into the output with a running maximum and sum across rounds.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CPU_LSH_FWD_H
#define ATTNC_CPU_LSH_FWD_H

#include "lsh_hash.h"

namespace attnc {
namespace cpu ATTNC_CPU_NAMESPACE_ATTR {

namespace lsh_detail {
/// Forward of one (b, h, chunk) in round r: the chunk's queries attend to
/// their window; the round is folded into out (running sum), mRun, lRun
/// (running maximum and sum).
template <int CHUNK, int BEFORE, int AFTER, int D, class Variant>
inline void fwdChunk(const AttnLshArgs &a, const Common &cm, float *mRun, float *lRun, int b, int h,
                     int r, int c) {
  using Cf = Cfg<CHUNK, BEFORE, AFTER, D>;
  using L = FwdLayout<CHUNK, BEFORE, AFTER, D>;
  constexpr int BQ = Cf::kBQ;
  const int H = a.H, N = a.N, R = a.rounds;
  const float scale = a.scale;
  const float *params = a.params;
  const std::size_t bh = std::size_t(b) * H + h;
  const int *perm = cm.perm.data() + (bh * R + r) * cm.Npad;
  const float *qbh = static_cast<const float *>(a.q) + bh * N * D;
  const float *vbh = static_cast<const float *>(a.v) + bh * N * D;
  const float *denbh = cm.den.data() + bh * N;
  float *obh = static_cast<float *>(a.out) + bh * N * D;
  float *mbh = mRun + bh * N;
  float *lbh = lRun + bh * N;

  float *ws = cm.threadWs();
  float *ATTNC_RESTRICT Kw = ws + L::kK;
  float *ATTNC_RESTRICT Vw = ws + L::kV;
  float *ATTNC_RESTRICT Qc = ws + L::kQc;
  float *ATTNC_RESTRICT Qt = ws + L::kQt;
  float *ATTNC_RESTRICT St = ws + L::kSt;
  float *ATTNC_RESTRICT O = ws + L::kO;
  float *ATTNC_RESTRICT m = ws + L::kM;
  float *ATTNC_RESTRICT mUse = ws + L::kMUse;
  float *ATTNC_RESTRICT l = ws + L::kL;
  int *iws = cm.threadIws();
  int *ATTNC_RESTRICT kpos = iws;            // [kWin] key positions, -1: excluded
  int *ATTNC_RESTRICT qpos = iws + Cf::kWin; // [kBQ] query positions, -1: pad slot

  int w0, nw;
  windowOf<CHUNK, BEFORE, AFTER>(c, cm.C, w0, nw);
  const int cOff = c * CHUNK - w0; // the chunk's rows within the window
  const int kvLim = mask::keyEnd<Variant>(a.lengths, b, N);
  bool anyKey = false;
  for (int j = 0; j < nw; ++j) {
    const int p = perm[w0 + j];
    kpos[j] = p < kvLim ? p : -1; // pad slots are -1 already
    anyKey = anyKey || kpos[j] >= 0;
  }
  if (!anyKey)
    return; // nothing kept in this round: out, mRun, lRun unchanged
  gatherRows<D>(Kw, qbh, perm + w0, nw);
  // The out rows the chunk updates at the end (scattered): fetch them now.
  prefetchRows<D>(obh, perm + std::size_t(c) * CHUNK, CHUNK);
  gatherRows<D>(Vw, vbh, perm + w0, nw);
  std::memcpy(Qc, Kw + std::size_t(cOff) * D, std::size_t(CHUNK) * D * sizeof(float));
  normaliseRows<D>(Kw, denbh, perm + w0, nw);

  for (int q0 = 0; q0 < CHUNK; q0 += BQ) {
    const int nq = std::min(BQ, CHUNK - q0);
    const int *qslots = perm + std::size_t(c) * CHUNK + q0;
    bool anyQuery = false;
    for (int i = 0; i < BQ; ++i) {
      qpos[i] = i < nq ? qslots[i] : -1;
      anyQuery = anyQuery || qpos[i] >= 0;
    }
    if (!anyQuery)
      continue;
    transposePadded<BQ, D>(Qt, Qc + std::size_t(q0) * D, nq, D); // pad rows are zero
    gemm<false>(nw, BQ, D, Kw, D, 1, Qt, BQ, St, BQ);            // Sᵀ = K_w·Qᵀ

    for (int i = 0; i < BQ; ++i)
      m[i] = kNegInf;
    for (int j = 0; j < nw; ++j) {
      float *ATTNC_RESTRICT row = St + std::size_t(j) * BQ;
      const int kj = kpos[j];
      for (int i = 0; i < BQ; ++i) {
        const int qi = qpos[i];
        const bool kept = lsh::pairKept<Variant>(qi, kj, kvLim, b, h, params, H);
        const float s =
            kept ? lsh::pairScore<Variant>(scale * row[i], qi, kj, b, h, params, H) : kNegInf;
        row[i] = s;
        m[i] = s > m[i] ? s : m[i];
      }
    }
    for (int i = 0; i < BQ; ++i) {
      mUse[i] = m[i] == kNegInf ? 0.0f : m[i];
      l[i] = 0.0f;
    }
    for (int j = 0; j < nw; ++j) {
      float *ATTNC_RESTRICT row = St + std::size_t(j) * BQ;
      for (int i = 0; i < BQ; ++i) {
        const float p = expf_fast(row[i] - mUse[i]);
        row[i] = p;
        l[i] += p;
      }
    }
    // Attention dropout: the sums keep every probability, the weights of V
    // are masked and rescaled.
    if constexpr (Variant::kDropout)
      if (a.dropout > 0.0f)
        for (int j = 0; j < nw; ++j) {
          float *ATTNC_RESTRICT row = St + std::size_t(j) * BQ;
          for (int i = 0; i < BQ; ++i)
            if (qpos[i] >= 0 && kpos[j] >= 0)
              row[i] *= lshDropout<Variant>(a, bh, r, qpos[i], kpos[j]);
        }
    gemm<false>(BQ, D, nw, St, 1, BQ, Vw, D, O, D); // O = P·V_w, P(i, j) = Sᵀ[j][i]

    // Fold the round in: with M the running maximum, out = Σ exp(m_r − M)·O_r
    // and l = Σ exp(m_r − M)·l_r over the rounds so far.
    for (int i = 0; i < nq; ++i) {
      const int qi = qpos[i];
      if (qi < 0 || m[i] == kNegInf)
        continue;
      if (a.round_lse) // this round's lse, for the backward's round weights
        a.round_lse[(bh * R + r) * N + qi] = m[i] + std::log(l[i]);
      const float mOld = mbh[qi];
      const float mNew = m[i] > mOld ? m[i] : mOld;
      const float alpha = expf_fast(mOld - mNew); // 0 for the first kept round
      const float beta = expf_fast(m[i] - mNew);
      mbh[qi] = mNew;
      lbh[qi] = lbh[qi] * alpha + l[i] * beta;
      float *ATTNC_RESTRICT dst = obh + std::size_t(qi) * D;
      const float *ATTNC_RESTRICT src = O + std::size_t(i) * D;
      for (int d = 0; d < D; ++d)
        dst[d] = dst[d] * alpha + src[d] * beta;
    }
  }
}

} // namespace lsh_detail

/// LSH attention forward, fp32 (docs/kernels.md "LSH kernels"): writes
/// a.out, a.lse and, when given, a.round_lse (which the backward needs).
template <int CHUNK, int BEFORE, int AFTER, int D, class Variant>
int lsh_fwd(const AttnLshArgs &a) {
  namespace ld = lsh_detail;
  using L = ld::FwdLayout<CHUNK, BEFORE, AFTER, D>;
  if (int e = ld::checkArgs<Variant>(a))
    return e;
  ld::Common cm;
  if (!ld::allocCommon(cm, a, CHUNK, L::kTotal, L::kInts))
    return kErrAlloc;
  const int H = a.H, N = a.N, R = a.rounds, C = cm.C;
  const std::size_t bh = std::size_t(a.B) * H;
  AlignedBuffer mRun, lRun; // running maximum and sum over the rounds
  if (!mRun.reset(bh * N) || !lRun.reset(bh * N))
    return kErrAlloc;
  const float *q = static_cast<const float *>(a.q);
  float *out = static_cast<float *>(a.out);
  const long long rows = static_cast<long long>(bh) * N;
#ifdef _OPENMP
#pragma omp parallel num_threads(cm.nth)
#endif
  {
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
    for (long long row = 0; row < rows; ++row) {
      zeroFloats(out + std::size_t(row) * D, D);
      mRun.data()[row] = kNegInf;
      lRun.data()[row] = 0.0f;
      if (a.round_lse) { // rounds that keep nothing for this row stay -inf
        const long long bhi = row / N, i = row % N;
        for (int r = 0; r < R; ++r)
          a.round_lse[(bhi * R + r) * N + i] = kNegInf;
      }
    }
    ld::normPhase<D>(cm, q);
    ld::hashPhase<D>(cm, q, a.rotations);
    ld::sortPhase(cm);

    const long long tasks = static_cast<long long>(bh) * C;
    for (int r = 0; r < R; ++r) {
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
      for (long long t = 0; t < tasks; ++t) {
        const int c = static_cast<int>(t % C);
        const int bhi = static_cast<int>(t / C);
        ld::fwdChunk<CHUNK, BEFORE, AFTER, D, Variant>(a, cm, mRun.data(), lRun.data(), bhi / H,
                                                       bhi % H, r, c);
      }
    }

#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
    for (long long row = 0; row < rows; ++row) {
      const float m = mRun.data()[row], l = lRun.data()[row];
      float *ATTNC_RESTRICT dst = out + std::size_t(row) * D;
      if (m == kNegInf || !(l > 0.0f)) { // no round kept anything
        zeroFloats(dst, D);
        a.lse[row] = kNegInf;
        continue;
      }
      const float inv = 1.0f / l;
      for (int d = 0; d < D; ++d)
        dst[d] *= inv;
      a.lse[row] = m + std::log(l);
    }
  }
  return kOk;
}

} // namespace ATTNC_CPU_NAMESPACE_ATTR
} // namespace attnc

#endif // ATTNC_CPU_LSH_FWD_H
