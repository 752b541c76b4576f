//===- variant.cuh - Score modifier and masks on accumulator tiles --------===//
//
// Applies a Variant policy (docs/kernels.md) to the score tiles of mma.cuh:
// scale, Variant::score, and the masks (key tail and key padding, causal,
// Variant::keep). Masks are evaluated only on tiles that may hold a masked
// entry; the caller decides that per warp from the tile's position.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_VARIANT_CUH
#define ATTNC_CUDA_VARIANT_CUH

#include "attnc/common.cuh"

namespace attnc {

/// What the variant hooks see, besides the element's (query, key) position.
struct ScoreCtx {
  const float *params;
  float scale;
  int b, h, H;
  int kvEnd; ///< keys at or past it are masked: Nk or the batch's length
  int Nq;
  /// Attention dropout (variants with kDropout; 0 turns it off, as in
  /// evaluation): the drop probability, the call's Philox offset and seed,
  /// and the (batch, head) row b * H + h the masks are keyed by.
  float dropout;
  unsigned int dropoutOffset;
  unsigned long long dropoutSeed;
  int bh;
};

/// The context of (b, h) for the arguments `a` of a forward or backward
/// kernel (both carry the same fields).
template <class Args> ATTNC_HD ScoreCtx scoreCtx(const Args &a, int b, int h, int kvEnd) {
  return ScoreCtx{a.params,         a.scale,        b,          h, a.H, kvEnd, a.Nq, a.dropout,
                  a.dropout_offset, a.dropout_seed, b * a.H + h};
}

/// The forward's dropout factor of (query i, key j): 1 without dropout,
/// else 0 (dropped) or 1 / (1 - p), from kernels/abi/attnc/abi/Philox.h attentionKeep,
/// the mask the CPU kernels draw.
template <class V> ATTNC_HD float dropoutScale(const ScoreCtx &c, int i, int j) {
  if constexpr (V::kDropout) {
    if (c.dropout > 0.f)
      return philox::attentionDropoutScale(c.dropoutSeed, c.dropoutOffset, c.bh, i, j, c.dropout);
  }
  (void)c, (void)i, (void)j;
  return 1.f;
}

/// Key blocks [first, end) of BLOCK_KV keys that query rows [q0, q0 + rows)
/// may keep (attnc/common/mask.h keyRange); blocks outside are skipped, not
/// masked.
template <class V, int BLOCK_KV>
ATTNC_HD void keyBlocks(int q0, int rows, int kvEnd, int &first, int &end) {
  int lo, hi;
  mask::keyRange<V>(q0, rows, kvEnd, lo, hi);
  end = (hi + BLOCK_KV - 1) / BLOCK_KV;
  first = imin(lo / BLOCK_KV, end);
}

/// Query blocks [first, end) of BLOCK_Q rows that may keep a key of
/// [k0, k0 + rows) (mask::queryRange), for the dK/dV kernel.
template <class V, int BLOCK_Q>
ATTNC_HD void queryBlocks(int k0, int rows, int Nq, int &first, int &end) {
  int lo, hi;
  mask::queryRange<V>(k0, rows, Nq, lo, hi);
  end = (hi + BLOCK_Q - 1) / BLOCK_Q;
  first = imin(lo / BLOCK_Q, end);
}

/// Whether query i keeps key j (i < Nq is the caller's business).
template <class V> ATTNC_HD bool kept(const ScoreCtx &c, int i, int j) {
  bool k = j < c.kvEnd;
  if constexpr (V::kCausal)
    k = k && j <= i;
  if constexpr (V::kHasMask)
    k = k && V::keep(c.b, c.h, i, j, c.params, c.H);
  return k;
}

/// Forward: raw q.k tile -> logits in log2 units, -inf where masked.
/// Element (n, e) is query i0 + L::rowBase + L::kRowStep (e / 2), key j0 +
/// L::colBase + L::colOf(n, e % 2) (L: the tile's accumulator layout).
template <class V, class L, int NT>
ATTNC_HD void fwdLogits(float (&s)[NT][4], const ScoreCtx &c, int i0, int j0, bool mask) {
  const int lane = threadIdx.x % 32, row0 = i0 + L::rowBase(lane), col0 = j0 + L::colBase(lane);
  const float scaleLog2 = c.scale * kLog2e;
  // The key tail, padding and causal limits of this thread's two rows as one
  // bound on the column offset colOf(n, e & 1) (two registers, not a compare
  // of full indices per element: D = 256 causal spilled without this).
  int rel[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int lim = c.kvEnd;
    if constexpr (V::kCausal)
      lim = imin(lim, row0 + L::kRowStep * r + 1);
    rel[r] = lim - col0;
  }
#pragma unroll
  for (int n = 0; n < NT; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int i = row0 + L::kRowStep * (e >> 1), j = col0 + L::colOf(n, e & 1);
      float x;
      if constexpr (V::kHasScoreMod)
        x = V::score(s[n][e] * c.scale, c.b, c.h, i, j, c.params, c.H) * kLog2e;
      else
        x = s[n][e] * scaleLog2;
      if (mask) {
        bool keep = L::colOf(n, e & 1) < rel[e >> 1];
        if constexpr (V::kHasMask)
          keep = keep && V::keep(c.b, c.h, i, j, c.params, c.H);
        if (!keep)
          x = negInf();
      }
      s[n][e] = x;
    }
  }
}

