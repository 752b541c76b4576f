//===- lsh_common.cuh - LSH attention: shapes and shared helpers -------------===//
//
// What the LSH kernels share (lsh.cuh describes them): tile traits and
// static shared memory, the round and hook contexts, the masks, scores and
// dropout of a (query, key) pair, warp-group reductions and row gathers.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_LSH_COMMON_CUH
#define ATTNC_CUDA_LSH_COMMON_CUH

#include "attnc/abi/LshTileModel.h"
#include "attnc/common.cuh"
#include "attnc/common/lsh_pair.h"

/// Declares `Type &name` bound to the block's static shared memory. The host
/// emulation of the kernels (test/unit/kernels/CudaLshTest.cpp) overrides it.
#ifndef ATTNC_LSH_SHARED
#define ATTNC_LSH_SHARED(Type, name)                                                               \
  __shared__ __align__(16) Type name##Storage;                                                     \
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
  static_assert(kThreads % BQ == 0 && kThreads % BKV == 0, "BQ and BKV divide WARPS * 32");
  static_assert(kQLanes <= 32 && kKLanes <= 32, "BQ, BKV >= WARPS");
  static_assert((kQLanes & (kQLanes - 1)) == 0 && (kKLanes & (kKLanes - 1)) == 0,
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
/// lsh_hash: the histogram, then chunks of the tile's q (fp32) and of the
/// rotations.
template <int NT> struct LshHashBlockSmem {
  int hist[tile::kLshMaxBuckets];
  float q[NT * tile::kLshHashDepth];
  float rot[tile::kLshHashDepth * tile::kLshHashCols];
};
/// lsh_sort_offsets: each warp's total, for the block's scan.
struct LshScanSmem {
  int warpSums[32];
};
static_assert(sizeof(LshScanSmem) == tile::lshScanSmemBytes(), "scan smem");

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

/// This block's tile and row (bh * rounds + r) in a per-round kernel's
/// grid of `slotsPerTile`-slot tiles over the padded length, and in a
/// per-position kernel's grid of kLshRowsPerBlock positions per (b, h)
/// (grids: LshTileModel.h).
template <int CHUNK>
ATTNC_HD tile::GridBlock lshRoundBlock(const AttnLshArgs &a, int slotsPerTile) {
  return tile::gridBlock(blockIdx.x,
                         tile::gridTiles(tile::lshPaddedLength(a.N, CHUNK), slotsPerTile));
}
ATTNC_HD tile::GridBlock lshRowBlock(const AttnLshArgs &a) {
  return tile::gridBlock(blockIdx.x, tile::gridTiles(a.N, tile::kLshRowsPerBlock));
}

/// A per-round kernel's block: `slots` sorted slots of one round from t0
/// (in chunk t0 / CHUNK), and the slots [lo, hi) of the chunks BACK before
/// to AHEAD after it that they pair with: the forward and dQ pass BEFORE,
/// AFTER (their keys), dK/dV AFTER, BEFORE (the queries that see its keys).
/// `empty`: the block holds only pad slots.
struct LshBlock {
  LshRound rd;
  int t0, lo, hi;
  const int *perm; ///< this round's sorted positions [Npad]
  size_t slice;    ///< bh * N: the (b, h) slice's first position
  bool empty;
};
template <int CHUNK, int BACK, int AHEAD>
ATTNC_HD LshBlock lshBlock(const AttnLshArgs &a, int slots) {
  LshBlock k;
  const tile::GridBlock blk = lshRoundBlock<CHUNK>(a, slots);
  k.rd = lshRound<CHUNK>(a, blk.row);
  k.t0 = blk.tile * slots;
  k.empty = k.t0 >= k.rd.N;
  const int c = k.t0 / CHUNK;
  k.lo = imax(0, c - BACK) * CHUNK;
  k.hi = (imin(k.rd.C - 1, c + AHEAD) + 1) * CHUNK;
  k.perm = a.perm + (size_t(k.rd.bh) * a.rounds + k.rd.r) * k.rd.Npad;
  k.slice = size_t(k.rd.bh) * k.rd.N;
  return k;
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
  return LshCtx{a.params,
                a.scale,
                b,
                h,
                a.H,
                end,
                a.dropout,
                a.dropout_offset,
                a.dropout_seed,
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
/// (attnc/common/lsh_pair.h, which the CPU kernels share.)
template <class V> ATTNC_HD bool lshKept(const LshCtx &c, int i, int j) {
  return lsh::pairKept<V>(i, j, c.kvEnd, c.b, c.h, c.params, c.H);
}

/// The score of a kept pair from q_i . k_j: the modified score, or the self
/// score for j == i (attnc/common/lsh_pair.h).
template <class V> ATTNC_HD float lshScore(const LshCtx &c, float qk, int i, int j) {
  return lsh::pairScore<V>(qk * c.scale, i, j, c.b, c.h, c.params, c.H);
}

/// Backward of one pair of round r: p = exp(score - lse_ir) * w_ir with
/// this round's lse and weight (lshRoundWeight; exp(score - lse_i) with the
/// combined lse_i in exact arithmetic), and g, the gradient w.r.t. q_i . k_j
/// (ds * dscore/ds * scale; 0 for the self score). Both 0 when the pair is
/// not kept or the round is empty for the row. With attention dropout
/// (factor z), ds = p (z dp - delta) and p comes back as p z, the weight
/// dV takes.
template <class V>
ATTNC_HD void lshPairGrad(const LshCtx &c, float qk, float dp, int i, int j, float lse, float w,
                          float delta, float &p, float &g) {
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
    const float dsc = V::score_grad(qk * c.scale, c.b, c.h, i, j, c.params, c.H, d);
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
ATTNC_HD float lshRoundWeight(const float *roundLse, int R, int N, int i, float own, int sub) {
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

template <class S> ATTNC_HD float lshLoad(const S *p) { return Elem<S>::toFloat(*p); }

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

} // namespace attnc

#endif // ATTNC_CUDA_LSH_COMMON_CUH
