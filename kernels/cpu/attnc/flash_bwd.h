//===- flash_bwd.h - Tiled attention backward (CPU, fp32) -------*- C++ -*-===//
//
// FlashAttention-2 backward on the CPU (docs/kernels.md):
//   1. delta_i = Σ_d dout_id·out_id                      (parallel over rows)
//   2. dK/dV pass, parallel over (b, h, key block): for each query block,
//      recompute s and p_ij = exp(s_ij − lse_i), dp = dout·vᵀ,
//      ds = p (dp − delta), g = ds·∂score/∂s; dV += Pᵀ·dO, dK += scale·gᵀ·Q.
//   3. dQ pass, parallel over (b, h, query block): dQ += scale·g·K, and the
//      per-head parameter gradients Σ ds·∂score/∂param into one partial per
//      task.
//   4. dparams[p·H + h] += Σ partials, reduced serially in a fixed order.
// Every output element is produced by exactly one task, in an order fixed by
// the shapes and tiles: the gradients are bit-identical across runs and
// thread counts (no atomics).
//
//   template <int BLOCK_Q, int BLOCK_KV, int HEAD_DIM, class Variant>
//   int attnc::cpu::flash_bwd(const attnc::AttnBwdArgs &a);
//
// Workspace: `delta` [B, H, Nq] (required) and, when the variant has
// parameters, `dparams_partial` with bwd_workspace_floats(...) floats; if
// that pointer is null the kernel allocates the partials itself.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CPU_FLASH_BWD_H
#define ATTNC_CPU_FLASH_BWD_H

#include "common.h"
#include "flash_fwd.h"

