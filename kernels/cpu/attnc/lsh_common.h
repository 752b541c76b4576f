//===- lsh_common.h - LSH attention on the CPU: shared state ---------*- C++ -*-===//
//
// What the LSH phases share (lsh.h describes the algorithm): the tile
// configuration and workspace layouts, the argument checks, the state both
// directions keep (key denominators, buckets, permutation, workspaces), and
// the row gathers and dropout masks of the attention phases.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CPU_LSH_COMMON_H
#define ATTNC_CPU_LSH_COMMON_H

#include "common.h"
#include "attnc/common/lsh_pair.h"

namespace attnc {
namespace cpu ATTNC_CPU_NAMESPACE_ATTR {

namespace lsh_detail {

constexpr int kHashRows = 64; ///< rows of one hashing task

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
  static constexpr std::size_t kKt = 0;                                 // [D][CHUNK] keys
  static constexpr std::size_t kVt = kKt + std::size_t(D) * CHUNK;      // [D][CHUNK]
  static constexpr std::size_t kQw = kVt + std::size_t(D) * CHUNK;      // [kWin][D]
  static constexpr std::size_t kDOw = kQw + std::size_t(C::kWin) * D;   // [kWin][D]
  static constexpr std::size_t kS = kDOw + std::size_t(C::kWin) * D;    // [kBI][CHUNK]
  static constexpr std::size_t kDP = kS + std::size_t(C::kBI) * CHUNK;  // [kBI][CHUNK]
  static constexpr std::size_t kDK = kDP + std::size_t(C::kBI) * CHUNK; // [CHUNK][D]
  static constexpr std::size_t kDV = kDK + std::size_t(CHUNK) * D;      // [CHUNK][D]
  static constexpr std::size_t kVc = kDV + std::size_t(CHUNK) * D;      // [CHUNK][D]
  static constexpr std::size_t kLseW = kVc + std::size_t(CHUNK) * D;    // [kWin]
  static constexpr std::size_t kDeltaW = kLseW + C::kWin;               // [kWin]
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
  AlignedBuffer den; // [B, H, N]: max(|q|, 1e-6)
  IntBuffer buckets; // [B, H, R, N]
  IntBuffer perm;    // [B, H, R, Npad]: positions by slot, -1 in pad slots
  AlignedBuffer ws;  // per-thread float workspaces
  IntBuffer iws;     // per-thread int workspaces
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

/// dst[j] = row pos[j] of src (a [N][D] slice), zeros where pos[j] < 0, for
/// j < n. The rows are scattered (sorted by bucket): prefetch a few ahead so
/// that several cache misses are in flight.
template <int D>
ATTNC_FORCE_INLINE void gatherRows(float *ATTNC_RESTRICT dst, const float *ATTNC_RESTRICT src,
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
template <int D> ATTNC_FORCE_INLINE void prefetchRows(float *base, const int *pos, int n) {
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
ATTNC_FORCE_INLINE void normaliseRows(float *ATTNC_RESTRICT rows, const float *den, const int *pos,
                                      int n) {
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
ATTNC_FORCE_INLINE void windowOf(int c, int C, int &w0, int &nw) {
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
      return philox::attentionDropoutScale(a.dropout_seed, a.dropout_offset, int(bh) * a.rounds + r,
                                           qi, kj, a.dropout);
  }
  (void)a, (void)bh, (void)r, (void)qi, (void)kj;
  return 1.0f;
}

} // namespace lsh_detail

} // namespace ATTNC_CPU_NAMESPACE_ATTR
} // namespace attnc

#endif // ATTNC_CPU_LSH_COMMON_H