/// Forward, with attention dropout: drops entries of the probability tile
/// p (layout as fwdLogits) after the online softmax has summed them, and
/// scales the kept ones by 1 / (1 - p): the row sums keep every
/// probability, only the weights of V are masked (as in the CPU kernels).
template <class V, class L, int NT>
ATTNC_HD void dropoutProbs(float (&p)[NT][4], const ScoreCtx &c, int i0, int j0) {
  const int lane = threadIdx.x % 32, row0 = i0 + L::rowBase(lane), col0 = j0 + L::colBase(lane);
#pragma unroll
  for (int n = 0; n < NT; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e)
      p[n][e] *= dropoutScale<V>(c, row0 + L::kRowStep * (e >> 1), col0 + L::colOf(n, e & 1));
  }
}

/// Backward: from the raw q.k tile `s` and dp = dout.v, computes in place
///   s  <- p z, p = exp(score(scale q.k) - lse)   (0 where masked)
///   dp <- g = p (z dp - delta) * dscore/ds       (gradient w.r.t. scale q.k)
/// where z is the forward's dropout factor (1 without dropout): dV then
/// takes the dropped P, and delta = rowsum(dout * out) of the dropped out.
/// and, with ACCUM_DPARAMS, adds ds * dscore/dparam_p to dpar[p].
///
/// ROWS_ARE_KEYS: the tile is transposed (dK/dV kernel: rows are keys, the
/// columns queries). (i0, j0): the query and key of element (0, 0) in the
/// untransposed sense. lse2 (lse * log2 e, +inf for a row with no kept key,
/// so that p = 2^-inf = 0) and delta are indexed by the query's position
/// within the tile, i - i0.
template <class V, class L, bool ROWS_ARE_KEYS, bool ACCUM_DPARAMS, int NT, int NP>
ATTNC_HD void bwdGrads(float (&s)[NT][4], float (&dp)[NT][4], const ScoreCtx &c, int i0, int j0,
                       const float *lse2, const float *delta, bool mask, float (&dpar)[NP]) {
  const int lane = threadIdx.x % 32, row0 = L::rowBase(lane), col0 = L::colBase(lane);
#pragma unroll
  for (int n = 0; n < NT; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int row = row0 + L::kRowStep * (e >> 1), col = col0 + L::colOf(n, e & 1);
      const int qi = ROWS_ARE_KEYS ? col : row; // query within the tile
      const int i = i0 + qi, j = j0 + (ROWS_ARE_KEYS ? row : col);
      const bool keep = !mask || (i < c.Nq && kept<V>(c, i, j));
      const float raw = s[n][e] * c.scale;
      float sc = raw;
      if constexpr (V::kHasScoreMod)
        sc = V::score(raw, c.b, c.h, i, j, c.params, c.H);
      const float p = keep ? exp2f(sc * kLog2e - lse2[qi]) : 0.f;
      const float z = dropoutScale<V>(c, i, j);
      const float ds = keep ? p * (dp[n][e] * z - delta[qi]) : 0.f;
      float grad = ds;
      if constexpr (V::kHasScoreMod) {
        float d[V::kNumParams > 0 ? V::kNumParams : 1];
        const float dsc = V::score_grad(raw, c.b, c.h, i, j, c.params, c.H, d);
        // ds == 0 (masked, or p == 0 because score() gave -inf): no
        // gradient, whatever the derivatives are there (0 * inf = NaN).
        const bool live = ds != 0.f;
        grad = live ? ds * dsc : 0.f;
        if constexpr (ACCUM_DPARAMS) {
#pragma unroll
          for (int q = 0; q < V::kNumParams; ++q)
            dpar[q] += live ? ds * d[q] : 0.f;
        }
      }
      s[n][e] = p * z;
      dp[n][e] = grad;
    }
  }
}

} // namespace attnc

#endif // ATTNC_CUDA_VARIANT_CUH
