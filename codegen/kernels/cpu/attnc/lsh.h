//===- lsh.h - LSH attention (Reformer, shared QK) on the CPU ---*- C++ -*-===//
//
// Forward and backward of LSH attention, fp32, semantics fixed by
// docs/kernels.md "LSH kernels (Reformer)":
//
//   template <int CHUNK, int BEFORE, int AFTER, int D, class Variant>
//   int attnc::cpu::lsh_fwd(const attnc::AttnLshArgs &a);   // out, lse, round_lse
//   template <int CHUNK, int BEFORE, int AFTER, int D, class Variant>
//   int attnc::cpu::lsh_bwd(const attnc::AttnLshArgs &a);   // dq, dv
//
// Both return 0 or a Status code (null pointer; bad size: B, H, N < 1,
// rounds < 1, num_buckets odd or < 2; workspace allocation failure). They
// allocate their own workspaces (about 2·B·H·rounds·N ints for buckets and
// permutation, 3·B·H·N floats, per-thread tiles, and B·H·N·D floats for dk in
// the backward; no per-round copies of the output) and ignore the workspace
// pointers of AttnLshArgs (buckets, perm, keys, round_out, round_d*,
// delta). round_lse ([B, H, rounds, N]) is caller-allocated: the forward
// writes it (when given) and the backward needs it.
//
// Phases (barriers of one OpenMP parallel region):
//   1. den_j = max(|q_j|, 1e-6)                               (per row)
//   2. buckets: y = q·R_r with the tile GEMM (every y a sum over d = 0..D-1
//      in order), argmax over [y; -y], first index on ties
//                                       (per (b, h, r, block of 64 rows))
//   3. stable counting sort per (b, h, r): histogram, prefix sum, scatter.
//   Forward, then round by round (r = 0..R-1), one task per (b, h, chunk):
//   4. gather the window's q and v rows into contiguous blocks (the chunk's
//      own queries are part of its window), keys k = q / den, Sᵀ = K_w·Qᵀ,
//      masks, the softmax statistics over the whole window, O = P·V_w; then
//      fold the round into out with a running maximum and sum (the online
//      softmax across rounds: out = Σ_r exp(lse_r − lse)·o_r, accumulated in
//      round order, without rounding lse first)
//   5. out /= sum, lse = max + log(sum).
//   Backward, after delta = rowsum(dout·out) and the round weights
//   w_r = softmax_r(round_lse) (p = exp(s − lse_r)·w_r never forms the
//   fp32-rounded combined lse), round by round, one parallel
//   loop with two kinds of task: a dq task per query chunk (dq_i += scale·
//   g·k_j over the chunk's window) and a dk/dv task per key chunk (the
//   queries that see key chunk c' are in chunks c'-AFTER..c'+BEFORE):
//   dk_j += scale·g·q_i, dv_j += p·dout_i; finally dq_j += the
//   normalisation backward of dk_j.
// Within a round each query (key) position is in exactly one chunk, so every
// row is updated by one task per round, and rounds run in order: no atomics,
// results bit-identical across runs and thread counts.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CPU_LSH_H
#define ATTNC_CPU_LSH_H

#include "common.h"

