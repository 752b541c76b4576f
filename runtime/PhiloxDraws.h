//===- PhiloxDraws.h - Counter-based random numbers (Philox4x32-10) -*- C++ -*- ===//
//
// The generator behind everything random that must replay exactly: LSH
// rotations (drawn the same on every target and on recomputation), and
// dropout masks (the same mask on the forward and on recomputation). A value depends only on (seed,
// counter), never on how many were drawn before or on which thread draws it (Salmon et al.,
// "Parallel random numbers: as easy as 1, 2, 3", SC'11).
//
// lshRotation(seed, stream, index): N(0, 1) sample number `index` of
// rotations[rounds, Dh, buckets/2] (row-major index), stream = layer index
// (0 for a single attention op). Philox4x32-10 with key = (seed low, seed
// high), counter = (index low, index high, stream, 0); Box–Muller on the
// first two outputs in double, rounded to fp32. Documented in
// docs/kernels.md so outside implementations can reproduce it.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_PHILOXDRAWS_H
#define ATTNC_RUNTIME_PHILOXDRAWS_H

#include "attnc/abi/Philox.h"

#include <array>
#include <cmath>
#include <cstdint>

namespace attnc::philox {

using Block = std::array<uint32_t, 4>;

/// Philox4x32 with 10 rounds (kernels/abi/attnc/abi/Philox.h, shared with the kernels).
inline Block philox4x32(Block ctr, uint64_t seed) {
  Counter r = philox4x32(Counter{{ctr[0], ctr[1], ctr[2], ctr[3]}}, seed);
  return {r.w[0], r.w[1], r.w[2], r.w[3]};
}

/// A standard normal sample from (seed, stream, index).
inline float normal(uint64_t seed, uint32_t stream, uint64_t index) {
  Block r = philox4x32({uint32_t(index), uint32_t(index >> 32), stream, 0u}, seed);
  double u1 = (double(r[0]) + 1.0) / 4294967296.0; // (0, 1]: log is finite
  double u2 = double(r[1]) / 4294967296.0;         // [0, 1)
  return float(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2));
}

// dropoutUniform (residual dropout) is in kernels/abi/attnc/abi/Philox.h, which the
// generated model step shares.

/// Rotations [rounds, headDim, buckets/2] of LSH attention, row-major.
template <class Vec> void lshRotations(uint64_t seed, uint32_t stream, Vec &out) {
  for (uint64_t i = 0; i < out.size(); ++i)
    out[i] = normal(seed, stream, i);
}

} // namespace attnc::philox

#endif // ATTNC_RUNTIME_PHILOXDRAWS_H
