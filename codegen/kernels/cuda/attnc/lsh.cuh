//===- lsh.cuh - LSH attention (Reformer, shared QK) ----------------------===//
//
// The CUDA kernels of docs/kernels.md, "LSH kernels (Reformer)". All are
// device function templates <CHUNK, BEFORE, AFTER, D, BQ, BKV, WARPS, T,
// Variant> taking the one AttnLshArgs, run with WARPS * 32 threads and
// static shared memory only (sizes in codegen/kernels/abi/attnc/abi/LshTileModel.h, checked here
// by static_assert). Launch order and grids (bh = b * H + h):
//
//   forward   lsh_hash          (R, B*H)           keys (r == 0), buckets, perm
//             lsh_fwd           (Npad/BQ, B*H*R)   round_out, round_lse
//             lsh_combine       (ceil(N/64), B*H)  out (T), lse
//   backward  lsh_hash          (R, B*H)           as above (recomputed)
//             lsh_bwd_preprocess(ceil(N/64), B*H)  delta
//             lsh_bwd_dq        (Npad/BQ, B*H*R)   round_dq
//             lsh_bwd_dkdv      (Npad/BKV, B*H*R)  round_dk, round_dv
//             lsh_bwd_combine   (ceil(N/64), B*H)  dq (T), dv (T)
//
// with blockIdx.y = bh * R + r in the per-round kernels (so B*H*R <=
// tile::kLshMaxGridY, checked by the caller). The backward reads the
// forward's round_lse [B, H, R, N] (and out): the caller keeps it from
// lsh_fwd to the backward, and no backward kernel writes it; the backward
// does not read the combined lse. Everything is fp32 inside (T is loaded
// and converted); dot products run in order d = 0..D-1 with fmaf; there are
// no floating-point atomics and every output element is written by exactly
// one thread, so results are bit-reproducible.
//
// Hash (one block per (round, b, h)): r == 0 blocks write keys = q /
// max(|q|, 1e-6) (a warp per position). Each thread hashes positions j ==
// tid (mod WARPS*32): y_k = sum_d q_jd R_r[d][k] accumulated as acc =
// fmaf(q_jd, R_r[d][k], acc) from 0 in order d = 0..D-1 (the CPU kernels
// must do the same for identical buckets), bucket = argmax [y; -y], first
// index on ties; counts go into a shared-memory histogram (integer
// atomics). Warp 0 turns it into exclusive offsets. The scatter walks the
// positions in tiles of WARPS*32 in order and, within a tile, warp by warp
// (a barrier between warps): lanes with equal buckets find each other with
// __match_any_sync, take offset + (their rank among them) and the lowest
// lane advances the bucket's offset. So the sort is stable and the same on
// every run. Slots N..Npad-1 get -1.
//
// Forward (one block per BQ query slots of one round): the block's queries
// are perm[t0 .. t0+BQ) of chunk c = t0 / CHUNK; it visits the key slots of
// chunks max(0, c-BEFORE) .. min(C-1, c+AFTER) in tiles of BKV, gathering
// fp32 keys (from `keys`) and V rows (converted) by perm into the same
// buffer in turn. Query row i of the tile belongs to kThreads/BQ
// consecutive lanes (TPR); each holds BKV/TPR scores and D/TPR output
// columns, the online softmax (natural exp) reduces over the row's lanes
// with xor shuffles. Results go to round_out/round_lse at the queries'
// original positions; pad slots write nothing.
//
// Backward, dQ: like the forward, recomputing p = exp(s - lse_ir) * w_ir
// for query i in round r, with this round's lse_ir = round_lse[r][i] and
// the round weight w_ir = exp(lse_ir - M_i) / sum_r' exp(lse_ir' - M_i),
// M_i = max_r' lse_ir' (w = 0 where lse_ir = -inf; lshRoundWeight, the
// lanes of a query row reading the R round_lse values of it). That is
// exp(s - lse_i) with the combined lse_i = M_i + log(sum) in exact
// arithmetic, but never forms lse_i: for a row whose only kept key is its
// own (self score -1e5) in R >= 2 rounds, lse_i = -1e5 + log R is rounded
// by up to 2^-8 in fp32, which would scale p (and dV) by up to 0.4%;
// lse_ir = -1e5 exactly there and w_ir = 1/R. dQ += scale * g * K. dK/dV:
// one block per BKV key slots of chunk c' streams the query slots of chunks
// max(0, c'-AFTER) .. min(C-1, c'+BEFORE) (the queries whose window holds
// c'), each query tile's round weights computed into shared memory by
// kThreads/BQ lanes per query as in dQ (the same values); dV += p * dO, dK
// += scale * g * Q. delta_i = dout_i . out_i (the combined out). Combine:
// dq = sum_r round_dq + (dk - k (k.dk)) / |q| (dk / 1e-6 when |q| <= 1e-6)
// with dk = sum_r round_dk, dv = sum_r round_dv, rounds in order 0..R-1.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_LSH_CUH
#define ATTNC_CUDA_LSH_CUH