namespace attnc {
namespace cpu ATTNC_CPU_NAMESPACE_ATTR {

namespace lsh_detail {

constexpr int kHashRows = 64;       ///< rows of one hashing task

/// A 64-byte aligned int buffer (no exceptions: check the result of reset).
class IntBuffer {
public:
  IntBuffer() = default;
  ~IntBuffer() { std::free(p_); }
  IntBuffer(const IntBuffer &) = delete;
  IntBuffer &operator=(const IntBuffer &) = delete;
  bool reset(std::size_t n) {
    std::free(p_);
    std::size_t bytes = std::max<std::size_t>(n, 1) * sizeof(int);
    bytes = (bytes + 63) / 64 * 64;
    p_ = static_cast<int *>(std::aligned_alloc(64, bytes));
    return p_ != nullptr;
  }
  int *data() const { return p_; }

private:
  int *p_ = nullptr;
};

inline int maxThreads() {
#ifdef _OPENMP
  return std::max(1, omp_get_max_threads());
#else
  return 1;
#endif
}

inline int threadNum() {
#ifdef _OPENMP
  return omp_get_thread_num();
#else
  return 0;
#endif
}

/// Compile-time tile shapes.
template <int CHUNK, int BEFORE, int AFTER, int D> struct Cfg {
  static_assert(CHUNK > 0 && BEFORE >= 0 && AFTER >= 0 && D > 0, "bad LSH configuration");
  static constexpr int kWin = (BEFORE + AFTER + 1) * CHUNK; ///< slots of a window
  static constexpr int kBQ = CHUNK < 64 ? CHUNK : 64;       ///< query sub-block (fwd, dq)
  static constexpr int kBI = kWin < 64 ? kWin : 64;         ///< query sub-block (dk/dv)
};

/// Per-thread float workspace of a forward task.
template <int CHUNK, int BEFORE, int AFTER, int D> struct FwdLayout {
  using C = Cfg<CHUNK, BEFORE, AFTER, D>;
  static constexpr std::size_t kK = 0;                                   // [kWin][D] keys
  static constexpr std::size_t kV = kK + std::size_t(C::kWin) * D;       // [kWin][D]
  static constexpr std::size_t kQc = kV + std::size_t(C::kWin) * D;      // [CHUNK][D] queries
  static constexpr std::size_t kQt = kQc + std::size_t(CHUNK) * D;       // [D][kBQ]
  static constexpr std::size_t kSt = kQt + std::size_t(D) * C::kBQ;      // [kWin][kBQ]
  static constexpr std::size_t kO = kSt + std::size_t(C::kWin) * C::kBQ; // [kBQ][D]
  static constexpr std::size_t kM = kO + std::size_t(C::kBQ) * D;        // [kBQ] max
  static constexpr std::size_t kMUse = kM + C::kBQ;                      // [kBQ]
  static constexpr std::size_t kL = kMUse + C::kBQ;                      // [kBQ] sum
  static constexpr std::size_t kTotal = kL + C::kBQ;
  static constexpr std::size_t kInts = std::size_t(C::kWin) + C::kBQ; // key, query positions
};

/// Per-thread float workspace of the backward tasks (the two kinds overlay).
template <int CHUNK, int BEFORE, int AFTER, int D> struct BwdLayout {
  using C = Cfg<CHUNK, BEFORE, AFTER, D>;
  // dq task
  static constexpr std::size_t kK = 0;                                     // [kWin][D] keys
  static constexpr std::size_t kV = kK + std::size_t(C::kWin) * D;         // [kWin][D]
  static constexpr std::size_t kQc = kV + std::size_t(C::kWin) * D;        // [CHUNK][D]
  static constexpr std::size_t kDOc = kQc + std::size_t(CHUNK) * D;        // [CHUNK][D]
  static constexpr std::size_t kQt = kDOc + std::size_t(CHUNK) * D;        // [D][kBQ]
  static constexpr std::size_t kDOt = kQt + std::size_t(D) * C::kBQ;       // [D][kBQ]
  static constexpr std::size_t kSt = kDOt + std::size_t(D) * C::kBQ;       // [kWin][kBQ]
  static constexpr std::size_t kDPt = kSt + std::size_t(C::kWin) * C::kBQ; // [kWin][kBQ]
  static constexpr std::size_t kDQ = kDPt + std::size_t(C::kWin) * C::kBQ; // [kBQ][D]
  static constexpr std::size_t kLse = kDQ + std::size_t(C::kBQ) * D;       // [kBQ]
  static constexpr std::size_t kDelta = kLse + C::kBQ;                     // [kBQ]
  static constexpr std::size_t kDqTotal = kDelta + C::kBQ;
  // dk/dv task
  static constexpr std::size_t kKt = 0;                                   // [D][CHUNK] keys
  static constexpr std::size_t kVt = kKt + std::size_t(D) * CHUNK;        // [D][CHUNK]
  static constexpr std::size_t kQw = kVt + std::size_t(D) * CHUNK;        // [kWin][D]
  static constexpr std::size_t kDOw = kQw + std::size_t(C::kWin) * D;     // [kWin][D]
  static constexpr std::size_t kS = kDOw + std::size_t(C::kWin) * D;      // [kBI][CHUNK]
  static constexpr std::size_t kDP = kS + std::size_t(C::kBI) * CHUNK;    // [kBI][CHUNK]
  static constexpr std::size_t kDK = kDP + std::size_t(C::kBI) * CHUNK;   // [CHUNK][D]
  static constexpr std::size_t kDV = kDK + std::size_t(CHUNK) * D;        // [CHUNK][D]
  static constexpr std::size_t kVc = kDV + std::size_t(CHUNK) * D;        // [CHUNK][D]
  static constexpr std::size_t kLseW = kVc + std::size_t(CHUNK) * D;      // [kWin]
  static constexpr std::size_t kDeltaW = kLseW + C::kWin;                 // [kWin]
  static constexpr std::size_t kDkdvTotal = kDeltaW + C::kWin;
  static constexpr std::size_t kTotal = kDqTotal > kDkdvTotal ? kDqTotal : kDkdvTotal;
  static constexpr std::size_t kInts = 2 * std::size_t(C::kWin) + C::kBQ;
};

/// Argument checks shared by the forward and the backward.
template <class Variant> inline int checkArgs(const AttnLshArgs &a) {
  if (!a.q || !a.v || !a.out || !a.lse || !a.rotations)
    return kErrNullPointer;
  if (a.B <= 0 || a.H <= 0 || a.N <= 0 || a.rounds <= 0 || a.num_buckets < 2 ||
      a.num_buckets % 2 != 0)
    return kErrBadSize;
  if (Variant::kKeyPadding && !a.lengths)
    return kErrNullPointer;
  if (Variant::kNumParams > 0 && !a.params)
    return kErrNullPointer;
  return kOk;
}

/// The state both directions share: key denominators, buckets, permutation,
/// and the per-thread workspaces.
struct Common {
  AlignedBuffer den;   // [B, H, N]: max(|q|, 1e-6)
  IntBuffer buckets;   // [B, H, R, N]
  IntBuffer perm;      // [B, H, R, Npad]: positions by slot, -1 in pad slots
  AlignedBuffer ws;    // per-thread float workspaces
  IntBuffer iws;       // per-thread int workspaces
  std::size_t wsFloats = 0, wsInts = 0;
  int nth = 1; // threads the workspaces are sized for
  int B = 0, H = 0, N = 0, R = 0, NB = 0, Npad = 0, C = 0;
  float *threadWs() const { return ws.data() + wsFloats * threadNum(); }
  int *threadIws() const { return iws.data() + wsInts * threadNum(); }
};

/// Allocates everything up front (the parallel regions cannot fail), with
/// per-thread workspaces of at least `floats` floats and `ints` ints.
inline bool allocCommon(Common &c, const AttnLshArgs &a, int chunk, std::size_t floats,
                        std::size_t ints) {
  c.B = a.B;
  c.H = a.H;
  c.N = a.N;
  c.R = a.rounds;
  c.NB = a.num_buckets;
  c.C = ceilDiv(a.N, chunk);
  c.Npad = c.C * chunk;
  const std::size_t bh = std::size_t(a.B) * a.H;
  // + 16: keep the threads' slices on separate cache lines.
  c.wsFloats = std::max(floats, std::size_t(kHashRows) * (c.NB / 2)) + 16;
  c.wsInts = std::max(ints, std::size_t(c.NB)) + 16;
  c.nth = maxThreads();
  return c.den.reset(bh * a.N) && c.buckets.reset(bh * a.rounds * a.N) &&
         c.perm.reset(bh * a.rounds * c.Npad) && c.ws.reset(c.wsFloats * c.nth) &&
         c.iws.reset(c.wsInts * c.nth);
}

/// Phase 1: den = max(|q|, 1e-6) of every row. Inside a parallel region.
template <int D> inline void normPhase(const Common &c, const float *q) {
  const long long rows = static_cast<long long>(c.B) * c.H * c.N;
#ifdef _OPENMP
#pragma omp for schedule(static)
#endif
  for (long long r = 0; r < rows; ++r) {
    const float *src = q + std::size_t(r) * D;
    const float n = std::sqrt(dotN<D>(src, src));
    c.den.data()[r] = n > kSharedQkNormFloor ? n : kSharedQkNormFloor;
  }
}

/// argmax over [y; -y] (2·n values), the first index on ties: the maximum
/// first (lane-split, branch-free), then the first index that attains it.
inline int argmaxPlusMinus(const float *ATTNC_RESTRICT y, int n) {
  float lane[kLanes];
  for (int l = 0; l < kLanes; ++l)
    lane[l] = y[0];
  const int n1 = n / kLanes * kLanes;
  for (int k = 0; k < n1; k += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      const float a = y[k + l] > -y[k + l] ? y[k + l] : -y[k + l];
      lane[l] = a > lane[l] ? a : lane[l];
    }
  float mx = y[0];
  for (int l = 0; l < kLanes; ++l)
    mx = lane[l] > mx ? lane[l] : mx;
  for (int k = n1; k < n; ++k) {
    const float a = y[k] > -y[k] ? y[k] : -y[k];
    mx = a > mx ? a : mx;
  }
  for (int k = 0; k < n; ++k)
    if (y[k] == mx)
      return k;
  for (int k = 0; k < n; ++k)
    if (-y[k] == mx)
      return n + k;
  return 0; // NaN inputs
}

/// Phase 2: buckets, one task per (b, h, r, block of kHashRows rows).
template <int D> inline void hashPhase(const Common &c, const float *q, const float *rotations) {
  const int N = c.N, R = c.R, NB2 = c.NB / 2;
  const int nBlk = ceilDiv(N, kHashRows);
  const long long tasks = static_cast<long long>(c.B) * c.H * R * nBlk;
  float *ATTNC_RESTRICT Y = c.threadWs(); // [kHashRows][NB2]
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
  for (long long t = 0; t < tasks; ++t) {
    const int blk = static_cast<int>(t % nBlk);
    const long long bhr = t / nBlk; // (b·H + h)·R + r
    const int r = static_cast<int>(bhr % R);
    const long long bh = bhr / R;
    const int row0 = blk * kHashRows;
    const int rows = std::min(kHashRows, N - row0);
    const float *qb = q + (std::size_t(bh) * N + row0) * D;
    const float *rot = rotations + std::size_t(r) * D * NB2;
    gemm<false>(rows, NB2, D, qb, D, 1, rot, NB2, Y, NB2); // y = q·R_r, d in order
    int *bk = c.buckets.data() + std::size_t(bhr) * N + row0;
    for (int i = 0; i < rows; ++i)
      bk[i] = argmaxPlusMinus(Y + std::size_t(i) * NB2, NB2);
  }
}

/// Phase 3: stable counting sort per (b, h, r).
inline void sortPhase(const Common &c) {
  const int N = c.N, NB = c.NB, Npad = c.Npad;
  const long long tasks = static_cast<long long>(c.B) * c.H * c.R;
  int *ATTNC_RESTRICT hist = c.threadIws(); // [NB]
#ifdef _OPENMP
#pragma omp for schedule(dynamic, 1)
#endif
  for (long long t = 0; t < tasks; ++t) {
    const int *bk = c.buckets.data() + std::size_t(t) * N;
    int *perm = c.perm.data() + std::size_t(t) * Npad;
    for (int k = 0; k < NB; ++k)
      hist[k] = 0;
    for (int n = 0; n < N; ++n)
      ++hist[bk[n]];
    int off = 0;
    for (int k = 0; k < NB; ++k) {
      const int cnt = hist[k];
      hist[k] = off;
      off += cnt;
    }
    for (int n = 0; n < N; ++n)
      perm[hist[bk[n]]++] = n;
    for (int s = N; s < Npad; ++s)
      perm[s] = -1;
  }
}

/// dst[j] = row pos[j] of src (a [N][D] slice), zeros where pos[j] < 0, for
/// j < n. The rows are scattered (sorted by bucket): prefetch a few ahead so
/// that several cache misses are in flight.
template <int D>
ATTNC_ALWAYS_INLINE void gatherRows(float *ATTNC_RESTRICT dst, const float *ATTNC_RESTRICT src,
                                    const int *pos, int n) {
#if defined(__GNUC__) || defined(__clang__)
  constexpr int kAhead = 8;
  constexpr int kLines = (D * int(sizeof(float)) + 63) / 64;
  for (int j = 0; j < std::min(n, kAhead); ++j)
    if (pos[j] >= 0)
      for (int l = 0; l < kLines; ++l)
        __builtin_prefetch(src + std::size_t(pos[j]) * D + l * 16);
#endif
  for (int j = 0; j < n; ++j) {
#if defined(__GNUC__) || defined(__clang__)
    if (j + kAhead < n && pos[j + kAhead] >= 0)
      for (int l = 0; l < kLines; ++l)
        __builtin_prefetch(src + std::size_t(pos[j + kAhead]) * D + l * 16);
#endif
    float *d = dst + std::size_t(j) * D;
    if (pos[j] >= 0)
      std::memcpy(d, src + std::size_t(pos[j]) * D, D * sizeof(float));
    else
      zeroFloats(d, D);
  }
}

/// Prefetches (for writing) the rows pos[0..n) of a [N][D] slice.
template <int D> ATTNC_ALWAYS_INLINE void prefetchRows(float *base, const int *pos, int n) {
#if defined(__GNUC__) || defined(__clang__)
  constexpr int kLines = (D * int(sizeof(float)) + 63) / 64;
  for (int j = 0; j < n; ++j)
    if (pos[j] >= 0)
      for (int l = 0; l < kLines; ++l)
        __builtin_prefetch(base + std::size_t(pos[j]) * D + l * 16, 1);
#else
  (void)base, (void)pos, (void)n;
#endif
}

/// Keys of gathered rows in place: row j /= den[pos[j]] (pad rows are 0).
template <int D>
ATTNC_ALWAYS_INLINE void normaliseRows(float *ATTNC_RESTRICT rows, const float *den,
                                       const int *pos, int n) {
  for (int j = 0; j < n; ++j)
    if (pos[j] >= 0) {
      float *ATTNC_RESTRICT r = rows + std::size_t(j) * D;
      const float dj = den[pos[j]];
      for (int d = 0; d < D; ++d)
        r[d] = r[d] / dj;
    }
}

/// The window of chunk c: slots [w0, w0 + nw).
template <int CHUNK, int BEFORE, int AFTER>
ATTNC_ALWAYS_INLINE void windowOf(int c, int C, int &w0, int &nw) {
  const int c0 = std::max(0, c - BEFORE), c1 = std::min(C - 1, c + AFTER);
  w0 = c0 * CHUNK;
  nw = (c1 - c0 + 1) * CHUNK;
}

/// The attention dropout factor of (query qi, key kj) in round r of head
/// row bh: 1 without dropout, else 0 or 1 / (1 − p) (AttnLshArgs).
template <class Variant>
inline float lshDropout(const AttnLshArgs &a, std::size_t bh, int r, int qi, int kj) {
  if constexpr (Variant::kDropout) {
    if (a.dropout > 0.0f)
      return philox::attentionDropoutScale(a.dropout_seed, a.dropout_offset,
                                           int(bh) * a.rounds + r, qi, kj, a.dropout);
  }
  (void)a, (void)bh, (void)r, (void)qi, (void)kj;
  return 1.0f;
}

/// Forward of one (b, h, chunk) in round r: the chunk's queries attend to
/// their window; the round is folded into out (running sum), mRun, lRun
/// (running maximum and sum).
template <int CHUNK, int BEFORE, int AFTER, int D, class Variant>
inline void fwdChunk(const AttnLshArgs &a, const Common &cm, float *mRun, float *lRun, int b,
                     int h, int r, int c) {
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
    gemm<false>(nw, BQ, D, Kw, D, 1, Qt, BQ, St, BQ); // Sᵀ = K_w·Qᵀ

    for (int i = 0; i < BQ; ++i)
      m[i] = kNegInf;
    for (int j = 0; j < nw; ++j) {
      float *ATTNC_RESTRICT row = St + std::size_t(j) * BQ;
      const int kj = kpos[j];
      const bool keyOk = kj >= 0;
      for (int i = 0; i < BQ; ++i) {
        const int qi = qpos[i];
        float s = scale * row[i];
        bool kept = keyOk && qi >= 0;
        if constexpr (Variant::kCausal)
          kept = kept && kj <= qi;
        if constexpr (Variant::kHasScoreMod)
          s = kept ? Variant::score(s, b, h, qi, kj, params, H) : 0.0f;
        if constexpr (Variant::kHasMask)
          kept = kept && Variant::keep(b, h, qi, kj, params, H);
        s = kj == qi ? kLshSelfScore : s;
        s = kept ? s : kNegInf;
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

/// Backward, dq of one (b, h, query chunk) in round r (queries' path).
template <int CHUNK, int BEFORE, int AFTER, int D, class Variant>
inline void bwdDqChunk(const AttnLshArgs &a, const Common &cm, const float *delta,
                       const float *rw, int b, int h, int r, int c) {
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
      const bool keyOk = kj >= 0;
      for (int i = 0; i < BQ; ++i) {
        const int qi = qpos[i];
        const float s = scale * srow[i];
        bool kept = keyOk && lseL[i] != kNegInf; // a finite lse implies qi >= 0
        if constexpr (Variant::kCausal)
          kept = kept && kj <= qi;
        float sm = s;
        if constexpr (Variant::kHasScoreMod)
          sm = kept ? Variant::score(s, b, h, qi, kj, params, H) : 0.0f;
        if constexpr (Variant::kHasMask)
          kept = kept && Variant::keep(b, h, qi, kj, params, H);
        const bool self = kj == qi;
        sm = self ? kLshSelfScore : sm;
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
        bool kept = rowOk && kj >= 0;
        if constexpr (Variant::kCausal)
          kept = kept && kj <= qi;
        float sm = s;
        if constexpr (Variant::kHasScoreMod)
          sm = kept ? Variant::score(s, b, h, qi, kj, params, H) : 0.0f;
        if constexpr (Variant::kHasMask)
          kept = kept && Variant::keep(b, h, qi, kj, params, H);
        const bool self = kj == qi;
        sm = self ? kLshSelfScore : sm;
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
          ld::bwdDqChunk<CHUNK, BEFORE, AFTER, D, Variant>(a, cm, delta.data(), rw.data(),
                                                           bhi / H, bhi % H, r, c);
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
      if (den > kSharedQkNormFloor) {
        float k[D];
        for (int d = 0; d < D; ++d)
          k[d] = qr[d] / den;
        const float kg = dotN<D>(k, g);
        for (int d = 0; d < D; ++d)
          dst[d] += (g[d] - k[d] * kg) / den;
      } else {
        for (int d = 0; d < D; ++d)
          dst[d] += g[d] / kSharedQkNormFloor;
      }
    }
  }
  return kOk;
}

} // namespace cpu
} // namespace attnc

#endif // ATTNC_CPU_LSH_H
