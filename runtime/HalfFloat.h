//===- HalfFloat.h - fp16 and bf16 from and to fp32 on the host -*- C++ -*-===//
//
// The runtime's 16-bit conversions: round to nearest even, overflow to
// Inf, subnormals kept, NaN stays NaN (what cuda_fp16.h's __float2half_rn
// and cuda_bf16.h's __float2bfloat16_rn do; test/unit/runtime/train/HalfFloatTest.cpp
// checks it). CudaAttention converts kernel operands with them; the
// emulated CUDA step rounds GEMM inputs with them.
//
//===----------------------------------------------------------------------===//
#ifndef ATTNC_RUNTIME_HALFFLOAT_H
#define ATTNC_RUNTIME_HALFFLOAT_H

#include <cstdint>
#include <cstring>

namespace attnc::half {

/// IEEE binary16 from float, round to nearest even (overflow to inf).
inline uint16_t toHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000, exp = (x >> 23) & 0xff, man = x & 0x7fffff;
  if (exp == 0xff) // inf or NaN
    return uint16_t(sign | 0x7c00 | (man ? 0x200 : 0));
  int e = int(exp) - 127 + 15;
  if (e >= 31)
    return uint16_t(sign | 0x7c00);
  if (e <= 0) { // subnormal or zero
    if (e < -10)
      return uint16_t(sign);
    man |= 0x800000;
    uint32_t shift = uint32_t(14 - e);
    uint32_t h = man >> shift, rem = man & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1)))
      ++h;
    return uint16_t(sign | h);
  }
  uint32_t h = (uint32_t(e) << 10) | (man >> 13), rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1)))
    ++h; // may carry into the exponent, which is right
  return uint16_t(sign | h);
}

inline float fromHalf(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, x;
  if (exp == 0x1f)
    x = sign | 0x7f800000 | (man << 13);
  else if (exp == 0) {
    if (!man)
      x = sign;
    else { // subnormal: normalise
      int e = -1;
      do {
        ++e;
        man <<= 1;
      } while (!(man & 0x400));
      x = sign | (uint32_t(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
    }
  } else
    x = sign | ((exp - 15 + 127) << 23) | (man << 13);
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

inline uint16_t toBf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffff) > 0x7f800000) // NaN stays NaN
    return uint16_t((x >> 16) | 0x40);
  x += 0x7fff + ((x >> 16) & 1); // round to nearest even
  return uint16_t(x >> 16);
}

inline float fromBf16(uint16_t b) {
  uint32_t x = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

} // namespace attnc::half

#endif // ATTNC_RUNTIME_HALFFLOAT_H
