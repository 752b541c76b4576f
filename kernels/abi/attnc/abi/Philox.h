//===- Philox.h - Counter-based random numbers for kernels and runtime -*- C++ -*-===//
//
// Philox4x32-10 (Salmon et al., SC'11): a value depends only on (key,
// counter), never on what was drawn before or on which thread draws it, so
// the forward, the backward's recomputation, the CPU and the GPU all draw
// the same numbers. No host headers and host/device functions, so the CUDA
// kernel headers (NVRTC), the CPU kernel headers and the runtime share it.
// runtime/PhiloxDraws.h builds the LSH rotations and the residual dropout masks
// on it; attentionKeep() is the attention dropout mask of the kernels.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_ABI_PHILOX_H
#define ATTNC_ABI_PHILOX_H

#include "attnc/abi/Qualifiers.h"

namespace attnc {
namespace philox {

struct Counter {
  unsigned int w[4];
};

/// Philox4x32 with 10 rounds; key = (seed low, seed high).
ATTNC_HOST_DEVICE inline Counter philox4x32(Counter ctr, unsigned long long seed) {
  unsigned int k0 = (unsigned int)seed, k1 = (unsigned int)(seed >> 32);
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
  // Rolled on the GPU: the attention kernels call this per score inside
  // fully unrolled tile loops, and unrolled rounds interleaved across them
  // run out of registers (spills).
#pragma unroll 1
#endif
  for (int round = 0; round < 10; ++round) {
    unsigned long long p0 = 0xD2511F53ull * ctr.w[0];
    unsigned long long p1 = 0xCD9E8D57ull * ctr.w[2];
    Counter next = {{(unsigned int)(p1 >> 32) ^ ctr.w[1] ^ k0, (unsigned int)p1,
                     (unsigned int)(p0 >> 32) ^ ctr.w[3] ^ k1, (unsigned int)p0}};
    ctr = next;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return ctr;
}

/// Word k (0..3) of a counter, chosen by selects: an indexed read with a
/// run-time k would put the counter in local memory (a stack frame) on
/// the GPU.
ATTNC_HOST_DEVICE inline unsigned int word(const Counter &c, unsigned int k) {
  const unsigned int lo = (k & 1) ? c.w[1] : c.w[0], hi = (k & 1) ? c.w[3] : c.w[2];
  return (k & 2) ? hi : lo;
}

/// Attention dropout: whether score (query i, key j) of head row `bh`
/// (b * H + h) survives, at `offset` (what the runtime derives from the
/// training step and the layer), with drop probability p. Counter =
/// (j / 4, i, bh, offset), key = seed ^ "attndrop"; output word j % 4 times
/// 2^-32 against p.
ATTNC_HOST_DEVICE inline bool attentionKeep(unsigned long long seed, unsigned int offset, int bh,
                                            int i, int j, float p) {
  Counter c = {{(unsigned int)j >> 2, (unsigned int)i, (unsigned int)bh, offset}};
  Counter r = philox4x32(c, seed ^ 0x6174746e64726f70ull);
  return float(word(r, (unsigned int)j & 3u)) * 2.3283064365386963e-10f >= p;
}

/// The attention dropout factor of (row, i, j): 0 where attentionKeep
/// drops it, else 1 / (1 − p), the rescaling of the kept probabilities.
ATTNC_HOST_DEVICE inline float attentionDropoutScale(unsigned long long seed, unsigned int offset,
                                                     int row, int i, int j, float p) {
  return attentionKeep(seed, offset, row, i, j, p) ? 1.0f / (1.0f - p) : 0.0f;
}

/// Residual dropout: a uniform [0, 1) value per element from (seed, stream,
/// step, index): counter = (index / 4, step, stream, 0x64726f70 "drop"),
/// output word index % 4, times 2^-32. The tag word keeps these counters
/// apart from the LSH rotations' (whose fourth word is 0).
ATTNC_HOST_DEVICE inline float dropoutUniform(unsigned long long seed, unsigned int stream,
                                              unsigned int step, unsigned long long index) {
  Counter c = {{(unsigned int)(index >> 2), step, stream, 0x64726f70u}};
  Counter r = philox4x32(c, seed);
  return float(double(word(r, (unsigned int)(index & 3))) / 4294967296.0);
}

} // namespace philox
} // namespace attnc

#endif // ATTNC_ABI_PHILOX_H
