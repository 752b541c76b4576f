//===- tensor_core_emulator.h - ldmatrix, mma and cp.async on the host -*- C++ -*-===//
//
// What the CUDA kernel headers need, beyond simt_emulator.h, to take their
// tensor-core path and their cp.async pipelines on the host:
//
//   - ATTNC_EMULATE_MMA: fp16/bf16 GEMMs on ldmatrix and mma.sync
//     m16n8k16, and Volta's mma.sync m8n8k4 (ATTNC_EMULATE_ARCH=700),
//     written from the PTX ISA's fragment tables rather than from the
//     kernels' use of them (mma.cuh declares them);
//   - ATTNC_EMULATE_ASYNC_COPY: cp.async.cg (16 bytes, zero-fill),
//     commit_group and wait_group (copy.cuh declares them): a copy may
//     land any time between its issue and the wait that covers its group;
//     the schedule decides when (index and the random schedule's odd
//     draws: at the wait, as late as allowed; reverse and the even draws:
//     at the issue, as early as allowed);
//   - attnc::attncSmem, the dynamic shared memory (common.cuh declares
//     it), 0xff before every block; emu::launchSmem launches with the size
//     a kernel asks for, and the 4 KiB after it must stay untouched.
//
// Checks (each fails the launch, simt_emulator.h): every ldmatrix row
// address is 16-byte aligned and its 16 bytes lie in shared memory; a
// cp.async destination is 16-byte aligned shared memory and its source
// 16-byte aligned global memory (not shared; inside a registered device
// buffer when any is registered, e.g. test/unit/support/CudaEmulator.h's); no
// thread exits with copies in flight; no write past the launch's dynamic
// shared memory.
//
// Include after simt_emulator.h and before the kernel headers, in one
// translation unit per program (it defines functions the headers only
// declare).
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_CUDA_TENSOR_CORE_EMULATOR_H
#define ATTNC_CUDA_TENSOR_CORE_EMULATOR_H

#include "attnc/simt_emulator.h"

#include <vector>

namespace attnc {
/// The emulated block's dynamic shared memory (common.cuh declares it):
/// the most any arch allows (227 KiB, sm_90).
alignas(16) inline unsigned char attncSmem[232448];
} // namespace attnc

// fp16 and bf16 take the tensor-core path, with ldmatrix and mma below;
// copies are asynchronous, as with cp.async (sm_80+). With
// ATTNC_EMULATE_ARCH=700 the kernels take Volta's path instead: fp16 on
// mma.m8n8k4, bf16 on SIMT, synchronous copies.
#define ATTNC_EMULATE_MMA 1
#if !defined(ATTNC_EMULATE_ARCH) || ATTNC_EMULATE_ARCH >= 800
#define ATTNC_EMULATE_ASYNC_COPY 1
#endif
#include "attnc/common.cuh"
#include "attnc/copy.cuh"
#include "attnc/mma.cuh"

