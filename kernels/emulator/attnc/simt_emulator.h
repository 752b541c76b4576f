//===- simt_emulator.h - Runs CUDA kernel code on the host ------*- C++ -*-===//
//
// A small emulator of CUDA blocks for checking kernels without a GPU: every
// thread of the block is a ucontext that runs until it waits at a barrier
// (__syncthreads) or a warp collective (__syncwarp, a shuffle, ballot,
// match_any, or the ldmatrix / mma of tensor_core_emulator.h) or returns.
// Provides the device builtins the kernel headers use (shuffles, ballot,
// match_any, popc, integer atomics, bit casts, threadIdx, blockIdx) and
// turns cuda_fp16.h's attribute macros into host ones.
//
// Schedules (docs/emulator.md). The scheduler runs one warp at a time: it
// picks a warp that has runnable lanes or a collective group ready to
// release, runs those lanes one by one to their next wait, and picks again.
// Which warp, and in which order its lanes run, is the schedule:
//
//   index     the lowest warp with work, lanes in ascending order: a warp
//             runs alone from one __syncthreads to the next;
//   reverse   the highest warp, lanes descending;
//   random:S  a random warp (sticking to the current one half the time)
//             and a random order of its lanes, from seed S.
//
// Blocks of a launch run in index order, in reverse, or shuffled. The
// schedule is emu::schedule, from the environment's ATTNC_EMU_SCHEDULE
// (index by default); tests run a launch under several and compare the
// results bit for bit: a missing barrier shows up as a difference or as
// NaNs read from the 0xff-filled shared memory.
//
// Checks (each fails the launch: runBlock / launch return false and
// emu::lastError names block, warp, lane and intrinsic):
//   - a warp collective's mask must name the calling lane, and every lane
//     it names must arrive at the same collective (same intrinsic, same
//     mask): not one that has exited, waits at __syncthreads or at another
//     collective; a shuffle may only read lanes of its mask;
//   - every thread of a block waits at the same __syncthreads (call site);
//   - a barrier or collective no thread can release is a deadlock;
//   - shared-memory address checks for the helpers that take addresses
//     (requireShared, requireAligned; used by tensor_core_emulator.h).
//
// Used by the kernel unit tests (test/unit/support/CudaEmulator.h adds what tests
// hand the kernels; tensor_core_emulator.h adds ldmatrix, mma and
// cp.async) and by `attnc train --engine cuda-sim`, which runs a generated
// CUDA training step's kernels here (docs/model-compilation.md). Include it
// before the kernel headers, in one translation unit per program.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_SIMT_EMULATOR_H
#define ATTNC_CUDA_SIMT_EMULATOR_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