namespace attnc {
namespace cpu ATTNC_CPU_NAMESPACE_ATTR {

template <int BLOCK_Q, int BLOCK_KV, int HEAD_DIM, class Variant>
inline std::size_t flash_bwd_workspace_floats(int B, int H, int Nq, int /*Nk*/) {
  return bwd_workspace_floats(B, H, Nq, BLOCK_Q, Variant::kNumParams);
}

namespace detail {

/// The forward's attention dropout factor of (query i, key j): 1 without
/// dropout, else 0 (dropped) or 1/(1 − p). With it the backward is
/// dS = P ∘ (m/(1 − p) ∘ dP − delta), dV = (m/(1 − p) ∘ P)ᵀ dO, where
/// delta = rowsum(dO ∘ O) of the dropped output.
template <class Variant> inline float dropoutScale(const AttnBwdArgs &a, int bh, int i, int j) {
  if constexpr (Variant::kDropout) {
    if (a.dropout > 0.0f)
      return philox::attentionDropoutScale(a.dropout_seed, a.dropout_offset, bh, i, j, a.dropout);
  }
  (void)a, (void)bh, (void)i, (void)j;
  return 1.0f;
}

template <int BQ, int BKV, int D> struct DkDvLayout {
  static constexpr std::size_t kKt = 0;                           // [D][BKV]
  static constexpr std::size_t kVt = kKt + std::size_t(D) * BKV;  // [D][BKV]
  static constexpr std::size_t kQ = kVt + std::size_t(D) * BKV;   // [BQ][D] tail copy
  static constexpr std::size_t kDO = kQ + std::size_t(BQ) * D;    // [BQ][D] tail copy
  static constexpr std::size_t kS = kDO + std::size_t(BQ) * D;    // [BQ][BKV]
  static constexpr std::size_t kDP = kS + std::size_t(BQ) * BKV;  // [BQ][BKV]
  static constexpr std::size_t kDK = kDP + std::size_t(BQ) * BKV; // [BKV][D]
  static constexpr std::size_t kDV = kDK + std::size_t(BKV) * D;  // [BKV][D]
  static constexpr std::size_t kTotal = kDV + std::size_t(BKV) * D;
};

template <int BQ, int BKV, int D> struct DqLayout {
  static constexpr std::size_t kQt = 0;                            // [D][BQ]
  static constexpr std::size_t kDOt = kQt + std::size_t(D) * BQ;   // [D][BQ]
  static constexpr std::size_t kK = kDOt + std::size_t(D) * BQ;    // [BKV][D] tail copy
  static constexpr std::size_t kV = kK + std::size_t(BKV) * D;     // [BKV][D] tail copy
  static constexpr std::size_t kSt = kV + std::size_t(BKV) * D;    // [BKV][BQ]
  static constexpr std::size_t kDPt = kSt + std::size_t(BKV) * BQ; // [BKV][BQ]
  static constexpr std::size_t kDQ = kDPt + std::size_t(BKV) * BQ; // [BQ][D]
  static constexpr std::size_t kLse = kDQ + std::size_t(BQ) * D;   // [BQ]
  static constexpr std::size_t kDelta = kLse + BQ;                 // [BQ]
  static constexpr std::size_t kTotal = kDelta + BQ;
};

/// dK, dV of one (b, h, key block). Kᵀ and Vᵀ are formed once per task;
/// per query block S = Q·Kᵀ and dP = dO·Vᵀ read Q and dO in place, and
/// dV += Pᵀ·dO, dK += gᵀ·Q read P and g through strided (transposed) views.
template <int BQ, int BKV, int D, class Variant>
inline void flashBwdDkDvBlock(const AttnBwdArgs &a, float *ws, int b, int h, int kb) {
  using L = DkDvLayout<BQ, BKV, D>;
  const int H = a.H, Nq = a.Nq, Nk = a.Nk;
  const float scale = a.scale;
  const float *params = a.params;
  const float *q = static_cast<const float *>(a.q);
  const float *k = static_cast<const float *>(a.k);
  const float *v = static_cast<const float *>(a.v);
  const float *dout = static_cast<const float *>(a.dout);
  float *dk = static_cast<float *>(a.dk);
  float *dv = static_cast<float *>(a.dv);

  float *ATTNC_RESTRICT kt = ws + L::kKt;
  float *ATTNC_RESTRICT vt = ws + L::kVt;
  float *ATTNC_RESTRICT qsPad = ws + L::kQ;
  float *ATTNC_RESTRICT dosPad = ws + L::kDO;
  float *ATTNC_RESTRICT S = ws + L::kS;
  float *ATTNC_RESTRICT dP = ws + L::kDP;
  float *ATTNC_RESTRICT dK = ws + L::kDK;
  float *ATTNC_RESTRICT dV = ws + L::kDV;

  const int k0 = kb * BKV;
  const int nk = std::min(BKV, Nk - k0);
  const int kvLimit = mask::keyEnd<Variant>(a.lengths, b, Nk); // keys >= kvLimit excluded
  float *dkb = dk + rowOffset(b, h, H, Nk, k0, D);
  float *dvb = dv + rowOffset(b, h, H, Nk, k0, D);
  int qBegin, qEnd; // the query rows that may keep one of these keys
  mask::queryRange<Variant>(k0, nk, Nq, qBegin, qEnd);
  if (k0 >= kvLimit || qBegin >= qEnd) { // no query sees these keys
    zeroFloats(dkb, std::size_t(nk) * D);
    zeroFloats(dvb, std::size_t(nk) * D);
    return;
  }

  transposePadded<BKV, D>(kt, k + rowOffset(b, h, H, Nk, k0, D), nk, D);
  transposePadded<BKV, D>(vt, v + rowOffset(b, h, H, Nk, k0, D), nk, D);
  zeroFloats(dK, std::size_t(BKV) * D);
  zeroFloats(dV, std::size_t(BKV) * D);
  const int keyEnd = std::min(kvLimit, k0 + nk); // keys [k0, keyEnd) can be kept

  const std::size_t bh = std::size_t(b) * H + h;
  for (int q0 = qBegin; q0 < qEnd; q0 += BQ) {
    const int mq = std::min(BQ, Nq - q0);
    const float *qRow = q + rowOffset(b, h, H, Nq, q0, D);
    const float *doRow = dout + rowOffset(b, h, H, Nq, q0, D);
    if (mq < BQ) { // zero-padded copies: the GEMMs read finite values
      copyRowsPadded<BQ, D>(qsPad, qRow, mq, D);
      copyRowsPadded<BQ, D>(dosPad, doRow, mq, D);
      qRow = qsPad;
      doRow = dosPad;
    }
    gemm<false>(BQ, BKV, D, qRow, D, 1, kt, BKV, S, BKV);   // S = Q·Kᵀ
    gemm<false>(BQ, BKV, D, doRow, D, 1, vt, BKV, dP, BKV); // dP = dO·Vᵀ

    for (int i = 0; i < BQ; ++i) {
      float *ATTNC_RESTRICT srow = S + std::size_t(i) * BKV;
      float *ATTNC_RESTRICT dprow = dP + std::size_t(i) * BKV;
      const int qi = q0 + i;
      const float lseI = i < mq ? a.lse[bh * Nq + qi] : kNegInf;
      const float deltaI = i < mq ? a.delta[bh * Nq + qi] : 0.0f;
      const bool rowOk = lseI != kNegInf;
      const int lim = Variant::kCausal ? std::min(keyEnd, qi + 1) : keyEnd;
      for (int j = 0; j < BKV; ++j) {
        const int kj = k0 + j;
        const float s = scale * srow[j];
        bool kept = rowOk && kj < lim;
        if constexpr (Variant::kHasMask)
          kept = kept && Variant::keep(b, h, qi, kj, params, H);
        float sm = s;
        if constexpr (Variant::kHasScoreMod)
          sm = kept ? Variant::score(s, b, h, qi, kj, params, H) : 0.0f;
        const float p = expf_fast(kept ? sm - lseI : kNegInf);
        const float mscale = dropoutScale<Variant>(a, int(bh), qi, kj);
        const float ds = p * (dprow[j] * mscale - deltaI);
        float g = ds;
        if constexpr (Variant::kHasScoreMod) {
          float dpar[Variant::kNumParams > 0 ? Variant::kNumParams : 1];
          const float dsds = kept ? Variant::score_grad(s, b, h, qi, kj, params, H, dpar) : 0.0f;
          g = ds * dsds;
        }
        srow[j] = p * mscale; // P (dropped, as the forward weighted V)
        dprow[j] = g;         // g
      }
    }
    gemm<true>(BKV, D, BQ, S, 1, BKV, doRow, D, dV, D); // dV += Pᵀ·dO
    gemm<true>(BKV, D, BQ, dP, 1, BKV, qRow, D, dK, D); // dK += gᵀ·Q
  }
  for (int j = 0; j < nk; ++j) {
    float *ATTNC_RESTRICT dkr = dkb + std::size_t(j) * D;
    float *ATTNC_RESTRICT dvr = dvb + std::size_t(j) * D;
    const float *ATTNC_RESTRICT sk = dK + std::size_t(j) * D;
    const float *ATTNC_RESTRICT sv = dV + std::size_t(j) * D;
    for (int d = 0; d < D; ++d) {
      dkr[d] = scale * sk[d];
      dvr[d] = sv[d];
    }
  }
}

/// dQ and the parameter-gradient partials of one (b, h, query block). Qᵀ and
/// dOᵀ are formed once per task; per key block Sᵀ = K·Qᵀ and dPᵀ = V·dOᵀ
/// ([key][query]: vector operations across the queries' lse and delta), and
/// dQ += g·K reads g through a strided view.
template <int BQ, int BKV, int D, class Variant>
inline void flashBwdDqBlock(const AttnBwdArgs &a, float *ws, float *partials, int b, int h,
                            int qb) {
  constexpr int P = Variant::kNumParams;
  constexpr int P1 = P > 0 ? P : 1;
  using L = DqLayout<BQ, BKV, D>;
  const int H = a.H, Nq = a.Nq, Nk = a.Nk;
  const float scale = a.scale;
  const float *params = a.params;
  const float *q = static_cast<const float *>(a.q);
  const float *k = static_cast<const float *>(a.k);
  const float *v = static_cast<const float *>(a.v);
  const float *dout = static_cast<const float *>(a.dout);
  float *dq = static_cast<float *>(a.dq);

  float *ATTNC_RESTRICT qt = ws + L::kQt;
  float *ATTNC_RESTRICT dot = ws + L::kDOt;
  float *ATTNC_RESTRICT ksPad = ws + L::kK;
  float *ATTNC_RESTRICT vsPad = ws + L::kV;
  float *ATTNC_RESTRICT St = ws + L::kSt;
  float *ATTNC_RESTRICT dPt = ws + L::kDPt;
  float *ATTNC_RESTRICT dQ = ws + L::kDQ;
  float *ATTNC_RESTRICT lseL = ws + L::kLse;
  float *ATTNC_RESTRICT deltaL = ws + L::kDelta;

  const std::size_t bh = std::size_t(b) * H + h;
  const int q0 = qb * BQ;
  const int mq = std::min(BQ, Nq - q0);
  transposePadded<BQ, D>(qt, q + rowOffset(b, h, H, Nq, q0, D), mq, D);
  transposePadded<BQ, D>(dot, dout + rowOffset(b, h, H, Nq, q0, D), mq, D);
  for (int i = 0; i < BQ; ++i) { // padded queries: lse = -inf, nothing kept
    lseL[i] = i < mq ? a.lse[bh * Nq + q0 + i] : kNegInf;
    deltaL[i] = i < mq ? a.delta[bh * Nq + q0 + i] : 0.0f;
  }
  zeroFloats(dQ, std::size_t(BQ) * D);
  // Parameter gradients: per query lane, summed over keys in order (double).
  double dparAcc[P1][BQ];
  for (int pp = 0; pp < P1; ++pp)
    for (int i = 0; i < BQ; ++i)
      dparAcc[pp][i] = 0.0;

  int kvBegin, kvEnd;
  mask::keyRange<Variant>(q0, mq, mask::keyEnd<Variant>(a.lengths, b, Nk), kvBegin, kvEnd);
  const float *kbh = k + rowOffset(b, h, H, Nk, 0, D);
  const float *vbh = v + rowOffset(b, h, H, Nk, 0, D);
  for (int kv0 = kvBegin; kv0 < kvEnd; kv0 += BKV) {
    const int nk = std::min(BKV, kvEnd - kv0);
    const float *kb = kbh + std::size_t(kv0) * D;
    const float *vb = vbh + std::size_t(kv0) * D;
    if (nk < BKV) {
      copyRowsPadded<BKV, D>(ksPad, kb, nk, D);
      copyRowsPadded<BKV, D>(vsPad, vb, nk, D);
      kb = ksPad;
      vb = vsPad;
    }
    gemm<false>(BKV, BQ, D, kb, D, 1, qt, BQ, St, BQ);   // Sᵀ = K·Qᵀ
    gemm<false>(BKV, BQ, D, vb, D, 1, dot, BQ, dPt, BQ); // dPᵀ = V·dOᵀ

    for (int j = 0; j < BKV; ++j) {
      const int kj = kv0 + j;
      float *ATTNC_RESTRICT srow = St + std::size_t(j) * BQ;
      const float *ATTNC_RESTRICT dprow = dPt + std::size_t(j) * BQ;
      const bool keyOk = j < nk;
      for (int i = 0; i < BQ; ++i) {
        const int qi = q0 + i;
        const float s = scale * srow[i];
        bool kept = keyOk && lseL[i] != kNegInf;
        if constexpr (Variant::kCausal)
          kept = kept && kj <= qi;
        if constexpr (Variant::kHasMask)
          kept = kept && Variant::keep(b, h, qi, kj, params, H);
        float sm = s;
        if constexpr (Variant::kHasScoreMod)
          sm = kept ? Variant::score(s, b, h, qi, kj, params, H) : 0.0f;
        const float p = expf_fast(kept ? sm - lseL[i] : kNegInf);
        const float ds = p * (dprow[i] * dropoutScale<Variant>(a, int(bh), qi, kj) - deltaL[i]);
        float g = ds;
        if constexpr (Variant::kHasScoreMod) {
          float dpar[P1];
          for (int pp = 0; pp < P1; ++pp)
            dpar[pp] = 0.0f;
          const float dsds = kept ? Variant::score_grad(s, b, h, qi, kj, params, H, dpar) : 0.0f;
          g = ds * dsds;
          for (int pp = 0; pp < P; ++pp)
            dparAcc[pp][i] += kept ? double(ds * dpar[pp]) : 0.0;
        }
        srow[i] = g; // gᵀ
      }
    }
    gemm<true>(BQ, D, BKV, St, 1, BQ, kb, D, dQ, D); // dQ += g·K, g(i, j) = gᵀ[j][i]
  }

  float *dqb = dq + rowOffset(b, h, H, Nq, q0, D);
  for (int i = 0; i < mq; ++i) {
    float *ATTNC_RESTRICT dst = dqb + std::size_t(i) * D;
    const float *ATTNC_RESTRICT src = dQ + std::size_t(i) * D;
    for (int d = 0; d < D; ++d)
      dst[d] = scale * src[d];
  }
  if constexpr (P > 0) {
    const int nQB = ceilDiv(Nq, BQ);
    float *part = partials + (bh * nQB + qb) * P;
    for (int pp = 0; pp < P; ++pp) {
      double acc = 0.0;
      for (int i = 0; i < mq; ++i)
        acc += dparAcc[pp][i];
      part[pp] = static_cast<float>(acc);
    }
  }
}

} // namespace detail

/// Fused attention backward, fp32. See docs/kernels.md for the semantics.
template <int BLOCK_Q, int BLOCK_KV, int HEAD_DIM, class Variant>
int flash_bwd(const AttnBwdArgs &a) {
  static_assert(BLOCK_Q > 0 && BLOCK_KV > 0 && HEAD_DIM > 0, "bad tile");
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
  const int nQB = ceilDiv(Nq, BLOCK_Q);
  const int nKB = ceilDiv(Nk, BLOCK_KV);

  AlignedBuffer ownPartials;
  float *partials = a.dparams_partial;
  if (P > 0 && !partials) {
    if (!ownPartials.reset(bwd_workspace_floats(B, H, Nq, BLOCK_Q, P)))
      return kErrAlloc;
    partials = ownPartials.data();
  }

  // 1. delta = rowsum(dout ∘ out).
  {
    const float *out = static_cast<const float *>(a.out);
    const float *dout = static_cast<const float *>(a.dout);
    const long long rows = static_cast<long long>(B) * H * Nq;
#ifdef _OPENMP
#pragma omp parallel for schedule(static)
#endif
    for (long long r = 0; r < rows; ++r)
      a.delta[r] = dotN<D>(dout + std::size_t(r) * D, out + std::size_t(r) * D);
  }

  // 2. dK, dV.
  int err = forEachTask(
      static_cast<long long>(B) * H * nKB, detail::DkDvLayout<BLOCK_Q, BLOCK_KV, D>::kTotal,
      [&](long long t, float *ws) {
        const int kb = static_cast<int>(t % nKB);
        const int bh = static_cast<int>(t / nKB);
        detail::flashBwdDkDvBlock<BLOCK_Q, BLOCK_KV, D, Variant>(a, ws, bh / H, bh % H, kb);
      });
  // 3. dQ and dparams partials.
  if (int e = forEachTask(static_cast<long long>(B) * H * nQB,
                          detail::DqLayout<BLOCK_Q, BLOCK_KV, D>::kTotal,
                          [&](long long t, float *ws) {
                            const int qb = static_cast<int>(t % nQB);
                            const int bh = static_cast<int>(t / nQB);
                            detail::flashBwdDqBlock<BLOCK_Q, BLOCK_KV, D, Variant>(
                                a, ws, partials, bh / H, bh % H, qb);
                          });
      !err)
    err = e;
  if (err)
    return err;
  // 4. dparams, reduced in a fixed order (b, then query block).
  if constexpr (P > 0) {
    for (int p = 0; p < P; ++p)
      for (int h = 0; h < H; ++h) {
        double acc = 0.0;
        for (int b = 0; b < B; ++b)
          for (int qb = 0; qb < nQB; ++qb)
            acc += partials[((std::size_t(b) * H + h) * nQB + qb) * P + p];
        a.dparams[p * H + h] += static_cast<float>(acc);
      }
  }
  return kOk;
}

} // namespace ATTNC_CPU_NAMESPACE_ATTR
} // namespace attnc

#endif // ATTNC_CPU_FLASH_BWD_H