#include "attnc/abi/LshTileModel.h"
#include "attnc/common.cuh"

/// Declares `Type &name` bound to the block's static shared memory. The host
/// emulation of the kernels (test/unit/CudaLshTest.cpp) overrides it.
#ifndef ATTNC_LSH_SHARED
#define ATTNC_LSH_SHARED(Type, name)                                           \
  __shared__ __align__(16) Type name##Storage;                                 \
  Type &name = name##Storage
#endif

namespace attnc {

//===-- Shapes and shared memory ------------------------------------------===//

template <int CHUNK, int D, int BQ, int BKV, int WARPS> struct LshTraits {
  static constexpr int kThreads = WARPS * 32;
  static constexpr int kLd = D + 1;              ///< floats per smem row
  static constexpr int kQLanes = kThreads / BQ;  ///< lanes per query row
  static constexpr int kKLanes = kThreads / BKV; ///< lanes per key row (dK/dV)
  static_assert(CHUNK >= 1 && D >= 1, "shape");
  static_assert(CHUNK % BQ == 0 && CHUNK % BKV == 0, "tiles divide CHUNK");
  static_assert(kThreads <= 1024, "too many warps");
  static_assert(kThreads % BQ == 0 && kThreads % BKV == 0,
                "BQ and BKV divide WARPS * 32");
  static_assert(kQLanes <= 32 && kKLanes <= 32, "BQ, BKV >= WARPS");
  static_assert((kQLanes & (kQLanes - 1)) == 0 &&
                    (kKLanes & (kKLanes - 1)) == 0,
                "lanes per row are a power of two");
  static_assert(tile::lshValidTile(tile::LshTile{BQ, BKV, WARPS}, CHUNK, D),
                "LshTileModel.h rejects this tile");
};

template <int BQ, int BKV, int D> struct LshFwdSmem {
  float q[BQ * (D + 1)];
  float kv[BKV * (D + 1)]; ///< keys, then V rows of the same tile
  float p[BQ * (BKV + 1)];
  int qpos[BQ];
  int kpos[BKV];
};
template <int BQ, int BKV, int D> struct LshDqSmem {
  float q[BQ * (D + 1)];
  float dout[BQ * (D + 1)];
  float k[BKV * (D + 1)];
  float v[BKV * (D + 1)];
  float g[BQ * (BKV + 1)];
  float lse[BQ]; ///< the queries' round_lse of this round
  float delta[BQ];
  int qpos[BQ];
  int kpos[BKV];
};
template <int BQ, int BKV, int D> struct LshDkdvSmem {
  float k[BKV * (D + 1)];
  float v[BKV * (D + 1)];
  float q[BQ * (D + 1)];
  float dout[BQ * (D + 1)];
  float p[BKV * (BQ + 1)];
  float g[BKV * (BQ + 1)];
  float lse[BQ]; ///< the queries' round_lse of this round
  float w[BQ];   ///< their round weights (lshRoundWeight)
  float delta[BQ];
  int qpos[BQ];
  int kpos[BKV];
};
struct LshHashSmem {
  int hist[tile::kLshMaxBuckets];
};
static_assert(sizeof(LshHashSmem) == tile::lshHashSmemBytes(), "hash smem");

//===-- Helpers -----------------------------------------------------------===//

/// Which (b, h, round) a per-round block works on, and the lengths.
struct LshRound {
  int b, h, bh, r, N, Npad, C;
  size_t row0; ///< (bh * R + r) * N: first row of this round's [N, *] slices
};

template <int CHUNK> ATTNC_HD LshRound lshRound(const AttnLshArgs &a, int y) {
  LshRound x;
  x.bh = y / a.rounds;
  x.r = y - x.bh * a.rounds;
  x.b = x.bh / a.H;
  x.h = x.bh - x.b * a.H;
  x.N = a.N;
  x.C = (a.N + CHUNK - 1) / CHUNK;
  x.Npad = x.C * CHUNK;
  x.row0 = (size_t(x.bh) * a.rounds + x.r) * size_t(a.N);
  return x;
}

/// What the variant hooks see.
struct LshCtx {
  const float *params;
  float scale;
  int b, h, H;
  int kvEnd; ///< keys at or past it are padding (N without key padding)
  /// Attention dropout (variants with kDropout; 0: off): the Philox mask
  /// of (maskRow = bh * rounds + r, i, j), as AttnLshArgs documents.
  float dropout;
  unsigned int dropoutOffset;
  unsigned long long dropoutSeed;
  int maskRow;
};

/// The hooks' context of (b, h) in round r.
template <class V> ATTNC_HD LshCtx lshCtx(const AttnLshArgs &a, int b, int h, int r) {
  const int end = mask::keyEnd<V>(a.lengths, b, a.N);
  return LshCtx{a.params,  a.scale,          b,
                h,         a.H,              end,
                a.dropout, a.dropout_offset, a.dropout_seed,
                (b * a.H + h) * a.rounds + r};
}

/// The dropout factor of kept pair (i, j): 1 without dropout, else 0 or
/// 1 / (1 - p) (the CPU kernels' mask).
template <class V> ATTNC_HD float lshDropout(const LshCtx &c, int i, int j) {
  if constexpr (V::kDropout) {
    if (c.dropout > 0.f)
      return philox::attentionDropoutScale(c.dropoutSeed, c.dropoutOffset, c.maskRow, i, j,
                                           c.dropout);
  }
  (void)c, (void)i, (void)j;
  return 1.f;
}

/// Whether query position i keeps key position j (either -1: a pad slot).
template <class V> ATTNC_HD bool lshKept(const LshCtx &c, int i, int j) {
  if (i < 0 || j < 0)
    return false;
  bool k = true;
  if constexpr (V::kCausal)
    k = k && j <= i;
  if constexpr (V::kKeyPadding)
    k = k && j < c.kvEnd;
  if constexpr (V::kHasMask)
    k = k && V::keep(c.b, c.h, i, j, c.params, c.H);
  return k;
}

/// The score of a kept pair from q_i . k_j: the modified score, or the self
/// score for j == i.
template <class V>
ATTNC_HD float lshScore(const LshCtx &c, float qk, int i, int j) {
  if (j == i)
    return kLshSelfScore;
  const float raw = qk * c.scale;
  if constexpr (V::kHasScoreMod)
    return V::score(raw, c.b, c.h, i, j, c.params, c.H);
  else
    return raw;
}

/// Backward of one pair of round r: p = exp(score - lse_ir) * w_ir with
/// this round's lse and weight (lshRoundWeight; exp(score - lse_i) with the
/// combined lse_i in exact arithmetic), and g, the gradient w.r.t. q_i . k_j
/// (ds * dscore/ds * scale; 0 for the self score). Both 0 when the pair is
/// not kept or the round is empty for the row. With attention dropout
/// (factor z), ds = p (z dp - delta) and p comes back as p z, the weight
/// dV takes.
template <class V>
ATTNC_HD void lshPairGrad(const LshCtx &c, float qk, float dp, int i, int j,
                          float lse, float w, float delta, float &p, float &g) {
  p = 0.f;
  g = 0.f;
  if (!lshKept<V>(c, i, j) || lse == negInf())
    return;
  p = expf(lshScore<V>(c, qk, i, j) - lse) * w;
  const float z = lshDropout<V>(c, i, j);
  const float ds = p * (dp * z - delta);
  p *= z;
  if (j == i)
    return;
  float grad = ds;
  if constexpr (V::kHasScoreMod) {
    float d[V::kNumParams > 0 ? V::kNumParams : 1];
    const float dsc =
        V::score_grad(qk * c.scale, c.b, c.h, i, j, c.params, c.H, d);
    // ds == 0 (p == 0 where score() gave -inf): no gradient, whatever the
    // derivative is there (0 * inf = NaN).
    grad = ds != 0.f ? ds * dsc : 0.f;
  }
  g = grad * c.scale;
}

/// Max and sum over the W consecutive lanes holding one row (xor
/// butterflies: every lane gets the same, deterministic value).
template <int W> ATTNC_HD float lshGroupMax(float x) {
#pragma unroll
  for (int m = W / 2; m > 0; m >>= 1)
    x = fmaxf(x, __shfl_xor_sync(kFullMask, x, m));
  return x;
}
template <int W> ATTNC_HD float lshGroupSum(float x) {
#pragma unroll
  for (int m = W / 2; m > 0; m >>= 1)
    x += __shfl_xor_sync(kFullMask, x, m);
  return x;
}

/// The weight of round r in query i's combined softmax, from the forward's
/// per-round lse: w_ir = exp(lse_ir - M_i) / sum_r' exp(lse_ir' - M_i), M_i
/// = max_r' lse_ir' (0 when lse_ir = -inf). So p_ijr = exp(s - lse_ir) w_ir
/// never forms the combined lse_i = M_i + log(sum), which fp32 rounds by up
/// to 2^-8 where M_i ~ -1e5 (rows whose only kept key is their own). Called
/// by all W consecutive lanes holding row i (i < 0: a pad slot, 0); each
/// reads rounds r' = sub (mod W) of roundLse, the (b, h) slice [R, N], and
/// the lanes' partial max and sum meet in xor butterflies (deterministic,
/// the same value in every lane). own = lse_ir.
template <int W>
ATTNC_HD float lshRoundWeight(const float *roundLse, int R, int N, int i,
                              float own, int sub) {
  float m = negInf();
  if (i >= 0)
#pragma unroll 1
    for (int r = sub; r < R; r += W)
      m = fmaxf(m, roundLse[size_t(r) * N + i]);
  m = lshGroupMax<W>(m);
  float s = 0.f;
  if (m != negInf())
#pragma unroll 1
    for (int r = sub; r < R; r += W)
      s += expf(roundLse[size_t(r) * N + i] - m);
  s = lshGroupSum<W>(s);
  return own != negInf() ? expf(own - m) / s : 0.f;
}

template <class S> ATTNC_HD float lshLoad(const S *p) {
  return Elem<S>::toFloat(*p);
}

/// dst[row * (D+1) + d] = src[pos[row] * D + d] (fp32; 0 for pad slots,
/// pos < 0) for row < ROWS. src is a (b, h) slice [N, D].
template <int ROWS, int D, int NT, class S>
ATTNC_HD void lshGather(float *dst, const S *src, const int *pos, int tid) {
  for (int e = tid; e < ROWS * D; e += NT) {
    const int row = e / D, d = e - row * D;
    const int p = pos[row];
    dst[row * (D + 1) + d] = p >= 0 ? lshLoad(src + size_t(p) * D + d) : 0.f;
  }
}

/// |x| of a row of D elements, by one warp (lanes take d == lane mod 32;
/// the same order wherever it is recomputed).
template <int D, class S> ATTNC_HD float lshRowNorm(const S *x, int lane) {
  float s = 0.f;
  for (int d = lane; d < D; d += 32) {
    const float v = lshLoad(x + d);
    s = fmaf(v, v, s);
  }
  return sqrtf(warpSum(s));
}

//===-- Hash and sort -----------------------------------------------------===//

template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS,
          class T, class Variant>
__device__ void lsh_hash(const AttnLshArgs &a) {
  using Tr = LshTraits<CHUNK, D, BQ, BKV, WARPS>;
  constexpr int NT = Tr::kThreads;
  ATTNC_LSH_SHARED(LshHashSmem, sm);
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int r = blockIdx.x, bh = blockIdx.y;
  const int N = a.N, NB = a.num_buckets, half = NB / 2;
  const int Npad = tile::lshPaddedLength(N, CHUNK);
  const T *q = static_cast<const T *>(a.q) + size_t(bh) * N * D;
  int *buckets = a.buckets + (size_t(bh) * a.rounds + r) * N;
  int *perm = a.perm + (size_t(bh) * a.rounds + r) * Npad;

  if (r == 0) { // keys, a warp per position
    float *keys = a.keys + size_t(bh) * N * D;
    for (int j = warp; j < N; j += WARPS) {
      const float inv =
          1.f / fmaxf(lshRowNorm<D>(q + size_t(j) * D, lane), kSharedQkNormFloor);
      for (int d = lane; d < D; d += 32)
        keys[size_t(j) * D + d] = lshLoad(q + size_t(j) * D + d) * inv;
    }
  }

  if (NB < 2 || NB % 2 != 0 || NB > tile::kLshMaxBuckets) {
    // Unsupported bucket count (the compiler rejects it): nothing attends.
    for (int j = tid; j < N; j += NT)
      buckets[j] = -1;
    for (int t = tid; t < Npad; t += NT)
      perm[t] = -1;
    return;
  }

  for (int k = tid; k < NB; k += NT)
    sm.hist[k] = 0;
  __syncthreads();

  // Buckets, 8 rotation columns at a time.
  const float *rot = a.rotations + size_t(r) * D * half;
  for (int j = tid; j < N; j += NT) {
    const T *x = q + size_t(j) * D;
    float bestPos = negInf(), bestNeg = negInf();
    int argPos = 0, argNeg = 0;
    for (int k0 = 0; k0 < half; k0 += 8) {
      float y[8];
#pragma unroll
      for (int u = 0; u < 8; ++u)
        y[u] = 0.f;
      for (int d = 0; d < D; ++d) {
        const float xd = lshLoad(x + d);
        const float *rd = rot + size_t(d) * half + k0;
#pragma unroll
        for (int u = 0; u < 8; ++u)
          if (k0 + u < half)
            y[u] = fmaf(xd, rd[u], y[u]);
      }
#pragma unroll
      for (int u = 0; u < 8; ++u) {
        if (k0 + u < half) {
          if (y[u] > bestPos) {
            bestPos = y[u];
            argPos = k0 + u;
          }
          if (-y[u] > bestNeg) {
            bestNeg = -y[u];
            argNeg = k0 + u;
          }
        }
      }
    }
    // [y; -y]: the positive half comes first, so it wins ties.
    const int bk = bestPos >= bestNeg ? argPos : half + argNeg;
    buckets[j] = bk;
    atomicAdd(&sm.hist[bk], 1);
  }
  __syncthreads();

  // Exclusive offsets: warp 0, a contiguous segment per lane.
  if (warp == 0) {
    const int seg = (NB + 31) / 32, lo = imin(NB, lane * seg),
              hi = imin(NB, lo + seg);
    int sum = 0;
    for (int k = lo; k < hi; ++k)
      sum += sm.hist[k];
    int incl = sum;
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
      const int y = __shfl_up_sync(kFullMask, incl, off);
      if (lane >= off)
        incl += y;
    }
    int run = incl - sum;
    for (int k = lo; k < hi; ++k) {
      const int c = sm.hist[k];
      sm.hist[k] = run;
      run += c;
    }
  }
  __syncthreads();