namespace emu {

//===-- Dynamic shared memory ---------------------------------------------===//

/// The dynamic shared memory of the launch being run, in bytes.
inline size_t dynamicSmemBytes = sizeof attnc::attncSmem;

/// emu::launch with `smemBytes` of dynamic shared memory.
inline bool launchSmem(long long gx, long long gy, int threads, size_t smemBytes,
                       const std::function<void()> &body) {
  if (smemBytes > sizeof attnc::attncSmem) {
    lastError = "launch asks for " + std::to_string(smemBytes) +
                " bytes of dynamic shared memory, more than any GPU has";
    std::fprintf(stderr, "emu: %s\n", lastError.c_str());
    return false;
  }
  const size_t saved = dynamicSmemBytes;
  dynamicSmemBytes = smemBytes;
  const bool ok = launch(gx, gy, threads, body);
  dynamicSmemBytes = saved;
  return ok;
}

//===-- cp.async state ----------------------------------------------------===//

/// cp.async copies of one thread not completed yet, and the number of
/// commits so far (a copy belongs to group `committed` at issue).
struct AsyncCopies {
  struct Copy {
    void *dst;
    const void *src;
    bool valid;
    int group;
  };
  std::vector<Copy> pending;
  int committed = 0;
};
inline std::vector<AsyncCopies> asyncCopies; ///< [thread], reset for every block
inline AsyncCopies &curCopies() { return asyncCopies[size_t(block->current)]; }

inline void land(const AsyncCopies::Copy &c) {
  if (c.valid)
    std::memcpy(c.dst, c.src, 16);
  else
    std::memset(c.dst, 0, 16);
}

/// Whether the copy being issued lands now (else at its wait).
inline bool landAtIssue() {
  switch (schedule.kind) {
  case Schedule::Index:
    return false;
  case Schedule::Reverse:
    return true;
  case Schedule::Random:
    return block->rng.coin();
  }
  return false;
}

namespace tc {

inline int dynamicRegion = -1; ///< its index in sharedRegions
/// Bytes after the launch's dynamic shared memory that must stay 0xff.
constexpr size_t kGuardBytes = 4096;
/// Bytes of attncSmem that may differ from 0xff (all, before the first
/// block).
inline size_t dirtyBytes = sizeof attnc::attncSmem;

inline size_t guardEnd() {
  return std::min(sizeof attnc::attncSmem, dynamicSmemBytes + kGuardBytes);
}
inline void blockStart() {
  // The launch's bytes and the guard after them; anything a previous launch
  // with more shared memory left further on, once.
  std::memset(attnc::attncSmem, 0xff, std::max(dirtyBytes, guardEnd()));
  dirtyBytes = guardEnd();
  std::vector<AsyncCopies> &copies = asyncCopies;
  copies.resize(block->threads.size());
  for (AsyncCopies &c : copies) {
    c.pending.clear();
    c.committed = 0;
  }
  if (dynamicRegion < 0)
    dynamicRegion = sharedRegionCount++;
  sharedRegions[dynamicRegion] = {attnc::attncSmem, dynamicSmemBytes};
}
inline void threadExit() {
  const size_t n = curCopies().pending.size();
  if (n > 0)
    fail(whereAmI() + " exited with " + std::to_string(n) +
         " cp.async copies in flight (no wait_group covers them)");
}
inline void blockEnd() {
  const size_t end = guardEnd();
  size_t i = dynamicSmemBytes;
  for (; i < end && i % 8 != 0; ++i)
    if (attnc::attncSmem[i] != 0xff)
      break;
  if (i % 8 == 0)
    for (std::uint64_t w; i + 8 <= end; i += 8) {
      std::memcpy(&w, attnc::attncSmem + i, 8);
      if (w != ~0ull)
        break;
    }
  for (; i < end; ++i)
    if (attnc::attncSmem[i] != 0xff) {
      report(blockName() + " wrote dynamic shared memory at byte " + std::to_string(i) +
             ", past the " + std::to_string(dynamicSmemBytes) + " bytes of the launch");
      return;
    }
}
inline const bool hooked = addHooks({blockStart, threadExit, blockEnd});

/// mma.sync operands of one lane.
struct MmaRegs {
  unsigned a[4], b[2];
};

} // namespace tc
} // namespace emu

