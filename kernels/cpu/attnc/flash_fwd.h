//===- flash_fwd.h - Tiled attention forward (CPU, fp32) --------*- C++ -*-===//
//
// FlashAttention-style forward on the CPU: per (batch, head, query block),
// loop over key/value blocks, S = scale·Q·Kᵀ in a BLOCK_Q × BLOCK_KV tile,
// score modifier and masks, online softmax (running max and sum, rescaling
// of the output accumulator), O += P·V. Semantics: docs/kernels.md.
//
//   template <int BLOCK_Q, int BLOCK_KV, int HEAD_DIM, class Variant>
//   int attnc::cpu::flash_fwd(const attnc::AttnFwdArgs &a);
//
// Returns 0, or a Status code for invalid arguments. Parallel (OpenMP) over
// batch × head × query block; each output element is written by one thread
// in an order that does not depend on the thread count.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CPU_FLASH_FWD_H
#define ATTNC_CPU_FLASH_FWD_H

#include "common.h"

namespace attnc {
namespace cpu ATTNC_CPU_NAMESPACE_ATTR {

namespace detail {

/// Shared checks of the forward and backward entry points.
template <class Variant>
inline int checkCommon(const void *q, const void *k, const void *v, const int *lengths,
                       const float *params, int B, int H, int Nq, int Nk) {
  if (!q || !k || !v)
    return kErrNullPointer;
  if (B <= 0 || H <= 0 || Nq <= 0 || Nk <= 0)
    return kErrBadSize;
  if (Variant::kKeyPadding && !lengths)
    return kErrNullPointer;
  if (Variant::kNumParams > 0 && !params)
    return kErrNullPointer;
  return kOk;
}

/// Attention dropout on a transposed probability tile Sᵀ[key][query] of
/// head row bh: entry (query q0 + i, key kv0 + j) is zeroed with
/// probability p (kernels/abi/attnc/abi/Philox.h attentionKeep) and scaled by 1/(1 − p)
/// otherwise; the backward redraws the same masks.
template <int BQ>
inline void dropoutTile(float *St, const AttnFwdArgs &a, int bh, int q0, int kv0, int nk) {
  const float p = a.dropout, keepScale = 1.0f / (1.0f - p);
  for (int j = 0; j < nk; ++j) {
    float *ATTNC_RESTRICT row = St + std::size_t(j) * BQ;
    for (int i = 0; i < BQ; ++i)
      row[i] = philox::attentionKeep(a.dropout_seed, a.dropout_offset, bh, q0 + i, kv0 + j, p)
                   ? row[i] * keepScale
                   : 0.0f;
  }
}

/// Scores of one key (row j of a transposed tile Sᵀ[BKV][BQ]) against the
/// BQ queries of the block: row[i] = kept ? score(scale·raw[i]) : -inf, and
/// the running column maxima mt[i] = max(mt[i], row[i]). Vectorises over i.
template <int BQ, class Variant>
ATTNC_FORCE_INLINE void scoreKeyRow(float *ATTNC_RESTRICT row, float *ATTNC_RESTRICT mt,
                                    float scale, int b, int h, int q0, int kv, bool keyOk,
                                    bool needMask, const float *params, int H) {
  if (!needMask) {
    for (int i = 0; i < BQ; ++i) {
      float s = scale * row[i];
      if constexpr (Variant::kHasScoreMod)
        s = Variant::score(s, b, h, q0 + i, kv, params, H);
      row[i] = s;
      mt[i] = s > mt[i] ? s : mt[i];
    }
    return;
  }
  for (int i = 0; i < BQ; ++i) {
    const int qi = q0 + i;
    float s = scale * row[i];
    bool kept = keyOk;
    if constexpr (Variant::kCausal)
      kept = kept && kv <= qi;
    if constexpr (Variant::kHasScoreMod)
      s = kept ? Variant::score(s, b, h, qi, kv, params, H) : 0.0f;
    if constexpr (Variant::kHasMask)
      kept = kept && Variant::keep(b, h, qi, kv, params, H);
    s = kept ? s : kNegInf;
    row[i] = s;
    mt[i] = s > mt[i] ? s : mt[i];
  }
}

template <int BQ, int BKV, int D> struct FwdLayout {
  static constexpr std::size_t kQt = 0;                          // [D][BQ]
  static constexpr std::size_t kK = kQt + std::size_t(D) * BQ;   // [BKV][D] tail copy
  static constexpr std::size_t kV = kK + std::size_t(BKV) * D;   // [BKV][D] tail copy
  static constexpr std::size_t kSt = kV + std::size_t(BKV) * D;  // [BKV][BQ]
  static constexpr std::size_t kO = kSt + std::size_t(BKV) * BQ; // [BQ][D]
  static constexpr std::size_t kM = kO + std::size_t(BQ) * D;    // running max
  static constexpr std::size_t kL = kM + BQ;                     // running sum
  static constexpr std::size_t kMt = kL + BQ;                    // tile max
  static constexpr std::size_t kMUse = kMt + BQ;                 // exp reference
  static constexpr std::size_t kAlpha = kMUse + BQ;              // rescale factor
  static constexpr std::size_t kSum = kAlpha + BQ;               // tile sum
  static constexpr std::size_t kTotal = kSum + BQ;
};

/// One (b, h, query block) of the forward. The score tile is kept transposed,
/// Sᵀ = K·Qᵀ ([key][query]), so the softmax statistics of the BQ queries are
/// updated with vector operations across queries (no horizontal reductions)
/// and Q is transposed once per block instead of K once per tile; O += P·V
/// reads P through a strided view of Sᵀ.
template <int BQ, int BKV, int D, class Variant>
inline void flashFwdBlock(const AttnFwdArgs &a, float *ws, int b, int h, int qb) {
  using L = FwdLayout<BQ, BKV, D>;
  const int H = a.H, Nq = a.Nq, Nk = a.Nk;
  const float scale = a.scale;
  const float *params = a.params;
  const float *q = static_cast<const float *>(a.q);
  const float *k = static_cast<const float *>(a.k);
  const float *v = static_cast<const float *>(a.v);
  float *out = static_cast<float *>(a.out);

  float *ATTNC_RESTRICT qt = ws + L::kQt;
  float *ATTNC_RESTRICT ks = ws + L::kK;
  float *ATTNC_RESTRICT vs = ws + L::kV;
  float *ATTNC_RESTRICT St = ws + L::kSt;
  float *ATTNC_RESTRICT O = ws + L::kO;
  float *ATTNC_RESTRICT m = ws + L::kM;
  float *ATTNC_RESTRICT l = ws + L::kL;
  float *ATTNC_RESTRICT mt = ws + L::kMt;
  float *ATTNC_RESTRICT mUse = ws + L::kMUse;
  float *ATTNC_RESTRICT alpha = ws + L::kAlpha;
  float *ATTNC_RESTRICT sum = ws + L::kSum;

  const int q0 = qb * BQ;
  const int mq = std::min(BQ, Nq - q0);
  transposePadded<BQ, D>(qt, q + rowOffset(b, h, H, Nq, q0, D), mq, D);

  // Keys outside [kvBegin, kvEnd) are excluded for every row of the block.
  int kvBegin, kvEnd;
  mask::keyRange<Variant>(q0, mq, mask::keyEnd<Variant>(a.lengths, b, Nk), kvBegin, kvEnd);

  for (int i = 0; i < BQ; ++i) {
    m[i] = kNegInf;
    l[i] = 0.0f;
  }
  zeroFloats(O, std::size_t(BQ) * D);

  const float *kbh = k + rowOffset(b, h, H, Nk, 0, D);
  const float *vbh = v + rowOffset(b, h, H, Nk, 0, D);
  for (int kv0 = kvBegin; kv0 < kvEnd; kv0 += BKV) {
    const int nk = std::min(BKV, kvEnd - kv0);
    const float *kb = kbh + std::size_t(kv0) * D;
    const float *vb = vbh + std::size_t(kv0) * D;
    if (nk < BKV) { // zero-padded copies: the GEMMs read finite values
      copyRowsPadded<BKV, D>(ks, kb, nk, D);
      copyRowsPadded<BKV, D>(vs, vb, nk, D);
      kb = ks;
      vb = vs;
    }
    gemm<false>(BKV, BQ, D, kb, D, 1, qt, BQ, St, BQ); // Sᵀ = K·Qᵀ

    // Does any entry of this tile need the mask test?
    const bool needMask = nk < BKV || Variant::kHasMask || (Variant::kCausal && kv0 + BKV - 1 > q0);
    for (int i = 0; i < BQ; ++i)
      mt[i] = kNegInf;
    for (int j = 0; j < BKV; ++j)
      scoreKeyRow<BQ, Variant>(St + std::size_t(j) * BQ, mt, scale, b, h, q0, kv0 + j, j < nk,
                               needMask, params, H);
    for (int i = 0; i < BQ; ++i) {
      const float mNew = mt[i] > m[i] ? mt[i] : m[i];
      // Nothing kept yet: exp(-inf - 0) = 0 keeps p, l and O at 0.
      mUse[i] = mNew == kNegInf ? 0.0f : mNew;
      alpha[i] = expf_fast(m[i] - mUse[i]); // 0 when m[i] = -inf
      m[i] = mNew;
      sum[i] = 0.0f;
    }
    for (int j = 0; j < BKV; ++j) {
      float *ATTNC_RESTRICT row = St + std::size_t(j) * BQ;
      for (int i = 0; i < BQ; ++i) {
        const float p = expf_fast(row[i] - mUse[i]);
        row[i] = p;
        sum[i] += p;
      }
    }
    for (int i = 0; i < BQ; ++i)
      l[i] = l[i] * alpha[i] + sum[i];
    for (int i = 0; i < mq; ++i)
      if (alpha[i] != 1.0f)
        scaleRow(O + std::size_t(i) * D, D, alpha[i]);
    // Attention dropout: the row sums (l) keep every probability; only the
    // weights of V are masked and rescaled.
    if constexpr (Variant::kDropout)
      if (a.dropout > 0.0f)
        dropoutTile<BQ>(St, a, b * H + h, q0, kv0, nk);
    gemm<true>(BQ, D, BKV, St, 1, BQ, vb, D, O, D); // O += P·V, P(i, j) = Sᵀ[j][i]
  }

  float *ob = out + rowOffset(b, h, H, Nq, q0, D);
  float *lb = a.lse + (std::size_t(b) * H + h) * Nq + q0;
  for (int i = 0; i < mq; ++i) {
    float *ATTNC_RESTRICT orow = ob + std::size_t(i) * D;
    if (l[i] > 0.0f && m[i] != kNegInf) {
      const float inv = 1.0f / l[i];
      const float *ATTNC_RESTRICT src = O + std::size_t(i) * D;
      for (int d = 0; d < D; ++d)
        orow[d] = src[d] * inv;
      lb[i] = m[i] + std::log(l[i]);
    } else {
      zeroFloats(orow, D);
      lb[i] = kNegInf;
    }
  }
}

} // namespace detail

/// Fused attention forward, fp32. See docs/kernels.md for the semantics.
template <int BLOCK_Q, int BLOCK_KV, int HEAD_DIM, class Variant>
int flash_fwd(const AttnFwdArgs &a) {
  static_assert(BLOCK_Q > 0 && BLOCK_KV > 0 && HEAD_DIM > 0, "bad tile");
  if (int e =
          detail::checkCommon<Variant>(a.q, a.k, a.v, a.lengths, a.params, a.B, a.H, a.Nq, a.Nk))
    return e;
  if (!a.out || !a.lse)
    return kErrNullPointer;
  using L = detail::FwdLayout<BLOCK_Q, BLOCK_KV, HEAD_DIM>;
  const int nQB = ceilDiv(a.Nq, BLOCK_Q);
  const long long tasks = static_cast<long long>(a.B) * a.H * nQB;
  return forEachTask(tasks, L::kTotal, [&](long long t, float *ws) {
    const int qb = static_cast<int>(t % nQB);
    const int bh = static_cast<int>(t / nQB);
    detail::flashFwdBlock<BLOCK_Q, BLOCK_KV, HEAD_DIM, Variant>(a, ws, bh / a.H, bh % a.H, qb);
  });
}

} // namespace ATTNC_CPU_NAMESPACE_ATTR
} // namespace attnc

#endif // ATTNC_CPU_FLASH_FWD_H
