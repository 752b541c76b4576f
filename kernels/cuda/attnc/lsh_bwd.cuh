//===- lsh_bwd.cuh - LSH attention: backward ---------------------------------===//
//
// lsh_bwd_preprocess, lsh_bwd_dq, lsh_bwd_dkdv and lsh_bwd_combine: per round
// gradients of queries, keys and values, then the rounds and the key
// normalisation folded into dq and dv.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_LSH_BWD_CUH
#define ATTNC_CUDA_LSH_BWD_CUH

#include "attnc/lsh_hash.cuh"
#include "attnc/common/shared_qk.h"

namespace attnc {

//===-- Backward ----------------------------------------------------------===//

/// delta_i = sum_d dout_id out_id.
template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS, class T,
          class Variant>
__device__ void lsh_bwd_preprocess(const AttnLshArgs &a) {
  (void)LshTraits<CHUNK, D, BQ, BKV, WARPS>::kThreads;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int bh = lshRowBlock(a).row, N = a.N;
  const int i0 = lshRowBlock(a).tile * tile::kLshRowsPerBlock;
  const int i1 = imin(N, i0 + tile::kLshRowsPerBlock);
  for (int i = i0 + warp; i < i1; i += WARPS) {
    const size_t off = (size_t(bh) * N + i) * D;
    const T *o = static_cast<const T *>(a.out) + off;
    const T *g = static_cast<const T *>(a.dout) + off;
    float s = 0.f;
    for (int d = lane; d < D; d += 32)
      s = fmaf(lshLoad(g + d), lshLoad(o + d), s);
    s = warpSum(s);
    if (lane == 0)
      a.delta[size_t(bh) * N + i] = s;
  }
}

/// round_dq of BQ query slots of one round.
template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS, class T,
          class Variant>
__device__ void lsh_bwd_dq(const AttnLshArgs &a) {
  using Tr = LshTraits<CHUNK, D, BQ, BKV, WARPS>;
  using Smem = LshDqSmem<BQ, BKV, D>;
  static_assert(sizeof(Smem) == tile::lshBwdDqSmemBytes(BQ, BKV, D), "layout");
  constexpr int NT = Tr::kThreads, LD = Tr::kLd, TPR = Tr::kQLanes;
  constexpr int KPT = (BKV + TPR - 1) / TPR, CPT = (D + TPR - 1) / TPR;
  ATTNC_LSH_SHARED(Smem, sm);

  const int tid = threadIdx.x, row = tid / TPR, sub = tid % TPR;
  const LshBlock blk = lshBlock<CHUNK, BEFORE, AFTER>(a, BQ);
  if (blk.empty)
    return;
  const LshRound &rd = blk.rd;
  const int t0 = blk.t0, ks = blk.lo, ke = blk.hi, *perm = blk.perm;
  const size_t slice = blk.slice;
  const T *gq = static_cast<const T *>(a.q) + slice * D;
  const T *gdo = static_cast<const T *>(a.dout) + slice * D;
  const T *gv = static_cast<const T *>(a.v) + slice * D;
  const float *gk = a.keys + slice * D;
  const float *rlse = a.round_lse + slice * a.rounds; // [R, N]
  const LshCtx ctx = lshCtx<Variant>(a, rd.b, rd.h, rd.r);

  for (int x = tid; x < BQ; x += NT) {
    const int i = perm[t0 + x];
    sm.qpos[x] = i;
    sm.lse[x] = i >= 0 ? a.round_lse[rd.row0 + i] : negInf();
    sm.delta[x] = i >= 0 ? a.delta[slice + i] : 0.f;
  }
  __syncthreads();
  lshGather<BQ, D, NT>(sm.q, gq, sm.qpos, tid);
  lshGather<BQ, D, NT>(sm.dout, gdo, sm.qpos, tid);
  const int i = sm.qpos[row];
  const float lse = sm.lse[row], delta = sm.delta[row];
  const float w = lshRoundWeight<TPR>(rlse, a.rounds, rd.N, i, lse, sub);

  float dq[CPT];
#pragma unroll
  for (int n = 0; n < CPT; ++n)
    dq[n] = 0.f;

  for (int kt = ks; kt < ke; kt += BKV) {
    __syncthreads();
    for (int x = tid; x < BKV; x += NT)
      sm.kpos[x] = perm[kt + x];
    __syncthreads();
    lshGather<BKV, D, NT>(sm.k, gk, sm.kpos, tid);
    lshGather<BKV, D, NT>(sm.v, gv, sm.kpos, tid);
    __syncthreads();

    float s[KPT], dp[KPT];
#pragma unroll
    for (int n = 0; n < KPT; ++n)
      s[n] = dp[n] = 0.f;
    for (int d = 0; d < D; ++d) {
      const float qd = sm.q[row * LD + d], od = sm.dout[row * LD + d];
#pragma unroll
      for (int n = 0; n < KPT; ++n) {
        const int kk = sub + n * TPR;
        if (BKV % TPR == 0 || kk < BKV) {
          s[n] = fmaf(qd, sm.k[kk * LD + d], s[n]);
          dp[n] = fmaf(od, sm.v[kk * LD + d], dp[n]);
        }
      }
    }
#pragma unroll
    for (int n = 0; n < KPT; ++n) {
      const int kk = sub + n * TPR;
      if (BKV % TPR == 0 || kk < BKV) {
        float p, g;
        lshPairGrad<Variant>(ctx, s[n], dp[n], i, sm.kpos[kk], lse, w, delta, p, g);
        sm.g[row * (BKV + 1) + kk] = g;
      }
    }
    __syncthreads();
    for (int kk = 0; kk < BKV; ++kk) {
      const float g = sm.g[row * (BKV + 1) + kk];
#pragma unroll
      for (int n = 0; n < CPT; ++n) {
        const int col = sub + n * TPR;
        if (D % TPR == 0 || col < D)
          dq[n] = fmaf(g, sm.k[kk * LD + col], dq[n]);
      }
    }
  }

  if (i >= 0) {
    float *out = a.round_dq + (rd.row0 + i) * D;
#pragma unroll
    for (int n = 0; n < CPT; ++n) {
      const int col = sub + n * TPR;
      if (D % TPR == 0 || col < D)
        out[col] = dq[n];
    }
  }
}

/// round_dk, round_dv of BKV key slots of one round.
template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS, class T,
          class Variant>
__device__ void lsh_bwd_dkdv(const AttnLshArgs &a) {
  using Tr = LshTraits<CHUNK, D, BQ, BKV, WARPS>;
  using Smem = LshDkdvSmem<BQ, BKV, D>;
  static_assert(sizeof(Smem) == tile::lshBwdDkdvSmemBytes(BQ, BKV, D), "layout");
  constexpr int NT = Tr::kThreads, LD = Tr::kLd, TPK = Tr::kKLanes;
  constexpr int TPQ = Tr::kQLanes; // lanes per query for the round weights
  constexpr int QPT = (BQ + TPK - 1) / TPK, CPT = (D + TPK - 1) / TPK;
  ATTNC_LSH_SHARED(Smem, sm);

  const int tid = threadIdx.x, row = tid / TPK, sub = tid % TPK;
  // The queries of chunks c-AFTER..c+BEFORE see this block's keys.
  const LshBlock blk = lshBlock<CHUNK, AFTER, BEFORE>(a, BKV);
  if (blk.empty)
    return;
  const LshRound &rd = blk.rd;
  const int t0 = blk.t0, qs = blk.lo, qe = blk.hi, *perm = blk.perm;
  const size_t slice = blk.slice;
  const T *gq = static_cast<const T *>(a.q) + slice * D;
  const T *gdo = static_cast<const T *>(a.dout) + slice * D;
  const T *gv = static_cast<const T *>(a.v) + slice * D;
  const float *gk = a.keys + slice * D;
  const LshCtx ctx = lshCtx<Variant>(a, rd.b, rd.h, rd.r);

  for (int x = tid; x < BKV; x += NT)
    sm.kpos[x] = perm[t0 + x];
  __syncthreads();
  lshGather<BKV, D, NT>(sm.k, gk, sm.kpos, tid);
  lshGather<BKV, D, NT>(sm.v, gv, sm.kpos, tid);
  const int j = sm.kpos[row];

  float dk[CPT], dv[CPT];
#pragma unroll
  for (int n = 0; n < CPT; ++n)
    dk[n] = dv[n] = 0.f;

  for (int qt = qs; qt < qe; qt += BQ) {
    __syncthreads();
    for (int x = tid; x < BQ; x += NT) {
      const int i = perm[qt + x];
      sm.qpos[x] = i;
      sm.lse[x] = i >= 0 ? a.round_lse[rd.row0 + i] : negInf();
      sm.delta[x] = i >= 0 ? a.delta[slice + i] : 0.f;
    }
    __syncthreads();
    { // The queries' round weights, TPQ lanes each (as in lsh_bwd_dq).
      const int x = tid / TPQ, xs = tid % TPQ;
      const float w = lshRoundWeight<TPQ>(a.round_lse + slice * a.rounds, a.rounds, rd.N,
                                          sm.qpos[x], sm.lse[x], xs);
      if (xs == 0)
        sm.w[x] = w;
    }
    lshGather<BQ, D, NT>(sm.q, gq, sm.qpos, tid);
    lshGather<BQ, D, NT>(sm.dout, gdo, sm.qpos, tid);
    __syncthreads();

    float s[QPT], dp[QPT];
#pragma unroll
    for (int n = 0; n < QPT; ++n)
      s[n] = dp[n] = 0.f;
    for (int d = 0; d < D; ++d) {
      const float kd = sm.k[row * LD + d], vd = sm.v[row * LD + d];
#pragma unroll
      for (int n = 0; n < QPT; ++n) {
        const int qq = sub + n * TPK;
        if (BQ % TPK == 0 || qq < BQ) {
          s[n] = fmaf(sm.q[qq * LD + d], kd, s[n]);
          dp[n] = fmaf(sm.dout[qq * LD + d], vd, dp[n]);
        }
      }
    }
#pragma unroll
    for (int n = 0; n < QPT; ++n) {
      const int qq = sub + n * TPK;
      if (BQ % TPK == 0 || qq < BQ) {
        float p, g;
        lshPairGrad<Variant>(ctx, s[n], dp[n], sm.qpos[qq], j, sm.lse[qq], sm.w[qq], sm.delta[qq],
                             p, g);
        sm.p[row * (BQ + 1) + qq] = p;
        sm.g[row * (BQ + 1) + qq] = g;
      }
    }
    __syncthreads();
    for (int qq = 0; qq < BQ; ++qq) {
      const float p = sm.p[row * (BQ + 1) + qq], g = sm.g[row * (BQ + 1) + qq];
#pragma unroll
      for (int n = 0; n < CPT; ++n) {
        const int col = sub + n * TPK;
        if (D % TPK == 0 || col < D) {
          dv[n] = fmaf(p, sm.dout[qq * LD + col], dv[n]);
          dk[n] = fmaf(g, sm.q[qq * LD + col], dk[n]);
        }
      }
    }
  }

  if (j >= 0) {
    float *odk = a.round_dk + (rd.row0 + j) * D;
    float *odv = a.round_dv + (rd.row0 + j) * D;
#pragma unroll
    for (int n = 0; n < CPT; ++n) {
      const int col = sub + n * TPK;
      if (D % TPK == 0 || col < D) {
        odk[col] = dk[n];
        odv[col] = dv[n];
      }
    }
  }
}

/// dq = sum_r round_dq + normalisation backward of sum_r round_dk, dv =
/// sum_r round_dv, written as T.
template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS, class T,
          class Variant>
__device__ void lsh_bwd_combine(const AttnLshArgs &a) {
  (void)LshTraits<CHUNK, D, BQ, BKV, WARPS>::kThreads;
  constexpr int DPL = (D + 31) / 32; // elements per lane
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int bh = lshRowBlock(a).row, R = a.rounds, N = a.N;
  const int i0 = lshRowBlock(a).tile * tile::kLshRowsPerBlock;
  const int i1 = imin(N, i0 + tile::kLshRowsPerBlock);
  for (int j = i0 + warp; j < i1; j += WARPS) {
    const size_t row = size_t(bh) * N + j;
    const T *q = static_cast<const T *>(a.q) + row * D;
    const float *key = a.keys + row * D;
    const float nrm = lshRowNorm<D>(q, lane);
    float dk[DPL], dq[DPL], dv[DPL];
    float kdk = 0.f;
#pragma unroll
    for (int u = 0; u < DPL; ++u) {
      const int d = lane + 32 * u;
      dk[u] = dq[u] = dv[u] = 0.f;
      if (D % 32 == 0 || d < D) {
        for (int r = 0; r < R; ++r) {
          const size_t at = ((size_t(bh) * R + r) * N + j) * D + d;
          dq[u] += a.round_dq[at];
          dk[u] += a.round_dk[at];
          dv[u] += a.round_dv[at];
        }
        kdk = fmaf(key[d], dk[u], kdk);
      }
    }
    kdk = warpSum(kdk);
    T *gdq = static_cast<T *>(a.dq) + row * D;
    T *gdv = static_cast<T *>(a.dv) + row * D;
#pragma unroll
    for (int u = 0; u < DPL; ++u) {
      const int d = lane + 32 * u;
      if (D % 32 == 0 || d < D) {
        gdq[d] = Elem<T>::fromFloat(dq[u] + sharedqk::queryGradFromKey(dk[u], key[d], kdk, nrm));
        gdv[d] = Elem<T>::fromFloat(dv[u]);
      }
    }
  }
}

} // namespace attnc

#endif // ATTNC_CUDA_LSH_BWD_CUH