  // Stable scatter: tiles of NT positions in order, warps in order.
  for (int base = 0; base < N; base += NT) {
    const int j = base + tid;
    const bool valid = j < N;
    const int bk = valid ? buckets[j] : -1; // written by this thread
    const unsigned peers = __match_any_sync(kFullMask, bk);
    const int rank = __popc(peers & ((1u << lane) - 1u));
    for (int w = 0; w < WARPS; ++w) {
      int slot = 0;
      if (warp == w && valid)
        slot = sm.hist[bk] + rank;
      __syncwarp();
      if (warp == w && valid) {
        perm[slot] = j;
        if (rank == 0)
          sm.hist[bk] += __popc(peers);
      }
      __syncthreads();
    }
  }
  for (int t = N + tid; t < Npad; t += NT)
    perm[t] = -1;
}

//===-- Forward -----------------------------------------------------------===//

template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS,
          class T, class Variant>
__device__ void lsh_fwd(const AttnLshArgs &a) {
  using Tr = LshTraits<CHUNK, D, BQ, BKV, WARPS>;
  using Smem = LshFwdSmem<BQ, BKV, D>;
  static_assert(sizeof(Smem) == tile::lshFwdSmemBytes(BQ, BKV, D), "layout");
  constexpr int NT = Tr::kThreads, LD = Tr::kLd, TPR = Tr::kQLanes;
  constexpr int KPT = (BKV + TPR - 1) / TPR, CPT = (D + TPR - 1) / TPR;
  ATTNC_LSH_SHARED(Smem, sm);

  const int tid = threadIdx.x, row = tid / TPR, sub = tid % TPR;
  const LshRound rd = lshRound<CHUNK>(a, blockIdx.y);
  const int t0 = blockIdx.x * BQ;
  if (t0 >= rd.N) // only pad slots
    return;
  const int c = t0 / CHUNK;
  const int ks = imax(0, c - BEFORE) * CHUNK;
  const int ke = (imin(rd.C - 1, c + AFTER) + 1) * CHUNK;
  const int *perm = a.perm + (size_t(rd.bh) * a.rounds + rd.r) * rd.Npad;
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
template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS,
          class T, class Variant>
__device__ void lsh_combine(const AttnLshArgs &a) {
  (void)LshTraits<CHUNK, D, BQ, BKV, WARPS>::kThreads;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int bh = blockIdx.y, R = a.rounds, N = a.N;
  const int i0 = blockIdx.x * tile::kLshRowsPerBlock;
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

//===-- Backward ----------------------------------------------------------===//

/// delta_i = sum_d dout_id out_id.
template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS,
          class T, class Variant>
__device__ void lsh_bwd_preprocess(const AttnLshArgs &a) {
  (void)LshTraits<CHUNK, D, BQ, BKV, WARPS>::kThreads;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int bh = blockIdx.y, N = a.N;
  const int i0 = blockIdx.x * tile::kLshRowsPerBlock;
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
template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS,
          class T, class Variant>
__device__ void lsh_bwd_dq(const AttnLshArgs &a) {
  using Tr = LshTraits<CHUNK, D, BQ, BKV, WARPS>;
  using Smem = LshDqSmem<BQ, BKV, D>;
  static_assert(sizeof(Smem) == tile::lshBwdDqSmemBytes(BQ, BKV, D), "layout");
  constexpr int NT = Tr::kThreads, LD = Tr::kLd, TPR = Tr::kQLanes;
  constexpr int KPT = (BKV + TPR - 1) / TPR, CPT = (D + TPR - 1) / TPR;
  ATTNC_LSH_SHARED(Smem, sm);

  const int tid = threadIdx.x, row = tid / TPR, sub = tid % TPR;
  const LshRound rd = lshRound<CHUNK>(a, blockIdx.y);
  const int t0 = blockIdx.x * BQ;
  if (t0 >= rd.N)
    return;
  const int c = t0 / CHUNK;
  const int ks = imax(0, c - BEFORE) * CHUNK;
  const int ke = (imin(rd.C - 1, c + AFTER) + 1) * CHUNK;
  const int *perm = a.perm + (size_t(rd.bh) * a.rounds + rd.r) * rd.Npad;
  const size_t slice = size_t(rd.bh) * rd.N;
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
        lshPairGrad<Variant>(ctx, s[n], dp[n], i, sm.kpos[kk], lse, w, delta, p,
                             g);
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
template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS,
          class T, class Variant>
__device__ void lsh_bwd_dkdv(const AttnLshArgs &a) {
  using Tr = LshTraits<CHUNK, D, BQ, BKV, WARPS>;
  using Smem = LshDkdvSmem<BQ, BKV, D>;
  static_assert(sizeof(Smem) == tile::lshBwdDkdvSmemBytes(BQ, BKV, D),
                "layout");
  constexpr int NT = Tr::kThreads, LD = Tr::kLd, TPK = Tr::kKLanes;
  constexpr int TPQ = Tr::kQLanes; // lanes per query for the round weights
  constexpr int QPT = (BQ + TPK - 1) / TPK, CPT = (D + TPK - 1) / TPK;
  ATTNC_LSH_SHARED(Smem, sm);

  const int tid = threadIdx.x, row = tid / TPK, sub = tid % TPK;
  const LshRound rd = lshRound<CHUNK>(a, blockIdx.y);
  const int t0 = blockIdx.x * BKV;
  if (t0 >= rd.N)
    return;
  const int c = t0 / CHUNK; // the queries of chunks c-AFTER..c+BEFORE see it
  const int qs = imax(0, c - AFTER) * CHUNK;
  const int qe = (imin(rd.C - 1, c + BEFORE) + 1) * CHUNK;
  const int *perm = a.perm + (size_t(rd.bh) * a.rounds + rd.r) * rd.Npad;
  const size_t slice = size_t(rd.bh) * rd.N;
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
      const float w =
          lshRoundWeight<TPQ>(a.round_lse + slice * a.rounds, a.rounds, rd.N,
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
        lshPairGrad<Variant>(ctx, s[n], dp[n], sm.qpos[qq], j, sm.lse[qq],
                             sm.w[qq], sm.delta[qq], p, g);
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
template <int CHUNK, int BEFORE, int AFTER, int D, int BQ, int BKV, int WARPS,
          class T, class Variant>
__device__ void lsh_bwd_combine(const AttnLshArgs &a) {
  (void)LshTraits<CHUNK, D, BQ, BKV, WARPS>::kThreads;
  constexpr int DPL = (D + 31) / 32; // elements per lane
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int bh = blockIdx.y, R = a.rounds, N = a.N;
  const int i0 = blockIdx.x * tile::kLshRowsPerBlock;
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
    const bool big = nrm > kSharedQkNormFloor;
    const float inv = 1.f / (big ? nrm : kSharedQkNormFloor);
    T *gdq = static_cast<T *>(a.dq) + row * D;
    T *gdv = static_cast<T *>(a.dv) + row * D;
#pragma unroll
    for (int u = 0; u < DPL; ++u) {
      const int d = lane + 32 * u;
      if (D % 32 == 0 || d < D) {
        const float proj = big ? dk[u] - key[d] * kdk : dk[u];
        gdq[d] = Elem<T>::fromFloat(dq[u] + proj * inv);
        gdv[d] = Elem<T>::fromFloat(dv[u]);
      }
    }
  }
}

} // namespace attnc

#endif // ATTNC_CUDA_LSH_CUH