namespace emu {

//===-- Schedules ---------------------------------------------------------===//

/// How the scheduler orders warps, lanes and blocks (file comment).
struct Schedule {
  enum Kind { Index, Reverse, Random } kind = Index;
  std::uint64_t seed = 0; ///< Random only
  std::string name() const {
    return kind == Index ? "index" : kind == Reverse ? "reverse" : "random:" + std::to_string(seed);
  }
};
inline Schedule indexSchedule() { return {Schedule::Index, 0}; }
inline Schedule reverseSchedule() { return {Schedule::Reverse, 0}; }
inline Schedule randomSchedule(std::uint64_t seed) { return {Schedule::Random, seed}; }

/// "index", "reverse", "random" (seed 1) or "random:SEED"; false otherwise.
inline bool parseSchedule(const std::string &text, Schedule &out) {
  if (text == "index")
    out = indexSchedule();
  else if (text == "reverse")
    out = reverseSchedule();
  else if (text == "random")
    out = randomSchedule(1);
  else if (text.rfind("random:", 0) == 0 && text.size() > 7 &&
           text.find_first_not_of("0123456789", 7) == std::string::npos)
    out = randomSchedule(std::strtoull(text.c_str() + 7, nullptr, 10));
  else
    return false;
  return true;
}

/// ATTNC_EMU_SCHEDULE, index when unset; a value that does not parse stops
/// the program (a typo must not silently test the default).
inline Schedule scheduleFromEnv() {
  Schedule s;
  const char *env = std::getenv("ATTNC_EMU_SCHEDULE");
  if (env && *env && !parseSchedule(env, s)) {
    std::fprintf(stderr,
                 "emu: ATTNC_EMU_SCHEDULE=%s: expected index, reverse, random or random:SEED\n",
                 env);
    std::abort();
  }
  return s;
}

/// The schedule of the launches that follow.
inline Schedule schedule = scheduleFromEnv();

/// Sets emu::schedule for a scope.
struct ScheduleScope {
  Schedule saved;
  explicit ScheduleScope(const Schedule &s) : saved(schedule) { schedule = s; }
  ~ScheduleScope() { schedule = saved; }
  ScheduleScope(const ScheduleScope &) = delete;
  ScheduleScope &operator=(const ScheduleScope &) = delete;
};

/// splitmix64: small, fast, and the same everywhere.
struct Rng {
  std::uint64_t s;
  explicit Rng(std::uint64_t seed = 0) : s(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  unsigned below(unsigned n) { return unsigned((next() >> 32) * n >> 32); }
  bool coin() { return next() >> 63; }
};
inline std::uint64_t mix(std::uint64_t a, std::uint64_t b) {
  return Rng(a ^ (b * 0xd1b54a32d192ed03ull)).next();
}

//===-- Threads, warps, blocks --------------------------------------------===//

// Switching threads: a thread starts on its own stack through a ucontext
// (makecontext/setcontext), then every switch between it and the scheduler
// is __builtin_setjmp/__builtin_longjmp, which save only the registers the
// compiler needs and, unlike swapcontext, make no sigprocmask system call:
// the emulator runs several times faster.
using JumpBuffer = void *[5];

/// What a thread waits at.
enum class Op : std::uint8_t {
  None, ///< runnable
  SyncThreads,
  SyncWarp,
  ShflIdx,
  ShflUp,
  ShflDown,
  ShflXor,
  Ballot,
  Any,
  All,
  MatchAny,
  Ldmatrix,
  Mma,
};
inline const char *opName(Op op) {
  switch (op) {
  case Op::None:
    return "(running)";
  case Op::SyncThreads:
    return "__syncthreads";
  case Op::SyncWarp:
    return "__syncwarp";
  case Op::ShflIdx:
    return "__shfl_sync";
  case Op::ShflUp:
    return "__shfl_up_sync";
  case Op::ShflDown:
    return "__shfl_down_sync";
  case Op::ShflXor:
    return "__shfl_xor_sync";
  case Op::Ballot:
    return "__ballot_sync";
  case Op::Any:
    return "__any_sync";
  case Op::All:
    return "__all_sync";
  case Op::MatchAny:
    return "__match_any_sync";
  case Op::Ldmatrix:
    return "ldmatrix";
  case Op::Mma:
    return "mma.sync";
  }
  return "?";
}

/// The op with its form: "ldmatrix.x4.trans", "__shfl_xor_sync (width 4)".
inline std::string opLabel(Op op, int form) {
  std::string s = opName(op);
  if (op == Op::Ldmatrix)
    s += ".x" + std::to_string(form / 2) + (form % 2 ? ".trans" : "");
  else if (op == Op::Mma)
    s += form == 1   ? ".m16n8k16.f16"
         : form == 2 ? ".m16n8k16.bf16"
         : form == 3 ? ".m8n8k4.f16"
                     : "";
  else if (op >= Op::ShflIdx && op <= Op::ShflXor && form != 32)
    s += " (width " + std::to_string(form) + ")";
  return s;
}

/// Where an intrinsic was called (__builtin_FILE / __builtin_LINE of the
/// call site), for messages and the __syncthreads check.
struct Site {
  const char *file = "";
  int line = 0;
  bool operator==(const Site &o) const {
    return line == o.line && (file == o.file || std::strcmp(file, o.file) == 0);
  }
  std::string str() const {
    const char *slash = std::strrchr(file, '/');
    return std::string(slash ? slash + 1 : file) + ":" + std::to_string(line);
  }
};
#define ATTNC_EMU_SITE const char *emuFile = __builtin_FILE(), int emuLine = __builtin_LINE()
#define ATTNC_EMU_HERE                                                                             \
  ::emu::Site { emuFile, emuLine }

/// One CUDA thread.
struct Thread {
  JumpBuffer resume; ///< where it continues after waiting
  uint3 idx;
  Op op = Op::None;      ///< what it waits at
  std::uint8_t form = 0; ///< the op's form (shuffle width, ldmatrix .x2/.x4, ...)
  unsigned mask = 0;     ///< the collective's mask
  Site site;             ///< where it waits
  bool started = false;
  bool done = false;
};

/// Lanes of one warp by state (bit l: lane l).
struct Warp {
  unsigned live = 0; ///< started or not, not returned
  unsigned run = 0;  ///< released, not yet run since
  unsigned coll = 0; ///< waiting at a warp collective
  unsigned bar = 0;  ///< waiting at __syncthreads
};

/// Bytes a lane publishes at a collective (ldmatrix: a row address; mma:
/// six 32-bit registers; shuffles: the value).
constexpr int kSlotWords = 4;

/// The block being run.
struct Block {
  std::vector<Thread> threads;
  std::vector<Warp> warps;
  JumpBuffer sched; ///< the scheduler, where a thread that waits or ends returns
  int current = 0;
  int currentWarp = -1;
  uint3 idx;
  uint3 dim;  ///< blockDim
  uint3 grid; ///< gridDim
  const std::function<void()> *body = nullptr;
  Rng rng;
  std::string error; ///< the first check that failed
  /// Values published at a collective [warp][lane], and the snapshot its
  /// group reads after the release (a lane that runs ahead to the next
  /// collective overwrites only its published slot).
  std::uint64_t xch[32][32][kSlotWords];
  std::uint64_t snap[32][32][kSlotWords];
};

inline Block *block = nullptr;

/// The stack thread i of every block runs on: a coroutine that runs one
/// thread's body after the other. It starts once, through a ucontext; after
/// a body returns it waits (`idle`) for thread i of the next block, which a
/// long jump starts: no system call per thread. A fiber abandoned in a
/// failed block starts afresh.
struct Fiber {
  ucontext_t ctx;
  JumpBuffer idle;
  bool isIdle = false;
  std::vector<char> stack;
};
inline std::vector<Fiber *> fibers;
constexpr size_t kStackBytes = 128 * 1024;
/// The message of the last launch or block that failed ("" after one that
/// did not).
inline std::string lastError;

/// Callbacks of an emulation layer (tensor_core_emulator.h): before each
/// block (emu::block set up, shared memory refilled), as each thread
/// returns (cur() still that thread), after each block that ran to its end
/// (may report()). Registered once with addHooks.
struct Hooks {
  void (*blockStart)() = nullptr;
  void (*threadExit)() = nullptr;
  void (*blockEnd)() = nullptr;
};
inline Hooks hooks[4] = {};
inline int hookCount = 0;
inline bool addHooks(const Hooks &h) {
  for (int i = 0; i < hookCount; ++i)
    if (hooks[i].blockStart == h.blockStart && hooks[i].threadExit == h.threadExit &&
        hooks[i].blockEnd == h.blockEnd)
      return true;
  if (hookCount == 4)
    return false;
  hooks[hookCount++] = h;
  return true;
}

inline Thread &cur() { return block->threads[block->current]; }
inline int lane() { return int(cur().idx.x % 32); }
inline int warpId() { return int(cur().idx.x / 32); }

/// "block (x, y, z)".
inline std::string blockName() {
  if (!block)
    return "no block";
  return "block (" + std::to_string(block->idx.x) + ", " + std::to_string(block->idx.y) + ", " +
         std::to_string(block->idx.z) + ")";
}
/// "block (x, y, z) warp w lane l (thread t)" of the running thread.
inline std::string whereAmI() {
  const Thread &t = cur();
  return blockName() + " warp " + std::to_string(t.idx.x / 32) + " lane " +
         std::to_string(t.idx.x % 32) + " (thread " + std::to_string(t.idx.x) + ")";
}
inline std::string hex(unsigned m) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", m);
  return b;
}

/// The long jump, in a function of its own: GCC wants __builtin_longjmp
/// and __builtin_setjmp in different functions.
[[noreturn]] __attribute__((noinline)) inline void jumpTo(JumpBuffer &to) {
  __builtin_longjmp(to, 1);
}

/// Records a failed check of the block being run (the first one counts).
inline void report(const std::string &message) {
  if (block && block->error.empty())
    block->error = message;
}
/// Fails the block from inside a thread: records `message` and returns to
/// the scheduler, which abandons the block (its stacks are reused).
[[noreturn]] inline void fail(const std::string &message) {
  report(message);
  jumpTo(block->sched);
}

/// The running thread waits; the scheduler resumes it after the release.
inline void suspend() {
  Thread &t = cur();
  if (__builtin_setjmp(t.resume) == 0)
    jumpTo(block->sched);
}

inline void syncThreads(Site site) {
  Thread &t = cur();
  t.op = Op::SyncThreads;
  t.site = site;
  block->warps[size_t(warpId())].bar |= 1u << lane();
  suspend();
}

/// The running lane arrives at collective `op` (of form `form`) over
/// `mask`, publishing `bytes` of `data`; returns, after the release, what
/// the lanes of its group published ([lane][word]; read only lanes of
/// `mask`).
inline const std::uint64_t (&collective(Op op, unsigned mask, const void *data, size_t bytes,
                                        Site site, int form = 0))[32][kSlotWords] {
  Thread &t = cur();
  const int w = warpId(), l = lane();
  Warp &warp = block->warps[size_t(w)];
  if (!(mask >> l & 1u))
    fail(whereAmI() + ": " + opLabel(op, form) + " at " + site.str() + " with mask " + hex(mask) +
         " that does not name the calling lane");
  if (const unsigned gone = mask & ~warp.live) {
    const int k = __builtin_ctz(gone);
    const int thread = 32 * w + k;
    fail(whereAmI() + ": " + opLabel(op, form) + " at " + site.str() + " with mask " + hex(mask) +
         " names lane " + std::to_string(k) +
         (thread < int(block->threads.size()) ? ", which has exited"
                                              : ", which is not a thread of the block"));
  }
  if (bytes)
    std::memcpy(block->xch[w][l], data, bytes);
  t.op = op;
  t.form = std::uint8_t(form);
  t.mask = mask;
  t.site = site;
  warp.coll |= 1u << l;
  suspend();
  return block->snap[w];
}

/// Value `v` of lane `src` from a collective's slots; `src` must be in the
/// caller's mask.
template <class V>
V laneValue(const std::uint64_t (&slots)[32][kSlotWords], int src, unsigned mask, Op op,
            Site site) {
  static_assert(sizeof(V) <= sizeof(slots[0]) && std::is_trivially_copyable_v<V>);
  if (!(mask >> src & 1u))
    fail(whereAmI() + ": " + opName(op) + " at " + site.str() + " reads lane " +
         std::to_string(src) + ", which is not in its mask " + hex(mask));
  V v;
  std::memcpy(&v, slots[src], sizeof v);
  return v;
}

inline void fiberMain() {
  for (;;) {
    fibers[size_t(block->current)]->isIdle = false;
    (*block->body)();
    for (int i = 0; i < hookCount; ++i)
      if (hooks[i].threadExit)
        hooks[i].threadExit();
    Thread &t = cur();
    t.done = true;
    block->warps[t.idx.x / 32].live &= ~(1u << (t.idx.x % 32));
    Fiber &f = *fibers[size_t(block->current)];
    f.isIdle = true;
    if (__builtin_setjmp(f.idle) == 0)
      jumpTo(block->sched);
    // Resumed for thread `current` of another block.
  }
}
/// Runs thread `i` of `blk` until it waits or ends. Not inlined: the
/// scheduler's jump buffer must name a frame that stays alive meanwhile.
__attribute__((noinline)) inline void runThread(Block &blk, int i) {
  blk.current = i;
  if (__builtin_setjmp(blk.sched) != 0)
    return;
  Thread &t = blk.threads[size_t(i)];
  t.op = Op::None;
  if (!t.started) {
    t.started = true;
    Fiber &f = *fibers[size_t(i)];
    if (f.isIdle)
      jumpTo(f.idle);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = f.stack.size();
    f.ctx.uc_link = nullptr; // fiberMain never returns
    makecontext(&f.ctx, fiberMain, 0);
    setcontext(&f.ctx);
  }
  jumpTo(t.resume);
}

/// "3", "0-31", "0-3, 8".
inline std::string ranges(const std::vector<int> &v) {
  std::string s;
  for (size_t i = 0; i < v.size();) {
    size_t j = i;
    while (j + 1 < v.size() && v[j + 1] == v[j] + 1)
      ++j;
    s += (s.empty() ? "" : ", ") + std::to_string(v[i]);
    if (j > i)
      s += "-" + std::to_string(v[j]);
    i = j + 1;
  }
  return s;
}

namespace detail {

/// Whether the group of lane l's collective in warp w can be released: all
/// lanes of its mask wait at the same op with the same mask.
inline bool groupReady(const Block &blk, int w, int l) {
  const Warp &warp = blk.warps[size_t(w)];
  const Thread &t = blk.threads[size_t(32 * w + l)];
  if ((t.mask & ~warp.coll) != 0)
    return false;
  for (unsigned m = t.mask; m; m &= m - 1) {
    const Thread &o = blk.threads[size_t(32 * w + __builtin_ctz(m))];
    if (o.op != t.op || o.form != t.form || o.mask != t.mask)
      return false;
  }
  return true;
}

/// A ready group of warp w (its mask), 0 if none.
inline unsigned readyGroup(const Block &blk, int w) {
  unsigned seen = 0;
  const Warp &warp = blk.warps[size_t(w)];
  for (unsigned c = warp.coll; c; c &= c - 1) {
    const int l = __builtin_ctz(c);
    if (seen >> l & 1u)
      continue;
    const unsigned mask = blk.threads[size_t(32 * w + l)].mask;
    if (groupReady(blk, w, l))
      return mask;
    seen |= mask;
  }
  return 0;
}

/// Releases the group `mask` of warp w: its lanes become runnable and read
/// a snapshot of what they published.
inline void release(Block &blk, int w, unsigned mask) {
  Warp &warp = blk.warps[size_t(w)];
  warp.coll &= ~mask;
  warp.run |= mask;
  for (unsigned m = mask; m; m &= m - 1) {
    const int l = __builtin_ctz(m);
    std::memcpy(blk.snap[w][l], blk.xch[w][l], sizeof blk.xch[w][l]);
  }
}

/// Runs the runnable lanes of warp w in the schedule's order.
inline void runWarp(Block &blk, int w, Schedule::Kind kind) {
  Warp &warp = blk.warps[size_t(w)];
  int order[32], n = 0;
  for (unsigned m = warp.run; m; m &= m - 1)
    order[n++] = __builtin_ctz(m);
  warp.run = 0;
  if (kind == Schedule::Reverse)
    std::reverse(order, order + n);
  else if (kind == Schedule::Random)
    for (int i = n - 1; i > 0; --i)
      std::swap(order[i], order[blk.rng.below(unsigned(i + 1))]);
  for (int i = 0; i < n && blk.error.empty(); ++i)
    runThread(blk, 32 * w + order[i]);
}

/// "block .. warp w lane l: <its collective> cannot complete: lane k <why>".
inline std::string cannotComplete(const Block &blk, int w, int l, int k, const std::string &why) {
  const Thread &t = blk.threads[size_t(32 * w + l)];
  return blockName() + " warp " + std::to_string(w) + " lane " + std::to_string(l) + ": " +
         opLabel(t.op, t.form) + " with mask " + hex(t.mask) + " at " + t.site.str() +
         " cannot complete: lane " + std::to_string(k) + " " + why;
}
inline std::string waitsAt(const Thread &o) {
  if (o.op == Op::SyncThreads)
    return "waits at __syncthreads (" + o.site.str() + ")";
  return "waits at " + opLabel(o.op, o.form) + " with mask " + hex(o.mask) + " (" + o.site.str() +
         ")";
}

/// Whether warp w has lanes to run or a group to release (released then).
/// A group is not released while another waiting lane's mask names one of
/// its lanes: that lane's collective could never complete (undefined on a
/// GPU); the block fails instead.
inline bool prepare(Block &blk, int w) {
  Warp &warp = blk.warps[size_t(w)];
  if (warp.run)
    return true;
  if (!warp.coll)
    return false;
  const unsigned g = readyGroup(blk, w);
  if (!g)
    return false;
  for (unsigned o = warp.coll & ~g; o; o &= o - 1) {
    const int k = __builtin_ctz(o);
    if (const unsigned named = blk.threads[size_t(32 * w + k)].mask & g) {
      const int j = __builtin_ctz(named);
      report(cannotComplete(blk, w, k, j, waitsAt(blk.threads[size_t(32 * w + j)])));
      return false;
    }
  }
  release(blk, w, g);
  return true;
}

/// Why nothing can run: the first collective that cannot complete, or the
/// threads at different __syncthreads.
inline std::string diagnose(const Block &blk) {
  const int nw = int(blk.warps.size());
  for (int w = 0; w < nw; ++w) {
    const Warp &warp = blk.warps[size_t(w)];
    for (unsigned c = warp.coll; c; c &= c - 1) {
      const int l = __builtin_ctz(c);
      const Thread &t = blk.threads[size_t(32 * w + l)];
      for (unsigned m = t.mask; m; m &= m - 1) {
        const int k = __builtin_ctz(m);
        if (32 * w + k >= int(blk.threads.size()))
          return cannotComplete(blk, w, l, k, "is not a thread of the block");
        if (!(warp.live >> k & 1u))
          return cannotComplete(blk, w, l, k, "has exited");
        const Thread &o = blk.threads[size_t(32 * w + k)];
        if (o.op == Op::SyncThreads || o.op != t.op || o.form != t.form || o.mask != t.mask)
          return cannotComplete(blk, w, l, k, waitsAt(o));
      }
    }
  }
  return blockName() + ": deadlock";
}

/// With every live thread at __syncthreads: "" when all wait at the same
/// call site, else which threads wait where.
inline std::string barrierSites(const Block &blk) {
  const Thread *first = nullptr;
  bool same = true;
  for (const Thread &t : blk.threads)
    if (!t.done) {
      if (!first)
        first = &t;
      else if (!(t.site == first->site)) {
        same = false;
        break;
      }
    }
  if (same)
    return "";
  std::vector<Site> sites;
  std::vector<std::vector<int>> who;
  for (const Thread &t : blk.threads) {
    if (t.done)
      continue;
    size_t i = 0;
    while (i < sites.size() && !(sites[i] == t.site))
      ++i;
    if (i == sites.size()) {
      sites.push_back(t.site);
      who.emplace_back();
    }
    who[i].push_back(int(t.idx.x));
  }
  if (sites.size() <= 1)
    return "";
  std::string s = blockName() + ": threads wait at different __syncthreads:";
  for (size_t i = 0; i < sites.size(); ++i)
    s += (i ? "; threads " : " threads ") + ranges(who[i]) + " at " + sites[i].str();
  return s;
}

/// The next warp to run, -1 when none has work.
inline int pickWarp(Block &blk, Schedule::Kind kind) {
  const int nw = int(blk.warps.size());
  if (kind == Schedule::Index) {
    for (int w = 0; w < nw; ++w)
      if (prepare(blk, w))
        return w;
  } else if (kind == Schedule::Reverse) {
    for (int w = nw - 1; w >= 0; --w)
      if (prepare(blk, w))
        return w;
  } else {
    if (blk.currentWarp >= 0 && blk.rng.coin() && prepare(blk, blk.currentWarp))
      return blk.currentWarp;
    const int start = int(blk.rng.below(unsigned(nw)));
    for (int i = 0; i < nw; ++i) {
      const int w = (start + i) % nw;
      if (prepare(blk, w))
        return w;
    }
  }
  return -1;
}

} // namespace detail

/// Runs `body` as the `threads` threads of block `idx` under emu::schedule;
/// false when a check fails or the block deadlocks (emu::lastError says
/// which).
inline bool runBlock(int threads, uint3 idx, const std::function<void()> &body,
                     uint3 grid = {1, 1, 1}) {
  // One Block, reused: its exchange slots are large, its vectors keep
  // their capacity.
  static Block *const storage = new Block;
  Block &blk = *storage;
  blk.threads.assign(size_t(threads), Thread{});
  blk.warps.assign(size_t((threads + 31) / 32), Warp{});
  blk.current = 0;
  blk.currentWarp = -1;
  blk.error.clear();
  blk.idx = idx;
  blk.dim = make_uint3(unsigned(threads), 1, 1);
  blk.grid = grid;
  blk.body = &body;
  const Schedule sched = schedule;
  blk.rng = Rng(mix(mix(sched.seed, idx.x), idx.y * 65536ull + idx.z));
  block = &blk;
  while (fibers.size() < size_t(threads)) {
    fibers.push_back(new Fiber); // never freed: a thread may run on it at exit
    fibers.back()->stack.resize(kStackBytes);
  }
  for (int i = 0; i < threads; ++i) {
    blk.threads[size_t(i)].idx = make_uint3(unsigned(i), 0, 0);
    blk.warps[size_t(i / 32)].live |= 1u << (i % 32);
  }
  for (Warp &w : blk.warps)
    w.run = w.live;
  for (int i = 0; i < hookCount; ++i)
    if (hooks[i].blockStart)
      hooks[i].blockStart();
  while (blk.error.empty()) {
    const int w = detail::pickWarp(blk, sched.kind);
    if (!blk.error.empty())
      break;
    if (w >= 0) {
      blk.currentWarp = w;
      detail::runWarp(blk, w, sched.kind);
      continue;
    }
    // No warp can move: every live thread at __syncthreads, or stuck.
    bool any = false, allAtBarrier = true;
    for (const Warp &warp : blk.warps) {
      any |= warp.live != 0;
      allAtBarrier &= warp.bar == warp.live;
    }
    if (!any)
      break;
    if (!allAtBarrier) {
      report(detail::diagnose(blk));
      break;
    }
    const std::string sites = detail::barrierSites(blk);
    if (!sites.empty()) {
      report(sites);
      break;
    }
    for (Warp &warp : blk.warps) {
      warp.run = warp.live;
      warp.bar = 0;
    }
  }
  if (blk.error.empty())
    for (int i = 0; i < hookCount; ++i)
      if (hooks[i].blockEnd)
        hooks[i].blockEnd();
  const bool ok = blk.error.empty();
  if (!ok) {
    lastError = blk.error;
    std::fprintf(stderr, "emu (%s schedule): %s\n", sched.name().c_str(), blk.error.c_str());
  }
  block = nullptr;
  return ok;
}

//===-- Shared memory -----------------------------------------------------===//

/// Static shared memory of the block being emulated (kernels bind their
/// storage struct to it); 0xff (NaN floats) at the start of every block.
alignas(16) inline unsigned char sharedBytes[64 * 1024];
/// The largest storage bound to it so far: only these bytes need refilling
/// between blocks (-1: all, before the first).
inline long long sharedHighWater = -1;
template <class S> S &shared() {
  static_assert(sizeof(S) <= sizeof(sharedBytes), "emulated shared memory");
  if ((long long)sizeof(S) > sharedHighWater)
    sharedHighWater = (long long)sizeof(S);
  return *reinterpret_cast<S *>(sharedBytes);
}
inline void refillShared() {
  std::memset(sharedBytes, 0xff,
              sharedHighWater < 0 ? sizeof sharedBytes : size_t(sharedHighWater));
  if (sharedHighWater < 0)
    sharedHighWater = 0;
}

/// The emulated shared memory: sharedBytes, and regions an emulation layer
/// adds (tensor_core_emulator.h: the dynamic shared memory, of the size the
/// launch asked for).
struct Region {
  const unsigned char *base;
  size_t bytes;
};
inline Region sharedRegions[4] = {{sharedBytes, sizeof sharedBytes}};
inline int sharedRegionCount = 1;

/// Whether [p, p + bytes) lies inside one shared-memory region.
inline bool isShared(const void *p, size_t bytes) {
  const auto *c = static_cast<const unsigned char *>(p);
  for (int i = 0; i < sharedRegionCount; ++i) {
    const Region &r = sharedRegions[i];
    if (c >= r.base && c <= r.base + r.bytes && size_t(r.base + r.bytes - c) >= bytes)
      return true;
  }
  return false;
}
/// Whether any byte of [p, p + bytes) is shared memory.
inline bool touchesShared(const void *p, size_t bytes) {
  const auto *c = static_cast<const unsigned char *>(p);
  for (int i = 0; i < sharedRegionCount; ++i) {
    const Region &r = sharedRegions[i];
    if (c < r.base + r.bytes && c + bytes > r.base)
      return true;
  }
  return false;
}
inline std::string addr(const void *p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}
/// Fails the block unless `p` is `align`-byte aligned (`what` names the
/// access: "ldmatrix row address").
inline void requireAligned(const void *p, size_t align, const char *what) {
  if (reinterpret_cast<std::uintptr_t>(p) % align != 0)
    fail(whereAmI() + ": " + what + " " + addr(p) + " is not " + std::to_string(align) +
         "-byte aligned");
}
/// Fails the block unless [p, p + bytes) is inside the emulated shared
/// memory.
inline void requireShared(const void *p, size_t bytes, const char *what) {
  if (!isShared(p, bytes))
    fail(whereAmI() + ": " + what + " " + addr(p) + " (" + std::to_string(bytes) +
         " bytes) is not inside shared memory");
}

//===-- Device memory -----------------------------------------------------===//

/// Memory a test hands the kernels as global memory; while any is
/// registered, cp.async sources must lie inside one.
struct GlobalMemory {
  virtual bool contains(const void *p, size_t bytes) const = 0;
  virtual ~GlobalMemory() = default;
};
inline std::vector<const GlobalMemory *> globalMemory;
inline void registerGlobal(const GlobalMemory *m) { globalMemory.push_back(m); }
inline void unregisterGlobal(const GlobalMemory *m) {
  globalMemory.erase(std::remove(globalMemory.begin(), globalMemory.end(), m), globalMemory.end());
}
inline bool isGlobal(const void *p, size_t bytes) {
  for (const GlobalMemory *m : globalMemory)
    if (m->contains(p, bytes))
      return true;
  return false;
}

//===-- Launches ----------------------------------------------------------===//

/// Runs `body` over a gx x gy grid, one block at a time in the schedule's
/// block order (index: x fastest; reverse; random: a permutation from the
/// seed), shared memory refilled with 0xff and `eachBlock` (when given:
/// more per-block state to reset) run before each; false when a block
/// fails (emu::lastError says why).
inline bool launch(long long gx, long long gy, int threads, const std::function<void()> &body,
                   const std::function<void()> &eachBlock = nullptr) {
  lastError.clear();
  const long long n = gx * gy;
  std::vector<long long> order(size_t(n > 0 ? n : 0));
  for (long long i = 0; i < n; ++i)
    order[size_t(i)] = i;
  const Schedule sched = schedule;
  if (sched.kind == Schedule::Reverse) {
    std::reverse(order.begin(), order.end());
  } else if (sched.kind == Schedule::Random) {
    Rng rng(mix(mix(sched.seed, std::uint64_t(gx)), std::uint64_t(gy) << 16 | unsigned(threads)));
    for (size_t i = order.size(); i > 1; --i)
      std::swap(order[i - 1], order[rng.below(unsigned(i))]);
  }
  for (long long b : order) {
    refillShared();
    if (eachBlock)
      eachBlock();
    const uint3 idx = make_uint3(unsigned(b % gx), unsigned(b / gx), 0);
    if (!runBlock(threads, idx, body, make_uint3(unsigned(gx), unsigned(gy), 1)))
      return false;
  }
  return true;
}

} // namespace emu

