//===- simt_emulator.h - Runs CUDA kernel code on the host ------*- C++ -*-===//
//
// A small emulator of CUDA blocks for checking kernels without a GPU: every
// thread of the block is a ucontext that runs until it waits at a barrier
// (__syncthreads, __syncwarp, a warp-synchronous intrinsic) or returns; a
// block barrier releases when every live thread of the block waits at it, a
// warp barrier when every live thread of the warp does. Blocks run one after
// the other. Provides the device builtins the kernel headers use (shuffles,
// ballot, match_any, popc, integer atomicAdd, bit casts, threadIdx,
// blockIdx) and turns cuda_fp16.h's attribute macros into host ones.
//
// Used by the kernel unit tests (test/unit/CudaEmulator.h adds what tests
// hand the kernels; CudaKernelsTest.cpp builds ldmatrix, mma and cp.async on
// top) and by `attnc train --engine cuda-sim`, which runs a generated CUDA
// training step's kernels here (docs/model-compilation.md). Include it
// before the kernel headers, in one translation unit per program.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_SIMT_EMULATOR_H
#define ATTNC_CUDA_SIMT_EMULATOR_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <ucontext.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>

namespace emu {

// Switching threads: a thread starts on its own stack through a ucontext
// (makecontext/setcontext), then every switch between it and the scheduler
// is __builtin_setjmp/__builtin_longjmp, which save only the registers the
// compiler needs and, unlike swapcontext, make no sigprocmask system call:
// the emulator runs several times faster.
using JumpBuffer = void *[5];

/// One CUDA thread.
struct Thread {
  ucontext_t ctx;    ///< its first entry
  JumpBuffer resume; ///< where it continues after waiting
  uint3 idx;
  int wait = 0; ///< 0: runnable, 1: at __syncthreads, 2: at a warp barrier
  bool started = false;
  bool done = false;
};

/// The block being run.
struct Block {
  std::vector<Thread> threads;
  JumpBuffer sched; ///< the scheduler, where a thread that waits or ends returns
  int current = 0;
  uint3 idx;
  uint3 dim;  ///< blockDim
  uint3 grid; ///< gridDim
  std::function<void()> body;
  std::uint64_t xch[32][32]; ///< warp exchange slots [warp][lane]
};

inline Block *block = nullptr;
inline std::vector<std::vector<char>> stacks;
constexpr size_t kStackBytes = 128 * 1024;

/// Called as each thread returns, cur() still that thread (for state an
/// includer keeps per thread); none by default.
inline void (*atThreadExit)() = nullptr;

inline Thread &cur() { return block->threads[block->current]; }
/// The long jump, in a function of its own: GCC wants __builtin_longjmp
/// and __builtin_setjmp in different functions.
[[noreturn]] __attribute__((noinline)) inline void jumpTo(JumpBuffer &to) {
  __builtin_longjmp(to, 1);
}
inline void wait(int kind) {
  Thread &t = cur();
  t.wait = kind;
  if (__builtin_setjmp(t.resume) == 0)
    jumpTo(block->sched);
}
inline void entry() {
  block->body();
  if (atThreadExit)
    atThreadExit();
  cur().done = true;
  jumpTo(block->sched); // its stack is abandoned
}
/// Runs thread `i` of `blk` until it waits or ends. Not inlined: the
/// scheduler's jump buffer must name a frame that stays alive meanwhile.
__attribute__((noinline)) inline void runThread(Block &blk, int i) {
  blk.current = i;
  if (__builtin_setjmp(blk.sched) != 0)
    return;
  Thread &t = blk.threads[size_t(i)];
  if (!t.started) {
    t.started = true;
    setcontext(&t.ctx);
  }
  jumpTo(t.resume);
}

/// Runs `body` as the `threads` threads of block `idx`; false on a deadlock
/// (a barrier or warp intrinsic not reached by all live threads).
inline bool runBlock(int threads, uint3 idx, std::function<void()> body, uint3 grid = {1, 1, 1}) {
  Block blk;
  blk.threads.resize(threads);
  blk.idx = idx;
  blk.dim = make_uint3(unsigned(threads), 1, 1);
  blk.grid = grid;
  blk.body = std::move(body);
  block = &blk;
  if (stacks.size() < size_t(threads))
    stacks.resize(threads, std::vector<char>(kStackBytes));
  for (int i = 0; i < threads; ++i) {
    Thread &t = blk.threads[i];
    t.idx = make_uint3(i, 0, 0);
    getcontext(&t.ctx);
    t.ctx.uc_stack.ss_sp = stacks[i].data();
    t.ctx.uc_stack.ss_size = kStackBytes;
    t.ctx.uc_link = nullptr; // entry() never returns
    makecontext(&t.ctx, entry, 0);
  }
  bool ok = true;
  for (;;) {
    for (int i = 0; i < threads; ++i)
      if (!blk.threads[i].done && blk.threads[i].wait == 0)
        runThread(blk, i);
    bool released = false;
    for (int w = 0; w * 32 < threads; ++w) {
      int live = 0, waiting = 0;
      for (int i = w * 32; i < threads && i < w * 32 + 32; ++i)
        if (!blk.threads[i].done) {
          ++live;
          waiting += blk.threads[i].wait == 2;
        }
      if (live > 0 && waiting == live) {
        for (int i = w * 32; i < threads && i < w * 32 + 32; ++i)
          blk.threads[i].wait = 0;
        released = true;
      }
    }
    int live = 0, atBarrier = 0;
    for (const Thread &t : blk.threads)
      if (!t.done) {
        ++live;
        atBarrier += t.wait == 1;
      }
    if (live == 0)
      break;
    if (!released && atBarrier == live) {
      for (Thread &t : blk.threads)
        t.wait = 0;
      released = true;
    }
    if (!released) {
      ok = false;
      break;
    }
  }
  block = nullptr;
  return ok;
}

inline int lane() { return int(cur().idx.x % 32); }
inline int warpId() { return int(cur().idx.x / 32); }

/// Every live lane of the warp publishes `v`; returns a copy of the slots
/// (lanes that have exited read as 0 and are marked absent in `present`).
template <class V> void exchange(V v, std::uint64_t (&slots)[32], unsigned &present) {
  static_assert(sizeof(V) <= 8 && std::is_trivially_copyable_v<V>);
  const int w = warpId(), l = lane();
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  block->xch[w][l] = bits;
  wait(2);
  present = 0;
  for (int i = 0; i < 32; ++i) {
    const int t = 32 * w + i;
    const bool live = t < int(block->threads.size()) && !block->threads[t].done;
    slots[i] = live ? block->xch[w][i] : 0;
    present |= live ? 1u << i : 0u;
  }
  wait(2); // nobody overwrites a slot before all have read
}

template <class V> V fromBits(std::uint64_t bits) {
  V v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

/// Static shared memory of the block being emulated (kernels bind their
/// storage struct to it); refilled with 0xff (NaN floats) for every block.
alignas(16) inline unsigned char sharedBytes[64 * 1024];
template <class S> S &shared() {
  static_assert(sizeof(S) <= sizeof(sharedBytes), "emulated shared memory");
  return *reinterpret_cast<S *>(sharedBytes);
}

/// Runs `body` over a grid, one block at a time, shared memory reset and
/// `eachBlock` (when given: more per-block state to reset) run before each;
/// false on a deadlock.
inline bool launch(int gx, int gy, int threads, const std::function<void()> &body,
                   const std::function<void()> &eachBlock = nullptr) {
  for (int y = 0; y < gy; ++y)
    for (int x = 0; x < gx; ++x) {
      std::memset(sharedBytes, 0xff, sizeof sharedBytes);
      if (eachBlock)
        eachBlock();
      if (!runBlock(threads, make_uint3(x, y, 0), body, make_uint3(gx, gy, 1)))
        return false;
    }
  return true;
}

} // namespace emu

// The device builtins.
inline void __syncthreads() { emu::wait(1); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::wait(2); }

template <class V> inline V __shfl_sync(unsigned, V v, int src) {
  std::uint64_t s[32];
  unsigned present;
  emu::exchange(v, s, present);
  return emu::fromBits<V>(s[src & 31]);
}
template <class V> inline V __shfl_xor_sync(unsigned mask, V v, int x) {
  return __shfl_sync(mask, v, emu::lane() ^ x);
}
template <class V> inline V __shfl_up_sync(unsigned mask, V v, unsigned d) {
  const int l = emu::lane();
  const V r = __shfl_sync(mask, v, l >= int(d) ? l - int(d) : l);
  return r;
}
template <class V> inline V __shfl_down_sync(unsigned mask, V v, unsigned d) {
  const int l = emu::lane();
  return __shfl_sync(mask, v, l + int(d) < 32 ? l + int(d) : l);
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  std::uint64_t s[32];
  unsigned present, r = 0;
  emu::exchange(pred != 0 ? 1 : 0, s, present);
  for (int i = 0; i < 32; ++i)
    if ((present & mask & (1u << i)) && s[i])
      r |= 1u << i;
  return r;
}
template <class V> inline unsigned __match_any_sync(unsigned mask, V v) {
  std::uint64_t s[32];
  unsigned present, r = 0;
  emu::exchange(v, s, present);
  const std::uint64_t mine = s[emu::lane()];
  for (int i = 0; i < 32; ++i)
    if ((present & mask & (1u << i)) && s[i] == mine)
      r |= 1u << i;
  return r;
}
inline int __popc(unsigned x) { return __builtin_popcount(x); }
/// Threads never run concurrently in the emulator: a plain add is atomic.
inline int atomicAdd(int *p, int v) {
  const int old = *p;
  *p = old + v;
  return old;
}
inline unsigned long long atomicMin(unsigned long long *p, unsigned long long v) {
  const unsigned long long old = *p;
  *p = v < old ? v : old;
  return old;
}
inline float __int_as_float(int x) { return emu::fromBits<float>(std::uint32_t(x)); }
inline float __uint_as_float(unsigned x) { return emu::fromBits<float>(x); }
inline int __float_as_int(float x) {
  int r;
  std::memcpy(&r, &x, sizeof r);
  return r;
}
#define threadIdx (::emu::cur().idx)
#define blockIdx (::emu::block->idx)
#define blockDim (::emu::block->dim)
#define gridDim (::emu::block->grid)

// cuda_fp16.h gave these GNU attribute meanings; host code wants none.
#undef __device__
#undef __host__
#undef __global__
#undef __shared__
#undef __forceinline__
#define __device__
#define __host__
#define __global__
#define __shared__
#define __forceinline__ inline

/// Kernels that declare their shared storage with ATTNC_LSH_SHARED get the
/// emulated block's.
#define ATTNC_LSH_SHARED(Type, name) Type &name = ::emu::shared<Type>()

#endif // ATTNC_CUDA_SIMT_EMULATOR_H
