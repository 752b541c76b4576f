//===- copy.cuh - Tile copies between global and shared memory ------------===//
//
// Tiles are row-major [rows, COLS] in global memory (row stride COLS) and
// [rows, COLS + pad] in shared memory (TileModel.h: kRowPadBytes), moved in
// 16-byte chunks spread over the CTA's threads. Rows past the tensor's end
// are zero-filled: the kernels multiply them by zero probabilities, and
// uninitialised shared memory could hold NaNs (0 * NaN = NaN).
//
// sm_80+: cp.async (asynchronous, grouped by commit, awaited by wait<N>).
// sm_70, sm_75: plain 16-byte loads and stores; commit and wait are no-ops,
//         so the kernels' pipelines stay correct. Their one-stage loops
//         overlap the next tile's loads with the current tile's math
//         through registers instead (StagedTile): loads issued before the
//         math, stored to shared memory after it.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_COPY_CUH
#define ATTNC_CUDA_COPY_CUH

#include "attnc/common.cuh"

/// 1 where global->shared copies are asynchronous (cp.async, sm_80+), 0
/// where they go through registers. The emulator says which it models
/// (tensor_core_emulator.h: asynchronous unless it emulates Volta).
#if defined(ATTNC_EMULATE_ASYNC_COPY)
#define ATTNC_ASYNC_COPY 1
#elif defined(ATTNC_EMULATE_MMA)
#define ATTNC_ASYNC_COPY 0
#else
#define ATTNC_ASYNC_COPY (ATTNC_ARCH >= 800)
#endif

namespace attnc {

#if defined(ATTNC_EMULATE_ASYNC_COPY)
// Tests only: test/unit/kernels/CudaKernelsTest.cpp's host emulator queues the
// copies per thread and completes them in cpAsyncWait, as cp.async may.
void copy16(void *smem, const void *gmem, bool valid);
void cpAsyncCommit();
void cpAsyncWaitGroups(int n);
template <int N> void cpAsyncWait() { cpAsyncWaitGroups(N); }
#else
/// Copies 16 bytes, or writes 16 zero bytes when !valid.
ATTNC_HD void copy16(void *smem, const void *gmem, bool valid) {
#if ATTNC_ARCH >= 800
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  // src-size 0 reads nothing and zero-fills the destination.
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(gmem),
               "r"(valid ? 16 : 0)
               : "memory");
#else
  uint4 v = make_uint4(0, 0, 0, 0);
  if (valid)
    v = *reinterpret_cast<const uint4 *>(gmem);
  *reinterpret_cast<uint4 *>(smem) = v;
#endif
}