//===-- The device builtins -----------------------------------------------===//

inline void __syncthreads(ATTNC_EMU_SITE) { emu::syncThreads(ATTNC_EMU_HERE); }
inline void __syncwarp(unsigned mask = 0xffffffffu, ATTNC_EMU_SITE) {
  emu::collective(emu::Op::SyncWarp, mask, nullptr, 0, ATTNC_EMU_HERE);
}

namespace emu {
/// A shuffle: lane src of the caller's width-lane segment (src already
/// computed by the mode), the caller's own value when src is outside it.
template <class V> V shuffle(Op op, unsigned mask, V v, int src, int width, Site site) {
  const auto &slots = collective(op, mask, &v, sizeof v, site, width);
  return laneValue<V>(slots, src, mask, op, site);
}
} // namespace emu

template <class V>
inline V __shfl_sync(unsigned mask, V v, int src, int width = 32, ATTNC_EMU_SITE) {
  const int l = emu::lane(), base = l & ~(width - 1);
  return emu::shuffle(emu::Op::ShflIdx, mask, v, base + (src & (width - 1)), width, ATTNC_EMU_HERE);
}
template <class V>
inline V __shfl_xor_sync(unsigned mask, V v, int x, int width = 32, ATTNC_EMU_SITE) {
  const int l = emu::lane(), base = l & ~(width - 1), s = l ^ x;
  return emu::shuffle(emu::Op::ShflXor, mask, v, (s & ~(width - 1)) == base ? s : l, width,
                      ATTNC_EMU_HERE);
}
template <class V>
inline V __shfl_up_sync(unsigned mask, V v, unsigned d, int width = 32, ATTNC_EMU_SITE) {
  const int l = emu::lane(), base = l & ~(width - 1), s = l - int(d);
  return emu::shuffle(emu::Op::ShflUp, mask, v, s >= base ? s : l, width, ATTNC_EMU_HERE);
}
template <class V>
inline V __shfl_down_sync(unsigned mask, V v, unsigned d, int width = 32, ATTNC_EMU_SITE) {
  const int l = emu::lane(), base = l & ~(width - 1), s = l + int(d);
  return emu::shuffle(emu::Op::ShflDown, mask, v, s < base + width ? s : l, width, ATTNC_EMU_HERE);
}
namespace emu {
/// The lanes of `mask` whose published word satisfies `f`.
template <class F> unsigned laneBits(Op op, unsigned mask, std::uint64_t word, Site site, F f) {
  const auto &slots = collective(op, mask, &word, sizeof word, site);
  unsigned r = 0;
  for (unsigned m = mask; m; m &= m - 1) {
    const int i = __builtin_ctz(m);
    if (f(slots[i][0]))
      r |= 1u << i;
  }
  return r;
}
} // namespace emu
inline unsigned __ballot_sync(unsigned mask, int pred, ATTNC_EMU_SITE) {
  return emu::laneBits(emu::Op::Ballot, mask, pred != 0, ATTNC_EMU_HERE,
                       [](std::uint64_t w) { return w != 0; });
}
inline int __any_sync(unsigned mask, int pred, ATTNC_EMU_SITE) {
  return emu::laneBits(emu::Op::Any, mask, pred != 0, ATTNC_EMU_HERE,
                       [](std::uint64_t w) { return w != 0; }) != 0;
}
inline int __all_sync(unsigned mask, int pred, ATTNC_EMU_SITE) {
  return emu::laneBits(emu::Op::All, mask, pred != 0, ATTNC_EMU_HERE,
                       [](std::uint64_t w) { return w != 0; }) == mask;
}
template <class V> inline unsigned __match_any_sync(unsigned mask, V v, ATTNC_EMU_SITE) {
  static_assert(sizeof(V) <= 8 && std::is_trivially_copyable_v<V>);
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  return emu::laneBits(emu::Op::MatchAny, mask, bits, ATTNC_EMU_HERE,
                       [bits](std::uint64_t w) { return w == bits; });
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
namespace emu {
template <class V> V fromBits(std::uint64_t bits) {
  V v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}
} // namespace emu
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