namespace attnc {

#if defined(ATTNC_EMULATE_ASYNC_COPY)
// cp.async.cg (16 bytes, zero-fill when src-size is 0), commit_group and
// wait_group.
void copy16(void *smem, const void *gmem, bool valid) {
  emu::requireAligned(smem, 16, "cp.async shared destination");
  emu::requireShared(smem, 16, "cp.async shared destination");
  emu::requireAligned(gmem, 16, "cp.async global source");
  if (emu::touchesShared(gmem, 16))
    emu::fail(emu::whereAmI() + ": cp.async global source " + emu::addr(gmem) +
              " is shared memory");
  if (valid && !emu::globalMemory.empty() && !emu::isGlobal(gmem, 16))
    emu::fail(emu::whereAmI() + ": cp.async global source " + emu::addr(gmem) +
              " (16 bytes) is not inside a device buffer");
  emu::AsyncCopies &t = emu::curCopies();
  const emu::AsyncCopies::Copy c{smem, gmem, valid, t.committed};
  if (emu::landAtIssue())
    emu::land(c);
  else
    t.pending.push_back(c);
}
void cpAsyncCommit() { ++emu::curCopies().committed; }
void cpAsyncWaitGroups(int n) {
  emu::AsyncCopies &t = emu::curCopies();
  size_t kept = 0;
  for (const emu::AsyncCopies::Copy &c : t.pending) {
    if (c.group < t.committed - n)
      emu::land(c);
    else
      t.pending[kept++] = c;
  }
  t.pending.resize(kept);
}
#endif // ATTNC_EMULATE_ASYNC_COPY

// ldmatrix and mma.sync.m16n8k16 as the PTX ISA defines them. g = lane / 4
// and t = lane % 4 throughout. Not on Volta, which has neither: a Volta
// path that used them would not link.
#if !defined(ATTNC_EMULATE_ARCH) || ATTNC_EMULATE_ARCH >= 750

/// ldmatrix.x N: lanes 8i .. 8i+7 give the row addresses of 8x8 matrix i
/// (8 contiguous b16 each, 16-byte aligned, in shared memory); every lane
/// gets, per matrix, elements (g, 2t), (g, 2t + 1), or with .trans (2t, g),
/// (2t + 1, g), the first in the low half.
template <int N, bool TRANS> void emuLdmatrix(unsigned *r, const void *p) {
  const int l = threadIdx.x % 32, g = l / 4, t = l % 4;
  if (l < 8 * N) {
    emu::requireAligned(p, 16, "ldmatrix row address");
    emu::requireShared(p, 16, "ldmatrix row address");
  }
  const auto &slots = emu::collective(emu::Op::Ldmatrix, 0xffffffffu, &p, sizeof p,
                                      emu::Site{__FILE__, __LINE__}, 2 * N + TRANS);
  for (int i = 0; i < N; ++i) {
    unsigned e[2];
    for (int x = 0; x < 2; ++x) {
      const int row = TRANS ? 2 * t + x : g, col = TRANS ? g : 2 * t + x;
      const void *rowAddr;
      std::memcpy(&rowAddr, slots[8 * i + row], sizeof rowAddr);
      e[x] = static_cast<const unsigned short *>(rowAddr)[col];
    }
    r[i] = e[0] | e[1] << 16;
  }
}
void ldsmX4(unsigned (&r)[4], const void *p) { emuLdmatrix<4, false>(r, p); }
void ldsmX4Trans(unsigned (&r)[4], const void *p) { emuLdmatrix<4, true>(r, p); }
void ldsmX2(unsigned (&r)[2], const void *p) { emuLdmatrix<2, false>(r, p); }
void ldsmX2Trans(unsigned (&r)[2], const void *p) { emuLdmatrix<2, true>(r, p); }

/// mma.sync.aligned.m16n8k16.row.col.f32.{f16,bf16}: A (16 x 16) register
/// j of lane (g, t) holds row g + 8 (j % 2), columns 2t + 8 (j / 2) + {0, 1};
/// B (16 x 8) register j holds rows 2t + 8j + {0, 1} of column g; C element
/// j is row g + 8 (j / 2), column 2t + j % 2.
template <class T> void mma16816(float (&c)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  const int l = threadIdx.x % 32, g = l / 4, t = l % 4;
  const emu::tc::MmaRegs mine{{a[0], a[1], a[2], a[3]}, {b0, b1}};
  const auto &slots =
      emu::collective(emu::Op::Mma, 0xffffffffu, &mine, sizeof mine, emu::Site{__FILE__, __LINE__},
                      IsSame<T, __half>::value ? 1 : 2);
  emu::tc::MmaRegs regs[32];
  for (int i = 0; i < 32; ++i)
    std::memcpy(&regs[i], slots[i], sizeof regs[i]);
  auto half = [](unsigned reg, int hi) {
    const unsigned short bits = static_cast<unsigned short>(hi ? reg >> 16 : reg);
    return Elem<T>::toFloat(bitCast<T>(bits));
  };
  auto A = [&](int row, int col) {
    const int lane = 4 * (row % 8) + (col % 8) / 2, reg = (row / 8) + 2 * (col / 8);
    return half(regs[lane].a[reg], col % 2);
  };
  auto B = [&](int k, int n) { return half(regs[4 * n + (k % 8) / 2].b[k / 8], k % 2); };
  for (int j = 0; j < 4; ++j) {
    const int row = g + 8 * (j / 2), col = 2 * t + j % 2;
    float sum = 0.f;
    for (int k = 0; k < 16; ++k)
      sum += A(row, k) * B(k, col);
    c[j] += sum;
  }
}

#endif // ATTNC_EMULATE_ARCH >= 750

/// mma.sync.aligned.m8n8k4.row.col.f32.f16.f16.f32, Volta's tensor-core
/// instruction, modelled from the PTX ISA's tables (PTX ISA 9.0, section
/// 9.7.14.5.1, "Matrix Fragments for mma.m8n8k4 with .f16 floating point
/// type"), not from any kernel's index arithmetic. A warp computes four
/// independent 8 x 8 x 4 products: computation q (0..3) is held by lanes
/// 4q..4q+3 (the low group) and 16+4q..16+4q+3 (the high group). For lane
/// l, with hi = 4 when l >= 16 (else 0):
///   A (row-major, 8 x 4): a_i (i = 0..3; a0, a1 in register 0, low half
///     first) is A[l % 4 + hi][i];
///   B (column-major, 4 x 8): b_i is B[i][l % 4 + hi];
///   C, D (f32): c_i (i = 0..7) is C[X + hi][(i & 4) + (l & 2) + (i & 1)]
///     with X = (l & 1) + (i & 2).
/// D = A·B + C, summed here in k order in fp32.
inline void mma884(float (&c)[8], const unsigned (&a)[2], const unsigned (&b)[2]) {
  const int l = threadIdx.x % 32;
  const emu::tc::MmaRegs mine{{a[0], a[1], 0, 0}, {b[0], b[1]}};
  const auto &slots = emu::collective(emu::Op::Mma, 0xffffffffu, &mine, sizeof mine,
                                      emu::Site{__FILE__, __LINE__}, 3);
  emu::tc::MmaRegs regs[32];
  for (int i = 0; i < 32; ++i)
    std::memcpy(&regs[i], slots[i], sizeof regs[i]);
  // Element i (0..3) of a lane's two f16x2 registers, the low half first.
  auto element = [](const unsigned *r, int i) {
    const unsigned reg = r[i / 2];
    return __half2float(bitCast<__half>(static_cast<unsigned short>(i % 2 ? reg >> 16 : reg)));
  };
  const int q = (l % 16) / 4;
  // The lane of computation q holding row (A) or column (B) x of 0..7.
  auto holder = [q](int x) { return (x < 4 ? 0 : 16) + 4 * q + x % 4; };
  const int hi = l >= 16 ? 4 : 0;
  for (int i = 0; i < 8; ++i) {
    const int row = (l & 1) + (i & 2) + hi, col = (i & 4) + (l & 2) + (i & 1);
    float sum = 0.f;
    for (int k = 0; k < 4; ++k)
      sum += element(regs[holder(row)].a, k) * element(regs[holder(col)].b, k);
    c[i] += sum;
  }
}

} // namespace attnc

#endif // ATTNC_CUDA_TENSOR_CORE_EMULATOR_H