/// Closes the group of copies issued since the last commit.
ATTNC_HD void cpAsyncCommit() {
#if ATTNC_ARCH >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/// Waits until at most N committed groups are still in flight (this thread's
/// copies only: follow with __syncthreads before reading others' rows).
template <int N> ATTNC_HD void cpAsyncWait() {
#if ATTNC_ARCH >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}
#endif // ATTNC_EMULATE_ASYNC_COPY

/// Shared-memory row stride, in elements, of a tile with COLS columns.
template <class T, int COLS> struct SmemLd {
  static constexpr int value = COLS + tile::kRowPadBytes / int(sizeof(T));
};

/// How NTHREADS threads cover a ROWS x COLS tile in 16-byte chunks: thread
/// tid takes chunk column tid % kThreadsPerRow (+ multiples of it) of rows
/// tid / kThreadsPerRow + multiples of kRowsPerPass. Every address is then
/// one per-thread base plus a compile-time offset, so the unrolled copies
/// keep no per-chunk addresses live (they would next to the accumulators).
template <int ROWS, int COLS, int NTHREADS, class T> struct TileCopyMap {
  static constexpr int kChunk = 16 / int(sizeof(T)); ///< elements
  static constexpr int kChunksPerRow = COLS / kChunk;
  static constexpr int kThreadsPerRow = kChunksPerRow < NTHREADS ? kChunksPerRow : NTHREADS;
  static constexpr int kRowsPerPass = NTHREADS / kThreadsPerRow;
  static constexpr int kPasses = (ROWS + kRowsPerPass - 1) / kRowsPerPass;
  static constexpr int kColSteps = (kChunksPerRow + kThreadsPerRow - 1) / kThreadsPerRow;
  static constexpr int kLd = SmemLd<T, COLS>::value;
  static_assert(COLS % kChunk == 0, "rows must be whole 16-byte chunks");

  int row, col; ///< this thread's first row and element column
  bool active;  ///< false for the threads left over by kRowsPerPass
  ATTNC_HD explicit TileCopyMap(int tid)
      : row(tid / kThreadsPerRow), col(tid % kThreadsPerRow * kChunk),
        active(tid < kRowsPerPass * kThreadsPerRow) {}

  /// Calls f(row offset from `row`, column offset from `col`, row) for
  /// every chunk of this thread. UNROLL: unroll the passes over rows.
  template <bool UNROLL, class F> ATTNC_HD void forEach(F &&f) const {
    if (!active)
      return;
    auto pass = [&](int p) {
      const int r = p * kRowsPerPass;
      if (kPasses * kRowsPerPass == ROWS || row + r < ROWS) {
#pragma unroll
        for (int c = 0; c < kColSteps; ++c) {
          const int cc = c * kThreadsPerRow * kChunk;
          if (kChunksPerRow % kThreadsPerRow == 0 || col + cc < COLS)
            f(r, cc, row + r);
        }
      }
    };
    if constexpr (UNROLL) {
#pragma unroll
      for (int p = 0; p < kPasses; ++p)
        pass(p);
    } else {
#pragma unroll 1
      for (int p = 0; p < kPasses; ++p)
        pass(p);
    }
  }
};

/// Loads a ROWS x COLS tile (rows >= validRows zero-filled) with NTHREADS
/// threads; `tid` in [0, NTHREADS).
template <int ROWS, int COLS, int NTHREADS, class T>
ATTNC_HD void loadTile(T *smem, const T *gmem, int validRows, int tid) {
  using Map = TileCopyMap<ROWS, COLS, NTHREADS, T>;
  const Map map(tid);
  T *s = smem + map.row * Map::kLd + map.col;
  const T *g = gmem + map.row * COLS + map.col;
  // Synchronous copies (sm_75) go through registers: unrolled, the loads of
  // a whole tile would be hoisted at once, and spill next to the
  // accumulators.
  map.template forEach<(ATTNC_ARCH >= 800)>([&](int r, int c, int row) {
    const bool valid = row < validRows;
    copy16(s + r * Map::kLd + c, valid ? g + r * COLS + c : gmem, valid);
  });
}

/// Gathers a ROWS x COLS tile whose row r is gmem row pos[r] (pos[r] < 0:
/// zero-filled), with NTHREADS threads: LSH tiles, whose rows are scattered
/// by the sort permutation. `pos` is in shared memory, written before a
/// barrier.
template <int ROWS, int COLS, int NTHREADS, class T>
ATTNC_HD void gatherTile(T *smem, const T *gmem, const int *pos, int tid) {
  using Map = TileCopyMap<ROWS, COLS, NTHREADS, T>;
  const Map map(tid);
  T *s = smem + map.row * Map::kLd + map.col;
  map.template forEach<(ATTNC_ARCH >= 800)>([&](int r, int c, int row) {
    const int p = pos[row];
    copy16(s + r * Map::kLd + c, p >= 0 ? gmem + size_t(p) * COLS + map.col + c : gmem, p >= 0);
  });
}

/// A tile in flight through registers, for archs without cp.async: fetch()
/// issues this thread's 16-byte global loads (rows >= validRows read as
/// zeros), which complete while the warp computes on the tile already in
/// shared memory; store() writes them to shared memory once no warp reads
/// it (after a __syncthreads). Chunk c of pass p is register p * kColSteps
/// + c, a compile-time index, so the array stays in registers.
template <int ROWS, int COLS, int NTHREADS, class T> struct StagedTile {
  using Map = TileCopyMap<ROWS, COLS, NTHREADS, T>;
  static constexpr int kRegs = Map::kPasses * Map::kColSteps; ///< 16-byte chunks
  /// Whether two such tiles (K and V, or Q and dO) stay within
  /// kStagedChunkBudget.
  static constexpr bool kPairFits = 2 * kRegs <= tile::kStagedChunkBudget;
  uint4 chunk[kRegs];

  static ATTNC_HD int slot(int r, int c) {
    return r / Map::kRowsPerPass * Map::kColSteps + c / (Map::kThreadsPerRow * Map::kChunk);
  }
  ATTNC_HD void fetch(const T *gmem, int validRows, int tid) {
    const Map map(tid);
    const T *g = gmem + map.row * COLS + map.col;
    map.template forEach<true>([&](int r, int c, int row) {
      uint4 v = make_uint4(0, 0, 0, 0);
      if (row < validRows)
        v = *reinterpret_cast<const uint4 *>(g + r * COLS + c);
      chunk[slot(r, c)] = v;
    });
  }
  ATTNC_HD void store(T *smem, int tid) const {
    const Map map(tid);
    T *s = smem + map.row * Map::kLd + map.col;
    map.template forEach<true>([&](int r, int c, int) {
      *reinterpret_cast<uint4 *>(s + r * Map::kLd + c) = chunk[slot(r, c)];
    });
  }
};

/// Stores rows [0, validRows) of a shared-memory tile to global memory.
template <int ROWS, int COLS, int NTHREADS, class T>
ATTNC_HD void storeTile(T *gmem, const T *smem, int validRows, int tid) {
  using Map = TileCopyMap<ROWS, COLS, NTHREADS, T>;
  const Map map(tid);
  const T *s = smem + map.row * Map::kLd + map.col;
  T *g = gmem + map.row * COLS + map.col;
  map.template forEach<true>([&](int r, int c, int row) {
    if (row < validRows)
      *reinterpret_cast<uint4 *>(g + r * COLS + c) =
          *reinterpret_cast<const uint4 *>(s + r * Map::kLd + c);
  });
}

} // namespace attnc

#endif // ATTNC_CUDA_COPY_CUH
