//===- lsh_fwd.cuh - LSH attention: forward ----------------------------------===//
//
// lsh_fwd (one round's chunk attention) and lsh_combine (the rounds
// combined by their log-sum-exp).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_LSH_FWD_CUH
#define ATTNC_CUDA_LSH_FWD_CUH

#include "attnc/lsh_hash.cuh"

namespace attnc {

//===-- Forward -----------------------------------------------------------===//

template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS, class T,
          class Variant>
__device__ void lsh_fwd(const AttnLshArgs &a) {
  using Tr = LshTraits<CHUNK, D, BQ, BKV, WARPS>;
  using Smem = LshFwdSmem<BQ, BKV, D>;
  static_assert(sizeof(Smem) == tile::lshFwdSmemBytes(BQ, BKV, D), "layout");
  constexpr int NT = Tr::kThreads, LD = Tr::kLd, TPR = Tr::kQLanes;
  constexpr int KPT = (BKV + TPR - 1) / TPR, CPT = (D + TPR - 1) / TPR;
  ATTNC_LSH_SHARED(Smem, sm);

  const int tid = threadIdx.x, row = tid / TPR, sub = tid % TPR;
  const LshBlock blk = lshBlock<CHUNK, BEFORE, AFTER>(a, BQ);
  if (blk.empty)
    return;
  const LshRound &rd = blk.rd;
  const int t0 = blk.t0, ks = blk.lo, ke = blk.hi, *perm = blk.perm;
  const T *gq = static_cast<const T *>(a.q) + size_t(rd.bh) * rd.N * D;
  const T *gv = static_cast<const T *>(a.v) + size_t(rd.bh) * rd.N * D;
  const float *gk = a.keys + size_t(rd.bh) * rd.N * D;
  const LshCtx ctx = lshCtx<Variant>(a, rd.b, rd.h, rd.r);

  for (int x = tid; x < BQ; x += NT)
    sm.qpos[x] = perm[t0 + x];
  __syncthreads();
  lshGather<BQ, D, NT>(sm.q, gq, sm.qpos, tid);
  const int i = sm.qpos[row];

  float o[CPT];
#pragma unroll
  for (int n = 0; n < CPT; ++n)
    o[n] = 0.f;
  float m = negInf(), l = 0.f;

  for (int kt = ks; kt < ke; kt += BKV) {
    __syncthreads(); // the previous tile's V rows and P are consumed
    for (int x = tid; x < BKV; x += NT)
      sm.kpos[x] = perm[kt + x];
    __syncthreads();
    lshGather<BKV, D, NT>(sm.kv, gk, sm.kpos, tid);
    __syncthreads();

    float s[KPT];
#pragma unroll
    for (int n = 0; n < KPT; ++n)
      s[n] = 0.f;
    for (int d = 0; d < D; ++d) {
      const float qd = sm.q[row * LD + d];
#pragma unroll
      for (int n = 0; n < KPT; ++n) {
        const int kk = sub + n * TPR;
        if (BKV % TPR == 0 || kk < BKV)
          s[n] = fmaf(qd, sm.kv[kk * LD + d], s[n]);
      }
    }
    float mx = negInf();
#pragma unroll
    for (int n = 0; n < KPT; ++n) {
      const int kk = sub + n * TPR;
      float x = negInf();
      if (BKV % TPR == 0 || kk < BKV) {
        const int j = sm.kpos[kk];
        if (lshKept<Variant>(ctx, i, j))
          x = lshScore<Variant>(ctx, s[n], i, j);
      }
      s[n] = x;
      mx = fmaxf(mx, x);
    }
    mx = lshGroupMax<TPR>(mx);
    const float mNew = fmaxf(m, mx);
    // While a row has nothing kept its maximum is -inf: subtract 0 then
    // (every term is exp(-inf) = 0) instead of -inf - -inf = NaN.
    const float base = mNew == negInf() ? 0.f : mNew;
    const float alpha = expf(m - base);
    m = mNew;
    float sum = 0.f;
#pragma unroll
    for (int n = 0; n < KPT; ++n) {
      const int kk = sub + n * TPR;
      if (BKV % TPR == 0 || kk < BKV) {
        const float p = expf(s[n] - base);
        sum += p; // the sums keep every probability, V's weights are dropped
        sm.p[row * (BKV + 1) + kk] = p != 0.f ? p * lshDropout<Variant>(ctx, i, sm.kpos[kk]) : p;
      }
    }
    l = l * alpha + sum;
#pragma unroll
    for (int n = 0; n < CPT; ++n)
      o[n] *= alpha;
    __syncthreads(); // keys consumed, P complete
    lshGather<BKV, D, NT>(sm.kv, gv, sm.kpos, tid);
    __syncthreads();
    for (int kk = 0; kk < BKV; ++kk) {
      const float p = sm.p[row * (BKV + 1) + kk];
#pragma unroll
      for (int n = 0; n < CPT; ++n) {
        const int col = sub + n * TPR;
        if (D % TPR == 0 || col < D)
          o[n] = fmaf(p, sm.kv[kk * LD + col], o[n]);
      }
    }
  }

  l = lshGroupSum<TPR>(l);
  const bool any = l > 0.f;
  const float inv = any ? 1.f / l : 0.f;
  if (i >= 0) {
    float *out = a.round_out + (rd.row0 + i) * D;
#pragma unroll
    for (int n = 0; n < CPT; ++n) {
      const int col = sub + n * TPR;
      if (D % TPR == 0 || col < D)
        out[col] = o[n] * inv;
    }
    if (sub == 0)
      a.round_lse[rd.row0 + i] = any ? m + logf(l) : negInf();
  }
}

/// out_i = sum_r exp(lse_ir - lse_i) o_ir, lse_i = logsumexp_r lse_ir.
template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS, class T,
          class Variant>
__device__ void lsh_combine(const AttnLshArgs &a) {
  (void)LshTraits<CHUNK, D, BQ, BKV, WARPS>::kThreads;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int bh = lshRowBlock(a).row, R = a.rounds, N = a.N;
  const int i0 = lshRowBlock(a).tile * tile::kLshRowsPerBlock;
  const int i1 = imin(N, i0 + tile::kLshRowsPerBlock);
  for (int i = i0 + warp; i < i1; i += WARPS) {
    const float *rl = a.round_lse + size_t(bh) * R * N + i;
    float m = negInf();
    for (int r = 0; r < R; ++r)
      m = fmaxf(m, rl[size_t(r) * N]);
    // Weights exp(lse_ir - m) / s rather than exp(lse_ir - lse_i): lse_i
    // may be ~ -1e5 (only the self score kept), where its fp32 rounding
    // would show in the weights.
    float s = 0.f;
    if (m != negInf())
      for (int r = 0; r < R; ++r)
        s += expf(rl[size_t(r) * N] - m);
    const float lse = m != negInf() ? m + logf(s) : negInf();
    const float inv = m != negInf() ? 1.f / s : 0.f;
    T *out = static_cast<T *>(a.out) + (size_t(bh) * N + i) * D;
    for (int d = lane; d < D; d += 32) {
      float acc = 0.f;
      if (m != negInf())
        for (int r = 0; r < R; ++r)
          acc = fmaf(expf(rl[size_t(r) * N] - m),
                     a.round_out[((size_t(bh) * R + r) * N + i) * D + d], acc);
      out[d] = Elem<T>::fromFloat(acc * inv);
    }
    if (lane == 0)
      a.lse[size_t(bh) * N + i] = lse;
  }
}

} // namespace attnc

#endif // ATTNC_CUDA_LSH_FWD_CUH
